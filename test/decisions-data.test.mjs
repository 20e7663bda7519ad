// docs/DECISIONS.md, "The data directory", "Finding and keeping", "Storage engines" and "The
// journal's retirement": the decisions no other test pinned, on the real server and the real
// command line. On every engine unless the decision is one engine's.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { crc32 } from 'node:zlib';
import { BASE, metric } from './api-kit.mjs';
import { newSession, removeDir, runCli, startServer, STORE, storeEnv, tempDir } from './helpers.mjs';

const SQLITE = STORE === 'sqlite' ? {} : { skip: `about the sqlite engine; this run tests STORE=${STORE}` };
const POSTGRES = STORE === 'postgres' ? {} : { skip: `about the PostgreSQL engine; this run tests STORE=${STORE}` };

/** This process's start tick from /proc (field 22 of its stat), as the lock records it; undefined off Linux. */
function procStart(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}

/** A journal of the retired engine holding `records` (after its header), each line `<crc32> <JSON>`. */
function journal(records) {
  const lines = [{ format: 'chat-session-api/journal', version: 2, createdAt: '2026-01-01T00:00:00.000Z' }, ...records].map((r) => {
    const json = JSON.stringify(r);
    return `${crc32(Buffer.from(json)).toString(16).padStart(8, '0')} ${json}\n`;
  });
  return lines.join('');
}

describe('The data directory (docs/DECISIONS.md)', () => {
  test("[D-datadir-2] the lock records pid, host, start time and start tick; another host's lock is never taken over", { skip: procStart(process.pid) === undefined && 'no /proc here' }, async () => {
    const dir = tempDir('csa-lock-');
    const lock = join(dir, 'lock');
    try {
      // a live pid (this test's) whose start tick is not the one recorded: the pid was reused, the lock is stale
      writeFileSync(lock, JSON.stringify({ pid: process.pid, host: hostname(), startedAt: '2020-01-01T00:00:00.000Z', procStart: 'not-its-tick' }));
      const s = await startServer({ dataDir: dir });
      try {
        assert.ok(s.logs().some((l) => l.msg === 'took over a stale data directory lock' && l.pid === process.pid), 'a reused pid is not the holder');
        const held = JSON.parse(readFileSync(lock, 'utf8'));
        assert.deepEqual(Object.keys(held).sort(), ['host', 'pid', 'procStart', 'startedAt']);
        assert.deepEqual([held.pid, held.host, held.procStart], [s.child.pid, hostname(), procStart(s.child.pid)]);
      } finally {
        await s.stop();
      }
      // the same live pid with its own tick: the holder, so the start is refused
      writeFileSync(lock, JSON.stringify({ pid: process.pid, host: hostname(), startedAt: '2020-01-01T00:00:00.000Z', procStart: procStart(process.pid) }));
      const refused = runCli([], { env: { DATA_DIR: dir, PORT: '0' } });
      assert.equal(refused.code, 1);
      assert.match(refused.stderr, new RegExp(`is in use by process ${process.pid} \\(since 2020-01-01T00:00:00\\.000Z\\); stop that process first`));
      // another host's lock, even one naming no live process here: never taken over
      writeFileSync(lock, JSON.stringify({ pid: 999_999, host: 'another-host.example', startedAt: '2020-01-01T00:00:00.000Z' }));
      const foreign = runCli([], { env: { DATA_DIR: dir, PORT: '0' } });
      assert.equal(foreign.code, 1);
      assert.equal(foreign.stderr.trim().split('\n').length, 1);
      assert.match(foreign.stderr, /in use by process 999999 on host another-host\.example/);
      assert.ok(foreign.stderr.includes(`if that is wrong, remove ${lock}`), foreign.stderr);
      assert.equal(JSON.parse(readFileSync(lock, 'utf8')).host, 'another-host.example', 'the lock is left as it was');
    } finally {
      removeDir(dir);
    }
  });
});

