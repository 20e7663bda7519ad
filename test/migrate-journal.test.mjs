// The journal engine is retired: a data directory it wrote is migrated into sqlite by the first
// start (or into PostgreSQL by the `migrate` command), and answers exactly as the last release
// with the journal answered it. The fixtures (test/fixtures/journal, made by that release's own
// build: see make.mjs there) are data directories in every state that release could leave.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, cpSync, existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { removeDir, runCli, startServer, STORE, tempDir } from './helpers.mjs';

const FIXTURES = fileURLToPath(new URL('./fixtures/journal/', import.meta.url));
const V1 = fileURLToPath(new URL('./fixtures/v1/', import.meta.url));
const ANSWERS = JSON.parse(readFileSync(join(FIXTURES, 'answers.json'), 'utf8'));
const B = '/api/v1/chat-sessions';
const QUERIES = ['launch', 'plans', 'naïve', 'upon', 'carol', 'long'];
// the fixtures' answers were taken with no purge running: so are these. On PostgreSQL a turn left
// streaming is interrupted once STREAMING_IDLE has passed since its last write (its migration):
// at once here, as the last release did at its start
const ENV = { PURGE_INTERVAL: 'off', ...(STORE === 'postgres' ? { STREAMING_IDLE: '1ms' } : {}) };

/** A fixture's data directory, copied to a new temporary one. */
function fixtureDir(name) {
  const dir = tempDir(`csa-migrate-${name}-`);
  cpSync(join(FIXTURES, name), dir, { recursive: true });
  return dir;
}

const journalFiles = (dir) => readdirSync(dir).filter((f) => f.startsWith('sessions.journal')).sort();

/** Makes the directory's store ready on this run's engine: sqlite migrates at start; postgres needs `migrate`. */
function migrateIfPostgres(dir) {
  if (STORE !== 'postgres') return;
  const r = runCli(['migrate'], { env: { DATA_DIR: dir } });
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /migrated \d+ sessions and \d+ turns into the PostgreSQL database; the journal is kept as sessions\.journal\.migrated/);
}

/** What a server answers, asked what make.mjs asked the last release. */
async function answersOf(server, was) {
  const ok = (r) => {
    assert.equal(r.status, 200, r.text);
    return r.body.data;
  };
  const out = { lists: {}, projects: {}, sessions: {}, usage: {}, search: {} };
  for (const who of Object.keys(was.lists)) {
    const u = server.as(who);
    out.lists[who] = ok(await u.get(`${B}?archived=all`));
    out.usage[who] = ok(await u.get('/api/v1/usage'));
    for (const q of QUERIES) out.search[`${who} ${q}`] = ok(await u.get(`/api/v1/search?q=${encodeURIComponent(q)}&archived=all`));
  }
  for (const p of Object.keys(was.projects)) out.projects[p] = ok(await server.as('alice').get(`${B}?projectId=${p}&archived=all`));
  for (const id of Object.keys(was.sessions)) {
    const r = await server.as('alice').get(`${B}/${id}`);
    assert.equal(r.status, 200, r.text);
    out.sessions[id] = { etag: r.headers.etag, session: r.body.data, turns: ok(await server.as('alice').get(`${B}/${id}/turns`)), head: ok(await server.as('alice').get(`${B}/${id}/turns?branch=head`)) };
  }
  return out;
}

/**
 * Answers with the times a start sets left out: a turn a crash left streaming is marked
 * interrupted at the start that follows, which moves its session's updatedAt (and ETag) to that
 * moment, on the last release as on this one.
 */
function withoutStartTimes(answers) {
  const moved = new Set(Object.entries(answers.sessions).filter(([, s]) => s.turns.some((t) => t.status === 'interrupted')).map(([id]) => id));
  if (moved.size === 0) return answers;
  return JSON.parse(JSON.stringify(answers), function (key, value) {
    if (value !== null && typeof value === 'object' && moved.has(value._id) && 'updatedAt' in value) return { ...value, updatedAt: '(the start)' };
    if (key === 'etag' && moved.has(this.session?._id)) return '(the start)';
    if (key === 'at' && moved.has(this._id)) return '(the start)';
    return value;
  });
}

async function assertAnswersAsBefore(dir, name) {
  const server = await startServer({ dataDir: dir, env: ENV });
  try {
    const was = ANSWERS[name];
    const now = await answersOf(server, was);
    const [a, b] = [withoutStartTimes(now), withoutStartTimes(was)];
    // usage gained token figures after that release (made from the turns' usage, see
    // upgrade.test.mjs): what it answered is compared, and the tokens are the turns' sums
    const asThen = Object.fromEntries(Object.entries(a.usage).map(([user, u]) => [user, Object.fromEntries(Object.keys(b.usage[user] ?? u).map((k) => [k, u[k]]))]));
    for (const part of ['sessions', 'lists', 'projects', 'usage', 'search']) assert.deepEqual(part === 'usage' ? asThen : a[part], b[part], `${name}: ${part} as the last release answered them`);
    for (const u of Object.values(a.usage)) for (const k of ['inputTokens', 'outputTokens', 'cachedTokens']) assert.ok(Number.isInteger(u[k]) && u[k] >= 0, `${name}: usage's ${k}`);
    return server;
  } catch (e) {
    await server.stop();
    throw e;
  }
}

