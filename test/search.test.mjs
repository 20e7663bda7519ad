// Search (issue #14 item 1): GET /api/v1/search against the real server over HTTP, on the engine
// of this run of the suite, one test per decision of docs/DECISIONS.md "Search".
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { indexed, newSession, removeDir, runCli, startServer, STORE } from './helpers.mjs';
import { join } from 'node:path';

const BASE = '/api/v1/chat-sessions';
const SEARCH = '/api/v1/search';

let server;

before(async () => {
  server = await startServer();
});
after(async () => {
  await server.stop();
  removeDir(server.dataDir);
});

async function create(who, over = {}) {
  const r = await who.post(BASE, newSession(over));
  assert.equal(r.status, 201, r.text);
  return r.body.data;
}

async function say(who, id, content, role = 'user') {
  const r = await who.post(`${BASE}/${id}/turns`, { role, content });
  assert.equal(r.status, 201, r.text);
  return r.body.data;
}

async function search(who, query) {
  const r = await who.get(`${SEARCH}?${new URLSearchParams(query)}`);
  assert.equal(r.status, 200, r.text);
  return r.body;
}

const hits = (body) => body.data.map((h) => [h.session.name, h.turnId]);

describe('Search', () => {
  test('[D-search-1] every query word starts a word of the name or turn, case ignored; a hit is {session, turnId, snippet}', async () => {
    const u = server.as('s-words');
    const s = await create(u, { name: 'Kubernetes upgrade plan' });
    const t = await say(u, s._id, 'We should UPGRADE the cluster before Friday.');
    await say(u, s._id, [{ type: 'text', text: 'the nodes are ready' }, { type: 'reasoning', text: 'thinking about quorum' }, { type: 'tool_call', id: 'c1', name: 'clusterctl', arguments: { upgrade: true } }], 'assistant');
    const b = await search(u, { q: 'upgr CLUSTER' });
    assert.equal(b.success, true);
    assert.equal(b.nextCursor, null);
    assert.deepEqual(hits(b), [['Kubernetes upgrade plan', t._id]]);
    assert.deepEqual(b.data[0].session, (await u.get(`${BASE}/${s._id}`)).body.data);
    assert.match(b.data[0].snippet, /UPGRADE the cluster/);
    // a name hit has turnId null; parts of type text and reasoning are searched, tool calls are not
    assert.deepEqual(hits(await search(u, { q: 'kube' })), [['Kubernetes upgrade plan', null]]);
    assert.equal((await search(u, { q: 'quorum' })).data.length, 1);
    assert.equal((await search(u, { q: 'clusterctl' })).data.length, 0);
    // a word inside a word is not a match, and every word must be in the same name or turn
    assert.equal((await search(u, { q: 'netes' })).data.length, 0);
    assert.equal((await search(u, { q: 'kubernetes friday' })).data.length, 0);
  });

  test('[D-search-2] words are folded alike on every engine: Unicode case folding, punctuation separates them', async () => {
    const u = server.as('s-fold');
    const s = await create(u, { name: 'Straße' });
    await say(u, s._id, 'ÉTÉ à Paris: café-crème, 42km');
    assert.equal((await search(u, { q: 'STRASSE' })).data.length, 1);
    assert.equal((await search(u, { q: 'été CAFÉ crème 42' })).data.length, 1);
    assert.equal((await search(u, { q: 'km' })).data.length, 0);
  });

  test("[D-search-4] hits are newest first, a turn by createdAt, a name by its session's updatedAt, paged", async () => {
    const u = server.as('s-order');
    const a = await create(u, { name: 'zebra one' });
    const t1 = await say(u, a._id, 'zebra crossing');
    const b = await create(u, { name: 'other' });
    const t2 = await say(u, b._id, 'a zebra again');
    const t3 = await say(u, a._id, 'last zebra');
    const all = await search(u, { q: 'zebra' });
    const createdAt = new Map([t1, t2, t3].map((t) => [t._id, t.createdAt]));
    const keyOf = (h) => (h.turnId === null ? [h.session.updatedAt, h.session._id] : [createdAt.get(h.turnId), h.turnId]);
    const expected = all.data.slice().sort((x, y) => {
      const [p, q] = [keyOf(x), keyOf(y)];
      return p[0] !== q[0] ? (p[0] > q[0] ? -1 : 1) : p[1] > q[1] ? -1 : 1;
    });
    assert.deepEqual(hits(all), hits({ data: expected }));
    assert.deepEqual(
      hits(all).filter((h) => h[1] !== null),
      [
        ['zebra one', t3._id],
        ['other', t2._id],
        ['zebra one', t1._id],
      ],
    );
    assert.deepEqual(hits(all).filter((h) => h[1] === null), [['zebra one', null]]);
    // the name ranks with its session's updatedAt, which its newest turn raised
    assert.equal(all.data.find((h) => h.turnId === null).session.updatedAt, t3.createdAt);
    const paged = [];
    let cursor;
    do {
      const p = await search(u, { q: 'zebra', limit: '1', ...(cursor === undefined ? {} : { cursor }) });
      assert.ok(p.data.length <= 1);
      paged.push(...hits(p));
      cursor = p.nextCursor ?? undefined;
    } while (cursor !== undefined);
    assert.deepEqual(paged, hits(all));
  });

  test('[D-search-5] a search is always paged: without limit, 20 hits and a nextCursor', async () => {
    const u = server.as('s-page');
    const s = await create(u, { name: 'pages' });
    for (let i = 0; i < 22; i++) await say(u, s._id, `walrus ${i}`);
    const first = await search(u, { q: 'walrus' });
    assert.equal(first.data.length, 20);
    assert.equal(typeof first.nextCursor, 'string');
    const rest = await search(u, { q: 'walrus', cursor: first.nextCursor });
    assert.equal(rest.data.length, 2);
    assert.equal(rest.nextCursor, null);
    const other = await u.get(`${SEARCH}?q=other&cursor=${encodeURIComponent(first.nextCursor)}`);
    assert.equal(other.status, 400);
    assert.deepEqual(other.body, { success: false, message: 'cursor belongs to another list or query' });
  });

  test("[D-search-6] search reads the sessions the list would: own, a project's, archived on request, expired never", async () => {
    const ann = server.as('s-ann');
    const ben = server.as('s-ben');
    await create(ann, { name: 'okapi mine', projectId: 'p-okapi' });
    await create(ben, { name: 'okapi his', projectId: 'p-okapi' });
    const archived = await create(ann, { name: 'okapi archived', projectId: 'p-okapi' });
    assert.equal((await ann.post(`${BASE}/${archived._id}/archive`, {})).status, 200);
    await create(ann, { name: 'okapi gone', projectId: 'p-okapi', expiresAt: '2001-01-01T00:00:00Z' });
    const names = async (q) => (await search(ann, q)).data.map((h) => h.session.name).sort();
    assert.deepEqual(await names({ q: 'okapi' }), ['okapi mine']);
    assert.deepEqual(await names({ q: 'okapi', projectId: 'p-okapi' }), ['okapi his', 'okapi mine']);
    assert.deepEqual(await names({ q: 'okapi', archived: 'true' }), ['okapi archived']);
    assert.deepEqual(await names({ q: 'okapi', archived: 'all' }), ['okapi archived', 'okapi mine']);
    assert.deepEqual(await names({ q: 'okapi', projectId: 'other' }), []);
    const owners = await startServer({ env: { ACCESS: 'owner' } });
    try {
      const a = owners.as('ann');
      const b = owners.as('ben');
      await create(a, { name: 'okapi a', projectId: 'p' });
      await create(b, { name: 'okapi b', projectId: 'p' });
      const r = await a.get(`${SEARCH}?q=okapi&projectId=p`);
      assert.deepEqual(r.body.data.map((h) => h.session.name), ['okapi a']);
    } finally {
      await owners.stop();
      removeDir(owners.dataDir);
    }
  });

  test('[D-search-9] the index follows a rename, an edited turn, a deleted turn and a deleted session', async () => {
    const u = server.as('s-change');
    const s = await create(u, { name: 'ibis' });
    const t = await say(u, s._id, 'heron');
    assert.equal((await u.put(`${BASE}/${s._id}`, { name: 'stork' })).status, 200);
    assert.deepEqual(hits(await search(u, { q: 'ibis' })), []);
    assert.deepEqual(hits(await search(u, { q: 'stork' })), [['stork', null]]);
    assert.equal((await u.put(`${BASE}/${s._id}/turns/${t._id}`, { content: 'egret' })).status, 200);
    assert.deepEqual(hits(await search(u, { q: 'heron' })), []);
    assert.deepEqual(hits(await search(u, { q: 'egret' })), [['stork', t._id]]);
    const f = await u.post(`${BASE}/${s._id}/fork`, { name: 'fork' });
    assert.equal(f.status, 201, f.text);
    assert.equal((await search(u, { q: 'egret' })).data.length, 2);
    assert.equal((await u.del(`${BASE}/${s._id}/turns/${t._id}`)).status, 200);
    assert.deepEqual(hits(await search(u, { q: 'egret' })).map((h) => h[0]), ['fork']);
    assert.equal((await u.del(`${BASE}/${f.body.data._id}`)).status, 200);
    assert.deepEqual(hits(await search(u, { q: 'egret' })), []);
  });

  test('[D-search-3] q is 1-200 characters with a letter or digit, else 400 in the envelope', async () => {
    const u = server.as('s-bad');
    for (const [path, message] of [
      [SEARCH, 'q is required'],
      [`${SEARCH}?q=`, 'q is required'],
      [`${SEARCH}?q=${'a'.repeat(201)}`, 'q must be at most 200 characters'],
      [`${SEARCH}?q=${encodeURIComponent('?! -')}`, 'q must contain a letter or a digit'],
    ]) {
      const r = await u.get(path);
      assert.equal(r.status, 400, `${path}: ${r.text}`);
      assert.deepEqual(r.body, { success: false, message }, path);
    }
    assert.equal((await u.get(`${SEARCH}?q=${'a'.repeat(200)}`)).status, 200);
  });

  test('[D-search-15] what was written before a restart is found after it', async () => {
    const first = await startServer();
    const dataDir = first.dataDir;
    try {
      const u = first.as('s-restart');
      const s = await create(u, { name: 'narwhal' });
      await say(u, s._id, 'tusk');
    } finally {
      await first.stop();
    }
    const second = await startServer({ dataDir });
    try {
      const v = second.as('s-restart');
      assert.equal((await search(v, { q: 'tusk' })).data.length, 1);
      assert.equal((await search(v, { q: 'narwhal' })).data.length, 1);
    } finally {
      await second.stop();
      removeDir(dataDir);
    }
  });

  test('[D-search-10] every turn acknowledged before a kill is found after the restart', async () => {
    const first = await startServer();
    const dataDir = first.dataDir;
    const made = [];
    try {
      const u = first.as('s-killed');
      const s = await create(u, { name: 'kestrel' });
      // many at once, so some are still queued for the index when the process dies
      for (let i = 0; i < 5; i++) made.push(...(await Promise.all(Array.from({ length: 40 }, (_, k) => say(u, s._id, `falcon ${i * 40 + k}`)))));
    } finally {
      await first.kill();
    }
    const second = await startServer({ dataDir });
    try {
      const v = second.as('s-killed');
      const found = [];
      let cursor;
      do {
        const page = await search(v, { q: 'falcon', limit: '100', ...(cursor ? { cursor } : {}) });
        found.push(...page.data.map((h) => h.turnId));
        cursor = page.nextCursor;
      } while (cursor);
      assert.deepEqual(found.sort(), made.map((t) => t._id).sort());
    } finally {
      await second.stop();
      removeDir(dataDir);
    }
  });

  test("[D-search-11] sqlite merges its index's segments as it writes and when idle: fewer, every turn still found", { skip: STORE !== 'sqlite' && 'about the sqlite engine' }, async () => {
    const { DatabaseSync } = await import('node:sqlite');
    const file = (dataDir) => join(dataDir, 'chat-sessions.db');
    /** How many segments each index has, and its automerge setting, read from the file. */
    const shape = (dataDir) => {
      const db = new DatabaseSync(file(dataDir), { readOnly: true });
      try {
        return Object.fromEntries(
          ['name_words', 'turn_words'].map((t) => [t, { segments: db.prepare(`SELECT count(DISTINCT segid) AS n FROM ${t}_idx`).get().n, automerge: db.prepare(`SELECT v FROM ${t}_config WHERE k = 'automerge'`).get()?.v }]),
        );
      } finally {
        db.close();
      }
    };
    const steps = async (srv) => Number(/^chat_session_api_sqlite_search_merge_steps_total (\d+)$/m.exec((await srv.request('GET', '/metrics')).text)?.[1]);
    // each turn indexed in a transaction of its own: a segment each, none merged while the server runs (hold:merge)
    const first = await startServer({ env: { CHAT_SESSION_API_FAULTS: 'hold:merge' } });
    const dataDir = first.dataDir;
    const made = [];
    try {
      const u = first.as('s-merge');
      const s = await create(u, { name: 'heron' });
      for (let i = 0; i < 40; i++) {
        made.push((await say(u, s._id, `egret ${i}`))._id);
        await indexed(first);
      }
      // idle for longer than the second after which it would merge
      await new Promise((r) => setTimeout(r, 1500));
      assert.equal(await steps(first), 0);
    } finally {
      await first.stop();
    }
    const before = shape(dataDir);
    assert.deepEqual([before.name_words.automerge, before.turn_words.automerge], [16, 16]);
    const db = new DatabaseSync(file(dataDir), { readOnly: true });
    try {
      assert.equal(db.prepare("SELECT v FROM turn_words_config WHERE k = 'crisismerge'").get()?.v, 64);
    } finally {
      db.close();
    }
    assert.ok(before.turn_words.segments >= 8, `40 transactions leave many segments: ${before.turn_words.segments}`);
    const second = await startServer({ dataDir });
    try {
      let now = before;
      for (let i = 0; i < 200 && now.turn_words.segments >= before.turn_words.segments; i++) {
        await new Promise((r) => setTimeout(r, 50));
        now = shape(dataDir);
      }
      assert.ok(now.turn_words.segments < before.turn_words.segments, `merged when idle: ${before.turn_words.segments} -> ${now.turn_words.segments} segments`);
      // and it stops once there is nothing left to merge
      // (a step follows the last on the next turn of the thread's event loop: half a second without one is the end)
      let done = await steps(second);
      for (let i = 0; i < 40; i++) {
        await new Promise((r) => setTimeout(r, 500));
        const n = await steps(second);
        if (n === done) break;
        done = n;
      }
      assert.ok(done >= 1);
      await new Promise((r) => setTimeout(r, 1500));
      assert.equal(await steps(second), done, 'no step once the merge found nothing to do');
      const found = (await search(second.as('s-merge'), { q: 'egret', limit: '100' })).data.map((h) => h.turnId);
      assert.deepEqual(found.sort(), [...made].sort());
    } finally {
      await second.stop();
      removeDir(dataDir);
    }
  });

  test('[D-search-14] SEARCH=off removes the route and keeps no index; turned on again, what was written is found', async () => {
    const first = await startServer({ env: { SEARCH: 'off' } });
    const dataDir = first.dataDir;
    try {
      const u = first.as('s-off');
      const s = await create(u, { name: 'osprey' });
      await say(u, s._id, 'talon');
      assert.equal((await u.get(`${SEARCH}?q=talon`)).status, 404);
      const doc = (await first.request('GET', '/api/v1/openapi.json')).body;
      assert.equal(doc.paths[SEARCH], undefined);
    } finally {
      await first.stop();
    }
    const second = await startServer({ dataDir });
    try {
      const v = second.as('s-off');
      assert.deepEqual(hits(await search(v, { q: 'talon' })).map((h) => h[0]), ['osprey']);
      assert.deepEqual(hits(await search(v, { q: 'osprey' })), [['osprey', null]]);
    } finally {
      await second.stop();
      removeDir(dataDir);
    }
  });

  test('[D-search-17] reindex builds the search index again on either engine, under the data-directory lock', async () => {
    const first = await startServer();
    const dataDir = first.dataDir;
    try {
      const u = first.as('s-reindex');
      const s = await create(u, { name: 'manatee' });
      await say(u, s._id, 'sea cow');
      const locked = runCli(['reindex'], { env: { DATA_DIR: dataDir } });
      assert.equal(locked.code, 1, locked.stdout);
      assert.match(locked.stderr, /in use/);
      await first.stop();
      const r = runCli(['reindex'], { env: { DATA_DIR: dataDir } });
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, /^reindexed 2 session names and turns in \d+\.\d s\n$/);
      const again = await startServer({ dataDir });
      try {
        assert.equal((await search(again.as('s-reindex'), { q: 'sea cow' })).data.length, 1);
        assert.equal((await search(again.as('s-reindex'), { q: 'manatee' })).data.length, 1);
      } finally {
        await again.stop();
      }
    } finally {
      removeDir(dataDir);
    }
  });
});
