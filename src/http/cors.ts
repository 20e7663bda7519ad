// CORS for browser front ends (CORS_ORIGIN): answers preflights and marks responses for the
// allowed origins. Tokens travel in the Authorization header, never in cookies, so no
// credentials mode is involved and `*` is safe to offer.

/**
 * What a browser may send: ours, and what the OpenAI door reads and its SDKs send (the openai
 * SDK's `X-Stainless-*`, named in a preflight one by one, are allowed as asked).
 */
const ALLOW_HEADERS = [
  'Authorization',
  'Content-Type',
  'If-Match',
  'X-Request-Id',
  'Idempotency-Key',
  'X-Session-Id',
  'X-Conversation-Key',
  'X-Project-Id',
  'X-User-Id',
  'X-Record',
  'X-OpenWebUI-Chat-Id',
  'X-OpenWebUI-User-Id',
  'X-OpenWebUI-Task',
  'OpenAI-Organization',
  'OpenAI-Project',
];
const ALLOWED = new Set(ALLOW_HEADERS.map((h) => h.toLowerCase()));
const EXPOSE_HEADERS = 'ETag, X-Request-Id, Retry-After, X-Session-Id, X-Turn-Id, X-Should-Retry';

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

  /**
   * Headers for a preflight (OPTIONS) answer about a path that takes `methods`: the headers
   * allowed are ours, and those asked for that are `X-Stainless-*`.
   */
  preflight(origin: string | undefined, methods: readonly string[], asked: string | undefined): string[] {
    const base = this.headers(origin);
    if (base === undefined) return ['vary', 'Origin'];
    const stainless = (asked ?? '')
      .split(',')
      .map((h) => h.trim().toLowerCase())
      .filter((h) => h.startsWith('x-stainless-') && /^[a-z0-9-]+$/.test(h) && !ALLOWED.has(h));
    return [...base, 'access-control-allow-methods', methods.join(', '), 'access-control-allow-headers', [...ALLOW_HEADERS, ...new Set(stainless)].join(', '), 'access-control-max-age', '600'];
  }
}
