// docs/TEAM-DECISIONS.md, "Sign-in from an identity provider", and docs/DECISIONS.md's
// [D-jwks-*]: tokens signed by a key of AUTH_JWKS, served here by a local HTTP server at
// Keycloak's path. Every token is made in the test with node:crypto and judged by jose as well,
// so the server is checked against an independent implementation, not against our own reading.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { generateKeyPairSync } from 'node:crypto';
import { jwtVerify, createLocalJWKSet } from 'jose';
import { newSession, removeDir, runCli, SECRET, SERVER, startServer, storeEnv, tempDir, tokenFor } from '../helpers.mjs';
import { assertJose, AUDIENCE, b64, claimsFor, hs256With, ISSUER, jwkOf, jwksEnv, joseAccepts, keyFor, keyServer, nowSeconds, signWith } from '../jwks-kit.mjs';

const ALGS = ['RS256', 'RS384', 'RS512', 'PS256', 'ES256', 'ES384', 'EdDSA'];
const keys = Object.fromEntries(ALGS.map((alg) => [alg, keyFor(alg)]));
/** A key the provider publishes for encryption (Keycloak's RSA-OAEP key): never for signatures. */
const encKey = keyFor('RS256', 'enc-key');
const BASE = '/api/v1/chat-sessions';
const started = [];
const idps = [];

async function serverWith(env, opts = {}) {
  const s = await startServer({ ...opts, env });
  started.push(s);
  return s;
}

async function idpWith(keyList) {
  const idp = await keyServer(keyList);
  idps.push(idp);
  return idp;
}

after(async () => {
  for (const s of started) {
    await s.stop();
    removeDir(s.dataDir);
  }
  for (const idp of idps) await idp.close();
});

/** GET the user's list with `token`: {status, description (error_description), user (of a created session)}. */
async function call(s, token, method = 'GET', path = BASE) {
  const r = await s.request(method, path, { token, ...(method === 'POST' && path === BASE ? { json: newSession() } : {}) });
  const h = r.headers['www-authenticate'];
  return { status: r.status, body: r.body, header: h, description: /error_description="([^"]*)"/.exec(h ?? '')?.[1] };
}

async function assertAccepted(s, token, set, what) {
  const r = await call(s, token);
  assert.equal(r.status, 200, `${what}: ${JSON.stringify(r)}`);
  await assertJose(token, set, true, what);
}

/** Refused by the server with exactly `description`, and by jose too (unless `jose` is false: a rule of ours, not of JWT's). */
async function assertRefused(s, token, set, description, what, { jose = true } = {}) {
  const r = await call(s, token);
  assert.equal(r.status, 401, `${what}: ${JSON.stringify(r)}`);
  assert.deepEqual(r.body, { success: false, message: 'Unauthorized' });
  assert.equal(r.header, `Bearer error="invalid_token", error_description="${description}"`, what);
  if (jose) await assertJose(token, set, false, what);
}

