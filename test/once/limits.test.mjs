// docs/DECISIONS.md, Limits: what bounds the connections, request bodies and unsent answers a
// client can make the server hold, and HTTP that node:http would answer bare or not at all.
// Limits are set small so each case is quick; every wait is for a condition, with a generous bound.
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { createRequire } from 'node:module';
import { EventEmitter } from 'node:events';
import { metric, waitFor } from '../api-kit.mjs';
import { newSession, refusesToStart, removeDir, runCli, startServer, tokenFor } from '../helpers.mjs';

const { ConnectionGuard, HEADROOM } = createRequire(import.meta.url)('../../dist/testkit.cjs');

/** A raw TCP client: what it received, and whether and when the server closed it. */
async function raw(port) {
  const socket = connect(port, '127.0.0.1');
  await new Promise((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  const c = { socket, chunks: [], bytes: 0, closed: false };
  socket.on('data', (d) => {
    c.chunks.push(d);
    c.bytes += d.length;
  });
  socket.on('error', () => {});
  c.done = new Promise((resolve) => socket.on('close', () => resolve((c.closed = true))));
  c.text = () => Buffer.concat(c.chunks).toString('latin1');
  return c;
}

/** The status line, headers and JSON body of one raw answer. */
function parseAnswer(text) {
  const end = text.indexOf('\r\n\r\n');
  assert.ok(end > 0, `an HTTP answer, got ${JSON.stringify(text.slice(0, 200))}`);
  const [statusLine, ...lines] = text.slice(0, end).split('\r\n');
  const headers = {};
  for (const l of lines) {
    const i = l.indexOf(':');
    headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
  }
  const bodyText = text.slice(end + 4);
  return { status: Number(statusLine.split(' ')[1]), headers, body: bodyText === '' ? undefined : JSON.parse(bodyText) };
}

/** A session whose turn list is about 16 MiB: more than loopback socket buffers hold. */
async function bigTurns(s) {
  const u = s.as('alice');
  const id = (await u.post('/api/v1/chat-sessions', newSession())).body.data._id;
  const content = 'z'.repeat(1024 * 1024);
  for (let i = 0; i < 16; i++) assert.equal((await u.post(`/api/v1/chat-sessions/${id}/turns`, { role: 'user', content })).status, 201);
  return { id, token: u.token };
}

/** Asks for the big turn list on a raw connection (as its owner, or with `token`) and does not read the answer. */
async function unreadTurns(s, big, reqId, token = big.token) {
  const c = await raw(s.port);
  c.socket.pause();
  c.socket.write(`GET /api/v1/chat-sessions/${big.id}/turns HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\nX-Request-Id: ${reqId}\r\n\r\n`);
  return c;
}

/**
 * The body of a raw HTTP/1.1 answer (latin1 text), by Content-Length or chunked, and whether it
 * arrived whole (a streamed answer cut off lacks its last, empty chunk).
 */
function bodyOf(text) {
  const head = text.indexOf('\r\n\r\n');
  const rest = text.slice(head + 4);
  const length = /\r\ncontent-length: (\d+)/i.exec(text.slice(0, head));
  if (length !== null) return { body: rest.slice(0, Number(length[1])), complete: rest.length >= Number(length[1]) };
  let body = '';
  let at = 0;
  for (;;) {
    const eol = rest.indexOf('\r\n', at);
    if (eol === -1) return { body, complete: false };
    const size = parseInt(rest.slice(at, eol), 16);
    if (size === 0) return { body, complete: true };
    if (rest.length < eol + 2 + size + 2) return { body: body + rest.slice(eol + 2), complete: false };
    body += rest.slice(eol + 2, eol + 2 + size);
    at = eol + 2 + size + 2;
  }
}

const CREATE = (token, length) =>
  `POST /api/v1/chat-sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\n\r\n`;

describe('Connections (MAX_CONNECTIONS)', () => {
  test('[D-limits-1] at the cap a new connection closes an idle one: /healthz answers under a flood of idle ones', async () => {
    const s = await startServer({ env: { MAX_CONNECTIONS: '20' } });
    const clients = [];
    try {
      // the first five have had an answer and wait on keep-alive; the rest never sent a byte
      for (let i = 0; i < 40; i++) {
        const c = await raw(s.port);
        if (i < 5) {
          c.socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
          await waitFor(() => c.text().includes('"status":"ok"'), 'a keep-alive answer');
        }
        clients.push(c);
      }
      await waitFor(() => clients.slice(0, 20).every((c) => c.closed), 'the 20 oldest connections to be closed', 10_000);
      assert.deepEqual(
        clients.map((c) => c.closed),
        clients.map((_, i) => i < 20),
        'exactly the oldest 20 were closed',
      );
      const health = await s.request('GET', '/healthz', { keepAlive: false });
      assert.equal(health.status, 200);
      assert.ok((await metric(s, 'chat_session_api_connections')) <= 20);
      assert.ok((await metric(s, 'chat_session_api_connections_evicted_total')) >= 20);
      assert.ok(s.logs().some((l) => l.level === 'warn' && /MAX_CONNECTIONS reached/.test(l.msg)));
    } finally {
      for (const c of clients) c.socket.destroy();
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('[D-limits-2] with every connection busy, /healthz and /metrics answer on a few more; other routes get 503', async () => {
    const s = await startServer({ env: { MAX_CONNECTIONS: '4', BODY_LIMIT: '2mb', FSYNC: 'off' } });
    const clients = [];
    try {
      // four answers too large for the socket buffers, which their clients (four users: one may
      // hold only its share) do not read: four requests in flight
      const big = await bigTurns(s);
      for (let i = 0; i < 4; i++) {
        // each takes the head of its answer (so it is under way), then stops reading
        const c = await unreadTurns(s, big, `busy-${i}`, tokenFor(`reader-${i}`));
        c.socket.once('data', () => c.socket.pause());
        c.socket.resume();
        await waitFor(() => c.text().startsWith('HTTP/1.1 200'), 'an answer under way');
        clients.push(c);
      }
      const health = await s.request('GET', '/healthz', { keepAlive: false });
      assert.equal(health.status, 200);
      assert.equal(health.headers.connection, 'close');
      const busy = await s.as('bob').post('/api/v1/chat-sessions', newSession(), { keepAlive: false });
      assert.equal(busy.status, 503);
      assert.deepEqual(busy.body, { success: false, message: 'Server is busy' });
      assert.equal(busy.headers['retry-after'], '1');
      assert.ok(busy.headers['x-request-id']);
      assert.ok(clients.every((c) => !c.closed), 'the busy connections were left alone');
    } finally {
      for (const c of clients) c.socket.destroy();
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('[D-limits-2] past the cap and its headroom a newcomer is refused, and nothing is closed for it', () => {
    const refused = [];
    let evicted = 0;
    const guard = new ConnectionGuard(2, { refuse: (sock) => refused.push(sock), evicted: () => evicted++ });
    const socket = () => Object.assign(new EventEmitter(), { destroyed: false, destroy() { this.destroyed = true; this.emit('close'); } });
    const all = [];
    for (let i = 0; i < 2 + HEADROOM; i++) {
      const sock = socket();
      guard.onConnection(sock);
      guard.busy(guard.of(sock)); // a request in flight on each
      all.push(sock);
    }
    assert.equal(guard.count, 2 + HEADROOM);
    assert.deepEqual(all.map((s) => guard.of(s).overflow), all.map((_, i) => i >= 2));
    const late = socket();
    guard.onConnection(late);
    assert.deepEqual(refused, [late]);
    assert.equal(guard.of(late), undefined);
    assert.equal(evicted, 0);
    assert.ok(all.every((s) => !s.destroyed));
    // once one is idle again, the next newcomer closes it and takes its place
    guard.idle(guard.of(all[0]));
    const next = socket();
    guard.onConnection(next);
    assert.ok(all[0].destroyed);
    assert.equal(evicted, 1);
    assert.equal(guard.of(next).overflow, false);
    assert.equal(guard.count, 2 + HEADROOM);
  });
});

describe('Request bodies (BODY_MEMORY, BODY_TIMEOUT)', () => {
  test('[D-limits-6] bodies hold BODY_MEMORY at most, counted as they arrive; a chunk past it gets 503 and a close', async () => {
    const s = await startServer({ env: { BODY_MEMORY: '75000', BODY_LIMIT: '48kb' } });
    const token = tokenFor('alice');
    const head = JSON.stringify(newSession({ pad: 'x'.repeat(39_000) }));
    const stalled = [];
    try {
      // two users, since one may hold only its share (a quarter of BODY_MEMORY, at least BODY_LIMIT)
      for (let i = 0; i < 2; i++) {
        const c = await raw(s.port);
        c.socket.write(CREATE(tokenFor(`uploader-${i}`), head.length) + head.slice(0, 35_000));
        stalled.push(c);
      }
      await waitFor(async () => (await metric(s, 'chat_session_api_request_body_bytes')) === 70_000, '70000 body bytes held');
      const body = JSON.stringify(newSession({ pad: 'y'.repeat(10_000) }));
      const c = await raw(s.port);
      c.socket.write(CREATE(token, body.length) + body);
      await waitFor(() => c.closed, 'the refused connection to close');
      const a = parseAnswer(c.text());
      assert.equal(a.status, 503);
      assert.deepEqual(a.body, { success: false, message: 'Server is busy' });
      assert.equal(a.headers['retry-after'], '1');
      assert.equal(a.headers.connection, 'close');
      const line = await waitFor(() => s.logs().find((l) => l.msg === 'request' && l.reqId === a.headers['x-request-id']), 'its log line');
      assert.equal(line.status, 503);
      assert.equal(line.route, '/api/v1/chat-sessions');
      // the rest of one held body arrives: it is served and its bytes are given back
      stalled[0].socket.write(head.slice(35_000));
      await waitFor(() => stalled[0].text().includes('\r\n\r\n{'), 'the completed body to be answered');
      assert.equal(parseAnswer(stalled[0].text()).status, 201);
      await waitFor(async () => (await metric(s, 'chat_session_api_request_body_bytes')) === 35_000, 'its bytes given back');
      assert.equal((await s.request('POST', '/api/v1/chat-sessions', { token, body, headers: { 'content-type': 'application/json' } })).status, 201);
    } finally {
      for (const c of stalled) c.socket.destroy();
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('[D-limits-7] a body not in within BODY_TIMEOUT gets 408 in the envelope, logged, and the connection closes', async () => {
    const s = await startServer({ env: { BODY_TIMEOUT: '300ms' } });
    try {
      const c = await raw(s.port);
      c.socket.write(CREATE(tokenFor('alice'), 100) + '{"name":');
      await waitFor(() => c.closed, 'the connection to be closed', 20_000);
      const a = parseAnswer(c.text());
      assert.equal(a.status, 408);
      assert.deepEqual(a.body, { success: false, message: 'Request timeout' });
      const line = await waitFor(() => s.logs().find((l) => l.msg === 'request' && l.reqId === a.headers['x-request-id']), 'its log line');
      assert.equal(line.route, '/api/v1/chat-sessions');
      assert.equal(line.user, 'alice');
      assert.equal(await metric(s, 'chat_session_api_request_body_bytes'), 0);
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('BODY_MEMORY smaller than BODY_LIMIT stops the start naming both', async () => {
    await assert.rejects(startServer({ env: { BODY_MEMORY: '1kb', BODY_LIMIT: '2kb' } }), /BODY_MEMORY must be at least BODY_LIMIT/);
  });
});

describe('Slow readers (WRITE_TIMEOUT)', () => {
  test('[D-limits-8] an answer not read for WRITE_TIMEOUT is cut off, and the warning names the request id', async () => {
    const s = await startServer({ env: { WRITE_TIMEOUT: '1s', BODY_LIMIT: '2mb', FSYNC: 'off' } });
    try {
      const c = await unreadTurns(s, await bigTurns(s), 'slow-reader-1');
      const warn = await waitFor(() => s.logs().find((l) => l.level === 'warn' && l.reqId === 'slow-reader-1'), 'the write-timeout warning', 30_000);
      assert.match(warn.msg, /WRITE_TIMEOUT/);
      assert.ok(warn.unsentBytes > 0);
      c.socket.resume();
      await waitFor(() => c.closed, 'the connection to be closed', 30_000);
      const answer = bodyOf(c.text());
      assert.equal(answer.complete, false, `got ${answer.body.length} bytes of a list of 16 MiB: the answer was cut off`);
      assert.ok(answer.body.length < 16 * 1024 * 1024);
      assert.equal(await metric(s, 'chat_session_api_write_timeouts_total'), 1);
      assert.equal((await s.request('GET', '/healthz')).status, 200);
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('[D-limits-8] the time counts from the last byte the kernel took: a slow but steady reader is never cut', async () => {
    const s = await startServer({ env: { WRITE_TIMEOUT: '3s', BODY_LIMIT: '2mb', FSYNC: 'off' } });
    try {
      const { id, token } = await bigTurns(s);
      const c = await raw(s.port);
      c.socket.pause();
      c.socket.write(`GET /api/v1/chat-sessions/${id}/turns HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\nConnection: close\r\n\r\n`);
      // take 1 MiB, pause 300 ms (a tenth of the timeout), again, until the end: 16 pauses or more
      let target = 0;
      c.socket.on('data', () => {
        if (c.bytes >= target) c.socket.pause();
      });
      const started = Date.now();
      while (!c.closed) {
        target = c.bytes + 1024 * 1024;
        c.socket.resume();
        await waitFor(() => c.socket.isPaused() || c.closed, 'the next MiB', 30_000);
        await new Promise((r) => setTimeout(r, 300));
      }
      const answer = bodyOf(c.text());
      assert.ok(answer.complete, 'the whole answer arrived');
      assert.equal(JSON.parse(answer.body).data.length, 16);
      assert.ok(Date.now() - started > 3_000, 'reading took longer than WRITE_TIMEOUT');
      assert.ok(!s.logs().some((l) => /WRITE_TIMEOUT/.test(l.msg ?? '')));
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });
});

describe('HTTP node:http would answer bare', () => {
  test('[D-http-7] Expect other than 100-continue gets 417 in the envelope, logged and counted; the connection closes', async () => {
    const s = await startServer();
    try {
      const c = await raw(s.port);
      c.socket.write(`POST /api/v1/chat-sessions HTTP/1.1\r\nHost: x\r\nExpect: foo\r\nX-Request-Id: expect-1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}`);
      await waitFor(() => c.closed, 'the connection to be closed');
      const a = parseAnswer(c.text());
      assert.equal(a.status, 417);
      assert.deepEqual(a.body, { success: false, message: 'Expectation failed' });
      assert.equal(a.headers['x-request-id'], 'expect-1');
      assert.equal(a.headers['content-type'], 'application/json; charset=utf-8');
      const line = await waitFor(() => s.logs().find((l) => l.msg === 'request' && l.reqId === 'expect-1'), 'its log line');
      assert.equal(line.status, 417);
      assert.match((await s.request('GET', '/metrics')).text, /status="417"\} 1/);
      // 100-continue is still met
      const ok = await s.as('alice').post('/api/v1/chat-sessions', newSession(), { headers: { expect: '100-continue' } });
      assert.equal(ok.status, 201);
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('[D-http-8] CONNECT gets 405 with an empty Allow in the envelope, logged and counted; the connection closes', async () => {
    const s = await startServer();
    try {
      const c = await raw(s.port);
      c.socket.write('CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nX-Request-Id: connect-1\r\n\r\n');
      await waitFor(() => c.closed, 'the connection to be closed');
      const a = parseAnswer(c.text());
      assert.equal(a.status, 405);
      assert.deepEqual(a.body, { success: false, message: 'Method not allowed' });
      assert.equal(a.headers['x-request-id'], 'connect-1');
      assert.equal(a.headers.allow, '');
      const line = await waitFor(() => s.logs().find((l) => l.msg === 'request' && l.reqId === 'connect-1'), 'its log line');
      assert.equal(line.status, 405);
      assert.equal(line.method, 'CONNECT');
      assert.match((await s.request('GET', '/metrics')).text, /method="other",route="\(unmatched\)",status="405"\} 1/);
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });
});

describe('Settings that bound memory and connections', () => {
  test('--help lists MAX_CONNECTIONS, BODY_MEMORY, BODY_TIMEOUT and WRITE_TIMEOUT with their defaults', () => {
    const r = runCli(['--help']);
    assert.equal(r.code, 0);
    assert.match(r.stdout, /MAX_CONNECTIONS \/ --max-connections .*\[default: 1000\]/);
    assert.match(r.stdout, /BODY_MEMORY \/ --body-memory .*\[default: 64mb\]/);
    assert.match(r.stdout, /BODY_TIMEOUT \/ --body-timeout .*\[default: 15s\]/);
    assert.match(r.stdout, /WRITE_TIMEOUT \/ --write-timeout .*\[default: 30s\]/);
  });

  test('a bad value stops the start with one line naming the setting', () => {
    const cases = [
      [{ MAX_CONNECTIONS: '0' }, /MAX_CONNECTIONS must be a whole number/],
      [{ MAX_CONNECTIONS: 'many' }, /MAX_CONNECTIONS/],
      [{ BODY_MEMORY: 'lots' }, /BODY_MEMORY/],
      [{ BODY_TIMEOUT: '15' }, /BODY_TIMEOUT must be a duration such as 500ms, 15s, 2m or 1h/],
      [{ WRITE_TIMEOUT: 'soon' }, /WRITE_TIMEOUT/],
    ];
    refusesToStart(cases);
  });
});

describe('Settings that bound replies (issue 42)', () => {
  test('[D-hostile-2] [D-hostile-5] [D-hostile-6] --help lists the settings of replies; a bad value stops the start', () => {
    const help = runCli(['--help']);
    assert.match(help.stdout, /INSTANCE_TIMEOUT \/ --instance-timeout .*STORE=postgres.*\[default: 10s\]/);
    assert.match(help.stdout, /REPLY_CONTEXT_MAX \/ --reply-context-max .*at least BODY_LIMIT.*\[default: 4mb\]/);
    assert.match(help.stdout, /REPLY_MAX_DURATION \/ --reply-max-duration .*whatever its provider sends.*\[default: 30m\]/);
    assert.match(help.stdout, /PROVIDER_IDLE_TIMEOUT \/ --provider-idle-timeout .*no progress.*\[default: 60s\]/);
    refusesToStart([
      [{ REPLY_MAX_DURATION: '30' }, /REPLY_MAX_DURATION must be a duration such as 500ms, 15s, 2m or 1h \(got "30"\)/],
      [{ REPLY_MAX_DURATION: '0s' }, /REPLY_MAX_DURATION must be a duration/],
      [{ REPLY_CONTEXT_MAX: 'all' }, /REPLY_CONTEXT_MAX must be a size such as 1mb, 512kb or 65536 \(got "all"\)/],
      [{ REPLY_CONTEXT_MAX: '512kb' }, /REPLY_CONTEXT_MAX must be at least BODY_LIMIT \(1048576 bytes\)/],
      [{ INSTANCE_TIMEOUT: 'soon' }, /INSTANCE_TIMEOUT must be a duration such as 500ms, 15s, 2m or 1h/],
      [{ INSTANCE_TIMEOUT: '500ms' }, /INSTANCE_TIMEOUT must be at least 1s \(got "500ms"\)/],
    ]);
  });
});

