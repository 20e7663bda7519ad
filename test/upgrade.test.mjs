// The upgrade to conversations, over HTTP and the CLI: a store the first release wrote (the
// fixtures of test/fixtures/v1, made by that release's own build: see make.mjs there) and its
// exports, opened by this release on the engine of this run.
import assert from 'node:assert/strict';
import { copyFileSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { indexed, removeDir, runCli, startServer, STORE, storeEnv, tempDir } from './helpers.mjs';

const FIXTURES = fileURLToPath(new URL('./fixtures/v1/', import.meta.url));
const BASE = '/api/v1/chat-sessions';

/** The first release's store of this run's engine, in a fresh data directory. */
async function firstReleaseStore() {
  const dir = tempDir('csa-upgrade-');
  if (STORE === 'sqlite') copyFileSync(join(FIXTURES, 'chat-sessions.db'), join(dir, 'chat-sessions.db'));
  else {
    const { Pool } = createRequire(import.meta.url)('../dist/testkit.cjs');
    const { DATABASE_URL, DATABASE_SCHEMA } = storeEnv(dir);
    const pool = new Pool(DATABASE_URL, { max: 1 });
    try {
      await pool.exec(readFileSync(join(FIXTURES, 'postgres.sql'), 'utf8').replaceAll('__SCHEMA__', `"${DATABASE_SCHEMA}"`));
    } finally {
      await pool.end();
    }
  }
  return dir;
}

/** A turn of the first release as this release answers it: parentId after session, status before createdAt. */
function upgraded(turn, parentId) {
  const { _id, session, createdAt, ...rest } = turn;
  return { _id, session, parentId, ...rest, status: 'complete', createdAt };
}

describe('Upgrading from the first release', () => {
  test("[D-conversations-11] the first release's data answers as it did, ETags too, each turn under the one before", async () => {
    const dir = await firstReleaseStore();
    const answers = JSON.parse(readFileSync(join(FIXTURES, 'answers.json'), 'utf8'))[STORE];
    try {
      for (let round = 0; round < 2; round++) {
        const server = await startServer({ dataDir: dir });
        try {
          const alice = server.as('alice');
          for (const [id, was] of Object.entries(answers.sessions)) {
            const r = await alice.get(`${BASE}/${id}`);
            assert.equal(r.headers.etag, was.etag, `${id}: the ETag a client kept across the upgrade still matches (round ${round})`);
            assert.deepEqual(r.body.data, { ...was.session, headTurnId: was.turns.at(-1)?._id ?? null });
            const turns = (await alice.get(`${BASE}/${id}/turns`)).body.data;
            assert.deepEqual(turns, was.turns.map((t, i) => upgraded(t, i === 0 ? null : was.turns[i - 1]._id)), `${id}: the turns, in order, each under the one before`);
            assert.deepEqual((await alice.get(`${BASE}/${id}/turns?branch=head`)).body.data, turns);
          }
          for (const [who, ids] of Object.entries(answers.lists)) assert.deepEqual((await server.as(who).get(`${BASE}?archived=all`)).body.data.map((s) => s._id), ids);
        } finally {
          await server.stop();
        }
      }
    } finally {
      removeDir(dir);
    }
  });

  test('[D-search-16] every word the first release wrote is found by search after the upgrade', async () => {
    const dir = await firstReleaseStore();
    const answers = JSON.parse(readFileSync(join(FIXTURES, 'answers.json'), 'utf8'))[STORE];
    const server = await startServer({ dataDir: dir });
    try {
      const alice = server.as('alice');
      let checked = 0;
      for (const [id, was] of Object.entries(answers.sessions)) {
        const who = server.as(was.session.user);
        for (const t of was.turns) {
          const word = typeof t.content === 'string' ? t.content.match(/[\p{L}\p{N}]+/u)?.[0] : undefined;
          if (word === undefined) continue;
          const r = await who.get(`/api/v1/search?q=${encodeURIComponent(word)}&archived=all&limit=1000`);
          assert.equal(r.status, 200, r.text);
          assert.ok(r.body.data.some((h) => h.turnId === t._id && h.session._id === id), `${word}: turn ${t._id} is found`);
          checked++;
        }
      }
      assert.ok(checked > 0, 'the fixture has turns with words');
      void alice;
    } finally {
      await server.stop();
      removeDir(dir);
    }
  });

  test('[D-search-14] [D-search-12] with SEARCH=off the upgrade to schema 7 queues every turn; search on indexes them', { skip: STORE !== 'sqlite' && 'about the sqlite engine' }, async () => {
    const dir = await firstReleaseStore();
    const answers = JSON.parse(readFileSync(join(FIXTURES, 'answers.json'), 'utf8'))[STORE];
    const documents = Object.values(answers.sessions).reduce((n, was) => n + 1 + was.turns.length, 0);
    try {
      const off = await startServer({ dataDir: dir, env: { SEARCH: 'off' } });
      try {
        const m = await off.request('GET', '/metrics');
        assert.equal(Number(/^chat_session_api_sqlite_search_unindexed (\d+)$/m.exec(m.text)?.[1]), documents, 'every name and turn waits for the index');
      } finally {
        await off.stop();
      }
      const { DatabaseSync } = await import('node:sqlite');
      const db = new DatabaseSync(join(dir, 'chat-sessions.db'), { readOnly: true });
      try {
        for (const name of ['name_words', 'turn_words']) assert.match(db.prepare('SELECT sql FROM sqlite_schema WHERE name = ?').get(name).sql, /detail = 'none'/, name);
      } finally {
        db.close();
      }
      const on = await startServer({ dataDir: dir });
      try {
        await indexed(on);
        const [id, was] = Object.entries(answers.sessions).find(([, w]) => w.turns.some((t) => typeof t.content === 'string' && /[\p{L}\p{N}]/u.test(t.content)));
        const t = was.turns.find((x) => typeof x.content === 'string' && /[\p{L}\p{N}]/u.test(x.content));
        const word = t.content.match(/[\p{L}\p{N}]+/u)[0];
        const r = await on.as(was.session.user).get(`/api/v1/search?q=${encodeURIComponent(word)}&archived=all&limit=1000`);
        assert.equal(r.status, 200, r.text);
        assert.ok(r.body.data.some((h) => h.turnId === t._id && h.session._id === id), `${word}: turn ${t._id} is found`);
      } finally {
        await on.stop();
      }
    } finally {
      removeDir(dir);
    }
  });

  test('[D-backup-2] a version-1 backup imports with each turn under the one before it, each head its newest turn', async () => {
    const dir = tempDir('csa-upgrade-import-');
    try {
      const r = runCli(['import', join(FIXTURES, 'export.ndjson')], { env: { DATA_DIR: dir } });
      assert.equal(r.code, 0, r.stderr);
      const server = await startServer({ dataDir: dir });
      try {
        const alice = server.as('alice');
        const s = (await alice.get(`${BASE}/6a0000000000000000000001`)).body.data;
        assert.equal(s.headTurnId, '6a000000000000000000a004');
        const turns = (await alice.get(`${BASE}/6a0000000000000000000001/turns`)).body.data;
        assert.deepEqual(turns.map((t) => [t._id, t.parentId, t.status]), [
          ['6a000000000000000000a001', null, 'complete'],
          ['6a000000000000000000a002', '6a000000000000000000a001', 'complete'],
          ['6a000000000000000000a003', '6a000000000000000000a002', 'complete'],
          ['6a000000000000000000a004', '6a000000000000000000a003', 'complete'],
        ]);
        assert.equal((await alice.get(`${BASE}/6a0000000000000000000003`)).body.data.headTurnId, null, 'no turns, no head');
        // an export of this release round-trips it exactly
        const out = join(dir, '..', `${dir.split('/').pop()}.ndjson`);
        await server.stop();
        assert.equal(runCli(['export', '--out', out], { env: { DATA_DIR: dir } }).code, 0);
        const again = runCli(['import', out], { env: { DATA_DIR: dir } });
        assert.match(again.stdout, /nothing to import/);
        assert.match(readFileSync(out, 'utf8').split('\n')[0], /"version":2/);
        removeDir(out);
      } finally {
        await server.stop();
      }
    } finally {
      removeDir(dir);
    }
  });

  test('[D-conversations-12] a version-2 export whose parents or heads are out of place, or turns moved, is refused', async () => {
    const dir = tempDir('csa-upgrade-refuse-');
    const file = join(dir, 'b.ndjson');
    const header = (n, m) => JSON.stringify({ format: 'chat-session-api/export', version: 2, exportedAt: '2026-01-01T00:00:00.000Z', sessions: n, turns: m });
    const session = (id, head) => JSON.stringify({ session: { _id: id, name: '', provider: 'p', selectedModel: 'm', mode: 'Build', user: 'alice', project: 'p', createdAt: '2026-01-01T00:00:00.000Z', updatedAt: '2026-01-01T00:00:10.000Z', archived: false, headTurnId: head } });
    const turn = (id, sid, parentId, at) => JSON.stringify({ turn: { _id: id, session: sid, parentId, user: 'alice', role: 'user', content: 'c', status: 'complete', createdAt: at } });
    const S1 = '6d0000000000000000000001';
    const S2 = '6d0000000000000000000002';
    const T = (n) => `6d00000000000000000000a${n}`;
    const refused = (lines, pattern) => {
      writeFileSync(file, `${lines.join('\n')}\n`);
      const r = runCli(['import', file], { env: { DATA_DIR: dir } });
      assert.notEqual(r.code, 0, lines.join('\n'));
      assert.match(r.stderr, pattern);
    };
    try {
      refused([header(1, 2), session(S1, T(2)), turn(T(2), S1, T(1), '2026-01-01T00:00:02.000Z'), turn(T(1), S1, null, '2026-01-01T00:00:01.000Z')], /line 3: turn 6d00000000000000000000a2 has parentId 6d00000000000000000000a1, which is not a turn of its session listed above it/);
      refused([header(1, 2), session(S1, T(2)), turn(T(1), S1, null, '2026-01-01T00:00:02.000Z'), turn(T(2), S1, T(1), '2026-01-01T00:00:01.000Z')], /line 4: turn 6d00000000000000000000a2 is older than its parent/);
      refused([header(1, 1), session(S1, T(9)), turn(T(1), S1, null, '2026-01-01T00:00:01.000Z')], /line 2: session 6d0000000000000000000001 has headTurnId 6d00000000000000000000a9, which is not one of its turns in the file/);
      refused([header(1, 1), session(S1, null), JSON.stringify({ turn: { _id: T(1), session: S1, user: 'alice', role: 'user', content: 'c', status: 'complete', createdAt: '2026-01-01T00:00:01.000Z' } })], /line 3: turn parentId must be a turn _id or null/);
      refused([header(1, 0), JSON.stringify({ session: { ...JSON.parse(session(S1, null)).session, headTurnId: undefined } })], /line 2: session headTurnId must be a turn _id or null/);
      // a turn cannot move to another session
      writeFileSync(file, `${[header(2, 1), session(S1, T(1)), session(S2, null), turn(T(1), S1, null, '2026-01-01T00:00:01.000Z')].join('\n')}\n`);
      assert.equal(runCli(['import', file], { env: { DATA_DIR: dir } }).code, 0);
      refused([header(1, 1), session(S2, T(1)), turn(T(1), S2, null, '2026-01-01T00:00:01.000Z')], /turn 6d00000000000000000000a1 is stored in session 6d0000000000000000000001, the backup puts it in session 6d0000000000000000000002; nothing was imported/);
    } finally {
      removeDir(dir);
    }
  });
});

const BEFORE_TOKENS = fileURLToPath(new URL('./fixtures/tokens/', import.meta.url));

/** A store of the release before tokens were counted (sqlite schema 8, PostgreSQL schema 6: test/fixtures/tokens), in a fresh data directory. */
async function storeBeforeTokens() {
  const dir = tempDir('csa-upgrade-tokens-');
  if (STORE === 'sqlite') copyFileSync(join(BEFORE_TOKENS, 'chat-sessions.db'), join(dir, 'chat-sessions.db'));
  else {
    const { Pool } = createRequire(import.meta.url)('../dist/testkit.cjs');
    const { DATABASE_URL, DATABASE_SCHEMA } = storeEnv(dir);
    const pool = new Pool(DATABASE_URL, { max: 1 });
    try {
      await pool.exec(readFileSync(join(BEFORE_TOKENS, 'postgres.sql'), 'utf8').replaceAll('__SCHEMA__', `"${DATABASE_SCHEMA}"`));
      // the turn left streaming was written when the fixture was made: as if its instance wrote it
      // a moment ago (else STREAMING_IDLE's sweep interrupts it once the fixture is 5 minutes old)
      await pool.exec(`UPDATE "${DATABASE_SCHEMA}".turns SET streamed_at = clock_timestamp() WHERE streamed_at IS NOT NULL`);
    } finally {
      await pool.end();
    }
  }
  return dir;
}

describe('Upgrading to deltas of their own and usage with tokens', () => {
  test("[D-finding-2] the migration sums each user's tokens from the turns its sessions hold; the rest as it was", async () => {
    const dir = await storeBeforeTokens();
    const answers = JSON.parse(readFileSync(join(BEFORE_TOKENS, 'answers.json'), 'utf8'))[STORE];
    let server = await startServer({ dataDir: dir });
    try {
      for (let round = 0; round < 2; round++) {
        // sqlite's start interrupts the turn left streaming (an edit: "interrupted" is 2 bytes longer than "streaming")
        const interrupted = (t) => (STORE === 'sqlite' && t._id === answers.streaming.turn ? { ...t, status: 'interrupted' } : t);
        for (const [who, was] of Object.entries(answers.usage)) {
          const u = server.as(who);
          const expected = { ...was, bytes: was.bytes + (STORE === 'sqlite' && who === 'alice' ? 2 : 0), inputTokens: 0, outputTokens: 0, cachedTokens: 0 };
          for (const s of (await u.get(`${BASE}?archived=all`)).body.data) {
            const turns = (await u.get(`${BASE}/${s._id}/turns`)).body.data;
            assert.deepEqual(turns, answers.turns[s._id].map(interrupted), `round ${round}: the turns of ${s._id}`);
            for (const t of turns) {
              expected.inputTokens += t.usage?.inputTokens ?? 0;
              expected.outputTokens += t.usage?.outputTokens ?? 0;
              expected.cachedTokens += t.usage?.cachedTokens ?? 0;
            }
          }
          assert.deepEqual((await u.get('/api/v1/usage')).body.data, expected, `round ${round}: usage of ${who}`);
        }
        const aliceNow = (await server.as('alice').get('/api/v1/usage')).body.data;
        assert.deepEqual([aliceNow.inputTokens, aliceNow.outputTokens, aliceNow.cachedTokens], [1253, 404, 1032], 'the tokens of the fixture, summed by hand');
        if (round === 0) {
          await server.stop();
          server = await startServer({ dataDir: dir });
        }
      }
      // sqlite interrupts a turn left streaming at its start: the text it held stays
      const { session: sid, turn: tid } = answers.streaming;
      const alice = server.as('alice');
      const t = (await alice.get(`${BASE}/${sid}/turns/${tid}`)).body.data;
      assert.equal(t.content, 'so far and on and «on»');
      if (STORE === 'postgres') {
        const d = await alice.post(`${BASE}/${sid}/turns/${tid}/deltas`, { text: '!' });
        assert.equal(d.status, 200, d.text);
        assert.equal(d.body.data.at, t.content.length);
        assert.equal((await alice.put(`${BASE}/${sid}/turns/${tid}`, { status: 'complete' })).body.data.content, `${t.content}!`);
      } else assert.equal(t.status, 'interrupted');
    } finally {
      await server.stop();
      removeDir(dir);
    }
  });
});
