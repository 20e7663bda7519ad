// Who is asking: the Bearer token of a request becomes a Principal (user id and scopes). A token
// is ours (HS256 with AUTH_SECRET) or the identity provider's (signed by a key of AUTH_JWKS);
// its header's alg says which it claims to be, and each kind is checked by its own rules.
// Verified tokens are remembered by their signature until they expire, so a client reusing its
// token costs one map lookup whatever its algorithm; a token is only remembered once it has
// passed every check. A connection also remembers the last header it authenticated, so a
// keep-alive client sending the same header again costs one string comparison.
import { DomainError } from '../domain/errors.js';
import { Sparing, type Logger } from '../log.js';
import { checkClaims, quoted, readCompact, TokenError, invalid, verifyHs256, type Claims, type CompactToken } from './jwt.js';
import { isSetAlg, verifyWith, type SetAlg, type SetKey } from './jwks.js';
import type { JwksSource } from './jwks-source.js';

export const SCOPES = ['sessions:read', 'sessions:write', 'providers:read', 'users:act'] as const;
/** A scope no token has unless it names it: acting for the end users of a front end (the OpenAI door's X-User-Id). */
const NAMED_ONLY: ReadonlySet<string> = new Set(['users:act']);
export type Scope = (typeof SCOPES)[number];

export interface Principal {
  readonly user: string;
  /** null: the token may do everything (no scope claim; from the key set, none of our words). */
  readonly scopes: ReadonlySet<string> | null;
  /** When the credential stops being accepted (its `exp` plus the leeway); undefined: it does not expire. */
  readonly expiresAtMs?: number | undefined;
}

/** No Bearer credentials were sent at all (answered without `error="invalid_token"`). */
export class NoCredentials extends DomainError {
  override readonly name = 'NoCredentials';
  constructor() {
    super('no_credentials', 'no bearer token');
  }
}

export interface AuthSettings {
  /** The keys of our own HS256 tokens (AUTH_SECRET, then previous ones); none with AUTH_HS256=off. */
  readonly keys: readonly Buffer[];
  readonly issuer: string | undefined;
  readonly audience: string | undefined;
  /** The identity provider's keys (AUTH_JWKS), when set. */
  readonly keySet?: JwksSource | undefined;
  /** The claim of a token from the key set that is the user id (ours use `sub`). */
  readonly userClaim?: string | undefined;
  /** Where refusals are said (once a minute per cause). */
  readonly log?: Logger | undefined;
}

/** Our own tokens: `exp` optional (`token --ttl never`), 30 s of leeway. */
const OWN_LEEWAY_SECONDS = 30;
/** Tokens from the key set: `exp` required, 60 s of leeway (the provider's clock is not ours). */
const SET_LEEWAY_SECONDS = 60;
const CACHE_MAX = 10_000;
/** Tokens without `exp` are re-verified at least this often. */
const NO_EXP_CACHE_MS = 10 * 60 * 1000;
const MAX_TOKEN = 8192;
const REFUSALS_LOGGED_EVERY_MS = 60_000;

interface Cached {
  readonly token: string;
  readonly principal: Principal;
  readonly untilMs: number;
  /** The key of the set that verified it: the token stays good only while the set holds it. */
  readonly key: SetKey | undefined;
}

interface LastOnConnection {
  header: string;
  verified: Cached;
}

/** Whether the token may do what `scope` allows: a token without a scope claim may do everything but `users:act`. */
export function hasScope(p: Principal, scope: Scope): boolean {
  return p.scopes === null ? !NAMED_ONLY.has(scope) : p.scopes.has(scope);
}

export class Authenticator {
  /** Verified tokens by their signature (the entry holds the whole token, compared on a hit). */
  private readonly cache = new Map<string, Cached>();
  private readonly lastOn = new WeakMap<object, LastOnConnection>();
  private readonly refusals = new Map<string, Sparing>();

  constructor(private readonly settings: AuthSettings) {}

  /**
   * The principal of an `Authorization` header value; throws (or rejects with) NoCredentials or
   * TokenError. A promise only when the token names a key the set lacks and the set is read
   * again for it. `connection` (the request's socket) remembers the header it last passed.
   */
  authenticate(header: string | undefined, connection?: object): Principal | Promise<Principal> {
    if (connection === undefined || header === undefined) return principalOf(this.check(header));
    const last = this.lastOn.get(connection);
    if (last !== undefined && last.header === header && this.fresh(last.verified, Date.now())) return last.verified.principal;
    const remember = (verified: Cached): Principal => {
      if (last === undefined) this.lastOn.set(connection, { header, verified });
      else {
        last.header = header;
        last.verified = verified;
      }
      return verified.principal;
    };
    const c = this.check(header);
    return c instanceof Promise ? c.then(remember) : remember(c);
  }

  private fresh(c: Cached, now: number): boolean {
    return c.untilMs > now && (c.key === undefined || this.settings.keySet?.current.holds(c.key) === true);
  }

  private check(header: string | undefined): Cached | Promise<Cached> {
    if (header === undefined) throw new NoCredentials();
    // RFC 9110: the scheme is case-insensitive; one or more spaces before the token
    if (header.length < 7 || header.slice(0, 6).toLowerCase() !== 'bearer' || header.charCodeAt(6) !== 32) {
      throw new NoCredentials();
    }
    const token = header.slice(7).trim();
    if (token.length === 0 || token.length > MAX_TOKEN) {
      const e = invalid('malformed token');
      this.refused(e);
      throw e;
    }
    const now = Date.now();
    const signature = token.slice(token.lastIndexOf('.') + 1);
    const hit = this.cache.get(signature);
    if (hit !== undefined && hit.token === token) {
      if (this.fresh(hit, now)) return hit;
      this.cache.delete(signature);
    }
    try {
      const t = readCompact(token);
      if (t.alg === 'HS256') return this.remember(signature, token, this.ownToken(t, now), undefined, now);
      if (this.settings.keySet === undefined || !isSetAlg(t.alg)) throw invalid('algorithm not accepted', { alg: quoted(t.alg) });
      const verified = this.setToken(t, t.alg, this.settings.keySet, now);
      if (verified instanceof Promise) {
        return verified.then(
          ([claims, key]) => this.remember(signature, token, claims, key, Date.now()),
          (e: unknown) => {
            this.refused(e);
            throw e;
          },
        );
      }
      return this.remember(signature, token, verified[0], verified[1], now);
    } catch (e) {
      this.refused(e);
      throw e;
    }
  }

