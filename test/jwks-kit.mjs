// What the sign-in tests share: keys of every accepted type made by node:crypto, tokens signed
// with them here (JWS compact form, ES* in JOSE's r||s form), a JSON Web Key Set served by a
// local HTTP server at Keycloak's path, and jose (an independent implementation) to check that
// each token the tests sign is what a real library makes of it.
import assert from 'node:assert/strict';
import { createHmac, generateKeyPairSync, sign as cryptoSign, constants } from 'node:crypto';
import { createServer } from 'node:http';
import { createLocalJWKSet, jwtVerify } from 'jose';

/** Where Keycloak serves a realm's keys. */
export const CERTS_PATH = '/realms/x/protocol/openid-connect/certs';
export const ISSUER = 'https://idp.example/realms/x';
export const AUDIENCE = 'chat-api';

const HASH = { RS256: 'sha256', RS384: 'sha384', RS512: 'sha512', PS256: 'sha256', ES256: 'sha256', ES384: 'sha384', EdDSA: null };

/** A key pair for `alg` (RSA 2048 for RS* and PS256, P-256 / P-384, Ed25519), named `kid`. */
export function keyFor(alg, kid = `${alg.toLowerCase()}-key`) {
  const pair =
    alg.startsWith('RS') || alg === 'PS256'
      ? generateKeyPairSync('rsa', { modulusLength: 2048 })
      : alg === 'ES256'
        ? generateKeyPairSync('ec', { namedCurve: 'P-256' })
        : alg === 'ES384'
          ? generateKeyPairSync('ec', { namedCurve: 'P-384' })
          : generateKeyPairSync('ed25519');
  return { alg, kid, ...pair };
}

/** The public JWK of a key as a provider publishes it: kid, use sig, alg (unless `extra` says otherwise). */
export function jwkOf(key, extra = {}) {
  return { ...key.publicKey.export({ format: 'jwk' }), kid: key.kid, use: 'sig', alg: key.alg, ...extra };
}

export const b64 = (o) => Buffer.from(typeof o === 'string' ? o : JSON.stringify(o)).toString('base64url');

/** A compact JWS of `claims` signed by `key` with `alg` (its own unless given); `header` adds to or overrides the header. */
export function signWith(key, claims, { alg = key.alg, header = {} } = {}) {
  const input = `${b64({ alg, typ: 'JWT', kid: key.kid, ...header })}.${b64(claims)}`;
  const data = Buffer.from(input);
  let sig;
  if (alg === 'EdDSA') sig = cryptoSign(null, data, key.privateKey);
  else if (alg.startsWith('ES')) sig = cryptoSign(HASH[alg], data, { key: key.privateKey, dsaEncoding: 'ieee-p1363' });
  else if (alg === 'PS256') sig = cryptoSign('sha256', data, { key: key.privateKey, padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: constants.RSA_PSS_SALTLEN_DIGEST });
  else sig = cryptoSign(HASH[alg], data, key.privateKey);
  return `${input}.${sig.toString('base64url')}`;
}

/** An HS256 token signed with `secret` (a Buffer or text): what an attacker makes of a public key. */
export function hs256With(secret, claims, header = {}) {
  const input = `${b64({ alg: 'HS256', typ: 'JWT', ...header })}.${b64(claims)}`;
  return `${input}.${createHmac('sha256', secret).update(input).digest('base64url')}`;
}

export const nowSeconds = () => Math.floor(Date.now() / 1000);

/** Claims a provider would write for `user`: issuer, audience, five minutes of life. */
export function claimsFor(user, over = {}) {
  const now = nowSeconds();
  return { iss: ISSUER, aud: AUDIENCE, sub: user, iat: now, exp: now + 300, ...over };
}

/**
 * jose's verdict on a token against a key set, with the rules the server is set to: resolves to
 * true when jose accepts it, false when it refuses it.
 */
export async function joseAccepts(token, keys, { issuer = ISSUER, audience = AUDIENCE } = {}) {
  try {
    await jwtVerify(token, createLocalJWKSet({ keys }), {
      issuer,
      audience,
      clockTolerance: 60,
      requiredClaims: ['exp'],
      algorithms: ['RS256', 'RS384', 'RS512', 'PS256', 'ES256', 'ES384', 'EdDSA'],
    });
    return true;
  } catch {
    return false;
  }
}

/** Asserts that jose accepts (or refuses) the token: our signing and encodings are what a real library makes. */
export async function assertJose(token, keys, accepts, message) {
  assert.equal(await joseAccepts(token, keys), accepts, `jose ${accepts ? 'refused' : 'accepted'} ${message ?? 'the token'}`);
}

/**
 * A local identity provider's key endpoint at Keycloak's path: `keys` is the set it serves now,
 * `mode` how it answers ('ok', 'fail' for 500, 'hang' for no answer, 'huge', 'redirect', 'junk'),
 * `gets` how many times it was asked.
 */
export async function keyServer(keys = []) {
  const idp = { keys, mode: 'ok', gets: 0, hanging: [] };
  const server = createServer((req, res) => {
    if (req.url !== CERTS_PATH) {
      res.writeHead(404).end();
      return;
    }
    idp.gets++;
    switch (idp.mode) {
      case 'fail':
        res.writeHead(500, { 'content-type': 'text/plain' }).end('Internal Server Error');
        return;
      case 'hang':
        idp.hanging.push(res);
        return;
      case 'huge':
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(`{"keys":[],"pad":"${'x'.repeat(1100 * 1024)}"}`);
        return;
      case 'redirect':
        res.writeHead(302, { location: `${CERTS_PATH}/elsewhere` }).end();
        return;
      case 'junk':
        res.writeHead(200, { 'content-type': 'text/html' }).end('<html>sign in</html>');
        return;
      default:
        res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'no-cache' }).end(JSON.stringify({ keys: idp.keys }));
    }
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  idp.url = `http://127.0.0.1:${server.address().port}${CERTS_PATH}`;
  idp.close = async () => {
    for (const res of idp.hanging) res.destroy();
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  };
  return idp;
}

/** The settings of a server that signs users in with `idp`'s keys (Keycloak's shape). */
export function jwksEnv(idp, over = {}) {
  return { AUTH_JWKS: idp.url, AUTH_ISSUER: ISSUER, AUTH_AUDIENCE: AUDIENCE, ...over };
}
