// The spec (api-v1.md), chat sessions: one test per table row and numbered rule, named after it.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { failingWrite, newSession, removeDir, startServer } from './helpers.mjs';
import { alice, BASE, bob, create, server, sharedServer } from './api-kit.mjs';

sharedServer();

describe('Endpoints table (chat sessions)', () => {
  test('GET /api/v1/chat-sessions | optional projectId | 200 {success: true, data: [<chat session>, ...]}', async () => {
    const s = await create(alice, { projectId: 'row-list' });
    const r = await alice.get(`${BASE}?projectId=row-list`);
    assert.equal(r.status, 200);
    assert.equal(r.body.success, true);
    assert.ok(Array.isArray(r.body.data));
    assert.deepEqual(r.body.data, [s]);
  });

  test('POST /api/v1/chat-sessions | projectId, providerId, selectedModel, mode?, name? | 201 the session', async () => {
    const r = await alice.post(BASE, newSession({ projectId: 'row-create', name: 'Planning', mode: 'Plan' }));
    assert.equal(r.status, 201);
    assert.equal(r.body.success, true);
    const s = r.body.data;
    assert.match(s._id, /^[0-9a-f]{24}$/);
    assert.equal(s.name, 'Planning');
    assert.equal(s.provider, '665f1c2a9b1e8a0012ab34c1');
    assert.equal(s.selectedModel, 'gpt-4o');
    assert.equal(s.mode, 'Plan');
    assert.equal(s.user, 'alice');
    assert.equal(s.project, 'row-create');
  });

  test('GET /api/v1/chat-sessions/:id | none | 200 {success: true, data: <chat session>}', async () => {
    const s = await create();
    const r = await alice.get(`${BASE}/${s._id}`);
    assert.equal(r.status, 200);
    assert.deepEqual(r.body, { success: true, data: s });
  });

  test('PUT /api/v1/chat-sessions/:id | any of name, provider, selectedModel, mode | 200 the updated session', async () => {
    const s = await create();
    const r = await alice.put(`${BASE}/${s._id}`, { name: 'n2', provider: 'p2', selectedModel: 'm2', mode: 'Ask' });
    assert.equal(r.status, 200);
    assert.equal(r.body.success, true);
    assert.equal(r.body.data.name, 'n2');
    assert.equal(r.body.data.provider, 'p2');
    assert.equal(r.body.data.selectedModel, 'm2');
    assert.equal(r.body.data.mode, 'Ask');
    assert.deepEqual((await alice.get(`${BASE}/${s._id}`)).body.data, r.body.data);
  });

  test('DELETE /api/v1/chat-sessions/:id | none | 200 {success: true, message: <text confirming deletion>}', async () => {
    const s = await create();
    const r = await alice.del(`${BASE}/${s._id}`);
    assert.equal(r.status, 200);
    assert.deepEqual(r.body, { success: true, message: 'Chat session deleted' });
    assert.equal((await alice.get(`${BASE}/${s._id}`)).status, 404);
  });

  test('GET /api/v1/chat-sessions/:id/turns | none | 200 {success: true, data: [<turn>, ...]}', async () => {
    const s = await create();
    const t = await alice.post(`${BASE}/${s._id}/turns`, { role: 'user', content: 'hello' });
    assert.equal(t.status, 201, t.text);
    const r = await alice.get(`${BASE}/${s._id}/turns`);
    assert.equal(r.status, 200);
    assert.equal(r.body.success, true);
    assert.deepEqual(r.body.data, [t.body.data]);
  });
});

