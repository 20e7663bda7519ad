// Sign-in from an identity provider (`get-jwks`): the keys of a key set written to a file the
// servers read as AUTH_JWKS, tokens signed with them, and what one verification costs in-process
// (the work a server does for a token it has not seen: the figure the cache saves).
import { constants, createHmac, createPublicKey, generateKeyPairSync, sign, verify } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SECRET } from './common.mjs';

const b64 = (o) => Buffer.from(JSON.stringify(o)).toString('base64url');

/** The algorithms `get-jwks` compares; HS256 is ours (AUTH_SECRET). */
export const JWKS_ALGS = ['HS256', 'RS256', 'ES256'];

let keys;
/** One RSA 2048 and one P-256 key, made once per run. */
function keyPairs() {
  keys ??= {
    RS256: { kid: 'bench-rsa', ...generateKeyPairSync('rsa', { modulusLength: 2048 }) },
    ES256: { kid: 'bench-ec', ...generateKeyPairSync('ec', { namedCurve: 'P-256' }) },
  };
  return keys;
}

/** Writes the key set (both keys, as Keycloak publishes them) into `dir`; returns its path. */
export function writeKeySet(dir) {
  const k = keyPairs();
  const set = { keys: Object.entries(k).map(([alg, p]) => ({ ...p.publicKey.export({ format: 'jwk' }), kid: p.kid, use: 'sig', alg })) };
  const file = join(dir, 'jwks.json');
  writeFileSync(file, JSON.stringify(set));
  return file;
}

/** A day-long token for `sub` signed by `alg`: HS256 with the bench secret, RS256 / ES256 with the set's keys. */
export function tokenOf(alg, sub) {
  const now = Math.floor(Date.now() / 1000);
  // the set's tokens as Keycloak writes them (scope words not ours: full access); ours without a scope
  const claims = { sub, iat: now, exp: now + 86400, ...(alg === 'HS256' ? {} : { scope: 'openid profile email' }) };
  if (alg === 'HS256') {
    const input = `${b64({ alg, typ: 'JWT' })}.${b64(claims)}`;
    return `${input}.${createHmac('sha256', SECRET).update(input).digest('base64url')}`;
  }
  const k = keyPairs()[alg];
  const input = `${b64({ alg, typ: 'JWT', kid: k.kid })}.${b64(claims)}`;
  const sig = alg === 'ES256' ? sign('sha256', Buffer.from(input), { key: k.privateKey, dsaEncoding: 'ieee-p1363' }) : sign('sha256', Buffer.from(input), k.privateKey);
  return `${input}.${sig.toString('base64url')}`;
}

/**
 * µs per signature check in this process, for each algorithm, as the server makes it for a
 * token it has not seen (the key parsed once, as the server does): a Markdown section.
 */
export function verifyCostSection(n = 2000) {
  const k = keyPairs();
  const rows = [];
  const time = (label, fn) => {
    for (let i = 0; i < 200; i++) fn();
    const t0 = performance.now();
    for (let i = 0; i < n; i++) fn();
    rows.push(`| ${label} | ${(((performance.now() - t0) * 1000) / n).toFixed(1)} |`);
  };
  const hs = tokenOf('HS256', 'x');
  const hsInput = hs.slice(0, hs.lastIndexOf('.'));
  time('HS256 (HMAC-SHA256)', () => createHmac('sha256', SECRET).update(hsInput).digest());
  for (const alg of ['RS256', 'ES256']) {
    const t = tokenOf(alg, 'x');
    const input = Buffer.from(t.slice(0, t.lastIndexOf('.')), 'latin1');
    const sig = Buffer.from(t.slice(t.lastIndexOf('.') + 1), 'base64url');
    const key = createPublicKey({ key: k[alg].publicKey.export({ format: 'jwk' }), format: 'jwk' });
    const opts = alg === 'ES256' ? { key, dsaEncoding: 'ieee-p1363' } : { key, padding: constants.RSA_PKCS1_PADDING };
    time(`${alg} (${alg === 'ES256' ? 'ECDSA P-256' : 'RSA 2048'})`, () => {
      if (!verify('sha256', input, opts, sig)) throw new Error(`${alg}: the bench's own token does not verify`);
    });
  }
  return ['### One signature check, in-process (what a token not yet remembered costs)', '', '| algorithm | µs per check |', '|---|---|', ...rows].join('\n');
}
