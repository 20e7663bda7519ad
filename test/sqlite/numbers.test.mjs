// Numbers out of range in a sqlite file (docs/DECISIONS.md, "Numbers"), written by the test
// through node:sqlite as an earlier release could have left them: integers past 2^53 and past
// 2^63 (which SQLite then keeps as REAL), fractions, negatives, in a turn's columns and JSON and
// in the sums of sessions, users and the store's counters. The start repairs them and says so
// once; every read, an export and an import work.
import assert from 'node:assert/strict';
import { copyFileSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { checkOlderRelease, checkRepaired, MAX, OLDER_POISON, smallStore, T1_POISONED, T1_USAGE } from '../numbers-kit.mjs';
import { removeDir, runCli, STORE, tempDir } from '../helpers.mjs';

const SQLITE = STORE === 'sqlite' ? {} : { skip: `about the sqlite engine's file; this run tests STORE=${STORE}` };
const DB = 'chat-sessions.db';

/** Runs `sql` on the file of `dir`, as a program other than the server would (the server is stopped). */
async function onFile(dir, sql) {
  const { DatabaseSync } = await import('node:sqlite');
  const db = new DatabaseSync(join(dir, DB));
  try {
    db.exec(sql);
  } finally {
    db.close();
  }
}

describe('sqlite: numbers out of range in the file', SQLITE, () => {
  for (const older of [false, true]) {
    test(`[D-numbers-3] no stored value fails a read, a start or an export: 2^62, 1e300 in the file${older ? ' (schema 10)' : ''}`, async () => {
      const store = await smallStore();
      try {
        await onFile(
          store.dir,
          `UPDATE turns SET input_tokens = 4611686018427387904, output_tokens = 1e300, cached_tokens = -5,
             json = CAST(replace(CAST(json AS TEXT), '${T1_USAGE}', '${T1_POISONED}') AS BLOB) WHERE id = '${store.t1}';
           UPDATE sessions SET input_tokens = 4611686018427387934, output_tokens = 1e19, turn_bytes = 1152921504606846976 WHERE id = '${store.a}';
           UPDATE sessions SET input_tokens = -3, output_tokens = 2.5 WHERE id = '${store.b}';
           UPDATE users SET input_tokens = 9223372036854775807, bytes = 36028797018963968 WHERE user = 'alice';
           UPDATE users SET output_tokens = 1.5 WHERE user = 'bob';
           UPDATE counters SET value = 9223372036854775807 WHERE name = 'input_tokens';
           UPDATE counters SET value = 1e19 WHERE name = 'output_tokens';
           UPDATE counters SET value = 1e300 WHERE name = 'turns';
           ${older ? 'DROP INDEX turns_out_of_range; DROP INDEX sessions_out_of_range; PRAGMA user_version = 10;' : ''}`,
        );
        // what the file holds is read as counts even before a start repairs it: an export works
        const e = runCli(['export'], { env: { DATA_DIR: store.dir } });
        assert.equal(e.code, 0, e.stderr);
        assert.match(e.stdout, /"outputTokens":1e300/, 'the turn as stored, until a start repairs it');
        assert.match(e.stdout, /"sessions":2,"turns":3\}/, 'a header that counts the lines, whatever the counters hold');
        await checkRepaired(store, { repaired: { turns: 1, sessions: 2, users: 2 }, t1Usage: { inputTokens: MAX, outputTokens: MAX, cachedTokens: 0 } });
        if (older) {
          const { DatabaseSync } = await import('node:sqlite');
          const db = new DatabaseSync(join(store.dir, DB), { readOnly: true });
          try {
            assert.equal(db.prepare('PRAGMA user_version').get().user_version, 11);
          } finally {
            db.close();
          }
        }
      } finally {
        removeDir(store.dir);
      }
    });
  }

  test("[D-numbers-4] the start repairs what an earlier release stored out of range: 1e300, 1.5, 2^64 in schema 8's JSON", async () => {
    const fixtures = fileURLToPath(new URL('../fixtures/tokens/', import.meta.url));
    const dir = tempDir('csa-numbers-v8-');
    try {
      copyFileSync(join(fixtures, DB), join(dir, DB));
      let json = 'CAST(json AS TEXT)';
      for (const [was, poisoned] of OLDER_POISON) json = `replace(${json}, '${was}', '${poisoned}')`;
      await onFile(dir, `UPDATE turns SET json = CAST(${json} AS BLOB)`);
      await checkOlderRelease(dir, JSON.parse(readFileSync(join(fixtures, 'answers.json'), 'utf8')).sqlite);
    } finally {
      removeDir(dir);
    }
  });
});
