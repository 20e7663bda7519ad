// The journal engine's memory follows the live data (#16 item 13): turns replayed at start-up
// share large slabs, a slab mostly dead is repacked, turns a later tombstone deletes are never
// loaded, and a turn written while running owns its buffer (not a slice of Node's shared pool).
// Measured with the engine's own account of what it keeps (journal_turn_memory_bytes), never
// with timings or the garbage collector's moods.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { metric, waitFor } from './api-kit.mjs';
import { newSession, removeDir, startServer, STORE } from './helpers.mjs';
import { kit, openOn } from './store/engines.mjs';

const JOURNAL = STORE === 'journal' ? {} : { skip: `about the journal engine's memory; this run tests STORE=${STORE}` };

/** Bytes of turns' JSON the start's replay copied, from its log line. */
function loadedBytes(s) {
  const line = s.logs().find((l) => l.msg === 'journal replayed');
  assert.equal(typeof line?.turnBytesLoaded, 'number', 'the replay log line says what it loaded');
  return line.turnBytesLoaded;
}

/** Every session of alice with its turns, and the bytes of all their turns' JSON. */
async function dump(s) {
  const u = s.as('alice');
  const out = {};
  let turnBytes = 0;
  for (const x of (await u.get('/api/v1/chat-sessions')).body.data) {
    const turns = (await u.get(`/api/v1/chat-sessions/${x._id}/turns`)).body.data;
    for (const t of turns) turnBytes += Buffer.byteLength(JSON.stringify(t));
    out[x._id] = { ...x, turns };
  }
  return { state: out, turnBytes };
}

