// docs/TEAM-DECISIONS.md, "Identifiers and records" and "Sessions, beyond the spec's rows": one test per
// decision, named after it, against the real server over HTTP. The features added on top of
// the spec (turns, paging, search, archive, ETags, scopes) are pinned in depth by one
// file each (turns, paging, name-search, archive, etags, scopes .test.mjs); here each of those decisions gets one test of its headline behaviour.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { newSession, removeDir, startServer } from './helpers.mjs';
import { addTurn, alice, assert400, assert404, BASE, bob, clockPast, create, EMOJI, freshUser, ids, listOrder, MISSING, server, sharedServer, unique } from './api-kit.mjs';

const V1_SESSION_KEYS = ['_id', 'name', 'provider', 'selectedModel', 'mode', 'user', 'project', 'createdAt', 'updatedAt', 'archived'];
// docs/DECISIONS.md, Conversations: the fields added since follow the first release's, in a fixed place
const SESSION_KEYS = [...V1_SESSION_KEYS, 'headTurnId'];
const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const OBJECT_ID = /^[0-9a-f]{24}$/;

sharedServer();

const seconds = (id) => parseInt(id.slice(0, 8), 16);

describe('Identifiers and records', () => {
  test('"Record ids are 24 lowercase hex characters, MongoDB ObjectId layout (4-byte seconds, 5 random bytes, 3-byte counter)"', async () => {
    const before = Math.floor(Date.now() / 1000);
    const a = await create();
    const b = await create();
    const after = Math.floor(Date.now() / 1000);
    for (const s of [a, b]) {
      assert.match(s._id, OBJECT_ID);
      // the first 4 bytes are the creation second, the very second createdAt names
      assert.equal(seconds(s._id), Math.floor(Date.parse(s.createdAt) / 1000), s._id);
      assert.ok(seconds(s._id) >= before && seconds(s._id) <= after, 'the seconds are now');
    }
    // 5 random bytes: fixed per process, so two ids of one server share them
    assert.equal(a._id.slice(8, 18), b._id.slice(8, 18));
    // 3-byte counter: the next id of the process is the next count (mod 2^24)
    assert.equal((parseInt(a._id.slice(18), 16) + 1) % 0x1000000, parseInt(b._id.slice(18), 16));
    const t = await addTurn(alice, a._id);
    assert.match(t._id, OBJECT_ID);
    assert.equal(t._id.slice(8, 18), a._id.slice(8, 18));
    assert.equal(t.session, a._id);
  });

  test('"Chat session as returned": these keys first, in this order, in every answer, then headTurnId', async () => {
    const u = freshUser('shape');
    const created = await u.post(BASE, newSession({ projectId: 'shape-proj', name: 'n', extra: 'ignored', providerId: 'pv' }));
    assert.equal(created.status, 201);
    const s = created.body.data;
    const answers = [
      created,
      await u.get(`${BASE}/${s._id}`),
      await u.put(`${BASE}/${s._id}`, { name: 'n2', color: 'red' }),
      await u.post(`${BASE}/${s._id}/archive`),
      await u.post(`${BASE}/${s._id}/unarchive`),
    ];
    for (const r of answers) {
      assert.deepEqual(Object.keys(r.body), ['success', 'data']);
      assert.deepEqual(Object.keys(r.body.data), SESSION_KEYS, r.text);
    }
    for (const path of [BASE, `${BASE}?projectId=shape-proj`, `${BASE}?archived=all&limit=5`]) {
      const list = await u.get(path);
      assert.equal(list.body.data.length, 1, path);
      assert.deepEqual(Object.keys(list.body.data[0]), SESSION_KEYS, path);
    }
    const final = (await u.get(`${BASE}/${s._id}`)).body.data;
    assert.equal(typeof final.archived, 'boolean');
    assert.match(final.user, /^shape-\d+$/);
    assert.deepEqual(
      { ...final, createdAt: 0, updatedAt: 0, _id: 0 },
      { _id: 0, name: 'n2', provider: 'pv', selectedModel: 'gpt-4o', mode: 'Build', user: final.user, project: 'shape-proj', createdAt: 0, updatedAt: 0, archived: false, headTurnId: null },
    );
  });

  test('"name is \\"\\" when none was given"', async () => {
    assert.equal((await create()).name, '');
    assert.equal((await create(alice, { name: null })).name, '', 'null on create is absent');
    assert.equal((await create(alice, { name: '' })).name, '');
  });

  test('"Timestamps are ISO 8601 UTC with milliseconds"', async () => {
    const t0 = Date.now();
    const s = await create();
    const t1 = Date.now();
    assert.match(s.createdAt, ISO_MS);
    assert.match(s.updatedAt, ISO_MS);
    assert.equal(s.createdAt, s.updatedAt, 'a new session was last updated when it was created');
    const at = Date.parse(s.createdAt);
    assert.ok(at >= t0 && at <= t1, 'the timestamp is the time of the request');
    await clockPast(s.updatedAt); // timestamps follow the clock: within one ms a change ties
    const u = (await alice.put(`${BASE}/${s._id}`, { name: 'later' })).body.data;
    assert.match(u.updatedAt, ISO_MS);
    assert.equal(u.createdAt, s.createdAt, 'createdAt never moves');
    assert.ok(u.updatedAt > s.updatedAt, 'a change moves updatedAt forward');
    const t = await addTurn(alice, s._id);
    assert.match(t.createdAt, ISO_MS);
  });

  test('"ChatSessionMode members: Build (default), Plan, Ask. The wire value is the member name."', async () => {
    assert.equal((await create()).mode, 'Build');
    assert.equal((await create(alice, { mode: null })).mode, 'Build');
    for (const mode of ['Build', 'Plan', 'Ask']) {
      const s = await create(alice, { mode });
      assert.equal(s.mode, mode);
      for (const next of ['Build', 'Plan', 'Ask']) {
        const r = await alice.put(`${BASE}/${s._id}`, { mode: next });
        assert.equal(r.status, 200, r.text);
        assert.equal(r.body.data.mode, next);
      }
    }
  });

  test('"An unknown name gets 400 mode must be one of: Build, Plan, Ask"', async () => {
    const s = await create();
    const unknown = ['build', 'BUILD', 'plan', 'ask', 'Debug', ' Plan', 'Plan ', 'Build,Plan', '0', '1', 'toString', '__proto__', 'constructor', 'hasOwnProperty', 'Buil', 'Buildd'];
    for (const mode of unknown) {
      assert400(await alice.post(BASE, newSession({ mode })), 'mode must be one of: Build, Plan, Ask', `create ${JSON.stringify(mode)}`);
      assert400(await alice.put(`${BASE}/${s._id}`, { mode }), 'mode must be one of: Build, Plan, Ask', `update ${JSON.stringify(mode)}`);
    }
    // a numeric enum value is not a member name (no reverse mapping 0 -> Build)
    for (const mode of [0, 1, 2]) {
      assert400(await alice.post(BASE, newSession({ mode })), 'mode must be a string', `create ${mode}`);
      assert400(await alice.put(`${BASE}/${s._id}`, { mode }), 'mode must be a string', `update ${mode}`);
    }
    assert.equal((await alice.get(`${BASE}/${s._id}`)).body.data.mode, 'Build', 'nothing was changed');
  });

  test('"Turn as returned": its keys in order, parentId after session and status before createdAt, always there', async () => {
    const s = await create();
    const plain = await addTurn(alice, s._id, { role: 'user', content: 'q' });
    assert.deepEqual(Object.keys(plain), ['_id', 'session', 'parentId', 'user', 'role', 'content', 'status', 'createdAt'], 'model and metadata absent when not given');
    const nulls = await addTurn(alice, s._id, { role: 'system', content: 'n', model: null, metadata: null });
    assert.deepEqual(Object.keys(nulls), ['_id', 'session', 'parentId', 'user', 'role', 'content', 'status', 'createdAt'], 'null on create-style bodies is absent');
    const full = await addTurn(bob, s._id, { metadata: { tokens: 3 }, model: 'gpt-4o', content: 'a', role: 'assistant', extra: 1 });
    assert.deepEqual(Object.keys(full), ['_id', 'session', 'parentId', 'user', 'role', 'content', 'model', 'metadata', 'status', 'createdAt']);
    assert.deepEqual({ ...full, _id: 0, createdAt: 0 }, { _id: 0, session: s._id, parentId: nulls._id, user: 'bob', role: 'assistant', content: 'a', model: 'gpt-4o', metadata: { tokens: 3 }, status: 'complete', createdAt: 0 });
    const tool = await addTurn(alice, s._id, { role: 'tool', content: '{"ok":true}' });
    assert.equal(tool.role, 'tool');
    const listed = (await alice.get(`${BASE}/${s._id}/turns`)).body.data;
    assert.deepEqual(listed, [plain, nulls, full, tool], 'the list returns the same records');
    for (const t of listed) assert.ok(['user', 'assistant', 'system', 'tool'].includes(t.role));
  });
});

