// Damage to the sqlite engine's files is found, never served: its write-ahead log is checked
// before SQLite replays it (which silently drops every commit after a bad frame), the database
// file cheaply at start, and wholly in the background after it. All on real files that a real
// server wrote, killed with SIGKILL where a crash is what leaves them.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, existsSync, readFileSync, rmSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { dump, waitFor } from '../api-kit.mjs';
import { newSession, removeDir, runCli, SECRET, startServer, STORE, tempDir } from '../helpers.mjs';

const SQLITE = STORE === 'sqlite' ? {} : { skip: `about the sqlite engine's files; this run tests STORE=${STORE}` };
const DB = 'chat-sessions.db';
const BASE = '/api/v1/chat-sessions';

/** The frames of a write-ahead log: where each starts, its page, its commit size (0: none), whether its salts are the header's. */
function walFrames(wal) {
  const pageSize = wal.readUInt32BE(8);
  const salts = wal.subarray(16, 24);
  const frames = [];
  for (let at = 32; at + 24 + pageSize <= wal.length; at += 24 + pageSize) {
    frames.push({ at, page: wal.readUInt32BE(at), commit: wal.readUInt32BE(at + 4), ours: wal.subarray(at + 8, at + 16).equals(salts) });
  }
  return { pageSize, frameSize: 24 + pageSize, frames };
}

/**
 * The same log as a big-endian machine writes it (magic 0x377f0683: the checksums read
 * big-endian words), its frames of the header's salts re-summed up to the first that is not.
 */
function asBigEndian(wal) {
  const out = Buffer.from(wal);
  const sum = (from, to, [a, b]) => {
    for (let i = from; i < to; i += 8) {
      a = (a + out.readUInt32BE(i) + b) >>> 0;
      b = (b + out.readUInt32BE(i + 4) + a) >>> 0;
    }
    return [a, b];
  };
  out.writeUInt32BE(0x377f0683, 0);
  let s = sum(0, 24, [0, 0]);
  out.writeUInt32BE(s[0], 24);
  out.writeUInt32BE(s[1], 28);
  const { frames, frameSize } = walFrames(out);
  for (const f of frames) {
    if (!f.ours) break;
    s = sum(f.at + 24, f.at + frameSize, sum(f.at, f.at + 8, s));
    out.writeUInt32BE(s[0], f.at + 16);
    out.writeUInt32BE(s[1], f.at + 20);
  }
  return out;
}

/** A digest of the database, its log and their index, to prove that a refused start changed none of them. */
function filesOf(dir) {
  return Object.fromEntries([DB, `${DB}-wal`, `${DB}-shm`].map((f) => [f, existsSync(join(dir, f)) ? createHash('sha256').update(readFileSync(join(dir, f))).digest('hex') : null]));
}

/** Starts a server on `dir` and returns the one line it stopped with: it must not start. */
function refusedStart(dir) {
  const r = runCli([], { env: { PORT: '0', DATA_DIR: dir, AUTH_SECRET: SECRET, STORE: 'sqlite' } });
  assert.equal(r.code, 1, `it started: ${r.stdout}`);
  const lines = r.stderr.trim().split('\n');
  assert.equal(lines.length, 1, `one line: ${r.stderr}`);
  assert.match(lines[0], /^chat-session-api: /);
  return lines[0];
}

/** Runs `body` in a node:sqlite process on the database `file` (it may end itself with SIGKILL, as a crash would). */
function withSqlite(file, body) {
  const script = `const { DatabaseSync } = require('node:sqlite'); const db = new DatabaseSync(${JSON.stringify(file)}); ${body}`;
  const r = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8' });
  if (r.status !== 0 && r.signal !== 'SIGKILL') throw new Error(`the node:sqlite script failed: ${r.stderr}`);
}

/** What a server of `dir` shows, and its log; it must start. */
async function startedOn(dir, env = {}) {
  const s = await startServer({ dataDir: dir, env });
  try {
    return { state: await dump(s), logs: s.logs() };
  } finally {
    await s.stop();
  }
}

/**
 * A data directory whose log holds at least `commits` committed transactions of its current
 * salts, left by a server killed with SIGKILL; with what alice saw acknowledged. Sessions are
 * written until the log holds that many (a checkpoint may start the log afresh at any time).
 */
