// Finding and keeping (issue #14): usage, tags and metadata, retention and search, one test per
// decision of docs/TEAM-DECISIONS.md "Finding and keeping" and docs/DECISIONS.md "Finding and
// keeping", against the real server over HTTP, on the engine of this run of the suite.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { newSession, removeDir, runCli, startServer, tempDir } from './helpers.mjs';
import { alice, assertError, BASE, create, server, sharedServer } from './api-kit.mjs';

sharedServer();

async function say(who, id, content) {
  const r = await who.post(`${BASE}/${id}/turns`, { role: 'user', content });
  assert.equal(r.status, 201, r.text);
  return r.body.data;
}

const names = (r) => r.body.data.map((s) => s.name);

describe('Usage', () => {
  test("[D-engines-2] [D-finding-1] GET /api/v1/usage counts the caller's sessions, archived too, and every turn in them", async () => {
    const carol = server.as('carol');
    const dave = server.as('dave');
    const none = { inputTokens: 0, outputTokens: 0, cachedTokens: 0 };
    assert.deepEqual((await carol.get('/api/v1/usage')).body, { success: true, data: { sessions: 0, turns: 0, bytes: 0, ...none } });
    const a = await create(carol, { name: 'one' });
    const b = await create(carol, { name: 'two' });
    await say(carol, a._id, 'hello');
    await say(dave, a._id, 'a turn of another user, in a session of carol');
    await say(carol, b._id, 'more');
    assert.equal((await carol.post(`${BASE}/${b._id}/archive`, {})).status, 200);
    await create(dave, { name: 'not carol' });
    const r = await carol.get('/api/v1/usage');
    assert.equal(r.status, 200, r.text);
    // the bytes are those of the JSON the API answers for carol's sessions and their turns
    let bytes = 0;
    for (const id of [a._id, b._id]) {
      bytes += Buffer.byteLength(JSON.stringify((await carol.get(`${BASE}/${id}`)).body.data));
      for (const t of (await carol.get(`${BASE}/${id}/turns`)).body.data) bytes += Buffer.byteLength(JSON.stringify(t));
    }
    assert.deepEqual(r.body, { success: true, data: { sessions: 2, turns: 3, bytes, ...none } });
    assert.deepEqual((await dave.get('/api/v1/usage')).body.data.sessions, 1);
  });

  test('"GET /api/v1/usage" needs a token and the sessions:read scope', async () => {
    assertError(await server.request('GET', '/api/v1/usage'), 401, 'Unauthorized');
    assertError(await server.as('alice', { scope: 'sessions:write' }).get('/api/v1/usage'), 403, 'Forbidden');
  });
});

