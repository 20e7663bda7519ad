// Who is asking: the Bearer token of a request becomes a Principal (user id and scopes).
// Verified tokens are remembered until they expire, so a client reusing its token costs
// one map lookup; a token is only remembered once it has passed every check. A connection
// also remembers the last header it authenticated, so a keep-alive client sending the same
// header again costs one string comparison (no hashing of a long token).
import { DomainError } from '../domain/errors.js';
import { TokenError, verifyToken, type Claims } from './jwt.js';

export const SCOPES = ['sessions:read', 'sessions:write', 'providers:read', 'users:act'] as const;
/** A scope no token has unless it names it: acting for the end users of a front end (the OpenAI door's X-User-Id). */
const NAMED_ONLY: ReadonlySet<string> = new Set(['users:act']);
export type Scope = (typeof SCOPES)[number];

export interface Principal {
  readonly user: string;
  /** null: the token has neither a `scope` nor an `scp` claim and may do everything. */
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
  readonly keys: readonly Buffer[];
  readonly issuer: string | undefined;
  readonly audience: string | undefined;
}

const LEEWAY_SECONDS = 30;
const CACHE_MAX = 10_000;
/** Tokens without `exp` are re-verified at least this often. */
const NO_EXP_CACHE_MS = 10 * 60 * 1000;
const MAX_TOKEN = 8192;

interface Cached {
  readonly principal: Principal;
  readonly untilMs: number;
}

interface LastOnConnection {
  header: string;
  principal: Principal;
  untilMs: number;
}

/** Whether the token may do what `scope` allows: a token without a scope claim may do everything but `users:act`. */
export function hasScope(p: Principal, scope: Scope): boolean {
  return p.scopes === null ? !NAMED_ONLY.has(scope) : p.scopes.has(scope);
}

export class Authenticator {
  private readonly cache = new Map<string, Cached>();
  private readonly lastOn = new WeakMap<object, LastOnConnection>();

  constructor(private readonly settings: AuthSettings) {}

  /**
   * The principal of an `Authorization` header value; throws NoCredentials or TokenError.
   * `connection` (the request's socket) remembers the header it last passed.
   */
  authenticate(header: string | undefined, connection?: object): Principal {
    if (connection === undefined || header === undefined) return this.check(header).principal;
    const last = this.lastOn.get(connection);
    if (last !== undefined && last.header === header && last.untilMs > Date.now()) return last.principal;
    const c = this.check(header);
    if (last === undefined) this.lastOn.set(connection, { header, principal: c.principal, untilMs: c.untilMs });
    else {
      last.header = header;
      last.principal = c.principal;
      last.untilMs = c.untilMs;
    }
    return c.principal;
  }

  private check(header: string | undefined): Cached {
    if (header === undefined) throw new NoCredentials();
    // RFC 9110: the scheme is case-insensitive; one or more spaces before the token
    if (header.length < 7 || header.slice(0, 6).toLowerCase() !== 'bearer' || header.charCodeAt(6) !== 32) {
      throw new NoCredentials();
    }
    const token = header.slice(7).trim();
    if (token.length === 0 || token.length > MAX_TOKEN) throw new TokenError('malformed token');
    const now = Date.now();
    const hit = this.cache.get(token);
    if (hit !== undefined) {
      if (hit.untilMs > now) return hit;
      this.cache.delete(token);
    }
    const claims = verifyToken(token, {
      keys: this.settings.keys,
      issuer: this.settings.issuer,
      audience: this.settings.audience,
      leewaySeconds: LEEWAY_SECONDS,
      nowSeconds: now / 1000,
    });
    const principal = principalOf(claims);
    const untilMs = claims.exp !== undefined ? (claims.exp + LEEWAY_SECONDS) * 1000 : now + NO_EXP_CACHE_MS;
    if (this.cache.size >= CACHE_MAX) {
      const oldest = this.cache.keys().next();
      if (oldest.done !== true) this.cache.delete(oldest.value);
    }
    const verified = { principal, untilMs };
    this.cache.set(token, verified);
    return verified;
  }
}

function principalOf(claims: Claims): Principal {
  const expiresAtMs = claims.exp === undefined ? undefined : (claims.exp + LEEWAY_SECONDS) * 1000;
  if (claims.scope === undefined) return { user: claims.sub, scopes: null, expiresAtMs };
  return { user: claims.sub, scopes: new Set(claims.scope), expiresAtMs };
}

export { TokenError };
