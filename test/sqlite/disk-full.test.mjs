// A full disk (#16 items 4 and 12), on a real small file system (a tmpfs mounted for the test):
// every write that cannot be stored is a 500 for that write, reads go on, the server never dies;
// a start on a full disk is one line and leaves nothing behind.
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { dump } from '../api-kit.mjs';
import { newSession, ROOT, runCli, SECRET, SERVER, smallDisk, startServer, STORE } from '../helpers.mjs';
import { spawnSync } from 'node:child_process';

const NAME = 'chat-session-api';

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

/** A session named 'kept' with one turn, written before the disk fills; answers its id and what alice sees. */
async function keptSession(s) {
  const u = s.as('alice');
  const id = (await u.post('/api/v1/chat-sessions', newSession({ name: 'kept' }))).body.data._id;
  assert.equal((await u.post(`/api/v1/chat-sessions/${id}/turns`, { role: 'user', content: 'kept' })).status, 201);
  return { id, before: await dump(s) };
}

// with STORE=postgres the data is the database's, on its own disk: a full disk there fails the
// commit, a 500 for that write like any database failure (test/postgres/postgres-faults.test.mjs)
describe('A full disk', { skip: STORE === 'postgres' ? "the data of STORE=postgres is on the database's disk, not DATA_DIR's" : false }, () => {
  test('[D-datadir-4] on a full disk writes get 500, reads and /healthz go on, and writes succeed once space is freed', async (t) => {
    const disk = smallDisk(t, '4m');
    if (disk === undefined) return;
    const s = await startServer({ dataDir: disk.dir, });
    try {
      const u = s.as('alice');
      const { id, before } = await keptSession(s);
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

  test('[D-datadir-4] a start on a full disk with room for its lock serves reads, answers writes 500, until room is back', async (t) => {
    const disk = smallDisk(t, '4m');
    if (disk === undefined) return;
    try {
      const s = await startServer({ dataDir: disk.dir });
      const { id, before } = await keptSession(s);
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

  test('[D-running-4] [D-datadir-4] a start that cannot write its lock fails in one line, leaving no lock file', async (t) => {
    const disk = smallDisk(t, '4m');
    if (disk === undefined) return;
    try {
      const s = await startServer({ dataDir: disk.dir });
      const { id, before } = await keptSession(s);
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

describe('A migration on a full disk', { skip: STORE !== 'sqlite' ? 'the start migrates a journal into sqlite' : false }, () => {
  test('[D-journal-2] a journal migrated on a full disk stops the start, left as it was; with space it migrates whole', async (t) => {
    const disk = smallDisk(t, '4m');
    if (disk === undefined) return;
    try {
      const journal = readFileSync(join(ROOT, 'test', 'fixtures', 'journal', 'clean', 'sessions.journal'));
      writeFileSync(join(disk.dir, 'sessions.journal'), journal);
      disk.fill();
      disk.free(64 * 1024); // room for the lock and a start, not for the database
      const r = runCli([], { env: { DATA_DIR: disk.dir, PORT: '0', AUTH_SECRET: SECRET } });
      assert.equal(r.code, 1, r.stderr);
      const lines = r.stderr.split('\n').filter((l) => l !== '');
      assert.equal(lines.length, 1, r.stderr);
      assert.match(lines[0], /no space left|chat-sessions\.db\.migrating: .*check its permissions and the disk\. Nothing was changed\./);
      assert.deepEqual(readFileSync(join(disk.dir, 'sessions.journal')), journal, 'the journal as it was');
      assert.equal(existsSync(join(disk.dir, 'chat-sessions.db')), false, 'no database put in place');
      disk.free();
      const s = await startServer({ dataDir: disk.dir, env: { PURGE_INTERVAL: 'off' } });
      try {
        const all = await s.as('carol').get('/api/v1/chat-sessions?archived=all');
        assert.equal(all.body.data.length, 60, 'every record carried over');
        assert.ok(!readdirSync(disk.dir).some((f) => f.includes('.migrating')), 'nothing of the failed run is left');
      } finally {
        await s.stop();
      }
    } finally {
      disk.release();
    }
  });
});

