// Recovery, proven on the real binary: a failed commit is never acknowledged and changes
// nothing; one server per data directory. (The journal's own checks: sqlite/journal-reader.test.mjs.)
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { dump } from './api-kit.mjs';
import { failingWrite, newSession, removeDir, startServer, STORE, tempDir } from './helpers.mjs';

describe('Failed writes (fault injection)', () => {
  const N = 8;
  /** A fixed sequence of writes; returns the model of what was acknowledged. */
  async function run(u) {
    const acked = new Map();
    const results = [];
    const note = (r) => results.push(r.status);
    let r = await u.post('/api/v1/chat-sessions', newSession({ name: 'first' }));
    note(r);
    if (r.status === 201) acked.set(r.body.data._id, { name: 'first', turns: [], archived: false });
    const first = r.body.data?._id;
    r = await u.post('/api/v1/chat-sessions', newSession({ name: 'second' }));
    note(r);
    if (r.status === 201) acked.set(r.body.data._id, { name: 'second', turns: [], archived: false });
    const second = r.body.data?._id;
    const ops = [
      [first, () => u.put(`/api/v1/chat-sessions/${first}`, { name: 'first-renamed' }), (m) => (m.name = 'first-renamed')],
      [first, () => u.post(`/api/v1/chat-sessions/${first}/turns`, { role: 'user', content: 'q' }), (m) => m.turns.push('q')],
      [second, () => u.post(`/api/v1/chat-sessions/${second}/archive`, {}), (m) => (m.archived = true)],
      [first, () => u.post(`/api/v1/chat-sessions/${first}/turns`, { role: 'assistant', content: 'a' }), (m) => m.turns.push('a')],
      [second, () => u.del(`/api/v1/chat-sessions/${second}`), (m) => (m.deleted = true)],
      [first, () => u.put(`/api/v1/chat-sessions/${first}`, { name: 'first-final' }), (m) => (m.name = 'first-final')],
    ];
    for (const [id, call, apply] of ops) {
      if (id === undefined) {
        results.push('skipped');
        continue;
      }
      r = await call();
      note(r);
      if (r.status >= 200 && r.status < 300) apply(acked.get(id));
    }
    return { acked, results };
  }

  for (const kind of ['commit']) {
    test(`a failing ${STORE} ${kind} at the k-th operation gets a 5xx, never a 2xx; after restart exactly what was acknowledged`, async () => {
      for (let k = 1; k <= N; k++) {
        const code = k % 2 === 0 ? 'ENOSPC' : 'EIO';
        const s = await startServer({ env: { CHAT_SESSION_API_FAULTS: `${kind}:${k}:${code}` } });
        try {
          const u = s.as('alice');
          const { acked, results } = await run(u);
          const failed = results.filter((x) => x === 500).length;
          assert.equal(failed, 1, `k=${k}: exactly one 500 (${results})`);
          assert.equal(results.indexOf(500), k - 1, `k=${k}: the k-th write failed (${results})`);
          assert.ok(results.every((x) => x === 500 || x === 'skipped' || (x >= 200 && x < 300) || x === 404), `k=${k}: ${results}`);
          assert.equal((await u.get('/api/v1/chat-sessions?archived=all')).status, 200, 'reads keep being served');
          const failLog = s.logs().find((l) => /store write failed/.test(l.msg));
          assert.ok(failLog, 'the failure is logged');
          const leaked = JSON.stringify(s.logs().filter((l) => l.msg === 'request failed'));
          assert.equal(leaked.includes(s.dataDir), false, 'the answer leaks no path');
          await s.kill();
          const again = await startServer({ dataDir: s.dataDir });
          try {
            const state = await dump(again);
            const expected = {};
            for (const [id, m] of acked) if (!m.deleted) expected[id] = m;
            assert.deepEqual(Object.keys(state).sort(), Object.keys(expected).sort(), `k=${k}: the same sessions`);
            for (const [id, m] of Object.entries(expected)) {
              assert.equal(state[id].name, m.name, `k=${k}: name`);
              assert.equal(state[id].archived, m.archived, `k=${k}: archived`);
              assert.deepEqual(state[id].turns.map((t) => t.content), m.turns, `k=${k}: turns`);
            }
          } finally {
            await again.stop();
          }
        } finally {
          await s.stop();
          removeDir(s.dataDir);
        }
      }
    });
  }

  test('[D-logs-2] the 500 for a failed write says "Storage write failed" and nothing else', async () => {
    const s = await startServer({ env: { CHAT_SESSION_API_FAULTS: 'commit:1:EIO' } });
    try {
      const r = await s.as('alice').post('/api/v1/chat-sessions', newSession());
      assert.equal(r.status, 500);
      assert.deepEqual(r.body, { success: false, message: 'Storage write failed' });
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });
});

describe('Write path', () => {
  test('concurrent writes share an fsync (group commit): 64 creates take far fewer fsyncs, each answered 201', async () => {
    const s = await startServer();
    try {
      const u = s.as('alice');
      const fsyncs = async () => Number(/chat_session_api_commit_duration_seconds_count (\d+)/.exec((await s.request('GET', '/metrics')).text)[1]);
      const before = await fsyncs();
      const answers = await Promise.all(Array.from({ length: 64 }, (_, i) => u.post('/api/v1/chat-sessions', newSession({ name: `c${i}` }))));
      const used = (await fsyncs()) - before;
      assert.ok(answers.every((r) => r.status === 201));
      assert.ok(used >= 1 && used < 64, `${used} fsyncs for 64 creates`);
      assert.equal((await u.get('/api/v1/chat-sessions')).body.data.length, 64);
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('A write that fails to persist changes nothing in memory and answers 500 (a create, an update, a turn, a delete)', async () => {
    // writes 2, 3, 4 and 5 fail: the first create is the session the others try to change
    const s = await startServer({ env: { CHAT_SESSION_API_FAULTS: failingWrite(2, 3, 4, 5) } });
    try {
      const u = s.as('alice');
      const kept = (await u.post('/api/v1/chat-sessions', newSession({ name: 'kept' }))).body.data;
      const before = await u.get(`/api/v1/chat-sessions/${kept._id}`);
      assert.equal((await u.post('/api/v1/chat-sessions', newSession({ name: 'lost' }))).status, 500);
      assert.equal((await u.put(`/api/v1/chat-sessions/${kept._id}`, { name: 'renamed' })).status, 500);
      assert.equal((await u.post(`/api/v1/chat-sessions/${kept._id}/turns`, { role: 'user', content: 'x' })).status, 500);
      assert.equal((await u.del(`/api/v1/chat-sessions/${kept._id}`)).status, 500);
      const after = await u.get(`/api/v1/chat-sessions/${kept._id}`);
      assert.deepEqual(after.body, before.body, 'the session is as it was');
      assert.equal(after.headers.etag, before.headers.etag);
      assert.deepEqual((await u.get(`/api/v1/chat-sessions/${kept._id}/turns`)).body.data, []);
      assert.deepEqual((await u.get('/api/v1/chat-sessions')).body.data.map((x) => x.name), ['kept']);
      assert.equal((await u.put(`/api/v1/chat-sessions/${kept._id}`, { name: 'now it works' })).status, 200, 'the next write goes through');
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });
});

describe('One owner per data directory', () => {
  test('a stale lock left by a dead process is taken over', async () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'lock'), JSON.stringify({ pid: 999_999, host: (await import('node:os')).hostname(), startedAt: '2020-01-01T00:00:00.000Z' }));
    const s = await startServer({ dataDir: dir });
    try {
      assert.ok(s.logs().some((l) => l.msg === 'took over a stale data directory lock' && l.pid === 999_999));
      assert.equal(JSON.parse(readFileSync(join(dir, 'lock'), 'utf8')).pid, s.child.pid);
    } finally {
      await s.stop();
      removeDir(dir);
    }
  });

  test('an unreadable (half-written) lock file is treated as stale', async () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'lock'), '{"pid":');
    const s = await startServer({ dataDir: dir });
    try {
      assert.ok(s.logs().some((l) => l.msg === 'took over a stale data directory lock'));
    } finally {
      await s.stop();
      removeDir(dir);
    }
  });
});