async function killedWithLog(commits) {
  const dir = tempDir('csa-wal-');
  const s = await startServer({ dataDir: dir });
  const u = s.as('alice');
  let n = 0;
  const committed = () => walFrames(readFileSync(join(dir, `${DB}-wal`))).frames.filter((f) => f.ours && f.commit !== 0).length;
  do {
    for (let i = 0; i < 8; i++) assert.equal((await u.post(BASE, newSession({ name: `s${n++} ${'x'.repeat(400)}` }))).status, 201);
  } while (committed() < commits);
  const acknowledged = await dump(s);
  await s.kill();
  return { dir, acknowledged };
}

describe('The sqlite write-ahead log is checked before SQLite replays it', SQLITE, () => {
  test('[D-engines-5] a frame overwritten mid-WAL after SIGKILL stops the start naming the -wal; nothing changed', async () => {
    const { dir, acknowledged } = await killedWithLog(6);
    const copy = tempDir('csa-wal-copy-');
    try {
      const walFile = join(dir, `${DB}-wal`);
      const wal = readFileSync(walFile);
      const { frames, pageSize } = walFrames(wal);
      const commits = frames.filter((f) => f.ours && f.commit !== 0);
      // the frame after the second commit: several committed transactions follow it
      const victim = frames[frames.indexOf(commits[1]) + 1];
      assert.ok(victim.ours && frames.slice(frames.indexOf(victim) + 1).some((f) => f.ours && f.commit !== 0), 'committed transactions follow the damaged frame');
      wal.write('DAMAGED!', victim.at + 24 + pageSize / 2, 'latin1');
      writeFileSync(walFile, wal);
      cpSync(dir, copy, { recursive: true });
      const before = filesOf(dir);
      const line = refusedStart(dir);
      const frame = frames.indexOf(victim) + 1;
      assert.match(line, new RegExp(`${DB}-wal: has a damaged frame ${frame} \\(byte offset ${victim.at}: its checksum does not match\\) with \\d+ committed transaction\\(s\\) after it, so it is not an interrupted final write; restore the database from a backup \\(\`import\` into a new SQLITE_FILE\\)\\. Nothing was changed\\.$`));
      assert.deepEqual(filesOf(dir), before, 'the database, its log and its index are left as they were');
      const exported = runCli(['export'], { env: { DATA_DIR: dir, STORE: 'sqlite' } });
      assert.equal(exported.code, 1, exported.stdout.slice(0, 200));
      assert.match(exported.stderr, new RegExp(`${DB}-wal: has a damaged frame ${frame} `));
      assert.deepEqual(filesOf(dir), before, 'export changed nothing either');
      // what the check prevents: SQLite alone opens the copy and serves it without the sessions after the damage
      const { DatabaseSync } = process.getBuiltinModule('node:sqlite');
      const db = new DatabaseSync(join(copy, DB), { readOnly: true });
      const served = db.prepare('SELECT count(*) AS n FROM sessions').get().n;
      db.close();
      assert.ok(served < Object.keys(acknowledged).length, `SQLite alone serves ${served} of ${Object.keys(acknowledged).length} acknowledged sessions`);
    } finally {
      removeDir(dir);
      removeDir(copy);
    }
  });

  test('[D-sqlite-7] a damaged WAL header with frames after it is damage; alone, cut short or before half a frame not', async () => {
    const { dir } = await killedWithLog(2);
    const copies = [];
    try {
      const walFile = join(dir, `${DB}-wal`);
      const wal = readFileSync(walFile);
      const damaged = Buffer.from(wal);
      damaged[13] ^= 0xff; // the checkpoint sequence: only the header's checksum tells
      writeFileSync(walFile, damaged);
      const before = filesOf(dir);
      assert.match(refusedStart(dir), new RegExp(`${DB}-wal: has a damaged header \\(its checksum does not match\\) with ${wal.length - 32} bytes of frames after it, so it is not an interrupted first write; restore the database from a backup`));
      assert.deepEqual(filesOf(dir), before, 'nothing is changed');
      // an interrupted first write: what a stopped server's file (no log) gets before its first frame is whole
      const stopped = await stoppedWithTurns();
      copies.push(stopped.dir);
      const { state: expected } = await startedOn(stopped.dir);
      const frameSize = 24 + wal.readUInt32BE(8);
      for (const [what, bytes] of [['a header alone', wal.subarray(0, 32)], ['a header cut short', wal.subarray(0, 20)], ['a damaged header and part of a frame', Buffer.concat([damaged.subarray(0, 32), wal.subarray(32, 32 + frameSize - 1)])]]) {
        const copy = tempDir('csa-wal-first-');
        copies.push(copy);
        cpSync(stopped.dir, copy, { recursive: true });
        writeFileSync(join(copy, `${DB}-wal`), bytes);
        const { state, logs } = await startedOn(copy);
        assert.deepEqual(state, expected, what);
        assert.ok(!logs.some((l) => l.level === 'error'), `${what}: ${JSON.stringify(logs.filter((l) => l.level === 'error'))}`);
      }
    } finally {
      removeDir(dir);
      for (const c of copies) removeDir(c);
    }
  });

  test('[D-sqlite-7] a log with big-endian checksums is checked the same: sound it starts, damaged mid-way it stops', async () => {
    const { dir, acknowledged } = await killedWithLog(4);
    const copy = tempDir('csa-wal-be-');
    try {
      const walFile = join(dir, `${DB}-wal`);
      const wal = asBigEndian(readFileSync(walFile));
      writeFileSync(walFile, wal);
      cpSync(dir, copy, { recursive: true });
      const { state, logs } = await startedOn(dir);
      assert.deepEqual(state, acknowledged);
      assert.ok(!logs.some((l) => l.level === 'error'), JSON.stringify(logs.filter((l) => l.level === 'error')));
      const { frames, pageSize } = walFrames(wal);
      const commits = frames.filter((f) => f.ours && f.commit !== 0);
      const victim = frames[frames.indexOf(commits[0]) + 1];
      wal.write('DAMAGED!', victim.at + 24 + pageSize / 2, 'latin1');
      writeFileSync(join(copy, `${DB}-wal`), wal);
      assert.match(refusedStart(copy), new RegExp(`${DB}-wal: has a damaged frame ${frames.indexOf(victim) + 1} \\(byte offset ${victim.at}: its checksum does not match\\) with \\d+ committed transaction\\(s\\) after it`));
    } finally {
      removeDir(dir);
      removeDir(copy);
    }
  });

  test('[D-sqlite-7] a torn tail, or a bad frame followed by frames that never commit, is no damage: every write is there', async () => {
    const { dir, acknowledged } = await killedWithLog(2);
    const copies = [];
    try {
      const file = join(dir, DB);
      const walFile = `${file}-wal`;
      const committedFrames = walFrames(readFileSync(walFile)).frames.length;
      // a transaction larger than its page cache spills frames into the log, then the process dies before COMMIT
      withSqlite(file, `db.exec('PRAGMA cache_size = 2; BEGIN IMMEDIATE; CREATE TABLE spilled (x BLOB)');
        const ins = db.prepare('INSERT INTO spilled VALUES (?)');
        for (let i = 0; i < 64; i++) ins.run(Buffer.alloc(3000, i));
        process.kill(process.pid, 'SIGKILL');`);
      const wal = readFileSync(walFile);
      const { frames, frameSize, pageSize } = walFrames(wal);
      const uncommitted = frames.slice(frames.findLastIndex((f) => f.ours && f.commit !== 0) + 1).filter((f) => f.ours);
      assert.ok(frames.length > committedFrames && uncommitted.length >= 4, `the killed transaction left ${uncommitted.length} frames that never commit`);
      const last = frames[frames.length - 1];
      const cases = {
        'its last frame cut short': (w) => w.subarray(0, last.at + frameSize / 2),
        'its last frame\'s last bytes overwritten': (w) => {
          w.write('TORNTAIL', last.at + frameSize - 8, 'latin1');
          return w;
        },
        'a bad frame followed by valid frames that never commit': (w) => {
          w.write('DAMAGED!', uncommitted[0].at + 24 + pageSize / 2, 'latin1');
          return w;
        },
      };
      for (const [what, tear] of Object.entries(cases)) {
        const copy = tempDir('csa-torn-');
        copies.push(copy);
        cpSync(dir, copy, { recursive: true });
        writeFileSync(join(copy, `${DB}-wal`), tear(Buffer.from(wal)));
        const { state, logs } = await startedOn(copy);
        assert.deepEqual(state, acknowledged, `${what}: every acknowledged write is there`);
        assert.ok(!logs.some((l) => l.level === 'error'), `${what}: ${JSON.stringify(logs.filter((l) => l.level === 'error'))}`);
      }
    } finally {
      removeDir(dir);
      for (const c of copies) removeDir(c);
    }
  });

  test('[D-sqlite-7] frames left from before a checkpoint restarted the log are ignored: every acknowledged write is there', async () => {
    const { dir, acknowledged } = await killedWithLog(4);
    try {
      const file = join(dir, DB);
      // every frame into the file, then one small transaction starts the log afresh over the first frames; killed before it closes
      withSqlite(file, `db.exec('PRAGMA wal_checkpoint(RESTART)');
        db.exec("BEGIN; UPDATE counters SET value = value + 1 WHERE name = 'sessions'; UPDATE counters SET value = value - 1 WHERE name = 'sessions'; COMMIT");
        process.kill(process.pid, 'SIGKILL');`);
      const { frames } = walFrames(readFileSync(`${file}-wal`));
      const firstLeftover = frames.findIndex((f) => !f.ours);
      assert.ok(firstLeftover > 0 && frames.slice(0, firstLeftover).some((f) => f.commit !== 0), 'the log starts with a committed transaction of its new salts');
      assert.ok(frames.length - firstLeftover >= 4, `${frames.length - firstLeftover} frames of the earlier log follow it`);
      const { state, logs } = await startedOn(dir);
      assert.deepEqual(state, acknowledged);
      assert.ok(!logs.some((l) => l.level === 'error'), JSON.stringify(logs.filter((l) => l.level === 'error')));
    } finally {
      removeDir(dir);
    }
  });
});