describe('Tags and metadata', () => {
  test('"Sessions take tags (at most 20 strings of 1-50 characters, matched case-insensitively)", a filter on every list', async () => {
    const erin = server.as('erin');
    await create(erin, { name: 'a', tags: ['Bug', 'ui'], projectId: 'p-tags' });
    await create(erin, { name: 'b', tags: ['bug'], projectId: 'p-tags' });
    await create(erin, { name: 'c', tags: ['UI'], projectId: 'p-tags' });
    await create(erin, { name: 'd', projectId: 'p-tags' });
    await create(server.as('frank'), { name: 'e', tags: ['bug'], projectId: 'p-tags' });
    assert.deepEqual(names(await erin.get(`${BASE}?tag=BUG`)), ['b', 'a']);
    assert.deepEqual(names(await erin.get(`${BASE}?tag=bug&tag=Ui`)), ['a']);
    assert.deepEqual(names(await erin.get(`${BASE}?tag=ui&tag=nothing`)), []);
    assert.deepEqual(names(await erin.get(`${BASE}?projectId=p-tags&tag=bug`)), ['e', 'b', 'a']);
    const page = await erin.get(`${BASE}?tag=bug&limit=1`);
    assert.deepEqual(names(page), ['b']);
    const rest = await erin.get(`${BASE}?tag=bug&limit=1&cursor=${page.body.nextCursor}`);
    assert.deepEqual(names(rest), ['a']);
    assertError(await erin.get(`${BASE}?tag=ui&limit=1&cursor=${page.body.nextCursor}`), 400, 'cursor belongs to another list or query');
  });

  test('[D-finding-3] [D-finding-4] a tag given twice is kept once; tags, metadata and expiresAt only when set', async () => {
    const s = await create(alice, { name: 'twice', tags: ['Deploy', 'deploy', 'ops'] });
    assert.deepEqual(s.tags, ['Deploy', 'ops']);
    const plain = await create(alice, { name: 'plain', tags: [], metadata: {} });
    assert.equal('tags' in plain, false);
    assert.equal('metadata' in plain, false);
  });

  test('"metadata (at most 16 keys of at most 64 characters, string values of at most 512)"; updates replace whole', async () => {
    const s = await create(alice, { name: 'meta', tags: ['x'], metadata: { ticket: 'OPS-12', team: 'web' } });
    assert.deepEqual(s.metadata, { ticket: 'OPS-12', team: 'web' });
    let r = await alice.put(`${BASE}/${s._id}`, { metadata: { ticket: 'OPS-13' } });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.body.data.metadata, { ticket: 'OPS-13' });
    assert.deepEqual(r.body.data.tags, ['x']);
    assert.ok(r.body.data.updatedAt > s.updatedAt);
    r = await alice.put(`${BASE}/${s._id}`, { tags: [], metadata: {} });
    assert.equal('tags' in r.body.data, false);
    assert.equal('metadata' in r.body.data, false);
    assert.deepEqual(names(await alice.get(`${BASE}?tag=x`)).includes('meta'), false);
  });

  test('[D-finding-6] tags and metadata out of bounds are 400s naming the field; tag may be given 20 times', async () => {
    const cases = [
      [{ tags: 'x' }, 'tags must be an array'],
      [{ tags: Array.from({ length: 21 }, (_, i) => `t${i}`) }, 'tags must have at most 20 items'],
      [{ tags: [' '] }, 'tags[0] must not be blank'],
      [{ tags: ['x'.repeat(51)] }, 'tags[0] must be at most 50 characters'],
      [{ tags: [3] }, 'tags[0] must be a string'],
      [{ metadata: [] }, 'metadata must be an object'],
      [{ metadata: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v'])) }, 'metadata must have at most 16 keys'],
      [{ metadata: { ['k'.repeat(65)]: 'v' } }, 'metadata keys must be 1 to 64 characters'],
      [{ metadata: { '': 'v' } }, 'metadata keys must be 1 to 64 characters'],
      [{ metadata: { n: 1 } }, 'metadata.n must be a string'],
      [{ metadata: { v: 'x'.repeat(513) } }, 'metadata.v must be at most 512 characters'],
    ];
    for (const [over, message] of cases) assertError(await alice.post(BASE, newSession(over)), 400, message, JSON.stringify(over).slice(0, 60));
    const s = await create(alice, { name: 'bounds' });
    assertError(await alice.put(`${BASE}/${s._id}`, { tags: null }), 400, 'tags must be an array');
    assertError(await alice.put(`${BASE}/${s._id}`, { metadata: null }), 400, 'metadata must be an object');
    assertError(await alice.get(`${BASE}?tag=${'x'.repeat(51)}`), 400, 'tag must be at most 50 characters');
    assertError(await alice.get(`${BASE}?${Array.from({ length: 21 }, (_, i) => `tag=t${i}`).join('&')}`), 400, 'tag must be given at most 20 times');
  });

  test("[D-finding-5] a fork keeps the source's tags and metadata, not its expiresAt", async () => {
    const s = await create(alice, { name: 'src', tags: ['fork-me'], metadata: { a: 'b' }, expiresAt: '2999-01-01T00:00:00Z' });
    const r = await alice.post(`${BASE}/${s._id}/fork`, {});
    assert.equal(r.status, 201, r.text);
    assert.deepEqual(r.body.data.tags, ['fork-me']);
    assert.deepEqual(r.body.data.metadata, { a: 'b' });
    assert.equal('expiresAt' in r.body.data, false);
    assert.deepEqual(names(await alice.get(`${BASE}?tag=FORK-ME`)), ['src', 'src']);
  });
});

describe('Retention', () => {
  test('[D-finding-8] an expired session is 404 for get, update, delete, turns and fork, and out of every list', async () => {
    const gina = server.as('gina');
    const soon = new Date(Date.now() + 1500).toISOString();
    const s = await create(gina, { name: 'short-lived', expiresAt: soon, tags: ['gone'] });
    assert.equal(s.expiresAt, soon);
    await say(gina, s._id, 'hello');
    const kept = await create(gina, { name: 'kept', expiresAt: null });
    assert.equal(kept.expiresAt, null);
    while (Date.now() <= Date.parse(soon)) await new Promise((r) => setTimeout(r, 100));
    assertError(await gina.get(`${BASE}/${s._id}`), 404, 'Chat session not found');
    assertError(await gina.put(`${BASE}/${s._id}`, { name: 'x' }), 404, 'Chat session not found');
    assertError(await gina.post(`${BASE}/${s._id}/turns`, { role: 'user', content: 'x' }), 404, 'Chat session not found');
    assertError(await gina.post(`${BASE}/${s._id}/fork`, {}), 404, 'Chat session not found');
    assert.deepEqual((await gina.get(`${BASE}/${s._id}/turns`)).body, { success: true, data: [] });
    assert.deepEqual(names(await gina.get(BASE)), ['kept']);
    assert.deepEqual(names(await gina.get(`${BASE}?limit=10`)), ['kept']);
    assert.deepEqual(names(await gina.get(`${BASE}?tag=gone`)), []);
    assert.deepEqual(names(await gina.get(`${BASE}?projectId=proj-1&archived=all`)).includes('short-lived'), false);
    assertError(await gina.del(`${BASE}/${s._id}`), 404, 'Chat session not found');
  });

  test('[D-finding-7] expiresAt given in any time zone is kept in UTC; one without a zone is a 400', async () => {
    const s = await create(alice, { name: 'tz', expiresAt: '2999-01-31T01:00:00+01:00' });
    assert.equal(s.expiresAt, '2999-01-31T00:00:00.000Z');
    for (const bad of ['tomorrow', '2999-01-31', '2999-01-31T00:00:00', '2999-13-40T00:00:00Z', 5]) {
      const r = await alice.post(BASE, newSession({ expiresAt: bad }));
      assert.equal(r.status, 400, `${bad}: ${r.text}`);
      assert.match(r.body.message, /^expiresAt must be/);
    }
    const r = await alice.put(`${BASE}/${s._id}`, { expiresAt: null });
    assert.equal(r.body.data.expiresAt, null);
  });

  test('"RETENTION_DAYS (default off) gives sessions without an explicit expiresAt an expiry of last activity + N days"', async () => {
    const dir = tempDir();
    const old = '2020-01-01T00:00:00.000Z';
    const file = join(dir, 'old.ndjson');
    const sess = (id, name, over = {}) => ({ session: { _id: id, name, provider: 'p', selectedModel: 'm', mode: 'Build', user: 'hank', project: 'p', createdAt: old, updatedAt: old, archived: false, headTurnId: null, ...over } });
    const lines = [
      { format: 'chat-session-api/export', version: 2, exportedAt: old, sessions: 3, turns: 0 },
      sess('0000000000000000000000a1', 'old'),
      sess('0000000000000000000000a2', 'old but kept', { expiresAt: null }),
      sess('0000000000000000000000a3', 'old with its own expiry', { expiresAt: '2999-01-01T00:00:00.000Z' }),
    ];
    writeFileSync(file, lines.map((l) => JSON.stringify(l)).join('\n') + '\n');
    const imp = runCli(['import', file], { env: { DATA_DIR: dir } });
    assert.equal(imp.code, 0, imp.stderr);
    const off = await startServer({ dataDir: dir });
    try {
      assert.deepEqual(names(await off.as('hank').get(BASE)).sort(), ['old', 'old but kept', 'old with its own expiry']);
    } finally {
      await off.stop();
    }
    const on = await startServer({ dataDir: dir, env: { RETENTION_DAYS: '30' } });
    try {
      const hank = on.as('hank');
      assert.deepEqual(names(await hank.get(BASE)).sort(), ['old but kept', 'old with its own expiry']);
      assertError(await hank.get(`${BASE}/0000000000000000000000a1`), 404, 'Chat session not found');
      const fresh = await create(hank, { name: 'fresh' });
      assert.equal((await hank.get(`${BASE}/${fresh._id}`)).status, 200);
    } finally {
      await on.stop();
      removeDir(dir);
    }
  });
});
