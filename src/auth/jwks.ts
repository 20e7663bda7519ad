// An identity provider's keys, read from a JSON Web Key Set (RFC 7517), and the signatures they
// check (RFC 7518): RS256/RS384/RS512 and PS256 with RSA keys, ES256/ES384 with EC keys of the
// matching curve (signatures in JOSE's r||s form), EdDSA with Ed25519. node:crypto does the
// mathematics; what a key may check is decided here, never by the token.
import { constants, createPublicKey, verify, type KeyObject } from 'node:crypto';
import { isPlainObject } from '../domain/schema.js';

export const SET_ALGS = ['RS256', 'RS384', 'RS512', 'PS256', 'ES256', 'ES384', 'EdDSA'] as const;
export type SetAlg = (typeof SET_ALGS)[number];

interface AlgSpec {
  readonly kty: 'RSA' | 'EC' | 'OKP';
  /** The curve an EC or OKP key must be on. */
  readonly crv?: string;
  /** null: EdDSA hashes inside. */
  readonly hash: string | null;
  readonly pss?: boolean;
  /** The exact length of the signature, where the algorithm fixes it. */
  readonly sigBytes?: number;
}

const ALGS: Readonly<Record<SetAlg, AlgSpec>> = {
  RS256: { kty: 'RSA', hash: 'sha256' },
  RS384: { kty: 'RSA', hash: 'sha384' },
  RS512: { kty: 'RSA', hash: 'sha512' },
  PS256: { kty: 'RSA', hash: 'sha256', pss: true },
  ES256: { kty: 'EC', crv: 'P-256', hash: 'sha256', sigBytes: 64 },
  ES384: { kty: 'EC', crv: 'P-384', hash: 'sha384', sigBytes: 96 },
  EdDSA: { kty: 'OKP', crv: 'Ed25519', hash: null, sigBytes: 64 },
};

/** RSA keys shorter than this are not used (RFC 7518 asks for 2048 bits). */
const MIN_RSA_BITS = 2048;

export function isSetAlg(alg: string): alg is SetAlg {
  return Object.hasOwn(ALGS, alg);
}

/** One usable key of the set. */
export interface SetKey {
  readonly kid: string | undefined;
  readonly kty: AlgSpec['kty'];
  readonly crv: string | undefined;
  /** The JWK's own `alg`, when it names one: then only that algorithm. */
  readonly alg: string | undefined;
  readonly key: KeyObject;
  /** The JWK's public members as text: the same key in a later fetch is the same SetKey. */
  readonly id: string;
}

/** The document is not a key set (not JSON, no `keys` array). */
export class NotAKeySet extends Error {
  override readonly name = 'NotAKeySet';
}

/** What checking a token of `alg` naming `kid` can use: keys, or why none. */
export type Candidates = readonly SetKey[] | 'unknown kid' | 'kid required' | 'no key fits the algorithm';

export class KeySet {
  private readonly byId: ReadonlyMap<string, SetKey>;
  private readonly members: ReadonlySet<SetKey>;

  constructor(
    readonly keys: readonly SetKey[],
    /** Keys of the document left out, each with why (for the log). */
    readonly skipped: readonly { kid: string | undefined; why: string }[],
  ) {
    this.byId = new Map(keys.map((k) => [k.id, k]));
    this.members = new Set(keys);
  }

  /** Whether this set still holds `key` (a cached token stays good only as long as its key). */
  holds(key: SetKey): boolean {
    return this.members.has(key);
  }

  /** The same key of an earlier set, so tokens it verified stay remembered. */
  same(id: string): SetKey | undefined {
    return this.byId.get(id);
  }

  /** The keys that may check a token of `alg` naming `kid` (none named: the set's one key). */
  candidates(alg: SetAlg, kid: string | undefined): Candidates {
    let named: readonly SetKey[];
    if (kid === undefined) {
      if (this.keys.length > 1) return 'kid required';
      named = this.keys;
    } else {
      named = this.keys.filter((k) => k.kid === kid);
      if (named.length === 0) return 'unknown kid';
    }
    const spec = ALGS[alg];
    const fit = named.filter((k) => k.kty === spec.kty && (spec.crv === undefined || k.crv === spec.crv) && (k.alg === undefined || k.alg === alg));
    return fit.length === 0 ? 'no key fits the algorithm' : fit;
  }
}

