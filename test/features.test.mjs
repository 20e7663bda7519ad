// The features beyond the spec's rows, point by point as the issue names them: turns, paging,
// search, archive, safe concurrent edits (ETag / If-Match), owner-only access, scoped tokens,
// provider redaction, and the OpenAPI document as the one source of truth, which a test walks
// and calls. Everything against the real server over HTTP.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { newSession, removeDir, runCli, SECRET, sign, startServer, tokenFor } from './helpers.mjs';
import { openEvents } from './sse.mjs';

const BASE = '/api/v1/chat-sessions';
const MISSING = '0123456789abcdef01234567';
const EMOJI = '\u{1F600}';
const ALL_SCOPES = ['sessions:read', 'sessions:write', 'providers:read'];

const PROVIDERS = [
  { _id: 'bbbbbbbbbbbbbbbbbbbbbbb1', name: 'Keyed', apiKey: 'sk-keyed-secret-1', baseUrl: 'https://api.keyed.example/v1' },
  { _id: 'bbbbbbbbbbbbbbbbbbbbbbb2', name: 'NoKey', baseUrl: 'http://127.0.0.1:11434' },
  { _id: 'bbbbbbbbbbbbbbbbbbbbbbb3', name: 'EmptyKey', apiKey: '' },
  { _id: 'bbbbbbbbbbbbbbbbbbbbbbb4', name: 'BlankKey', apiKey: '   ' },
  {
    _id: 'bbbbbbbbbbbbbbbbbbbbbbb5',
    name: 'Urls',
    mirrors: ['https://mirror-user:mirror-pass-1@m1.example/v1', 'http://plain-user:plain-pass-2@m2.example:8080/'],
    endpoints: [{ region: 'eu', url: 'https://eu-user:eu-pass-3@eu.example' }],
    nested: { proxy: { url: 'http://proxy-user:proxy-pass-4@proxy.example:3128' } },
    database: 'postgres://dbuser:db-pass-5@db.example:5432/app',
    cache: 'redis://:redis-pass-6@cache.example:6379/0',
    cluster: 'mongodb+srv://mongo-user:mongo-pass-7@cluster0.example/db?retryWrites=true',
    ftp: 'FTP://ftp-user:ftp-pass-8@ftp.example/pub',
    git: 'https://ghp-token-9@git.example/repo.git',
    notes: 'primary https://a-user:notes-pass-10@a.example, fallback wss://b-user:notes-pass-11@b.example/ws',
    clean: 'https://api.clean.example/v1?x=1',
    contact: 'admin@example.com',
    port: 443,
    tags: ['x', 1, null, true],
  },
  { _id: 'bbbbbbbbbbbbbbbbbbbbbbb6', name: 'AtInPassword', baseUrl: 'https://at-user:p@ss-secret-12@host.example/v1' },
];
const URL_SECRETS = ['mirror-pass-1', 'plain-pass-2', 'eu-pass-3', 'proxy-pass-4', 'db-pass-5', 'redis-pass-6', 'mongo-pass-7', 'ftp-pass-8', 'ghp-token-9', 'notes-pass-10', 'notes-pass-11'];

let server;
let stopping = false;
let alice;
let bob;

before(async () => {
  server = await startServer({ providers: PROVIDERS });
  // if the server ends before the tests do, say why: every later failure is only its echo
  server.child.on('exit', (code, signal) => {
    if (!stopping) console.error(`the server died (${code ?? signal}):\n${server.stderr}${server.stdout.split('\n').filter((l) => !l.includes('"msg":"request"')).join('\n')}`);
  });
  alice = server.as('alice');
  bob = server.as('bob');
});
after(async () => {
  stopping = true;
  await server.stop();
  removeDir(server.dataDir);
});

// ---- helpers ----

let seq = 0;
/** A name no other test uses (users, projects), so lists hold only what the test made. */
function unique(tag) {
  return `${tag}-${++seq}`;
}
function freshUser(tag, claims) {
  return server.as(unique(tag), claims);
}

async function create(who, over = {}) {
  const r = await who.post(BASE, newSession(over));
  assert.equal(r.status, 201, r.text);
  return r.body.data;
}

async function addTurn(who, id, body = { role: 'user', content: 'hi' }, o = {}) {
  const r = await who.post(`${BASE}/${id}/turns`, body, o);
  assert.equal(r.status, 201, r.text);
  return r.body.data;
}

async function get(who, id) {
  const r = await who.get(`${BASE}/${id}`);
  assert.equal(r.status, 200, r.text);
  return r;
}

async function turnsOf(who, id) {
  const r = await who.get(`${BASE}/${id}/turns`);
  assert.equal(r.status, 200, r.text);
  return r.body.data;
}

function assertError(r, status, message, what = '') {
  assert.equal(r.status, status, `${what}: ${r.status} ${r.text}`);
  assert.deepEqual(r.body, { success: false, message }, what);
}
const assert400 = (r, message, what) => assertError(r, 400, message, what);
const assert404 = (r, what) => assertError(r, 404, 'Chat session not found', what);
const assert412 = (r, what) => assertError(r, 412, 'Chat session was modified', what);
const assert403 = (r, what) => assertError(r, 403, 'Forbidden', what);

/** A 400 in the error envelope, whatever the exact wording: never a 500. */
function assertBadRequest(r, what = '') {
  assert.equal(r.status, 400, `${what}: ${r.status} ${r.text}`);
  assert.equal(r.body?.success, false, what);
  assert.equal(typeof r.body.message, 'string', what);
}

const ids = (list) => list.map((x) => x._id);

/** The decisions' session list order: updatedAt newest first, ties by _id descending. */
function listOrder(a, b) {
  if (a.updatedAt !== b.updatedAt) return a.updatedAt < b.updatedAt ? 1 : -1;
  return a._id < b._id ? 1 : a._id > b._id ? -1 : 0;
}

function withParams(path, params) {
  const qs = Object.entries(params)
    .filter(([, v]) => v !== undefined)
    .map(([k, v]) => `${k}=${encodeURIComponent(v)}`)
    .join('&');
  if (qs === '') return path;
  return `${path}${path.includes('?') ? '&' : '?'}${qs}`;
}

/** Follows nextCursor from the first page to the last; checks every page's shape on the way. */
async function walk(who, path, limit) {
  const items = [];
  let cursor;
  let pages = 0;
  for (;;) {
    const r = await who.get(withParams(path, { limit, cursor }));
    assert.equal(r.status, 200, `${path} page ${pages + 1}: ${r.text}`);
    assert.deepEqual(Object.keys(r.body), ['success', 'data', 'nextCursor'], `${path} page ${pages + 1}`);
    assert.ok(r.body.data.length <= limit, 'a page holds at most limit items');
    pages++;
    items.push(...r.body.data);
    if (r.body.nextCursor === null) break;
    assert.equal(typeof r.body.nextCursor, 'string');
    assert.equal(r.body.data.length, limit, 'only the last page may be short');
    cursor = r.body.nextCursor;
    assert.ok(pages <= 5000, 'the walk ends');
  }
  return { items, pages };
}

async function firstCursor(who, path, limit = 1) {
  const r = await who.get(withParams(path, { limit }));
  assert.equal(r.status, 200, r.text);
  assert.equal(typeof r.body.nextCursor, 'string', `${path} has a second page`);
  return r.body.nextCursor;
}

/** Makes `n` sessions for `who` concurrently until at least two share an updatedAt. */
async function createWithTies(who, n, over = {}) {
  const made = [];
  for (let round = 0; round < 20; round++) {
    made.push(...(await Promise.all(Array.from({ length: n }, () => create(who, over)))));
    if (new Set(made.map((s) => s.updatedAt)).size < made.length) return made;
  }
  assert.fail('concurrent creations never shared an updatedAt');
}

/**
 * Waits until the clock is past `iso` (at most a few ms). Timestamps have millisecond
 * resolution, so a change made in the same millisecond as another session's last change ties
 * with it (and the tie goes to the larger _id); tests about "moves to the front" wait this out.
 */
async function clockPast(iso) {
  while (Date.now() <= Date.parse(iso)) await new Promise((r) => setTimeout(r, 1));
}

function nested(depth, leaf = {}) {
  let v = leaf;
  for (let i = 1; i < depth; i++) v = { d: v };
  return v;
}

