// What the tests of stored numbers share (docs/DECISIONS.md, "Numbers"): a small store made over
// HTTP, and the check that a store holding numbers out of range (poisoned by each engine's test
// in its own way) starts with one line saying what it repaired, serves, takes writes, restarts
// without repairing again, and exports a backup that imports.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { metric } from './api-kit.mjs';
import { forgetStore, removeDir, runCli, startServer, tempDir } from './helpers.mjs';

export const BASE = '/api/v1/chat-sessions';
/** 2^53 - 1: the largest count, and where a total stops. */
export const MAX = Number.MAX_SAFE_INTEGER;
/** The message of the start's one line when it repaired numbers. */
export const REPAIRED = /^numbers out of range were repaired/;

/** The log lines of a server that say it repaired numbers. */
export const repairLines = (s) => s.logs().filter((l) => REPAIRED.test(l.msg ?? ''));

/** What `GET /api/v1/usage` answers `who`. */
export async function usageOf(who) {
  const r = await who.get('/api/v1/usage');
  assert.equal(r.status, 200, r.text);
  return r.body.data;
}

/**
 * Exports the store of `dir` to a file, imports the file into a new store, and runs `check` on
 * that store's data directory; then removes both.
 */
export async function throughExport(dir, check = async () => {}) {
  const out = join(tempDir('csa-numbers-out-'), 'backup.ndjson');
  const fresh = tempDir('csa-numbers-import-');
  try {
    const e = runCli(['export', '--out', out], { env: { DATA_DIR: dir } });
    assert.equal(e.code, 0, e.stderr);
    const i = runCli(['import', out], { env: { DATA_DIR: fresh } });
    assert.equal(i.code, 0, `the export imports: ${i.stderr}`);
    await check(fresh);
  } finally {
    forgetStore(fresh);
    removeDir(fresh);
    removeDir(join(out, '..'));
  }
}

/** The token figures of a usage (or of /api/v1/usage's answer). */
export const tokens = (u) => [u.inputTokens, u.outputTokens, u.cachedTokens];

/** The store's token gauges of /metrics, input, output and cached. */
export async function storeTokens(s) {
  return Promise.all(['input', 'output', 'cached'].map((k) => metric(s, `chat_session_api_store_tokens\\{kind="${k}"\\}`)));
}

/**
 * A store made over HTTP and stopped: alice's session `a` holds `t1` (usage 10/20/5) and `t2` (a
 * second root, 30/40), bob's session `b` holds `u1` (1/2). Answers the data directory and ids.
 */
export async function smallStore() {
  const s = await startServer();
  try {
    const alice = s.as('alice');
    const bob = s.as('bob');
    const session = async (who) => (await who.post(BASE, { projectId: 'p', providerId: 'x', selectedModel: 'm', name: 'numbers' })).body.data._id;
    const turn = async (who, id, usage, parentId) => {
      const r = await who.post(`${BASE}/${id}/turns`, { role: 'assistant', content: 'counted', usage, ...(parentId !== undefined ? { parentId } : {}) });
      assert.equal(r.status, 201, r.text);
      return r.body.data._id;
    };
    const a = await session(alice);
    const t1 = await turn(alice, a, { inputTokens: 10, outputTokens: 20, cachedTokens: 5 });
    const t2 = await turn(alice, a, { inputTokens: 30, outputTokens: 40 }, null);
    const b = await session(bob);
    const u1 = await turn(bob, b, { inputTokens: 1, outputTokens: 2 });
    return { dir: s.dataDir, a, t1, t2, b, u1 };
  } finally {
    await s.stop();
  }
}

/** The text of t1's usage in its stored JSON as smallStore wrote it, and poisoned: past 2^62 (its column may hold it) and past 2^63 (it cannot), below 0. */
export const T1_USAGE = '"usage":{"inputTokens":10,"outputTokens":20,"cachedTokens":5}';
export const T1_POISONED = '"usage":{"inputTokens":4611686018427387904,"outputTokens":1e300,"cachedTokens":-5}';

/**
 * Starts the server on `dir` (a smallStore whose numbers the caller poisoned) and checks it:
 * one line saying what was repaired (`repaired`: its turns, sessions and users), t1's usage in
 * range as `t1Usage`, alice's and bob's usage and /metrics as their turns say, writes that take
 * from a total at the top exact again, a restart without a second repair, an export that imports.
 */
