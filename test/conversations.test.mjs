// Conversations (issue #13): the decisions of docs/TEAM-DECISIONS.md "Conversations" and of
// docs/DECISIONS.md "Conversations", one test each, against the real server over HTTP, on the
// engine of this run of the suite.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { removeDir, startServer, tokenFor } from './helpers.mjs';
import { alice, assertError, BASE, bob, create, MISSING, server, sharedServer } from './api-kit.mjs';

sharedServer();

let owners;
after(async () => {
  if (owners !== undefined) {
    await owners.stop();
    removeDir(owners.dataDir);
  }
});

async function say(who, id, content, over = {}) {
  const r = await who.post(`${BASE}/${id}/turns`, { role: 'user', content, ...over });
  assert.equal(r.status, 201, r.text);
  return r.body.data;
}

async function turns(who, id, query = '') {
  const r = await who.get(`${BASE}/${id}/turns${query}`);
  assert.equal(r.status, 200, r.text);
  return r.body.data;
}

const contents = (list) => list.map((t) => t.content);

/**
 * A session with this tree, made in this order through the API:
 *   q ─ a1              (a1 regenerated as a2: a sibling)
 *     └ a2 ─ q2 ─ a3    (the head)
 */
async function conversation(who = alice) {
  const s = await create(who);
  const q = await say(who, s._id, 'question');
  const a1 = await say(who, s._id, 'answer 1', { role: 'assistant' });
  const a2 = await say(who, s._id, 'answer 2', { role: 'assistant', parentId: q._id });
  const q2 = await say(who, s._id, 'follow-up');
  const a3 = await say(who, s._id, 'answer 3', { role: 'assistant' });
  return { s, q, a1, a2, q2, a3 };
}