describe('Chat session fields table', () => {
  test('name: optional at creation ("" when none was given)', async () => {
    assert.equal((await create()).name, '');
  });
  test('provider: set from providerId at creation; updatable through the field provider', async () => {
    const s = await create(alice, { providerId: 'prov-a' });
    assert.equal(s.provider, 'prov-a');
    assert.equal('providerId' in s, false);
    const r = await alice.put(`${BASE}/${s._id}`, { provider: 'prov-b' });
    assert.equal(r.body.data.provider, 'prov-b');
  });
  test('selectedModel: required at creation; updatable', async () => {
    assert.equal((await alice.post(BASE, { projectId: 'p', providerId: 'q' })).body.message, 'selectedModel is required');
    const s = await create();
    assert.equal((await alice.put(`${BASE}/${s._id}`, { selectedModel: 'other' })).body.data.selectedModel, 'other');
  });
  test('mode: default at creation is Build; updatable', async () => {
    const s = await create();
    assert.equal(s.mode, 'Build');
    assert.equal((await alice.put(`${BASE}/${s._id}`, { mode: 'Plan' })).body.data.mode, 'Plan');
  });
  test('user: set from the authenticated user at creation', async () => {
    assert.equal((await create(bob)).user, 'bob');
  });
  test('project: set from projectId at creation', async () => {
    assert.equal((await create(alice, { projectId: 'the-project' })).project, 'the-project');
  });
  test('ChatSessionMode: the wire value is the member name as a string', async () => {
    for (const mode of ['Build', 'Plan', 'Ask']) assert.equal((await create(alice, { mode })).mode, mode);
  });
});

describe('Rules', () => {
  test('Rule 1: with projectId present and non-empty, the sessions of that project are returned', async () => {
    const a = await create(alice, { projectId: 'rule1-shared' });
    const b = await create(bob, { projectId: 'rule1-shared' });
    await create(alice, { projectId: 'rule1-other' });
    const r = await alice.get(`${BASE}?projectId=rule1-shared`);
    assert.deepEqual(new Set(r.body.data.map((s) => s._id)), new Set([a._id, b._id]));
  });

  test("Rule 1: otherwise (absent or empty projectId) the authenticated user's sessions are returned", async () => {
    const carol = server.as('carol-rule1');
    const mine = [await create(carol, { projectId: 'x1' }), await create(carol, { projectId: 'x2' })];
    await create(alice, { projectId: 'x1' });
    for (const path of [BASE, `${BASE}?projectId=`]) {
      const r = await carol.get(path);
      assert.equal(r.status, 200);
      assert.deepEqual(new Set(r.body.data.map((s) => s._id)), new Set(mine.map((s) => s._id)));
    }
  });

  test('Rule 2: validation order is projectId, then providerId, then selectedModel; the first missing one is the error', async () => {
    assert.equal((await alice.post(BASE, {})).body.message, 'projectId is required');
    assert.equal((await alice.post(BASE, { selectedModel: 'm' })).body.message, 'projectId is required');
    assert.equal((await alice.post(BASE, { projectId: 'p', selectedModel: 'm' })).body.message, 'providerId is required');
    assert.equal((await alice.post(BASE, { projectId: 'p', providerId: 'q' })).body.message, 'selectedModel is required');
  });

  test('Rule 2: when mode is absent or empty, the mode is Build', async () => {
    assert.equal((await create(alice, {})).mode, 'Build');
    assert.equal((await create(alice, { mode: '' })).mode, 'Build');
  });

  test('Rule 2: when mode is given, it is looked up as a member name of ChatSessionMode', async () => {
    assert.equal((await create(alice, { mode: 'Ask' })).mode, 'Ask');
  });

  test('Rule 3: only name, provider, selectedModel and mode are taken from the body; any other field is ignored', async () => {
    const s = await create();
    const r = await alice.put(`${BASE}/${s._id}`, {
      name: 'kept',
      _id: '000000000000000000000000',
      user: 'mallory',
      project: 'elsewhere',
      providerId: 'ignored-on-update',
      createdAt: '2000-01-01T00:00:00.000Z',
      archived: true,
      extra: 1,
    });
    assert.equal(r.status, 200);
    assert.equal(r.body.data._id, s._id);
    assert.equal(r.body.data.name, 'kept');
    assert.equal(r.body.data.user, s.user);
    assert.equal(r.body.data.project, s.project);
    assert.equal(r.body.data.provider, s.provider);
    assert.equal(r.body.data.createdAt, s.createdAt);
    assert.equal(r.body.data.archived, false);
    assert.equal('extra' in r.body.data, false);
  });

  test('Rule 3: fields are taken only when present (not undefined); absent ones keep their value', async () => {
    const s = await create(alice, { name: 'orig', mode: 'Plan' });
    const r = await alice.put(`${BASE}/${s._id}`, { selectedModel: 'only-this' });
    assert.equal(r.body.data.name, 'orig');
    assert.equal(r.body.data.mode, 'Plan');
    assert.equal(r.body.data.provider, s.provider);
    assert.equal(r.body.data.selectedModel, 'only-this');
  });

  test('Rule 3: the creation field is providerId while the update field is provider', async () => {
    const s = await create(alice, { providerId: 'create-field' });
    assert.equal(s.provider, 'create-field');
    const ignored = await alice.put(`${BASE}/${s._id}`, { providerId: 'not-taken' });
    assert.equal(ignored.body.data.provider, 'create-field');
    const taken = await alice.put(`${BASE}/${s._id}`, { provider: 'taken' });
    assert.equal(taken.body.data.provider, 'taken');
  });

  test('Rule 4: the delete confirmation message is the text "Chat session deleted"', async () => {
    const s = await create();
    assert.equal((await alice.del(`${BASE}/${s._id}`)).body.message, 'Chat session deleted');
  });

  test('Rule 5: the turns list contains all turns of the session', async () => {
    const s = await create();
    const made = [];
    for (let i = 0; i < 25; i++) made.push((await alice.post(`${BASE}/${s._id}/turns`, { role: i % 2 ? 'assistant' : 'user', content: `turn ${i}` })).body.data);
    const r = await alice.get(`${BASE}/${s._id}/turns`);
    assert.deepEqual(r.body.data, made);
  });
});

