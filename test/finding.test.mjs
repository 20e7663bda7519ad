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
