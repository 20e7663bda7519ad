// A full disk (#16 items 4 and 12), on a real small file system (a tmpfs mounted for the test):
// every write that cannot be stored is a 500 for that write, reads go on, the server never dies;
// a start on a full disk is one line and leaves nothing behind.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { newSession, SECRET, SERVER, smallDisk, startServer, STORE } from './helpers.mjs';
import { spawnSync } from 'node:child_process';

const NAME = 'chat-session-api';

/** Everything user `alice` can see: each session with its turns, by id. */
async function dump(server) {
  const u = server.as('alice');
  const list = (await u.get('/api/v1/chat-sessions?archived=all')).body.data;
  const out = {};
  for (const s of list) out[s._id] = { ...s, turns: (await u.get(`/api/v1/chat-sessions/${s._id}/turns`)).body.data };
  return out;
}

/**
 * Appends 16 KiB turns to session `id` until one is refused (a disk of a few MiB fills long
 * before 400 of them); the refusal must be the 500 of a failed write.
 */
async function appendUntilRefused(u, id) {
  const content = 'x'.repeat(16 * 1024);
  for (let i = 0; i < 400; i++) {
    const r = await u.post(`/api/v1/chat-sessions/${id}/turns`, { role: 'user', content });
    if (r.status === 201) continue;
    assert.deepEqual({ status: r.status, body: r.body }, { status: 500, body: { success: false, message: 'Storage write failed' } });
    return i;
  }
  assert.fail('400 turns of 16 KiB were all accepted on a full disk of a few MiB');
}

describe('A full disk', () => {
  test('"every write-path error becomes a 500 for that write; the server keeps serving reads": writes get 500 Storage write failed on a full disk, reads and /healthz go on, the server never dies, and writes succeed again once space is freed', async (t) => {
    const disk = smallDisk(t, '4m');
    if (disk === undefined) return;
    const s = await startServer({ dataDir: disk.dir, env: { COMPACT_MIN_SIZE: '64mb' } });
    try {
      const u = s.as('alice');
      const id = (await u.post('/api/v1/chat-sessions', newSession({ name: 'kept' }))).body.data._id;
      assert.equal((await u.post(`/api/v1/chat-sessions/${id}/turns`, { role: 'user', content: 'before' })).status, 201);
      const before = await dump(s);
      disk.fill();
      const content = 'x'.repeat(16 * 1024);
      const accepted = await appendUntilRefused(u, id);
      for (const r of [await u.post('/api/v1/chat-sessions', newSession({ name: 'x'.repeat(400) })), await u.put(`/api/v1/chat-sessions/${id}`, { name: 'y'.repeat(400) })]) {
        assert.ok(r.status === 500 || r.status < 300, `a write answers 500 or succeeds, got ${r.status}`);
      }
      // reads go on, and show exactly what was acknowledged
      assert.equal((await s.request('GET', '/healthz')).status, 200);
      const during = await dump(s);
      assert.deepEqual(during[id].turns.slice(0, before[id].turns.length), before[id].turns);
      assert.equal(during[id].turns.length, before[id].turns.length + accepted);
      assert.equal(s.child.exitCode, null, 'the server is still running');
      assert.doesNotMatch(s.stderr, /\S/, 'nothing on stderr');
      // space comes back: so do writes
      disk.free();
      const again = await u.post(`/api/v1/chat-sessions/${id}/turns`, { role: 'user', content });
      assert.equal(again.status, 201, again.text);
      const after = await dump(s);
      await s.stop();
      const restarted = await startServer({ dataDir: disk.dir });
      try {
        assert.deepEqual(await dump(restarted), after, 'after a restart: exactly what was acknowledged');
      } finally {
        await restarted.stop();
      }
    } finally {
      await s.stop();
      disk.release();
    }
  });

  test('a start on a full disk that still has room for its lock (the last run was killed and left one) serves reads, answers writes 500 Storage write failed, and takes writes once space is back', async (t) => {
    const disk = smallDisk(t, '4m');
    if (disk === undefined) return;
    try {
      const s = await startServer({ dataDir: disk.dir });
      const u = s.as('alice');
      const id = (await u.post('/api/v1/chat-sessions', newSession({ name: 'kept' }))).body.data._id;
      assert.equal((await u.post(`/api/v1/chat-sessions/${id}/turns`, { role: 'user', content: 'kept' })).status, 201);
      const before = await dump(s);
      await s.kill();
      disk.fill();
      const again = await startServer({ dataDir: disk.dir });
      try {
        assert.deepEqual(await dump(again), before);
        // the files the last run left may still take a little (a WAL reused), then writes fail
        await appendUntilRefused(again.as('alice'), id);
        const during = await dump(again);
        assert.deepEqual(during[id].name, before[id].name);
        disk.free();
        assert.equal((await again.as('alice').post(`/api/v1/chat-sessions/${id}/turns`, { role: 'user', content: 'x'.repeat(16 * 1024) })).status, 201);
      } finally {
        await again.stop();
      }
    } finally {
      disk.release();
    }
  });

  test('"start-up failures are one line": a start on a full disk fails with one line naming the data directory, exit 1, and leaves no lock file behind; with space back it starts on everything acknowledged', async (t) => {
    const disk = smallDisk(t, '4m');
    if (disk === undefined) return;
    try {
      const s = await startServer({ dataDir: disk.dir });
      const u = s.as('alice');
      const id = (await u.post('/api/v1/chat-sessions', newSession({ name: 'kept' }))).body.data._id;
      assert.equal((await u.post(`/api/v1/chat-sessions/${id}/turns`, { role: 'user', content: 'kept' })).status, 201);
      const before = await dump(s);
      await s.stop(); // a clean stop removes the lock: the next start must write a new one
      disk.fill();
      const r = spawnSync(process.execPath, [SERVER], {
        cwd: disk.dir,
        env: { PATH: process.env.PATH, PORT: '0', HOST: '127.0.0.1', DATA_DIR: disk.dir, AUTH_SECRET: SECRET, STORE },
        encoding: 'utf8',
        timeout: 30_000,
      });
      assert.equal(r.status, 1, r.stderr);
      const lines = r.stderr.split('\n').filter((l) => l !== '');
      assert.equal(lines.length, 1, `one line on stderr, got:\n${r.stderr}`);
      assert.match(lines[0], new RegExp(`^${NAME}: .*no space left.*${disk.dir.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}`));
      assert.doesNotMatch(r.stderr, /\n\s+at /, 'no stack trace');
      assert.equal(existsSync(join(disk.dir, 'lock')), false, 'no (empty) lock file left behind');
      disk.free();
      const again = await startServer({ dataDir: disk.dir });
      try {
        assert.deepEqual(await dump(again), before);
      } finally {
        await again.stop();
      }
    } finally {
      disk.release();
    }
  });
});
