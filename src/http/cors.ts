// CORS for browser front ends (CORS_ORIGIN): answers preflights and marks responses for the
// allowed origins. Tokens travel in the Authorization header, never in cookies, so no
// credentials mode is involved and `*` is safe to offer.

const ALLOW_HEADERS = 'Authorization, Content-Type, If-Match, X-Request-Id';
const EXPOSE_HEADERS = 'ETag, X-Request-Id, Retry-After';

export class Cors {
  private readonly any: boolean;
  private readonly origins: ReadonlySet<string>;

  constructor(allowed: '*' | readonly string[]) {
    this.any = allowed === '*';
    this.origins = new Set(allowed === '*' ? [] : allowed.map((o) => o.toLowerCase()));
  }

  private allowOrigin(origin: string | undefined): string | undefined {
    if (origin === undefined) return undefined;
    if (this.any) return '*';
    return this.origins.has(origin.toLowerCase()) ? origin : undefined;
  }

  /** Headers for an ordinary response to `origin`, or undefined when it is not allowed. */
  headers(origin: string | undefined): string[] | undefined {
    const allow = this.allowOrigin(origin);
    if (allow === undefined) return undefined;
    return ['access-control-allow-origin', allow, 'access-control-expose-headers', EXPOSE_HEADERS, 'vary', 'Origin'];
  }

  /** Headers for a preflight (OPTIONS) answer about a path that takes `methods`. */
  preflight(origin: string | undefined, methods: readonly string[]): string[] {
    const base = this.headers(origin);
    if (base === undefined) return ['vary', 'Origin'];
    return [...base, 'access-control-allow-methods', methods.join(', '), 'access-control-allow-headers', ALLOW_HEADERS, 'access-control-max-age', '600'];
  }
}
