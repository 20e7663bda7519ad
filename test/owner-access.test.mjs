// Owner-only access (ACCESS=owner): another user's session behaves as if it did not exist.
// The features beyond the spec's rows, as the features issue names them (its words, not the
// docs', are what the test names quote). Against the real server over HTTP.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { alice, assert404, assertBadRequest, BASE, bob, create, get, ids, MISSING, sharedServer, unique, walk, withParams } from './api-kit.mjs';
import { newSession, removeDir, startServer } from './helpers.mjs';

sharedServer();

describe('f. Owner-only access (ACCESS=owner)', () => {
  let owner;
  let ann;
  let ben;
  before(async () => {
    owner = await startServer({ env: { ACCESS: 'owner' } });
    ann = owner.as('ann');
    ben = owner.as('ben');
  });
  after(async () => {
    await owner.stop();
    removeDir(owner.dataDir);
  });

  test("each route on another user's session behaves as if it did not exist (get, update, delete, archive, turns)", async () => {
    const c = await ann.post(BASE, newSession({ projectId: 'owner-p', name: 'ann only' }));
    assert.equal(c.status, 201);
    const s = c.body.data;
    await ann.post(`${BASE}/${s._id}/turns`, { role: 'user', content: 'private' });
    const before = await ann.get(`${BASE}/${s._id}`);
    const turnsBefore = (await ann.get(`${BASE}/${s._id}/turns`)).body.data;
    for (const h of [{}, { headers: { 'if-match': before.headers.etag } }, { headers: { 'if-match': '*' } }, { headers: { 'if-match': '"stale"' } }]) {
      const what = JSON.stringify(h);
      assert404(await ben.get(`${BASE}/${s._id}`, h), `get ${what}`);
      assert404(await ben.put(`${BASE}/${s._id}`, { name: 'ben was here' }, h), `put ${what}`);
      assert404(await ben.put(`${BASE}/${s._id}`, {}, h), `empty put ${what}`);
      assert404(await ben.del(`${BASE}/${s._id}`, h), `delete ${what}`);
      assert404(await ben.post(`${BASE}/${s._id}/archive`, undefined, h), `archive ${what}`);
      assert404(await ben.post(`${BASE}/${s._id}/unarchive`, undefined, h), `unarchive ${what}`);
      assert404(await ben.post(`${BASE}/${s._id}/turns`, { role: 'user', content: 'x' }, h), `turn ${what}`);
      assert.deepEqual((await ben.get(`${BASE}/${s._id}/turns`)).body, { success: true, data: [] }, `turns ${what}`);
      assert.deepEqual((await ben.get(`${BASE}/${s._id}/turns?limit=5`)).body, { success: true, data: [], nextCursor: null });
    }
    // the same answers as for a session that really does not exist: nothing tells them apart
    const unknown = await ben.get(`${BASE}/${MISSING}`);
    const foreign = await ben.get(`${BASE}/${s._id}`);
    assert.deepEqual([unknown.status, unknown.body], [foreign.status, foreign.body]);
    assert.equal(foreign.headers.etag, undefined, 'no ETag leaks');
    // nothing changed
    const after = await ann.get(`${BASE}/${s._id}`);
    assert.deepEqual(after.body, before.body);
    assert.equal(after.headers.etag, before.headers.etag);
    assert.deepEqual((await ann.get(`${BASE}/${s._id}/turns`)).body.data, turnsBefore);
    // a stale cursor of ann's turns list gives ben nothing either
    await ann.post(`${BASE}/${s._id}/turns`, { role: 'user', content: 'second' });
    const tc = (await ann.get(`${BASE}/${s._id}/turns?limit=1`)).body.nextCursor;
    const viaCursor = await ben.get(withParams(`${BASE}/${s._id}/turns`, { limit: 1, cursor: tc }));
    assert.ok(viaCursor.status === 400 || (viaCursor.status === 200 && viaCursor.body.data.length === 0), viaCursor.text);
  });

  test('"the project list (projectId=...) shows only the caller\'s sessions"', async () => {
    const mine = [];
    for (let i = 0; i < 4; i++) mine.push((await ann.post(BASE, newSession({ projectId: 'owner-shared', name: `ann ${i}` }))).body.data);
    const bens = [];
    for (let i = 0; i < 3; i++) bens.push((await ben.post(BASE, newSession({ projectId: 'owner-shared', name: `ben ${i}` }))).body.data);
    const a = (await ann.get(`${BASE}?projectId=owner-shared`)).body.data;
    assert.deepEqual(new Set(ids(a)), new Set(ids(mine)));
    const b = (await ben.get(`${BASE}?projectId=owner-shared`)).body.data;
    assert.deepEqual(new Set(ids(b)), new Set(ids(bens)));
    for (const [q, archived] of [
      ['ann', 'all'],
      ['', 'true'],
    ]) {
      const r = await ben.get(withParams(BASE, { projectId: 'owner-shared', q, archived }));
      assert.ok(r.body.data.every((s) => s.user === 'ben'), `q=${q} archived=${archived}`);
    }
    assert.deepEqual((await ben.get(`${BASE}?projectId=owner-shared&q=ann`)).body.data, []);
    // paging: the project's pages are the caller's, and one user's cursor does not page another's
    assert.deepEqual(ids((await walk(ann, `${BASE}?projectId=owner-shared`, 1)).items), ids(a));
    const cursor = (await ann.get(`${BASE}?projectId=owner-shared&limit=1`)).body.nextCursor;
    assertBadRequest(await ben.get(withParams(`${BASE}?projectId=owner-shared`, { limit: 1, cursor })), "ann's project cursor used by ben");
  });

  test('"the owner still can do everything"', async () => {
    const c = await ann.post(BASE, newSession({ projectId: 'owner-all' }));
    const id = c.body.data._id;
    assert.equal((await ann.get(`${BASE}/${id}`)).status, 200);
    const put = await ann.put(`${BASE}/${id}`, { name: 'mine', mode: 'Ask' }, { headers: { 'if-match': c.headers.etag } });
    assert.equal(put.status, 200);
    assert.equal((await ann.post(`${BASE}/${id}/turns`, { role: 'user', content: 'c' }, { headers: { 'if-match': put.headers.etag } })).status, 201);
    assert.equal((await ann.get(`${BASE}/${id}/turns`)).body.data.length, 1);
    assert.equal((await ann.post(`${BASE}/${id}/archive`)).body.data.archived, true);
    assert.deepEqual(ids((await ann.get(`${BASE}?projectId=owner-all&archived=true`)).body.data), [id]);
    assert.equal((await ann.post(`${BASE}/${id}/unarchive`)).body.data.archived, false);
    assert.deepEqual(ids((await ann.get(`${BASE}?projectId=owner-all`)).body.data), [id]);
    assert.equal((await ann.del(`${BASE}/${id}`)).status, 200);
    assert404(await ann.get(`${BASE}/${id}`));
  });

  test('"Default shared keeps the spec\'s rule (another user can read/update/delete)"', async () => {
    const s = await create(alice, { projectId: unique('shared-rule') });
    assert.equal((await bob.get(`${BASE}/${s._id}`)).status, 200);
    assert.equal((await bob.put(`${BASE}/${s._id}`, { name: 'by bob' })).body.data.name, 'by bob');
    assert.equal((await bob.post(`${BASE}/${s._id}/turns`, { role: 'user', content: 'bob' })).status, 201);
    assert.equal((await bob.get(`${BASE}/${s._id}/turns`)).body.data.length, 1);
    assert.equal((await bob.post(`${BASE}/${s._id}/archive`)).status, 200);
    assert.equal((await bob.post(`${BASE}/${s._id}/unarchive`)).status, 200);
    assert.deepEqual(ids((await bob.get(`${BASE}?projectId=${s.project}`)).body.data), [s._id]);
    assert.deepEqual((await alice.get(`${BASE}/${s._id}`)).body.data.user, 'alice', 'the creator stays the user');
    assert.equal((await bob.del(`${BASE}/${s._id}`)).status, 200);
    assert404(await alice.get(`${BASE}/${s._id}`));
  });
});
