// The refusals and failures the service names, each with a code. Every floor below the API
// throws them; none of them knows HTTP: src/api/errors.ts is the one table that gives each code
// its status (and the headers some need).

/** What went wrong, as the API's error table knows it. */
export type ErrorCode =
  /** A request that breaks a rule of its shape (400). */
  | 'invalid'
  | 'no_credentials'
  | 'invalid_token'
  | 'forbidden'
  | 'session_not_found'
  | 'turn_not_found'
  /** A model no provider serves (the OpenAI door, 404). */
  | 'model_not_found'
  | 'precondition_failed'
  | 'quota_exceeded'
  | 'turn_not_streaming'
  /** A turn posted under a turn still `streaming` (409). */
  | 'turn_still_streaming'
  | 'turn_too_large'
  | 'reply_in_progress'
  | 'cannot_reply'
  | 'too_many_streams'
  /** A user's share of the replies in progress (429). */
  | 'too_many_replies'
  /** An answer the request asked for (Accept) that this server does not give (406). */
  | 'not_acceptable'
  | 'busy'
  | 'storage_write_failed'
  | 'storage_unavailable'
  | 'storage_damaged';

/** A refusal or failure with a code and a message a client may read (it leaks no path or secret). */
export class DomainError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    options?: { readonly cause?: unknown; readonly retryAfterSeconds?: number },
  ) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.retryAfterSeconds = options?.retryAfterSeconds;
  }

  /** When to try again, for a refusal that passes (busy, too many replies). */
  readonly retryAfterSeconds: number | undefined;
}

/** The server is at a bound it keeps for everyone (event streams, tickets, replies): try again soon. */
export class ServerBusy extends DomainError {
  override readonly name = 'ServerBusy';
  constructor(message = 'Server is busy', retryAfterSeconds = 1) {
    super('busy', message, { retryAfterSeconds });
  }
}

/** A reply of the session is streaming (409 on the native API; the OpenAI door waits for its end). */
export class ReplyInProgress extends DomainError {
  constructor(readonly turnId: string) {
    super('reply_in_progress', 'A reply is already in progress');
  }
}