describe('Journal memory follows the live data', JOURNAL, () => {
  test('"Replay finds the tombstones first and never loads the turns they delete" ... "A slab more than half dead is repacked" ... "so turn memory stays within twice the live turns\' bytes"', async () => {
    const s = await startServer({ env: { COMPACT_MIN_SIZE: '1gb' } });
    let again;
    try {
      const u = s.as('alice');
      const content = 'm'.repeat(16 * 1024);
      const ids = [];
      for (let i = 0; i < 24; i++) {
        const id = (await u.post('/api/v1/chat-sessions', newSession({ name: `s${i}` }))).body.data._id;
        for (let k = 0; k < 6; k++) assert.equal((await u.post(`/api/v1/chat-sessions/${id}/turns`, { role: 'user', content })).status, 201);
        ids.push(id);
      }
      // a quarter deleted before the restart: their turns are still in the journal
      for (const id of ids.splice(0, 6)) assert.equal((await u.del(`/api/v1/chat-sessions/${id}`)).status, 200);
      await s.stop();

      again = await startServer({ dataDir: s.dataDir, env: { COMPACT_MIN_SIZE: '1gb' } });
      const before = await dump(again);
      assert.equal(Object.keys(before.state).length, 18);
      const held = await metric(again, 'chat_session_api_journal_turn_memory_bytes');
      assert.ok(held <= before.turnBytes * 1.02, `replay keeps ${held} bytes for ${before.turnBytes} bytes of live turns (the deleted ones are not loaded)`);
      // what replay copied at all (a slab mostly dead would be repacked at once, hiding it from the gauge)
      assert.ok(loadedBytes(again) <= before.turnBytes * 1.02, `replay copied ${loadedBytes(again)} bytes of turns for ${before.turnBytes} bytes of live turns`);

      // most of what was replayed is deleted: the slab's live turns move, the rest is let go
      const v = again.as('alice');
      for (const id of ids.splice(0, 14)) assert.equal((await v.del(`/api/v1/chat-sessions/${id}`)).status, 200);
      const after = await dump(again);
      assert.equal(Object.keys(after.state).length, 4);
      const shrunk = await waitFor(async () => {
        const n = await metric(again, 'chat_session_api_journal_turn_memory_bytes');
        // a slab is repacked once more than half of it is dead: at most twice the live bytes
        return n <= after.turnBytes * 2 ? n : false;
      }, `turn memory to follow the ${after.turnBytes} live bytes (it is ${await metric(again, "chat_session_api_journal_turn_memory_bytes")})`);
      assert.ok(shrunk >= after.turnBytes, 'the live turns are all still held');
      // they still read back exactly
      assert.deepEqual(await dump(again), after);
      await again.stop();
      again = await startServer({ dataDir: s.dataDir });
      assert.deepEqual(await dump(again), after);
    } finally {
      await s.stop();
      await again?.stop();
      removeDir(s.dataDir);
    }
  });

  test('"Replay finds the tombstones first and never loads the turns they delete, nor those a later prune deletes (their turn lines, edits and fork copies)": a deleted subtree, an edit of one of its turns and a fork whose copies are deleted are not loaded at start', async () => {
    const s = await startServer({ env: { COMPACT_MIN_SIZE: '1gb' } });
    let again;
    try {
      const u = s.as('alice');
      const base = '/api/v1/chat-sessions';
      const content = 'm'.repeat(16 * 1024);
      const id = (await u.post(base, newSession({ name: 'tree' }))).body.data._id;
      const turns = [];
      for (let k = 0; k < 10; k++) {
        const r = await u.post(`${base}/${id}/turns`, { role: 'user', content });
        assert.equal(r.status, 201);
        turns.push(r.body.data._id);
      }
      // a branch beside the subtree to delete stays
      assert.equal((await u.post(`${base}/${id}/turns`, { role: 'user', content: 'kept', parentId: turns[1] })).status, 201);
      assert.equal((await u.put(`${base}/${id}/turns/${turns[6]}`, { content: `${content}, edited` })).status, 200);
      const fork = (await u.post(`${base}/${id}/fork`, { turnId: turns[9] })).body.data._id;
      const copies = (await u.get(`${base}/${fork}/turns`)).body.data;
      assert.equal(copies.length, 10);
      // the subtree from the third turn on (8 turns, one of them edited), and all the fork's copies but its root
      assert.equal((await u.del(`${base}/${id}/turns/${turns[2]}`)).status, 200);
      assert.equal((await u.del(`${base}/${fork}/turns/${copies[1]._id}`)).status, 200);
      const before = await dump(s);
      assert.deepEqual(before.state[id].turns.map((t) => t._id).slice(0, 2), turns.slice(0, 2));
      assert.equal(before.state[id].turns.length, 3);
      assert.equal(before.state[fork].turns.length, 1);
      await s.stop();

      again = await startServer({ dataDir: s.dataDir, env: { COMPACT_MIN_SIZE: '1gb' } });
      assert.deepEqual(await dump(again), before);
      const held = await metric(again, 'chat_session_api_journal_turn_memory_bytes');
      assert.ok(held <= before.turnBytes * 1.02, `replay keeps ${held} bytes for ${before.turnBytes} bytes of live turns (the deleted ones are not loaded)`);
      assert.ok(loadedBytes(again) <= before.turnBytes * 1.02, `replay copied ${loadedBytes(again)} bytes of turns for ${before.turnBytes} bytes of live turns`);
    } finally {
      await s.stop();
      await again?.stop();
      removeDir(s.dataDir);
    }
  });

  test('"turns written since have a buffer of their own (not a slice of Node\'s shared 8 KiB pool, which a kept small turn would hold whole)"', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'csa-mem-'));
    const store = await openOn('journal', dir);
    try {
      const now = Date.now();
      const s = await store.createSession(
        kit.chatSession({ _id: kit.newObjectId(now), name: '', provider: 'p', selectedModel: 'm', mode: 'Build', user: 'alice', project: 'p', createdAt: new Date(now).toISOString(), updatedAt: new Date(now).toISOString(), archived: false }),
      );
      for (let i = 0; i < 5; i++) {
        await store.appendTurn(s.session._id, (cur) => ({ _id: kit.newObjectId(now + i + 1), session: cur.session._id, user: 'alice', role: 'user', content: `hi ${i}`, createdAt: new Date(now + i + 1).toISOString() }));
      }
      const page = await store.listTurns(s.session._id, undefined, 10);
      assert.equal(page.items.length, 5);
      for (const t of page.items) assert.equal(t.json.buffer.byteLength, t.json.length, `turn ${t._id}: ${t.json.length} bytes in an ArrayBuffer of ${t.json.buffer.byteLength}`);
    } finally {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