describe('Finding and keeping (docs/DECISIONS.md)', () => {
  test("[D-finding-12] erase-user erases the user's sessions, archived and expired, and keeps their turns in others'", async () => {
    const s = await startServer({ env: { PURGE_INTERVAL: 'off' } });
    try {
      const alice = s.as('alice');
      const bob = s.as('bob');
      const mine = (await alice.post(BASE, newSession({ name: 'alice owns it' }))).body.data;
      await alice.post(`${BASE}/${mine._id}/turns`, { role: 'user', content: 'alice in her own' });
      await bob.post(`${BASE}/${mine._id}/turns`, { role: 'assistant', content: 'bob in alice\'s' });
      const archived = (await alice.post(BASE, newSession({ name: 'archived' }))).body.data;
      await alice.post(`${BASE}/${archived._id}/archive`);
      await alice.post(BASE, newSession({ name: 'expired', expiresAt: '2020-01-01T00:00:00Z' }));
      const theirs = (await bob.post(BASE, newSession({ name: 'bob owns it' }))).body.data;
      const kept = (await alice.post(`${BASE}/${theirs._id}/turns`, { role: 'user', content: 'alice in bob\'s' })).body.data;
      assert.deepEqual((await alice.get('/api/v1/usage')).body.data.turns, 2, 'her usage: every turn in her sessions, whoever wrote it');
      await s.stop();
      const r = runCli(['erase-user', '--user', 'alice'], { env: { DATA_DIR: s.dataDir } });
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, /erased 3 sessions and 2 turns of user alice \(\d+ bytes; tokens: 0 input, 0 output, 0 cached\)\n$/);
      const again = await startServer({ dataDir: s.dataDir, env: { PURGE_INTERVAL: 'off' } });
      try {
        const a = again.as('alice');
        assert.deepEqual((await a.get('/api/v1/usage')).body.data, { sessions: 0, turns: 0, bytes: 0, inputTokens: 0, outputTokens: 0, cachedTokens: 0 });
        assert.equal((await a.get(`${BASE}/${mine._id}`)).status, 404);
        const left = (await again.as('bob').get(`${BASE}/${theirs._id}/turns`)).body.data;
        assert.deepEqual(left, [kept], 'her turn in bob\'s session stays');
        assert.equal((await again.as('bob').get('/api/v1/usage')).body.data.turns, 1);
      } finally {
        await again.stop();
      }
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });
});