/** Whether `signature` is `key`'s over `input` by `alg` (the key chosen by KeySet.candidates). */
export function verifyWith(alg: SetAlg, key: SetKey, input: string, signature: Buffer): boolean {
  const spec = ALGS[alg];
  if (spec.sigBytes !== undefined && signature.length !== spec.sigBytes) return false;
  const data = Buffer.from(input, 'latin1');
  try {
    if (spec.kty === 'EC') return verify(spec.hash, data, { key: key.key, dsaEncoding: 'ieee-p1363' }, signature);
    if (spec.pss === true) return verify(spec.hash, data, { key: key.key, padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: constants.RSA_PSS_SALTLEN_DIGEST }, signature);
    return verify(spec.hash, data, key.key, signature);
  } catch {
    return false; // a signature of the wrong size for the key, say
  }
}

/**
 * The usable keys of a JWK Set document. Keys whose `use` is not `sig`, whose `key_ops` leave
 * out `verify`, of another type or curve, RSA shorter than 2048 bits, or that do not parse are
 * skipped (and said so). `previous` lends its SetKey objects to keys that did not change.
 */
export function parseKeySet(text: string, previous?: KeySet): KeySet {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    throw new NotAKeySet('it is not JSON');
  }
  if (!isPlainObject(doc) || !Array.isArray(doc['keys'])) throw new NotAKeySet('it has no "keys" array');
  const keys: SetKey[] = [];
  const skipped: { kid: string | undefined; why: string }[] = [];
  for (const jwk of doc['keys'] as unknown[]) {
    const kid = isPlainObject(jwk) && typeof jwk['kid'] === 'string' ? jwk['kid'] : undefined;
    const got = readKey(jwk, kid, previous);
    if (typeof got === 'string') skipped.push({ kid, why: got });
    else keys.push(got);
  }
  return new KeySet(keys, skipped);
}

/** One JWK as a SetKey, or why it is not used. */
function readKey(jwk: unknown, kid: string | undefined, previous: KeySet | undefined): SetKey | string {
  if (!isPlainObject(jwk)) return 'not an object';
  const { kty, crv, use, alg } = jwk;
  const ops = jwk['key_ops'];
  if (use !== undefined && use !== 'sig') return `use is ${JSON.stringify(use)}`;
  if (ops !== undefined && !(Array.isArray(ops) && ops.includes('verify'))) return 'key_ops leave out verify';
  if (alg !== undefined && !(typeof alg === 'string' && isSetAlg(alg))) return `alg ${JSON.stringify(alg)} is not one accepted`;
  const pub = publicMembers(jwk);
  if (typeof pub === 'string') return pub;
  const id = JSON.stringify(pub);
  const same = previous?.same(id);
  if (same !== undefined && same.kid === kid && same.alg === alg) return same;
  let key: KeyObject;
  try {
    key = createPublicKey({ key: pub, format: 'jwk' });
  } catch {
    return 'it does not parse';
  }
  if (kty === 'RSA' && (key.asymmetricKeyDetails?.modulusLength ?? 0) < MIN_RSA_BITS) return `RSA shorter than ${MIN_RSA_BITS} bits`;
  return { kid, kty: kty as SetKey['kty'], crv: typeof crv === 'string' ? crv : undefined, alg: typeof alg === 'string' ? alg : undefined, key, id };
}

/** The members that make the public key, or why the key is not one used here (a private half published by mistake is left out). */
function publicMembers(jwk: Readonly<Record<string, unknown>>): Record<string, string> | string {
  const { kty, crv } = jwk;
  const strings = (...names: string[]): Record<string, string> | string => {
    const out: Record<string, string> = {};
    for (const n of names) {
      const v = jwk[n];
      if (typeof v !== 'string' || v === '') return `no ${n}`;
      out[n] = v;
    }
    return out;
  };
  if (kty === 'RSA') return strings('kty', 'n', 'e');
  if (kty === 'EC') return crv === 'P-256' || crv === 'P-384' ? strings('kty', 'crv', 'x', 'y') : `curve ${JSON.stringify(crv)} is not used`;
  if (kty === 'OKP') return crv === 'Ed25519' ? strings('kty', 'crv', 'x') : `curve ${JSON.stringify(crv)} is not used`;
  return `key type ${JSON.stringify(kty)} is not used`;
}
