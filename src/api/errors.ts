// One error type for every answer that is not a success, and the one table that turns the
// domain's errors into it. Handlers and everything below them throw; only the pipeline's error
// edge (src/http/pipeline.ts) turns what was thrown into the JSON envelope, through httpErrorOf.
import { DomainError, type ErrorCode } from '../domain/errors.js';

export class HttpError extends Error {
  override readonly name = 'HttpError';
  constructor(
    readonly status: number,
    message: string,
    /** Extra response headers, e.g. `Allow` or `WWW-Authenticate`. */
    readonly headers: readonly (readonly [string, string])[] = [],
    /** Close the connection after answering (the request body was left unread). */
    readonly close = false,
  ) {
    super(message);
  }
}

/** Each code's status; the message is the error's own (it is written for the client). */
const STATUS: { readonly [code in ErrorCode]: number } = {
  invalid: 400,
  no_credentials: 401,
  invalid_token: 401,
  forbidden: 403,
  quota_exceeded: 403,
  session_not_found: 404,
  turn_not_found: 404,
  model_not_found: 404,
  precondition_failed: 412,
  turn_not_streaming: 409,
  turn_still_streaming: 409,
  reply_in_progress: 409,
  cannot_reply: 409,
  turn_too_large: 413,
  not_acceptable: 406,
  too_many_streams: 429,
  too_many_replies: 429,
  storage_write_failed: 500,
  busy: 503,
  storage_unavailable: 503,
  storage_damaged: 503,
};

/**
 * What the edge answers for a thrown error: an HttpError as it is, a domain error by its code;
 * undefined for anything else (an unexpected failure: a 500 that says nothing of it).
 */
export function httpErrorOf(e: unknown): HttpError | undefined {
  if (e instanceof HttpError) return e;
  if (!(e instanceof DomainError)) return undefined;
  switch (e.code) {
    case 'no_credentials':
      return new HttpError(401, 'Unauthorized', [['www-authenticate', 'Bearer']]);
    case 'invalid_token':
      return new HttpError(401, 'Unauthorized', [['www-authenticate', `Bearer error="invalid_token", error_description="${e.message}"`]]);
    default:
      return new HttpError(STATUS[e.code], e.message, e.retryAfterSeconds === undefined ? [] : [['retry-after', String(e.retryAfterSeconds)]]);
  }
}

/** Whether a 5xx is the server's own choice (busy, low on memory, damage it found and logged once): counted, not reported as a failure. */
export function chosen(e: unknown): boolean {
  return (e instanceof HttpError && e.status === 503) || (e instanceof DomainError && (e.code === 'busy' || e.code === 'storage_damaged'));
}

/** Whether the store could not be used right now (its database unreachable, restarting or saturated): 503, reported sparingly. */
export function storeAway(e: unknown): boolean {
  return e instanceof DomainError && e.code === 'storage_unavailable';
}
