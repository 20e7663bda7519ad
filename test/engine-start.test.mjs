// What each engine refuses to start on, one line naming the file or database and what to do,
// never a silent reset: a Node.js older than 22.13, a file that is not a store, a store of
// another application, one missing a table, one written by a newer release.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { indexed, newSession, removeDir, runCli, SECRET, startServer, STORE, storeEnv, tempDir } from './helpers.mjs';

/** The machine's own Node.js, when it is older than this release needs (a CI box's Debian Node 20): the start on it is refused. */
const OLD_NODE = (() => {
  for (const bin of [process.env.npm_node_execpath, '/usr/bin/node', '/usr/local/bin/node']) {
    if (bin === undefined || !existsSync(bin)) continue;
    const r = spawnSync(bin, ['--version'], { encoding: 'utf8' });
    const m = /^v(\d+)\.(\d+)/.exec(r.stdout ?? '');
    if (m !== null && (Number(m[1]) < 22 || (Number(m[1]) === 22 && Number(m[2]) < 13))) return { bin, version: r.stdout.trim() };
  }
  return undefined;
})();

/** Starts a server on `dir` with `env` and returns how it ended: it must not start. */
function refusedStart(dir, env) {
  const r = runCli([], { env: { PORT: '0', DATA_DIR: dir, AUTH_SECRET: SECRET, ...env } });
  assert.equal(r.code, 1, `it started: ${r.stdout}`);
  const lines = r.stderr.trim().split('\n');
  assert.equal(lines.length, 1, `one line: ${r.stderr}`);
  assert.match(lines[0], /^chat-session-api: /);
  return lines[0];
}