/** A stopped server's data directory: session "kept", and session "long" with enough turns to fill many pages of the turns table. */
async function stoppedWithTurns() {
  const dir = tempDir('csa-pages-');
  const s = await startServer({ dataDir: dir });
  const u = s.as('alice');
  const kept = (await u.post(BASE, newSession({ name: 'kept' }))).body.data._id;
  const long = (await u.post(BASE, newSession({ name: 'long' }))).body.data._id;
  for (let i = 0; i < 120; i++) assert.equal((await u.post(`${BASE}/${long}/turns`, { role: 'user', content: `turn ${i} ${'y'.repeat(1500)}` })).status, 201);
  await s.stop();
  assert.ok(!existsSync(join(dir, `${DB}-wal`)) || statSync(join(dir, `${DB}-wal`)).size === 0, 'a stop checkpoints the log into the file');
  return { dir, kept, long };
}

/** Overwrites the b-tree header of page `page` of the database in `dir` (its type, cell count and pointers): SQLite calls the page malformed once it reads it. */
function damagePage(dir, page) {
  const file = join(dir, DB);
  const bytes = readFileSync(file);
  const pageSize = bytes.readUInt16BE(16);
  bytes.fill(0xee, (page - 1) * pageSize, (page - 1) * pageSize + 12);
  writeFileSync(file, bytes);
}