describe('The journal retires behind a migration', () => {
  // how the last release left each journal of test/fixtures
  const left = { clean: 'stopped cleanly', torn: 'torn at its end', killed: 'killed mid-stream', 'two-files': 'in two files' };
  for (const name of ['clean', 'torn', 'killed', 'two-files']) {
    test(`[D-journal-2] [D-journal-4] a journal ${left[name]} migrates: answers as before, kept renamed, streaming interrupted`, async () => {
      const dir = fixtureDir(name);
      try {
        const before = journalFiles(dir);
        migrateIfPostgres(dir);
        let server = await assertAnswersAsBefore(dir, name);
        const logs = server.logs();
        await server.stop();
        if (STORE === 'sqlite') {
          assert.ok(logs.some((l) => l.msg === 'journal migrated into sqlite; the journal is kept, renamed, and no longer read'), 'the log says it migrated');
          if (name === 'torn') assert.ok(logs.some((l) => l.level === 'warn' && l.msg === 'dropped an interrupted final write from the journal; it was never acknowledged'), 'the torn tail is dropped with a warning');
          assert.ok(statSync(join(dir, 'chat-sessions.db')).size > 0);
        }
        assert.deepEqual(journalFiles(dir), before.map((f) => `${f}.migrated`).sort(), 'the journal is kept, renamed, never deleted');
        for (const f of before) assert.deepEqual(readFileSync(join(dir, `${f}.migrated`)), readFileSync(join(FIXTURES, name, f)), `${f}: unchanged`);
        server = await assertAnswersAsBefore(dir, name);
        assert.ok(!server.logs().some((l) => /migrat/.test(l.msg ?? '')), 'a restart migrates nothing');
        await server.stop();
      } finally {
        removeDir(dir);
      }
    });
  }

  test('[D-journal-3] a journal of the first release migrates with parents in order and the ETags it answered', async () => {
    const dir = tempDir('csa-migrate-v1-');
    const answers = JSON.parse(readFileSync(join(V1, 'answers.json'), 'utf8')).journal;
    try {
      copyFileSync(join(V1, 'sessions.journal'), join(dir, 'sessions.journal'));
      migrateIfPostgres(dir);
      const server = await startServer({ dataDir: dir, env: ENV });
      try {
        const alice = server.as('alice');
        for (const [id, was] of Object.entries(answers.sessions)) {
          const r = await alice.get(`${B}/${id}`);
          assert.equal(r.headers.etag, was.etag, `${id}: the ETag a client kept across the upgrade still matches`);
          assert.deepEqual(r.body.data, { ...was.session, headTurnId: was.turns.at(-1)?._id ?? null });
          const turns = (await alice.get(`${B}/${id}/turns`)).body.data;
          assert.deepEqual(turns.map((t) => [t._id, t.parentId, t.status]), was.turns.map((t, i) => [t._id, i === 0 ? null : was.turns[i - 1]._id, 'complete']));
        }
      } finally {
        await server.stop();
      }
    } finally {
      removeDir(dir);
    }
  });

  test('[D-journal-5] a directory holding a journal and a database, or a journal under STORE=postgres, is not served', async () => {
    const dir = tempDir('csa-migrate-both-');
    try {
      const first = await startServer({ dataDir: dir });
      await first.as('alice').post(B, { projectId: 'p', providerId: 'x', selectedModel: 'm' });
      await first.stop();
      copyFileSync(join(FIXTURES, 'clean', 'sessions.journal'), join(dir, 'sessions.journal'));
      const files = readdirSync(dir).sort();
      const db = STORE === 'sqlite' ? readFileSync(join(dir, 'chat-sessions.db')) : undefined;
      const r = spawnServer(dir);
      assert.equal(r.status, 1, r.stderr);
      const line = STORE === 'sqlite'
        ? /holds a journal of an earlier release \(sessions\.journal\) that was not migrated, and a sqlite database \(.*chat-sessions\.db\); the server serves neither\. To serve the database, move the journal out of the data directory; to migrate the journal instead, move the database aside; then start again\./
        : /holds a journal of an earlier release \(sessions\.journal\) that was not migrated, and STORE=postgres: the server does not serve it\. Run `node dist\/server\.js migrate` with the same settings/;
      assert.match(r.stderr, line);
      assert.equal(r.stderr.trim().split('\n').length, 1, 'one line');
      assert.deepEqual(readdirSync(dir).sort(), files, 'no file made, renamed or removed');
      if (db !== undefined) assert.deepEqual(readFileSync(join(dir, 'chat-sessions.db')), db);
      const e = runCli(['export'], { env: { DATA_DIR: dir } });
      assert.notEqual(e.code, 0, 'export refuses it too');
      assert.match(e.stderr, line);
    } finally {
      removeDir(dir);
    }
  });

  test('[D-journal-2] a migration SIGKILLed while copying, or mid-swap, is finished by the next start with every record', { skip: STORE !== 'sqlite' && 'the start migrates into sqlite' }, async () => {
    for (const point of ['migrate-middle', 'migrate-written', 'migrate-kept']) {
      const dir = fixtureDir('clean');
      try {
        const crashed = await startServer({ dataDir: dir, env: { ...ENV, CHAT_SESSION_API_FAULTS: `crash:${point}` } }).catch((e) => e);
        assert.ok(crashed instanceof Error && /exited before listening/.test(crashed.message), `${point}: the process died there`);
        assert.ok(!existsSync(join(dir, 'chat-sessions.db')) || statSync(join(dir, 'chat-sessions.db')).size === 0, `${point}: no database was put in place`);
        const server = await assertAnswersAsBefore(dir, 'clean');
        await server.stop();
        assert.deepEqual(journalFiles(dir), ['sessions.journal.migrated']);
        assert.ok(!readdirSync(dir).some((f) => f.includes('.migrating')), `${point}: nothing of the interrupted run is left`);
      } finally {
        removeDir(dir);
      }
    }
  });

  test('[D-journal-6] migrate says what it carried over and where the journal is kept; run again it has nothing to do', async () => {
    const dir = fixtureDir('clean');
    try {
      const r = runCli(['migrate'], { env: { DATA_DIR: dir } });
      assert.equal(r.code, 0, r.stderr);
      const where = STORE === 'sqlite' ? `${dir}/chat-sessions.db` : 'the PostgreSQL database';
      assert.ok(r.stdout.trim().endsWith(`migrated 68 sessions and 15 turns into ${where}; the journal is kept as sessions.journal.migrated`), r.stdout);
      const again = runCli(['migrate'], { env: { DATA_DIR: dir } });
      assert.equal(again.code, 0, again.stderr);
      assert.match(again.stdout, /nothing to migrate: .* holds no journal of an earlier release/);
      const server = await assertAnswersAsBefore(dir, 'clean');
      await server.stop();
    } finally {
      removeDir(dir);
    }
  });

  test('[D-journal-7] export reads a journal never migrated as it is, and leaves the directory as it was', { skip: STORE !== 'sqlite' && 'a directory with a journal and STORE=postgres is refused' }, async () => {
    const dir = fixtureDir('clean');
    try {
      const files = readdirSync(dir).sort();
      const fromJournal = runCli(['export'], { env: { DATA_DIR: dir } });
      assert.equal(fromJournal.code, 0, fromJournal.stderr);
      assert.match(fromJournal.stderr, /^exported \d+ sessions and \d+ turns from the journal of .*, not migrated yet$/m, 'the last line says it read the journal (issue 31, item 8: a forgotten STORE shows)');
      assert.deepEqual(readdirSync(dir).sort(), files, 'nothing migrated or made by an export');
      const server = await startServer({ dataDir: dir, env: ENV });
      await server.stop();
      const fromStore = runCli(['export'], { env: { DATA_DIR: dir } });
      assert.equal(fromStore.code, 0, fromStore.stderr);
      assert.match(fromStore.stderr, /^exported \d+ sessions and \d+ turns from sqlite .*\.db$/m);
      const body = (text) => text.split('\n').slice(1);
      assert.deepEqual(body(fromJournal.stdout), body(fromStore.stdout));
    } finally {
      removeDir(dir);
    }
  });

  test('[D-journal-1] STORE=journal stops the start with one line saying the engine is retired and what to set', () => {
    const r = runCli([], { env: { DATA_DIR: tempDir('csa-migrate-store-'), STORE: 'journal' } });
    assert.equal(r.code, 2);
    assert.match(r.stderr, /^chat-session-api: STORE=journal: the journal engine is retired; leave STORE unset \(sqlite: the first start migrates the journal of DATA_DIR\) or set it to postgres\n$/);
  });
});

/** Starts the server expecting it to stop at once: its exit status and stderr. */
function spawnServer(dir) {
  const r = runCli([], { env: { DATA_DIR: dir, PORT: '0', AUTH_SECRET: 'test-secret-0123456789abcdef0123456789abcdef' } });
  return { status: r.code, stderr: r.stderr };
}