// ---------------------------------------------------------------------------------------------

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

  test('"non-object metadata (array, string, ...) -> 400 metadata must be a JSON object"; null on create-style bodies is treated as absent', async () => {
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

  test('"roles exactly user|assistant|system|tool (others, case variants -> 400 role must be one of: user, assistant, system, tool)"', async () => {
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

  test('"content required" (missing, null or blank -> "content is required"; not a string -> "content must be a string", since conversations: "content must be a string or an array of parts")', async () => {
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

  test('"Record ids ... ObjectId layout (4-byte seconds ...)", "Timestamps are ISO 8601 UTC": under a burst of appends a turn\'s createdAt is still when it was recorded (never after its 201 answer) and its _id\'s seconds are its createdAt second', async () => {
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

// ---------------------------------------------------------------------------------------------

describe('b. Paging on the session list and the turns list', () => {
  test('"limit (1-1000; 0, 1001, -1, 1.5, \\"abc\\" -> 400; \\"\\" is treated as absent)"', async () => {
    const u = freshUser('limit');
    const s = await create(u);
    await addTurn(u, s._id);
    const msg = 'limit must be an integer from 1 to 1000';
    for (const list of [BASE, `${BASE}/${s._id}/turns`]) {
      for (const limit of ['0', '1001', '-1', '1.5', 'abc', '1e2', '0x10', ' 1', '1 ', '+1', '10000000000000000000000', 'NaN', 'Infinity', '٣']) {
        assert400(await u.get(withParams(list, { limit })), msg, `${list} limit=${JSON.stringify(limit)}`);
      }
      assert400(await u.get(`${list}?limit=1&limit=2`), 'limit must be given at most once');
      const empty = await u.get(`${list}?limit=`);
      assert.equal(empty.status, 200);
      assert.deepEqual(Object.keys(empty.body), ['success', 'data'], 'limit= is absent: no nextCursor');
      for (const limit of ['1', '1000', '%31']) {
        const r = await u.get(`${list}?limit=${limit}`);
        assert.equal(r.status, 200, `limit=${limit}`);
        assert.deepEqual(Object.keys(r.body), ['success', 'data', 'nextCursor']);
      }
    }
  });

  test('"nextCursor beside data only when limit is given, a string or null on the last page"', async () => {
    const u = freshUser('next');
    const s = await create(u);
    for (let i = 0; i < 5; i++) await create(u);
    for (let i = 0; i < 6; i++) await addTurn(u, s._id, { role: 'user', content: `t${i}` });
    for (const list of [BASE, `${BASE}/${s._id}/turns`]) {
      const whole = await u.get(list);
      assert.deepEqual(Object.keys(whole.body), ['success', 'data'], 'no limit: no nextCursor key');
      assert.equal(whole.body.data.length, 6);
      for (const [limit, pages] of [
        [1, 6],
        [2, 3],
        [4, 2],
        [5, 2],
        [6, 1], // an exactly full last page says null: no empty page after it
        [7, 1],
        [1000, 1],
      ]) {
        const w = await walk(u, list, limit);
        assert.equal(w.pages, pages, `${list} limit=${limit}`);
        assert.deepEqual(w.items, whole.body.data);
      }
    }
    const empty = await freshUser('empty').get(`${BASE}?limit=5`);
    assert.deepEqual(empty.body, { success: true, data: [], nextCursor: null });
  });

  test('"walking all pages yields exactly the whole list in order with no skip and no repeat, INCLUDING when many sessions share the same updatedAt"', async () => {
    const u = freshUser('walk');
    const project = unique('walk-proj');
    const made = await createWithTies(u, 60, { projectId: project, name: 'walk' });
    // a few of another user in the same project, and some archived, so filters skip items mid-page
    await Promise.all(Array.from({ length: 10 }, () => create(bob, { projectId: project, name: 'walk' })));
    for (const s of made.slice(0, 12)) assert.equal((await u.post(`${BASE}/${s._id}/archive`)).status, 200);
    const lists = [BASE, `${BASE}?projectId=${project}`, `${BASE}?archived=true`, `${BASE}?archived=all`, `${BASE}?projectId=${project}&archived=all&q=WALK`];
    for (const list of lists) {
      const whole = (await u.get(list)).body.data;
      assert.deepEqual(ids(whole), ids([...whole].sort(listOrder)), `${list}: the whole list is in order`);
      const ties = whole.length - new Set(whole.map((s) => s.updatedAt)).size;
      if (list === `${BASE}?archived=all`) assert.ok(ties > 0, 'the list really has ties');
      for (const limit of [1, 2, 3, 7, 13, whole.length, 1000]) {
        const w = await walk(u, list, limit);
        assert.equal(new Set(ids(w.items)).size, w.items.length, `${list} limit=${limit}: no repeats`);
        assert.deepEqual(ids(w.items), ids(whole), `${list} limit=${limit}: the whole list, in order`);
      }
    }
  });

  test('"walking all pages" of a list longer than the store keeps in one piece (1,300 sessions; it keeps lists in chunks of 512): in order, through updates, deletions and a restart', async () => {
    const own = await startServer({ providers: PROVIDERS });
    try {
      const u = own.as('long-list');
      const made = [];
      for (let i = 0; i < 1300; i += 50) {
        made.push(...(await Promise.all(Array.from({ length: 50 }, (_, k) => create(u, { projectId: 'long-proj', name: `n${i + k}` })))));
      }
      // updates move sessions from everywhere in the list to its front; deletions leave holes
      for (let i = 0; i < 1300; i += 37) assert.equal((await u.put(`${BASE}/${made[i]._id}`, { name: `moved ${i}` })).status, 200);
      for (let i = 5; i < 1300; i += 101) assert.equal((await u.del(`${BASE}/${made[i]._id}`)).status, 200);
      const check = async (u, what) => {
        const whole = (await u.get(BASE)).body.data;
        assert.equal(whole.length, 1300 - 14, `${what}: every session but the deleted`);
        assert.deepEqual(ids(whole), ids([...whole].sort(listOrder)), `${what}: the whole list is in order`);
        assert.deepEqual(ids((await u.get(`${BASE}?projectId=long-proj`)).body.data), ids(whole), `${what}: the project list`);
        for (const limit of [97, 512, 1000]) {
          const w = await walk(u, BASE, limit);
          assert.deepEqual(ids(w.items), ids(whole), `${what}: limit=${limit}, the whole list, in order`);
        }
        return whole;
      };
      // a cursor on the newest session, which then moves (an update) or goes (a delete): the next
      // page still starts right after where that session was
      for (const change of ['update', 'delete']) {
        const first = await u.get(`${BASE}?limit=1`);
        const [top] = first.body.data;
        if (change === 'update') assert.equal((await u.put(`${BASE}/${top._id}`, { name: 'moved again' })).status, 200);
        else assert.equal((await u.del(`${BASE}/${top._id}`)).status, 200);
        const next = await u.get(`${BASE}?limit=1000&cursor=${encodeURIComponent(first.body.nextCursor)}`);
        const whole = (await u.get(BASE)).body.data;
        const rest = whole.filter((x) => x._id !== top._id);
        assert.deepEqual(ids(next.body.data), ids(rest).slice(0, 1000), `after the ${change} of the cursor's session`);
      }
      const before = await check(u, 'before the restart');
      assert.equal((await own.stop()).code, 0);
      const again = await startServer({ dataDir: own.dataDir, providers: PROVIDERS });
      try {
        assert.deepEqual(await check(again.as('long-list'), 'after the restart'), before);
      } finally {
        await again.stop();
      }
    } finally {
      await own.stop();
      removeDir(own.dataDir);
    }
  });

  test('"walking all pages" of the turns list yields exactly the whole list, oldest first', async () => {
    const s = await create(alice);
    for (let i = 0; i < 5; i++) await addTurn(alice, s._id, { role: 'user', content: `s${i}` });
    await Promise.all(Array.from({ length: 20 }, (_, i) => addTurn(alice, s._id, { role: 'assistant', content: `c${i}` })));
    const whole = await turnsOf(alice, s._id);
    assert.equal(whole.length, 25);
    for (const limit of [1, 2, 4, 24, 25, 26]) {
      const w = await walk(alice, `${BASE}/${s._id}/turns`, limit);
      assert.deepEqual(ids(w.items), ids(whole), `limit=${limit}`);
    }
  });

  test('"a forged cursor, a tampered cursor, garbage -> 400 never 500"', async () => {
    const u = freshUser('forge');
    const s = await create(u);
    for (let i = 0; i < 3; i++) await create(u);
    for (let i = 0; i < 3; i++) await addTurn(u, s._id);
    for (const list of [BASE, `${BASE}/${s._id}/turns`]) {
      const good = await firstCursor(u, list);
      const [payload, sig] = good.split('.');
      const decoded = Buffer.from(payload, 'base64url').toString();
      const flip = (str, i) => str.slice(0, i) + (str[i] === 'A' ? 'B' : 'A') + str.slice(i + 1);
      const forgedPayload = Buffer.from(decoded.replace(/"[0-9a-f]{24}"/, `"${'f'.repeat(24)}"`)).toString('base64url');
      const bad = [
        ['garbage', 'abc'],
        ['a lone dot', '.'],
        ['two dots', '..'],
        ['two words', 'a.b'],
        ['no payload', '.abc'],
        ['no signature', 'abc.'],
        ['signature cut short', good.slice(0, -1)],
        ['a character appended to the signature', `${good}x`],
        ['a second dot and more', `${good}.x`],
        ['padding appended to the signature', `${good}=`],
        ['payload edited (first character)', flip(good, 0)],
        ['signature edited (last character)', flip(good, good.length - 1)],
        ['signature edited (4th character)', `${payload}.${flip(sig, 3)}`],
        ['forged payload, old signature', `${forgedPayload}.${sig}`],
        ['forged payload, no signature', forgedPayload],
        ['hand-made payload', Buffer.from(JSON.stringify(['x', '2020-01-01T00:00:00.000Z', MISSING])).toString('base64url')],
        ['not JSON, old signature', `${Buffer.from('not json').toString('base64url')}.${sig}`],
        ['zero signature', `${payload}.${'A'.repeat(sig.length)}`],
        ['10000 characters', 'x'.repeat(10_000)],
        ['emoji', '😀.😀'],
        ['NUL', '\u0000'],
        ['raw JSON', '{"updatedAt":"2020-01-01T00:00:00.000Z","_id":"0123456789abcdef01234567"}'],
        ['[]', '[]'],
        ['null', 'null'],
        ['undefined', 'undefined'],
        ['-1', '-1'],
      ];
      const accepted = [];
      for (const [what, cursor] of bad) {
        for (const params of [{ limit: 2, cursor }, { cursor }]) {
          const r = await u.get(withParams(list, params));
          assert.notEqual(r.status, 500, `${what}: never a 500`);
          if (r.status !== 400 || r.body?.success !== false) accepted.push(`${what}${params.limit ? '' : ' (no limit)'}: ${r.status}`);
        }
      }
      assert.deepEqual(accepted, [], `${list}: every bad cursor is refused with 400`);
      assertBadRequest(await u.get(`${list}?limit=2&cursor=%E0%A4%A`), 'bad percent-encoding');
      assertBadRequest(await u.get(withParams(list, { limit: 2 }) + `&cursor=${encodeURIComponent(good)}&cursor=${encodeURIComponent(good)}`), 'cursor twice');
      // the good one still works
      assert.equal((await u.get(withParams(list, { limit: 2, cursor: good }))).status, 200);
    }
    assert.equal((await server.request('GET', '/healthz')).status, 200);
  });

  test('"a cursor from another list (a turns cursor used on sessions, a cursor from another projectId, another user\'s list, another q or archived filter) -> 400"', async () => {
    const u = freshUser('other-list');
    const v = freshUser('other-list');
    const p1 = unique('ol-proj');
    const p2 = unique('ol-proj');
    const s = await create(u, { projectId: p1, name: 'alpha' });
    const s2 = await create(u, { projectId: p1, name: 'alpha two' });
    for (let i = 0; i < 3; i++) {
      await create(u, { projectId: p1, name: 'alpha' });
      await create(u, { projectId: p2, name: 'alpha' });
      await create(v, { projectId: p1, name: 'alpha' });
      await addTurn(u, s._id);
      await addTurn(u, s2._id);
    }
    await u.post(`${BASE}/${s._id}/archive`);
    await u.post(`${BASE}/${s2._id}/archive`);
    const cursors = {
      own: await firstCursor(u, BASE),
      ownOfV: await firstCursor(v, BASE),
      proj1: await firstCursor(u, `${BASE}?projectId=${p1}`),
      proj2: await firstCursor(u, `${BASE}?projectId=${p2}`),
      q: await firstCursor(u, `${BASE}?q=alpha`),
      archivedAll: await firstCursor(u, `${BASE}?archived=all`),
      archivedTrue: await firstCursor(u, `${BASE}?archived=true`),
      turns: await firstCursor(u, `${BASE}/${s._id}/turns`),
      turns2: await firstCursor(u, `${BASE}/${s2._id}/turns`),
    };
    const uses = [
      ['turns cursor on the session list', u, BASE, cursors.turns],
      ['session cursor on the turns list', u, `${BASE}/${s._id}/turns`, cursors.own],
      ['project cursor on the turns list', u, `${BASE}/${s._id}/turns`, cursors.proj1],
      ["another session's turns cursor", u, `${BASE}/${s._id}/turns`, cursors.turns2],
      ['another projectId', u, `${BASE}?projectId=${p2}`, cursors.proj1],
      ['a project cursor on the own list', u, BASE, cursors.proj1],
      ['the own-list cursor on a project list', u, `${BASE}?projectId=${p1}`, cursors.own],
      ["another user's own list", u, BASE, cursors.ownOfV],
      ["my own list's cursor used by another user", v, BASE, cursors.own],
      ['another q', u, `${BASE}?q=alph`, cursors.q],
      ['a q cursor without q', u, BASE, cursors.q],
      ['the unfiltered cursor with q', u, `${BASE}?q=alpha`, cursors.own],
      ['archived=all cursor on the default list', u, BASE, cursors.archivedAll],
      ['archived=all cursor on archived=true', u, `${BASE}?archived=true`, cursors.archivedAll],
      ['archived=true cursor on archived=all', u, `${BASE}?archived=all`, cursors.archivedTrue],
      ['default cursor on archived=true', u, `${BASE}?archived=true`, cursors.own],
    ];
    for (const [what, who, list, cursor] of uses) {
      assertBadRequest(await who.get(withParams(list, { limit: 2, cursor })), what);
    }
    // the same list is the same list: archived absent, archived=false and archived= are one list;
    // in shared mode a project's list is the same for every user
    assert.equal((await u.get(withParams(`${BASE}?archived=false`, { limit: 2, cursor: cursors.own }))).status, 200);
    assert.equal((await u.get(withParams(`${BASE}?archived=`, { limit: 2, cursor: cursors.own }))).status, 200);
    assert.equal((await v.get(withParams(`${BASE}?projectId=${p1}`, { limit: 2, cursor: cursors.proj1 }))).status, 200);
  });

  test('"a stale cursor whose item has since been deleted still continues correctly"', async () => {
    const u = freshUser('stale');
    for (let i = 0; i < 9; i++) await create(u);
    const whole = (await u.get(BASE)).body.data;
    // delete the last item of page 1: page 2 is still the next three
    let p1 = await u.get(`${BASE}?limit=3`);
    assert.equal((await u.del(`${BASE}/${whole[2]._id}`)).status, 200);
    let p2 = await u.get(withParams(BASE, { limit: 3, cursor: p1.body.nextCursor }));
    assert.equal(p2.status, 200, p2.text);
    assert.deepEqual(ids(p2.body.data), ids(whole.slice(3, 6)));
    // delete the cursor's item and the one after it
    p1 = await u.get(`${BASE}?limit=2`); // whole[0], whole[1]
    await u.del(`${BASE}/${whole[1]._id}`);
    await u.del(`${BASE}/${whole[3]._id}`);
    p2 = await u.get(withParams(BASE, { limit: 3, cursor: p1.body.nextCursor }));
    assert.deepEqual(ids(p2.body.data), ids([whole[4], whole[5], whole[6]]));
    // the cursor's item was updated meanwhile (moved to the front): the walk still continues after it
    const p = await u.get(`${BASE}?limit=2`); // whole[0], whole[4]
    await u.put(`${BASE}/${whole[4]._id}`, { name: 'moved' });
    const next = await u.get(withParams(BASE, { limit: 10, cursor: p.body.nextCursor }));
    assert.deepEqual(ids(next.body.data), ids([whole[5], whole[6], whole[7], whole[8]]));
    assert.equal(next.body.nextCursor, null);
    // every remaining item deleted: an empty last page
    const last = await u.get(`${BASE}?limit=1`);
    for (const s of (await u.get(`${BASE}?archived=all`)).body.data) await u.del(`${BASE}/${s._id}`);
    assert.deepEqual((await u.get(withParams(BASE, { limit: 1, cursor: last.body.nextCursor }))).body, { success: true, data: [], nextCursor: null });
    // a turns cursor of a session deleted since: that list is now empty
    const s = await create(u);
    for (let i = 0; i < 3; i++) await addTurn(u, s._id);
    const tc = await firstCursor(u, `${BASE}/${s._id}/turns`);
    await u.del(`${BASE}/${s._id}`);
    assert.deepEqual((await u.get(withParams(`${BASE}/${s._id}/turns`, { limit: 1, cursor: tc }))).body, { success: true, data: [], nextCursor: null });
  });

  test('"without limit the spec\'s whole list" (a cursor without limit gives the rest of the list, still without nextCursor)', async () => {
    const u = freshUser('whole');
    const s = await create(u);
    for (let i = 0; i < 29; i++) await create(u);
    for (let i = 0; i < 30; i++) await addTurn(u, s._id, { role: 'user', content: `t${i}` });
    for (const list of [BASE, `${BASE}/${s._id}/turns`]) {
      const whole = await u.get(list);
      assert.deepEqual(Object.keys(whole.body), ['success', 'data']);
      assert.equal(whole.body.data.length, 30);
      const first = await u.get(`${list}?limit=10`);
      const rest = await u.get(withParams(list, { cursor: first.body.nextCursor }));
      assert.equal(rest.status, 200);
      assert.deepEqual(Object.keys(rest.body), ['success', 'data']);
      assert.deepEqual(ids([...first.body.data, ...rest.body.data]), ids(whole.body.data));
    }
  });
});

// ---------------------------------------------------------------------------------------------

describe('c. Search', () => {
  test('"q on the session list matches the name case-insensitively"', async () => {
    const u = freshUser('q');
    const names = ['Alpha Planning', 'alphabet soup', 'ALPHA', 'beta', 'the alPHa team', ''];
    const made = {};
    for (const name of names) made[name] = await create(u, { name });
    const expect = ['Alpha Planning', 'alphabet soup', 'ALPHA', 'the alPHa team'];
    for (const q of ['alpha', 'ALPHA', 'AlPhA', 'lph']) {
      const r = await u.get(withParams(BASE, { q }));
      assert.equal(r.status, 200);
      assert.deepEqual(new Set(r.body.data.map((s) => s.name)), new Set(expect), q);
      assert.deepEqual(ids(r.body.data), ids([...r.body.data].sort(listOrder)), 'in list order');
    }
    assert.deepEqual((await u.get(withParams(BASE, { q: 'planning' }))).body.data.map((s) => s.name), ['Alpha Planning']);
    assert.deepEqual((await u.get(withParams(BASE, { q: 'alpha planning' }))).body.data.map((s) => s.name), ['Alpha Planning'], 'a space inside q');
    assert.deepEqual((await u.get(`${BASE}?q=alpha+planning`)).body.data.map((s) => s.name), ['Alpha Planning'], '+ is a space in a query string');
    assert.deepEqual((await u.get(withParams(BASE, { q: 'gamma' }))).body.data, []);
    assert.equal((await u.get(`${BASE}?q=`)).body.data.length, names.length, 'q= is absent: everything');
  });

  test('"q ... matches the name case-insensitively (also non-ASCII)"', async () => {
    const u = freshUser('q-intl');
    for (const name of ['Émile Zola', 'ÉMILE', 'émile', 'Emile (no accent)', 'ПРИВЕТ мир', 'Ωmega ΣΟΦΙΑ', '日本語のメモ', `party ${EMOJI} time`, 'STRASSE']) await create(u, { name });
    const names = async (q) => new Set((await u.get(withParams(BASE, { q }))).body.data.map((s) => s.name));
    assert.deepEqual(await names('émile'), new Set(['Émile Zola', 'ÉMILE', 'émile']));
    assert.deepEqual(await names('ÉMILE'), new Set(['Émile Zola', 'ÉMILE', 'émile']));
    assert.deepEqual(await names('привет'), new Set(['ПРИВЕТ мир']));
    assert.deepEqual(await names('МИР'), new Set(['ПРИВЕТ мир']));
    assert.deepEqual(await names('σοφια'), new Set(['Ωmega ΣΟΦΙΑ']));
    assert.deepEqual(await names('ωMEGA'), new Set(['Ωmega ΣΟΦΙΑ']));
    assert.deepEqual(await names('本語'), new Set(['日本語のメモ']));
    assert.deepEqual(await names(EMOJI), new Set([`party ${EMOJI} time`]));
    assert.deepEqual(await names('strasse'), new Set(['STRASSE']));
  });

  test('"q" is plain text: no wildcards, no regular expressions', async () => {
    const u = freshUser('q-literal');
    for (const name of ['100% done', 'a.b', 'axb', 'snake_case', 'snakeXcase', '(paren)', 'back\\slash', 'star*', '[x]']) await create(u, { name });
    const names = async (q) => (await u.get(withParams(BASE, { q }))).body.data.map((s) => s.name).sort();
    assert.deepEqual(await names('%'), ['100% done']);
    assert.deepEqual(await names('.'), ['a.b']);
    assert.deepEqual(await names('a.b'), ['a.b']);
    assert.deepEqual(await names('_'), ['snake_case']);
    assert.deepEqual(await names('('), ['(paren)']);
    assert.deepEqual(await names('\\'), ['back\\slash']);
    assert.deepEqual(await names('.*'), []);
    assert.deepEqual(await names('*'), ['star*']);
    assert.deepEqual(await names('[x]'), ['[x]']);
    assert.deepEqual(await names('^a'), []);
  });

  test('"q ... combined with projectId rule"', async () => {
    const project = unique('q-proj');
    const u = freshUser('q-rule');
    const a = await create(u, { projectId: project, name: 'Shared Report' });
    const b = await create(bob, { projectId: project, name: 'report draft' });
    await create(bob, { projectId: project, name: 'notes' });
    const mineElsewhere = await create(u, { projectId: unique('q-other'), name: 'report elsewhere' });
    const withProject = await u.get(withParams(BASE, { projectId: project, q: 'REPORT' }));
    assert.deepEqual(new Set(ids(withProject.body.data)), new Set([a._id, b._id]), "with projectId: that project's sessions of every user, filtered");
    const own = await u.get(withParams(BASE, { q: 'report' }));
    assert.deepEqual(new Set(ids(own.body.data)), new Set([a._id, mineElsewhere._id]), "without projectId: the caller's own, filtered");
    const emptyProject = await u.get(withParams(BASE, { projectId: '', q: 'report' }));
    assert.deepEqual(new Set(ids(emptyProject.body.data)), new Set([a._id, mineElsewhere._id]), 'projectId= is absent');
  });

  test('"q ... combined ... with paging" (and with archived, and its 500-character limit)', async () => {
    const u = freshUser('q-page');
    const match = [];
    for (let i = 0; i < 12; i++) {
      match.push(await create(u, { name: `Needle ${i}` }));
      await create(u, { name: `hay ${i}` });
    }
    const whole = (await u.get(`${BASE}?q=needle`)).body.data;
    assert.equal(whole.length, 12);
    for (const limit of [1, 5, 12]) assert.deepEqual(ids((await walk(u, `${BASE}?q=needle`, limit)).items), ids(whole));
    await u.post(`${BASE}/${match[0]._id}/archive`);
    assert.equal((await u.get(`${BASE}?q=needle`)).body.data.length, 11);
    assert.deepEqual(ids((await u.get(`${BASE}?q=NEEDLE&archived=true`)).body.data), [match[0]._id]);
    assert.equal((await walk(u, `${BASE}?q=needle&archived=all`, 5)).items.length, 12);
    assert.equal((await u.get(withParams(BASE, { q: 'x'.repeat(500) }))).status, 200);
    assert.equal((await u.get(withParams(BASE, { q: EMOJI.repeat(500) }))).status, 200);
    assert400(await u.get(withParams(BASE, { q: 'x'.repeat(501) })), 'q must be at most 500 characters');
    assert400(await u.get(`${BASE}?q=a&q=b`), 'q must be given at most once');
  });
});

// ---------------------------------------------------------------------------------------------

describe('d. Archive', () => {
  test('"POST /api/v1/chat-sessions/:id/archive and /unarchive ... the record shows archived true|false"', async () => {
    const u = freshUser('arch');
    const s = await create(u);
    assert.equal(s.archived, false);
    const a = await u.post(`${BASE}/${s._id}/archive`);
    assert.equal(a.status, 200, a.text);
    assert.deepEqual({ ...a.body.data, updatedAt: 0 }, { ...s, archived: true, updatedAt: 0 });
    assert.equal((await get(u, s._id)).body.data.archived, true, 'an archived session is still readable by id');
    const un = await u.post(`${BASE}/${s._id}/unarchive`);
    assert.equal(un.status, 200);
    assert.equal(un.body.data.archived, false);
    assert.equal((await get(u, s._id)).body.data.archived, false);
    // a body, if any, changes nothing
    const withBody = await u.post(`${BASE}/${s._id}/archive`, { archived: false, name: 'ignored' });
    assert.equal(withBody.status, 200);
    assert.equal(withBody.body.data.archived, true);
    assert.equal(withBody.body.data.name, '');
    for (const id of [MISSING, 'nope']) {
      assert404(await u.post(`${BASE}/${id}/archive`), `archive ${id}`);
      assert404(await u.post(`${BASE}/${id}/unarchive`), `unarchive ${id}`);
    }
  });

  test('"archived sessions are left out of lists unless archived=true (only archived) or archived=all (both)"', async () => {
    const u = freshUser('arch-list');
    const project = unique('arch-proj');
    const made = [];
    for (let i = 0; i < 6; i++) made.push(await create(u, { projectId: project }));
    const archived = [made[1], made[3], made[4]];
    for (const s of archived) await u.post(`${BASE}/${s._id}/archive`);
    const active = made.filter((s) => !archived.includes(s));
    for (const list of [BASE, `${BASE}?projectId=${project}`]) {
      const sep = list.includes('?') ? '&' : '?';
      const def = (await u.get(list)).body.data;
      assert.deepEqual(new Set(ids(def)), new Set(ids(active)), `${list} default`);
      assert.ok(def.every((s) => s.archived === false));
      assert.deepEqual(ids((await u.get(`${list}${sep}archived=false`)).body.data), ids(def), 'archived=false is the default');
      assert.deepEqual(ids((await u.get(`${list}${sep}archived=`)).body.data), ids(def), 'archived= is absent');
      const only = (await u.get(`${list}${sep}archived=true`)).body.data;
      assert.deepEqual(new Set(ids(only)), new Set(ids(archived)));
      assert.ok(only.every((s) => s.archived === true));
      const both = (await u.get(`${list}${sep}archived=all`)).body.data;
      assert.deepEqual(new Set(ids(both)), new Set(ids(made)));
      assert.deepEqual(ids(both), ids([...both].sort(listOrder)));
    }
  });

  test('"bad archived value -> 400"', async () => {
    for (const archived of ['yes', 'no', 'TRUE', 'True', 'FALSE', 'All', '1', '0', 'only', 'both', 'none', ' true', 'true ']) {
      assert400(await alice.get(withParams(BASE, { archived })), 'archived must be one of: false, true, all', archived);
    }
    assert400(await alice.get(`${BASE}?archived=true&archived=false`), 'archived must be given at most once');
  });

  test('"archive bumps updatedAt" (and the ETag; unarchive too), moving the session to the front of archived=all', async () => {
    const u = freshUser('arch-bump');
    const s = await create(u);
    const later = await create(u);
    const before = await get(u, s._id);
    await clockPast(later.updatedAt);
    const a = await u.post(`${BASE}/${s._id}/archive`);
    assert.ok(a.body.data.updatedAt > before.body.data.updatedAt);
    assert.notEqual(a.headers.etag, before.headers.etag);
    assert.deepEqual(ids((await u.get(`${BASE}?archived=all`)).body.data), [s._id, later._id]);
    await clockPast(a.body.data.updatedAt); // timestamps follow the clock: within one ms they tie
    const un = await u.post(`${BASE}/${s._id}/unarchive`);
    assert.ok(un.body.data.updatedAt > a.body.data.updatedAt);
    assert.notEqual(un.headers.etag, a.headers.etag);
    assert.equal((await get(u, s._id)).headers.etag, un.headers.etag);
  });

  test('"archiving twice is idempotent" (same record, same updatedAt, same ETag; unarchiving twice too)', async () => {
    const u = freshUser('arch-twice');
    const s = await create(u);
    const first = await u.post(`${BASE}/${s._id}/archive`);
    const second = await u.post(`${BASE}/${s._id}/archive`);
    assert.equal(second.status, 200);
    assert.deepEqual(second.body, first.body);
    assert.equal(second.headers.etag, first.headers.etag);
    const concurrent = await Promise.all(Array.from({ length: 5 }, () => u.post(`${BASE}/${s._id}/archive`)));
    for (const r of concurrent) assert.deepEqual(r.body, first.body);
    const un1 = await u.post(`${BASE}/${s._id}/unarchive`);
    const un2 = await u.post(`${BASE}/${s._id}/unarchive`);
    assert.deepEqual(un2.body, un1.body);
    assert.equal(un2.headers.etag, un1.headers.etag);
    // unarchiving a session that was never archived changes nothing either
    const fresh = await u.post(BASE, newSession());
    const noop = await u.post(`${BASE}/${fresh.body.data._id}/unarchive`);
    assert.deepEqual(noop.body, fresh.body);
    assert.equal(noop.headers.etag, fresh.headers.etag);
  });

  test('"delete stays a real delete (an archived session can be deleted and is gone)"', async () => {
    const u = freshUser('arch-del');
    const s = await create(u);
    await addTurn(u, s._id);
    await u.post(`${BASE}/${s._id}/archive`);
    const r = await u.del(`${BASE}/${s._id}`);
    assert.deepEqual(r.body, { success: true, message: 'Chat session deleted' });
    assert404(await u.get(`${BASE}/${s._id}`));
    assert404(await u.post(`${BASE}/${s._id}/unarchive`), 'unarchive cannot bring it back');
    assert404(await u.post(`${BASE}/${s._id}/archive`));
    for (const archived of ['false', 'true', 'all']) assert.deepEqual((await u.get(`${BASE}?archived=${archived}`)).body.data, []);
    assert.deepEqual(await turnsOf(u, s._id), []);
  });

  test('"a session archived by one user while another lists the project (shared mode) disappears from the other\'s default list"', async () => {
    const project = unique('arch-shared');
    const s = await create(alice, { projectId: project });
    const other = await create(alice, { projectId: project });
    assert.deepEqual(new Set(ids((await bob.get(`${BASE}?projectId=${project}`)).body.data)), new Set([s._id, other._id]));
    const r = await bob.post(`${BASE}/${s._id}/archive`);
    assert.equal(r.status, 200, 'shared mode: any user may archive by id');
    assert.deepEqual(ids((await alice.get(`${BASE}?projectId=${project}`)).body.data), [other._id]);
    assert.deepEqual(ids((await bob.get(`${BASE}?projectId=${project}`)).body.data), [other._id]);
    assert.deepEqual(ids((await alice.get(`${BASE}?projectId=${project}&archived=true`)).body.data), [s._id]);
    assert.ok(!ids((await alice.get(BASE)).body.data).includes(s._id), "and from the owner's own list");
  });

  test('an archived session still takes turns and updates (archive only hides it from default lists)', async () => {
    const u = freshUser('arch-use');
    const s = await create(u);
    await u.post(`${BASE}/${s._id}/archive`);
    await addTurn(u, s._id);
    assert.equal((await turnsOf(u, s._id)).length, 1);
    const put = await u.put(`${BASE}/${s._id}`, { name: 'still archived' });
    assert.equal(put.body.data.archived, true);
    assert.deepEqual((await u.get(BASE)).body.data, [], 'neither a turn nor an update unarchives it');
  });
});

// ---------------------------------------------------------------------------------------------

describe('e. Safe concurrent edits (ETag / If-Match)', () => {
  const STRONG = /^"[^"]+"$/;

  test('"ETag on every single-session response (GET, POST create 201, PUT, archive, unarchive)"', async () => {
    const u = freshUser('etag');
    const c = await u.post(BASE, newSession());
    assert.equal(c.status, 201);
    const id = c.body.data._id;
    const answers = [['create', c]];
    answers.push(['get', await u.get(`${BASE}/${id}`)]);
    answers.push(['put', await u.put(`${BASE}/${id}`, { name: 'x' })]);
    answers.push(['get after put', await u.get(`${BASE}/${id}`)]);
    answers.push(['archive', await u.post(`${BASE}/${id}/archive`)]);
    answers.push(['unarchive', await u.post(`${BASE}/${id}/unarchive`)]);
    answers.push(['empty put', await u.put(`${BASE}/${id}`, {})]);
    for (const [what, r] of answers) {
      assert.ok(r.status === 200 || r.status === 201, what);
      assert.match(r.headers.etag ?? '', STRONG, `${what} carries a strong ETag`);
    }
    assert.equal(answers[1][1].headers.etag, c.headers.etag, 'GET gives the tag the create gave');
    assert.equal(answers[3][1].headers.etag, answers[2][1].headers.etag, 'GET gives the tag the PUT gave');
    const tags = [c, answers[2][1], answers[4][1], answers[5][1]].map((r) => r.headers.etag);
    assert.equal(new Set(tags).size, tags.length, 'every change gives a new tag');
    assert.equal(answers[6][1].headers.etag, answers[5][1].headers.etag, 'no change, same tag');
  });

  test('the ETag is a digest of the state, the same in every release: SHA-256 of the session\'s JSON (and of its newest turn\'s createdAt and _id), base64url, first 22 characters (the JSON of the first release\'s ten fields: those added since follow them)', async () => {
    // clients keep tags across upgrades of the server: a new way of computing them would turn
    // every kept tag into a 412
    const u = freshUser('etag-digest');
    const tagOf = (text) => `"${createHash('sha256').update(text).digest('base64url').slice(0, 22)}"`;
    const v1 = ({ _id, name, provider, selectedModel, mode, user, project, createdAt, updatedAt, archived }) => JSON.stringify({ _id, name, provider, selectedModel, mode, user, project, createdAt, updatedAt, archived });
    const c = await u.post(BASE, newSession({ name: 'digest \u{1F600} é' }));
    assert.equal(c.headers.etag, tagOf(v1(c.body.data)), 'create');
    const id = c.body.data._id;
    const p = await u.put(`${BASE}/${id}`, { name: 'renamed' });
    assert.equal(p.headers.etag, tagOf(v1(p.body.data)), 'update');
    const t = await addTurn(u, id);
    const g = await u.get(`${BASE}/${id}`);
    assert.equal(g.headers.etag, tagOf(`${v1(g.body.data)}\n${t.createdAt}\n${t._id}`), 'with a turn');
  });

  test('"If-Match on PUT, DELETE, archive and turn append": the current tag passes', async () => {
    const u = freshUser('im');
    const s = await u.post(BASE, newSession());
    const id = s.body.data._id;
    let tag = s.headers.etag;
    const put = await u.put(`${BASE}/${id}`, { name: 'v1' }, { headers: { 'if-match': tag } });
    assert.equal(put.status, 200, put.text);
    tag = put.headers.etag;
    const arch = await u.post(`${BASE}/${id}/archive`, undefined, { headers: { 'if-match': tag } });
    assert.equal(arch.status, 200, arch.text);
    tag = arch.headers.etag;
    const un = await u.post(`${BASE}/${id}/unarchive`, undefined, { headers: { 'if-match': tag } });
    assert.equal(un.status, 200, un.text);
    tag = un.headers.etag;
    const turn = await u.post(`${BASE}/${id}/turns`, { role: 'user', content: 'c' }, { headers: { 'if-match': tag } });
    assert.equal(turn.status, 201, turn.text);
    tag = (await u.get(`${BASE}/${id}`)).headers.etag;
    const del = await u.del(`${BASE}/${id}`, { headers: { 'if-match': tag } });
    assert.equal(del.status, 200, del.text);
    assert404(await u.get(`${BASE}/${id}`));
  });

  test('"a stale tag gets 412 Chat session was modified and changes nothing (verify by reading back)"', async () => {
    const u = freshUser('stale-tag');
    const s = await u.post(BASE, newSession({ name: 'v0' }));
    const id = s.body.data._id;
    const stale = s.headers.etag;
    await addTurn(u, id);
    const current = await get(u, id);
    assert.notEqual(current.headers.etag, stale);
    const turnsBefore = await turnsOf(u, id);
    const h = { headers: { 'if-match': stale } };
    assert412(await u.put(`${BASE}/${id}`, { name: 'v1' }, h), 'PUT');
    assert412(await u.put(`${BASE}/${id}`, {}, h), 'an empty PUT checks the tag too');
    assert412(await u.del(`${BASE}/${id}`, h), 'DELETE');
    assert412(await u.post(`${BASE}/${id}/archive`, undefined, h), 'archive');
    assert412(await u.post(`${BASE}/${id}/turns`, { role: 'user', content: 'late' }, h), 'turn append');
    const after = await get(u, id);
    assert.deepEqual(after.body, current.body, 'the session is as it was');
    assert.equal(after.headers.etag, current.headers.etag);
    assert.deepEqual(await turnsOf(u, id), turnsBefore, 'no turn was recorded');
    // unarchive with a stale tag, on an archived session
    const arch = await u.post(`${BASE}/${id}/archive`);
    assert412(await u.post(`${BASE}/${id}/unarchive`, undefined, { headers: { 'if-match': current.headers.etag } }), 'unarchive');
    assert.equal((await get(u, id)).body.data.archived, true);
    // and idempotent archive with a stale tag is still a 412 (the tag is checked, not skipped)
    assert412(await u.post(`${BASE}/${id}/archive`, undefined, { headers: { 'if-match': current.headers.etag } }), 'archive again');
    assert.equal((await get(u, id)).headers.etag, arch.headers.etag);
  });

  test('"If-Match: * passes for an existing session"', async () => {
    const u = freshUser('star');
    const id = (await create(u))._id;
    const h = { headers: { 'if-match': '*' } };
    assert.equal((await u.put(`${BASE}/${id}`, { name: 'star' }, h)).status, 200);
    assert.equal((await u.post(`${BASE}/${id}/archive`, undefined, h)).status, 200);
    assert.equal((await u.post(`${BASE}/${id}/unarchive`, undefined, h)).status, 200);
    assert.equal((await u.post(`${BASE}/${id}/turns`, { role: 'user', content: 'c' }, h)).status, 201);
    assert.equal((await u.del(`${BASE}/${id}`, h)).status, 200);
  });

  test('"a list of tags with one matching passes; weak tags (W/\\"...\\") never match"', async () => {
    const u = freshUser('list-tag');
    const c = await u.post(BASE, newSession());
    const id = c.body.data._id;
    let tag = c.headers.etag;
    const list = await u.put(`${BASE}/${id}`, { name: 'a' }, { headers: { 'if-match': `"nope", ${tag}, "other"` } });
    assert.equal(list.status, 200, list.text);
    tag = list.headers.etag;
    assert.equal((await u.put(`${BASE}/${id}`, { name: 'b' }, { headers: { 'if-match': `${tag},"x"` } })).status, 200, 'no space after the comma');
    tag = (await get(u, id)).headers.etag;
    assert412(await u.put(`${BASE}/${id}`, { name: 'c' }, { headers: { 'if-match': '"nope", "other"' } }), 'none matching');
    assert412(await u.put(`${BASE}/${id}`, { name: 'c' }, { headers: { 'if-match': `W/${tag}` } }), 'weak');
    assert412(await u.del(`${BASE}/${id}`, { headers: { 'if-match': `W/${tag}` } }), 'weak on DELETE');
    assert412(await u.put(`${BASE}/${id}`, { name: 'c' }, { headers: { 'if-match': tag.slice(1, -1) } }), 'unquoted');
    assert412(await u.put(`${BASE}/${id}`, { name: 'c' }, { headers: { 'if-match': '' } }), 'empty header');
    assert.equal((await get(u, id)).body.data.name, 'b');
    assert.equal((await u.put(`${BASE}/${id}`, { name: 'd' }, { headers: { 'if-match': `W/${tag}, ${tag}` } })).status, 200, 'a strong match beside a weak one');
  });

  test('"without If-Match the spec\'s last-writer-wins"', async () => {
    const u = freshUser('lww');
    const id = (await create(u))._id;
    const a = await u.put(`${BASE}/${id}`, { name: 'first' });
    const b = await u.put(`${BASE}/${id}`, { name: 'second' });
    assert.equal(a.status, 200);
    assert.equal(b.status, 200);
    assert.equal((await get(u, id)).body.data.name, 'second');
    const many = await Promise.all(Array.from({ length: 10 }, (_, i) => u.put(`${BASE}/${id}`, { name: `n${i}` })));
    assert.ok(many.every((r) => r.status === 200));
    const final = (await get(u, id)).body.data;
    const latest = many.map((r) => r.body.data).sort((x, y) => (x.updatedAt < y.updatedAt ? -1 : 1)).at(-1);
    assert.deepEqual(final, latest, 'the last write applied is what remains');
  });

  test('"two concurrent PUTs with the same If-Match: exactly one wins, the others get 412"', async () => {
    const u = freshUser('race');
    for (let round = 0; round < 5; round++) {
      const c = await u.post(BASE, newSession());
      const id = c.body.data._id;
      const h = { headers: { 'if-match': c.headers.etag } };
      const rs = await Promise.all(Array.from({ length: 8 }, (_, i) => u.put(`${BASE}/${id}`, { name: `writer ${i}` }, h)));
      const won = rs.filter((r) => r.status === 200);
      const lost = rs.filter((r) => r.status !== 200);
      assert.equal(won.length, 1, `round ${round}: ${rs.map((r) => r.status)}`);
      for (const r of lost) assert412(r);
      assert.equal((await get(u, id)).body.data.name, won[0].body.data.name, "the winner's write is the one kept");
    }
    // the same for turn appends, and for a PUT racing a DELETE
    const c = await u.post(BASE, newSession());
    const id = c.body.data._id;
    const h = { headers: { 'if-match': c.headers.etag } };
    const turns = await Promise.all(Array.from({ length: 6 }, (_, i) => u.post(`${BASE}/${id}/turns`, { role: 'user', content: `t${i}` }, h)));
    assert.equal(turns.filter((r) => r.status === 201).length, 1, turns.map((r) => r.status).join());
    assert.equal((await turnsOf(u, id)).length, 1);
    const tag = (await get(u, id)).headers.etag;
    const [put, del] = await Promise.all([u.put(`${BASE}/${id}`, { name: 'p' }, { headers: { 'if-match': tag } }), u.del(`${BASE}/${id}`, { headers: { 'if-match': tag } })]);
    // exactly one wins; the loser gets 412, or 404 when the DELETE won and the session is gone
    const statuses = `PUT ${put.status}, DELETE ${del.status}`;
    assert.ok((put.status === 200 && del.status === 412) || (del.status === 200 && put.status === 404), statuses);
  });

  test('"If-Match on a non-existent session -> 404"', async () => {
    const s = await create(alice);
    await alice.del(`${BASE}/${s._id}`);
    for (const id of [MISSING, s._id, 'nope']) {
      for (const tag of ['*', '"abc"', `W/"abc"`]) {
        const h = { headers: { 'if-match': tag } };
        assert404(await alice.put(`${BASE}/${id}`, { name: 'x' }, h), `PUT ${id} ${tag}`);
        assert404(await alice.put(`${BASE}/${id}`, {}, h), `empty PUT ${id} ${tag}`);
        assert404(await alice.del(`${BASE}/${id}`, h), `DELETE ${id} ${tag}`);
        assert404(await alice.post(`${BASE}/${id}/archive`, undefined, h), `archive ${id} ${tag}`);
        assert404(await alice.post(`${BASE}/${id}/unarchive`, undefined, h), `unarchive ${id} ${tag}`);
        assert404(await alice.post(`${BASE}/${id}/turns`, { role: 'user', content: 'c' }, h), `turn ${id} ${tag}`);
      }
    }
  });
});

// ---------------------------------------------------------------------------------------------

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

  test('"get, update, delete, archive, unarchive, turns list and turn append on another user\'s session behave as if it did not exist"', async () => {
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

// ---------------------------------------------------------------------------------------------

describe('g. Scoped tokens', () => {
  /** Every route with the scope it needs and a request that succeeds; DELETE last. */
  function routes(id) {
    return [
      ['GET', BASE, 'sessions:read', 200],
      ['GET', `${BASE}?projectId=p&limit=1`, 'sessions:read', 200],
      ['POST', BASE, 'sessions:write', 201, newSession()],
      ['GET', `${BASE}/${id}`, 'sessions:read', 200],
      ['PUT', `${BASE}/${id}`, 'sessions:write', 200, { name: 'scoped' }],
      ['GET', `${BASE}/${id}/turns`, 'sessions:read', 200],
      ['POST', `${BASE}/${id}/turns`, 'sessions:write', 201, { role: 'user', content: 'c' }],
      ['POST', `${BASE}/${id}/archive`, 'sessions:write', 200],
      ['POST', `${BASE}/${id}/unarchive`, 'sessions:write', 200],
      ['DELETE', `${BASE}/${id}`, 'sessions:write', 200],
      ['GET', '/api/v1/providers', 'providers:read', 200],
      ['GET', `/api/v1/providers/${PROVIDERS[0]._id}`, 'providers:read', 200],
    ];
  }
  const call = (token, [method, path, , , json]) => server.request(method, path, { token, json });

  test('"check each route\'s needed scope (GET lists/get/turns need sessions:read; POST/PUT/DELETE/archive/unarchive/turn append need sessions:write; providers need providers:read)"', async () => {
    const id = (await create(alice))._id;
    for (const r of routes(id)) {
      const [method, path, needed, okStatus] = r;
      const others = ALL_SCOPES.filter((s) => s !== needed).join(' ');
      const denied = await call(tokenFor('alice', { scope: others }), r);
      assert403(denied, `${method} ${path} with "${others}"`);
      const allowed = await call(tokenFor('alice', { scope: needed }), r);
      assert.equal(allowed.status, okStatus, `${method} ${path} with "${needed}": ${allowed.text}`);
    }
  });

  test('"no scope -> everything" (and all three scopes -> everything)', async () => {
    for (const claims of [{}, { scope: ALL_SCOPES.join(' ') }, { scope: `  ${ALL_SCOPES.join('\t ')}\n` }]) {
      const token = tokenFor('alice', claims);
      const id = (await create(alice))._id;
      for (const r of routes(id)) {
        const res = await call(token, r);
        assert.equal(res.status, r[3], `${r[0]} ${r[1]} with ${JSON.stringify(claims)}: ${res.text}`);
      }
    }
  });

  test('"a token whose scope lacks what the route needs -> 403 {success:false, message:\\"Forbidden\\"}" and changes nothing', async () => {
    const s = await create(alice, { name: 'untouched' });
    await addTurn(alice, s._id);
    const before = await get(alice, s._id);
    const reader = tokenFor('alice', { scope: 'sessions:read providers:read' });
    for (const r of routes(s._id).filter((x) => x[2] === 'sessions:write')) {
      const res = await call(reader, r);
      assert403(res, `${r[0]} ${r[1]}`);
      assert.equal(res.headers['content-type'], 'application/json; charset=utf-8');
    }
    const after = await get(alice, s._id);
    assert.deepEqual(after.body, before.body);
    assert.equal((await turnsOf(alice, s._id)).length, 1);
    // 403 comes before validation and before looking the session up
    assert403(await server.request('POST', BASE, { token: reader, json: {} }), 'invalid body');
    assert403(await server.request('POST', BASE, { token: reader, body: '{bad json', headers: { 'content-type': 'application/json' } }), 'bad JSON');
    assert403(await server.request('PUT', `${BASE}/${MISSING}`, { token: reader, json: { name: 'x' } }), 'unknown id');
    assert403(await server.request('GET', `${BASE}?limit=0`, { token: tokenFor('alice', { scope: 'sessions:write' }) }), 'bad limit');
    assert403(await server.request('GET', '/api/v1/providers/not-an-id', { token: tokenFor('alice', { scope: 'sessions:read' }) }), 'bad provider id');
  });

  test('"a scope string with unknown words (they are ignored; \\"sessions:read bogus\\" can read)"', async () => {
    const id = (await create(alice))._id;
    const t = tokenFor('alice', { scope: 'sessions:read bogus admin *' });
    assert.equal((await server.request('GET', BASE, { token: t })).status, 200);
    assert.equal((await server.request('GET', `${BASE}/${id}`, { token: t })).status, 200);
    assert403(await server.request('PUT', `${BASE}/${id}`, { token: t, json: { name: 'x' } }));
    assert403(await server.request('GET', '/api/v1/providers', { token: t }));
    // words are exact and case-sensitive: near misses grant nothing
    for (const scope of ['bogus', 'SESSIONS:READ', 'sessions', 'sessions:*', 'sessions:read:all', 'sessions:readsessions:write', 'sessions:read,sessions:write', '*', 'admin']) {
      const tok = tokenFor('alice', { scope });
      assert403(await server.request('GET', BASE, { token: tok }), `scope ${JSON.stringify(scope)} on GET`);
      assert403(await server.request('POST', BASE, { token: tok, json: newSession() }), `scope ${JSON.stringify(scope)} on POST`);
    }
  });

  test('"an empty scope \\"\\" grants nothing" (the service routes need no token and stay open)', async () => {
    const id = (await create(alice))._id;
    for (const scope of ['', ' ', '\t\n']) {
      const t = tokenFor('alice', { scope });
      for (const r of routes(id)) assert403(await call(t, r), `${r[0]} ${r[1]} with ${JSON.stringify(scope)}`);
      for (const path of ['/healthz', '/api/v1/openapi.json', '/metrics']) {
        assert.equal((await server.request('GET', path, { token: t })).status, 200, path);
      }
    }
    assert.equal((await alice.get(`${BASE}/${id}`)).status, 200, 'the session is still there');
  });

  test('"401 still comes before 403"', async () => {
    const id = (await create(alice))._id;
    const now = Math.floor(Date.now() / 1000);
    const bad = [
      ['no token', undefined],
      ['expired, empty scope', sign({ sub: 'alice', scope: '', exp: now - 3600 })],
      ['expired, read scope', sign({ sub: 'alice', scope: 'sessions:read', exp: now - 3600 })],
      ['wrong key, empty scope', sign({ sub: 'alice', scope: '' }, { secret: 'another-secret-0123456789abcdef0123456789' })],
      ['no sub, empty scope', sign({ scope: '', exp: now + 60 })],
      ['scope not a string', sign({ sub: 'alice', scope: ['sessions:read'], exp: now + 60 })],
      ['scope null', sign({ sub: 'alice', scope: null, exp: now + 60 })],
      ['scope a number', sign({ sub: 'alice', scope: 1, exp: now + 60 })],
    ];
    for (const [what, token] of bad) {
      for (const r of routes(id)) {
        const res = await call(token, r);
        assertError(res, 401, 'Unauthorized', `${what}: ${r[0]} ${r[1]}`);
        assert.match(res.headers['www-authenticate'] ?? '', /^Bearer/);
      }
    }
  });

  test('"the CLI: node dist/server.js token --sub alice --scope \\"sessions:read\\" mints a scoped token"', async () => {
    const env = { DATA_DIR: server.dataDir, AUTH_SECRET: SECRET };
    const r = runCli(['token', '--sub', 'alice', '--scope', 'sessions:read'], { env, cwd: server.dataDir });
    assert.equal(r.code, 0, r.stderr);
    const token = r.stdout.trim();
    const claims = JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString());
    assert.equal(claims.sub, 'alice');
    assert.equal(claims.scope, 'sessions:read');
    assert.equal((await server.request('GET', BASE, { token })).status, 200);
    assert403(await server.request('POST', BASE, { token, json: newSession() }));
    assert403(await server.request('GET', '/api/v1/providers', { token }));
    const both = runCli(['token', '--sub', 'alice', '--scope', 'sessions:read sessions:write'], { env, cwd: server.dataDir });
    assert.equal(both.code, 0, both.stderr);
    assert.equal((await server.request('POST', BASE, { token: both.stdout.trim(), json: newSession() })).status, 201);
    assert403(await server.request('GET', '/api/v1/providers', { token: both.stdout.trim() }));
    const none = runCli(['token', '--sub', 'alice'], { env, cwd: server.dataDir });
    const plain = JSON.parse(Buffer.from(none.stdout.trim().split('.')[1], 'base64url').toString());
    assert.equal('scope' in plain, false, 'without --scope: no scope claim, so everything');
    assert.equal((await server.request('GET', '/api/v1/providers', { token: none.stdout.trim() })).status, 200);
  });

  test('"an unknown scope word in --scope is refused by the CLI with exit code 2"', () => {
    const env = { DATA_DIR: server.dataDir, AUTH_SECRET: SECRET };
    for (const scope of ['sessions:read bogus', 'bogus', 'SESSIONS:READ', 'sessions:read,sessions:write', '*']) {
      const r = runCli(['token', '--sub', 'alice', '--scope', scope], { env, cwd: server.dataDir });
      assert.equal(r.code, 2, `${scope}: ${r.stdout}${r.stderr}`);
      assert.equal(r.stdout, '', 'no token printed');
      assert.match(r.stderr, /scope/);
    }
    const r = runCli(['token', '--sub', 'alice', '--scope', 'sessions:read bogus'], { env, cwd: server.dataDir });
    assert.match(r.stderr, /bogus/, 'the message names the unknown word');
  });
});

// ---------------------------------------------------------------------------------------------

describe('h. Providers', () => {
  async function provider(id) {
    const r = await alice.get(`/api/v1/providers/${id}`);
    assert.equal(r.status, 200, r.text);
    return r.body.data;
  }

  test('"responses carry hasApiKey true|false"', async () => {
    const list = (await alice.get('/api/v1/providers')).body.data;
    const expected = {
      bbbbbbbbbbbbbbbbbbbbbbb1: true,
      bbbbbbbbbbbbbbbbbbbbbbb2: false,
      bbbbbbbbbbbbbbbbbbbbbbb3: false,
      bbbbbbbbbbbbbbbbbbbbbbb4: false, // a blank key is no key
      bbbbbbbbbbbbbbbbbbbbbbb5: false,
      bbbbbbbbbbbbbbbbbbbbbbb6: false,
    };
    assert.deepEqual(Object.fromEntries(list.map((p) => [p._id, p.hasApiKey])), expected);
    for (const [id, has] of Object.entries(expected)) {
      const p = await provider(id);
      assert.equal(p.hasApiKey, has, id);
      assert.equal(typeof p.hasApiKey, 'boolean');
      assert.equal('apiKey' in p, false);
    }
    assert.equal((await alice.get('/api/v1/providers')).text.includes('sk-keyed-secret-1'), false);
  });

  test('"credentials embedded in any URL field (https://user:pass@host) are masked as well as apiKey" — in arrays, nested objects, http and other schemes', async () => {
    const p = await provider('bbbbbbbbbbbbbbbbbbbbbbb5');
    assert.deepEqual(p.mirrors, ['https://***@m1.example/v1', 'http://***@m2.example:8080/']);
    assert.deepEqual(p.endpoints, [{ region: 'eu', url: 'https://***@eu.example' }]);
    assert.deepEqual(p.nested, { proxy: { url: 'http://***@proxy.example:3128' } });
    assert.equal(p.database, 'postgres://***@db.example:5432/app');
    assert.equal(p.cache, 'redis://***@cache.example:6379/0');
    assert.equal(p.cluster, 'mongodb+srv://***@cluster0.example/db?retryWrites=true');
    assert.equal(p.ftp, 'FTP://***@ftp.example/pub');
    assert.equal(p.git, 'https://***@git.example/repo.git', 'a token alone in the userinfo is a credential too');
    assert.equal(p.notes, 'primary https://***@a.example, fallback wss://***@b.example/ws', 'every URL inside a longer string');
    const texts = [(await alice.get('/api/v1/providers')).text, (await alice.get('/api/v1/providers/bbbbbbbbbbbbbbbbbbbbbbb5')).text];
    for (const t of texts) for (const secret of URL_SECRETS) assert.equal(t.includes(secret), false, `${secret} leaked`);
    for (const secret of URL_SECRETS) assert.equal(server.stdout.includes(secret), false, `${secret} in the log`);
  });

  test('"credentials embedded in any URL field ... are masked": a password holding an unencoded "@" (URL parsers split at the last "@") is masked whole', async () => {
    const raw = PROVIDERS[5].baseUrl;
    assert.equal(new URL(raw).hostname, 'host.example', 'a valid URL: WHATWG takes the last @');
    assert.equal(new URL(raw).password, 'p%40ss-secret-12');
    const p = await provider('bbbbbbbbbbbbbbbbbbbbbbb6');
    assert.equal(p.baseUrl, 'https://***@host.example/v1');
    assert.equal((await alice.get('/api/v1/providers')).text.includes('ss-secret-12'), false, 'no part of the password leaks');
  });

  test('masking touches only credentials: URLs without them, e-mail addresses and other values are returned as given', async () => {
    const p = await provider('bbbbbbbbbbbbbbbbbbbbbbb5');
    assert.equal(p.clean, 'https://api.clean.example/v1?x=1');
    assert.equal(p.contact, 'admin@example.com');
    assert.equal(p.port, 443);
    assert.deepEqual(p.tags, ['x', 1, null, true]);
    assert.equal((await provider('bbbbbbbbbbbbbbbbbbbbbbb1')).baseUrl, 'https://api.keyed.example/v1');
    assert.equal((await provider('bbbbbbbbbbbbbbbbbbbbbbb2')).baseUrl, 'http://127.0.0.1:11434');
  });
});

// ---------------------------------------------------------------------------------------------

describe('i. One source of truth: the OpenAPI document', () => {
  let doc;
  before(async () => {
    const r = await server.request('GET', '/api/v1/openapi.json');
    assert.equal(r.status, 200);
    doc = r.body;
  });

  function resolve(schema) {
    let s = schema;
    for (let i = 0; s && s.$ref !== undefined; i++) {
      assert.ok(i < 10, 'no $ref loops');
      assert.match(s.$ref, /^#\/components\/schemas\//);
      s = doc.components.schemas[s.$ref.slice('#/components/schemas/'.length)];
      assert.ok(s, `$ref ${schema.$ref} resolves`);
    }
    return s;
  }

  /** A small JSON Schema check (the keywords this document uses); returns the problems found. */
  function check(schema, value, path = '$', out = []) {
    const s = resolve(schema);
    const typeOk = (t) =>
      ({
        string: typeof value === 'string',
        integer: Number.isInteger(value),
        number: typeof value === 'number',
        boolean: typeof value === 'boolean',
        null: value === null,
        array: Array.isArray(value),
        object: typeof value === 'object' && value !== null && !Array.isArray(value),
      })[t];
    if (s.type !== undefined && ![].concat(s.type).some(typeOk)) out.push(`${path}: not ${JSON.stringify(s.type)}`);
    if ('const' in s && JSON.stringify(value) !== JSON.stringify(s.const)) out.push(`${path}: not ${JSON.stringify(s.const)}`);
    if (s.enum !== undefined && !s.enum.includes(value)) out.push(`${path}: not one of ${s.enum}`);
    if (typeof value === 'string') {
      if (s.pattern !== undefined && !new RegExp(s.pattern, 'u').test(value)) out.push(`${path}: does not match ${s.pattern}`);
      if (s.format === 'date-time' && !/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/.test(value)) out.push(`${path}: not a date-time`);
      if (s.maxLength !== undefined && [...value].length > s.maxLength) out.push(`${path}: too long`);
    }
    if (typeof value === 'number') {
      if (s.minimum !== undefined && value < s.minimum) out.push(`${path}: below minimum`);
      if (s.maximum !== undefined && value > s.maximum) out.push(`${path}: above maximum`);
    }
    if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
      for (const k of s.required ?? []) if (!(k in value)) out.push(`${path}: missing ${k}`);
      for (const [k, ps] of Object.entries(s.properties ?? {})) if (k in value) check(ps, value[k], `${path}.${k}`, out);
      if (s.additionalProperties === false) for (const k of Object.keys(value)) if (!(k in (s.properties ?? {}))) out.push(`${path}: unexpected ${k}`);
    }
    if (Array.isArray(value) && s.items !== undefined) value.forEach((v, i) => check(s.items, v, `${path}[${i}]`, out));
    return out;
  }

  function operations() {
    const out = [];
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(item)) {
        if (['get', 'put', 'post', 'delete', 'patch', 'head', 'options'].includes(method)) out.push({ path, method: method.toUpperCase(), op });
      }
    }
    return out;
  }

  /** A minimal valid body from a requestBody schema: its required properties (enums: the first member). */
  function minimalBody(op) {
    const schema = op.requestBody?.content?.['application/json']?.schema;
    if (schema === undefined) return undefined;
    const s = resolve(schema);
    const body = {};
    for (const name of s.required ?? []) {
      const p = resolve(s.properties[name]);
      body[name] = p.enum !== undefined ? p.enum[0] : p.type === 'object' ? {} : p.type === 'integer' ? 1 : 'x';
    }
    return body;
  }

  function needsToken(op) {
    return Array.isArray(op.security) && op.security.length > 0;
  }

  /** Real ids for {id} and {turnId}: a fresh session (with a turn) for chat-session paths, a real provider otherwise. */
  async function concretePath(path) {
    if (!path.includes('{')) return path;
    const id = path.startsWith('/api/v1/providers/') ? PROVIDERS[0]._id : (await create(alice))._id;
    // a turn's deltas go to a streaming turn
    const body = path.endsWith('/deltas') ? { role: 'assistant', content: 'so far', status: 'streaming' } : undefined;
    const turn = path.startsWith('/api/v1/providers/') ? undefined : await addTurn(alice, id, body);
    const out = path.replace(/\{id\}/g, id).replace(/\{turnId\}/g, turn?._id);
    assert.ok(!out.includes('{'), `every path parameter of ${path} is known to this test`);
    return out;
  }

  test('"GET /api/v1/openapi.json is OpenAPI 3.1" (no token needed; every $ref resolves; every operation documented)', async () => {
    const r = await server.request('GET', '/api/v1/openapi.json');
    assert.equal(r.status, 200);
    assert.match(r.headers['content-type'], /^application\/json/);
    assert.match(doc.openapi, /^3\.1\.\d+$/);
    assert.equal(typeof doc.info.title, 'string');
    assert.equal(typeof doc.info.version, 'string');
    assert.equal(doc.components.securitySchemes.bearerAuth.type, 'http');
    assert.equal(doc.components.securitySchemes.bearerAuth.scheme, 'bearer');
    const refs = JSON.stringify(doc).match(/"\$ref":"[^"]+"/g) ?? [];
    for (const ref of refs) resolve({ $ref: JSON.parse(`{${ref}}`).$ref });
    const opIds = new Set();
    for (const { path, method, op } of operations()) {
      assert.equal(typeof op.operationId, 'string', `${method} ${path}`);
      assert.ok(!opIds.has(op.operationId), `operationId ${op.operationId} is unique`);
      opIds.add(op.operationId);
      assert.ok(Object.keys(op.responses).length > 0);
      for (const status of Object.keys(op.responses)) assert.match(status, /^[1-5]\d\d$/);
      const params = (path.match(/\{(\w+)\}/g) ?? []).map((p) => p.slice(1, -1));
      for (const name of params) assert.ok(op.parameters?.some((p) => p.in === 'path' && p.name === name && p.required === true), `${method} ${path} documents {${name}}`);
    }
  });

  test('"a test WALKS the document and calls every path+method it lists": the status is one the document lists, and 2xx bodies have the documented envelope', async () => {
    const ops = operations();
    // deletes last, so that nothing else depends on what they remove
    ops.sort((a, b) => (a.method === 'DELETE') - (b.method === 'DELETE'));
    assert.ok(ops.length >= 14, `${ops.length} operations`);
    for (const { path, method, op } of ops) {
      const concrete = await concretePath(path);
      const json = minimalBody(op);
      if (op.responses['200']?.content?.['text/event-stream'] !== undefined) {
        // an event stream never ends by itself: it is open once its `ready` event is in
        const events = await openEvents(server.url, concrete, { token: alice.token });
        assert.equal(events.status, 200, `${method} ${path}: ${events.text}`);
        assert.match(events.headers['content-type'], /^text\/event-stream/);
        await events.waitFor((e) => e.event === 'ready');
        await events.close();
        assert.equal((await server.request(method, concrete)).status, 401, `${method} ${path} without a token`);
        continue;
      }
      const r = await server.request(method, concrete, { token: needsToken(op) ? alice.token : undefined, json });
      const what = `${method} ${path} -> ${r.status} ${r.text.slice(0, 200)}`;
      assert.ok(Object.hasOwn(op.responses, String(r.status)), `${what}: status not documented (${Object.keys(op.responses)})`);
      assert.ok(r.status >= 200 && r.status < 300, `${what}: a minimal valid request succeeds`);
      const documented = op.responses[String(r.status)];
      const [mediaType, media] = Object.entries(documented.content ?? {})[0] ?? [];
      assert.ok(mediaType, `${what}: the success answer documents its content`);
      assert.ok(r.headers['content-type'].startsWith(mediaType), `${what}: content-type ${r.headers['content-type']} vs ${mediaType}`);
      const body = mediaType === 'application/json' ? r.body : r.text;
      const problems = check(media.schema, body);
      assert.deepEqual(problems, [], `${what}: the body matches the documented schema`);
      for (const header of Object.keys(documented.headers ?? {})) assert.ok(r.headers[header.toLowerCase()], `${what}: documented header ${header}`);
      // security as documented: without a token, 401 exactly when the document asks for one
      const anon = await server.request(method, await concretePath(path), { json });
      if (needsToken(op)) {
        assert.equal(anon.status, 401, `${method} ${path} without a token`);
        assert.ok(op.responses['401'], `${method} ${path} documents 401`);
      } else {
        assert.ok(anon.status >= 200 && anon.status < 300, `${method} ${path} needs no token`);
      }
    }
  });

  test('"every route the server answers (including archive/unarchive/turn append/healthz/metrics/openapi) appears in the document"', async () => {
    const expected = [
      ['get', '/healthz'],
      ['get', '/metrics'],
      ['get', '/api/v1/openapi.json'],
      ['get', '/api/v1/chat-sessions'],
      ['post', '/api/v1/chat-sessions'],
      ['get', '/api/v1/chat-sessions/{id}'],
      ['put', '/api/v1/chat-sessions/{id}'],
      ['delete', '/api/v1/chat-sessions/{id}'],
      ['get', '/api/v1/chat-sessions/{id}/turns'],
      ['post', '/api/v1/chat-sessions/{id}/turns'],
      ['post', '/api/v1/chat-sessions/{id}/archive'],
      ['post', '/api/v1/chat-sessions/{id}/unarchive'],
      ['put', '/api/v1/chat-sessions/{id}/turns/{turnId}'],
      ['delete', '/api/v1/chat-sessions/{id}/turns/{turnId}'],
      ['post', '/api/v1/chat-sessions/{id}/fork'],
      ['get', '/api/v1/providers'],
      ['get', '/api/v1/providers/{id}'],
    ];
    for (const [method, path] of expected) assert.ok(doc.paths[path]?.[method], `${method.toUpperCase()} ${path} is documented`);
    // per documented path, the methods the server answers (its 405 Allow) are exactly the documented ones
    for (const [path, item] of Object.entries(doc.paths)) {
      const concrete = path.replace(/\{\w+\}/g, MISSING);
      const r = await server.request('PATCH', concrete, { token: alice.token });
      assert.equal(r.status, 405, `PATCH ${path}`);
      const allowed = new Set(r.headers.allow.split(',').map((m) => m.trim().toLowerCase()));
      allowed.delete('head'); // HEAD is GET without a body
      assert.deepEqual(allowed, new Set(Object.keys(item).filter((k) => k !== 'parameters')), `${path}: Allow vs documented methods`);
    }
    // and nearby paths that are not documented are not answered
    for (const path of [
      `/api/v1/chat-sessions/${MISSING}/turns/${MISSING}`,
      `/api/v1/chat-sessions/${MISSING}/restore`,
      `/api/v1/chat-sessions/${MISSING}/archived`,
      '/api/v1/chat-sessions/search',
      '/api/v1/turns',
      '/api/v1/users',
      '/api/v1/openapi.yaml',
      '/api/v1/healthz',
      '/api/v1/metrics',
      '/openapi.json',
      '/readyz',
      '/api/v1/providers/reload',
    ]) {
      const documented = Object.keys(doc.paths).some((p) => new RegExp(`^${p.replace(/[.]/g, '\\.').replace(/\{\w+\}/g, '[^/]+')}$`).test(path));
      if (documented) continue; // e.g. /chat-sessions/search is {id}=search: a documented route
      for (const method of ['GET', 'POST']) {
        const r = await server.request(method, path, { token: alice.token, json: method === 'POST' ? {} : undefined });
        assertError(r, 404, 'Not found', `${method} ${path}`);
      }
    }
  });

  test('"a request violating a documented constraint (e.g. maxLength, enum) gets the documented 400"', async () => {
    let tried = 0;
    for (const { path, method, op } of operations()) {
      const base = minimalBody(op);
      const bodySchema = op.requestBody ? resolve(op.requestBody.content['application/json'].schema) : undefined;
      for (const [name, raw] of Object.entries(bodySchema?.properties ?? {})) {
        const p = resolve(raw);
        const violations = [];
        if (p.maxLength !== undefined) violations.push(['maxLength', 'x'.repeat(p.maxLength + 1)], ['maxLength (code points)', EMOJI.repeat(p.maxLength + 1)]);
        if (p.enum !== undefined) violations.push(['enum', 'not-a-member'], ['enum (case)', String(p.enum[0]).toUpperCase() === p.enum[0] ? String(p.enum[0]).toLowerCase() : String(p.enum[0]).toUpperCase()]);
        if (p.type === 'string') violations.push(['type', 12345]);
        if (p.type === 'object') violations.push(['type', ['array']]);
        for (const [kind, value] of violations) {
          const concrete = await concretePath(path);
          const r = await server.request(method, concrete, { token: alice.token, json: { ...base, [name]: value } });
          const what = `${method} ${path} body.${name} violating ${kind}`;
          assert.ok(op.responses['400'], `${what}: 400 is documented`);
          assert.equal(r.status, 400, `${what}: ${r.status} ${r.text}`);
          assert.equal(r.body.success, false);
          assert.ok(r.body.message.startsWith(name), `${what}: the message names the field: ${r.body.message}`);
          const errSchema = op.responses['400'].content['application/json'].schema;
          assert.deepEqual(check(errSchema, r.body), [], `${what}: the documented error shape`);
          tried++;
        }
      }
      for (const param of (op.parameters ?? []).filter((x) => x.in === 'query')) {
        const p = resolve(param.schema);
        const violations = [];
        if (p.maxLength !== undefined) violations.push(['maxLength', 'x'.repeat(p.maxLength + 1)]);
        if (p.enum !== undefined) violations.push(['enum', 'not-a-member']);
        if (p.minimum !== undefined) violations.push(['minimum', String(p.minimum - 1)]);
        if (p.maximum !== undefined) violations.push(['maximum', String(p.maximum + 1)]);
        if (p.type === 'integer') violations.push(['type', '1.5'], ['type', 'abc']);
        for (const [kind, value] of violations) {
          const concrete = await concretePath(path);
          const r = await server.request(method, withParams(concrete, { [param.name]: value }), { token: alice.token });
          const what = `${method} ${path}?${param.name} violating ${kind}`;
          assert.ok(op.responses['400'], `${what}: 400 is documented`);
          assert.equal(r.status, 400, `${what}: ${r.status} ${r.text}`);
          assert.ok(r.body.message.startsWith(param.name), `${what}: ${r.body.message}`);
          tried++;
        }
      }
    }
    assert.ok(tried >= 30, `${tried} violations tried`);
  });

  test('the document\'s security is the server\'s: each operation\'s bearerAuth scope is exactly the scope the server requires', async () => {
    for (const { path, method, op } of operations()) {
      if (!needsToken(op)) continue;
      const scopes = op.security.flatMap((req) => req.bearerAuth ?? []);
      assert.equal(scopes.length, 1, `${method} ${path} names its scope`);
      assert.ok(op.responses['403'], `${method} ${path} documents 403`);
      const json = minimalBody(op);
      const token = tokenFor('alice', { scope: scopes[0] });
      const stream = op.responses['200']?.content?.['text/event-stream'] !== undefined;
      // an event stream never ends by itself: its head is the answer
      const withIt = stream ? await openEvents(server.url, await concretePath(path), { token }) : await server.request(method, await concretePath(path), { token, json });
      if (stream) await withIt.close();
      assert.ok(withIt.status >= 200 && withIt.status < 300, `${method} ${path} with only ${scopes[0]}: ${withIt.status} ${withIt.text}`);
      const others = ALL_SCOPES.filter((s) => s !== scopes[0]).join(' ');
      assert403(await server.request(method, await concretePath(path), { token: tokenFor('alice', { scope: others }), json }), `${method} ${path} without ${scopes[0]}`);
    }
  });
});