export async function checkRepaired(store, { repaired, t1Usage }) {
  const { dir, a, t1, t2, b } = store;
  let s = await startServer({ dataDir: dir });
  try {
    const lines = repairLines(s);
    assert.equal(lines.length, 1, `one line says what was repaired: ${JSON.stringify(s.logs().filter((l) => l.level !== 'info'))}`);
    assert.equal(lines[0].level, 'warn');
    assert.deepEqual([lines[0].turns, lines[0].sessions, lines[0].users], [repaired.turns, repaired.sessions, repaired.users], JSON.stringify(lines[0]));
    const alice = s.as('alice');
    const bob = s.as('bob');
    const turns = (await alice.get(`${BASE}/${a}/turns`)).body.data;
    assert.deepEqual(turns.map((t) => t._id), [t1, t2], 'no turn was lost');
    assert.deepEqual(turns[0].usage, t1Usage);
    assert.deepEqual(turns[1].usage, { inputTokens: 30, outputTokens: 40 });
    const sum = (k) => Math.min(MAX, (t1Usage[k] ?? 0) + (turns[1].usage[k] ?? 0));
    const au = await usageOf(alice);
    assert.deepEqual([au.sessions, au.turns, ...tokens(au)], [1, 2, sum('inputTokens'), sum('outputTokens'), sum('cachedTokens')], 'alice: her turns, saturating');
    const bu = await usageOf(bob);
    assert.deepEqual([bu.sessions, bu.turns, ...tokens(bu)], [1, 1, 1, 2, 0], 'bob: his one turn');
    assert.deepEqual(await storeTokens(s), [Math.min(MAX, sum('inputTokens') + 1), Math.min(MAX, sum('outputTokens') + 2), sum('cachedTokens')]);
    // writes: bob's turn adds to his; deleting alice's t1 takes from totals at the top, counted again exactly
    assert.equal((await bob.post(`${BASE}/${b}/turns`, { role: 'user', content: 'one more', usage: { inputTokens: 4, outputTokens: 5 } })).status, 201);
    assert.deepEqual(tokens(await usageOf(bob)), [5, 7, 0]);
    assert.equal((await alice.del(`${BASE}/${a}/turns/${t1}`)).status, 200);
    assert.deepEqual(tokens(await usageOf(alice)), [30, 40, 0], 'exact again once t1 is gone');
    assert.deepEqual(await storeTokens(s), [35, 47, 0]);
    await s.stop();
    s = await startServer({ dataDir: dir });
    assert.deepEqual(repairLines(s), [], 'nothing left to repair at the next start');
    const before = { alice: await usageOf(s.as('alice')), bob: await usageOf(s.as('bob')) };
    assert.deepEqual(tokens(before.alice), [30, 40, 0]);
    await s.stop();
    // the export of the repaired store imports into a new one, which counts the same
    await throughExport(dir, async (fresh) => {
      const f = await startServer({ dataDir: fresh });
      try {
        assert.deepEqual({ alice: await usageOf(f.as('alice')), bob: await usageOf(f.as('bob')) }, before);
      } finally {
        await f.stop();
      }
    });
  } finally {
    await s.stop();
  }
}

/**
 * What each engine's test writes over the JSON of two of alice's turns in the store of the
 * release before tokens (test/fixtures/tokens), as that release could have stored a provider's
 * numbers: [as stored, poisoned].
 */
export const OLDER_POISON = [
  ['"inputTokens":1200,"outputTokens":340,"cachedTokens":1024,"costUsd":0.01', '"inputTokens":1e300,"outputTokens":1.5,"cachedTokens":-7,"costUsd":-1'],
  ['"inputTokens":50,"outputTokens":60', '"inputTokens":9223372036854775807,"outputTokens":18446744073709551616'],
];

/**
 * Starts the server on `dir` (the fixture of the release before tokens, `answers` its answers
 * for this engine, poisoned as OLDER_POISON says) and checks that the start migrated it and
 * repaired the two turns in one line, that every turn is there, and that an export imports.
 */
export async function checkOlderRelease(dir, answers) {
  const [sid, ts] = Object.entries(answers.turns).find(([, list]) => list.some((t) => t.usage?.inputTokens === 1200));
  const [first, second] = ts.filter((t) => t.usage !== undefined);
  const s = await startServer({ dataDir: dir });
  try {
    const lines = repairLines(s);
    assert.equal(lines.length, 1, JSON.stringify(s.logs().filter((l) => l.level !== 'info')));
    assert.deepEqual([lines[0].turns, lines[0].sessions, lines[0].users], [2, 1, 1]);
    const alice = s.as('alice');
    const turns = (await alice.get(`${BASE}/${sid}/turns`)).body.data;
    assert.deepEqual(turns.map((t) => t._id), ts.map((t) => t._id), 'every turn is there');
    assert.deepEqual(turns.find((t) => t._id === first._id).usage, { inputTokens: MAX, outputTokens: 1, cachedTokens: 0 }, 'past the top the top, a fraction rounded down, below 0 zero, a cost below 0 left out');
    assert.deepEqual(turns.find((t) => t._id === second._id).usage, { inputTokens: MAX, outputTokens: MAX, cachedTokens: 7 });
    // her other session holds a turn of bob's with 1 cached token
    assert.deepEqual(tokens(await usageOf(alice)), [MAX, MAX, 8]);
    assert.deepEqual((await storeTokens(s)).slice(0, 2), [MAX, MAX]);
  } finally {
    await s.stop();
  }
  await throughExport(dir);
}