/** Resolves when `cond()` holds; a bound on a wait, not a timing assertion. */
async function until(cond, what, ms = 20_000) {
  const t0 = Date.now();
  while (!(await cond())) {
    if (Date.now() - t0 > ms) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A start expected to fail: its exit code and stderr (the test's key server must keep answering meanwhile, so not spawnSync). */
function failedStart(env, dataDir = tempDir()) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [SERVER], {
      cwd: dataDir,
      env: { PATH: process.env.PATH, HOME: process.env.HOME, PORT: '0', HOST: '127.0.0.1', DATA_DIR: dataDir, AUTH_SECRET: SECRET, ...storeEnv(dataDir), ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    let stdout = '';
    child.stderr.on('data', (d) => (stderr += d));
    child.stdout.on('data', (d) => (stdout += d));
    child.on('exit', (code) => resolve({ code, stderr, stdout, dataDir }));
  });
}

/** A port nobody listens on. */
async function closedPort() {
  const s = createServer();
  await new Promise((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address();
  await new Promise((r) => s.close(r));
  return port;
}

const refusalLines = (s, reason) => s.logs().filter((l) => l.msg?.startsWith('token refused') && (reason === undefined || l.reason === reason));

describe('Sign-in from an identity provider', () => {
  let idp;
  let server;
  let set;

  before(async () => {
    set = [...ALGS.map((a) => jwkOf(keys[a])), jwkOf(encKey, { use: 'enc', alg: 'RSA-OAEP' })];
    idp = await idpWith(set);
    server = await serverWith(jwksEnv(idp));
  });

  test('"a token signed by a key of the set is accepted": RS256/384/512, PS256, ES256/384, EdDSA, each checked by jose too', async () => {
    for (const alg of ALGS) {
      const token = signWith(keys[alg], claimsFor(`user-${alg}`));
      await assertAccepted(server, token, set, alg);
      const created = await call(server, token, 'POST');
      assert.equal(created.status, 201);
      assert.equal(created.body.data.user, `user-${alg}`, 'sub is the user id by default');
    }
  });

  test('"AUTH_ISSUER (when set, iss must equal it) and AUTH_AUDIENCE (when set, aud must be or contain it)"', async () => {
    const k = keys.ES256;
    await assertAccepted(server, signWith(k, claimsFor('a', { aud: ['account', AUDIENCE] })), set, 'aud an array holding ours');
    for (const [what, over] of [
      ['another issuer', { iss: 'https://evil.example/realms/x' }],
      ['no issuer', { iss: undefined }],
      ['another audience', { aud: 'account' }],
      ['an array without ours', { aud: ['account', 'other'] }],
      ['no audience', { aud: undefined }],
    ]) {
      await assertRefused(server, signWith(k, claimsFor('a', over)), set, 'invalid token', what);
    }
  });

  test('"Tokens from the set must carry exp; nbf/iat honoured; 60 s leeway" (ours keep 30 s and may lack exp)', async () => {
    const k = keys.RS256;
    const now = nowSeconds();
    await assertRefused(server, signWith(k, claimsFor('a', { exp: undefined })), set, 'invalid token', 'no exp');
    await assertRefused(server, signWith(k, claimsFor('a', { exp: now - 120 })), set, 'token expired', 'expired two minutes ago');
    await assertAccepted(server, signWith(k, claimsFor('a', { exp: now - 40 })), set, 'expired 40 s ago: within the 60 s leeway');
    await assertRefused(server, signWith(k, claimsFor('a', { nbf: now + 120 })), set, 'token not yet valid', 'nbf in two minutes');
    await assertAccepted(server, signWith(k, claimsFor('a', { nbf: now + 40 })), set, 'nbf in 40 s: within the leeway');
    await assertRefused(server, signWith(k, claimsFor('a', { exp: 'tomorrow' })), set, 'invalid token', 'exp not a number');
    await assertRefused(server, signWith(k, claimsFor('a', { iat: 'today' })), set, 'invalid token', 'iat not a number');
    // our own tokens: no exp is fine, 40 s past exp is not (30 s of leeway)
    const own = { iss: ISSUER, aud: AUDIENCE };
    assert.equal((await call(server, tokenFor('a', { ...own, exp: undefined }))).status, 200, 'ours without exp (token --ttl never)');
    assert.equal((await call(server, tokenFor('a', { ...own, exp: now - 40 }))).description, 'token expired', 'ours 40 s past exp');
  });

  test('[D-jwks-10] an iat in the future beyond the leeway makes a token from the set not yet valid (jose agrees)', async () => {
    const now = nowSeconds();
    const late = signWith(keys.EdDSA, claimsFor('a', { iat: now + 120, exp: now + 600 }));
    await assertRefused(server, late, set, 'token not yet valid', 'iat in two minutes', { jose: false });
    const jose = (t) => jwtVerify(t, createLocalJWKSet({ keys: set }), { issuer: ISSUER, audience: AUDIENCE, clockTolerance: 60, maxTokenAge: '1d' });
    await assert.rejects(jose(late), /iat/);
    const soon = signWith(keys.EdDSA, claimsFor('a', { iat: now + 30 }));
    await assertAccepted(server, soon, set, 'iat in 30 s: within the leeway');
    await jose(soon);
    // ours keep their rules: iat only has to be a number
    assert.equal((await call(server, tokenFor('a', { iss: ISSUER, aud: AUDIENCE, iat: now + 3600 }))).status, 200);
  });

  test('a Keycloak-shaped token with "openid profile email" has full access; "openid sessions:read" is read-only', async () => {
    const k = keys.RS256;
    const full = signWith(k, claimsFor('kc-user', { scope: 'openid profile email', preferred_username: 'kc', email: 'kc@example.org' }));
    await assertAccepted(server, full, set, 'Keycloak token');
    assert.equal((await call(server, full, 'POST')).status, 201);
    assert.equal((await call(server, full, 'GET', '/api/v1/providers')).status, 200);
    const reader = signWith(k, claimsFor('kc-user', { scope: 'openid sessions:read' }));
    assert.equal((await call(server, reader)).status, 200);
    assert.equal((await call(server, reader, 'POST')).status, 403);
    assert.equal((await call(server, reader, 'GET', '/api/v1/providers')).status, 403);
    const entra = signWith(k, claimsFor('entra-oid', { scp: 'User.Read', ver: '2.0' }));
    assert.equal((await call(server, entra, 'POST')).status, 201, 'Entra scp "User.Read": full access');
    const entraWriter = signWith(k, claimsFor('entra-oid', { scp: ['User.Read', 'sessions:write'] }));
    assert.equal((await call(server, entraWriter, 'POST')).status, 201);
    assert.equal((await call(server, entraWriter)).status, 403, 'sessions:write does not imply sessions:read');
  });

  test("[D-jwks-5] the provider's scopes are cut to our words first: an empty one there is full access, ours grants nothing", async () => {
    const k = keys.ES384;
    const cases = [
      [{ scope: '' }, ['GET', 'POST', 'providers']],
      [{ scp: [] }, ['GET', 'POST', 'providers']],
      [{ scope: 'openid sessions:read', scp: 'User.Read' }, ['GET']],
      [{ scope: 'openid sessions:read', scp: ['sessions:write', 'profile'] }, []],
      [{ scope: 'sessions:read sessions:write openid', scp: 'sessions:write User.Read' }, ['POST']],
    ];
    for (const [claims, allowed] of cases) {
      const t = signWith(k, claimsFor('s', claims));
      const got = [];
      if ((await call(server, t)).status === 200) got.push('GET');
      if ((await call(server, t, 'POST')).status === 201) got.push('POST');
      if ((await call(server, t, 'GET', '/api/v1/providers')).status === 200) got.push('providers');
      assert.deepEqual(got, allowed, JSON.stringify(claims));
    }
    const own = tokenFor('s', { iss: ISSUER, aud: AUDIENCE, scope: '' });
    assert.equal((await call(server, own)).status, 403, 'our own token with scope "" grants nothing');
  });

  test('"an HS256 token is never checked against a public key": algorithm confusion with the RSA public key\'s bytes is refused', async () => {
    const pem = keys.RS256.publicKey.export({ type: 'spki', format: 'pem' });
    const der = keys.RS256.publicKey.export({ type: 'spki', format: 'der' });
    const jwkText = JSON.stringify(jwkOf(keys.RS256));
    for (const secret of [pem, der, jwkText]) {
      const t = hs256With(secret, claimsFor('mallory'), { kid: keys.RS256.kid });
      await assertRefused(server, t, set, 'invalid token', 'HS256 signed with the public key');
    }
    for (const alg of ['HS384', 'HS512']) {
      const input = `${b64({ alg, kid: keys.RS256.kid })}.${b64(claimsFor('mallory'))}`;
      await assertRefused(server, `${input}.${b64('x'.repeat(48))}`, set, 'invalid token', alg);
    }
  });

  test('"none is refused": alg none, with or without a signature, and an alg we do not take', async () => {
    const claims = claimsFor('mallory');
    for (const alg of ['none', 'None', 'NONE']) {
      const input = `${b64({ alg, kid: keys.RS256.kid })}.${b64(claims)}`;
      await assertRefused(server, `${input}.`, set, 'invalid token', `alg ${alg}`);
    }
    const ps512 = signWith(keys.PS256, claims, { header: { alg: 'PS512' } });
    await assertRefused(server, ps512, set, 'invalid token', 'PS512 (not an algorithm we take)');
  });

  test('a stranger\'s key under a known kid, a payload edited after signing, and a signature cut short are refused', async () => {
    for (const alg of ALGS) {
      const stranger = keyFor(alg, keys[alg].kid);
      await assertRefused(server, signWith(stranger, claimsFor('mallory')), set, 'invalid token', `${alg} by a stranger's key`);
      const good = signWith(keys[alg], claimsFor('alice'));
      const [h, , s] = good.split('.');
      await assertRefused(server, `${h}.${b64(claimsFor('admin'))}.${s}`, set, 'invalid token', `${alg} payload edited`);
      await assertRefused(server, `${h}.${good.split('.')[1]}.${s.slice(0, -8)}`, set, 'invalid token', `${alg} signature cut`);
    }
  });

  test('"The alg must fit the key\'s type": another type, another curve, or another algorithm than the key\'s own alg is refused', async () => {
    const claims = claimsFor('mallory');
    // each header names a key of the set whose type or curve does not fit the algorithm
    const misfits = [
      signWith(keys.RS256, claims, { alg: 'RS256', header: { kid: keys.ES256.kid } }),
      signWith(keys.ES256, claims, { alg: 'ES256', header: { kid: keys.ES384.kid } }),
      signWith(keys.ES384, claims, { alg: 'ES384', header: { kid: keys.ES256.kid } }),
      signWith(keys.EdDSA, claims, { alg: 'EdDSA', header: { kid: keys.RS256.kid } }),
      // the key published as RS256 signs PS256: its own alg is the only one it checks
      signWith(keys.RS256, claims, { alg: 'PS256' }),
      signWith(keys.PS256, claims, { alg: 'RS256' }),
    ];
    for (const [i, t] of misfits.entries()) await assertRefused(server, t, set, 'invalid token', `misfit ${i}`);
  });

  test('"a kid is required when the set has several keys"; with one key a token may leave it out', async () => {
    const noKid = signWith(keys.ES256, claimsFor('a'), { header: { kid: undefined } });
    await assertRefused(server, noKid, set, 'invalid token', 'no kid, seven keys', { jose: false });
    const one = await idpWith([jwkOf(keys.ES256)]);
    const single = await serverWith(jwksEnv(one));
    await assertAccepted(single, noKid, one.keys, 'no kid, one key');
  });

  test('"a key whose use is not sig is not used": a token signed by the encryption key under its kid is refused', async () => {
    const t = signWith(encKey, claimsFor('mallory'), { alg: 'RS256' });
    await assertRefused(server, t, set, 'invalid token', 'signed by the use:enc key');
  });

  test("[D-jwks-1] a refused token, ours or the provider's, is told in one of three words; the log says why, once a minute", async () => {
    // a server of its own: the other tests' refusals must not have used up this minute's lines
    const s = await serverWith(jwksEnv(idp));
    const before = 0;
    const wrongAud = signWith(keys.RS384, claimsFor('a', { aud: 'someone-else' }));
    for (let i = 0; i < 3; i++) {
      const r = await call(s, wrongAud);
      assert.equal(r.description, 'invalid token');
      for (const secret of [ISSUER, AUDIENCE, 'audience', 'issuer', keys.RS384.kid, 'RS384', 'alg', 'kid']) assert.ok(!r.header.includes(secret), `${r.header} names ${secret}`);
    }
    // ours too: a wrong signature, a wrong issuer
    const own = await call(s, tokenFor('a', { iss: 'https://other.example', aud: AUDIENCE }));
    assert.equal(own.description, 'invalid token');
    assert.equal((await call(s, tokenFor('a', { iss: ISSUER, aud: AUDIENCE }, { secret: 'x'.repeat(40) }))).description, 'invalid token');
    await until(() => refusalLines(s, 'unexpected audience').length > before, 'the refusal line');
    await until(() => refusalLines(s, 'unexpected issuer').length > 0, 'the issuer line');
    await new Promise((r) => setTimeout(r, 300)); // any second line would be flushed by now (the logger flushes within 100 ms)
    const lines = refusalLines(s, 'unexpected audience');
    assert.equal(lines.length - before, 1, 'three refusals for one reason: one line');
    assert.equal(lines.at(-1).aud, 'someone-else', 'the line says what the token carried');
    assert.equal(lines.at(-1).level, 'info');
  });

  test('[D-jwks-9] a payload edited under a remembered signature is verified, and refused, as itself', async () => {
    const t = signWith(keys.EdDSA, claimsFor('cached-alice'));
    for (let i = 0; i < 3; i++) assert.equal((await call(server, t)).status, 200);
    const [h, , s] = t.split('.');
    await assertRefused(server, `${h}.${b64(claimsFor('cached-admin'))}.${s}`, set, 'invalid token', 'edited under a remembered signature');
    assert.equal((await call(server, t)).status, 200, 'the original still is');
  });
});

describe('The key set, read and read again', () => {
  test('an unknown kid fetches the set again: "that request waits for the fetch and is judged by the new set"; once a minute', async () => {
    const a = keyFor('RS256', 'rot-a');
    const idp = await idpWith([jwkOf(a)]);
    const s = await serverWith(jwksEnv(idp));
    assert.equal(idp.gets, 1, 'the start read it once');
    const b = keyFor('ES256', 'rot-b');
    idp.keys = [jwkOf(a), jwkOf(b)];
    const rotated = signWith(b, claimsFor('after-rotation'));
    await assertAccepted(s, rotated, idp.keys, 'a token of a key published since the start');
    assert.equal(idp.gets, 2, 'one read for the unknown kid');
    // within the minute: an unknown kid is refused without a read, even once the key is published
    const c = keyFor('EdDSA', 'rot-c');
    idp.keys = [jwkOf(a), jwkOf(b), jwkOf(c)];
    await assertRefused(s, signWith(c, claimsFor('too-soon')), [], 'invalid token', 'a second unknown kid within the minute');
    await assertRefused(s, signWith(keyFor('EdDSA', 'never'), claimsFor('x')), [], 'invalid token', 'a kid nobody publishes');
    assert.equal(idp.gets, 2, 'no read for them');
    assert.equal((await call(s, rotated)).status, 200);
  });

  test('[D-jwks-4] remembered tokens of a withdrawn key are refused from the read that drops it', async () => {
    const a = keyFor('ES256', 'old');
    const b = keyFor('ES256', 'new');
    const idp = await idpWith([jwkOf(a)]);
    const s = await serverWith(jwksEnv(idp));
    const old = signWith(a, claimsFor('alice'));
    for (let i = 0; i < 2; i++) assert.equal((await call(s, old)).status, 200, 'remembered');
    idp.keys = [jwkOf(b)];
    await assertAccepted(s, signWith(b, claimsFor('bob')), idp.keys, 'the new key (its kid has the set read)');
    await assertRefused(s, old, idp.keys, 'invalid token', 'a remembered token of the withdrawn key');
  });

  test('[D-jwks-8] an unknown kid joins a timed read under way, which counts for nothing: the next is read for at once', async () => {
    const a = keyFor('RS256', 'join-a');
    const idp = await idpWith([jwkOf(a)]);
    const s = await serverWith(jwksEnv(idp, { AUTH_JWKS_REFRESH: '1s' }));
    idp.mode = 'hang';
    await until(() => idp.hanging.length > 0, 'a timed read');
    const b = keyFor('RS256', 'join-b');
    idp.keys = [jwkOf(a), jwkOf(b)];
    const waiting = call(s, signWith(b, claimsFor('joined')));
    // the request waits on the read under way; answering it lets the request through
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(idp.hanging.length, 1, 'the request started no read of its own');
    idp.mode = 'ok';
    for (const res of idp.hanging.splice(0)) res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys: idp.keys }));
    assert.equal((await waiting).status, 200, 'judged by the set the read brought');
    const c = keyFor('RS256', 'join-c');
    idp.keys = [...idp.keys, jwkOf(c)];
    assert.equal((await call(s, signWith(c, claimsFor('next')))).status, 200, 'the joined read did not use up the minute');
  });

  test('"fetched again every AUTH_JWKS_REFRESH"; "While fetching fails, the last good set stays in use (logged once a minute)"', async () => {
    const a = keyFor('PS256', 'timed-a');
    const idp = await idpWith([jwkOf(a)]);
    const s = await serverWith(jwksEnv(idp, { AUTH_JWKS_REFRESH: '1s' }));
    const token = signWith(a, claimsFor('steady'));
    assert.equal((await call(s, token)).status, 200);
    // use up the unknown kid's read, so only the timed reads can bring a new key
    await assertRefused(s, signWith(keyFor('RS256', 'nobody'), claimsFor('x')), [], 'invalid token', 'unknown kid');
    const b = keyFor('ES384', 'timed-b');
    idp.keys = [jwkOf(a), jwkOf(b)];
    const tb = signWith(b, claimsFor('timed'));
    await until(async () => (await call(s, tb)).status === 200, 'a timed read bringing the new key');
    for (const mode of ['fail', 'junk', 'hang', 'huge', 'redirect']) {
      idp.mode = mode;
      const g = idp.gets;
      await until(() => idp.gets >= g + 2 || (mode === 'hang' && idp.hanging.length > 0), `reads answered ${mode}`);
      assert.equal((await call(s, token)).status, 200, `the last good set stays in use (${mode})`);
      assert.equal((await call(s, tb)).status, 200);
      if (mode === 'hang') {
        for (const res of idp.hanging.splice(0)) res.destroy();
      }
    }
    const failed = s.logs().filter((l) => l.msg.startsWith('reading the signing keys of AUTH_JWKS failed'));
    assert.equal(failed.length, 1, 'one line for a minute of failures');
    assert.equal(failed[0].level, 'warn');
    assert.equal(failed[0].reason, 'answered 500');
    idp.mode = 'ok';
    await until(() => s.logs().some((l) => l.msg === 'signing keys of AUTH_JWKS read again after failures'), 'the recovery line');
    assert.equal(s.child.exitCode, null, 'the server is up');
  });

  test('"AUTH_JWKS: a JSON Web Key Set, as a file path": read at start and for an unknown kid; AUTH_USER_CLAIM, AUTH_HS256=off', async () => {
    const dir = tempDir();
    const file = join(dir, 'jwks.json');
    const a = keyFor('EdDSA', 'file-a');
    writeFileSync(file, JSON.stringify({ keys: [jwkOf(a)] }));
    const s = await serverWith({ AUTH_JWKS: file, AUTH_USER_CLAIM: 'preferred_username', AUTH_HS256: 'off', AUTH_JWKS_REFRESH: '2h' });
    const t = signWith(a, claimsFor('uuid-1', { preferred_username: 'ana' }));
    const created = await call(s, t, 'POST');
    assert.equal(created.status, 201);
    assert.equal(created.body.data.user, 'ana', 'the user id is AUTH_USER_CLAIM');
    await assertRefused(s, signWith(a, claimsFor('uuid-2')), [], 'invalid token', 'no preferred_username', { jose: false });
    await assertRefused(s, signWith(a, claimsFor('uuid-2', { preferred_username: '' })), [], 'invalid token', 'an empty one', { jose: false });
    await assertRefused(s, signWith(a, claimsFor('uuid-2', { preferred_username: 42 })), [], 'invalid token', 'a number', { jose: false });
    // AUTH_HS256=off: our own tokens are refused, however well signed
    await assertRefused(s, tokenFor('ana'), [], 'invalid token', 'an HS256 token', { jose: false });
    const b = keyFor('ES256', 'file-b');
    writeFileSync(file, JSON.stringify({ keys: [jwkOf(a), jwkOf(b)] }));
    assert.equal((await call(s, signWith(b, claimsFor('x', { preferred_username: 'ben' })))).status, 200, 'the file is read again for an unknown kid');
    removeDir(dir);
  });

  test('[D-jwks-6] AUTH_USER_CLAIM names the user of the provider\'s tokens only: ours keep sub', async () => {
    const a = keyFor('ES256', 'claim-a');
    const idp = await idpWith([jwkOf(a)]);
    const s = await serverWith(jwksEnv(idp, { AUTH_USER_CLAIM: 'email' }));
    const created = await call(s, signWith(a, claimsFor('uuid', { email: 'ana@example.org' })), 'POST');
    assert.equal(created.body.data.user, 'ana@example.org');
    const own = await call(s, tokenFor('own-user', { iss: ISSUER, aud: AUDIENCE, email: 'x@example.org' }), 'POST');
    assert.equal(own.body.data.user, 'own-user');
    await assertRefused(s, signWith(a, claimsFor('uuid', { email: 'x'.repeat(201) })), [], 'invalid token', 'longer than 200', { jose: false });
  });

  test('[D-jwks-3] a set with no key this server can use fails the start; keys it cannot use are skipped and listed', async () => {
    const small = generateKeyPairSync('rsa', { modulusLength: 1024 });
    const p521 = generateKeyPairSync('ec', { namedCurve: 'P-521' });
    const unusable = [
      jwkOf(encKey, { use: 'enc', alg: 'RSA-OAEP' }),
      { ...small.publicKey.export({ format: 'jwk' }), kid: 'small', use: 'sig', alg: 'RS256' },
      { ...p521.publicKey.export({ format: 'jwk' }), kid: 'p521', use: 'sig', alg: 'ES512' },
      { kty: 'oct', k: b64('0123456789abcdef0123456789abcdef'), kid: 'hmac', alg: 'HS256' },
      { ...jwkOf(keys.RS256), kid: 'verify-not', key_ops: ['encrypt'] },
      { kty: 'RSA', kid: 'broken', n: 'AQAB', e: 'AQAB' },
      'not an object',
    ];
    const idp = await idpWith(unusable);
    const r = await failedStart({ AUTH_JWKS: idp.url });
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /^chat-session-api: AUTH_JWKS: http:\/\/127\.0\.0\.1:\d+\/realms\/x\/protocol\/openid-connect\/certs holds no key this server can use/);
    assert.equal(r.stderr.trim().split('\n').length, 1, 'one line');
    idp.keys = [...unusable, jwkOf(keys.ES256)];
    const s = await serverWith(jwksEnv(idp));
    const line = s.logs().find((l) => l.msg === 'signing keys of AUTH_JWKS loaded');
    assert.deepEqual(line.keys, [keys.ES256.kid]);
    assert.deepEqual(line.skipped.map((k) => k.kid ?? null), ['enc-key', 'small', 'p521', 'hmac', 'verify-not', 'broken', null]);
    await assertAccepted(s, signWith(keys.ES256, claimsFor('a')), idp.keys.filter((k) => typeof k === 'object' && k.kty !== 'oct' && k.kid !== 'broken'), 'the usable key');
  });

  test('[D-jwks-2] a read of the set is bounded: the start fails with one line, exit 1, before anything is written', async () => {
    const port = await closedPort();
    const idp = await idpWith([jwkOf(keys.RS256)]);
    const cases = [
      [{ AUTH_JWKS: `http://127.0.0.1:${port}/realms/x/protocol/openid-connect/certs` }, /^chat-session-api: AUTH_JWKS: cannot fetch http:\/\/127\.0\.0\.1:\d+\/realms\/x\/protocol\/openid-connect\/certs \(ECONNREFUSED\)$/],
      [{ AUTH_JWKS: `http://user:pass@127.0.0.1:${port}/certs?token=secret` }, /^chat-session-api: AUTH_JWKS: cannot fetch http:\/\/127\.0\.0\.1:\d+\/certs \(ECONNREFUSED\)$/],
      [{ AUTH_JWKS: '/nonexistent/jwks.json' }, /^chat-session-api: AUTH_JWKS: cannot read \/nonexistent\/jwks\.json \(ENOENT\)$/],
      ['fail', /cannot fetch .* \(answered 500\)$/],
      ['redirect', /cannot fetch .* \(answered 302, a redirect \(give the URL it points to\)\)$/],
      ['huge', /cannot fetch .* \(larger than 1048576 bytes\)$/],
      ['junk', /AUTH_JWKS: http:\/\/127\.0\.0\.1:\d+\/realms\/x\/protocol\/openid-connect\/certs is not a JSON Web Key Set: it is not JSON$/],
      ['hang', /cannot fetch .* \(no whole answer within 5 s\)$/],
    ];
    for (const [how, expected] of cases) {
      if (typeof how === 'string') idp.mode = how;
      const r = await failedStart(typeof how === 'string' ? { AUTH_JWKS: idp.url } : how);
      assert.equal(r.code, 1, `${JSON.stringify(how)}: ${r.stderr}`);
      assert.match(r.stderr.trim(), expected, JSON.stringify(how));
      assert.equal(r.stderr.trim().split('\n').length, 1, 'one line');
      assert.doesNotMatch(r.stderr, /pass|secret/, 'no credentials of the URL');
      assert.deepEqual(readdirSync(r.dataDir), [], 'nothing written');
      assert.equal(existsSync(join(r.dataDir, 'auth-secret')), false);
      removeDir(r.dataDir);
    }
  });

  test('[D-jwks-7] settings that cannot work are refused at start, and token refuses to sign with AUTH_HS256=off', () => {
    const dir = tempDir();
    const bad = [
      [{ AUTH_HS256: 'off' }, /AUTH_HS256=off needs AUTH_JWKS/],
      [{ AUTH_USER_CLAIM: 'email' }, /AUTH_USER_CLAIM is about the tokens of AUTH_JWKS, which is not set/],
      [{ AUTH_JWKS_REFRESH: '1h' }, /AUTH_JWKS_REFRESH is about the tokens of AUTH_JWKS/],
      [{ AUTH_JWKS: 'ftp://idp.example/certs' }, /AUTH_JWKS must be a file path or an http\(s\):\/\/ URL/],
      [{ AUTH_JWKS: 'https://' }, /AUTH_JWKS must be a file path or an http\(s\):\/\/ URL/],
      [{ AUTH_JWKS: 'jwks.json', AUTH_JWKS_REFRESH: '500ms' }, /AUTH_JWKS_REFRESH must be at least 1s/],
      [{ AUTH_JWKS: 'jwks.json', AUTH_JWKS_REFRESH: 'hourly' }, /AUTH_JWKS_REFRESH must be a duration such as 500ms, 15s, 2m or 1h/],
      [{ AUTH_JWKS: 'jwks.json', AUTH_HS256: 'maybe' }, /AUTH_HS256 must be on or off/],
    ];
    for (const [env, expected] of bad) {
      const r = runCli([], { env: { DATA_DIR: dir, PORT: '0', ...env }, cwd: dir });
      assert.equal(r.code, 2, `${JSON.stringify(env)}: ${r.stderr}`);
      assert.match(r.stderr, expected);
    }
    const token = runCli(['token', '--sub', 'alice'], { env: { DATA_DIR: dir, AUTH_SECRET: SECRET, AUTH_JWKS: 'jwks.json', AUTH_HS256: 'off' }, cwd: dir });
    assert.equal(token.code, 2);
    assert.equal(token.stdout, '');
    assert.match(token.stderr, /AUTH_HS256=off: the server refuses the tokens this command signs/);
    const help = runCli(['--help']).stdout;
    for (const name of ['AUTH_JWKS / --auth-jwks', 'AUTH_JWKS_REFRESH / --auth-jwks-refresh', 'AUTH_USER_CLAIM / --auth-user-claim', 'AUTH_HS256 / --auth-hs256']) assert.ok(help.includes(name), name);
    assert.match(help, /AUTH_JWKS_REFRESH .*\[default: 1h\]/);
    removeDir(dir);
  });

  test("jose agrees on the tokens the tests make: each algorithm's verifies there, and fails once a byte changes", async () => {
    const set = ALGS.map((a) => jwkOf(keys[a]));
    for (const alg of ALGS) {
      const t = signWith(keys[alg], claimsFor('j'));
      assert.equal(await joseAccepts(t, set), true, alg);
      const sig = Buffer.from(t.split('.')[2], 'base64url');
      sig[sig.length >> 1] ^= 1;
      assert.equal(await joseAccepts(`${t.split('.').slice(0, 2).join('.')}.${sig.toString('base64url')}`, set), false, `${alg} flipped`);
    }
  });
});

test('"jose to check our tokens; none of them enters dist/server.js": the build refuses a bundle holding a package', () => {
  const build = readFileSync(join(SERVER, '..', '..', 'build.mjs'), 'utf8');
  assert.match(build, /must hold src\/ and node: only/);
  const dist = readFileSync(SERVER, 'utf8');
  for (const mark of ['node_modules', 'JWSSignatureVerificationFailed', 'createLocalJWKSet', 'panva']) assert.equal(dist.includes(mark), false, mark);
});
