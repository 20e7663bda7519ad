// Every failure of the PostgreSQL client is a PgError with a `kind` the caller can switch on:
// the server's SQLSTATE codes that callers act on get their own kind, and so do the
// client's own failures (connection lost, pool full). Messages never carry a password.

export type PgErrorKind =
  // from the server, by SQLSTATE
  | 'unique_violation' // 23505
  | 'serialization_failure' // 40001: retry the transaction
  | 'deadlock' // 40P01: retry the transaction
  | 'query_canceled' // 57014: statement_timeout (or a cancel request)
  | 'admin_shutdown' // 57P01: pg_terminate_backend, or a fast shutdown
  | 'crash_shutdown' // 57P02: another backend crashed; the server restarts
  | 'cannot_connect_now' // 57P03: starting up, shutting down or in recovery
  | 'too_many_connections' // 53300
  | 'auth_failed' // 28P01, 28000, or the server failed to prove it knows the password
  | 'server' // any other ErrorResponse: see `code`
  // from the client
  | 'connect_failed' // no connection could be made: refused, no such socket, timed out
  | 'tls_failed' // TLS was required and refused, or the certificate did not verify
  | 'connection_lost' // the connection closed or broke with queries in flight
  | 'pool_queue_full' // the pool's wait queue is at its bound
  | 'acquire_timeout' // waited in the pool's queue too long
  | 'pool_closed'
  | 'config' // DATABASE_URL or an option is invalid
  | 'usage' // the client was used wrongly: a parameter not a string, a session used after its release
  | 'protocol'; // the server sent something this client does not understand

/** The kinds that mean "the database cannot be used right now": answer 503, retry later. */
const UNAVAILABLE: ReadonlySet<PgErrorKind> = new Set<PgErrorKind>([
  'admin_shutdown',
  'crash_shutdown',
  'cannot_connect_now',
  'too_many_connections',
  'connect_failed',
  'connection_lost',
  'pool_queue_full',
  'acquire_timeout',
]);

const BY_SQLSTATE: ReadonlyMap<string, PgErrorKind> = new Map<string, PgErrorKind>([
  ['23505', 'unique_violation'],
  ['40001', 'serialization_failure'],
  ['40P01', 'deadlock'],
  ['57014', 'query_canceled'],
  ['57P01', 'admin_shutdown'],
  ['57P02', 'crash_shutdown'],
  ['57P03', 'cannot_connect_now'],
  ['53300', 'too_many_connections'],
  ['28P01', 'auth_failed'],
  ['28000', 'auth_failed'],
]);

export class PgError extends Error {
  override readonly name = 'PgError';
  constructor(
    readonly kind: PgErrorKind,
    message: string,
    /** The SQLSTATE, for errors the server sent. */
    readonly code: string | undefined = undefined,
  ) {
    super(message);
  }

  /** True when the database is unreachable, restarting or saturated, rather than the query being wrong. */
  get unavailable(): boolean {
    return UNAVAILABLE.has(this.kind);
  }
}

/** The fields of an ErrorResponse (or NoticeResponse), by their one-letter protocol codes. */
export interface ServerErrorFields {
  readonly severity: string;
  readonly code: string;
  readonly message: string;
  readonly detail: string | undefined;
  readonly hint: string | undefined;
  readonly position: string | undefined;
  readonly where: string | undefined;
  readonly schema: string | undefined;
  readonly table: string | undefined;
  readonly column: string | undefined;
  readonly constraint: string | undefined;
}

/** An error the server reported in an ErrorResponse. */
export class PgServerError extends PgError {
  readonly severity: string;
  readonly detail: string | undefined;
  readonly hint: string | undefined;
  readonly position: string | undefined;
  readonly where: string | undefined;
  readonly schema: string | undefined;
  readonly table: string | undefined;
  readonly column: string | undefined;
  readonly constraint: string | undefined;

  constructor(f: ServerErrorFields) {
    super(BY_SQLSTATE.get(f.code) ?? 'server', f.message, f.code);
    this.severity = f.severity;
    this.detail = f.detail;
    this.hint = f.hint;
    this.position = f.position;
    this.where = f.where;
    this.schema = f.schema;
    this.table = f.table;
    this.column = f.column;
    this.constraint = f.constraint;
  }

  /** FATAL and PANIC end the session: the server closes the connection after sending it. */
  get fatal(): boolean {
    return this.severity === 'FATAL' || this.severity === 'PANIC';
  }
}