describe('Storage engines (docs/DECISIONS.md)', () => {
  test('[D-engines-8] with GROUP_COMMIT=off writes sent together commit one by one, each answered and kept', async () => {
    const s = await startServer({ env: { GROUP_COMMIT: 'off' } });
    try {
      const u = s.as('alice');
      const before = await metric(s, 'chat_session_api_commit_duration_seconds_count');
      const made = await Promise.all(Array.from({ length: 24 }, (_, i) => u.post(BASE, newSession({ name: `c${i}` }))));
      assert.ok(made.every((r) => r.status === 201));
      assert.equal((await metric(s, 'chat_session_api_commit_duration_seconds_count')) - before, 24, 'one commit per write');
      assert.equal((await u.get(BASE)).body.data.length, 24);
      assert.match(runCli(['--help']).stdout, /GROUP_COMMIT \/ --group-commit +off only to measure/);
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('[D-sqlite-1] with no STORE the data is a sqlite file in the data directory', SQLITE, async () => {
    const s = await startServer({ env: { STORE: undefined } });
    try {
      assert.equal((await s.request('GET', '/healthz')).body.data.store, 'sqlite');
      assert.equal((await s.as('alice').post(BASE, newSession())).status, 201);
      assert.ok(readdirSync(s.dataDir).includes('chat-sessions.db'));
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('[D-sqlite-4] the database and its log are 0600, the file is in WAL mode, and a clean stop leaves no log', SQLITE, async () => {
    const s = await startServer();
    try {
      assert.equal((await s.as('alice').post(BASE, newSession())).status, 201);
      for (const f of ['chat-sessions.db', 'chat-sessions.db-wal']) assert.equal(statSync(join(s.dataDir, f)).mode & 0o777, 0o600, f);
      const header = readFileSync(join(s.dataDir, 'chat-sessions.db')).subarray(0, 100);
      assert.deepEqual([header[18], header[19]], [2, 2], 'the file format says WAL (read and write versions 2)');
      await s.stop();
      assert.deepEqual(readdirSync(s.dataDir).filter((f) => f.startsWith('chat-sessions.db')), ['chat-sessions.db'], 'checkpointed and truncated at the close');
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('[D-postgres-1] a schema of its own; a NUL in a user id or name is escaped in the indexed columns, not the JSON', POSTGRES, async () => {
    const s = await startServer();
    try {
      const u = s.as('nul\u0000user');
      const made = await u.post(BASE, newSession({ name: 'a\u0000name', projectId: 'p\u0000roject' }));
      assert.equal(made.status, 201, made.text);
      assert.deepEqual([made.body.data.user, made.body.data.name, made.body.data.project], ['nul\u0000user', 'a\u0000name', 'p\u0000roject']);
      assert.deepEqual((await u.get(BASE)).body.data, [made.body.data], 'listed by its user');
      assert.deepEqual((await u.get(`${BASE}?projectId=${encodeURIComponent('p\u0000roject')}`)).body.data, [made.body.data], 'listed by its project');
      assert.deepEqual((await u.get(`${BASE}?q=${encodeURIComponent('\u0000na')}`)).body.data, [made.body.data], 'found by its name');
      const t = await u.post(`${BASE}/${made.body.data._id}/turns`, { role: 'user', content: 'hello\u0000there' });
      assert.equal(t.status, 201, t.text);
      assert.equal((await u.get(`${BASE}/${made.body.data._id}/turns`)).body.data[0].content, 'hello\u0000there');
      // every table is in the schema of DATABASE_SCHEMA: another service's tables beside it are left alone
      const { Pool } = createRequire(import.meta.url)('../dist/testkit.cjs');
      const pool = new Pool(process.env.CSA_TEST_DATABASE_URL, { max: 1 });
      try {
        const schema = storeEnv(s.dataDir).DATABASE_SCHEMA;
        const rows = (await pool.query("SELECT table_schema, table_name FROM information_schema.tables WHERE table_schema NOT IN ('pg_catalog', 'information_schema') AND table_name IN ('sessions', 'turns')")).rows;
        const ours = rows.filter((r) => (r.table_schema ?? r[0]) === schema);
        assert.equal(ours.length, 2, JSON.stringify(rows));
      } finally {
        await pool.end();
      }
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });
});

describe("The journal's retirement (docs/DECISIONS.md)", () => {
  test('[D-journal-10] turns whose session is missing are dropped with a warning; the log names the journal read', () => {
    const dir = tempDir('csa-orphans-');
    try {
      const session = { _id: '6b0000000000000000000001', name: 'kept', provider: 'p', selectedModel: 'm', mode: 'Build', user: 'alice', project: 'p1', createdAt: '2026-01-01T00:00:01.000Z', updatedAt: '2026-01-01T00:00:01.000Z', archived: false, headTurnId: null };
      const orphan = { _id: '6b0000000000000000000002', session: '6b00000000000000000000ff', parentId: null, user: 'alice', role: 'user', content: 'no session', status: 'complete', createdAt: '2026-01-01T00:00:02.000Z' };
      writeFileSync(join(dir, 'sessions.journal'), journal([{ put: session }, { turn: orphan }]));
      const r = runCli(['migrate'], { env: { DATA_DIR: dir } });
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, /^migrated 1 sessions and 0 turns into /);
      const logs = r.stderr.trim().split('\n').map((l) => JSON.parse(l));
      assert.ok(logs.some((l) => l.level === 'warn' && l.msg === 'dropped turns whose session does not exist' && l.turns === 1), r.stderr);
      assert.ok(logs.some((l) => /^reading the journal of an earlier release/.test(l.msg) && JSON.stringify(l.files) === '["sessions.journal"]'), 'the journal it read is named');
      const exported = runCli(['export'], { env: { DATA_DIR: dir } });
      assert.deepEqual(exported.stdout.trim().split('\n').slice(1).map((l) => Object.keys(JSON.parse(l))[0]), ['session'], 'the session, without the orphan');
    } finally {
      removeDir(dir);
    }
  });
});
