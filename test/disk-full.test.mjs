// A full disk (#16 items 4 and 12), on a real small file system (a tmpfs mounted for the test):
// every write that cannot be stored is a 500 for that write, reads go on, the server never dies;
// a start on a full disk is one line and leaves nothing behind.
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, test } from 'node:test';
import { dump, metric, waitFor } from './api-kit.mjs';
import { newSession, removeDir, runCli, SECRET, SERVER, smallDisk, startServer, STORE, tempDir } from './helpers.mjs';
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
// commit, a 500 for that write like any database failure (test/postgres-faults.test.mjs)
describe('A full disk', { skip: STORE === 'postgres' ? "the data of STORE=postgres is on the database's disk, not DATA_DIR's" : false }, () => {
  test('"A full disk never stops the server: every write-path error becomes a 500 for that write; the server keeps serving reads": writes get 500 Storage write failed on a full disk, reads and /healthz go on, the server never dies, and writes succeed again once space is freed', async (t) => {
    const disk = smallDisk(t, '4m');
    if (disk === undefined) return;
    const s = await startServer({ dataDir: disk.dir, env: { COMPACT_MIN_SIZE: '64mb' } });
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

  test('"a start that can (a killed run left its lock to reuse) serves reads and answers writes 500 until there is room": a start on a full disk that still has room for its lock serves reads, answers writes 500 Storage write failed, and takes writes once space is back', async (t) => {
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

  test('"Start-up failures are one line on stderr in every case" ... "A start that cannot write its lock stops with one line": a start on a full disk fails with one line naming the data directory, exit 1, and leaves no lock file behind; with space back it starts on everything acknowledged', async (t) => {
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

describe('Compaction on a nearly full disk', { skip: STORE === 'journal' ? false : `about the journal engine's files; this run tests STORE=${STORE}` }, () => {
  const turn = 'z'.repeat(16 * 1024);

  /** `n` sessions of `turns` 16 KiB turns each, owned by alice; their ids. */
  async function sessionsWithTurns(u, n, turns, name) {
    const ids = [];
    for (let i = 0; i < n; i++) {
      const id = (await u.post('/api/v1/chat-sessions', newSession({ name: `${name} ${i}` }))).body.data._id;
      for (let k = 0; k < turns; k++) assert.equal((await u.post(`/api/v1/chat-sessions/${id}/turns`, { role: 'user', content: turn })).status, 201);
      ids.push(id);
    }
    return ids;
  }

  test('"Compaction moves the journal\'s end first, a piece at a time, so it needs free space for one piece, not for the live data": with less free space than the live data, the journal is compacted and the space given back; nothing is lost', async (t) => {
    const disk = smallDisk(t, '8m');
    if (disk === undefined) return;
    const s = await startServer({ dataDir: disk.dir, env: { COMPACT_MIN_SIZE: '1mb' } });
    try {
      const u = s.as('alice');
      await sessionsWithTurns(u, 12, 8, 'live'); // 1.5 MiB live
      const live = await metric(s, 'chat_session_api_journal_live_bytes');
      disk.fill();
      disk.free(live + 1024 * 1024); // room for the dead records that trigger the compaction, and then less than the live data
      // dead records: sessions written and deleted, until their bytes outweigh the live ones
      for (let i = 0; (await metric(s, 'chat_session_api_compactions_total')) === 0 && i < 200; i++) {
        const [id] = await sessionsWithTurns(u, 1, 1, 'dead');
        assert.equal((await u.del(`/api/v1/chat-sessions/${id}`)).status, 200);
      }
      await waitFor(async () => (await metric(s, 'chat_session_api_compactions_total')) >= 1, 'a compaction');
      assert.ok(!s.logs().some((l) => l.level === 'error'), JSON.stringify(s.logs().filter((l) => l.level === 'error')));
      const bytes = await metric(s, 'chat_session_api_journal_bytes');
      assert.ok(bytes < 1.5 * live, `the journal holds ${bytes} bytes for ${live} live bytes`);
      assert.ok(disk.available() > live, 'the space came back');
      const state = await dump(s);
      assert.equal(Object.values(state).filter((x) => x.name.startsWith('live')).length, 12);
      await s.stop();
      const again = await startServer({ dataDir: disk.dir });
      try {
        assert.deepEqual(await dump(again), state);
      } finally {
        await again.stop();
      }
    } finally {
      await s.stop();
      disk.release();
    }
  });

  test('"After a failure, compaction is tried again" ... "once the file system reports room for the piece that did not fit": a compaction that finds the disk full stops without harm (two files an export reads whole), and goes on once space is freed; nothing is lost', async (t) => {
    const disk = smallDisk(t, '8m');
    if (disk === undefined) return;
    const first = await startServer({ dataDir: disk.dir, env: { COMPACT_MIN_SIZE: '64mb' } });
    let s;
    try {
      const u = first.as('alice');
      // dead records first, live ones last: the end of the journal, moved first, is live
      for (let i = 0; i < 10; i++) {
        const [id] = await sessionsWithTurns(u, 1, 8, 'dead');
        assert.equal((await u.del(`/api/v1/chat-sessions/${id}`)).status, 200);
      }
      await sessionsWithTurns(u, 8, 8, 'live');
      const state = await dump(first);
      await first.kill(); // its lock stays, so the next start needs no new space for one
      disk.fill();
      disk.free(20 * 1024); // room for a few small writes, not for a piece of live records
      s = await startServer({ dataDir: disk.dir, env: { COMPACT_MIN_SIZE: '1mb' } });
      const v = s.as('alice');
      const [anId] = Object.keys(state);
      await waitFor(() => s.logs().some((l) => l.level === 'error' && /no space left/.test(l.msg)), 'the compaction to find the disk full');
      assert.equal(await metric(s, 'chat_session_api_compactions_total'), 0);
      assert.deepEqual(await dump(s), state, 'reads go on');
      // stopped half way, the journal is two files; an export beside the server reads both
      assert.ok(existsSync(join(disk.dir, 'sessions.journal.next')), 'two files');
      const out = join(tempDir(), 'backup.ndjson');
      const exported = runCli(['export', '--out', out], { env: { DATA_DIR: disk.dir } });
      assert.equal(exported.code, 0, exported.stderr);
      const records = readFileSync(out, 'utf8').trim().split('\n').slice(1).map((l) => JSON.parse(l));
      assert.deepEqual(records.filter((r) => r.session).map((r) => r.session._id).sort(), Object.keys(state).sort());
      assert.equal(records.filter((r) => r.turn).length, Object.values(state).reduce((n, x) => n + x.turns.length, 0));
      removeDir(dirname(out));
      disk.free();
      // writes go on; one of them finds the space back and the compaction goes on
      await waitFor(async () => {
        assert.equal((await v.put(`/api/v1/chat-sessions/${anId}`, { name: state[anId].name })).status, 200);
        return (await metric(s, 'chat_session_api_compactions_total')) >= 1;
      }, 'the compaction to go on once space is back');
      assert.ok((await metric(s, 'chat_session_api_journal_bytes')) < 1.5 * (await metric(s, 'chat_session_api_journal_live_bytes')));
      const after = await dump(s);
      // the same sessions and turns (the renames moved one session's updatedAt)
      assert.deepEqual(Object.keys(after).sort(), Object.keys(state).sort());
      for (const id of Object.keys(state)) assert.deepEqual(after[id].turns, state[id].turns);
      await s.stop();
      const again = await startServer({ dataDir: disk.dir });
      try {
        assert.deepEqual(await dump(again), after);
      } finally {
        await again.stop();
      }
    } finally {
      await first.stop();
      await s?.stop();
      disk.release();
    }
  });
});