describe('Conversations (docs/TEAM-DECISIONS.md)', () => {
  test('"Turns form a tree": a turn has parentId (null for a root), a session headTurnId (null with no turns)', async () => {
    const s = await create();
    assert.equal(s.headTurnId, null);
    const { q, a1, a2, q2, a3, s: t } = await conversation();
    assert.equal(q.parentId, null);
    assert.equal(a1.parentId, q._id);
    assert.equal(a2.parentId, q._id, 'a sibling of a1');
    assert.equal(q2.parentId, a2._id);
    assert.equal(a3.parentId, q2._id);
    assert.equal((await alice.get(`${BASE}/${t._id}`)).body.data.headTurnId, a3._id);
  });

  test(`POST .../turns takes a parentId of this session (default the head); "Every new turn becomes the session's head"`, async () => {
    const { s, q, a1 } = await conversation();
    const other = await conversation();
    for (const parentId of [other.q._id, MISSING, 'nope', '']) {
      assertError(await alice.post(`${BASE}/${s._id}/turns`, { role: 'user', content: 'x', parentId }), 400, 'parentId must be a turn of this session', parentId);
    }
    assertError(await alice.post(`${BASE}/${s._id}/turns`, { role: 'user', content: 'x', parentId: 5 }), 400, 'parentId must be a string or null');
    const under = await say(alice, s._id, 'under a1', { parentId: a1._id });
    assert.equal(under.parentId, a1._id);
    assert.equal((await alice.get(`${BASE}/${s._id}`)).body.data.headTurnId, under._id, 'the new turn is the head');
    const next = await say(alice, s._id, 'and on');
    assert.equal(next.parentId, under._id, 'without parentId: the head');
    assert.deepEqual(contents(await turns(alice, s._id, '?branch=head')), ['question', 'answer 1', 'under a1', 'and on']);
    assert.equal(q.parentId, null);
  });

  test('GET .../turns lists every turn oldest first; ?branch=head or ?branch=<turnId> the path to it; unknown: 404', async () => {
    const { s, a1, q2, a3 } = await conversation();
    assert.deepEqual(contents(await turns(alice, s._id)), ['question', 'answer 1', 'answer 2', 'follow-up', 'answer 3']);
    assert.deepEqual(contents(await turns(alice, s._id, '?branch=head')), ['question', 'answer 2', 'follow-up', 'answer 3']);
    assert.deepEqual(contents(await turns(alice, s._id, `?branch=${a1._id}`)), ['question', 'answer 1']);
    assert.deepEqual(contents(await turns(alice, s._id, `?branch=${q2._id}`)), ['question', 'answer 2', 'follow-up']);
    assert.deepEqual((await turns(alice, s._id, `?branch=${a3._id}`)).at(-1), a3, 'the turns as recorded');
    const other = await conversation();
    for (const branch of [MISSING, other.a1._id, 'HEAD', 'x']) {
      assertError(await alice.get(`${BASE}/${s._id}/turns?branch=${branch}`), 404, 'Turn not found', branch);
      assertError(await alice.get(`${BASE}/${s._id}/turns?branch=${branch}&limit=2`), 404, 'Turn not found', `${branch} paged`);
    }
    assert.deepEqual(await turns(alice, (await create())._id, '?branch=head'), [], 'a session with no turns has an empty head path');
    assert.deepEqual(await turns(alice, MISSING, '?branch=head'), [], '"Turns of a session that does not exist: 200 with []"');
    assert.deepEqual(await turns(alice, MISSING, `?branch=${a1._id}`), []);
  });

  test('[D-conversations-2] PUT with headTurnId switches the branch; headTurnId: null is refused', async () => {
    const { s, a1 } = await conversation();
    const r = await alice.put(`${BASE}/${s._id}`, { headTurnId: a1._id });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.body.data.headTurnId, a1._id);
    assert.ok(r.body.data.updatedAt > s.updatedAt);
    assert.deepEqual(contents(await turns(alice, s._id, '?branch=head')), ['question', 'answer 1']);
    const next = await say(alice, s._id, 'on the first answer');
    assert.equal(next.parentId, a1._id, 'new turns continue the switched head');
    for (const headTurnId of [MISSING, (await conversation()).q._id]) assertError(await alice.put(`${BASE}/${s._id}`, { headTurnId }), 400, 'headTurnId must be a turn of this session');
    assertError(await alice.put(`${BASE}/${s._id}`, { headTurnId: null }), 400, 'headTurnId must be a string');
    assertError(await alice.put(`${BASE}/${s._id}`, { headTurnId: ' ' }), 400, 'headTurnId must not be blank');
  });

  test('"PUT /api/v1/chat-sessions/:id/turns/:turnId changes content, metadata, usage, status of one turn"', async () => {
    const { s, a2 } = await conversation();
    const body = { content: [{ type: 'reasoning', text: 'hm' }, { type: 'text', text: 'better' }], metadata: { k: 'v' }, usage: { inputTokens: 3, outputTokens: 4 }, status: 'interrupted', role: 'system', model: 'x', parentId: null, createdAt: 'x' };
    const r = await alice.put(`${BASE}/${s._id}/turns/${a2._id}`, body);
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(Object.keys(r.body), ['success', 'data']);
    assert.deepEqual(r.body.data, { ...a2, content: body.content, metadata: body.metadata, usage: body.usage, status: 'interrupted' }, 'only those four: role, model, parentId, createdAt stay');
    assert.deepEqual(Object.keys(r.body.data), ['_id', 'session', 'parentId', 'user', 'role', 'content', 'metadata', 'usage', 'status', 'createdAt']);
    assert.deepEqual((await turns(alice, s._id)).find((t) => t._id === a2._id), r.body.data);
    // each field alone, the others kept
    const only = await alice.put(`${BASE}/${s._id}/turns/${a2._id}`, { status: 'complete' });
    assert.deepEqual(only.body.data, { ...r.body.data, status: 'complete' });
  });

  test('"DELETE of a turn removes it and its descendants (the head moves to the deleted turn\'s parent when it was among them)"', async () => {
    const { s, q, a1, a2, a3 } = await conversation();
    const d = await alice.del(`${BASE}/${s._id}/turns/${a2._id}`);
    assert.equal(d.status, 200, d.text);
    assert.deepEqual(contents(await turns(alice, s._id)), ['question', 'answer 1']);
    const after = (await alice.get(`${BASE}/${s._id}`)).body.data;
    assert.equal(after.headTurnId, q._id, 'the head (a3) was among them: its place is the deleted turn\'s parent');
    assert.deepEqual(contents(await turns(alice, s._id, '?branch=head')), ['question']);
    // the head not among them: it stays
    await alice.put(`${BASE}/${s._id}`, { headTurnId: a1._id });
    const sib = await say(alice, s._id, 'sibling', { parentId: q._id });
    await alice.put(`${BASE}/${s._id}`, { headTurnId: a1._id });
    assert.equal((await alice.del(`${BASE}/${s._id}/turns/${sib._id}`)).status, 200);
    assert.equal((await alice.get(`${BASE}/${s._id}`)).body.data.headTurnId, a1._id);
    assertError(await alice.get(`${BASE}/${s._id}/turns?branch=${a3._id}`), 404, 'Turn not found', 'a deleted descendant');
  });

  test('[D-conversations-6] turn writes honour If-Match, move the session and its ETag; a missing turn is 404', async () => {
    const { s, a1, a3 } = await conversation();
    let etag = (await alice.get(`${BASE}/${s._id}`)).headers.etag;
    for (const [method, path, json] of [
      ['PUT', `${BASE}/${s._id}/turns/${a1._id}`, { content: 'new' }],
      ['DELETE', `${BASE}/${s._id}/turns/${a3._id}`, undefined],
    ]) {
      const before = (await alice.get(`${BASE}/${s._id}`)).body.data;
      assertError(await server.request(method, path, { token: alice.token, json, headers: { 'if-match': '"stale"' } }), 412, 'Chat session was modified', `${method} stale`);
      const r = await server.request(method, path, { token: alice.token, json, headers: { 'if-match': etag } });
      assert.equal(r.status, 200, `${method}: ${r.text}`);
      const now = await alice.get(`${BASE}/${s._id}`);
      assert.ok(now.body.data.updatedAt > before.updatedAt, `${method} moves updatedAt`);
      assert.notEqual(now.headers.etag, etag, `${method} moves the ETag`);
      assert.equal(r.headers.etag, now.headers.etag, `${method} answers the session's new ETag`);
      assertError(await server.request(method, path, { token: alice.token, json, headers: { 'if-match': etag } }), 412, 'Chat session was modified', `${method} with the old tag`);
      etag = now.headers.etag;
    }
    for (const turnId of [MISSING, a3._id, (await conversation()).q._id]) {
      assertError(await alice.put(`${BASE}/${s._id}/turns/${turnId}`, { content: 'x' }), 404, 'Turn not found', `PUT ${turnId}`);
      assertError(await alice.del(`${BASE}/${s._id}/turns/${turnId}`), 404, 'Turn not found', `DELETE ${turnId}`);
    }
    assertError(await alice.put(`${BASE}/${MISSING}/turns/${a1._id}`, { content: 'x' }), 404, 'Chat session not found');
    assertError(await alice.del(`${BASE}/${MISSING}/turns/${a1._id}`), 404, 'Chat session not found');
    assertError(await alice.del(`${BASE}/${s._id}/turns/%20`), 400, 'Turn ID is required');
  });

  test('"A turn DELETE answers 200 {success:true, message:"Turn deleted"}."', async () => {
    const { s, a1 } = await conversation();
    const r = await alice.del(`${BASE}/${s._id}/turns/${a1._id}`);
    assert.equal(r.status, 200);
    assert.deepEqual(r.body, { success: true, message: 'Turn deleted' });
  });

  test("POST .../fork copies the path to turnId (default the head) into a new session of the caller's, with forkedFrom", async () => {
    const { s, a1, a3 } = await conversation();
    await alice.put(`${BASE}/${s._id}`, { name: 'source', mode: 'Plan' });
    const source = (await alice.get(`${BASE}/${s._id}`)).body.data;
    const r = await bob.post(`${BASE}/${s._id}/fork`, {});
    assert.equal(r.status, 201, r.text);
    const f = r.body.data;
    assert.equal(r.headers.etag, (await bob.get(`${BASE}/${f._id}`)).headers.etag);
    assert.deepEqual(Object.keys(f), ['_id', 'name', 'provider', 'selectedModel', 'mode', 'user', 'project', 'createdAt', 'updatedAt', 'archived', 'headTurnId', 'forkedFrom']);
    assert.deepEqual({ user: f.user, name: f.name, project: f.project, provider: f.provider, selectedModel: f.selectedModel, mode: f.mode, archived: f.archived }, { user: 'bob', name: 'source', project: source.project, provider: source.provider, selectedModel: source.selectedModel, mode: 'Plan', archived: false });
    assert.deepEqual(f.forkedFrom, { session: s._id, turn: a3._id });
    const copies = await turns(bob, f._id);
    const originals = await turns(alice, s._id, '?branch=head');
    assert.deepEqual(contents(copies), contents(originals));
    copies.forEach((c, i) => {
      assert.notEqual(c._id, originals[i]._id);
      assert.equal(c.session, f._id);
      assert.equal(c.createdAt, originals[i].createdAt);
      assert.equal(c.user, originals[i].user);
      assert.equal(c.parentId, i === 0 ? null : copies[i - 1]._id);
    });
    assert.equal(f.headTurnId, copies.at(-1)._id);
    const named = (await alice.post(`${BASE}/${s._id}/fork`, { turnId: a1._id, name: 'from the first answer' })).body.data;
    assert.equal(named.name, 'from the first answer');
    assert.deepEqual(named.forkedFrom, { session: s._id, turn: a1._id });
    assert.deepEqual(contents(await turns(alice, named._id)), ['question', 'answer 1']);
    assertError(await alice.post(`${BASE}/${s._id}/fork`, { turnId: MISSING }), 404, 'Turn not found');
    assertError(await alice.post(`${BASE}/${MISSING}/fork`, {}), 404, 'Chat session not found');
    assert.deepEqual((await alice.get(`${BASE}/${s._id}`)).body.data, source, 'the source is unchanged');
    // the copies are a conversation of their own
    const more = await say(bob, f._id, 'only in the fork');
    assert.equal(more.parentId, copies.at(-1)._id);
    assert.equal((await turns(alice, s._id)).length, 5);
  });

  test('[D-conversations-9] [D-conversations-10] content, parts, usage and status are held to their shapes, 400 naming what', async () => {
    const s = await create();
    const parts = [
      { type: 'text', text: 'Here is the fix.' },
      { type: 'reasoning', text: 'The test fails on null.' },
      { type: 'tool_call', id: 'call_1', name: 'edit_file', arguments: { path: 'src/a.ts', patch: ['-a', '+b'] } },
      { type: 'tool_result', toolCallId: 'call_1', content: 'applied', isError: false },
      { type: 'tool_result', toolCallId: 'call_2', content: { exit: 1, stderr: 'boom' }, isError: true },
      { type: 'file', name: 'shot.png', mediaType: 'image/png', data: 'iVBORw0KGgo=' },
      { type: 'file', name: 'spec.pdf', mediaType: 'application/pdf', url: 'https://example.com/spec.pdf' },
    ];
    const t = await say(alice, s._id, parts, { role: 'assistant', usage: { inputTokens: 1200, outputTokens: 340, cachedTokens: 1000, costUsd: 0.0042 }, status: 'streaming' });
    assert.deepEqual(t.content, parts);
    assert.deepEqual(t.usage, { inputTokens: 1200, outputTokens: 340, cachedTokens: 1000, costUsd: 0.0042 });
    assert.equal(t.status, 'streaming');
    assert.equal((await say(alice, s._id, 'plain', { parentId: null })).status, 'complete', 'complete by default');
    const cases = [
      [{ content: [] }, 'content must not be empty'],
      [{ content: [{ type: 'text', text: 'ok' }, { type: 'video' }] }, 'content[1].type must be one of: text, reasoning, tool_call, tool_result, file'],
      [{ content: [{ text: 'no type' }] }, 'content[0].type is required'],
      [{ content: [{ type: 'text' }] }, 'content[0].text is required'],
      [{ content: [{ type: 'text', text: 5 }] }, 'content[0].text must be a string'],
      [{ content: [{ type: 'tool_call', id: 'c', name: 'n' }] }, 'content[0].arguments is required'],
      [{ content: [{ type: 'tool_call', id: '', name: 'n', arguments: {} }] }, 'content[0].id is required'],
      [{ content: [{ type: 'tool_result', toolCallId: 'c', content: 'x', isError: 'no' }] }, 'content[0].isError must be true or false'],
      [{ content: [{ type: 'file', name: 'a', mediaType: 'image/png' }] }, 'content[0] must have exactly one of: data, url'],
      [{ content: [{ type: 'file', name: 'a', mediaType: 'image/png', data: 'AA==', url: 'https://x' }] }, 'content[0] must have exactly one of: data, url'],
      [{ content: [{ type: 'file', name: 'a', mediaType: 'png', data: 'AA==' }] }, 'content[0].mediaType must be a media type such as image/png'],
      [{ content: [{ type: 'file', name: 'a', mediaType: 'image/png', data: 'not base64!' }] }, 'content[0].data must be base64'],
      [{ content: [{ type: 'file', name: 'a', mediaType: 'image/png', url: 'no scheme' }] }, 'content[0].url must be an absolute URL'],
      [{ content: Array.from({ length: 257 }, () => ({ type: 'text', text: 'x' })) }, 'content must have at most 256 items'],
      [{ content: [{ type: 'tool_call', id: 'c', name: 'n', arguments: JSON.parse('['.repeat(40) + ']'.repeat(40)) }] }, 'content[0].arguments must be nested at most 32 levels deep'],
      [{ content: 'x', usage: { inputTokens: -1, outputTokens: 0 } }, 'usage.inputTokens must be an integer from 0 to 9007199254740991'],
      [{ content: 'x', usage: { inputTokens: 1.5, outputTokens: 0 } }, 'usage.inputTokens must be an integer from 0 to 9007199254740991'],
      [{ content: 'x', usage: { inputTokens: 1 } }, 'usage.outputTokens is required'],
      [{ content: 'x', usage: { inputTokens: 1, outputTokens: 1, costUsd: -0.01 } }, 'usage.costUsd must be a non-negative number'],
      [{ content: 'x', usage: [1] }, 'usage must be an object'],
      [{ content: 'x', status: 'done' }, 'status must be one of: complete, streaming, interrupted, error'],
    ];
    for (const [body, message] of cases) {
      assertError(await alice.post(`${BASE}/${s._id}/turns`, { role: 'assistant', ...body }), 400, message, message);
      assertError(await alice.put(`${BASE}/${s._id}/turns/${t._id}`, body), 400, message, `PUT: ${message}`);
    }
    assert.deepEqual((await turns(alice, s._id)).map((x) => x._id).length, 2, 'nothing was recorded');
    // a part's undeclared fields are not kept; declared ones come in their order
    const kept = await say(alice, s._id, [{ text: 'b', extra: 1, type: 'text' }]);
    assert.deepEqual(kept.content, [{ type: 'text', text: 'b' }]);
  });

  test('"A client that only sends {role, content: <string>} and reads whole lists sees what it saw before"', async () => {
    const s = await create();
    const a = await say(alice, s._id, 'one');
    const b = await say(alice, s._id, 'two', { role: 'assistant' });
    const list = await turns(alice, s._id);
    assert.deepEqual(list, [a, b]);
    for (const t of list) {
      const { parentId, status, ...firstRelease } = t;
      assert.deepEqual(Object.keys(firstRelease), ['_id', 'session', 'user', 'role', 'content', 'createdAt'], 'the first release\'s fields, in their order');
      assert.equal(status, 'complete');
      void parentId;
    }
    assert.equal(typeof list[0].content, 'string');
    const session = (await alice.get(`${BASE}/${s._id}`)).body.data;
    assert.deepEqual(Object.keys(session).slice(0, 10), ['_id', 'name', 'provider', 'selectedModel', 'mode', 'user', 'project', 'createdAt', 'updatedAt', 'archived']);
  });
});

