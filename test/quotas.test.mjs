// Quotas per user (#16 item 1): QUOTA_SESSIONS, QUOTA_TURNS, QUOTA_BYTES, counted by session
// owner and checked at the store's serial point, so writes that arrive together cannot pass one.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { newSession, removeDir, runCli, startServer } from './helpers.mjs';

const refusal = (quota, limit) => ({ status: 403, body: { success: false, message: `Quota exceeded: ${quota} (at most ${limit} per user)` } });
const answer = (r) => ({ status: r.status, body: r.body });

describe('Quotas', () => {
  test('[D-limits-11] past a quota 403 Quota exceeded naming it, other users unaffected; a delete gives back its share', async () => {
    const s = await startServer({ env: { QUOTA_SESSIONS: '3' } });
    try {
      const alice = s.as('alice');
      const ids = [];
      for (let i = 0; i < 3; i++) ids.push((await alice.post('/api/v1/chat-sessions', newSession())).body.data._id);
      assert.deepEqual(answer(await alice.post('/api/v1/chat-sessions', newSession())), refusal('sessions', 3));
      assert.equal((await s.as('bob').post('/api/v1/chat-sessions', newSession())).status, 201);
      assert.equal((await alice.del(`/api/v1/chat-sessions/${ids[0]}`)).status, 200);
      assert.equal((await alice.post('/api/v1/chat-sessions', newSession())).status, 201);
      assert.equal((await alice.get('/api/v1/chat-sessions')).body.data.length, 3);
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test("[D-limits-11] a turn counts against its session's owner, whoever wrote it; past QUOTA_TURNS 403", async () => {
    const s = await startServer({ env: { QUOTA_TURNS: '4' } });
    try {
      const alice = s.as('alice');
      const bob = s.as('bob');
      const id = (await alice.post('/api/v1/chat-sessions', newSession())).body.data._id;
      for (let i = 0; i < 2; i++) assert.equal((await alice.post(`/api/v1/chat-sessions/${id}/turns`, { role: 'user', content: `a${i}` })).status, 201);
      for (let i = 0; i < 2; i++) assert.equal((await bob.post(`/api/v1/chat-sessions/${id}/turns`, { role: 'assistant', content: `b${i}` })).status, 201);
      assert.deepEqual(answer(await bob.post(`/api/v1/chat-sessions/${id}/turns`, { role: 'user', content: 'one more' })), refusal('turns', 4));
      const own = (await bob.post('/api/v1/chat-sessions', newSession())).body.data._id;
      assert.equal((await bob.post(`/api/v1/chat-sessions/${own}/turns`, { role: 'user', content: 'bob has room' })).status, 201);
      assert.equal((await alice.get(`/api/v1/chat-sessions/${id}/turns`)).body.data.length, 4);
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test("[D-limits-11] QUOTA_BYTES counts the JSON of a user's sessions and turns; only what grows is checked", async () => {
    const s = await startServer({ env: { QUOTA_BYTES: '8kb' } });
    try {
      const alice = s.as('alice');
      const id = (await alice.post('/api/v1/chat-sessions', newSession({ name: 'n'.repeat(300) }))).body.data._id;
      const fill = async (size) => {
        for (let i = 0; i < 50; i++) {
          const r = await alice.post(`/api/v1/chat-sessions/${id}/turns`, { role: 'user', content: 'y'.repeat(size) });
          if (r.status !== 201) return r;
        }
        assert.fail('never refused');
      };
      assert.deepEqual(answer(await fill(1000)), refusal('bytes', 8192));
      await fill(50); // what is left is less than a small turn (under 200 bytes)
      assert.deepEqual(answer(await alice.put(`/api/v1/chat-sessions/${id}`, { name: 'n'.repeat(500) })), refusal('bytes', 8192), 'a longer name would pass it');
      assert.equal((await alice.put(`/api/v1/chat-sessions/${id}`, { name: 'short' })).status, 200, 'a shorter one frees bytes');
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('[D-limits-11] 40 turns at once against QUOTA_TURNS=10 give exactly 10, and a restart shows those 10', async () => {
    const s = await startServer({ env: { QUOTA_TURNS: '10' } });
    try {
      const alice = s.as('alice');
      const id = (await alice.post('/api/v1/chat-sessions', newSession())).body.data._id;
      const all = await Promise.all(Array.from({ length: 40 }, (_, i) => alice.post(`/api/v1/chat-sessions/${id}/turns`, { role: 'user', content: `t${i}` })));
      assert.equal(all.filter((r) => r.status === 201).length, 10);
      assert.equal(all.filter((r) => r.status === 403).length, 30);
      await s.stop();
      const again = await startServer({ dataDir: s.dataDir, env: { QUOTA_TURNS: '10' } });
      try {
        assert.equal((await again.as('alice').get(`/api/v1/chat-sessions/${id}/turns`)).body.data.length, 10);
      } finally {
        await again.stop();
      }
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('[D-limits-11] a fork counts its copies against its caller, an edit what it adds; deleting turns gives back', async () => {
    const s = await startServer({ env: { QUOTA_TURNS: '5', QUOTA_BYTES: '8kb', ACCESS: 'shared' } });
    try {
      const alice = s.as('alice');
      const bob = s.as('bob');
      const base = '/api/v1/chat-sessions';
      const id = (await alice.post(base, newSession())).body.data._id;
      const turns = [];
      for (let i = 0; i < 3; i++) turns.push((await alice.post(`${base}/${id}/turns`, { role: 'user', content: `t${i}` })).body.data._id);
      // bob's fork of alice's three turns: three turns and a session of his
      const fork = await bob.post(`${base}/${id}/fork`, {});
      assert.equal(fork.status, 201, fork.text);
      assert.equal((await bob.post(`${base}/${fork.body.data._id}/turns`, { role: 'user', content: 'b' })).status, 201);
      assert.deepEqual(answer(await bob.post(`${base}/${id}/fork`, {})), refusal('turns', 5));
      assert.deepEqual(answer(await alice.post(`${base}/${id}/fork`, {})), refusal('turns', 5), 'alice has 3 turns: a fork of 3 more would be 6');
      // an edit that grows a turn past QUOTA_BYTES is refused; one that stays within it is not
      assert.deepEqual(answer(await alice.put(`${base}/${id}/turns/${turns[0]}`, { content: 'x'.repeat(9000) })), refusal('bytes', 8192));
      assert.equal((await alice.put(`${base}/${id}/turns/${turns[0]}`, { content: 'x'.repeat(4000) })).status, 200);
      assert.deepEqual(answer(await alice.post(`${base}/${id}/turns`, { role: 'user', content: 'y'.repeat(4500) })), refusal('bytes', 8192));
      // deleting the edited turn (and its descendants: all three) gives their turns and bytes back
      assert.equal((await alice.del(`${base}/${id}/turns/${turns[0]}`)).status, 200);
      assert.equal((await alice.post(`${base}/${id}/turns`, { role: 'user', content: 'y'.repeat(4500) })).status, 201);
      assert.equal((await alice.get(`${base}/${id}/turns`)).body.data.length, 1);
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('quotas are off by default, --help lists them, and a bad value stops the start with one line naming it', () => {
    const help = runCli(['--help']).stdout;
    for (const line of ['QUOTA_SESSIONS / --quota-sessions', 'QUOTA_TURNS / --quota-turns', 'QUOTA_BYTES / --quota-bytes', 'MEMORY_LIMIT / --memory-limit']) assert.ok(help.includes(line), line);
    assert.match(help, /QUOTA_SESSIONS[^\n]*\[default: \(off\)\]/);
    assert.match(help, /MEMORY_LIMIT[^\n]*\[default: auto\]/);
    for (const [name, value, message] of [
      ['QUOTA_SESSIONS', '0', /QUOTA_SESSIONS must be a whole number from 1 to/],
      ['QUOTA_TURNS', 'many', /QUOTA_TURNS must be a whole number from 1 to/],
      ['QUOTA_BYTES', '10 parsecs', /QUOTA_BYTES must be a size/],
      ['MEMORY_LIMIT', 'lots', /MEMORY_LIMIT must be auto, off or a size/],
    ]) {
      const r = runCli([], { env: { [name]: value, PORT: '0' } });
      assert.equal(r.code, 2, `${name}=${value}: ${r.stderr}`);
      assert.match(r.stderr, message);
      assert.equal(r.stderr.trim().split('\n').length, 1);
    }
  });
});