describe('Authentication rules', () => {
  test('Auth 1: every endpoint of the chat session group requires an authenticated user', async () => {
    const s = await create();
    const calls = [
      ['GET', BASE],
      ['POST', BASE],
      ['GET', `${BASE}/${s._id}`],
      ['PUT', `${BASE}/${s._id}`],
      ['DELETE', `${BASE}/${s._id}`],
      ['GET', `${BASE}/${s._id}/turns`],
      ['POST', `${BASE}/${s._id}/turns`],
    ];
    for (const [method, path] of calls) {
      const r = await server.request(method, path, { json: method === 'GET' || method === 'DELETE' ? undefined : {} });
      assert.equal(r.status, 401, `${method} ${path}`);
      assert.deepEqual(r.body, { success: false, message: 'Unauthorized' });
    }
    assert.equal((await alice.get(`${BASE}/${s._id}`)).status, 200, 'the session is still there');
  });

  test('Auth 2: list without an authenticated user -> 401 {success: false, message: "Unauthorized"}', async () => {
    const r = await server.request('GET', BASE);
    assert.equal(r.status, 401);
    assert.deepEqual(r.body, { success: false, message: 'Unauthorized' });
  });

  test('Auth 2: create without an authenticated user -> 401 {success: false, message: "Unauthorized"}', async () => {
    const r = await server.request('POST', BASE, { json: newSession() });
    assert.equal(r.status, 401);
    assert.deepEqual(r.body, { success: false, message: 'Unauthorized' });
  });

  test('Auth 4: no ownership check for read, update, delete or turns of a session by :id (ACCESS=shared, the default)', async () => {
    const s = await create(alice);
    assert.equal((await bob.get(`${BASE}/${s._id}`)).status, 200);
    assert.equal((await bob.post(`${BASE}/${s._id}/turns`, { role: 'user', content: 'from bob' })).status, 201);
    assert.equal((await bob.get(`${BASE}/${s._id}/turns`)).body.data.length, 1);
    assert.equal((await bob.put(`${BASE}/${s._id}`, { name: 'bob was here' })).body.data.name, 'bob was here');
    assert.equal((await bob.del(`${BASE}/${s._id}`)).status, 200);
  });
});

