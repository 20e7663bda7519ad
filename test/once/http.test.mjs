// docs/TEAM-DECISIONS.md, HTTP behaviour, and malformed input of every kind: a clear 4xx in the
// envelope, never a 500, a hang or a crash, and the server keeps serving.
import assert from 'node:assert/strict';
import http from 'node:http';
import { connect } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { waitFor } from '../api-kit.mjs';
import { newSession, removeDir, startServer } from '../helpers.mjs';

let server;
let alice;
before(async () => {
  server = await startServer({ env: { BODY_LIMIT: '64kb' } });
  alice = server.as('alice');
});
after(async () => {
  await server.stop();
  removeDir(server.dataDir);
});

function assertCommonHeaders(r) {
  assert.equal(r.headers['content-type'], 'application/json; charset=utf-8');
  assert.equal(r.headers['cache-control'], 'no-store');
  assert.equal(r.headers['x-content-type-options'], 'nosniff');
  assert.ok(r.headers['x-request-id'], 'x-request-id');
}

/** Sends raw bytes on a new connection and returns everything the server answers. */
function raw(bytes, { waitMs = 2000 } = {}) {
  return new Promise((resolve) => {
    const sock = connect(server.port, '127.0.0.1');
    let out = '';
    sock.on('data', (d) => (out += d.toString('latin1')));
    const done = () => resolve(out);
    sock.on('close', done);
    sock.on('error', done);
    sock.write(bytes);
    setTimeout(() => {
      sock.destroy();
      done();
    }, waitMs);
  });
}

async function stillServing() {
  const r = await server.request('GET', '/healthz');
  assert.equal(r.status, 200);
}

