// docs/TEAM-DECISIONS.md, HTTP behaviour and Running it: CORS_ORIGIN, the preflight and the
// headers of an allowed origin's answers.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { dispose } from '../api-kit.mjs';
import { newSession, request, startServer } from '../helpers.mjs';

describe('CORS: CORS_ORIGIN', () => {
  const ORIGIN = 'https://chat.example.com';
  let s;
  let alice;
  before(async () => {
    s = await startServer({ env: { CORS_ORIGIN: ORIGIN } });
    alice = s.as('alice');
  });
  after(() => dispose(s));

  const list = (h) => (h ?? '').split(',').map((x) => x.trim().toLowerCase()).filter((x) => x !== '');
  const preflight = (srv, path, origin, method = 'PUT') =>
    srv.request('OPTIONS', path, { headers: { origin, 'access-control-request-method': method, 'access-control-request-headers': 'authorization, content-type, if-match' } });

  test("[D-http-6] a preflight answers 204 with Allow-Origin, the route's methods, the allowed headers, Max-Age", async () => {
    const cases = [
      ['/api/v1/chat-sessions/665f1c2a9b1e8a0012ab34c1', 'PUT', ['GET', 'PUT', 'DELETE'], ['POST']],
      ['/api/v1/chat-sessions', 'POST', ['GET', 'POST'], ['PUT', 'DELETE']],
      ['/api/v1/chat-sessions/665f1c2a9b1e8a0012ab34c1/turns', 'POST', ['GET', 'POST'], ['PUT', 'DELETE']],
      ['/api/v1/chat-sessions/665f1c2a9b1e8a0012ab34c1/archive', 'POST', ['POST'], ['GET', 'PUT', 'DELETE']],
      ['/api/v1/providers', 'GET', ['GET'], ['POST', 'PUT', 'DELETE']],
    ];
    for (const [path, method, allowed, notAllowed] of cases) {
      const r = await preflight(s, path, ORIGIN, method);
      assert.equal(r.status, 204, path);
      assert.equal(r.text, '');
      assert.equal(r.headers['access-control-allow-origin'], ORIGIN, path);
      const methods = list(r.headers['access-control-allow-methods']);
      for (const m of allowed) assert.ok(methods.includes(m.toLowerCase()), `${path}: ${m} in ${methods}`);
      for (const m of notAllowed) assert.equal(methods.includes(m.toLowerCase()), false, `${path}: ${m} not in ${methods}`);
      const headers = list(r.headers['access-control-allow-headers']);
      for (const h of ['authorization', 'content-type', 'if-match']) assert.ok(headers.includes(h), `${path}: ${h} in ${headers}`);
      assert.match(r.headers['access-control-max-age'] ?? '', /^[1-9]\d*$/);
      assert.ok(list(r.headers.vary).includes('origin'), `${path}: Vary: Origin`);
      assert.equal(r.headers['www-authenticate'], undefined, 'no authentication asked for');
    }
  });

  test('answers to an allowed origin carry Allow-Origin, expose ETag and X-Request-Id, and Vary: Origin', async () => {
    const created = await alice.post('/api/v1/chat-sessions', newSession(), { headers: { origin: ORIGIN } });
    assert.equal(created.status, 201);
    const got = await alice.get(`/api/v1/chat-sessions/${created.body.data._id}`, { headers: { origin: ORIGIN } });
    const unauth = await s.request('GET', '/api/v1/chat-sessions', { headers: { origin: ORIGIN } });
    const missing = await alice.get('/api/v1/chat-sessions/ffffffffffffffffffffffff', { headers: { origin: ORIGIN } });
    assert.equal(unauth.status, 401);
    assert.equal(missing.status, 404);
    assert.ok(got.headers.etag);
    for (const r of [created, got, unauth, missing]) {
      assert.equal(r.headers['access-control-allow-origin'], ORIGIN);
      const exposed = list(r.headers['access-control-expose-headers']);
      assert.ok(exposed.includes('etag'), `ETag exposed: ${exposed}`);
      assert.ok(exposed.includes('x-request-id'), `X-Request-Id exposed: ${exposed}`);
      assert.ok(list(r.headers.vary).includes('origin'));
      assert.equal(r.headers['access-control-allow-credentials'], undefined, 'tokens travel in headers, not cookies');
    }
  });

  test('a disallowed origin, or a look-alike (scheme, port or subdomain), gets no Access-Control-Allow-Origin', async () => {
    for (const origin of ['https://evil.example.com', 'http://chat.example.com', 'https://chat.example.com:8443', 'https://chat.example.com.evil.net', 'null']) {
      const p = await preflight(s, '/api/v1/chat-sessions', origin, 'POST');
      assert.equal(p.headers['access-control-allow-origin'], undefined, origin);
      assert.equal(p.headers['access-control-allow-methods'], undefined, origin);
      const r = await alice.get('/api/v1/chat-sessions', { headers: { origin } });
      assert.equal(r.status, 200);
      assert.equal(r.headers['access-control-allow-origin'], undefined, origin);
      assert.equal(r.headers['access-control-expose-headers'], undefined, origin);
    }
    // a request without Origin (curl, a server) is served as usual, without CORS headers
    const plain = await alice.get('/api/v1/chat-sessions');
    assert.equal(plain.headers['access-control-allow-origin'], undefined);
  });

  test('a 429 to an allowed origin carries Access-Control-Allow-Origin and exposes Retry-After, so a browser client can back off', async () => {
    const both = await startServer({ env: { CORS_ORIGIN: ORIGIN, RATE_LIMIT: '2/s' } });
    try {
      const u = both.as('u');
      let r;
      for (let i = 0; i < 8 && r?.status !== 429; i++) r = await u.get('/api/v1/chat-sessions', { headers: { origin: ORIGIN } });
      assert.equal(r.status, 429);
      assert.equal(r.headers['access-control-allow-origin'], ORIGIN);
      assert.ok(list(r.headers['access-control-expose-headers']).includes('retry-after'));
      const p = await preflight(both, '/api/v1/chat-sessions', ORIGIN, 'GET');
      assert.equal(p.status, 204, 'a preflight is not refused for the rate limit of the request it precedes');
    } finally {
      await dispose(both);
    }
  });

  test('CORS_ORIGIN as a comma-separated list allows each listed origin (echoed back exactly) and no other', async () => {
    const two = await startServer({ env: { CORS_ORIGIN: 'https://a.example.com, https://b.example.com:8443' } });
    try {
      for (const origin of ['https://a.example.com', 'https://b.example.com:8443']) {
        const p = await preflight(two, '/api/v1/chat-sessions', origin, 'POST');
        assert.equal(p.status, 204);
        assert.equal(p.headers['access-control-allow-origin'], origin);
        const r = await two.as('u').get('/api/v1/chat-sessions', { headers: { origin } });
        assert.equal(r.headers['access-control-allow-origin'], origin);
      }
      for (const origin of ['https://c.example.com', 'https://b.example.com']) {
        const r = await two.as('u').get('/api/v1/chat-sessions', { headers: { origin } });
        assert.equal(r.headers['access-control-allow-origin'], undefined, origin);
      }
    } finally {
      await dispose(two);
    }
  });

  test('CORS_ORIGIN=* allows any origin', async () => {
    const any = await startServer({ env: { CORS_ORIGIN: '*' } });
    try {
      for (const origin of ['https://x.example', 'http://localhost:5173']) {
        const p = await preflight(any, '/api/v1/chat-sessions/665f1c2a9b1e8a0012ab34c1', origin, 'DELETE');
        assert.equal(p.status, 204);
        assert.equal(p.headers['access-control-allow-origin'], '*');
        const r = await any.as('u').get('/api/v1/chat-sessions', { headers: { origin } });
        assert.equal(r.headers['access-control-allow-origin'], '*');
        assert.ok(list(r.headers['access-control-expose-headers']).includes('etag'));
      }
    } finally {
      await dispose(any);
    }
  });

  test('[D-http-6] without CORS_ORIGIN: no CORS headers at all, and OPTIONS is 405', async () => {
    const none = await startServer();
    try {
      const p = await preflight(none, '/api/v1/chat-sessions', ORIGIN, 'POST');
      assert.equal(p.status, 405);
      assert.deepEqual(p.body, { success: false, message: 'Method not allowed' });
      assert.ok(p.headers.allow);
      const r = await none.as('u').get('/api/v1/chat-sessions', { headers: { origin: ORIGIN } });
      assert.equal(r.status, 200);
      for (const res of [p, r]) {
        const cors = Object.keys(res.headers).filter((h) => h.startsWith('access-control-'));
        assert.deepEqual(cors, [], 'no access-control-* header');
      }
    } finally {
      await dispose(none);
    }
  });
});
