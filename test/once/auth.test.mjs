// docs/TEAM-DECISIONS.md, Authentication: HS256 Bearer JWTs, checked strictly.
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { connect } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { newSession, removeDir, sign, SECRET, startServer, tokenFor } from '../helpers.mjs';

const PREVIOUS = 'previous-secret-0123456789abcdef0123456789';
let server;
let strict;

before(async () => {
  server = await startServer({ env: { AUTH_PREVIOUS_SECRETS: `${PREVIOUS}, another-old-secret-0123456789abcdef012345` } });
  strict = await startServer({ env: { AUTH_ISSUER: 'https://issuer.example', AUTH_AUDIENCE: 'chat-api' } });
});
after(async () => {
  await Promise.all([server.stop(), strict.stop()]);
  removeDir(server.dataDir);
  removeDir(strict.dataDir);
});

const now = () => Math.floor(Date.now() / 1000);

async function status(s, token, path = '/api/v1/chat-sessions') {
  return s.request('GET', path, token === undefined ? {} : { headers: { authorization: token } });
}

function assertUnauthorized(r, { invalidToken }) {
  assert.equal(r.status, 401);
  assert.deepEqual(r.body, { success: false, message: 'Unauthorized' });
  const h = r.headers['www-authenticate'];
  if (invalidToken) assert.match(h, /^Bearer error="invalid_token", error_description="[^"]+"$/);
  else assert.equal(h, 'Bearer');
}