describe('HTTP behaviour decisions', () => {
  test('Unknown path: 404 Not found', async () => {
    for (const p of ['/', '/nope', '/api', '/api/v1', '/api/v1/chat-sessions/x/y/z', '/api/v1/providers/a/b', '/API/V1/PROVIDERS']) {
      const r = await alice.get(p);
      assert.equal(r.status, 404, p);
      assert.deepEqual(r.body, { success: false, message: 'Not found' });
      assertCommonHeaders(r);
    }
  });

  test('Paths are matched segment by segment: empty segments, near-miss names, prefixes and extra slashes', async () => {
    const s = (await alice.post('/api/v1/chat-sessions', newSession())).body.data;
    const cases = [
      ['//api/v1/providers', 404, 'Not found'],
      ['/api//v1/providers', 404, 'Not found'],
      ['/api/v1/providersX', 404, 'Not found'],
      ['/api/v1/provider', 404, 'Not found'],
      ['/api/v1/providers//', 400, 'Invalid provider ID'], // one trailing slash is dropped, the other leaves an empty provider id
      [`/api/v1/chat-sessions/${s._id}/turnsX`, 404, 'Not found'],
      [`/api/v1/chat-sessions/${s._id}/turns//`, 400, 'Turn ID is required'], // one slash dropped, the other leaves an empty :turnId (GET of one turn)
      [`/api/v1/chat-sessions/${s._id}//`, 404, 'Not found'],
      ['/api/v1/chat-sessions//', 400, 'Session ID is required'], // an empty :id is a blank id
      [`/api/v1/chat-sessions/${s._id}`, 200, undefined],
      [`/api/v1/chat-sessions/${s._id}/`, 200, undefined],
      [`/api/v1/chat-sessions/${s._id}/turns`, 200, undefined],
      ['/healthz', 200, undefined],
    ];
    const { hostname, port } = new URL(server.url);
    for (const [p, status, message] of cases) {
      // node:http sends the path as given (a URL would read "//api" as a host)
      const r = await new Promise((resolve, reject) => {
        http
          .get({ hostname, port, path: p, headers: { authorization: `Bearer ${alice.token}` } }, (res) => {
            let text = '';
            res.setEncoding('utf8');
            res.on('data', (d) => (text += d));
            res.on('end', () => resolve({ status: res.statusCode, body: JSON.parse(text) }));
          })
          .on('error', reject);
      });
      assert.equal(r.status, status, p);
      if (message !== undefined) assert.equal(r.body.message, message, p);
    }
  });

  test('Known path, wrong method: 405 Method not allowed with Allow', async () => {
    const cases = [
      ['PATCH', '/api/v1/chat-sessions', 'GET, POST, HEAD'],
      ['DELETE', '/api/v1/chat-sessions', 'GET, POST, HEAD'],
      ['POST', '/api/v1/chat-sessions/0123456789abcdef01234567', 'GET, PUT, DELETE, HEAD'],
      ['PUT', '/api/v1/chat-sessions/0123456789abcdef01234567/turns', 'GET, POST, HEAD'],
      ['POST', '/api/v1/providers', 'GET, HEAD'],
      ['DELETE', '/api/v1/providers/0123456789abcdef01234567', 'GET, HEAD'],
      ['POST', '/healthz', 'GET, HEAD'],
    ];
    for (const [m, p, allow] of cases) {
      const r = await server.request(m, p, { token: alice.token });
      assert.equal(r.status, 405, `${m} ${p}`);
      assert.deepEqual(r.body, { success: false, message: 'Method not allowed' });
      assert.equal(r.headers.allow, allow);
      assertCommonHeaders(r);
    }
  });

  test('A trailing slash is tolerated', async () => {
    const s = (await alice.post('/api/v1/chat-sessions/', newSession())).body.data;
    assert.ok(s);
    assert.equal((await alice.get('/api/v1/chat-sessions/')).status, 200);
    assert.equal((await alice.get(`/api/v1/chat-sessions/${s._id}/`)).body.data._id, s._id);
    assert.equal((await alice.get(`/api/v1/chat-sessions/${s._id}/turns/`)).status, 200);
    assert.equal((await alice.get('/api/v1/providers/')).status, 200);
    assert.equal((await server.request('GET', '/healthz/')).status, 200);
  });

  test('HEAD is answered like GET without a body', async () => {
    const r = await server.request('HEAD', '/healthz');
    assert.equal(r.status, 200);
    assert.equal(r.text, '');
    assertCommonHeaders(r);
  });

  test('Bodies: non-empty bodies need Content-Type: application/json (415 otherwise)', async () => {
    for (const type of [undefined, 'text/plain', 'application/x-www-form-urlencoded', 'application/jsonx', 'application/json; charset=latin1']) {
      const headers = type === undefined ? {} : { 'content-type': type };
      const r = await alice.post('/api/v1/chat-sessions', undefined, { body: JSON.stringify(newSession()), headers });
      assert.equal(r.status, 415, String(type));
      assert.deepEqual(r.body, { success: false, message: 'Content-Type must be application/json' });
      assertCommonHeaders(r);
    }
    for (const type of ['application/json', 'Application/JSON; charset=UTF-8', 'application/json;charset="utf-8"']) {
      const r = await alice.post('/api/v1/chat-sessions', undefined, { body: JSON.stringify(newSession()), headers: { 'content-type': type } });
      assert.equal(r.status, 201, type);
    }
    await stillServing();
  });

  test('Bodies: malformed JSON -> 400 Invalid JSON body', async () => {
    for (const body of ['{', '{"projectId":}', "{'a':1}", '{"a":1}x', 'nul', '   ', '\u0000']) {
      const r = await alice.post('/api/v1/chat-sessions', undefined, { body, headers: { 'content-type': 'application/json' } });
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.deepEqual(r.body, { success: false, message: 'Invalid JSON body' });
    }
  });

  test('Bodies: invalid UTF-8 -> 400 Invalid JSON body', async () => {
    const bad = Buffer.concat([Buffer.from('{"projectId":"'), Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from('","providerId":"p","selectedModel":"m"}')]);
    const r = await alice.post('/api/v1/chat-sessions', undefined, { body: bad, headers: { 'content-type': 'application/json' } });
    assert.equal(r.status, 400);
    assert.deepEqual(r.body, { success: false, message: 'Invalid JSON body' });
  });

  test('Bodies: a body that is not a JSON object -> 400 Request body must be a JSON object', async () => {
    for (const body of ['[]', '[{"projectId":"p"}]', '"text"', '42', 'true', 'null']) {
      const r = await alice.post('/api/v1/chat-sessions', undefined, { body, headers: { 'content-type': 'application/json' } });
      assert.equal(r.status, 400, body);
      assert.deepEqual(r.body, { success: false, message: 'Request body must be a JSON object' });
    }
  });

  test('Bodies: too large -> 413 Request body too large (declared length, and chunked without one)', async () => {
    const big = JSON.stringify({ ...newSession(), name: 'x'.repeat(70 * 1024) });
    const r = await alice.post('/api/v1/chat-sessions', undefined, { body: big, headers: { 'content-type': 'application/json' }, keepAlive: false });
    assert.equal(r.status, 413);
    assert.deepEqual(r.body, { success: false, message: 'Request body too large' });
    assertCommonHeaders(r);
    const chunked = await raw(
      `POST /api/v1/chat-sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${alice.token}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n` +
        `${(70 * 1024).toString(16)}\r\n${'x'.repeat(70 * 1024)}\r\n0\r\n\r\n`,
    );
    assert.match(chunked, /^HTTP\/1\.1 413 /);
    assert.match(chunked, /\{"success":false,"message":"Request body too large"\}/);
    await stillServing();
  });

  test('Bodies: an empty body is an empty object (create then says projectId is required)', async () => {
    const r = await alice.post('/api/v1/chat-sessions', undefined, { headers: { 'content-length': '0' } });
    assert.equal(r.status, 400);
    assert.equal(r.body.message, 'projectId is required');
  });

  test('Every response is JSON with Content-Type, Cache-Control: no-store, X-Content-Type-Options: nosniff and X-Request-Id', async () => {
    const responses = [
      await server.request('GET', '/healthz'),
      await alice.get('/api/v1/chat-sessions'),
      await alice.post('/api/v1/chat-sessions', newSession()),
      await alice.post('/api/v1/chat-sessions', {}),
      await server.request('GET', '/api/v1/chat-sessions'),
      await alice.get('/api/v1/providers'),
      await alice.get('/api/v1/providers/zz'),
      await alice.get('/nope'),
    ];
    for (const r of responses) {
      assertCommonHeaders(r);
      assert.equal(typeof JSON.parse(r.text).success, 'boolean');
    }
  });

  test('X-Request-Id: the client\'s, when it sent a sane one; otherwise one is made', async () => {
    const mine = await server.request('GET', '/healthz', { headers: { 'x-request-id': 'trace-abc_123.4:5' } });
    assert.equal(mine.headers['x-request-id'], 'trace-abc_123.4:5');
    for (const insane of ['has space', 'x'.repeat(300), 'quote"d', 'ünï']) {
      const r = await server.request('GET', '/healthz', { headers: { 'x-request-id': encodeURI(insane) === insane ? insane : insane } }).catch(() => undefined);
      if (r === undefined) continue; // the client library refused the header itself
      assert.notEqual(r.headers['x-request-id'], insane);
      assert.match(r.headers['x-request-id'], /^[0-9a-f]{8}-[0-9a-z]+$/);
    }
    const a = await server.request('GET', '/healthz');
    const b = await server.request('GET', '/healthz');
    assert.notEqual(a.headers['x-request-id'], b.headers['x-request-id']);
  });

  test('X-Request-Id and Authorization are read as node:http reads them: any case; repeats as node:http takes them', async () => {
    const s = (await alice.post('/api/v1/chat-sessions', newSession())).body.data;
    const get = (lines) => raw(`GET /api/v1/chat-sessions/${s._id} HTTP/1.1\r\nHost: x\r\n${lines.join('\r\n')}\r\nConnection: close\r\n\r\n`);
    const upper = await get([`AUTHORIZATION: Bearer ${alice.token}`, 'X-REQUEST-ID: upper-1']);
    assert.match(upper, /^HTTP\/1\.1 200 /);
    assert.match(upper, /\r\nx-request-id: upper-1\r\n/);
    const twice = await get([`Authorization: Bearer ${alice.token}`, 'X-Request-Id: first', 'x-request-id: second']);
    assert.match(twice, /^HTTP\/1\.1 200 /);
    assert.match(twice, /\r\nx-request-id: [0-9a-f]{8}-[0-9a-z]+\r\n/, 'two ids make "first, second", which is not a sane id');
    const authFirst = await get([`Authorization: Bearer ${alice.token}`, 'Authorization: Bearer not-a-token']);
    assert.match(authFirst, /^HTTP\/1\.1 200 /, 'the first Authorization line counts');
    const badFirst = await get(['Authorization: Bearer not-a-token', `Authorization: Bearer ${alice.token}`]);
    assert.match(badFirst, /^HTTP\/1\.1 401 /);
    const none = await get(['X-Authorization: nothing']);
    assert.match(none, /^HTTP\/1\.1 401 /);
  });

  test('GET /healthz (no auth) -> 200 {success: true, data: {status: "ok"}}', async () => {
    const r = await server.request('GET', '/healthz');
    assert.equal(r.status, 200);
    assert.equal(r.body.success, true);
    assert.equal(r.body.data.status, 'ok');
  });

  test('GET /api/v1/openapi.json (no auth) -> an OpenAPI 3.1 document', async () => {
    const r = await server.request('GET', '/api/v1/openapi.json');
    assert.equal(r.status, 200);
    assert.equal(r.body.openapi, '3.1.0');
    for (const p of ['/api/v1/chat-sessions', '/api/v1/chat-sessions/{id}', '/api/v1/chat-sessions/{id}/turns', '/api/v1/providers', '/api/v1/providers/{id}', '/healthz']) {
      assert.ok(r.body.paths[p], p);
    }
  });

  test('One JSON log line per request: time, level, request id, method, route, status, duration, user', async () => {
    const id = `log-check-${Date.now()}`;
    await alice.get('/api/v1/chat-sessions?projectId=secret-looking', { headers: { 'x-request-id': id } });
    // the line is written after the answer: wait for it, not for a guess at how long it takes
    await waitFor(() => server.logs().some((l) => l.reqId === id), 'the request\'s log line', 20_000);
    const lines = server.logs().filter((l) => l.reqId === id);
    assert.equal(lines.length, 1);
    const l = lines[0];
    assert.match(l.time, /^\d{4}-\d{2}-\d{2}T/);
    assert.equal(l.level, 'info');
    assert.equal(l.method, 'GET');
    assert.equal(l.route, '/api/v1/chat-sessions');
    assert.equal(l.status, 200);
    assert.equal(typeof l.ms, 'number');
    assert.equal(l.user, 'alice');
  });

  test('Request log lines carry the route pattern, not the raw id-bearing path', async () => {
    const s = (await alice.post('/api/v1/chat-sessions', newSession())).body.data;
    const id = `pattern-${Date.now()}`;
    await alice.get(`/api/v1/chat-sessions/${s._id}`, { headers: { 'x-request-id': id } });
    await waitFor(() => server.logs().some((x) => x.reqId === id), 'the request\'s log line', 20_000);
    const l = server.logs().find((x) => x.reqId === id);
    assert.equal(l.route, '/api/v1/chat-sessions/:id');
    assert.equal(JSON.stringify(l).includes(s._id), false);
  });
});

