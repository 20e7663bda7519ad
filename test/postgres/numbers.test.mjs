// Numbers out of range in a PostgreSQL schema (docs/DECISIONS.md, "Numbers"), written by the test
// in SQL as an earlier release could have left them: bigint counts past 2^53 (up to 2^63 - 1),
// numeric sums past 2^63, fractions, negatives and NaN, a turn's JSON with a provider's 1e300.
// The start repairs them and says so once; every read, an export and an import work.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { checkOlderRelease, checkRepaired, MAX, OLDER_POISON, smallStore, T1_POISONED, T1_USAGE } from '../numbers-kit.mjs';
import { forgetStore, removeDir, runCli, startServer, STORE, storeEnv, tempDir } from '../helpers.mjs';

const POSTGRES = STORE === 'postgres' ? {} : { skip: `about the postgres engine's schema; this run tests STORE=${STORE}` };

/** Runs `sql` on the schema of `dir` (written __SCHEMA__, as the fixtures write it), as a program other than the server would. */
async function onSchema(dir, sql) {
  const { Pool } = createRequire(import.meta.url)('../../dist/testkit.cjs');
  const { DATABASE_URL, DATABASE_SCHEMA } = storeEnv(dir);
  const pool = new Pool(DATABASE_URL, { max: 1 });
  try {
    await pool.exec(sql.replaceAll('__SCHEMA__', `"${DATABASE_SCHEMA}"`));
  } finally {
    await pool.end();
  }
}

describe('PostgreSQL: numbers out of range in the schema', POSTGRES, () => {
  for (const older of [false, true]) {
    test(`[D-numbers-3] no stored value fails a read, a start or an export: 2^63 - 1, 1e30, NaN${older ? ' (schema 8)' : ''}`, async () => {
      const store = await smallStore();
      try {
        await onSchema(
          store.dir,
          `UPDATE __SCHEMA__.turns SET input_tokens = 4611686018427387904, output_tokens = 9223372036854775807, cached_tokens = -5,
             json = replace(json, '${T1_USAGE}', '${T1_POISONED}') WHERE id = '${store.t1}';
           UPDATE __SCHEMA__.sessions SET input_tokens = 4611686018427387934, output_tokens = 1e30, turn_bytes = 1152921504606846976 WHERE id = '${store.a}';
           UPDATE __SCHEMA__.sessions SET input_tokens = -3, output_tokens = 'NaN' WHERE id = '${store.b}';
           UPDATE __SCHEMA__.usage SET input_tokens = 1e40, bytes = 36028797018963968 WHERE owner = 'alice';
           UPDATE __SCHEMA__.usage SET output_tokens = 1.5 WHERE owner = 'bob';
           ${older ? "DROP INDEX __SCHEMA__.turns_out_of_range; DROP INDEX __SCHEMA__.sessions_out_of_range; DROP TABLE __SCHEMA__.instances; ALTER TABLE __SCHEMA__.turns DROP COLUMN generator; UPDATE __SCHEMA__.meta SET value = '8' WHERE key = 'schema_version';" : ''}`,
        );
        // what the schema holds is read as counts even before a start repairs it: an export works
        const e = runCli(['export'], { env: { DATA_DIR: store.dir } });
        assert.equal(e.code, 0, e.stderr);
        assert.match(e.stdout, /"outputTokens":1e300/, 'the turn as stored, until a start repairs it');
        assert.match(e.stdout, /"sessions":2,"turns":3\}/, 'a header that counts the lines, whatever the sums hold');
        await checkRepaired(store, { repaired: { turns: 1, sessions: 2, users: 2 }, t1Usage: { inputTokens: MAX, outputTokens: MAX, cachedTokens: 0 } });
      } finally {
        forgetStore(store.dir);
        removeDir(store.dir);
      }
    });
  }

  test("[D-numbers-4] schema 6's turns with usage and a NUL or a lone surrogate in their JSON: the upgrade reads their usage", async () => {
    const fixtures = fileURLToPath(new URL('../fixtures/tokens/', import.meta.url));
    const dir = tempDir('csa-numbers-v6-escapes-');
    try {
      await onSchema(dir, readFileSync(join(fixtures, 'postgres.sql'), 'utf8'));
      // PostgreSQL's json refuses the whole text for one such escape: the step to schema 7 read each turn's usage so
      await onSchema(dir, `UPDATE __SCHEMA__.turns SET json = replace(json, '"content":"an answer"', '"content":"an \\u0000 and \\ud800 answer"') WHERE id = '6b09993495cbd2c80778555e'`);
      const s = await startServer({ dataDir: dir });
      try {
        const t = (await s.as('alice').get(`/api/v1/chat-sessions/6b09993495cbd2c80778555c/turns/6b09993495cbd2c80778555e`)).body.data;
        assert.equal(t.content, 'an \u0000 and \ud800 answer', 'the turn as it was');
        assert.equal(t.usage.inputTokens, 1200);
        assert.equal(t.usage.outputTokens, 340);
        assert.equal((await s.as('alice').get('/api/v1/usage')).body.data.inputTokens >= 1200, true, 'counted in its owner\'s usage');
      } finally {
        await s.stop();
      }
    } finally {
      forgetStore(dir);
      removeDir(dir);
    }
  });

  test("[D-numbers-4] the start repairs what an earlier release stored out of range: 1e300, 1.5, 2^64 in schema 6's JSON", async () => {
    const fixtures = fileURLToPath(new URL('../fixtures/tokens/', import.meta.url));
    const dir = tempDir('csa-numbers-v6-');
    try {
      await onSchema(dir, readFileSync(join(fixtures, 'postgres.sql'), 'utf8'));
      let json = 'json';
      for (const [was, poisoned] of OLDER_POISON) json = `replace(${json}, '${was}', '${poisoned}')`;
      // the turn the fixture left streaming, as if its instance wrote it a moment ago (as test/upgrade.test.mjs does);
      // a bigint cast of these numbers stopped the step to tokens
      await onSchema(dir, `UPDATE __SCHEMA__.turns SET streamed_at = clock_timestamp() WHERE streamed_at IS NOT NULL; UPDATE __SCHEMA__.turns SET json = ${json}`);
      await checkOlderRelease(dir, JSON.parse(readFileSync(join(fixtures, 'answers.json'), 'utf8')).postgres);
    } finally {
      forgetStore(dir);
      removeDir(dir);
    }
  });
});
