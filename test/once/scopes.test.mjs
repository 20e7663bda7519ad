// Scoped tokens: the scope each route needs, the 403 without it, and the CLI that mints them.
// The features beyond the spec's rows, as the features issue names them (its words, not the
// docs', are what the test names quote). Against the real server over HTTP.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { addTurn, alice, ALL_SCOPES, assert403, assertError, BASE, create, get, MISSING, PROVIDERS, server, sharedServer, turnsOf } from '../api-kit.mjs';
import { newSession, runCli, SECRET, sign, tokenFor } from '../helpers.mjs';

sharedServer({ providers: PROVIDERS });

describe('g. Scoped tokens', () => {
  /** Every route with the scope it needs and a request that succeeds; DELETE last. */
  function routes(id) {
    return [
      ['GET', BASE, 'sessions:read', 200],
      ['GET', `${BASE}?projectId=p&limit=1`, 'sessions:read', 200],
      ['POST', BASE, 'sessions:write', 201, newSession()],
      ['GET', `${BASE}/${id}`, 'sessions:read', 200],
      ['PUT', `${BASE}/${id}`, 'sessions:write', 200, { name: 'scoped' }],
      ['GET', `${BASE}/${id}/turns`, 'sessions:read', 200],
      ['POST', `${BASE}/${id}/turns`, 'sessions:write', 201, { role: 'user', content: 'c' }],
      ['POST', `${BASE}/${id}/archive`, 'sessions:write', 200],
      ['POST', `${BASE}/${id}/unarchive`, 'sessions:write', 200],
      ['DELETE', `${BASE}/${id}`, 'sessions:write', 200],
      ['GET', '/api/v1/providers', 'providers:read', 200],
      ['GET', `/api/v1/providers/${PROVIDERS[0]._id}`, 'providers:read', 200],
    ];
  }
  const call = (token, [method, path, , , json]) => server.request(method, path, { token, json });

  test("each route's scope: reads need sessions:read, writes sessions:write, providers providers:read", async () => {
    const id = (await create(alice))._id;
    for (const r of routes(id)) {
      const [method, path, needed, okStatus] = r;
      const others = ALL_SCOPES.filter((s) => s !== needed).join(' ');
      const denied = await call(tokenFor('alice', { scope: others }), r);
      assert403(denied, `${method} ${path} with "${others}"`);
      const allowed = await call(tokenFor('alice', { scope: needed }), r);
      assert.equal(allowed.status, okStatus, `${method} ${path} with "${needed}": ${allowed.text}`);
    }
  });

  test('"no scope -> everything" (and all three scopes -> everything)', async () => {
    for (const claims of [{}, { scope: ALL_SCOPES.join(' ') }, { scope: `  ${ALL_SCOPES.join('\t ')}\n` }]) {
      const token = tokenFor('alice', claims);
      const id = (await create(alice))._id;
      for (const r of routes(id)) {
        const res = await call(token, r);
        assert.equal(res.status, r[3], `${r[0]} ${r[1]} with ${JSON.stringify(claims)}: ${res.text}`);
      }
    }
  });

  test('"a token whose scope lacks what the route needs -> 403 {success:false, message:\\"Forbidden\\"}" and changes nothing', async () => {
    const s = await create(alice, { name: 'untouched' });
    await addTurn(alice, s._id);
    const before = await get(alice, s._id);
    const reader = tokenFor('alice', { scope: 'sessions:read providers:read' });
    for (const r of routes(s._id).filter((x) => x[2] === 'sessions:write')) {
      const res = await call(reader, r);
      assert403(res, `${r[0]} ${r[1]}`);
      assert.equal(res.headers['content-type'], 'application/json; charset=utf-8');
    }
    const after = await get(alice, s._id);
    assert.deepEqual(after.body, before.body);
    assert.equal((await turnsOf(alice, s._id)).length, 1);
    // 403 comes before validation and before looking the session up
    assert403(await server.request('POST', BASE, { token: reader, json: {} }), 'invalid body');
    assert403(await server.request('POST', BASE, { token: reader, body: '{bad json', headers: { 'content-type': 'application/json' } }), 'bad JSON');
    assert403(await server.request('PUT', `${BASE}/${MISSING}`, { token: reader, json: { name: 'x' } }), 'unknown id');
    assert403(await server.request('GET', `${BASE}?limit=0`, { token: tokenFor('alice', { scope: 'sessions:write' }) }), 'bad limit');
    assert403(await server.request('GET', '/api/v1/providers/not-an-id', { token: tokenFor('alice', { scope: 'sessions:read' }) }), 'bad provider id');
  });

  test('[D-security-6] unknown words of a scope are ignored: "sessions:read bogus" can read', async () => {
    const id = (await create(alice))._id;
    const t = tokenFor('alice', { scope: 'sessions:read bogus admin *' });
    assert.equal((await server.request('GET', BASE, { token: t })).status, 200);
    assert.equal((await server.request('GET', `${BASE}/${id}`, { token: t })).status, 200);
    assert403(await server.request('PUT', `${BASE}/${id}`, { token: t, json: { name: 'x' } }));
    assert403(await server.request('GET', '/api/v1/providers', { token: t }));
    // words are exact and case-sensitive: near misses grant nothing
    for (const scope of ['bogus', 'SESSIONS:READ', 'sessions', 'sessions:*', 'sessions:read:all', 'sessions:readsessions:write', 'sessions:read,sessions:write', '*', 'admin']) {
      const tok = tokenFor('alice', { scope });
      assert403(await server.request('GET', BASE, { token: tok }), `scope ${JSON.stringify(scope)} on GET`);
      assert403(await server.request('POST', BASE, { token: tok, json: newSession() }), `scope ${JSON.stringify(scope)} on POST`);
    }
  });

  test('"an empty scope \\"\\" grants nothing" (the service routes need no token and stay open)', async () => {
    const id = (await create(alice))._id;
    for (const scope of ['', ' ', '\t\n']) {
      const t = tokenFor('alice', { scope });
      for (const r of routes(id)) assert403(await call(t, r), `${r[0]} ${r[1]} with ${JSON.stringify(scope)}`);
      for (const path of ['/healthz', '/api/v1/openapi.json', '/metrics']) {
        assert.equal((await server.request('GET', path, { token: t })).status, 200, path);
      }
    }
    assert.equal((await alice.get(`${BASE}/${id}`)).status, 200, 'the session is still there');
  });

  test('"401 still comes before 403"', async () => {
    const id = (await create(alice))._id;
    const now = Math.floor(Date.now() / 1000);
    const bad = [
      ['no token', undefined],
      ['expired, empty scope', sign({ sub: 'alice', scope: '', exp: now - 3600 })],
      ['expired, read scope', sign({ sub: 'alice', scope: 'sessions:read', exp: now - 3600 })],
      ['wrong key, empty scope', sign({ sub: 'alice', scope: '' }, { secret: 'another-secret-0123456789abcdef0123456789' })],
      ['no sub, empty scope', sign({ scope: '', exp: now + 60 })],
      ['scope an array holding a non-string', sign({ sub: 'alice', scope: ['sessions:read', 1], exp: now + 60 })],
      ['scope null', sign({ sub: 'alice', scope: null, exp: now + 60 })],
      ['scope a number', sign({ sub: 'alice', scope: 1, exp: now + 60 })],
      ['scp null', sign({ sub: 'alice', scp: null, exp: now + 60 })],
      ['scp an object', sign({ sub: 'alice', scp: { 'sessions:read': true }, exp: now + 60 })],
      ['scp an array holding null', sign({ sub: 'alice', scp: [null], exp: now + 60 })],
    ];
    for (const [what, token] of bad) {
      for (const r of routes(id)) {
        const res = await call(token, r);
        assertError(res, 401, 'Unauthorized', `${what}: ${r[0]} ${r[1]}`);
        assert.match(res.headers['www-authenticate'] ?? '', /^Bearer/);
      }
    }
  });

  test("[D-security-7] scp is read as scope is: Azure AD's string and Okta's array; scope may be an array too", async () => {
    const id = (await create(alice))._id;
    for (const claims of [
      { scp: 'sessions:read' },
      { scp: ['sessions:read'] },
      { scp: '  sessions:read\tbogus ' },
      { scp: ['sessions:read', 'bogus'] },
      { scope: ['sessions:read'] },
      { scope: ['sessions:read providers:bogus'] },
    ]) {
      const t = tokenFor('alice', claims);
      for (const r of routes(id)) {
        const res = await call(t, r);
        if (r[2] === 'sessions:read') assert.equal(res.status, r[3], `${r[0]} ${r[1]} with ${JSON.stringify(claims)}: ${res.text}`);
        else assert403(res, `${r[0]} ${r[1]} with ${JSON.stringify(claims)}`);
      }
    }
    for (const scp of ['', [], ['']]) {
      const t = tokenFor('alice', { scp });
      for (const r of routes(id)) assert403(await call(t, r), `${r[0]} ${r[1]} with scp ${JSON.stringify(scp)}: an empty scp grants nothing`);
    }
  });

  test('[D-security-7] with both scope and scp, only the words in both are granted', async () => {
    const id = (await create(alice))._id;
    const cases = [
      [{ scope: 'sessions:read sessions:write', scp: ['sessions:read', 'providers:read'] }, ['sessions:read']],
      [{ scope: ALL_SCOPES.join(' '), scp: 'providers:read' }, ['providers:read']],
      [{ scope: 'sessions:read', scp: 'sessions:write' }, []],
      [{ scope: '', scp: ALL_SCOPES }, []],
      [{ scope: ALL_SCOPES, scp: ALL_SCOPES.join(' ') }, ALL_SCOPES],
    ];
    for (const [claims, granted] of cases) {
      const t = tokenFor('alice', claims);
      // DELETE last in routes(): the session stays for every other row
      for (const r of routes(id)) {
        const res = await call(t, r);
        if (granted.includes(r[2])) assert.equal(res.status, r[3], `${r[0]} ${r[1]} with ${JSON.stringify(claims)}: ${res.text}`);
        else assert403(res, `${r[0]} ${r[1]} with ${JSON.stringify(claims)}`);
      }
    }
  });

  test('"the CLI: node dist/server.js token --sub alice --scope \\"sessions:read\\" mints a scoped token"', async () => {
    const env = { DATA_DIR: server.dataDir, AUTH_SECRET: SECRET };
    const r = runCli(['token', '--sub', 'alice', '--scope', 'sessions:read'], { env, cwd: server.dataDir });
    assert.equal(r.code, 0, r.stderr);
    const token = r.stdout.trim();
    const claims = JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString());
    assert.equal(claims.sub, 'alice');
    assert.equal(claims.scope, 'sessions:read');
    assert.equal((await server.request('GET', BASE, { token })).status, 200);
    assert403(await server.request('POST', BASE, { token, json: newSession() }));
    assert403(await server.request('GET', '/api/v1/providers', { token }));
    const both = runCli(['token', '--sub', 'alice', '--scope', 'sessions:read sessions:write'], { env, cwd: server.dataDir });
    assert.equal(both.code, 0, both.stderr);
    assert.equal((await server.request('POST', BASE, { token: both.stdout.trim(), json: newSession() })).status, 201);
    assert403(await server.request('GET', '/api/v1/providers', { token: both.stdout.trim() }));
    const none = runCli(['token', '--sub', 'alice'], { env, cwd: server.dataDir });
    const plain = JSON.parse(Buffer.from(none.stdout.trim().split('.')[1], 'base64url').toString());
    assert.equal('scope' in plain, false, 'without --scope: no scope claim, so everything');
    assert.equal((await server.request('GET', '/api/v1/providers', { token: none.stdout.trim() })).status, 200);
  });

  test('"an unknown scope word in --scope is refused by the CLI with exit code 2"', () => {
    const env = { DATA_DIR: server.dataDir, AUTH_SECRET: SECRET };
    for (const scope of ['sessions:read bogus', 'bogus', 'SESSIONS:READ', 'sessions:read,sessions:write', '*']) {
      const r = runCli(['token', '--sub', 'alice', '--scope', scope], { env, cwd: server.dataDir });
      assert.equal(r.code, 2, `${scope}: ${r.stdout}${r.stderr}`);
      assert.equal(r.stdout, '', 'no token printed');
      assert.match(r.stderr, /scope/);
    }
    const r = runCli(['token', '--sub', 'alice', '--scope', 'sessions:read bogus'], { env, cwd: server.dataDir });
    assert.match(r.stderr, /bogus/, 'the message names the unknown word');
  });
});
