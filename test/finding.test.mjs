// Finding and keeping (issue #14): usage, tags and metadata, retention and search, one test per
// decision of docs/TEAM-DECISIONS.md "Finding and keeping" and docs/DECISIONS.md "Finding and
// keeping", against the real server over HTTP, on the engine of this run of the suite.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { newSession, removeDir, startServer } from './helpers.mjs';

const BASE = '/api/v1/chat-sessions';

let server;
let alice;
let bob;

before(async () => {
  server = await startServer();
  alice = server.as('alice');
  bob = server.as('bob');
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

async function say(who, id, content) {
  const r = await who.post(`${BASE}/${id}/turns`, { role: 'user', content });
  assert.equal(r.status, 201, r.text);
  return r.body.data;
}

function assertError(r, status, message, what = '') {
  assert.equal(r.status, status, `${what}: ${r.status} ${r.text}`);
  assert.deepEqual(r.body, { success: false, message }, what);
}

describe('Usage', () => {
  test('"GET /api/v1/usage -> {success:true, data:{sessions, turns, bytes}} for the caller": "the sessions they own (archived ones included), every turn in them whoever wrote it"', async () => {
    const carol = server.as('carol');
    const dave = server.as('dave');
    assert.deepEqual((await carol.get('/api/v1/usage')).body, { success: true, data: { sessions: 0, turns: 0, bytes: 0 } });
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
    assert.deepEqual(r.body, { success: true, data: { sessions: 2, turns: 3, bytes } });
    assert.deepEqual((await dave.get('/api/v1/usage')).body.data.sessions, 1);
  });

  test('"GET /api/v1/usage" needs a token and the sessions:read scope', async () => {
    assertError(await server.request('GET', '/api/v1/usage'), 401, 'Unauthorized');
    assertError(await server.as('alice', { scope: 'sessions:write' }).get('/api/v1/usage'), 403, 'Forbidden');
  });
});

describe('Tags and metadata', () => {
  const names = (r) => r.body.data.map((s) => s.name);

  test('"Sessions take tags (at most 20 strings of 1-50 characters, matched case-insensitively)": list filter "tag (repeatable: all must match)", on every list', async () => {
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

  test('"A tag given twice (ignoring case) is kept once", as first spelled; tags and metadata are in a session\'s JSON only when it has some', async () => {
    const s = await create(alice, { name: 'twice', tags: ['Deploy', 'deploy', 'ops'] });
    assert.deepEqual(s.tags, ['Deploy', 'ops']);
    const plain = await create(alice, { name: 'plain', tags: [], metadata: {} });
    assert.equal('tags' in plain, false);
    assert.equal('metadata' in plain, false);
  });

  test('"metadata (at most 16 keys of at most 64 characters, string values of at most 512)"; an update replaces tags and metadata whole; [] and {} remove them', async () => {
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

  test('tags and metadata out of bounds are 400 envelopes with messages naming the field', async () => {
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

  test('"A fork keeps the source\'s tags and metadata", not its expiresAt', async () => {
    const s = await create(alice, { name: 'src', tags: ['fork-me'], metadata: { a: 'b' }, expiresAt: '2999-01-01T00:00:00Z' });
    const r = await alice.post(`${BASE}/${s._id}/fork`, {});
    assert.equal(r.status, 201, r.text);
    assert.deepEqual(r.body.data.tags, ['fork-me']);
    assert.deepEqual(r.body.data.metadata, { a: 'b' });
    assert.equal('expiresAt' in r.body.data, false);
    assert.deepEqual(names(await alice.get(`${BASE}?tag=FORK-ME`)), ['src', 'src']);
  });
});