describe('Authentication decisions', () => {
  test('Authorization: Bearer <JWT> with a valid HS256 token is accepted; sub is the user id', async () => {
    const r = await status(server, `Bearer ${tokenFor('alice')}`);
    assert.equal(r.status, 200);
    const c = await server.request('POST', '/api/v1/chat-sessions', { token: tokenFor('user-42'), json: newSession() });
    assert.equal(c.body.data.user, 'user-42');
  });

  test('the Bearer scheme is case-insensitive', async () => {
    assert.equal((await status(server, `bearer ${tokenFor('alice')}`)).status, 200);
    assert.equal((await status(server, `BEARER ${tokenFor('alice')}`)).status, 200);
  });

  test('no token -> 401 Unauthorized with WWW-Authenticate: Bearer', async () => {
    assertUnauthorized(await status(server, undefined), { invalidToken: false });
    assertUnauthorized(await status(server, 'Basic YWxpY2U6cGFzcw=='), { invalidToken: false });
  });

  test('bad token -> 401 with WWW-Authenticate adding error="invalid_token" and an error_description', async () => {
    assertUnauthorized(await status(server, 'Bearer not-a-jwt'), { invalidToken: true });
    assertUnauthorized(await status(server, 'Bearer a.b.c'), { invalidToken: true });
    assertUnauthorized(await status(server, 'Bearer '), { invalidToken: false });
  });

  test('header alg exactly HS256: anything else, none included, is rejected', async () => {
    for (const alg of ['none', 'HS384', 'HS512', 'RS256', 'hs256', 'ES256']) {
      const t = sign({ sub: 'alice', exp: now() + 60 }, { header: { alg, typ: 'JWT' } });
      assertUnauthorized(await status(server, `Bearer ${t}`), { invalidToken: true });
    }
    const unsigned = `${Buffer.from('{"alg":"none"}').toString('base64url')}.${Buffer.from('{"sub":"alice"}').toString('base64url')}.`;
    assertUnauthorized(await status(server, `Bearer ${unsigned}`), { invalidToken: true });
    const noAlg = sign({ sub: 'alice' }, { header: { typ: 'JWT' } });
    assertUnauthorized(await status(server, `Bearer ${noAlg}`), { invalidToken: true });
  });

  test('signature compared in constant time, length first: wrong, short, long or non-canonical signatures rejected', async () => {
    const good = tokenFor('alice');
    const [h, p, sig] = good.split('.');
    const flip = sig[0] === 'A' ? 'B' : 'A';
    for (const bad of [`${h}.${p}.${flip}${sig.slice(1)}`, `${h}.${p}.${sig.slice(0, 20)}`, `${h}.${p}.${sig}AAAA`, `${h}.${p}.`, `${h}.${p}.${sig.slice(0, -1)}${sig.at(-1) === 'A' ? 'B' : 'A'}`]) {
      assertUnauthorized(await status(server, `Bearer ${bad}`), { invalidToken: true });
    }
    const otherKey = sign({ sub: 'alice', exp: now() + 60 }, { secret: 'some-other-secret-0123456789abcdef0123456' });
    assertUnauthorized(await status(server, `Bearer ${otherKey}`), { invalidToken: true });
  });

  test('a payload edited after signing is rejected', async () => {
    const [h, , sig] = tokenFor('alice').split('.');
    const forged = `${h}.${Buffer.from(JSON.stringify({ sub: 'admin', exp: now() + 60 })).toString('base64url')}.${sig}`;
    assertUnauthorized(await status(server, `Bearer ${forged}`), { invalidToken: true });
  });

  test('sub a non-empty string', async () => {
    for (const claims of [{}, { sub: '' }, { sub: '   ' }, { sub: 42 }, { sub: null }, { sub: ['alice'] }]) {
      assertUnauthorized(await status(server, `Bearer ${sign({ ...claims, exp: now() + 60 })}`), { invalidToken: true });
    }
  });

  test('[D-sec-1] a sub holding a lone surrogate is refused (it would own sessions); a surrogate pair is a user as any', async () => {
    assertUnauthorized(await status(server, `Bearer ${sign({ sub: 'a\ud800', exp: now() + 60 })}`), { invalidToken: true });
    assert.equal((await status(server, `Bearer ${sign({ sub: 'a\ud83d\ude00', exp: now() + 60 })}`)).status, 200);
  });

  test('exp enforced when present (30 s leeway)', async () => {
    assert.equal((await status(server, `Bearer ${sign({ sub: 'a', exp: now() - 10 })}`)).status, 200, 'within leeway');
    assertUnauthorized(await status(server, `Bearer ${sign({ sub: 'a', exp: now() - 45 })}`), { invalidToken: true });
    const r = await status(server, `Bearer ${sign({ sub: 'a', exp: now() - 45 })}`);
    assert.match(r.headers['www-authenticate'], /expired/);
    assertUnauthorized(await status(server, `Bearer ${sign({ sub: 'a', exp: 'tomorrow' })}`), { invalidToken: true });
  });

  test('nbf enforced when present (30 s leeway)', async () => {
    assert.equal((await status(server, `Bearer ${sign({ sub: 'a', nbf: now() + 10 })}`)).status, 200, 'within leeway');
    assertUnauthorized(await status(server, `Bearer ${sign({ sub: 'a', nbf: now() + 120 })}`), { invalidToken: true });
  });

  test('a token without exp is accepted (exp is enforced only when present)', async () => {
    assert.equal((await status(server, `Bearer ${sign({ sub: 'a' })}`)).status, 200);
  });

  test('AUTH_PREVIOUS_SECRETS: comma-separated keys still accepted for verification (rotation)', async () => {
    assert.equal((await status(server, `Bearer ${sign({ sub: 'a' }, { secret: PREVIOUS })}`)).status, 200);
    assert.equal((await status(server, `Bearer ${sign({ sub: 'a' }, { secret: 'another-old-secret-0123456789abcdef012345' })}`)).status, 200);
    assert.equal((await status(server, `Bearer ${sign({ sub: 'a' }, { secret: SECRET })}`)).status, 200);
  });

  test('AUTH_ISSUER, AUTH_AUDIENCE: when set, iss / aud must match', async () => {
    const ok = { sub: 'a', iss: 'https://issuer.example', aud: 'chat-api', exp: now() + 60 };
    assert.equal((await status(strict, `Bearer ${sign(ok)}`)).status, 200);
    assert.equal((await status(strict, `Bearer ${sign({ ...ok, aud: ['other', 'chat-api'] })}`)).status, 200);
    for (const bad of [{ ...ok, iss: 'https://evil.example' }, { ...ok, iss: undefined }, { ...ok, aud: 'other' }, { ...ok, aud: undefined }, { ...ok, aud: ['x'] }]) {
      assertUnauthorized(await status(strict, `Bearer ${sign(bad)}`), { invalidToken: true });
    }
  });

  test('Every endpoint of both groups: authentication comes before any validation', async () => {
    const bad = { headers: { authorization: 'Bearer nope' } };
    const calls = [
      ['POST', '/api/v1/chat-sessions', { ...bad, body: '{not json', headers: { ...bad.headers, 'content-type': 'application/json' } }],
      ['POST', '/api/v1/chat-sessions', { ...bad, body: 'x', headers: { ...bad.headers, 'content-type': 'text/plain' } }],
      ['GET', '/api/v1/chat-sessions/%20', bad],
      ['GET', '/api/v1/chat-sessions?limit=0', bad],
      ['GET', '/api/v1/providers/not-an-id', bad],
      ['PUT', '/api/v1/chat-sessions/0123456789abcdef01234567', { ...bad, body: '[]', headers: { ...bad.headers, 'content-type': 'application/json' } }],
    ];
    for (const [m, p, o] of calls) {
      const r = await server.request(m, p, o);
      assert.equal(r.status, 401, `${m} ${p}`);
      assert.equal(r.body.message, 'Unauthorized');
    }
  });

  test('tokens in odd shapes (extra segments, bad base64url, JSON that is not an object, huge) get 401, never 500', async () => {
    const hmac = (input) => createHmac('sha256', SECRET).update(input).digest('base64url');
    const b = (s) => Buffer.from(s).toString('base64url');
    const arrHeader = `${b('[]')}.${b('{"sub":"a"}')}`;
    const arrPayload = `${b('{"alg":"HS256"}')}.${b('["a"]')}`;
    const shapes = [
      'a.b.c.d',
      '..',
      '!!!.@@@.###',
      `${arrHeader}.${hmac(arrHeader)}`,
      `${arrPayload}.${hmac(arrPayload)}`,
      `${b('{"alg":"HS256","crit":["x"]}')}.${b('{"sub":"a"}')}.${hmac(`${b('{"alg":"HS256","crit":["x"]}')}.${b('{"sub":"a"}')}`)}`,
      'x'.repeat(9000),
    ];
    for (const t of shapes) {
      const r = await status(server, `Bearer ${t}`);
      assert.equal(r.status, 401, t.slice(0, 40));
    }
  });

  test('[D-security-5] a connection remembers its last Authorization only: another token is verified, a bad one refused', async () => {
    const port = new URL(server.url).port;
    const socket = connect(Number(port), '127.0.0.1');
    await new Promise((resolve, reject) => socket.once('connect', resolve).once('error', reject));
    let pending = Buffer.alloc(0);
    let wake = () => undefined;
    socket.on('data', (d) => {
      pending = Buffer.concat([pending, d]);
      wake();
    });
    /** One request on this socket; resolves {status, body} once the whole answer is in. */
    const send = async (method, path, authorization, json) => {
      const body = json === undefined ? '' : JSON.stringify(json);
      let head = `${method} ${path} HTTP/1.1\r\nhost: x\r\n`;
      if (authorization !== undefined) head += `authorization: ${authorization}\r\n`;
      if (json !== undefined) head += `content-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n`;
      socket.write(`${head}\r\n${body}`);
      for (;;) {
        const end = pending.indexOf('\r\n\r\n');
        if (end !== -1) {
          const text = pending.subarray(0, end).toString('latin1');
          const length = Number(/content-length: (\d+)/i.exec(text)?.[1] ?? 0);
          if (pending.length >= end + 4 + length) {
            const answer = { status: Number(text.split(' ')[1]), body: JSON.parse(pending.subarray(end + 4, end + 4 + length).toString()) };
            pending = pending.subarray(end + 4 + length);
            return answer;
          }
        }
        await new Promise((resolve) => (wake = resolve));
      }
    };
    try {
      const alice = `Bearer ${sign({ sub: 'conn-alice', exp: now() + 60 })}`;
      const bob = `Bearer ${sign({ sub: 'conn-bob', exp: now() + 60 })}`;
      const created = await send('POST', '/api/v1/chat-sessions', alice, newSession({ name: 'alice on one connection' }));
      assert.equal(created.status, 201);
      assert.equal(created.body.data.user, 'conn-alice');
      assert.equal((await send('GET', '/api/v1/chat-sessions', alice)).body.data.length, 1);
      assert.equal((await send('GET', '/api/v1/chat-sessions', bob)).body.data.length, 0, 'bob on the same connection is bob');
      assert.equal((await send('POST', '/api/v1/chat-sessions', bob, newSession())).body.data.user, 'conn-bob');
      assert.equal((await send('GET', '/api/v1/chat-sessions', alice)).body.data.length, 1, 'and alice again is alice');
      const forged = `${alice.slice(0, -4)}AAAA`;
      assert.equal((await send('GET', '/api/v1/chat-sessions', forged)).status, 401, 'a changed signature after a good token');
      assert.equal((await send('GET', '/api/v1/chat-sessions', undefined)).status, 401, 'no header after a good token');
      assert.equal((await send('GET', '/api/v1/chat-sessions', alice)).status, 200);
      // valid within the 30 s leeway for about one more second, then expired on the same connection
      const ending = `Bearer ${sign({ sub: 'conn-alice', exp: now() - 29 })}`;
      assert.equal((await send('GET', '/api/v1/chat-sessions', ending)).status, 200);
      await new Promise((resolve) => setTimeout(resolve, 2100));
      const late = await send('GET', '/api/v1/chat-sessions', ending);
      assert.equal(late.status, 401, 'the remembered header expires with its token');
    } finally {
      socket.destroy();
    }
  });

  test('secrets shorter than 32 bytes are refused at start', async () => {
    await assert.rejects(startServer({ env: { AUTH_SECRET: 'too-short' } }), /AUTH_SECRET must be at least 32 bytes/);
    await assert.rejects(startServer({ env: { AUTH_PREVIOUS_SECRETS: 'short' } }), /AUTH_PREVIOUS_SECRETS entry 1 must be at least 32 bytes/);
  });
});
