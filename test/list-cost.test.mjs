// What one list request may cost (#16 items 7 and 8), pinned by answers rather than timings: a
// page examines a bounded number of items, and under ACCESS=owner what it examines is the
// caller's own sessions, so neither its cost nor its paging tells anything of other users'.
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { removeDir, runCli, startServer, tempDir } from './helpers.mjs';
import { kit } from './store/engines.mjs';

const { PAGE_SCAN_BUDGET } = kit;

/** A data directory holding, through an import, `bob` sessions of bob and one older session of alice, all in project `shared-project`. */
function seeded(bob) {
  const dir = tempDir();
  const lines = [JSON.stringify({ format: 'chat-session-api/export', version: 1, exportedAt: new Date().toISOString(), sessions: bob + 1, turns: 0 })];
  const t0 = Date.parse('2026-01-01T00:00:00.000Z');
  const make = (i, user) => {
    const at = new Date(t0 + i * 1000).toISOString();
    const _id = (t0 / 1000 + i).toString(16).padStart(8, '0') + '0'.repeat(16);
    return JSON.stringify({ session: { _id, name: `${user} ${i}`, provider: '665f1c2a9b1e8a0012ab34c1', selectedModel: 'm', mode: 'Build', user, project: 'shared-project', createdAt: at, updatedAt: at, archived: false } });
  };
  lines.push(make(0, 'alice'));
  for (let i = 1; i <= bob; i++) lines.push(make(i, 'bob'));
  writeFileSync(join(dir, 'seed.ndjson'), `${lines.join('\n')}\n`);
  const r = runCli(['import', join(dir, 'seed.ndjson')], { env: { DATA_DIR: dir } });
  assert.equal(r.code, 0, r.stderr);
  return dir;
}

describe('What a list request costs', () => {
  test("[D-paging-3] 5,000 newer sessions of another user in the project change nothing in the owner's list or paging", async () => {
    const dir = seeded(5000);
    const s = await startServer({ dataDir: dir, env: { ACCESS: 'owner' } });
    try {
      const alice = s.as('alice');
      const page = await alice.get('/api/v1/chat-sessions?projectId=shared-project&limit=10');
      assert.equal(page.status, 200);
      assert.deepEqual(page.body.data.map((x) => x.name), ['alice 0']);
      assert.equal(page.body.nextCursor, null, 'one page, complete: the walk never met bob\'s sessions');
      assert.deepEqual((await alice.get('/api/v1/chat-sessions?projectId=shared-project')).body.data.map((x) => x.name), ['alice 0']);
      // the same answer as for a project alice alone has, and as for one nobody has
      const none = await alice.get('/api/v1/chat-sessions?projectId=no-such-project&limit=10');
      assert.deepEqual(none.body, { success: true, data: [], nextCursor: null });
      const bob = s.as('bob');
      const bobs = await bob.get('/api/v1/chat-sessions?projectId=shared-project&limit=10');
      assert.equal(bobs.body.data.length, 10);
      assert.notEqual(bobs.body.nextCursor, null);
    } finally {
      await s.stop();
      removeDir(dir);
    }
  });

  test('[D-paging-1] a name filter that matches none of 5,000 sessions ends pages early; the cursors find exactly the rest', async () => {
    const dir = seeded(5000);
    const s = await startServer({ dataDir: dir });
    try {
      const bob = s.as('bob');
      const walk = async (q) => {
        const names = [];
        let pages = 0;
        let cursor;
        do {
          const r = await bob.get(`/api/v1/chat-sessions?q=${encodeURIComponent(q)}&limit=10${cursor === undefined ? '' : `&cursor=${encodeURIComponent(cursor)}`}`);
          assert.equal(r.status, 200);
          names.push(...r.body.data.map((x) => x.name));
          cursor = r.body.nextCursor;
          pages++;
        } while (cursor !== null);
        return { names, pages };
      };
      const first = await bob.get('/api/v1/chat-sessions?q=nothing%20like%20it&limit=10');
      assert.deepEqual(first.body.data, [], 'nothing matches within the budget');
      assert.notEqual(first.body.nextCursor, null, 'the page stopped at the budget with a cursor');
      const none = await walk('nothing like it');
      assert.deepEqual(none.names, []);
      assert.equal(none.pages, Math.ceil(5000 / PAGE_SCAN_BUDGET), `5,000 sessions examined ${PAGE_SCAN_BUDGET} at a time`);
      // "bob 12", "bob 120".."bob 129", "bob 1200".."bob 1299"
      assert.equal((await walk('bob 12')).names.length, 1 + 10 + 100);
    } finally {
      await s.stop();
      removeDir(dir);
    }
  });
});
