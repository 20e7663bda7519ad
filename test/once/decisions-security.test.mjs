// docs/DECISIONS.md, "Security": the decisions no other test pinned (the generated secret, the
// token's strictness, the providers file's syntax errors, CORS's fixed answers, provider ids),
// against the real server over HTTP and the real command line. On every engine.
import assert from 'node:assert/strict';
import { chmodSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { waitFor } from '../api-kit.mjs';
import { newSession, removeDir, runCli, SECRET, sign, startServer, tempDir, tokenFor } from '../helpers.mjs';

const now = () => Math.floor(Date.now() / 1000);

let server;
before(async () => {
  server = await startServer({
    env: { CORS_ORIGIN: 'https://app.example' },
    providers: [{ _id: 'AbCdEf0123456789ABCDEF01', name: 'Mixed case id', type: 'openai', apiKey: 'sk-hidden' }],
  });
});
after(async () => {
  await server.stop();
  removeDir(server.dataDir);
});

const status = async (token, path = '/api/v1/chat-sessions') => (await server.request('GET', path, { token })).status;

describe('Security (docs/DECISIONS.md)', () => {
  test('[D-security-1] the generated secret is 64 hex characters, the HMAC key that text; a readable file is warned of', async () => {
    const dir = tempDir('csa-secret-');
    try {
      const first = await startServer({ dataDir: dir, env: { AUTH_SECRET: undefined } });
      const text = readFileSync(join(dir, 'auth-secret'), 'utf8').trim();
      try {
        assert.match(text, /^[0-9a-f]{64}$/);
        // an issuer of its own, keyed with the text as it is (not the 32 bytes it spells)
        assert.equal((await first.request('GET', '/api/v1/chat-sessions', { token: sign({ sub: 'issuer' }, { secret: text }) })).status, 200);
        assert.equal((await first.request('GET', '/api/v1/chat-sessions', { token: sign({ sub: 'issuer' }, { secret: Buffer.from(text, 'hex') }) })).status, 401);
        assert.equal(first.logs().some((l) => l.level === 'warn' && /readable by others/.test(l.msg ?? '')), false, 'made 0600: no warning');
      } finally {
        await first.stop();
      }
      chmodSync(join(dir, 'auth-secret'), 0o644);
      const second = await startServer({ dataDir: dir, env: { AUTH_SECRET: undefined } });
      try {
        const warn = await waitFor(() => second.logs().find((l) => l.level === 'warn' && /auth-secret is readable by others \(mode 644\); chmod 600 it/.test(l.msg ?? '')), 'the warning');
        assert.ok(!JSON.stringify(warn).includes(text), 'the warning never shows the secret');
        assert.equal((await second.request('GET', '/api/v1/chat-sessions', { token: sign({ sub: 'issuer' }, { secret: text }) })).status, 200, 'it still serves');
      } finally {
        await second.stop();
      }
    } finally {
      removeDir(dir);
    }
  });

  test('[D-security-4] sub, crit, typ, length and claim types as decided; 401 before 403, 403 before validation', async () => {
    assert.equal(await status(sign({ sub: 'x'.repeat(200), exp: now() + 60 })), 200, 'a sub of 200 characters');
    assert.equal(await status(sign({ sub: 'x'.repeat(201), exp: now() + 60 })), 401, 'a sub of 201 characters');
    for (const typ of [undefined, 'JWT', 'at+jwt', 'anything']) {
      const header = typ === undefined ? { alg: 'HS256' } : { alg: 'HS256', typ };
      assert.equal(await status(sign({ sub: 'typ', exp: now() + 60 }, { header })), 200, `typ ${typ}`);
    }
    assert.equal(await status(sign({ sub: 'crit', exp: now() + 60 }, { header: { alg: 'HS256', crit: ['exp'] } })), 401, 'a crit header');
    // a token of 8 KiB passes, one byte more does not (the signature is good on both)
    const exp = now() + 60;
    /** A well-signed token of exactly `length` characters (base64url skips some lengths: the sub's length moves it). */
    const sized = (length) => {
      for (const sub of ['b', 'bb', 'bbb']) {
        for (let pad = Math.floor((length * 3) / 4) - 120; pad < (length * 3) / 4; pad++) {
          const t = sign({ sub, exp, pad: 'p'.repeat(pad) });
          if (t.length === length) return t;
        }
      }
      throw new Error(`no token of ${length} characters`);
    };
    assert.equal(sized(8192).length, 8192);
    assert.equal(await status(sized(8192)), 200, 'a token of 8 KiB');
    assert.equal(await status(sized(8193)), 401, 'a token of 8 KiB and one byte');
    for (const claims of [{ exp: String(now() + 60) }, { nbf: 'now' }, { iat: 'today' }, { aud: 5 }, { iss: ['a'] }, { scope: 5 }]) {
      assert.equal(await status(sign({ sub: 'types', ...claims })), 401, JSON.stringify(claims));
    }
    // 401 before 403 before validation
    const reader = tokenFor('order', { scope: 'sessions:read' });
    const bad = { body: '{not json', headers: { 'content-type': 'application/json' } };
    assert.equal((await server.request('POST', '/api/v1/chat-sessions', { token: 'nope', ...bad })).status, 401);
    assert.equal((await server.request('POST', '/api/v1/chat-sessions', { token: reader, ...bad })).status, 403);
    assert.equal((await server.request('POST', '/api/v1/chat-sessions', { token: tokenFor('order'), ...bad })).status, 400);
  });

  test("[D-security-9] a providers file's syntax error is told by line and column only, at the start and on a reload", async () => {
    const dir = tempDir('csa-syntax-');
    const file = join(dir, 'providers.json');
    const key = 'sk-do-not-echo-0123456789';
    const broken = `[\n  {"_id": "665f1c2a9b1e8a0012ab34c1", "name": "A", "type": "openai",\n   "apiKey": "${key}" "baseUrl": "https://x"}\n]\n`;
    try {
      writeFileSync(file, broken);
      const r = runCli([], { env: { DATA_DIR: dir, PORT: '0', AUTH_SECRET: SECRET } });
      assert.equal(r.code, 1);
      assert.equal(r.stderr, `chat-session-api: providers file ${file} is not valid JSON (near line 3, column 42)\n`);
      writeFileSync(file, '[]');
      const s = await startServer({ dataDir: dir, providers: undefined });
      try {
        writeFileSync(file, broken);
        s.child.kill('SIGHUP');
        const line = await waitFor(() => s.logs().find((l) => /not valid JSON/.test(JSON.stringify(l))), 'the reload to be refused');
        assert.match(JSON.stringify(line), /near line 3, column 42/);
        assert.ok(!(s.stdout + s.stderr).includes(key) && !(s.stdout + s.stderr).includes('baseUrl'), 'no key, no text of the file');
      } finally {
        await s.stop();
      }
    } finally {
      removeDir(dir);
    }
  });

  test("[D-security-10] CORS: exact origins or *, no credentials, preflights cached 10 minutes, the client's headers exposed", async () => {
    const preflight = await server.request('OPTIONS', '/api/v1/chat-sessions', { headers: { origin: 'https://app.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type' } });
    assert.equal(preflight.status, 204);
    assert.equal(preflight.headers['access-control-max-age'], '600');
    assert.equal(preflight.headers['access-control-allow-credentials'], undefined);
    const r = await server.request('POST', '/api/v1/chat-sessions', { token: tokenFor('cors'), json: newSession(), headers: { origin: 'https://app.example' } });
    assert.equal(r.status, 201);
    assert.equal(r.headers['access-control-allow-origin'], 'https://app.example');
    assert.equal(r.headers['access-control-allow-credentials'], undefined);
    const exposed = r.headers['access-control-expose-headers'].split(',').map((h) => h.trim().toLowerCase()).sort();
    assert.deepEqual(exposed, ['etag', 'retry-after', 'x-request-id', 'x-session-id', 'x-should-retry', 'x-turn-id']);
  });

  test('[D-security-8] provider _ids are answered in lowercase, whatever case the providers file writes them in', async () => {
    const token = tokenFor('ids');
    const list = (await server.request('GET', '/api/v1/providers', { token })).body.data;
    assert.deepEqual(list.map((p) => p._id), ['abcdef0123456789abcdef01']);
    assert.equal((await server.request('GET', '/api/v1/providers/ABCDEF0123456789abcdef01', { token })).body.data._id, 'abcdef0123456789abcdef01');
  });
});
