// docs/DECISIONS.md, "Running it" and "HTTP": the decisions no other test pinned, each against
// the real server over HTTP or the real command line. On every engine.
import assert from 'node:assert/strict';
import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { waitFor } from '../api-kit.mjs';
import { ROOT, damageStore, newSession, removeDir, runCli, SECRET, startServer, tempDir, tokenFor } from '../helpers.mjs';

let server;
let token;
before(async () => {
  server = await startServer({ env: { BODY_LIMIT: '1kb' } });
  token = tokenFor('alice');
});
after(async () => {
  await server.stop();
  removeDir(server.dataDir);
});

/** Writes `bytes` on a new connection; resolves with what came back once the server closes it (or `closed: false` after `ms`). */
function raw(bytes, ms = 5_000) {
  return new Promise((resolve) => {
    const socket = connect(server.port, '127.0.0.1');
    let text = '';
    socket.setEncoding('latin1');
    socket.on('data', (d) => (text += d));
    socket.on('error', () => undefined);
    const timer = setTimeout(() => {
      socket.destroy();
      resolve({ text, closed: false });
    }, ms);
    socket.on('close', () => {
      clearTimeout(timer);
      resolve({ text, closed: true });
    });
    socket.write(bytes);
  });
}

describe('HTTP (docs/DECISIONS.md)', () => {
  test('[D-http-1] 404 and 405 come before authentication; 405 lists HEAD beside GET, and HEAD answers like GET, bodiless', async () => {
    for (const headers of [{}, { authorization: 'Bearer not-a-token' }]) {
      const unknown = await server.request('GET', '/api/v1/nothing-here', { headers });
      assert.deepEqual([unknown.status, unknown.body], [404, { success: false, message: 'Not found' }]);
      const wrong = await server.request('PATCH', '/api/v1/chat-sessions', { headers });
      assert.deepEqual([wrong.status, wrong.body, wrong.headers.allow], [405, { success: false, message: 'Method not allowed' }, 'GET, POST, HEAD']);
      assert.equal((await server.request('GET', '/api/v1/chat-sessions', { headers })).status, 401, 'a route that exists asks for the token');
    }
    const providers = await server.request('DELETE', '/api/v1/providers');
    assert.equal(providers.headers.allow, 'GET, HEAD');
    const get = await server.request('GET', '/api/v1/providers', { token });
    const head = await server.request('HEAD', '/api/v1/providers', { token });
    assert.deepEqual([head.status, head.text, head.headers['content-type']], [200, '', get.headers['content-type']]);
  });

  test('[D-http-2] bad percent-escapes, repeated parameters: 400; an empty value is absent, an unknown one ignored', async () => {
    const u = server.as('paths-and-queries');
    const mine = (await u.post('/api/v1/chat-sessions', newSession({ projectId: 'pq-project' }))).body.data;
    const cases = [
      ['/api/v1/chat-sessions/%E0%A4%A', 'Invalid percent-encoding in the path'],
      ['/api/v1/chat-sessions?projectId=%ZZ', 'Invalid query string'],
      ['/api/v1/chat-sessions?projectId=a&projectId=b', 'projectId must be given at most once'],
      ['/api/v1/chat-sessions?limit=2&limit=3', 'limit must be given at most once'],
    ];
    for (const [path, message] of cases) {
      const r = await u.get(path);
      assert.deepEqual([r.status, r.body], [400, { success: false, message }], path);
    }
    // ?projectId= is no project: the caller's own list, as without it; the same for an empty limit
    const own = (await u.get('/api/v1/chat-sessions')).body;
    assert.deepEqual(own.data.map((s) => s._id), [mine._id]);
    assert.deepEqual((await u.get('/api/v1/chat-sessions?projectId=')).body, own);
    assert.deepEqual((await u.get('/api/v1/chat-sessions?limit=')).body, own, 'limit= is no limit: the whole list, without nextCursor');
    assert.deepEqual((await u.get('/api/v1/chat-sessions?colour=blue&projectId=&sort=name')).body, own, 'unknown parameters are ignored');
  });

  test('[D-http-3] a 413 or 415 closes the connection instead of reading the rest of the body', async () => {
    // a body announced much larger than what is sent: the answer comes, and the connection closes without waiting for the rest
    const head = (type, length) => `POST /api/v1/chat-sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\nContent-Type: ${type}\r\nContent-Length: ${length}\r\n\r\n{"projectId":`;
    const unsupported = await raw(head('text/plain', 500));
    assert.equal(unsupported.closed, true, 'the connection is closed');
    assert.match(unsupported.text, /^HTTP\/1\.1 415 /);
    assert.match(unsupported.text, /\r\nconnection: close\r\n/i);
    assert.ok(unsupported.text.endsWith('{"success":false,"message":"Content-Type must be application/json"}'));
    const tooLarge = await raw(head('application/json', 100_000));
    assert.equal(tooLarge.closed, true, 'the connection is closed');
    assert.match(tooLarge.text, /^HTTP\/1\.1 413 /);
    assert.ok(tooLarge.text.endsWith('{"success":false,"message":"Request body too large"}'));
    assert.equal((await server.request('GET', '/healthz')).status, 200);
  });

  test('[D-http-8] an Upgrade header is ignored: the request is answered as HTTP/1.1 like any other', async () => {
    const r = await raw('GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, close\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n');
    assert.match(r.text, /^HTTP\/1\.1 200 OK\r\n/);
    assert.match(r.text, /\{"success":true,"data":\{"status":"ok"/);
  });

  test('[D-running-10] keep-alive says timeout=5; 15,000 bytes of headers pass, 17,000 get 431 in the envelope', async () => {
    const r = await raw('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n', 500);
    assert.match(r.text, /\r\nKeep-Alive: timeout=5\r\n/);
    const padded = (n) => `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: ${'a'.repeat(n)}\r\nConnection: close\r\n\r\n`;
    assert.match((await raw(padded(15_000))).text, /^HTTP\/1\.1 200 /);
    const big = await raw(padded(17_000));
    assert.match(big.text, /^HTTP\/1\.1 431 /);
    assert.match(big.text, /"success":false/);
  });
});

describe('Running it (docs/DECISIONS.md)', () => {
  test('[D-running-3] exit 2 for a bad setting or command line, 1 for what else stops a start; one line on stderr', async () => {
    const run = (dir, env = {}, args = []) => runCli(args, { env: { DATA_DIR: dir, PORT: '0', AUTH_SECRET: SECRET, ...env } });
    const judge = (r, code, what, re) => {
      assert.equal(r.code, code, `${what}: exit ${r.code}: ${r.stderr}`);
      assert.equal(r.stderr.trim().split('\n').length, 1, `${what}: one line: ${r.stderr}`);
      assert.match(r.stderr, /^chat-session-api: /, what);
      assert.doesNotMatch(r.stderr, /^\s*at /m, `${what}: no stack`);
      if (re !== undefined) assert.match(r.stderr, re, what);
    };
    const dir = tempDir('csa-exit-');
    try {
      judge(run(dir, { PORT: 'abc' }), 2, 'a bad setting', /PORT/);
      judge(run(dir, {}, ['--no-such-option']), 2, 'a bad command line', /--no-such-option/);
      judge(run(dir, {}, ['no-such-command']), 2, 'an unknown command', /no-such-command/);
      judge(run(dir, {}, ['token']), 2, 'a command missing what it needs', /--sub/);
      writeFileSync(join(dir, 'providers.json'), '[{"name": ');
      judge(run(dir), 1, 'a bad providers file', /providers/);
      writeFileSync(join(dir, 'providers.json'), '[]');
      const holder = createServer();
      await new Promise((resolve) => holder.listen(0, '127.0.0.1', resolve));
      try {
        judge(run(dir, { PORT: String(holder.address().port) }), 1, 'a port in use', /port|address/i);
      } finally {
        await new Promise((resolve) => holder.close(resolve));
      }
      const s = await startServer({ dataDir: dir, providers: [] });
      try {
        judge(run(dir), 1, 'a data directory another server holds', /in use by process/);
      } finally {
        await s.stop();
      }
      await damageStore(dir);
      judge(run(dir), 1, 'a damaged store', /is not a SQLite database|schema version 99/);
    } finally {
      removeDir(dir);
    }
  });

  test('[D-running-12] commands log to stderr; their own output is on stdout, so it can be piped', () => {
    const dir = tempDir('csa-commands-');
    try {
      cpSync(join(ROOT, 'test', 'fixtures', 'journal', 'clean', 'sessions.journal'), join(dir, 'sessions.journal'));
      // migrate logs what it reads and writes, and prints one summary
      const migrated = runCli(['migrate'], { env: { DATA_DIR: dir } });
      assert.equal(migrated.code, 0, migrated.stderr);
      assert.match(migrated.stdout, /^migrated 68 sessions and 15 turns into .*; the journal is kept as sessions\.journal\.migrated\n$/);
      const logs = migrated.stderr.trim().split('\n').map((l) => JSON.parse(l));
      assert.ok(logs.length >= 2 && logs.every((l) => typeof l.time === 'string' && typeof l.msg === 'string'), 'stderr holds the log lines');
      // export: the backup alone on stdout, what it did on stderr
      const exported = runCli(['export'], { env: { DATA_DIR: dir } });
      assert.equal(exported.code, 0, exported.stderr);
      const lines = exported.stdout.trim().split('\n').map((l) => JSON.parse(l));
      assert.equal(lines[0].format, 'chat-session-api/export');
      assert.equal(lines.length, 1 + 68 + 15);
      assert.match(exported.stderr, /^exported 68 sessions and 15 turns from /);
      const minted = runCli(['token', '--sub', 'piped'], { env: { DATA_DIR: dir, AUTH_SECRET: SECRET } });
      assert.equal(minted.code, 0, minted.stderr);
      assert.match(minted.stdout, /^[\w-]+\.[\w-]+\.[\w-]+\n$/, 'the token alone');
      assert.equal(minted.stderr, '');
    } finally {
      removeDir(dir);
    }
  });

  test('[D-running-11] an uncaught exception is logged with its stack, exits 1, and a restart serves what was acknowledged', async () => {
    const preload = `data:text/javascript,${encodeURIComponent("process.on('SIGUSR2', () => setImmediate(() => { throw new Error('injected for the test') }))")}`;
    const s = await startServer({ nodeArgs: ['--import', preload] });
    try {
      const u = s.as('alice');
      const made = (await u.post('/api/v1/chat-sessions', newSession({ name: 'before the throw' }))).body.data;
      s.child.kill('SIGUSR2');
      const { code } = await s.exit;
      assert.equal(code, 1);
      const line = s.logs().find((l) => l.level === 'error' && /uncaught exception/.test(l.msg));
      assert.ok(line, `an error line: ${s.stdout}`);
      assert.match(JSON.stringify(line), /injected for the test/);
      assert.match(JSON.stringify(line), /at .*(node:|file:|data:)/, 'with its stack');
      const again = await startServer({ dataDir: s.dataDir });
      try {
        assert.equal((await again.as('alice').get(`/api/v1/chat-sessions/${made._id}`)).body.data.name, 'before the throw');
      } finally {
        await again.stop();
      }
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test("[D-running-9] every setting of --help is a row of docs/operating.md's settings table, and every row is in --help", () => {
    const help = runCli(['--help']).stdout;
    const inHelp = new Set([...help.matchAll(/^ {2}([A-Z][A-Z0-9_]+) \/ (--[a-z0-9-]+) /gm)].map((m) => `${m[1]} ${m[2]}`));
    const doc = readFileSync(join(ROOT, 'docs', 'operating.md'), 'utf8');
    const table = doc.slice(doc.indexOf('| setting | flag | default | meaning |')).split('\n\n')[0].split('\n').slice(2);
    const inDoc = new Set();
    for (const row of table) {
      const [names, flags] = row.split('|').slice(1, 3).map((c) => [...c.matchAll(/`([^`]+)`/g)].map((m) => m[1]));
      names.forEach((n, i) => inDoc.add(`${n} ${flags[i]}`));
    }
    assert.ok(inHelp.size > 40, `${inHelp.size} settings read from --help`);
    assert.deepEqual([...inHelp].filter((s) => !inDoc.has(s)), [], 'in --help, not in docs/operating.md');
    assert.deepEqual([...inDoc].filter((s) => !inHelp.has(s)), [], 'in docs/operating.md, not in --help');
    for (const beyond of ['TRUST_PROXY', 'FSYNC', 'GROUP_COMMIT', 'DOCS', 'AUTH_PREVIOUS_SECRETS_FILE', 'MAX_CONNECTIONS', 'BODY_MEMORY', 'BODY_TIMEOUT', 'WRITE_TIMEOUT', 'MEMORY_LIMIT', 'QUOTA_SESSIONS', 'QUOTA_TURNS', 'QUOTA_BYTES', 'STORE', 'DATABASE_URL', 'EVENTS', 'MAX_STREAMS']) {
      assert.ok([...inHelp].some((s) => s.startsWith(`${beyond} `)), beyond);
    }
  });
});