describe('Starting an engine', () => {
  test('[D-running-1] a start on an older Node stops with one line naming the Node.js found, and makes nothing', (t) => {
    if (OLD_NODE === undefined) return t.skip('no Node.js older than 22.13 on this machine to start it with');
    const dir = join(tempDir(), 'data');
    try {
      const r = runCli([], { env: { PORT: '0', DATA_DIR: dir, AUTH_SECRET: SECRET }, node: OLD_NODE.bin });
      assert.equal(r.code, 1, r.stdout);
      assert.equal(r.stderr, `chat-session-api: Node.js 22.13 or newer is needed (this is ${OLD_NODE.version.slice(1)}); \`npm start\` runs the Node.js of the \`node\` dev dependency, or see "Which Node.js" in the README\n`);
      assert.equal(existsSync(dir), false, 'no data directory made');
      const v = runCli(['--version'], { node: OLD_NODE.bin });
      assert.equal(v.code, 0, '--version still answers');
    } finally {
      removeDir(join(dir, '..'));
    }
  });

  test('[D-sqlite-3] a file that is not a database, or fails its check, stops the start naming it; never a reset', (t) => {
    if (STORE !== 'sqlite') return t.skip(`about the sqlite engine; this run tests STORE=${STORE}`);
    const { DatabaseSync } = process.getBuiltinModule('node:sqlite');
    const cases = [
      ['not a database', (file) => writeFileSync(file, 'chat history, but not a database\n'.repeat(200)), /chat-sessions\.db: is not a SQLite database; set SQLITE_FILE to the right file, or move this one aside/],
      ['another application', (file) => new DatabaseSync(file).exec('CREATE TABLE invoices (id INTEGER PRIMARY KEY)'), /chat-sessions\.db: is a SQLite database of another application; set SQLITE_FILE to a file of its own/],
    ];
    for (const [what, make, expect] of cases) {
      const dir = tempDir();
      try {
        const file = join(dir, 'chat-sessions.db');
        make(file);
        const before = readFileSync(file);
        assert.match(refusedStart(dir, { STORE: 'sqlite' }), expect, what);
        assert.ok(readFileSync(file).equals(before), `${what}: the file is left as it was`);
      } finally {
        removeDir(dir);
      }
    }
  });

  test('[D-sqlite-5] a second server or command naming a file another data directory serves stops; the first serves on', async (t) => {
    if (STORE !== 'sqlite') return t.skip(`about the sqlite engine; this run tests STORE=${STORE}`);
    if (process.platform !== 'linux') return t.skip('the guard is a name the Linux kernel holds');
    const shared = tempDir();
    const file = join(shared, 'shared.db');
    // hold:merge: an idle server merges its search index a second after its last write, and that write (with its checkpoint) would land among the snapshots below
    const first = await startServer({ env: { SQLITE_FILE: file, CHAT_SESSION_API_FAULTS: 'hold:merge' } });
    const other = tempDir();
    try {
      assert.equal((await first.as('alice').post('/api/v1/chat-sessions', newSession({ name: 'first' }))).status, 201);
      await indexed(first);
      // the file and its log as the first server left them (it writes nothing more meanwhile: no checkpoint either, checkpoints follow transactions)
      const snapshot = () => [file, `${file}-wal`].map((f) => (existsSync(f) ? readFileSync(f) : Buffer.alloc(0)));
      const before = snapshot();
      const line = refusedStart(other, { STORE: 'sqlite', SQLITE_FILE: file });
      assert.match(line, /shared\.db: is in use by another server or command on this host \(a SQLITE_FILE serves one at a time, whatever their DATA_DIR\); stop that one first, or give this one a file of its own\. Nothing was changed\./);
      const reindex = runCli(['reindex'], { env: { DATA_DIR: other, AUTH_SECRET: SECRET, STORE: 'sqlite', SQLITE_FILE: file } });
      assert.equal(reindex.code, 1, reindex.stdout);
      assert.match(reindex.stderr, /shared\.db: is in use by another server or command on this host/);
      snapshot().forEach((bytes, i) => assert.ok(bytes.equals(before[i]), `${['the file', 'its log'][i]} is left as it was`));
      const r = await first.as('alice').get('/api/v1/chat-sessions');
      assert.equal(r.status, 200);
      assert.deepEqual(r.body.data.map((x) => x.name), ['first']);
    } finally {
      await first.stop();
      removeDir(other);
    }
    try {
      // the name is the running store's, not the file's for good: stopped, the file serves another
      const again = await startServer({ dataDir: other, env: { SQLITE_FILE: file } });
      try {
        assert.deepEqual((await again.as('alice').get('/api/v1/chat-sessions')).body.data.map((x) => x.name), ['first']);
      } finally {
        await again.stop();
      }
    } finally {
      removeDir(other);
      removeDir(shared);
    }
  });

  test('[D-sqlite-3] a newer schema than the binary knows stops the start with one line; a file missing a table too', async (t) => {
    if (STORE !== 'sqlite') return t.skip(`about the sqlite engine; this run tests STORE=${STORE}`);
    const { DatabaseSync } = process.getBuiltinModule('node:sqlite');
    const s = await startServer();
    const dir = s.dataDir;
    try {
      await s.as('alice').post('/api/v1/chat-sessions', newSession({ name: 'kept' }));
      await s.stop();
      const file = join(dir, 'chat-sessions.db');
      const db = new DatabaseSync(file);
      // the version this release writes, given back below: the check, not a migration, must fail
      const current = db.prepare('PRAGMA user_version').get().user_version;
      db.exec('PRAGMA user_version = 99');
      db.close();
      assert.match(refusedStart(dir, { STORE: 'sqlite' }), /chat-sessions\.db: was written by a newer release \(schema version 99; this release knows up to \d+\); run that release, or `export` with it/);
      const db2 = new DatabaseSync(file);
      db2.exec(`PRAGMA user_version = ${current}; DROP INDEX sessions_by_project`);
      db2.close();
      assert.match(refusedStart(dir, { STORE: 'sqlite' }), /chat-sessions\.db: fails its check at start \(missing sessions_by_project\); restore it from a backup/);
      assert.ok(existsSync(file));
    } finally {
      removeDir(dir);
    }
  });

  test("[D-postgres-2] a newer schema, or one holding another application's tables, stops the start; neither changed", async (t) => {
    if (STORE !== 'postgres') return t.skip(`about the postgres engine; this run tests STORE=${STORE}`);
    const { Pool } = createRequire(import.meta.url)('../dist/testkit.cjs');
    const pool = new Pool(process.env.CSA_TEST_DATABASE_URL, { max: 1 });
    const dir = tempDir();
    try {
      const env = storeEnv(dir);
      const S = `"${env.DATABASE_SCHEMA}"`;
      await pool.exec(`CREATE SCHEMA ${S}; CREATE TABLE ${S}.meta (key text PRIMARY KEY, value text NOT NULL); INSERT INTO ${S}.meta VALUES ('schema_version', '99')`);
      assert.match(refusedStart(dir, env), /PostgreSQL postgres@127\.0\.0\.1:\d+\/postgres: schema t_[0-9a-f]+ was written by a newer release \(schema version 99; this release knows up to \d+\)/);
      assert.deepEqual((await pool.query(`SELECT value FROM ${S}.meta`)).rows, [['99']], 'left as it was');
      await pool.exec(`DROP SCHEMA ${S} CASCADE; CREATE SCHEMA ${S}; CREATE TABLE ${S}.invoices (id int)`);
      assert.match(refusedStart(dir, env), /schema t_[0-9a-f]+ holds tables of another application; set DATABASE_SCHEMA to a schema of this service's own/);
      assert.deepEqual((await pool.query(`SELECT tablename FROM pg_tables WHERE schemaname = $1`, [env.DATABASE_SCHEMA])).rows, [['invoices']], 'nothing added');
    } finally {
      await pool.end();
      removeDir(dir);
    }
  });
});