describe("Sessions, beyond the spec's rows", () => {
  test('"A required field that is missing, null, or blank after trimming gets the spec\'s \\"X is required\\""', async () => {
    const blanks = [undefined, null, '', ' ', '   ', '\t', '\n\r', '\u00a0', '\u2003\u3000'];
    for (const field of ['projectId', 'providerId', 'selectedModel']) {
      for (const v of blanks) {
        const body = newSession();
        if (v === undefined) delete body[field];
        else body[field] = v;
        assert400(await alice.post(BASE, body), `${field} is required`, `${field}=${JSON.stringify(v)}`);
      }
    }
    // the spec's order holds for blanks too: the first one missing is the answer
    assert400(await alice.post(BASE, { projectId: ' ', providerId: null, selectedModel: '' }), 'projectId is required');
    assert400(await alice.post(BASE, { projectId: 'p', providerId: '\t', selectedModel: null }), 'providerId is required');
    // a field inherited through __proto__ is not a field of the body
    const proto = await server.request('POST', BASE, {
      token: alice.token,
      body: '{"__proto__":{"projectId":"p","providerId":"q","selectedModel":"m"}}',
      headers: { 'content-type': 'application/json' },
    });
    assert400(proto, 'projectId is required');
    // no body at all is an empty object
    assert400(await server.request('POST', BASE, { token: alice.token }), 'projectId is required');
  });

  test('"A field of the wrong type gets 400 X must be a string"', async () => {
    const wrong = [0, 1, -1.5, true, false, [], ['p'], {}, { $ne: null }];
    for (const field of ['projectId', 'providerId', 'selectedModel', 'mode', 'name']) {
      for (const v of wrong) {
        assert400(await alice.post(BASE, newSession({ [field]: v })), `${field} must be a string`, `${field}=${JSON.stringify(v)}`);
      }
    }
    // the spec's order: an earlier missing field wins over a later wrong type
    assert400(await alice.post(BASE, { providerId: 5, selectedModel: 'm' }), 'projectId is required');
    assert400(await alice.post(BASE, { projectId: 'p', providerId: 5 }), 'providerId must be a string');
  });

  test('[D-sessions-3] "ids and selectedModel at most 200 characters, name at most 500", in code points', async () => {
    const u = freshUser('limits');
    for (const [field, max] of [
      ['projectId', 200],
      ['providerId', 200],
      ['selectedModel', 200],
      ['name', 500],
    ]) {
      const ok = await u.post(BASE, newSession({ [field]: 'x'.repeat(max) }));
      assert.equal(ok.status, 201, `${field} of ${max} ASCII`);
      assert.equal(ok.body.data[field === 'projectId' ? 'project' : field === 'providerId' ? 'provider' : field], 'x'.repeat(max));
      assert400(await u.post(BASE, newSession({ [field]: 'x'.repeat(max + 1) })), `${field} must be at most ${max} characters`, `${field} ${max + 1}`);
      // a character is a code point: max emoji (2*max UTF-16 units) pass, one more does not
      const emoji = await u.post(BASE, newSession({ [field]: EMOJI.repeat(max) }));
      assert.equal(emoji.status, 201, `${field} of ${max} emoji: ${emoji.text}`);
      assert400(await u.post(BASE, newSession({ [field]: EMOJI.repeat(max + 1) })), `${field} must be at most ${max} characters`, `${field} ${max + 1} emoji`);
      assert.equal((await u.post(BASE, newSession({ [field]: 'x'.repeat(max - 1) + EMOJI }))).status, 201, `${field}: ${max - 1} ASCII + 1 emoji`);
      assert.equal((await u.post(BASE, newSession({ [field]: '\u00e9'.repeat(max) }))).status, 201, `${field}: ${max} precomposed é`);
    }
    // the same limits on update
    const s = (await u.post(BASE, newSession())).body.data;
    for (const [field, max] of [
      ['provider', 200],
      ['selectedModel', 200],
      ['name', 500],
    ]) {
      assert.equal((await u.put(`${BASE}/${s._id}`, { [field]: EMOJI.repeat(max) })).status, 200, `update ${field} ${max} emoji`);
      assert400(await u.put(`${BASE}/${s._id}`, { [field]: EMOJI.repeat(max + 1) }), `${field} must be at most ${max} characters`, `update ${field}`);
      assert400(await u.put(`${BASE}/${s._id}`, { [field]: 'y'.repeat(max + 1) }), `${field} must be at most ${max} characters`, `update ${field}`);
    }
  });

  test('[D-sessions-1] "Update: each present field must be a string": null is present and gets X must be a string', async () => {
    const s = await create(alice, { name: 'keep' });
    for (const field of ['name', 'provider', 'selectedModel', 'mode']) {
      for (const v of [null, 0, false, true, [], {}, ['x']]) {
        assert400(await alice.put(`${BASE}/${s._id}`, { [field]: v }), `${field} must be a string`, `${field}=${JSON.stringify(v)}`);
      }
    }
    const now = (await alice.get(`${BASE}/${s._id}`)).body.data;
    assert.deepEqual(now, s, 'a refused update changes nothing');
  });

  test('[D-sessions-2] "provider and selectedModel non-blank" on update (X must not be blank); name may be cleared', async () => {
    const s = await create(alice, { name: 'has a name' });
    for (const field of ['provider', 'selectedModel']) {
      for (const v of ['', ' ', '\t\n', '\u00a0']) {
        assert400(await alice.put(`${BASE}/${s._id}`, { [field]: v }), `${field} must not be blank`, `${field}=${JSON.stringify(v)}`);
      }
    }
    assert.deepEqual((await alice.get(`${BASE}/${s._id}`)).body.data, s);
    const cleared = await alice.put(`${BASE}/${s._id}`, { name: '' });
    assert.equal(cleared.status, 200);
    assert.equal(cleared.body.data.name, '');
    const spaced = await alice.put(`${BASE}/${s._id}`, { provider: '  p  ' });
    assert.equal(spaced.body.data.provider, '  p  ', 'a non-blank value is stored as given');
  });

  test('"Update: ... mode a member name" ("" is not absent on update)', async () => {
    const s = await create(alice, { mode: 'Plan' });
    for (const mode of ['', ' ', 'plan', 'Debug']) {
      assert400(await alice.put(`${BASE}/${s._id}`, { mode }), 'mode must be one of: Build, Plan, Ask', JSON.stringify(mode));
    }
    assert.equal((await alice.put(`${BASE}/${s._id}`, { mode: 'Ask' })).body.data.mode, 'Ask');
  });

  test('"Fields not named in the spec (providerId, user, project, _id) are ignored" (whatever their type)', async () => {
    const s = await create(alice, { projectId: 'ignore-proj' });
    await clockPast(s.updatedAt);
    const r = await alice.put(`${BASE}/${s._id}`, {
      name: 'renamed',
      providerId: 12,
      user: null,
      project: ['x'],
      _id: { $oid: MISSING },
      archived: 'yes',
      createdAt: 5,
      updatedAt: '1999-01-01T00:00:00.000Z',
    });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual({ ...r.body.data, updatedAt: 0 }, { ...s, name: 'renamed', updatedAt: 0 });
    assert.ok(r.body.data.updatedAt > s.updatedAt);
    assert.equal((await alice.get(`${BASE}/${MISSING}`)).status, 404, 'no session appeared under the _id of the body');
  });

  test('[D-sessions-9] "An update with no recognized field returns the session unchanged", same updatedAt and ETag', async () => {
    const created = await alice.post(BASE, newSession({ name: 'still' }));
    const s = created.body.data;
    const tag = created.headers.etag;
    const bodies = [{}, { providerId: 'other', user: 'mallory', project: 'p2', _id: MISSING }, { archived: true, unknown: [1] }];
    for (const b of bodies) {
      const r = await alice.put(`${BASE}/${s._id}`, b);
      assert.equal(r.status, 200, r.text);
      assert.deepEqual(r.body, { success: true, data: s }, JSON.stringify(b));
      assert.equal(r.headers.etag, tag);
    }
    const nobody = await server.request('PUT', `${BASE}/${s._id}`, { token: alice.token });
    assert.equal(nobody.status, 200);
    assert.deepEqual(nobody.body.data, s, 'a PUT without a body is an empty update');
    assert.deepEqual((await alice.get(`${BASE}/${s._id}`)).body.data, s);
    assert.equal((await alice.get(`${BASE}/${s._id}`)).headers.etag, tag);
    // and it does not move the session in its lists
    const later = await create(alice, { projectId: s.project });
    await alice.put(`${BASE}/${s._id}`, {});
    const list = (await alice.get(`${BASE}?projectId=${s.project}`)).body.data;
    assert.ok(ids(list).indexOf(later._id) < ids(list).indexOf(s._id));
  });

  test('"Unknown or malformed session id: 404 Chat session not found for get, update, delete"', async () => {
    const s = await create();
    const idsToTry = [
      MISSING,
      'ffffffffffffffffffffffff',
      s._id.toUpperCase(),
      `${s._id}0`,
      s._id.slice(0, 23),
      `${s._id}%20`,
      'not-an-id',
      '123',
      '%C3%A9t%C3%A9',
      '%F0%9F%98%80',
      'a%2Fb',
      '%00',
      '__proto__',
      'constructor',
      'hasOwnProperty',
      'toString',
      '%27%3B%20DROP%20TABLE%20sessions%3B--',
      'x'.repeat(5000),
    ];
    for (const id of idsToTry) {
      const what = id.length > 40 ? `${id.slice(0, 20)}...` : id;
      assert404(await alice.get(`${BASE}/${id}`), `GET ${what}`);
      assert404(await alice.put(`${BASE}/${id}`, { name: 'x' }), `PUT ${what}`);
      assert404(await alice.put(`${BASE}/${id}`, {}), `PUT {} ${what}`);
      assert404(await alice.del(`${BASE}/${id}`), `DELETE ${what}`);
    }
    assert.equal((await alice.get(`${BASE}/${s._id}`)).status, 200, 'the real session is untouched');
    // a deleted session is unknown too
    assert.equal((await alice.del(`${BASE}/${s._id}`)).status, 200);
    assert404(await alice.get(`${BASE}/${s._id}`), 'GET deleted');
    assert404(await alice.put(`${BASE}/${s._id}`, { name: 'x' }), 'PUT deleted');
    assert404(await alice.del(`${BASE}/${s._id}`), 'DELETE deleted');
  });

  test('"Turns of a session that does not exist ...: 200 with []"', async () => {
    const s = await create();
    await addTurn(alice, s._id);
    assert.equal((await alice.del(`${BASE}/${s._id}`)).status, 200);
    for (const id of [MISSING, 'not-an-id', s._id.toUpperCase(), s._id, '__proto__', 'x'.repeat(3000)]) {
      const r = await alice.get(`${BASE}/${id}/turns`);
      assert.equal(r.status, 200, `${id.slice(0, 30)}: ${r.text}`);
      assert.deepEqual(r.body, { success: true, data: [] });
      const paged = await alice.get(`${BASE}/${id}/turns?limit=10`);
      assert.deepEqual(paged.body, { success: true, data: [], nextCursor: null });
    }
  });

  test('"Delete removes the session\'s turns too" (nothing resurrects them: not a new turn, not a restart)', async () => {
    const other = await startServer();
    try {
      const u = other.as('alice');
      const keep = (await u.post(BASE, newSession())).body.data;
      const gone = (await u.post(BASE, newSession())).body.data;
      for (let i = 0; i < 5; i++) {
        assert.equal((await u.post(`${BASE}/${gone._id}/turns`, { role: 'user', content: `g${i}` })).status, 201);
        assert.equal((await u.post(`${BASE}/${keep._id}/turns`, { role: 'user', content: `k${i}` })).status, 201);
      }
      assert.equal((await u.del(`${BASE}/${gone._id}`)).status, 200);
      assert.deepEqual((await u.get(`${BASE}/${gone._id}/turns`)).body, { success: true, data: [] });
      assert404(await u.post(`${BASE}/${gone._id}/turns`, { role: 'user', content: 'again' }), 'a turn cannot recreate the session');
      assert.deepEqual((await u.get(`${BASE}/${gone._id}/turns`)).body.data, []);
      assert.equal((await u.get(`${BASE}/${keep._id}/turns`)).body.data.length, 5, "another session's turns stay");
      const metrics = await other.request('GET', '/metrics');
      assert.match(metrics.text, /^chat_session_api_turns 5$/m, 'the stored turn count dropped with the session');
      // and after a restart they are still gone
      await other.stop();
      const again = await startServer({ dataDir: other.dataDir });
      try {
        const v = again.as('alice');
        assert.deepEqual((await v.get(`${BASE}/${gone._id}/turns`)).body, { success: true, data: [] });
        assert404(await v.get(`${BASE}/${gone._id}`), 'after restart');
        assert.equal((await v.get(`${BASE}/${keep._id}/turns`)).body.data.length, 5);
      } finally {
        await again.stop();
      }
    } finally {
      await other.stop();
      removeDir(other.dataDir);
    }
  });

  test('"Order: session lists by updatedAt newest first, ties by _id descending"', async () => {
    const u = freshUser('order');
    const project = unique('order-proj');
    const made = [];
    for (let i = 0; i < 4; i++) made.push(await create(u, { projectId: project }));
    // a change moves a session to the front; a turn does too (past the millisecond of the last
    // creation: within one millisecond the tie goes to the larger _id)
    await clockPast(made[3].updatedAt);
    const touched = (await u.put(`${BASE}/${made[0]._id}`, { name: 'touched' })).body.data;
    await clockPast(touched.updatedAt);
    await addTurn(u, made[1]._id);
    let own = (await u.get(BASE)).body.data;
    assert.deepEqual(ids(own).slice(0, 2), [made[1]._id, made[0]._id]);
    assert.deepEqual(ids(own).slice(2), [made[3]._id, made[2]._id]);
    // ties: sessions created at the same instant share updatedAt; make sure some do
    let tied = false;
    for (let round = 0; round < 10 && !tied; round++) {
      const batch = await Promise.all(Array.from({ length: 30 }, () => create(u, { projectId: project })));
      tied = new Set(batch.map((s) => s.updatedAt)).size < batch.length;
    }
    assert.ok(tied, 'concurrent creations produced equal updatedAt values');
    own = (await u.get(BASE)).body.data;
    const proj = (await u.get(`${BASE}?projectId=${project}`)).body.data;
    const all = (await u.get(`${BASE}?archived=all`)).body.data;
    for (const [name, list] of [
      ['own', own],
      ['project', proj],
      ['archived=all', all],
    ]) {
      assert.deepEqual(ids(list), ids([...list].sort(listOrder)), `${name} list order`);
      assert.equal(new Set(ids(list)).size, list.length, `${name}: no repeats`);
    }
    assert.deepEqual(ids(own), ids(proj));
  });

  test('"turns oldest first"', async () => {
    const s = await create();
    const sequential = [];
    for (let i = 0; i < 10; i++) sequential.push(await addTurn(alice, s._id, { role: i % 2 ? 'assistant' : 'user', content: `t${i}` }));
    const concurrent = await Promise.all(Array.from({ length: 20 }, (_, i) => addTurn(alice, s._id, { role: 'user', content: `c${i}` })));
    const list = (await alice.get(`${BASE}/${s._id}/turns`)).body.data;
    assert.equal(list.length, 30);
    assert.deepEqual(list.slice(0, 10), sequential, 'in the order they were recorded');
    assert.deepEqual(new Set(ids(list.slice(10))), new Set(ids(concurrent)));
    for (let i = 1; i < list.length; i++) {
      const a = list[i - 1];
      const b = list[i];
      assert.ok(a.createdAt < b.createdAt || (a.createdAt === b.createdAt && a._id < b._id), `turn ${i} after turn ${i - 1}`);
    }
  });

  test('"Optional paging on both lists": limit 1-1000, cursor, nextCursor null on the last page, a bad one 400', async () => {
    const u = freshUser('paging');
    const made = [];
    for (let i = 0; i < 5; i++) made.push(await create(u));
    const whole = await u.get(BASE);
    assert.deepEqual(Object.keys(whole.body), ['success', 'data']);
    const p1 = await u.get(`${BASE}?limit=3`);
    assert.deepEqual(Object.keys(p1.body), ['success', 'data', 'nextCursor']);
    assert.equal(typeof p1.body.nextCursor, 'string');
    const p2 = await u.get(`${BASE}?limit=3&cursor=${encodeURIComponent(p1.body.nextCursor)}`);
    assert.equal(p2.body.nextCursor, null);
    assert.deepEqual([...p1.body.data, ...p2.body.data], whole.body.data);
    assert.equal((await u.get(`${BASE}?limit=0`)).status, 400);
    assert.equal((await u.get(`${BASE}?limit=3&cursor=nonsense`)).status, 400);
    const t = await u.get(`${BASE}/${made[0]._id}/turns?limit=1000`);
    assert.deepEqual(t.body, { success: true, data: [], nextCursor: null });
  });

  test('"Recording turns": POST .../turns answers 201 with the turn, 404 for an unknown session, bumps updatedAt', async () => {
    const s = await create();
    await clockPast(s.updatedAt);
    const r = await alice.post(`${BASE}/${s._id}/turns`, { role: 'user', content: 'hello', model: 'm', metadata: { a: 1 } });
    assert.equal(r.status, 201);
    assert.deepEqual(Object.keys(r.body), ['success', 'data']);
    assert.equal(r.body.success, true);
    const after = (await alice.get(`${BASE}/${s._id}`)).body.data;
    assert.ok(after.updatedAt > s.updatedAt);
    assert404(await alice.post(`${BASE}/${MISSING}/turns`, { role: 'user', content: 'x' }));
  });

  test('"Optimistic concurrency": answers carry an ETag; a PUT or DELETE whose If-Match no longer matches gets 412', async () => {
    const c = await alice.post(BASE, newSession());
    const tag = c.headers.etag;
    assert.match(tag, /^"[^"]+"$/);
    const id = c.body.data._id;
    assert.equal((await alice.put(`${BASE}/${id}`, { name: 'v2' }, { headers: { 'if-match': tag } })).status, 200);
    for (const r of [await alice.put(`${BASE}/${id}`, { name: 'v3' }, { headers: { 'if-match': tag } }), await alice.del(`${BASE}/${id}`, { headers: { 'if-match': tag } })]) {
      assert.equal(r.status, 412);
      assert.deepEqual(r.body, { success: false, message: 'Chat session was modified' });
    }
    assert.equal((await alice.get(`${BASE}/${id}`)).body.data.name, 'v2');
  });

  test('"Search: q on the session list matches name case-insensitively, on top of the spec\'s rule"', async () => {
    const u = freshUser('search');
    const a = await create(u, { name: 'Quarterly PLAN' });
    await create(u, { name: 'other' });
    const mine = await u.get(`${BASE}?q=plan`);
    assert.deepEqual(ids(mine.body.data), [a._id]);
    await create(bob, { name: 'quarterly plan', projectId: 'search-proj-x' });
    assert.deepEqual((await u.get(`${BASE}?q=quarterly`)).body.data.map((s) => s.user), [a.user], "without projectId only the caller's own");
  });

  test('"Archive": archive and unarchive; lists leave archived sessions out unless archived=true or archived=all', async () => {
    const u = freshUser('archive');
    const a = await create(u);
    const b = await create(u);
    const r = await u.post(`${BASE}/${a._id}/archive`);
    assert.equal(r.status, 200);
    assert.equal(r.body.data.archived, true);
    assert.deepEqual(ids((await u.get(BASE)).body.data), [b._id]);
    assert.deepEqual(ids((await u.get(`${BASE}?archived=true`)).body.data), [a._id]);
    assert.deepEqual(new Set(ids((await u.get(`${BASE}?archived=all`)).body.data)), new Set([a._id, b._id]));
    assert.equal((await u.post(`${BASE}/${a._id}/unarchive`)).body.data.archived, false);
    assert.equal((await u.get(BASE)).body.data.length, 2);
  });

  test('"Scoped tokens": an optional scope claim; no scope is everything; a missing scope -> 403 Forbidden', async () => {
    const reader = server.as('scoped', { scope: 'sessions:read' });
    const all = server.as('scoped');
    assert.equal((await reader.get(BASE)).status, 200);
    const denied = await reader.post(BASE, newSession());
    assert.equal(denied.status, 403);
    assert.deepEqual(denied.body, { success: false, message: 'Forbidden' });
    assert.equal((await all.post(BASE, newSession())).status, 201);
    assert.equal((await all.get('/api/v1/providers')).status, 200);
    assert.equal((await reader.get('/api/v1/providers')).status, 403);
  });
});