  /** An HS256 token signed with our secret, by our rules. */
  private ownToken(t: CompactToken, now: number): Claims {
    if (this.settings.keys.length === 0) throw invalid('HS256 tokens are refused (AUTH_HS256=off)');
    verifyHs256(t, this.settings.keys);
    return checkClaims(t.payloadPart, { ...this.rules(now), userClaim: 'sub', leewaySeconds: OWN_LEEWAY_SECONDS, strict: false });
  }

  /**
   * A token from the identity provider: a key of the set chosen by its kid and fitting its alg,
   * then the set's rules. A kid the set lacks has the set read again (at most once a minute)
   * and the token judged by what it holds then.
   */
  private setToken(t: CompactToken, alg: SetAlg, source: JwksSource, now: number): [Claims, SetKey] | Promise<[Claims, SetKey]> {
    if (source.current.candidates(alg, t.kid) === 'unknown kid') {
      const reading = source.readForUnknownKid();
      if (reading !== undefined) return reading.then(() => this.setTokenOf(t, alg, source, Date.now()));
    }
    return this.setTokenOf(t, alg, source, now);
  }

  private setTokenOf(t: CompactToken, alg: SetAlg, source: JwksSource, now: number): [Claims, SetKey] {
    const keys = source.current.candidates(alg, t.kid);
    if (typeof keys === 'string') throw invalid(keys, { alg, kid: quoted(t.kid ?? null) });
    const key = keys.find((k) => verifyWith(alg, k, t.signingInput, t.signature));
    if (key === undefined) throw invalid('invalid signature', { alg, kid: quoted(t.kid ?? null) });
    const claims = checkClaims(t.payloadPart, { ...this.rules(now), userClaim: this.settings.userClaim ?? 'sub', leewaySeconds: SET_LEEWAY_SECONDS, strict: true });
    return [claims, key];
  }

  private rules(now: number): { issuer: string | undefined; audience: string | undefined; nowSeconds: number } {
    return { issuer: this.settings.issuer, audience: this.settings.audience, nowSeconds: now / 1000 };
  }

  private remember(signature: string, token: string, claims: Claims, key: SetKey | undefined, now: number): Cached {
    const leeway = key === undefined ? OWN_LEEWAY_SECONDS : SET_LEEWAY_SECONDS;
    const expiresAtMs = claims.exp === undefined ? undefined : (claims.exp + leeway) * 1000;
    const principal: Principal = { user: claims.user, scopes: key === undefined ? ownScopes(claims) : setScopes(claims), expiresAtMs };
    const verified: Cached = { token, principal, untilMs: expiresAtMs ?? now + NO_EXP_CACHE_MS, key };
    if (this.cache.size >= CACHE_MAX) {
      const oldest = this.cache.keys().next();
      if (oldest.done !== true) this.cache.delete(oldest.value);
    }
    this.cache.set(signature, verified);
    return verified;
  }

  /** Says why a token was refused, once a minute per cause. */
  private refused(e: unknown): void {
    const log = this.settings.log;
    if (log === undefined || !(e instanceof TokenError)) return;
    let sparing = this.refusals.get(e.reason);
    if (sparing === undefined) this.refusals.set(e.reason, (sparing = new Sparing(REFUSALS_LOGGED_EVERY_MS)));
    if (sparing.due()) log.info('token refused (logged once a minute per reason)', { reason: e.reason, ...e.detail, refusedQuietly: sparing.since });
  }
}

function principalOf(c: Cached | Promise<Cached>): Principal | Promise<Principal> {
  return c instanceof Promise ? c.then((v) => v.principal) : c.principal;
}

/**
 * Our own tokens: `scope` and `scp` limit the token to their words (with both, the words in
 * both, so neither widens the other); with neither the token may do everything.
 */
function ownScopes(c: Claims): ReadonlySet<string> | null {
  const { scope, scp } = c;
  if (scope === undefined && scp === undefined) return null;
  const words = scope !== undefined && scp !== undefined ? scope.filter((w) => scp.includes(w)) : ((scope ?? scp) as readonly string[]);
  return new Set(words);
}

const OURS: ReadonlySet<string> = new Set(SCOPES);

/**
 * A token from the key set: an identity provider writes words of its own (`openid profile`,
 * Entra's `User.Read`), which are not ours and are left out; a claim with none of ours counts as
 * absent, and a token with none of ours anywhere has a user's full access. With our words in
 * both claims, only those in both.
 */
function setScopes(c: Claims): ReadonlySet<string> | null {
  const scope = c.scope?.filter((w) => OURS.has(w));
  const scp = c.scp?.filter((w) => OURS.has(w));
  const a = scope === undefined || scope.length === 0 ? undefined : scope;
  const b = scp === undefined || scp.length === 0 ? undefined : scp;
  if (a === undefined && b === undefined) return null;
  return new Set(a !== undefined && b !== undefined ? a.filter((w) => b.includes(w)) : ((a ?? b) as readonly string[]));
}

export { TokenError };
