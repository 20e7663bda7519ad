// Data survives a clean restart and a SIGKILL right after a 2xx (the service issue's restart test).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { newSession, removeDir, startServer } from './helpers.mjs';

async function snapshot(server, user, ids) {
  const u = server.as(user);
  const out = {};
  out.list = (await u.get('/api/v1/chat-sessions?archived=all')).body.data;
  for (const id of ids) {
    out[id] = (await u.get(`/api/v1/chat-sessions/${id}`)).body;
    out[`${id}/turns`] = (await u.get(`/api/v1/chat-sessions/${id}/turns`)).body;
  }
  return out;
}

async function writeSome(server) {
  const u = server.as('alice');
  const a = (await u.post('/api/v1/chat-sessions', newSession({ name: 'a' }))).body.data;
  const b = (await u.post('/api/v1/chat-sessions', newSession({ name: 'b', mode: 'Ask' }))).body.data;
  const c = (await u.post('/api/v1/chat-sessions', newSession({ name: 'c' }))).body.data;
  await u.put(`/api/v1/chat-sessions/${a._id}`, { name: 'a2', mode: 'Plan' });
  await u.post(`/api/v1/chat-sessions/${a._id}/turns`, { role: 'user', content: 'hello', metadata: { n: 1 } });
  await u.post(`/api/v1/chat-sessions/${a._id}/turns`, { role: 'assistant', content: 'hi', model: 'gpt-4o' });
  await u.post(`/api/v1/chat-sessions/${c._id}/turns`, { role: 'user', content: 'gone soon' });
  await u.del(`/api/v1/chat-sessions/${c._id}`);
  await u.post(`/api/v1/chat-sessions/${b._id}/archive`, {});
  return [a._id, b._id, c._id];
}

describe('Restart', () => {
  test('sessions and turns persist on disk under $DATA_DIR and are replayed at start (clean restart)', async () => {
    const s1 = await startServer();
    const ids = await writeSome(s1);
    const before = await snapshot(s1, 'alice', ids);
    assert.equal((await s1.stop()).code, 0);
    const s2 = await startServer({ dataDir: s1.dataDir });
    try {
      assert.deepEqual(await snapshot(s2, 'alice', ids), before);
      assert.equal(before[ids[2]].message, 'Chat session not found', 'deleted stays deleted');
    } finally {
      await s2.stop();
      removeDir(s1.dataDir);
    }
  });

  test('A 2xx to a write means it is on disk: SIGKILL right after a 201 loses nothing', async () => {
    const s1 = await startServer();
    const ids = await writeSome(s1);
    const created = await s1.as('alice').post('/api/v1/chat-sessions', newSession({ name: 'last' }));
    assert.equal(created.status, 201);
    const before = await snapshot(s1, 'alice', [...ids, created.body.data._id]);
    const { signal } = await s1.kill();
    assert.equal(signal, 'SIGKILL');
    const s2 = await startServer({ dataDir: s1.dataDir });
    try {
      assert.deepEqual(await snapshot(s2, 'alice', [...ids, created.body.data._id]), before);
      assert.ok(s2.logs().some((l) => l.msg === 'took over a stale data directory lock'));
    } finally {
      await s2.stop();
      removeDir(s1.dataDir);
    }
  });
});