describe('Conversations (docs/DECISIONS.md)', () => {
  test('[D-conversations-1] parentId: null makes a root beside the others; leaving it out continues the head', async () => {
    const { s, q } = await conversation();
    const root = await say(alice, s._id, 'edited first question', { parentId: null });
    assert.equal(root.parentId, null);
    assert.deepEqual(contents(await turns(alice, s._id, '?branch=head')), ['edited first question']);
    assert.equal((await say(alice, s._id, 'answer to the edit')).parentId, root._id);
    assert.equal(q.parentId, null);
  });

  test('[D-conversations-3] any turn may be deleted; the head goes to its parent, null for a root even beside others', async () => {
    const { s, q } = await conversation();
    const other = await say(alice, s._id, 'another root', { parentId: null });
    await alice.put(`${BASE}/${s._id}`, { headTurnId: (await turns(alice, s._id))[3]._id });
    assert.equal((await alice.del(`${BASE}/${s._id}/turns/${q._id}`)).status, 200);
    const after = (await alice.get(`${BASE}/${s._id}`)).body.data;
    assert.equal(after.headTurnId, null);
    assert.deepEqual(await turns(alice, s._id), [other]);
    assert.deepEqual(await turns(alice, s._id, '?branch=head'), []);
    const next = await say(alice, s._id, 'starts over');
    assert.equal(next.parentId, null, 'with no head, a new turn is a root');
  });

  test("[D-conversations-4] a turn's edit refuses null for any field, and one naming no field writes nothing", async () => {
    const { s, a1 } = await conversation();
    for (const field of ['content', 'metadata', 'usage', 'status']) {
      assert.equal((await alice.put(`${BASE}/${s._id}/turns/${a1._id}`, { [field]: null })).status, 400, field);
    }
    assertError(await alice.put(`${BASE}/${s._id}/turns/${a1._id}`, { content: '  ' }), 400, 'content must not be blank');
    const before = await alice.get(`${BASE}/${s._id}`);
    const r = await alice.put(`${BASE}/${s._id}/turns/${a1._id}`, { role: 'system' });
    assert.equal(r.status, 200);
    assert.deepEqual(r.body.data, a1);
    assert.equal(r.headers.etag, before.headers.etag);
    assert.deepEqual((await alice.get(`${BASE}/${s._id}`)).body.data, before.body.data, 'nothing written');
    assertError(await alice.put(`${BASE}/${s._id}/turns/${MISSING}`, {}), 404, 'Turn not found');
  });

  test("[D-conversations-5] a turn's status may go from any value to any other", async () => {
    const { s, a3 } = await conversation();
    for (const status of ['streaming', 'complete', 'error', 'streaming', 'interrupted', 'complete']) {
      const r = await alice.put(`${BASE}/${s._id}/turns/${a3._id}`, { status });
      assert.equal(r.body.data.status, status);
    }
  });

  test('[D-conversations-7] a fork honours If-Match; it may be made from an archived session or one without turns', async () => {
    const { s } = await conversation();
    const etag = (await alice.get(`${BASE}/${s._id}`)).headers.etag;
    assertError(await alice.post(`${BASE}/${s._id}/fork`, {}, { headers: { 'if-match': '"old"' } }), 412, 'Chat session was modified');
    assert.equal((await alice.post(`${BASE}/${s._id}/fork`, {}, { headers: { 'if-match': etag } })).status, 201);
    await alice.post(`${BASE}/${s._id}/archive`);
    const f = (await alice.post(`${BASE}/${s._id}/fork`, {})).body.data;
    assert.equal(f.archived, false);
    const empty = await create();
    const e = await alice.post(`${BASE}/${empty._id}/fork`, {});
    assert.equal(e.status, 201);
    assert.deepEqual(e.body.data.forkedFrom, { session: empty._id, turn: null });
    assert.equal(e.body.data.headTurnId, null);
  });

  test('[D-conversations-8] branch lists page like the whole list, with cursors bound to their branch', async () => {
    const { s, a1 } = await conversation();
    for (let i = 0; i < 5; i++) await say(alice, s._id, `more ${i}`);
    const walk = async (query) => {
      const out = [];
      let next = `${BASE}/${s._id}/turns?${query}&limit=2`;
      for (;;) {
        const r = await alice.get(next);
        assert.equal(r.status, 200, r.text);
        out.push(...r.body.data);
        if (r.body.nextCursor === null) return { out, last: r };
        next = `${BASE}/${s._id}/turns?${query}&limit=2&cursor=${encodeURIComponent(r.body.nextCursor)}`;
      }
    };
    assert.deepEqual(contents((await walk('branch=head')).out), contents(await turns(alice, s._id, '?branch=head')));
    const first = await alice.get(`${BASE}/${s._id}/turns?branch=head&limit=2`);
    assertError(await alice.get(`${BASE}/${s._id}/turns?limit=2&cursor=${encodeURIComponent(first.body.nextCursor)}`), 400, 'cursor belongs to another list or query');
    assertError(await alice.get(`${BASE}/${s._id}/turns?branch=${a1._id}&limit=2&cursor=${encodeURIComponent(first.body.nextCursor)}`), 400, 'cursor belongs to another list or query');
    const rest = await alice.get(`${BASE}/${s._id}/turns?branch=head&cursor=${encodeURIComponent(first.body.nextCursor)}`);
    assert.deepEqual(contents(rest.body.data), contents(await turns(alice, s._id, '?branch=head')).slice(2), 'a cursor without limit: the rest of the branch');
  });

  test("ACCESS=owner: another user's session is 404 on the new routes, its branches []; a fork of one's own is one's own", async () => {
    owners = await startServer({ env: { ACCESS: 'owner' } });
    const a = owners.as('alice');
    const b = owners.as('bob');
    const { s, a1 } = await conversation(a);
    assert.deepEqual(await turns(b, s._id, '?branch=head'), []);
    assert.deepEqual(await turns(b, s._id, `?branch=${a1._id}&limit=5`), []);
    assertError(await b.put(`${BASE}/${s._id}/turns/${a1._id}`, { content: 'x' }), 404, 'Chat session not found');
    assertError(await b.del(`${BASE}/${s._id}/turns/${a1._id}`), 404, 'Chat session not found');
    assertError(await b.post(`${BASE}/${s._id}/fork`, {}), 404, 'Chat session not found');
    assertError(await b.put(`${BASE}/${s._id}`, { headTurnId: a1._id }), 404, 'Chat session not found');
    assertError(await b.post(`${BASE}/${s._id}/turns`, { role: 'user', content: 'x', parentId: a1._id }), 404, 'Chat session not found');
    const f = await a.post(`${BASE}/${s._id}/fork`, {});
    assert.equal(f.body.data.user, 'alice');
    assertError(await b.get(`${BASE}/${f.body.data._id}`), 404, 'Chat session not found');
  });

  test('[D-security-6] a branch list needs sessions:read; editing, deleting, switching and forking need sessions:write', async () => {
    const { s, a1, a2 } = await conversation();
    const read = server.as('alice', { scope: 'sessions:read' });
    const write = server.as('alice', { scope: 'sessions:write' });
    assert.equal((await read.get(`${BASE}/${s._id}/turns?branch=head`)).status, 200);
    assertError(await write.get(`${BASE}/${s._id}/turns?branch=head`), 403, 'Forbidden');
    for (const [method, path, json] of [
      ['PUT', `${BASE}/${s._id}/turns/${a1._id}`, { status: 'error' }],
      ['PUT', `${BASE}/${s._id}`, { headTurnId: a1._id }],
      ['POST', `${BASE}/${s._id}/fork`, {}],
      ['DELETE', `${BASE}/${s._id}/turns/${a2._id}`, undefined],
    ]) {
      assertError(await server.request(method, path, { token: tokenFor('alice', { scope: 'sessions:read' }), json }), 403, 'Forbidden', `${method} ${path}`);
      const r = await server.request(method, path, { token: tokenFor('alice', { scope: 'sessions:write' }), json });
      assert.ok(r.status === 200 || r.status === 201, `${method} ${path}: ${r.status}`);
    }
  });

  test('metrics count the new routes by their pattern', async () => {
    const { s, a1 } = await conversation();
    await alice.put(`${BASE}/${s._id}/turns/${a1._id}`, { status: 'error' });
    await alice.post(`${BASE}/${s._id}/fork`, {});
    const text = (await server.request('GET', '/metrics')).text;
    assert.match(text, /http_requests_total\{method="PUT",route="\/api\/v1\/chat-sessions\/:id\/turns\/:turnId",status="200"\} [1-9]/);
    assert.match(text, /http_requests_total\{method="POST",route="\/api\/v1\/chat-sessions\/:id\/fork",status="201"\} [1-9]/);
  });
});
