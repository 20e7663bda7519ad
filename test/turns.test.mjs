// Turns, fully: metadata limits, roles, content and model rules, and what an append does to its session.
// The features beyond the spec's rows, as the features issue names them (its words, not the
// docs', are what the test names quote). Against the real server over HTTP.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { addTurn, alice, assert400, assert404, assert412, BASE, bob, clockPast, create, EMOJI, freshUser, get, ids, MISSING, nested, server, sharedServer, turnsOf, unique } from './api-kit.mjs';
import { newSession } from './helpers.mjs';

sharedServer();

describe('a. Turns, fully', () => {
  test('"metadata is a JSON object of at most 16 KiB (16384 bytes of JSON; 16385 rejected -> 400)"', async () => {
    const s = await create(alice);
    const limitMsg = 'metadata must be at most 16384 bytes of JSON';
    // {"k":"..."} is 8 bytes plus the string's JSON bytes
    const cases = [
      ['ASCII', (n) => ({ k: 'x'.repeat(n - 8) })],
      ['2-byte UTF-8 (bytes, not characters)', (n) => ({ k: '\u00e9'.repeat((n - 8) / 2) })],
      ['escaped quotes (JSON text, not the string value)', (n) => ({ k: '"'.repeat((n - 8) / 2) })],
    ];
    for (const [what, make] of cases) {
      const fits = make(16384);
      assert.equal(Buffer.byteLength(JSON.stringify(fits)), 16384, what);
      const t = await addTurn(alice, s._id, { role: 'user', content: 'c', metadata: fits });
      assert.deepEqual(t.metadata, fits, `${what}: stored as given`);
      const over = { ...fits, k: `${fits.k}x` };
      assert.equal(Buffer.byteLength(JSON.stringify(over)), 16385);
      assert400(await alice.post(`${BASE}/${s._id}/turns`, { role: 'user', content: 'c', metadata: over }), limitMsg, what);
    }
    // whitespace the client adds around the object is not metadata (decided: compact JSON counts)
    const fits = cases[0][1](16384);
    const pretty = `{"role": "user", "content": "c", "metadata": ${JSON.stringify(fits, null, 8)}}`;
    const r = await server.request('POST', `${BASE}/${s._id}/turns`, { token: alice.token, body: pretty, headers: { 'content-type': 'application/json' } });
    assert.equal(r.status, 201, r.text);
    assert.equal((await turnsOf(alice, s._id)).length, 4, 'the refused turns were not recorded');
  });

  test('"metadata ... nested at most 32 levels"', async () => {
    const s = await create(alice);
    const msg = 'metadata must be nested at most 32 levels deep';
    const ok32 = nested(32, { leaf: 1 });
    assert.deepEqual((await addTurn(alice, s._id, { role: 'user', content: 'c', metadata: ok32 })).metadata, ok32);
    assert.equal((await addTurn(alice, s._id, { role: 'user', content: 'c', metadata: nested(32) })).metadata.d.d.d !== undefined, true);
    assert400(await alice.post(`${BASE}/${s._id}/turns`, { role: 'user', content: 'c', metadata: nested(33) }), msg, '33 objects');
    // arrays are levels too: the object, then 31 arrays = 32; one more array = 33
    let arr = [1];
    for (let i = 1; i < 31; i++) arr = [arr];
    assert.equal((await alice.post(`${BASE}/${s._id}/turns`, { role: 'user', content: 'c', metadata: { a: arr } })).status, 201);
    assert400(await alice.post(`${BASE}/${s._id}/turns`, { role: 'user', content: 'c', metadata: { a: [arr] } }), msg, '33 with arrays');
    // an empty object at level 33 is still level 33
    assert400(await alice.post(`${BASE}/${s._id}/turns`, { role: 'user', content: 'c', metadata: nested(32, { e: {} }) }), msg, 'empty object at 33');
    // absurdly deep: a clear 400, no stack overflow, no 500
    const n = 100_000;
    const deep = `{"role":"user","content":"c","metadata":${'{"a":'.repeat(n)}1${'}'.repeat(n)}}`;
    const r = await server.request('POST', `${BASE}/${s._id}/turns`, { token: alice.token, body: deep, headers: { 'content-type': 'application/json' } });
    assert400(r, msg, '100000 levels');
    const deepArrays = `{"role":"user","content":"c","metadata":{"a":${'['.repeat(n)}${']'.repeat(n)}}}`;
    assert400(await server.request('POST', `${BASE}/${s._id}/turns`, { token: alice.token, body: deepArrays, headers: { 'content-type': 'application/json' } }), msg, '100000 arrays');
    assert.equal((await turnsOf(alice, s._id)).length, 3);
    assert.equal((await server.request('GET', '/healthz')).status, 200, 'still serving');
  });

  test('"non-object metadata" -> 400 metadata must be a JSON object; null on create-style bodies is absent', async () => {
    const s = await create(alice);
    for (const metadata of [[], [1], [{}], 'x', '', '{}', 0, 1, -1, true, false]) {
      assert400(await alice.post(`${BASE}/${s._id}/turns`, { role: 'user', content: 'c', metadata }), 'metadata must be a JSON object', JSON.stringify(metadata));
    }
    const nul = await addTurn(alice, s._id, { role: 'user', content: 'c', metadata: null });
    assert.equal('metadata' in nul, false, 'null is absent: no metadata key, not "metadata": null');
    const empty = await addTurn(alice, s._id, { role: 'user', content: 'c', metadata: {} });
    assert.deepEqual(empty.metadata, {}, 'an empty object is an object');
    assert.deepEqual(ids(await turnsOf(alice, s._id)), [nul._id, empty._id]);
  });

  test('"metadata is a JSON object": any JSON object is stored and returned exactly (odd keys included)', async () => {
    const s = await create(alice);
    const metadata = JSON.parse(
      '{"__proto__":{"polluted":true},"constructor":{"prototype":1},"toString":"x","z":1,"a":[1,2.5,-3e-7,null,true,"\\u0000",{"b":{}}],"ünï":"😀","":"empty key","n":null}',
    );
    const t = await addTurn(alice, s._id, { role: 'tool', content: 'c', metadata });
    const back = (await turnsOf(alice, s._id))[0];
    for (const m of [t.metadata, back.metadata]) {
      assert.deepEqual(Object.keys(m), Object.keys(metadata), 'keys and their order kept');
      assert.deepEqual(JSON.stringify(m), JSON.stringify(metadata));
      assert.ok(Object.prototype.hasOwnProperty.call(m, '__proto__'), '__proto__ is an ordinary key');
    }
    assert.equal({}.polluted, undefined);
    // and the server did not pick anything up from it
    assert.equal((await alice.get(`${BASE}/${s._id}`)).body.data.polluted, undefined);
  });

  test('roles exactly user|assistant|system|tool; others and case variants -> 400 role must be one of them', async () => {
    const s = await create(alice);
    for (const role of ['user', 'assistant', 'system', 'tool']) assert.equal((await addTurn(alice, s._id, { role, content: 'c' })).role, role);
    const msg = 'role must be one of: user, assistant, system, tool';
    for (const role of ['User', 'USER', 'Assistant', 'SYSTEM', 'Tool', ' user', 'user ', 'function', 'developer', 'human', 'ai', 'model', 'bot', 'toString', '__proto__', 'constructor', 'user,assistant', '0']) {
      assert400(await alice.post(`${BASE}/${s._id}/turns`, { role, content: 'c' }), msg, JSON.stringify(role));
    }
    for (const role of [undefined, null, '', '   ']) {
      assert400(await alice.post(`${BASE}/${s._id}/turns`, { role, content: 'c' }), 'role is required', JSON.stringify(role));
    }
    for (const role of [0, 1, true, ['user'], { user: true }]) {
      assert400(await alice.post(`${BASE}/${s._id}/turns`, { role, content: 'c' }), 'role must be a string', JSON.stringify(role));
    }
    assert.equal((await turnsOf(alice, s._id)).length, 4);
  });

  test('[D-sessions-5] content missing, null or blank -> "content is required"; not a string or parts -> 400', async () => {
    const s = await create(alice);
    for (const content of [undefined, null, '', ' ', '\n\t']) {
      assert400(await alice.post(`${BASE}/${s._id}/turns`, { role: 'user', content }), 'content is required', JSON.stringify(content));
    }
    for (const content of [0, 42, false, { text: 'a' }]) {
      assert400(await alice.post(`${BASE}/${s._id}/turns`, { role: 'user', content }), 'content must be a string or an array of parts', JSON.stringify(content));
    }
    assert400(await alice.post(`${BASE}/${s._id}/turns`, { role: 'user', content: [] }), 'content must not be empty');
    assert400(await alice.post(`${BASE}/${s._id}/turns`, { role: 'user', content: ['a'] }), 'content[0] must be an object');
    // the first failing field answers: role before content
    assert400(await alice.post(`${BASE}/${s._id}/turns`, {}), 'role is required');
    assert400(await alice.post(`${BASE}/${s._id}/turns`, { role: 'nope' }), 'role must be one of: user, assistant, system, tool');
    // content is kept exactly: whitespace, newlines, non-ASCII, large
    const text = `  line 1\n\tline 2 ${EMOJI} é 日本 \u0000 end  `;
    assert.equal((await addTurn(alice, s._id, { role: 'user', content: text })).content, text);
    const big = 'x'.repeat(200_000);
    assert.equal((await addTurn(alice, s._id, { role: 'assistant', content: big })).content.length, big.length);
    assert.deepEqual((await turnsOf(alice, s._id)).map((t) => t.content.length), [text.length, big.length]);
  });

  test('"model optional string" (absent or null -> no model key; not a string -> 400; at most 200 characters)', async () => {
    const s = await create(alice);
    assert.equal('model' in (await addTurn(alice, s._id, { role: 'assistant', content: 'c' })), false);
    assert.equal('model' in (await addTurn(alice, s._id, { role: 'assistant', content: 'c', model: null })), false);
    assert.equal((await addTurn(alice, s._id, { role: 'assistant', content: 'c', model: 'gpt-4o' })).model, 'gpt-4o');
    assert.equal((await addTurn(alice, s._id, { role: 'assistant', content: 'c', model: EMOJI.repeat(200) })).model, EMOJI.repeat(200));
    for (const model of [1, true, [], {}]) {
      assert400(await alice.post(`${BASE}/${s._id}/turns`, { role: 'assistant', content: 'c', model }), 'model must be a string', JSON.stringify(model));
    }
    assert400(await alice.post(`${BASE}/${s._id}/turns`, { role: 'assistant', content: 'c', model: 'm'.repeat(201) }), 'model must be at most 200 characters');
    assert400(await alice.post(`${BASE}/${s._id}/turns`, { role: 'assistant', content: 'c', model: EMOJI.repeat(201) }), 'model must be at most 200 characters');
  });

  test('"appending bumps the session\'s updatedAt (and so its ETag) and moves the session to the front of its lists"', async () => {
    const u = freshUser('bump');
    const project = unique('bump-proj');
    const target = await u.post(BASE, newSession({ projectId: project }));
    const s = target.body.data;
    const others = [];
    for (let i = 0; i < 3; i++) others.push(await create(u, { projectId: project }));
    others.push(await create(bob, { projectId: project }));
    assert.notEqual(ids((await u.get(BASE)).body.data)[0], s._id);
    const before = await get(u, s._id);
    assert.equal(before.headers.etag, target.headers.etag);
    await clockPast(others.at(-1).updatedAt);
    const t = await addTurn(bob, s._id, { role: 'assistant', content: 'answer' });
    const after = await get(u, s._id);
    assert.ok(after.body.data.updatedAt > before.body.data.updatedAt, 'updatedAt moved forward');
    assert.ok(after.body.data.updatedAt >= t.createdAt, 'to the time of the turn at least');
    assert.notEqual(after.headers.etag, before.headers.etag, 'a new ETag');
    assert.deepEqual({ ...after.body.data, updatedAt: 0, headTurnId: 0 }, { ...before.body.data, updatedAt: 0, headTurnId: 0 }, 'nothing else changed');
    assert.equal(after.body.data.headTurnId, t._id, 'but the head: the new turn');
    assert.equal(ids((await u.get(BASE)).body.data)[0], s._id, "front of the owner's list");
    assert.equal(ids((await bob.get(`${BASE}?projectId=${project}`)).body.data)[0], s._id, "front of the project's list");
    assert.equal(ids((await u.get(`${BASE}?archived=all&limit=1`)).body.data)[0], s._id);
    // and the old ETag is now stale
    assert412(await u.put(`${BASE}/${s._id}`, { name: 'x' }, { headers: { 'if-match': before.headers.etag } }));
  });

  test('"turns list oldest first" (sequential and concurrent appends, no turn lost or repeated)', async () => {
    const s = await create(alice);
    const first = await addTurn(alice, s._id, { role: 'system', content: 'first' });
    const burst = await Promise.all(Array.from({ length: 40 }, (_, i) => addTurn(i % 2 ? alice : bob, s._id, { role: 'user', content: `b${i}` })));
    const last = await addTurn(alice, s._id, { role: 'assistant', content: 'last' });
    const list = await turnsOf(alice, s._id);
    assert.equal(list.length, 42);
    assert.equal(list[0]._id, first._id);
    assert.equal(list[41]._id, last._id);
    assert.deepEqual(new Set(ids(list.slice(1, 41))), new Set(ids(burst)));
    for (let i = 1; i < list.length; i++) assert.ok(list[i - 1].createdAt < list[i].createdAt || (list[i - 1].createdAt === list[i].createdAt && list[i - 1]._id < list[i]._id), `turn ${i}`);
  });

  test('"POST turns on an unknown session -> 404 Chat session not found"', async () => {
    const s = await create(alice);
    await alice.del(`${BASE}/${s._id}`);
    for (const id of [MISSING, s._id, s._id.toUpperCase(), 'not-an-id', '__proto__', 'x'.repeat(1000)]) {
      assert404(await alice.post(`${BASE}/${id}/turns`, { role: 'user', content: 'c' }), id.slice(0, 30));
      assert.deepEqual((await alice.get(`${BASE}/${id}/turns`)).body.data, [], 'nothing recorded');
    }
  });

  test("under a burst of appends a turn's createdAt is when it was recorded, its _id's seconds that second", async () => {
    const u = freshUser('burst');
    const s = await create(u);
    const answers = await Promise.all(
      Array.from({ length: 1000 }, (_, i) =>
        u.post(`${BASE}/${s._id}/turns`, { role: 'user', content: `burst ${i}` }).then((r) => ({ r, receivedAt: Date.now() })),
      ),
    );
    let inFuture = 0;
    let maxAheadMs = 0;
    let idMismatch = 0;
    for (const { r, receivedAt } of answers) {
      assert.equal(r.status, 201, r.text);
      const t = r.body.data;
      const ahead = Date.parse(t.createdAt) - receivedAt;
      if (ahead > 0) inFuture++;
      maxAheadMs = Math.max(maxAheadMs, ahead);
      if (parseInt(t._id.slice(0, 8), 16) !== Math.floor(Date.parse(t.createdAt) / 1000)) idMismatch++;
    }
    const session = (await u.get(`${BASE}/${s._id}`)).body.data;
    const sessionAhead = Date.parse(session.updatedAt) - Date.now();
    assert.deepEqual(
      { turnsStampedAfterTheirAnswer: inFuture, turnIdsWhoseSecondsDisagreeWithCreatedAt: idMismatch, sessionUpdatedAtInTheFuture: sessionAhead > 0 },
      { turnsStampedAfterTheirAnswer: 0, turnIdsWhoseSecondsDisagreeWithCreatedAt: 0, sessionUpdatedAtInTheFuture: false },
      `createdAt ran up to ${maxAheadMs} ms ahead of the clock; the session's updatedAt is ${sessionAhead} ms ahead`,
    );
  });
});
