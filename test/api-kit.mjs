// What the API tests share: the paths and ids they use, one server per test file started before
// its tests (`sharedServer`), the calls that must succeed (`create`, `addTurn`, ...), the
// error envelope's assertions, the decisions' list order and a cursor walk.
import assert from 'node:assert/strict';
import { after, before } from 'node:test';
import { newSession, removeDir, startServer } from './helpers.mjs';

export const BASE = '/api/v1/chat-sessions';
export const MISSING = '0123456789abcdef01234567';
export const EMOJI = '\u{1F600}'; // one code point, two UTF-16 units, four UTF-8 bytes
export const ALL_SCOPES = ['sessions:read', 'sessions:write', 'providers:read'];

/** Providers with apiKeys and passwords in URLs: what redaction must hide, in every shape. */
export const PROVIDERS = [
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
export const URL_SECRETS = ['mirror-pass-1', 'plain-pass-2', 'eu-pass-3', 'proxy-pass-4', 'db-pass-5', 'redis-pass-6', 'mongo-pass-7', 'ftp-pass-8', 'ghp-token-9', 'notes-pass-10', 'notes-pass-11'];

/** The test file's server and two users of it; set by the `before` that `sharedServer` registers. */
export let server;
export let alice;
export let bob;

/**
 * Registers a `before` that starts one server for the test file (with `options` as
 * startServer takes them) and an `after` that stops it and removes its data directory.
 */
export function sharedServer(options = {}) {
  let stopping = false;
  before(async () => {
    server = await startServer(options);
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
}

let seq = 0;
/** A name no other test uses (users, projects), so lists hold only what the test made. */
export function unique(tag) {
  return `${tag}-${++seq}`;
}
export function freshUser(tag, claims) {
  return server.as(unique(tag), claims);
}

export async function create(who = alice, over = {}) {
  const r = await who.post(BASE, newSession(over));
  assert.equal(r.status, 201, r.text);
  return r.body.data;
}

export async function addTurn(who, id, body = { role: 'user', content: 'hi' }, o = {}) {
  const r = await who.post(`${BASE}/${id}/turns`, body, o);
  assert.equal(r.status, 201, r.text);
  return r.body.data;
}

export async function get(who, id) {
  const r = await who.get(`${BASE}/${id}`);
  assert.equal(r.status, 200, r.text);
  return r;
}

export async function turnsOf(who, id) {
  const r = await who.get(`${BASE}/${id}/turns`);
  assert.equal(r.status, 200, r.text);
  return r.body.data;
}

export function assertError(r, status, message, what = '') {
  assert.equal(r.status, status, `${what}: ${r.status} ${r.text}`);
  assert.deepEqual(r.body, { success: false, message }, what);
}
export const assert400 = (r, message, what) => assertError(r, 400, message, what);
export const assert404 = (r, what) => assertError(r, 404, 'Chat session not found', what);
export const assert412 = (r, what) => assertError(r, 412, 'Chat session was modified', what);
export const assert403 = (r, what) => assertError(r, 403, 'Forbidden', what);

/** A 400 in the error envelope, whatever the exact wording: never a 500. */
export function assertBadRequest(r, what = '') {
  assert.equal(r.status, 400, `${what}: ${r.status} ${r.text}`);
  assert.equal(r.body?.success, false, what);
  assert.equal(typeof r.body.message, 'string', what);
}

export const ids = (list) => list.map((x) => x._id);

/** The decisions' session list order: updatedAt newest first, ties by _id descending. */
export function listOrder(a, b) {
  if (a.updatedAt !== b.updatedAt) return a.updatedAt < b.updatedAt ? 1 : -1;
  return a._id < b._id ? 1 : a._id > b._id ? -1 : 0;
}

export function withParams(path, params) {
  const qs = Object.entries(params)
    .filter(([, v]) => v !== undefined)
    .map(([k, v]) => `${k}=${encodeURIComponent(v)}`)
    .join('&');
  if (qs === '') return path;
  return `${path}${path.includes('?') ? '&' : '?'}${qs}`;
}

/** Follows nextCursor from the first page to the last; checks every page's shape on the way. */
export async function walk(who, path, limit) {
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

export async function firstCursor(who, path, limit = 1) {
  const r = await who.get(withParams(path, { limit }));
  assert.equal(r.status, 200, r.text);
  assert.equal(typeof r.body.nextCursor, 'string', `${path} has a second page`);
  return r.body.nextCursor;
}

/** Makes `n` sessions for `who` concurrently until at least two share an updatedAt. */
export async function createWithTies(who, n, over = {}) {
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
export async function clockPast(iso) {
  while (Date.now() <= Date.parse(iso)) await new Promise((r) => setTimeout(r, 1));
}

export function nested(depth, leaf = {}) {
  let v = leaf;
  for (let i = 1; i < depth; i++) v = { d: v };
  return v;
}

/** Everything user `alice` can see on `s`: each session with its turns, by id (what must survive a crash, a full disk, a restart). */
export async function dump(s) {
  const u = s.as('alice');
  const list = (await u.get(`${BASE}?archived=all`)).body.data;
  const out = {};
  for (const x of list) out[x._id] = { ...x, turns: (await u.get(`${BASE}/${x._id}/turns`)).body.data };
  return out;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** For the tests that wait on a running process: resolves with `cond()`'s value once it is truthy (polling), failing after `ms` with `what`. */
export async function waitFor(cond, what, ms = 30_000) {
  const start = Date.now();
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() - start > ms) throw new Error(`timed out waiting for ${what}`);
    await sleep(15);
  }
}

/** The value of a series in /metrics (its full name), undefined when it is not shown. */
export async function metric(s, series) {
  const text = (await s.request('GET', '/metrics', { keepAlive: false })).text;
  const m = new RegExp(`^${series} (\\d+)$`, 'm').exec(text);
  return m === null ? undefined : Number(m[1]);
}

/** Stops a server and removes its data directory, whatever state it is in. */
export async function dispose(s) {
  if (s === undefined) return;
  await s.stop();
  removeDir(s.dataDir);
}
