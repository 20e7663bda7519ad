// The router (src/http/router.ts) on a table of cases, as Hono's common.case.test.ts does for its
// routers: each row a method and a raw path against one route table, and what matches (the
// route, the raw parameter values), a 405 with its Allow, or nothing. Then the real server's
// table: every operation of its OpenAPI document is routed (no 404 "Not found" nor 405).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { request as httpRequest } from 'node:http';
import { createRequire } from 'node:module';
import { startServer } from '../helpers.mjs';

const { Router } = createRequire(import.meta.url)('../../dist/testkit.cjs');

/** The status and (for JSON) the body of a request, read from its head alone when it is an event stream. */
function ask(base, method, path, token, json) {
  const { hostname, port } = new URL(base);
  return new Promise((resolve, reject) => {
    const body = json === undefined ? undefined : JSON.stringify(json);
    const req = httpRequest({ hostname, port, method, path, headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) } }, (res) => {
      if (!String(res.headers['content-type']).startsWith('application/json')) {
        resolve({ status: res.statusCode, body: undefined });
        res.destroy();
        return;
      }
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode, body: JSON.parse(text) }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** The table the cases run against: a small copy of the app's shapes, with each route named. */
function table() {
  const r = new Router();
  for (const [method, pattern] of [
    ['GET', '/healthz'],
    ['GET', '/api/v1/chat-sessions'],
    ['POST', '/api/v1/chat-sessions'],
    ['GET', '/api/v1/chat-sessions/search'],
    ['GET', '/api/v1/chat-sessions/:id'],
    ['PUT', '/api/v1/chat-sessions/:id'],
    ['DELETE', '/api/v1/chat-sessions/:id'],
    ['GET', '/api/v1/chat-sessions/:id/turns'],
    ['POST', '/api/v1/chat-sessions/:id/turns'],
    ['GET', '/api/v1/chat-sessions/:id/turns/:turnId'],
    ['POST', '/api/v1/chat-sessions/:id/turns/:turnId/cancel'],
    ['POST', '/api/v1/chat-sessions/:id/messages'],
    ['GET', '/api/v1/providers'],
    ['GET', '/api/v1/providers/:id'],
  ]) r.add(method, pattern, `${method} ${pattern}`);
  return r;
}

const found = (route, ...params) => ({ kind: 'found', value: route, params });
const method = (pattern, ...allow) => ({ kind: 'method', allow, pattern });
const none = { kind: 'none' };

const CASES = [
  // static routes, and one trailing slash
  ['GET', '/healthz', found('GET /healthz')],
  ['GET', '/healthz/', found('GET /healthz')],
  ['GET', '/healthz//', none],
  ['GET', '/api/v1/chat-sessions', found('GET /api/v1/chat-sessions')],
  ['POST', '/api/v1/chat-sessions/', found('POST /api/v1/chat-sessions')],
  // a static segment wins over a parameter at the same place; the parameter takes the rest
  ['GET', '/api/v1/chat-sessions/search', found('GET /api/v1/chat-sessions/search')],
  ['GET', '/api/v1/chat-sessions/searchx', found('GET /api/v1/chat-sessions/:id', 'searchx')],
  ['GET', '/api/v1/chat-sessions/abc', found('GET /api/v1/chat-sessions/:id', 'abc')],
  ['PUT', '/api/v1/chat-sessions/search', method('/api/v1/chat-sessions/search', 'GET', 'HEAD')],
  // parameters come back raw (still percent-encoded), whatever they hold
  ['GET', '/api/v1/chat-sessions/a%2Fb', found('GET /api/v1/chat-sessions/:id', 'a%2Fb')],
  ['GET', '/api/v1/chat-sessions/a.b:c', found('GET /api/v1/chat-sessions/:id', 'a.b:c')],
  ['GET', '/api/v1/chat-sessions/%20', found('GET /api/v1/chat-sessions/:id', '%20')],
  // an empty segment is an empty parameter (the route says what that means), never a skip
  ['GET', '/api/v1/chat-sessions//turns', found('GET /api/v1/chat-sessions/:id/turns', '')],
  ['GET', '/api/v1/chat-sessions//', found('GET /api/v1/chat-sessions/:id', '')],
  ['GET', '/api/v1/chat-sessions/s1/turns/t1', found('GET /api/v1/chat-sessions/:id/turns/:turnId', 's1', 't1')],
  ['POST', '/api/v1/chat-sessions/s1/turns/t1/cancel', found('POST /api/v1/chat-sessions/:id/turns/:turnId/cancel', 's1', 't1')],
  ['POST', '/api/v1/chat-sessions/s1/turns/t1/cancel/', found('POST /api/v1/chat-sessions/:id/turns/:turnId/cancel', 's1', 't1')],
  // deeper, shallower, near misses and other spellings are nothing
  ['GET', '/api/v1/chat-sessions/s1/turns/t1/cancel/x', none],
  ['GET', '/api/v1/chat-sessions/s1/turnsx', none],
  ['GET', '/api/v1', none],
  ['GET', '/api/v1/', none],
  ['GET', '/API/V1/PROVIDERS', none],
  ['GET', '//api/v1/providers', none],
  ['GET', '/api//v1/providers', none],
  ['GET', '', none],
  ['GET', 'api/v1/providers', none],
  ['GET', '*', none],
  // HEAD is answered by GET; a path with routes but not this method says which it has
  ['HEAD', '/api/v1/providers', found('GET /api/v1/providers')],
  ['HEAD', '/api/v1/chat-sessions/s1/turns/t1', found('GET /api/v1/chat-sessions/:id/turns/:turnId', 's1', 't1')],
  ['PATCH', '/api/v1/chat-sessions', method('/api/v1/chat-sessions', 'GET', 'POST', 'HEAD')],
  ['POST', '/api/v1/chat-sessions/s1', method('/api/v1/chat-sessions/:id', 'GET', 'PUT', 'DELETE', 'HEAD')],
  ['GET', '/api/v1/chat-sessions/s1/messages', method('/api/v1/chat-sessions/:id/messages', 'POST')],
  ['HEAD', '/api/v1/chat-sessions/s1/messages', method('/api/v1/chat-sessions/:id/messages', 'POST')],
  ['get', '/healthz', method('/healthz', 'GET', 'HEAD')],
];

describe('The router, on a table of cases', () => {
  const r = table();
  /** What a case expects, as its test's name says it. */
  const expected = (want) => (want.kind === 'found' ? want.value : want.kind === 'method' ? `405 (${want.allow.join(', ')})` : 'nothing');
  for (const [m, path, want] of CASES) {
    test(`${m} ${JSON.stringify(path)} -> ${expected(want)}`, () => {
      assert.deepEqual(r.match(m, path), want);
    });
  }

  test('a table that could not be matched unambiguously is refused when built (duplicates, conflicts, empty segments)', () => {
    const r2 = table();
    assert.throws(() => r2.add('GET', '/api/v1/chat-sessions/:id', 'again'), /duplicate route: GET \/api\/v1\/chat-sessions\/:id/);
    assert.throws(() => r2.add('GET', '/api/v1/chat-sessions/:sessionId/x', 'renamed'), /parameter :sessionId conflicts with :id/);
    assert.throws(() => r2.add('GET', '/api//x', 'empty'), /empty segment/);
    assert.throws(() => r2.add('GET', 'api/x', 'relative'), /must start with "\/"/);
  });
});

describe("The server's own table", () => {
  let server;
  before(async () => {
    server = await startServer();
  });
  after(() => server?.stop());

  test('every operation of the OpenAPI document is routed: none answers 404 `Not found` or 405', async () => {
    const doc = (await server.request('GET', '/api/v1/openapi.json')).body;
    const ops = Object.entries(doc.paths).flatMap(([p, item]) => Object.keys(item).filter((k) => ['get', 'post', 'put', 'delete', 'patch'].includes(k)).map((m) => [m.toUpperCase(), p]));
    assert.ok(ops.length >= 20, `${ops.length} operations`);
    const token = server.as('alice').token;
    for (const [m, p] of ops) {
      // a made-up id where the path has a parameter; an event stream is read as far as its head
      const path = p.replace(/\{[^}]+\}/g, '0123456789abcdef01234567');
      const r = await ask(server.url, m, path, token, m === 'GET' || m === 'DELETE' ? undefined : {});
      assert.ok(r.status !== 405 && !(r.status === 404 && r.body?.message === 'Not found'), `${m} ${p}: ${r.status} ${JSON.stringify(r.body)}`);
    }
  });
});