/** A leaf page in the middle of the turns table (not its first: the start reads that one). */
function middleTurnsPage(dir) {
  const { DatabaseSync } = process.getBuiltinModule('node:sqlite');
  const db = new DatabaseSync(join(dir, DB), { readOnly: true });
  try {
    const leaves = db.prepare("SELECT pageno FROM dbstat WHERE name = 'turns' AND pagetype = 'leaf' ORDER BY path").all().map((r) => r.pageno);
    assert.ok(leaves.length >= 8, `${leaves.length} leaf pages`);
    return leaves[Math.floor(leaves.length / 2)];
  } finally {
    db.close();
  }
}

describe('Damage inside the sqlite file', SQLITE, () => {
  test('[D-sqlite-6] [D-sqlite-9] the full check finds damage after the start: writes 503 Storage damaged, reads go on', async () => {
    const { dir, kept } = await stoppedWithTurns();
    const env = { CHAT_SESSION_API_FAULTS: 'hurry:sqlite-check' };
    try {
      // a sound file: the check runs to its end and finds nothing
      let s = await startServer({ dataDir: dir, env });
      try {
        await waitFor(async () => /^chat_session_api_sqlite_full_checks_total 1$/m.test((await s.request('GET', '/metrics')).text), 'the first full check');
        assert.equal((await s.request('GET', '/healthz')).status, 200);
        assert.match((await s.request('GET', '/metrics')).text, /^chat_session_api_sqlite_damaged 0$/m);
      } finally {
        await s.stop();
      }
      damagePage(dir, middleTurnsPage(dir));
      s = await startServer({ dataDir: dir, env });
      try {
        const health = await waitFor(async () => {
          const r = await s.request('GET', '/healthz');
          return r.status === 503 ? r : undefined;
        }, 'the full check to find the damage');
        assert.deepEqual(health.body, { success: false, message: 'Storage damaged' });
        const u = s.as('alice');
        const refused = [await u.post(BASE, newSession({ name: 'new' })), await u.put(`${BASE}/${kept}`, { name: 'renamed' }), await u.del(`${BASE}/${kept}`)];
        for (const r of refused) assert.deepEqual([r.status, r.body], [503, { success: false, message: 'Storage damaged' }]);
        const read = await u.get(`${BASE}/${kept}`);
        assert.equal(read.status, 200);
        assert.equal(read.body.data.name, 'kept');
        assert.deepEqual((await u.get(BASE)).body.data.map((x) => x.name).sort(), ['kept', 'long']);
        const metrics = (await s.request('GET', '/metrics')).text;
        assert.match(metrics, /^chat_session_api_sqlite_damaged 1$/m);
        assert.match(metrics, /^chat_session_api_sqlite_full_checks_total 1$/m);
        const errors = s.logs().filter((l) => l.level === 'error');
        assert.equal(errors.length, 1, `one error line, however many writes were refused: ${JSON.stringify(errors)}`);
        assert.equal(errors[0].file, join(dir, DB));
        assert.match(errors[0].msg, /the sqlite file is damaged/);
        assert.match(errors[0].found, /^the full check \(PRAGMA quick_check\): /);
      } finally {
        await s.stop();
      }
    } finally {
      removeDir(dir);
    }
  });

  test('[D-sqlite-10] a read that meets damage answers 503, not 500, and marks the store damaged from then on', async () => {
    const { dir, kept, long } = await stoppedWithTurns();
    damagePage(dir, middleTurnsPage(dir));
    const s = await startServer({ dataDir: dir });
    try {
      const u = s.as('alice');
      assert.equal((await s.request('GET', '/healthz')).status, 200, 'nothing read the damaged page yet');
      const turns = await u.get(`${BASE}/${long}/turns`);
      assert.deepEqual([turns.status, turns.body], [503, { success: false, message: 'Storage damaged' }]);
      assert.deepEqual((await s.request('GET', '/healthz')).body, { success: false, message: 'Storage damaged' });
      assert.equal((await u.post(BASE, newSession({ name: 'new' }))).status, 503);
      assert.equal((await u.get(`${BASE}/${kept}`)).status, 200, 'reads elsewhere go on');
      const errors = s.logs().filter((l) => l.level === 'error');
      assert.equal(errors.length, 1, JSON.stringify(errors));
      assert.equal(errors[0].file, join(dir, DB));
      assert.match(errors[0].found, /^a read: database disk image is malformed/);
    } finally {
      await s.stop();
      removeDir(dir);
    }
  });

  test('[D-sqlite-10] a commit that meets damage marks the store damaged the same way', async () => {
    const dir = tempDir('csa-commit-');
    let s = await startServer({ dataDir: dir });
    const u = s.as('alice');
    for (let i = 0; i < 200; i++) assert.equal((await u.post(BASE, newSession({ name: `s${i}` }))).status, 201);
    const kept = (await u.post(BASE, newSession({ name: 'kept' }))).body.data._id;
    await s.stop();
    // the last leaf of alice's list index: where her next session's entry goes, which no start reads
    const { DatabaseSync } = process.getBuiltinModule('node:sqlite');
    const db = new DatabaseSync(join(dir, DB), { readOnly: true });
    const leaves = db.prepare("SELECT pageno FROM dbstat WHERE name = 'sessions_by_user' AND pagetype = 'leaf' ORDER BY path").all().map((r) => r.pageno);
    db.close();
    for (const f of [`${DB}-wal`, `${DB}-shm`]) rmSync(join(dir, f), { force: true });
    assert.ok(leaves.length >= 2, `${leaves.length} leaf pages`);
    damagePage(dir, leaves[leaves.length - 1]);
    s = await startServer({ dataDir: dir });
    try {
      const created = await s.as('alice').post(BASE, newSession({ name: 'new' }));
      assert.deepEqual([created.status, created.body], [503, { success: false, message: 'Storage damaged' }]);
      assert.deepEqual((await s.request('GET', '/healthz')).body, { success: false, message: 'Storage damaged' });
      assert.equal((await s.as('alice').get(`${BASE}/${kept}`)).status, 200, 'reads elsewhere go on');
      const errors = s.logs().filter((l) => l.level === 'error');
      assert.equal(errors.length, 1, JSON.stringify(errors));
      assert.equal(errors[0].file, join(dir, DB));
      assert.match(errors[0].found, /^a commit: /);
    } finally {
      await s.stop();
      removeDir(dir);
    }
  });

  test('[D-sqlite-8] the cheap check at start stops a damaged file with one line naming it; nothing is changed', async () => {
    const { dir } = await stoppedWithTurns();
    const file = join(dir, DB);
    const sound = readFileSync(file);
    const { DatabaseSync } = process.getBuiltinModule('node:sqlite');
    const db = new DatabaseSync(file, { readOnly: true });
    const turnsRoot = db.prepare("SELECT rootpage FROM sqlite_schema WHERE name = 'turns'").get().rootpage;
    db.close();
    // the empty log and index that reading left, so that each case starts from the stopped server's files
    for (const f of [`${DB}-wal`, `${DB}-shm`]) rmSync(join(dir, f), { force: true });
    const cases = [
      ['the file cut short', () => truncateSync(file, sound.length - 3 * 4096), /chat-sessions\.db: is cut short: the database has (\d+) pages of 4096 bytes, the file holds \d+ and its log 0 of the others; restore the database from a backup \(`import` into a new SQLITE_FILE\)\. Nothing was changed\.$/],
      ['a damaged header', () => writeFileSync(file, Buffer.concat([sound.subarray(0, 21), Buffer.from([0]), sound.subarray(22)])), /chat-sessions\.db: has a damaged header \(payload fractions\); restore the database from a backup/],
      ['the turns table\'s first page damaged', () => damagePage(dir, turnsRoot), /chat-sessions\.db: is damaged \(SQLite reports it malformed\); restore it from a backup/],
    ];
    try {
      for (const [what, damage, expected] of cases) {
        writeFileSync(file, sound);
        damage();
        const before = filesOf(dir);
        assert.match(refusedStart(dir), expected, what);
        assert.deepEqual(filesOf(dir), before, `${what}: nothing is changed`);
      }
    } finally {
      removeDir(dir);
    }
  });

  test('[D-sqlite-8] a checkpoint cut short by a kill, later pages still in the log, is not damage', async () => {
    const { dir } = await stoppedWithTurns();
    try {
      const file = join(dir, DB);
      const { state: before } = await startedOn(dir);
      const pagesBefore = statSync(file).size / 4096;
      // the database grows in the log only: the process dies before any checkpoint
      withSqlite(file, `db.exec('PRAGMA wal_autocheckpoint = 0; CREATE TABLE grown (x BLOB)');
        const ins = db.prepare('INSERT INTO grown VALUES (?)');
        for (let i = 0; i < 40; i++) ins.run(Buffer.alloc(3000, i));
        process.kill(process.pid, 'SIGKILL');`);
      const wal = readFileSync(`${file}-wal`);
      const { frames, pageSize } = walFrames(wal);
      // what a checkpoint writes first: the newest first page, which counts the new pages
      const first = frames.findLast((f) => f.ours && f.page === 1);
      const page1 = wal.subarray(first.at + 24, first.at + 24 + pageSize);
      assert.ok(page1.readUInt32BE(28) > pagesBefore, `the first page counts ${page1.readUInt32BE(28)} pages, the file holds ${pagesBefore}`);
      const bytes = readFileSync(file);
      page1.copy(bytes, 0);
      writeFileSync(file, bytes);
      const { state, logs } = await startedOn(dir);
      assert.deepEqual(state, before);
      assert.ok(!logs.some((l) => l.level === 'error'), JSON.stringify(logs.filter((l) => l.level === 'error')));
    } finally {
      removeDir(dir);
    }
  });
});
