// HS256 JSON Web Tokens (JWS compact form) with node:crypto: signing for the `token` command,
// verification for every request. The algorithm is pinned to HS256; nothing in the token
// can choose another.
import { DomainError } from '../domain/errors.js';
import { createHmac, timingSafeEqual } from 'node:crypto';
import { isPlainObject } from '../domain/schema.js';

/** Why a token was refused; the message is safe to send as `error_description`. */
/** A token that is not accepted; the message says why (it goes into WWW-Authenticate's error_description). */
export class TokenError extends DomainError {
  override readonly name = 'TokenError';
  constructor(message: string) {
    super('invalid_token', message);
  }
}

export interface Claims {
  readonly sub: string;
  /**
   * The words the token is limited to, from `scope` and `scp` (each a space-separated string or
   * an array of strings; with both, the words in both); absent when neither is there.
   */
  readonly scope?: readonly string[];
  readonly exp?: number;
  readonly nbf?: number;
  readonly iat?: number;
  readonly iss?: string;
  readonly aud?: string | readonly string[];
}

export interface VerifyOptions {
  /** HMAC keys tried in order: the current secret, then previous ones (rotation). */
  readonly keys: readonly Buffer[];
  readonly issuer?: string | undefined;
  readonly audience?: string | undefined;
  readonly leewaySeconds: number;
  readonly nowSeconds: number;
}

const B64URL = /^[A-Za-z0-9_-]*$/;
export const MAX_SUB = 200;

function b64urlJson(part: string): string {
  return Buffer.from(part, 'utf8').toString('base64url');
}

/** Signs claims with HS256. */
export function signToken(claims: Readonly<Record<string, unknown>>, key: Buffer): string {
  const input = `${b64urlJson(JSON.stringify({ alg: 'HS256', typ: 'JWT' }))}.${b64urlJson(JSON.stringify(claims))}`;
  return `${input}.${createHmac('sha256', key).update(input).digest('base64url')}`;
}

function decodePart(part: string, what: string): unknown {
  if (part.length === 0 || !B64URL.test(part) || part.length % 4 === 1) throw new TokenError(`malformed ${what}`);
  try {
    return JSON.parse(Buffer.from(part, 'base64url').toString('utf8'));
  } catch {
    throw new TokenError(`malformed ${what}`);
  }
}

function optionalNumber(v: unknown, name: string): number | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v)) throw new TokenError(`${name} must be a number`);
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
  throw new TokenError(`${name} must be a string or an array of strings`);
}

/** Verifies a compact HS256 JWT and returns its claims, or throws TokenError. */
export function verifyToken(token: string, opts: VerifyOptions): Claims {
  const first = token.indexOf('.');
  const second = first === -1 ? -1 : token.indexOf('.', first + 1);
  if (second === -1 || token.indexOf('.', second + 1) !== -1) throw new TokenError('malformed token');
  const header = decodePart(token.slice(0, first), 'header');
  if (!isPlainObject(header)) throw new TokenError('malformed header');
  if (header['alg'] !== 'HS256') throw new TokenError('alg must be HS256');
  if (header['crit'] !== undefined) throw new TokenError('unsupported crit header');

  const sigPart = token.slice(second + 1);
  if (sigPart.length !== 43 || !B64URL.test(sigPart)) throw new TokenError('invalid signature');
  const given = Buffer.from(sigPart, 'base64url');
  if (given.toString('base64url') !== sigPart) throw new TokenError('invalid signature'); // non-canonical encoding
  const input = token.slice(0, second);
  let valid = false;
  for (const key of opts.keys) {
    const expected = createHmac('sha256', key).update(input).digest();
    if (given.length === expected.length && timingSafeEqual(given, expected)) {
      valid = true;
      break;
    }
  }
  if (!valid) throw new TokenError('invalid signature');

  const payload = decodePart(token.slice(first + 1, second), 'payload');
  if (!isPlainObject(payload)) throw new TokenError('malformed payload');
  const sub = payload['sub'];
  if (typeof sub !== 'string' || sub.trim() === '') throw new TokenError('sub must be a non-empty string');
  if (sub.length > MAX_SUB) throw new TokenError(`sub must be at most ${MAX_SUB} characters`);
  const exp = optionalNumber(payload['exp'], 'exp');
  const nbf = optionalNumber(payload['nbf'], 'nbf');
  const iat = optionalNumber(payload['iat'], 'iat');
  if (exp !== undefined && opts.nowSeconds > exp + opts.leewaySeconds) throw new TokenError('token expired');
  if (nbf !== undefined && opts.nowSeconds + opts.leewaySeconds < nbf) throw new TokenError('token not yet valid');
  const iss = payload['iss'];
  if (iss !== undefined && typeof iss !== 'string') throw new TokenError('iss must be a string');
  if (opts.issuer !== undefined && iss !== opts.issuer) throw new TokenError('unexpected issuer');
  const aud = payload['aud'];
  if (aud !== undefined && typeof aud !== 'string' && !(Array.isArray(aud) && aud.every((a) => typeof a === 'string'))) {
    throw new TokenError('aud must be a string or an array of strings');
  }
  if (opts.audience !== undefined && !(aud === opts.audience || (Array.isArray(aud) && aud.includes(opts.audience)))) {
    throw new TokenError('unexpected audience');
  }
  const scope = scopeWords(payload['scope'], 'scope');
  const scp = scopeWords(payload['scp'], 'scp');
  // both present: only the words both grant, so neither claim can widen what the other allows
  const words = scope !== undefined && scp !== undefined ? scope.filter((w) => scp.includes(w)) : (scope ?? scp);
  return {
    sub,
    ...(words !== undefined ? { scope: words } : {}),
    ...(exp !== undefined ? { exp } : {}),
    ...(nbf !== undefined ? { nbf } : {}),
    ...(iat !== undefined ? { iat } : {}),
    ...(typeof iss === 'string' ? { iss } : {}),
    ...(aud !== undefined ? { aud: aud as string | string[] } : {}),
  };
}
