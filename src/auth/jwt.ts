// JSON Web Tokens (JWS compact form) with node:crypto: the compact form read, HS256 signing for
// the `token` command and its verification, and the claims every token is held to. Which
// algorithm checks a token is the caller's choice, never the token's (src/auth/authenticate.ts).
import { DomainError } from '../domain/errors.js';
import { createHmac, timingSafeEqual } from 'node:crypto';
import { isPlainObject } from '../domain/schema.js';

/**
 * A token that is not accepted. The message goes into WWW-Authenticate's error_description;
 * for a bearer token it is one of DESCRIPTIONS, and `reason` (with `detail`) tells the log why.
 */
export class TokenError extends DomainError {
  override readonly name = 'TokenError';
  constructor(
    message: string,
    /** Why, for the log: a fixed phrase (one log line a minute each). */
    readonly reason: string = message,
    /** What the token said, for the log (never the answer). */
    readonly detail: Readonly<Record<string, unknown>> = {},
  ) {
    super('invalid_token', message);
  }
}

/** All a client is told of a refused bearer token: which check failed stays in the log. */
export const DESCRIPTIONS = { invalid: 'invalid token', expired: 'token expired', early: 'token not yet valid' } as const;

/** A bearer token refused; the client reads only `invalid token`. */
export function invalid(reason: string, detail?: Readonly<Record<string, unknown>>): TokenError {
  return new TokenError(DESCRIPTIONS.invalid, reason, detail);
}

/** A token in compact form, its header read and its signature decoded; the payload still unread. */
export interface CompactToken {
  readonly alg: string;
  readonly kid: string | undefined;
  /** The header and payload parts with their dot: what the signature covers. */
  readonly signingInput: string;
  readonly payloadPart: string;
  readonly signature: Buffer;
}

export interface Claims {
  /** The user id: `sub`, or for tokens from the key set the claim AUTH_USER_CLAIM names. */
  readonly user: string;
  /** The words of `scope` and of `scp` (each a space-separated string or an array of strings); absent when the claim is. */
  readonly scope?: readonly string[];
  readonly scp?: readonly string[];
  readonly exp?: number;
}

/** What the claims of a token are held to. */
export interface ClaimRules {
  readonly userClaim: string;
  readonly issuer: string | undefined;
  readonly audience: string | undefined;
  readonly leewaySeconds: number;
  readonly nowSeconds: number;
  /** Tokens from the key set must carry `exp`, and an `iat` in the future makes them not yet valid. */
  readonly strict: boolean;
}

const B64URL = /^[A-Za-z0-9_-]*$/;
export const MAX_SUB = 200;
/** The longest detail a log line quotes from a token. */
const DETAIL_CHARS = 100;

function b64urlJson(part: string): string {
  return Buffer.from(part, 'utf8').toString('base64url');
}

/** Signs claims with HS256. */
export function signToken(claims: Readonly<Record<string, unknown>>, key: Buffer): string {
  const input = `${b64urlJson(JSON.stringify({ alg: 'HS256', typ: 'JWT' }))}.${b64urlJson(JSON.stringify(claims))}`;
  return `${input}.${createHmac('sha256', key).update(input).digest('base64url')}`;
}

function decodePart(part: string, what: string): unknown {
  if (part.length === 0 || !B64URL.test(part) || part.length % 4 === 1) throw invalid(`malformed ${what}`);
  try {
    return JSON.parse(Buffer.from(part, 'base64url').toString('utf8'));
  } catch {
    throw invalid(`malformed ${what}`);
  }
}

/** A value from a token as a log line may quote it: short, and a string. */
export function quoted(v: unknown): string {
  const s = typeof v === 'string' ? v : JSON.stringify(v) ?? String(v);
  return s.length > DETAIL_CHARS ? `${s.slice(0, DETAIL_CHARS)}...` : s;
}

/** Splits a compact JWS and reads its header; the signature is not checked here. */
export function readCompact(token: string): CompactToken {
  const first = token.indexOf('.');
  const second = first === -1 ? -1 : token.indexOf('.', first + 1);
  if (second === -1 || token.indexOf('.', second + 1) !== -1) throw invalid('malformed token');
  const header = decodePart(token.slice(0, first), 'header');
  if (!isPlainObject(header)) throw invalid('malformed header');
  const alg = header['alg'];
  if (typeof alg !== 'string') throw invalid('no alg');
  if (header['crit'] !== undefined) throw invalid('unsupported crit header');
  const kid = header['kid'];
  if (kid !== undefined && typeof kid !== 'string') throw invalid('kid must be a string');
  const sigPart = token.slice(second + 1);
  if (!B64URL.test(sigPart)) throw invalid('invalid signature');
  const signature = Buffer.from(sigPart, 'base64url');
  if (signature.toString('base64url') !== sigPart) throw invalid('invalid signature'); // non-canonical encoding
  return { alg, kid, signingInput: token.slice(0, second), payloadPart: token.slice(first + 1, second), signature };
}