describe('Errors table (chat sessions)', () => {
  test('Chat session list or create without an authenticated user | 401 | Unauthorized', async () => {
    for (const [m, json] of [
      ['GET', undefined],
      ['POST', newSession()],
    ]) {
      const r = await server.request(m, BASE, { json });
      assert.equal(r.status, 401);
      assert.equal(r.body.message, 'Unauthorized');
    }
  });

  test('Create without projectId | 400 | projectId is required', async () => {
    const r = await alice.post(BASE, newSession({ projectId: undefined }));
    assert.equal(r.status, 400);
    assert.deepEqual(r.body, { success: false, message: 'projectId is required' });
  });

  test('Create without providerId | 400 | providerId is required', async () => {
    const r = await alice.post(BASE, newSession({ providerId: undefined }));
    assert.equal(r.status, 400);
    assert.deepEqual(r.body, { success: false, message: 'providerId is required' });
  });

  test('Create without selectedModel | 400 | selectedModel is required', async () => {
    const r = await alice.post(BASE, newSession({ selectedModel: undefined }));
    assert.equal(r.status, 400);
    assert.deepEqual(r.body, { success: false, message: 'selectedModel is required' });
  });

  test('Session get, update, delete or turns with an empty :id | 400 | Session ID is required', async () => {
    const calls = [
      ['GET', `${BASE}/%20`],
      ['PUT', `${BASE}/%20`],
      ['DELETE', `${BASE}/%20`],
      ['GET', `${BASE}//turns`],
      ['GET', `${BASE}/%20/turns`],
      ['POST', `${BASE}//turns`],
      ['GET', `${BASE}//`],
      ['DELETE', `${BASE}//`],
    ];
    for (const [method, path] of calls) {
      const r = await alice[{ GET: 'get', PUT: 'put', DELETE: 'del', POST: 'post' }[method]](path, method === 'PUT' || method === 'POST' ? {} : undefined);
      assert.equal(r.status, 400, `${method} ${path}: ${r.text}`);
      assert.deepEqual(r.body, { success: false, message: 'Session ID is required' }, `${method} ${path}`);
    }
  });

  test('Session get, update or delete, when the failure message contains "not found" | 404 | the failure\'s message', async () => {
    const missing = '0123456789abcdef01234567';
    for (const r of [await alice.get(`${BASE}/${missing}`), await alice.put(`${BASE}/${missing}`, { name: 'x' }), await alice.del(`${BASE}/${missing}`)]) {
      assert.equal(r.status, 404);
      assert.deepEqual(r.body, { success: false, message: 'Chat session not found' });
      assert.match(r.body.message, /not found/);
    }
  });

  test('Any other failure in a chat session operation | 500 | the failure\'s message', async () => {
    // a real failure: the server's first write fails (test fault injection)
    const faulty = await startServer({ env: { CHAT_SESSION_API_FAULTS: failingWrite(1) } });
    try {
      const u = faulty.as('alice');
      const r = await u.post(BASE, newSession());
      assert.equal(r.status, 500);
      assert.deepEqual(r.body, { success: false, message: 'Storage write failed' });
      assert.equal((await u.post(BASE, newSession())).status, 201, 'the server keeps serving');
    } finally {
      await faulty.stop();
      removeDir(faulty.dataDir);
    }
  });

  test('Session turns: any failure (no 404 mapping) | 500 — a missing session is not a failure: 200 []', async () => {
    const r = await alice.get(`${BASE}/0123456789abcdef01234567/turns`);
    assert.equal(r.status, 200);
    assert.deepEqual(r.body, { success: true, data: [] });
  });
});

describe('Versioning', () => {
  test('Versioning 1: the version is carried in the path prefix /api/v1', async () => {
    assert.equal((await alice.get('/api/v1/chat-sessions')).status, 200);
    assert.equal((await alice.get('/api/v2/chat-sessions')).status, 404);
    assert.equal((await alice.get('/chat-sessions')).status, 404);
  });
});
