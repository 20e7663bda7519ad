// Deletes on a full disk (#31 item 4), on a real small file system (a tmpfs mounted for the
// test): the sqlite engine keeps a reserve that only deletes may use, so a full disk refuses what
// adds data and still takes a DELETE, `erase-user` and `purge`, durably.
import assert from 'node:assert/strict';
import { existsSync, statfsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { BASE, dump, metric } from '../api-kit.mjs';
import { newSession, removeDir, runCli, smallDisk, startServer, STORE, STORE_FILE } from '../helpers.mjs';

/** A small file system: its reserve is an eighth of it (3 MiB; src/store/sqlite/reserve.ts), beside a few MiB of data. */
const DISK = '24m';
const WRITE_FAILED = { status: 500, body: { success: false, message: 'Storage write failed' } };

/**
 * Fills what room is left through the API: 16 KiB turns appended to session `id` until one is
 * refused, then new sessions (a smaller write) until one is; each refusal must be the 500 of a
 * failed write.
 */
async function fillThroughApi(u, id) {
  const content = 'x'.repeat(16 * 1024);
  for (const write of [() => u.post(`${BASE}/${id}/turns`, { role: 'user', content }), () => u.post(BASE, newSession({ name: 'filler' }))]) {
    let refused;
    for (let i = 0; i < 1000 && refused === undefined; i++) {
      const r = await write();
      if (r.status !== 201) refused = r;
    }
    assert.ok(refused !== undefined, '1,000 writes were all accepted on a full disk');
    assert.deepEqual({ status: refused.status, body: refused.body }, WRITE_FAILED);
  }
}

/** A session of `user` with `turns` turns of 1 KiB; answers its id and its turns' ids, oldest first. */
async function sessionWithTurns(s, user, turns, over = {}) {
  const u = s.as(user);
  const id = (await u.post(BASE, newSession(over))).body.data._id;
  const ids = [];
  for (let i = 0; i < turns; i++) {
    const r = await u.post(`${BASE}/${id}/turns`, { role: 'user', content: `turn ${i} ${'w '.repeat(512)}` });
    assert.equal(r.status, 201, r.text);
    ids.push(r.body.data._id);
  }
  return { id, turns: ids };
}

/** The sessions of `user` (every one, archived or not) by id. */
async function sessionsOf(s, user) {
  return (await s.as(user).get(`${BASE}?archived=all`)).body.data.map((x) => x._id).sort();
}

describe('Deletes on a full disk', { skip: STORE !== 'sqlite' ? "the reserve is the sqlite engine's (PostgreSQL's disk is the database's)" : false }, () => {
  test('[D-sqlite-11] on a disk full to refusal, deletes, erase-user and purge succeed, and survive a kill', async (t) => {
    const disk = smallDisk(t, DISK);
    if (disk === undefined) return;
    let s;
    try {
      s = await startServer({ dataDir: disk.dir, env: { PURGE_INTERVAL: 'off' } });
      assert.equal(statSync(join(disk.dir, `${STORE_FILE}.reserve`)).size, 3 * 1024 ** 2, 'the reserve is taken at the start: an eighth of a 24 MiB file system');
      assert.equal(await metric(s, 'chat_session_api_sqlite_reserve_bytes'), 3 * 1024 ** 2);
      const alice = s.as('alice');
      const gone = await sessionWithTurns(s, 'alice', 20, { name: 'gone' });
      const trimmed = await sessionWithTurns(s, 'alice', 6, { name: 'trimmed' });
      const kept = await sessionWithTurns(s, 'alice', 2, { name: 'kept' });
      await sessionWithTurns(s, 'bob', 20);
      await sessionWithTurns(s, 'bob', 3);
      const expired = await sessionWithTurns(s, 'carol', 10);
      assert.equal((await s.as('carol').put(`${BASE}/${expired.id}`, { expiresAt: '2020-01-01T00:00:00Z' })).status, 200);
      const carolLive = await sessionWithTurns(s, 'carol', 1);
      await sessionWithTurns(s, 'dave', 5);
      const first = await sessionWithTurns(s, 'alice', 40, { name: 'deleted first' });
      const together = await sessionWithTurns(s, 'alice', 5, { name: 'deleted beside appends' });

      disk.fill();
      await fillThroughApi(alice, kept.id);

      // deletes take the reserve's room: a session, then a turn with its descendants
      const del = await alice.del(`${BASE}/${gone.id}`);
      assert.deepEqual({ status: del.status, success: del.body.success }, { status: 200, success: true }, del.text);
      const delTurn = await alice.del(`${BASE}/${trimmed.id}/turns/${trimmed.turns[3]}`);
      assert.deepEqual({ status: delTurn.status, success: delTurn.body.success }, { status: 200, success: true }, delTurn.text);

      // the room a delete frees in the file may take new data (and the log it cut, new frames): the disk is filled again.
      // Then a delete sent together with writes that add goes through whatever its group: sent while
      // the writer commits another delete, they are most likely one group (the serial writer groups
      // what arrives meanwhile), whose deletes are then committed alone; sent apart, they are not
      disk.fill();
      await fillThroughApi(alice, kept.id);
      const content = 'x'.repeat(16 * 1024);
      const delFirst = alice.del(`${BASE}/${first.id}`);
      const appends = [];
      for (let i = 0; i < 4; i++) appends.push(alice.post(`${BASE}/${kept.id}/turns`, { role: 'user', content }));
      const delTogether = alice.del(`${BASE}/${together.id}`);
      for (let i = 0; i < 4; i++) appends.push(alice.post(`${BASE}/${kept.id}/turns`, { role: 'user', content }));
      assert.equal((await delFirst).status, 200, (await delFirst).text);
      assert.equal((await delTogether).status, 200, (await delTogether).text);
      for (const r of await Promise.all(appends)) assert.ok(r.status === 201 || (r.status === 500 && r.body.message === 'Storage write failed'), `an append beside it: ${r.status} ${r.text}`);
      const acknowledged = await dump(s);
      assert.deepEqual([gone.id, first.id, together.id].filter((id) => id in acknowledged), [], 'the deleted sessions are gone');
      assert.deepEqual(acknowledged[trimmed.id].turns.map((x) => x._id), trimmed.turns.slice(0, 3), 'the deleted turn and its descendants are gone');

      // acknowledged, so durable: a SIGKILL, and a restart on the disk still full
      await s.kill();
      s = await startServer({ dataDir: disk.dir, env: { PURGE_INTERVAL: 'off' } });
      assert.deepEqual(await dump(s), acknowledged, 'after a SIGKILL and a restart: exactly what was acknowledged');
      await s.kill();

      // the commands that delete, on the stopped server (a killed one: its lock is taken over)
      const erased = runCli(['erase-user', '--user', 'bob'], { env: { DATA_DIR: disk.dir } });
      assert.equal(erased.code, 0, erased.stderr);
      assert.match(erased.stdout, /erased 2 sessions and 23 turns of user bob/);
      const purged = runCli(['purge'], { env: { DATA_DIR: disk.dir } });
      assert.equal(purged.code, 0, purged.stderr);
      assert.match(purged.stdout, /purged 1 expired sessions and 10 turns/);

      s = await startServer({ dataDir: disk.dir, env: { PURGE_INTERVAL: 'off' } });
      assert.deepEqual(await sessionsOf(s, 'bob'), [], "bob's sessions are erased");
      assert.deepEqual(await sessionsOf(s, 'carol'), [carolLive.id], "carol's expired session is purged, her live one kept");
      assert.equal((await s.request('GET', '/healthz')).status, 200);

      // a clean stop gives the reserve's room back: a command after it has room for its lock and its deletes
      await s.stop();
      assert.equal(existsSync(join(disk.dir, `${STORE_FILE}.reserve`)), false, 'a store at rest holds no reserve');
      const erasedAfterStop = runCli(['erase-user', '--user', 'dave'], { env: { DATA_DIR: disk.dir } });
      assert.equal(erasedAfterStop.code, 0, erasedAfterStop.stderr);
      assert.match(erasedAfterStop.stdout, /erased 1 sessions and 5 turns of user dave/);
      s = await startServer({ dataDir: disk.dir, env: { PURGE_INTERVAL: 'off' } });
      assert.deepEqual(await sessionsOf(s, 'dave'), [], "dave's sessions are erased");

      // space comes back: so do the writes that add
      disk.free();
      const alice2 = s.as('alice');
      const created = await alice2.post(BASE, newSession({ name: 'after' }));
      assert.equal(created.status, 201, created.text);
      assert.equal((await alice2.post(`${BASE}/${created.body.data._id}/turns`, { role: 'user', content: 'x'.repeat(16 * 1024) })).status, 201);
      assert.equal((await alice2.post(`${BASE}/${kept.id}/turns`, { role: 'user', content: 'again' })).status, 201);
      assert.equal(s.child.exitCode, null, 'the server is still running');
    } finally {
      await s?.stop();
      disk.release();
    }
  });

  test('[D-sqlite-11] the reserve is 16 MiB while the server runs, and gone after a clean stop', async (t) => {
    const s = await startServer();
    try {
      const fs = statfsSync(s.dataDir);
      if (fs.blocks * fs.bsize < 128 * 1024 ** 2) {
        t.skip('the temporary directory is on a file system smaller than 128 MiB (the reserve is an eighth of it)');
        return;
      }
      const reserve = join(s.dataDir, `${STORE_FILE}.reserve`);
      assert.equal(statSync(reserve).size, 16 * 1024 ** 2);
      assert.equal(statSync(reserve).mode & 0o777, 0o600);
      await s.stop();
      assert.equal(existsSync(reserve), false);
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });
});
