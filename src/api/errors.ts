// One error type for every answer that is not a success. Handlers throw; only the server's
// error edge (server.ts) turns what was thrown into the JSON envelope.

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
