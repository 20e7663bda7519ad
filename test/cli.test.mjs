// docs/TEAM-DECISIONS.md, Running it: one file, settings from env and flags, --help, --version, the
// token command, the generated secret, start-up errors, graceful shutdown.
import assert from 'node:assert/strict';
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { SECRET, SERVER, STORE_FILE, newSession, removeDir, runCli, startServer, tempDir } from './helpers.mjs';

describe('Running it', () => {
  test('--help lists every setting with its default, without starting anything', () => {
    const dir = tempDir();
    const r = runCli(['--help'], { cwd: dir });
    assert.equal(r.code, 0);
    for (const s of ['PORT', 'HOST', 'DATA_DIR', 'PROVIDERS_FILE', 'AUTH_SECRET', 'AUTH_SECRET_FILE', 'AUTH_PREVIOUS_SECRETS', 'AUTH_ISSUER', 'AUTH_AUDIENCE', 'ACCESS', 'BODY_LIMIT', 'LOG_LEVEL', 'CORS_ORIGIN', 'METRICS', 'RATE_LIMIT']) {
      assert.match(r.stdout, new RegExp(`${s} / --`), s);
    }
    assert.match(r.stdout, /\[default: 3000\]/);
    assert.match(r.stdout, /\[default: 127\.0\.0\.1\]/);
    assert.match(r.stdout, /token --sub <user>/);
    assert.equal(existsSync(join(dir, 'data')), false, 'nothing was created');
    removeDir(dir);
  });

  test('--version prints the version without starting anything', () => {
    const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
    const r = runCli(['--version']);
    assert.equal(r.code, 0);
    assert.equal(r.stdout.trim(), pkg.version);
  });

  test('a bad value stops the start with one clear line naming the setting', () => {
    const cases = [
      [{ PORT: 'abc' }, [], /PORT/],
      [{ PORT: '70000' }, [], /PORT/],
      [{ LOG_LEVEL: 'loud' }, [], /LOG_LEVEL/],
      [{ ACCESS: 'everyone' }, [], /ACCESS/],
      [{ BODY_LIMIT: 'lots' }, [], /BODY_LIMIT/],
      [{ METRICS: 'maybe' }, [], /METRICS/],
      [{ RATE_LIMIT: 'fast' }, [], /RATE_LIMIT/],
      [{ CORS_ORIGIN: 'not an origin' }, [], /CORS_ORIGIN/],
      [{ AUTH_SECRET: 'short' }, [], /AUTH_SECRET must be at least 32 bytes/],
      [{}, ['--port', 'x'], /PORT/],
      [{}, ['--bogus', '1'], /unknown option --bogus/],
      [{ AUTH_SECRET: 'a'.repeat(40), AUTH_SECRET_FILE: '/tmp/x' }, [], /AUTH_SECRET and AUTH_SECRET_FILE/],
    ];
    for (const [env, args, re] of cases) {
      const dir = tempDir();
      const r = runCli(args, { env: { DATA_DIR: dir, ...env }, cwd: dir });
      assert.notEqual(r.code, 0, JSON.stringify(env));
      assert.match(r.stderr, re);
      assert.equal(r.stderr.trim().split('\n').length, 1, `one line: ${r.stderr}`);
      assert.equal(r.stdout, '');
      removeDir(dir);
    }
  });

  test('each setting is also accepted as a command-line flag, and the flag wins (PORT = --port)', async () => {
    const s = await startServer({ env: { PORT: '1' }, args: ['--port', '0', '--log-level=info'] });
    try {
      assert.ok(s.port > 1);
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('PORT 0 picks a free port; the startup log line shows the real one', async () => {
    const s = await startServer();
    try {
      const line = s.logs().find((l) => l.msg === 'listening');
      assert.equal(line.url, `http://127.0.0.1:${s.port}`);
      assert.equal((await s.request('GET', '/healthz')).status, 200);
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('a first start with no secret generates $DATA_DIR/auth-secret (0600), reuses it later, logs how to mint a token', async () => {
    const dir = tempDir();
    const first = await startServer({ dataDir: dir, env: { AUTH_SECRET: undefined } });
    let token;
    try {
      const file = join(dir, 'auth-secret');
      assert.equal(statSync(file).mode & 0o777, 0o600);
      assert.ok(first.logs().some((l) => /node dist\/server\.js token --sub/.test(l.msg)));
      const t = runCli(['token', '--sub', 'alice', '--data-dir', dir]);
      assert.equal(t.code, 0, t.stderr);
      token = t.stdout.trim();
      assert.equal((await first.request('GET', '/api/v1/chat-sessions', { token })).status, 200);
    } finally {
      await first.stop();
    }
    const secretBefore = readFileSync(join(dir, 'auth-secret'), 'utf8');
    const second = await startServer({ dataDir: dir, env: { AUTH_SECRET: undefined } });
    try {
      assert.equal(readFileSync(join(dir, 'auth-secret'), 'utf8'), secretBefore);
      assert.equal((await second.request('GET', '/api/v1/chat-sessions', { token })).status, 200, 'a token from before the restart still works');
      assert.equal(second.logs().some((l) => /generated a new HS256 secret/.test(l.msg)), false);
    } finally {
      await second.stop();
      removeDir(dir);
    }
  });

  test('[D-security-2] token refuses where no secret exists, naming the file; once the server made one, it signs', async () => {
    const dir = tempDir();
    const t = runCli(['token', '--sub', 'early'], { env: { DATA_DIR: dir } });
    assert.equal(t.code, 2);
    assert.equal(t.stdout, '', 'no token printed');
    assert.equal(t.stderr, `chat-session-api: no signing secret: ${join(dir, 'auth-secret')} does not exist and neither AUTH_SECRET nor AUTH_SECRET_FILE is set; start the server once (it creates the secret), or give this command the server's DATA_DIR or AUTH_SECRET_FILE\n`);
    assert.deepEqual(readdirSync(dir), [], 'nothing was created');
    const s = await startServer({ dataDir: dir, env: { AUTH_SECRET: undefined } });
    try {
      const later = runCli(['token', '--sub', 'early'], { env: { DATA_DIR: dir } });
      assert.equal(later.code, 0, later.stderr);
      assert.equal((await s.request('GET', '/api/v1/chat-sessions', { token: later.stdout.trim() })).status, 200);
    } finally {
      await s.stop();
      removeDir(dir);
    }
  });

  test('token --sub <user> [--ttl 1h] prints a token signed with the same secret the server would use', async () => {
    const s = await startServer({ env: { AUTH_SECRET: undefined, AUTH_SECRET_FILE: undefined } });
    try {
      const r = runCli(['token', '--sub', 'bob', '--ttl', '15m'], { env: { DATA_DIR: s.dataDir } });
      assert.equal(r.code, 0, r.stderr);
      const token = r.stdout.trim();
      const claims = JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString());
      assert.equal(claims.sub, 'bob');
      assert.ok(Math.abs(claims.exp - claims.iat - 900) <= 1);
      const created = await s.request('POST', '/api/v1/chat-sessions', { token, json: newSession() });
      assert.equal(created.body.data.user, 'bob');
      // "A token lasts one hour" (the README) unless --ttl says otherwise
      const hour = JSON.parse(Buffer.from(runCli(['token', '--sub', 'bob'], { env: { DATA_DIR: s.dataDir } }).stdout.split('.')[1], 'base64url').toString());
      assert.equal(hour.exp - hour.iat, 3600);
      const never = runCli(['token', '--sub', 'bob', '--ttl', 'never'], { env: { DATA_DIR: s.dataDir } });
      assert.equal(JSON.parse(Buffer.from(never.stdout.split('.')[1], 'base64url').toString()).exp, undefined);
      const bad = runCli(['token', '--sub', 'bob', '--ttl', 'soon'], { env: { DATA_DIR: s.dataDir } });
      assert.equal(bad.code, 2);
      assert.match(bad.stderr, /--ttl/);
      const nosub = runCli(['token'], { env: { DATA_DIR: s.dataDir } });
      assert.equal(nosub.code, 2);
      assert.match(nosub.stderr, /--sub/);
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('AUTH_SECRET_FILE: the key is read from the file (trailing newline ignored)', async () => {
    const dir = tempDir();
    const file = join(dir, 'key');
    writeFileSync(file, 'file-secret-0123456789abcdef0123456789abcdef\n', { mode: 0o600 });
    const s = await startServer({ dataDir: dir, env: { AUTH_SECRET: undefined, AUTH_SECRET_FILE: file } });
    try {
      const t = runCli(['token', '--sub', 'f'], { env: { DATA_DIR: dir, AUTH_SECRET_FILE: file } });
      assert.equal((await s.request('GET', '/api/v1/chat-sessions', { token: t.stdout.trim() })).status, 200);
      assert.equal(existsSync(join(dir, 'auth-secret')), false, 'no secret generated when one is configured');
    } finally {
      await s.stop();
      removeDir(dir);
    }
  });

  test('[D-running-2] dist/server.js runs with node even when copied alone into an empty folder', async () => {
    const dir = tempDir('csa-alone-');
    const copy = join(dir, 'server.js');
    copyFileSync(SERVER, copy);
    const s = await startServer({ script: copy, cwd: dir, dataDir: join(dir, 'data') });
    try {
      const u = s.as('alice');
      assert.equal((await u.post('/api/v1/chat-sessions', newSession())).status, 201);
      assert.equal((await u.get('/api/v1/providers')).body.data.length, 3);
      const help = runCli(['--help'], { script: copy, cwd: dir });
      assert.equal(help.code, 0);
    } finally {
      await s.stop();
      removeDir(dir);
    }
  });

  test('DATA_DIR defaults to ./data relative to where the server is started', async () => {
    const dir = tempDir();
    const s = await startServer({ cwd: dir, dataDir: join(dir, 'data'), env: { DATA_DIR: undefined } });
    try {
      assert.ok(existsSync(join(dir, 'data', STORE_FILE ?? 'lock')));
    } finally {
      await s.stop();
      removeDir(dir);
    }
  });

  test('a bad providers file stops the start with a message naming the entry and what is wrong (and no key)', () => {
    const cases = [
      ['{not json', /not valid JSON/],
      ['{"a":1}', /JSON array/],
      ['[{"_id":"665f1c2a9b1e8a0012ab34c1","name":"ok"},{"_id":"short","name":"x","apiKey":"sk-leak-1"}]', /entry 2 \(_id "short"\): _id must be 24 hex characters/],
      ['[{"_id":"665f1c2a9b1e8a0012ab34c1","name":"  ","apiKey":"sk-leak-2"}]', /entry 1 .*name must be a non-blank string/],
      ['[{"_id":"665f1c2a9b1e8a0012ab34c1","name":"a"},{"_id":"665F1C2A9B1E8A0012AB34C1","name":"b"}]', /entry 2 .*repeats entry 1/],
      ['[42]', /entry 1 is not an object/],
      ['[{"_id":"665f1c2a9b1e8a0012ab34c1","name":"a","apiKey":"sk-leak-3"}, oops]', /not valid JSON \(near line 1/],
    ];
    for (const [text, re] of cases) {
      const dir = tempDir();
      writeFileSync(join(dir, 'providers.json'), text);
      const r = runCli([], { env: { DATA_DIR: dir, PORT: '0', AUTH_SECRET: 'x'.repeat(32) } });
      assert.equal(r.code, 1, text);
      assert.match(r.stderr, re);
      assert.match(r.stderr, /providers\.json/);
      assert.equal(/sk-leak/.test(r.stderr + r.stdout), false, 'no key in the message');
      removeDir(dir);
    }
  });

  test('[D-datadir-1] a second server on a data directory refuses to start, naming the holder', async () => {
    const s = await startServer();
    try {
      await assert.rejects(startServer({ dataDir: s.dataDir }), new RegExp(`in use by process ${s.child.pid}`));
      assert.equal((await s.request('GET', '/healthz')).status, 200, 'the first keeps serving');
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('a port that is already taken stops the start with a clear line', async () => {
    const blocker = createServer();
    await new Promise((r) => blocker.listen(0, '127.0.0.1', r));
    const dir = tempDir();
    const r = runCli([], { env: { DATA_DIR: dir, PORT: String(blocker.address().port), AUTH_SECRET: 'x'.repeat(32) } });
    blocker.close();
    assert.equal(r.code, 1);
    assert.match(r.stderr, /already in use/);
    assert.equal(existsSync(join(dir, 'lock')), false, 'the lock is released');
    removeDir(dir);
  });

  test('[D-papercuts-1] "every setting is checked before the server binds": a bad one is named while another process holds PORT', async () => {
    const blocker = createServer();
    await new Promise((r) => blocker.listen(0, '127.0.0.1', r));
    const PORT = String(blocker.address().port);
    const dir = tempDir();
    try {
      const short = join(dir, 'short-secret');
      writeFileSync(short, 'short\n', { mode: 0o600 });
      const cases = [
        [{ AUTH_SECRET: 'short' }, 2, /AUTH_SECRET must be at least 32 bytes \(got 5\)/],
        [{ AUTH_SECRET_FILE: join(dir, 'missing') }, 2, /AUTH_SECRET_FILE: cannot read .*missing \(ENOENT\)/],
        [{ AUTH_SECRET_FILE: short }, 2, /AUTH_SECRET_FILE must be at least 32 bytes/],
        [{ AUTH_SECRET: SECRET, AUTH_PREVIOUS_SECRETS: 'short' }, 2, /AUTH_PREVIOUS_SECRETS entry 1 must be at least 32 bytes/],
        [{ AUTH_SECRET: SECRET, PROVIDERS_FILE: join(dir, 'no-providers.json') }, 1, /providers file .* does not exist/],
      ];
      for (const [env, code, re] of cases) {
        const r = runCli([], { env: { DATA_DIR: join(dir, 'data'), PORT, ...env } });
        assert.equal(r.code, code, `${JSON.stringify(env)}: ${r.stderr}`);
        assert.match(r.stderr, re);
        assert.doesNotMatch(r.stderr, /in use/);
        assert.equal(existsSync(join(dir, 'data')), false, 'nothing was created');
      }
      // the data directory's own secret is checked as well, when it exists
      mkdirSync(join(dir, 'data'));
      writeFileSync(join(dir, 'data', 'auth-secret'), 'short\n', { mode: 0o600 });
      const own = runCli([], { env: { DATA_DIR: join(dir, 'data'), PORT } });
      assert.equal(own.code, 2, own.stderr);
      assert.match(own.stderr, /auth-secret must be at least 32 bytes/);
      // with the settings good, the port is what stops it
      const taken = runCli([], { env: { DATA_DIR: join(dir, 'data'), PORT, AUTH_SECRET: SECRET } });
      assert.equal(taken.code, 1);
      assert.match(taken.stderr, /the address is already in use/);
    } finally {
      blocker.close();
      removeDir(dir);
    }
  });

  test('SIGTERM / SIGINT: stop accepting, let in-flight requests finish, flush the store, exit 0', async () => {
    for (const signal of ['SIGTERM', 'SIGINT']) {
      const s = await startServer();
      const u = s.as('alice');
      // a slow upload is in flight when the signal arrives
      const body = JSON.stringify(newSession({ name: signal }));
      const inflight = new Promise((resolve, reject) => {
        import('node:http').then(({ request }) => {
          const req = request({ host: '127.0.0.1', port: s.port, method: 'POST', path: '/api/v1/chat-sessions', headers: { authorization: `Bearer ${u.token}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
            let t = '';
            res.on('data', (d) => (t += d));
            res.on('end', () => resolve({ status: res.statusCode, body: JSON.parse(t) }));
          });
          req.on('error', reject);
          req.write(body.slice(0, 10));
          setTimeout(() => {
            s.child.kill(signal);
            setTimeout(() => req.end(body.slice(10)), 200);
          }, 100);
        });
      });
      const answer = await inflight;
      assert.equal(answer.status, 201, signal);
      const { code } = await s.exit;
      assert.equal(code, 0, signal);
      assert.ok(s.logs().some((l) => l.msg === 'stopped'));
      assert.equal(existsSync(join(s.dataDir, 'lock')), false);
      const again = await startServer({ dataDir: s.dataDir });
      try {
        const list = await again.as('alice').get('/api/v1/chat-sessions');
        assert.deepEqual(list.body.data.map((x) => x.name), [signal]);
      } finally {
        await again.stop();
        removeDir(s.dataDir);
      }
    }
  });

  test('the data directory is created when missing', async () => {
    const dir = join(tempDir(), 'nested', 'deeper');
    mkdirSync(join(dir, '..'), { recursive: true });
    const s = await startServer({ dataDir: dir, providers: null });
    try {
      assert.ok(existsSync(join(dir, STORE_FILE ?? 'lock')));
    } finally {
      await s.stop();
      removeDir(join(dir, '..', '..'));
    }
  });
});
