// Quotas and streaming turns (#16 item 1 beside #15): every delta grows its session owner's
// bytes, so a client that streams without end is stopped by QUOTA_BYTES like any other write.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { newSession, removeDir, startServer } from './helpers.mjs';

describe('Quotas and streaming turns', () => {
  test('[D-streaming-6] a stream that never ends stops at QUOTA_BYTES as any other growth does', async () => {
    const s = await startServer({ env: { QUOTA_BYTES: '16kb' } });
    try {
      const alice = s.as('alice');
      const base = '/api/v1/chat-sessions';
      const id = (await alice.post(base, newSession())).body.data._id;
      const turn = await alice.post(`${base}/${id}/turns`, { role: 'assistant', content: 'a', status: 'streaming' });
      assert.equal(turn.status, 201, turn.text);
      const deltas = `${base}/${id}/turns/${turn.body.data._id}/deltas`;
      let accepted = 0;
      let refused;
      for (let i = 0; i < 40 && refused === undefined; i++) {
        const r = await alice.post(deltas, { text: 'x'.repeat(1000) });
        if (r.status === 200) accepted++;
        else refused = { status: r.status, body: r.body };
      }
      assert.deepEqual(refused, { status: 403, body: { success: false, message: 'Quota exceeded: bytes (at most 16384 per user)' } });
      assert.ok(accepted >= 12 && accepted <= 16, `${accepted} deltas of 1000 bytes fit in 16 KiB`);
      const stored = (await alice.get(`${base}/${id}/turns`)).body.data[0];
      assert.equal(stored.content, `a${'x'.repeat(1000 * accepted)}`, 'the refused delta changed nothing');
      // another user streams on
      const bob = s.as('bob');
      const own = (await bob.post(base, newSession())).body.data._id;
      const t = (await bob.post(`${base}/${own}/turns`, { role: 'assistant', content: 'b', status: 'streaming' })).body.data._id;
      assert.equal((await bob.post(`${base}/${own}/turns/${t}/deltas`, { text: 'y'.repeat(1000) })).status, 200);
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });
});