describe('Malformed requests: a 4xx envelope, and the server stays up', () => {
  test('wrong types, nulls, blanks and overlong values in a create body', async () => {
    const cases = [
      [{ ...newSession(), projectId: 5 }, 'projectId must be a string'],
      [{ ...newSession(), projectId: null }, 'projectId is required'],
      [{ ...newSession(), projectId: '   ' }, 'projectId is required'],
      [{ ...newSession(), providerId: {} }, 'providerId must be a string'],
      [{ ...newSession(), selectedModel: [] }, 'selectedModel must be a string'],
      [{ ...newSession(), selectedModel: true }, 'selectedModel must be a string'],
      [{ ...newSession(), mode: 3 }, 'mode must be a string'],
      [{ ...newSession(), mode: 'build' }, 'mode must be one of: Build, Plan, Ask'],
      [{ ...newSession(), name: 7 }, 'name must be a string'],
      [{ ...newSession(), projectId: 'p'.repeat(201) }, 'projectId must be at most 200 characters'],
      [{ ...newSession(), name: 'n'.repeat(501) }, 'name must be at most 500 characters'],
    ];
    for (const [body, message] of cases) {
      const r = await alice.post('/api/v1/chat-sessions', body);
      assert.equal(r.status, 400, message);
      assert.deepEqual(r.body, { success: false, message });
    }
    await stillServing();
  });

  test('deeply nested JSON, huge numbers, prototype keys', async () => {
    const deep = '['.repeat(30_000) + ']'.repeat(30_000);
    let r = await alice.post('/api/v1/chat-sessions', undefined, { body: deep, headers: { 'content-type': 'application/json' } });
    assert.equal(r.status, 400);
    const deepObj = `{"projectId":"p","providerId":"q","selectedModel":"m","x":${'{"a":'.repeat(9_000)}1${'}'.repeat(9_000)}}`;
    r = await alice.post('/api/v1/chat-sessions', undefined, { body: deepObj, headers: { 'content-type': 'application/json' } });
    assert.equal(r.status, 201, 'unknown deep fields are ignored');
    r = await alice.post('/api/v1/chat-sessions', undefined, {
      body: '{"__proto__":{"projectId":"polluted"},"constructor":{"prototype":{"x":1}},"providerId":"q","selectedModel":"m"}',
      headers: { 'content-type': 'application/json' },
    });
    assert.equal(r.status, 400);
    assert.equal(r.body.message, 'projectId is required');
    r = await alice.post('/api/v1/chat-sessions', { ...newSession(), projectId: 1e400 });
    assert.equal(r.status, 400);
    await stillServing();
  });

  test('deeply nested turn metadata gets 400, not a stack overflow', async () => {
    const s = (await alice.post('/api/v1/chat-sessions', newSession())).body.data;
    for (const depth of [33, 5_000, 25_000]) {
      const body = `{"role":"user","content":"x","metadata":{"a":${'['.repeat(depth)}${']'.repeat(depth)}}}`;
      const r = await alice.post(`/api/v1/chat-sessions/${s._id}/turns`, undefined, { body, headers: { 'content-type': 'application/json' } });
      assert.equal(r.status, 400, String(depth));
      assert.equal(r.body.message, 'metadata must be nested at most 32 levels deep');
    }
    const ok = `{"role":"user","content":"x","metadata":{"a":${'['.repeat(30)}${']'.repeat(30)}}}`;
    assert.equal((await alice.post(`/api/v1/chat-sessions/${s._id}/turns`, undefined, { body: ok, headers: { 'content-type': 'application/json' } })).status, 201);
    await stillServing();
  });

  test('bad percent-encoding in the path or the query', async () => {
    let r = await alice.get('/api/v1/chat-sessions/%E0%A4%A');
    assert.equal(r.status, 400);
    assert.equal(r.body.success, false);
    r = await alice.get('/api/v1/chat-sessions?projectId=%ZZ');
    assert.equal(r.status, 400);
    assert.equal(r.body.message, 'Invalid query string');
    r = await alice.get('/api/v1/chat-sessions?projectId=a&projectId=b');
    assert.equal(r.status, 400);
    assert.equal(r.body.message, 'projectId must be given at most once');
    await stillServing();
  });

  test('garbage bytes, bad request lines and oversized headers get an HTTP 4xx, not a hang or a crash', async () => {
    const answers = [
      await raw('GARBAGE\r\n\r\n'),
      await raw('GET / HTTP/9.9\r\n\r\n'),
      await raw('GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n'),
      await raw('POST /api/v1/chat-sessions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n'),
      await raw(`GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`),
      await raw('\x00\x01\x02\x03\r\n\r\n'),
    ];
    for (const a of answers) {
      assert.match(a, /^HTTP\/1\.1 4\d\d /, JSON.stringify(a.slice(0, 80)));
      assert.match(a, /\r\nx-request-id: [0-9a-f]{8}-[0-9a-z]+\r\n/, 'every response has an X-Request-Id, these too');
      assert.match(a, /\r\ncache-control: no-store\r\n/);
      assert.match(a, /"success":false/);
    }
    assert.match(answers[4], /^HTTP\/1\.1 431 /);
    // log lines are written every 20 ms or so: wait for it (generously), never for a fixed time
    const logged = () => server.logs().some((l) => l.msg === 'request' && l.parseError === 'HPE_HEADER_OVERFLOW' && l.status === 431);
    for (let waited = 0; !logged() && waited < 10_000; waited += 20) await new Promise((r) => setTimeout(r, 20));
    assert.ok(logged(), 'logged like any answer');
    await stillServing();
  });

  test('[D-http-4] a header value with a line break gets a 400 naming the header, never the value; else Bad request', async () => {
    const cases = [
      ['GET /healthz HTTP/1.1\r\nHost: x\r\nX-Request-Id: a\nb\r\n\r\n', 'Bad request: the X-Request-Id header holds a line break'], // what curl sends for -H "X: $(printf 'a\nb')"
      ['GET /healthz HTTP/1.1\r\nHost: x\r\nX-Trace: a\r\nb\r\n\r\n', 'Bad request: the X-Trace header holds a line break'],
      ['GET /healthz HTTP/1.1\r\nHost: x\r\nX-Fold: a\r\n b\r\n\r\n', 'Bad request: the X-Fold header holds a line break'],
      ['GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sekrit-token\nmore-sekrit\r\n\r\n', 'Bad request: the Authorization header holds a line break'],
      ['GET /healthz HTTP/1.1\r\nHost: x\r\nBad Name: x\r\n\r\n', 'Bad request'],
      ['GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: 1\nX-B: 2\r\n\r\n', 'Bad request'],
      ['GET /healthz HTTP/1.1\nHost: x\n\n', 'Bad request'],
    ];
    for (const [bytes, message] of cases) {
      const a = await raw(bytes);
      assert.match(a, /^HTTP\/1\.1 400 /, JSON.stringify(bytes));
      assert.deepEqual(JSON.parse(a.slice(a.indexOf('\r\n\r\n') + 4)), { success: false, message }, JSON.stringify(bytes));
      assert.ok(!a.includes('sekrit'), 'a header value is never echoed');
    }
    await stillServing();
  });

  test('[D-http-5] absolute-form request targets (GET http://host/path) are served like their path', async () => {
    const a = await raw(`GET http://127.0.0.1:${server.port}/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`);
    assert.match(a, /^HTTP\/1\.1 200 /);
    const b = await raw(`GET http://127.0.0.1:${server.port}/api/v1/providers?x=1 HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${alice.token}\r\nConnection: close\r\n\r\n`);
    assert.match(b, /^HTTP\/1\.1 200 /);
    const c = await raw(`GET http://127.0.0.1:${server.port} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`);
    assert.match(c, /^HTTP\/1\.1 404 /, 'the root path, which is no route');
  });

  test('a client that sends half a body and hangs up does not hurt the server', async () => {
    await raw(`POST /api/v1/chat-sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${alice.token}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"projectId":`, { waitMs: 100 });
    await stillServing();
  });

  test('pipelined requests on one connection are all answered in order', async () => {
    const req = 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n';
    const out = await raw(req + req + req.replace('/healthz', '/nope') + 'GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    const statuses = [...out.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => m[1]);
    assert.deepEqual(statuses, ['200', '200', '404', '200']);
  });
});
