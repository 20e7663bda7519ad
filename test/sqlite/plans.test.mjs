// How the sqlite engine's statements reach the turns table: by an index, never by reading every
// turn of the file. A plan is the planner's choice over the file as it is, so these are read off
// a real file the server wrote, with EXPLAIN QUERY PLAN.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { smallStore } from '../numbers-kit.mjs';
import { removeDir, STORE } from '../helpers.mjs';

const SQLITE = STORE === 'sqlite' ? {} : { skip: `about the sqlite engine's file; this run tests STORE=${STORE}` };
const { SUBTREE_SQL, branchKeysSql, branchPageSql } = createRequire(import.meta.url)('../../dist/testkit.cjs');

/** The plan's lines for `sql` on the file of `dir`, read only. */
async function planOf(dir, sql, ...params) {
  const { DatabaseSync } = await import('node:sqlite');
  const db = new DatabaseSync(join(dir, 'chat-sessions.db'), { readOnly: true });
  try {
    return db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(...params).map((r) => r.detail);
  } finally {
    db.close();
  }
}

describe('sqlite: query plans', SQLITE, () => {
  test('a turn\'s subtree, as a turn\'s DELETE reads it, searches turns by index: no scan of every turn of the file', async () => {
    const store = await smallStore();
    try {
      const plan = await planOf(store.dir, SUBTREE_SQL, store.t1, store.a);
      assert.ok(plan.length > 0);
      const scans = plan.filter((d) => /^SCAN (t|turns)\b/.test(d));
      assert.deepEqual(scans, [], plan.join(' | '));
    } finally {
      removeDir(store.dir);
    }
  });

  test('a branch\'s path, as a reply and a page read it, is walked by index: no scan of every turn of the file', async () => {
    const store = await smallStore();
    try {
      const statements = [
        [branchKeysSql('head', false, false), null, store.a],
        [branchKeysSql({ turnId: store.t1 }, true, true), store.t1, store.a, '', '', 10],
        [branchPageSql('head'), null, store.a, 0, 10],
      ];
      for (const [sql, ...params] of statements) {
        const plan = await planOf(store.dir, sql, ...params);
        assert.deepEqual(plan.filter((d) => /^SCAN (t|turns)\b/.test(d)), [], plan.join(' | '));
      }
    } finally {
      removeDir(store.dir);
    }
  });
});