/** Checks an HS256 signature against each key in turn (the current secret, then previous ones); throws TokenError. */
export function verifyHs256(t: CompactToken, keys: readonly Buffer[]): void {
  if (t.signature.length !== 32) throw invalid('invalid signature');
  for (const key of keys) {
    const expected = createHmac('sha256', key).update(t.signingInput).digest();
    if (timingSafeEqual(t.signature, expected)) return;
  }
  throw invalid('invalid signature');
}

function optionalNumber(v: unknown, name: string): number | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v)) throw invalid(`${name} must be a number`);
  return v;
}

/**
 * The words of a scope claim: `scope` (RFC 8693) is a space-separated string; identity providers
 * that write `scp` use either that (Azure AD) or an array of strings (Okta), and some write
 * `scope` as an array too. Anything else refuses the token rather than guess at what it allows.
 */
function scopeWords(v: unknown, name: string): string[] | undefined {
  if (v === undefined) return undefined;
  if (typeof v === 'string') return v.split(/\s+/).filter((w) => w !== '');
  if (Array.isArray(v) && v.every((w): w is string => typeof w === 'string')) return v.flatMap((w) => w.split(/\s+/)).filter((w) => w !== '');
  throw invalid(`${name} must be a string or an array of strings`);
}

/** Reads the payload of a token whose signature was verified and holds its claims to `rules`; throws TokenError. */
export function checkClaims(payloadPart: string, rules: ClaimRules): Claims {
  const payload = decodePart(payloadPart, 'payload');
  if (!isPlainObject(payload)) throw invalid('malformed payload');
  const user = payload[rules.userClaim];
  if (typeof user !== 'string' || user.trim() === '') throw invalid(`no user claim`, { claim: rules.userClaim });
  if (user.length > MAX_SUB) throw invalid(`user claim longer than ${MAX_SUB} characters`, { claim: rules.userClaim });
  // the user owns sessions: kept in their JSON, which PostgreSQL reads back only when well-formed
  if (/\p{Cs}/u.test(user)) throw invalid('user claim holds half of a surrogate pair alone', { claim: rules.userClaim });
  const exp = optionalNumber(payload['exp'], 'exp');
  const nbf = optionalNumber(payload['nbf'], 'nbf');
  const iat = optionalNumber(payload['iat'], 'iat');
  const now = rules.nowSeconds;
  if (exp === undefined && rules.strict) throw invalid('no exp');
  if (exp !== undefined && now > exp + rules.leewaySeconds) throw new TokenError(DESCRIPTIONS.expired, 'token expired', { exp });
  if (nbf !== undefined && now + rules.leewaySeconds < nbf) throw new TokenError(DESCRIPTIONS.early, 'token not yet valid (nbf)', { nbf });
  if (iat !== undefined && rules.strict && now + rules.leewaySeconds < iat) throw new TokenError(DESCRIPTIONS.early, 'token issued in the future (iat)', { iat });
  const iss = payload['iss'];
  if (iss !== undefined && typeof iss !== 'string') throw invalid('iss must be a string');
  if (rules.issuer !== undefined && iss !== rules.issuer) throw invalid('unexpected issuer', { iss: quoted(iss ?? null) });
  const aud = payload['aud'];
  if (aud !== undefined && typeof aud !== 'string' && !(Array.isArray(aud) && aud.every((a) => typeof a === 'string'))) {
    throw invalid('aud must be a string or an array of strings');
  }
  if (rules.audience !== undefined && !(aud === rules.audience || (Array.isArray(aud) && aud.includes(rules.audience)))) {
    throw invalid('unexpected audience', { aud: quoted(aud ?? null) });
  }
  const scope = scopeWords(payload['scope'], 'scope');
  const scp = scopeWords(payload['scp'], 'scp');
  return {
    user,
    ...(scope !== undefined ? { scope } : {}),
    ...(scp !== undefined ? { scp } : {}),
    ...(exp !== undefined ? { exp } : {}),
  };
}
