// Sign-in from an identity provider, end to end on this run's engine: a user whose token is
// signed by a key of a Keycloak-style key set creates, reads and lists sessions as themselves.
// The checks themselves (algorithms, claims, the set's reads) are test/once/jwks.test.mjs's.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { newSession, removeDir, startServer } from './helpers.mjs';
import { assertJose, claimsFor, jwkOf, jwksEnv, keyFor, keyServer, signWith } from './jwks-kit.mjs';

let idp;
let server;
const rsa = keyFor('RS256', 'kc-rsa');
const ec = keyFor('ES256', 'kc-ec');

before(async () => {
  idp = await keyServer([jwkOf(rsa), jwkOf(ec)]);
  server = await startServer({ env: jwksEnv(idp, { AUTH_USER_CLAIM: 'preferred_username' }) });
});
after(async () => {
  await server?.stop();
  if (server !== undefined) removeDir(server.dataDir);
  await idp?.close();
});

test('"the server accepts its access tokens as they are": a Keycloak-style set signs RS256 and ES256 users in, on this engine', async () => {
  const tokens = {
    ana: signWith(rsa, claimsFor('f1e2-uuid-ana', { preferred_username: 'ana', scope: 'openid profile email' })),
    ben: signWith(ec, claimsFor('f1e2-uuid-ben', { preferred_username: 'ben', scope: 'openid sessions:read' })),
  };
  for (const [who, token] of Object.entries(tokens)) await assertJose(token, idp.keys, true, `${who}'s token`);
  const created = await server.request('POST', '/api/v1/chat-sessions', { token: tokens.ana, json: newSession({ name: 'from keycloak' }) });
  assert.equal(created.status, 201, created.text);
  assert.equal(created.body.data.user, 'ana', 'the user id is AUTH_USER_CLAIM');
  const id = created.body.data._id;
  const got = await server.request('GET', `/api/v1/chat-sessions/${id}`, { token: tokens.ben });
  assert.equal(got.status, 200, 'ben may read (ACCESS=shared)');
  assert.equal(got.body.data.name, 'from keycloak');
  const mine = await server.request('GET', '/api/v1/chat-sessions', { token: tokens.ana });
  assert.deepEqual(mine.body.data.map((s) => s._id), [id]);
  const bens = await server.request('GET', '/api/v1/chat-sessions', { token: tokens.ben });
  assert.deepEqual(bens.body.data, []);
  const write = await server.request('POST', '/api/v1/chat-sessions', { token: tokens.ben, json: newSession() });
  assert.equal(write.status, 403, 'ben\'s "openid sessions:read" is read-only');
});
