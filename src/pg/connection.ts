// One connection to PostgreSQL: start-up (auth.ts answers the password requests), then
// queries over the extended protocol, pipelined. Every query is its own Parse?/Bind/Execute/
// Sync group, so queries in flight are independent (an error skips only to its own Sync) and
// their answers come back in the order they were sent: each ReadyForQuery settles the oldest
// query in flight. Statements are prepared once per connection, by name, and reused by text.
import { Authentication } from './auth.js';
import {
  MessageReader,
  decodeCommandTag,
  decodeDataRow,
  decodeErrorFields,
  decodeFieldNames,
  decodeNotification,
  decodeParameterStatus,
  type Notification,
} from './backend.js';
import { PgError, PgServerError } from './errors.js';
import { MessageWriter, startupMessage } from './frontend.js';
import { openTransport, type Transport } from './transport.js';
import type { Param, QueryResult, Row } from './query.js';
import { describeTarget, type ConnectionConfig } from './url.js';

export interface ConnectionOptions {
  /**
   * The session's statement_timeout in ms (0: none); past it a query fails with
   * `query_canceled`. It also bounds how long a query may go unanswered before the
   * connection is taken for dead, so a statement meant to run longer belongs in exec(),
   * which that check leaves alone (with SET LOCAL statement_timeout inside).
   */
  readonly statementTimeoutMs?: number;
  /** Prepared statements kept per connection; the least recently used one is closed past it. */
  readonly statementCacheSize?: number;
}

export interface ConnectionEvents {
  /** After each query or exec settles, when the connection may take more work. */
  readonly onSettled?: (connection: Connection) => void;
  /** Once, when the connection is gone, whatever the reason. */
  readonly onClose?: (connection: Connection, cause: PgError) => void;
  readonly onNotification?: (notification: Notification) => void;
}

/** What the server says the session is in, after the last answer: idle, in a transaction, or in a failed one. */
export type TransactionStatus = 'idle' | 'transaction' | 'failed';

/**
 * With queries in flight and nothing received for statement_timeout plus this, the server
 * has gone silent (it would have cancelled the statement by then): the connection is dropped.
 */
const SILENCE_GRACE_MS = 5_000;
const NO_PARAMS: readonly Param[] = [];
/** The protocol counts parameters in 16 bits. */
const MAX_PARAMS = 65_535;
const NO_FIELDS: readonly string[] = Object.freeze([]);

interface Statement {
  readonly name: string;
  readonly text: string;
  fields: readonly string[];
  /** ParseComplete arrived: the statement exists on the server. */
  parsed: boolean;
  /** Why its Parse failed, for the queries that were sent to use it meanwhile. */
  failure: PgError | undefined;
}

interface Pending {
  readonly resolve: (result: QueryResult) => void;
  readonly reject: (error: PgError) => void;
  /** undefined for a simple-protocol exec, whose rows are dropped. */
  readonly statement: Statement | undefined;
  /** This query carries its statement's Parse and Describe. */
  readonly parses: boolean;
  rows: Row[];
  command: string;
  rowCount: number;
  error: PgError | undefined;
}

type State = 'opening' | 'authenticating' | 'ready' | 'closing' | 'closed';

export class Connection {
  /** Settles when the session is ready for queries (queries sent before then wait for it). */
  readonly ready: Promise<void>;
  private readyResolve!: () => void;
  private readyReject!: (e: PgError) => void;

  private state: State = 'opening';
  private socket: Transport | undefined;
  private readonly reader = new MessageReader();
  private readonly writer = new MessageWriter();
  private flushQueued = false;
  private readonly inFlightQueue: Pending[] = [];
  private readonly statements = new Map<string, Statement>();
  private statementCount = 0;
  private readonly statementCacheSize: number;
  private readonly statementTimeoutMs: number;
  private txStatus: TransactionStatus = 'idle';
  private readonly serverParameters = new Map<string, string>();
  private pid = 0;
  /** Answers the server's authentication requests, during start-up only. */
  private auth: Authentication | undefined;
  /** A FATAL error the server sent before closing: the reason given to queries still in flight. */
  private fatal: PgServerError | undefined;
  private startupTimer: NodeJS.Timeout | undefined;
  private silenceTimer: NodeJS.Timeout | undefined;
  private lastProgress = 0;
  private closedPromise: Promise<void> | undefined;
  private closedResolve: (() => void) | undefined;
  private readonly target: string;

  constructor(
    private readonly config: ConnectionConfig,
    options: ConnectionOptions = {},
    private readonly events: ConnectionEvents = {},
  ) {
    this.statementTimeoutMs = options.statementTimeoutMs ?? 0;
    this.statementCacheSize = Math.max(1, options.statementCacheSize ?? 200);
    this.target = describeTarget(config);
    this.ready = new Promise<void>((resolve, reject) => {
      this.readyResolve = resolve;
      this.readyReject = reject;
    });
    this.ready.catch(() => {}); // whoever awaits it sees the rejection; nobody has to
    const started = Date.now();
    openTransport(config, config.connectTimeoutMs).then(
      (socket) => this.start(socket, config.connectTimeoutMs - (Date.now() - started)),
      (err: PgError) => this.fail(err),
    );
  }

  /** Queries sent and not yet answered (including those waiting for start-up). */
  get inFlight(): number {
    return this.inFlightQueue.length;
  }

  /** Queries are waiting to go out in the next write: one more joins that write. */
  get gathering(): boolean {
    return this.flushQueued;
  }

  /** True once closing or closed: no more queries are accepted. */
  get closed(): boolean {
    return this.state === 'closing' || this.state === 'closed';
  }

  get transactionStatus(): TransactionStatus {
    return this.txStatus;
  }

  /** The server process serving this connection (for pg_terminate_backend, pg_stat_activity). */
  get backendPid(): number {
    return this.pid;
  }

  /** A run-time parameter the server reported: server_version, TimeZone, ... */
  parameter(name: string): string | undefined {
    return this.serverParameters.get(name);
  }

  /**
   * Runs one statement with text parameters ($1, $2, ...). Calls made without awaiting go out
   * together and are answered in order; each fails or succeeds on its own.
   */
  query(text: string, params: readonly Param[] = NO_PARAMS): Promise<QueryResult> {
    if (this.closed) return Promise.reject(this.closedError());
    if (params.length > MAX_PARAMS) return Promise.reject(new PgError('usage', `at most ${MAX_PARAMS} parameters`));
    // checked before anything is encoded: a bad value must not leave half a message in the buffer
    for (let i = 0; i < params.length; i++) {
      const p = params[i];
      if (typeof p !== 'string' && p !== null) {
        return Promise.reject(new PgError('usage', `parameter $${i + 1} must be a string or null, not ${typeof p}`));
      }
    }
    let statement = this.statements.get(text);
    const parses = statement === undefined;
    if (statement === undefined) {
      // a NUL would end the text early on the server, running a shorter statement than written
      if (text.includes('\0')) return Promise.reject(new PgError('usage', 'query text contains a NUL character'));
      statement = this.prepare(text);
    } else {
      this.statements.delete(text); // most recently used last
      this.statements.set(text, statement);
    }
    if (parses) {
      this.writer.parse(statement.name, text);
      this.writer.describeStatement(statement.name);
    }
    this.writer.bind(statement.name, params);
    this.writer.executeAndSync();
    return this.enqueue(statement, parses);
  }

  /**
   * Runs SQL through the simple protocol: several statements separated by semicolons, no
   * parameters, rows dropped. For migrations and session commands (LISTEN, SET).
   */
  exec(sql: string): Promise<void> {
    if (this.closed) return Promise.reject(this.closedError());
    if (sql.includes('\0')) return Promise.reject(new PgError('usage', 'SQL text contains a NUL character'));
    this.writer.query(sql);
    return this.enqueue(undefined, false).then(() => undefined);
  }

  /**
   * Writes the queries queued so far now, rather than once the event loop has run the callbacks
   * of what it read: for a caller that has queued all it will and waits for the answers.
   */
  send(): void {
    if (this.state === 'ready') this.flush();
  }

  /** Sends Terminate after the queries in flight and resolves once the socket has closed. */
  close(): Promise<void> {
    if (this.closedPromise === undefined) {
      this.closedPromise = new Promise<void>((resolve) => {
        this.closedResolve = resolve;
      });
    }
    if (this.state === 'closed') {
      this.closedResolve?.();
    } else if (this.state === 'ready') {
      this.state = 'closing';
      this.writer.terminate();
      this.flush();
      this.socket?.end();
    } else if (this.state !== 'closing') {
      this.fail(this.closedError());
    }
    return this.closedPromise;
  }

  /** Drops the connection at once; queries in flight fail with `cause`. */
  destroy(cause: PgError = this.closedError()): void {
    this.fail(cause);
  }

  private closedError(): PgError {
    return new PgError('connection_lost', `connection to ${this.target} is closed`);
  }

  private prepare(text: string): Statement {
    if (this.statements.size >= this.statementCacheSize) {
      const [oldest] = this.statements.values(); // earlier queries that use it are ahead of the Close
      if (oldest !== undefined) this.evict(oldest);
    }
    const statement: Statement = { name: `s${++this.statementCount}`, text, fields: NO_FIELDS, parsed: false, failure: undefined };
    this.statements.set(text, statement);
    return statement;
  }

  /**
   * Forgets a statement and closes it on the server. The Close goes out with the next query:
   * after every query already sent that uses it, and harmless if its Parse failed or is
   * still in flight (closing a statement that does not exist is not an error).
   */
  private evict(statement: Statement): void {
    if (this.statements.get(statement.text) !== statement) return;
    this.statements.delete(statement.text);
    this.writer.closeStatement(statement.name);
  }

  private enqueue(statement: Statement | undefined, parses: boolean): Promise<QueryResult> {
    return new Promise<QueryResult>((resolve, reject) => {
      if (this.inFlightQueue.length === 0) this.lastProgress = Date.now();
      this.inFlightQueue.push({ resolve, reject, statement, parses, rows: [], command: '', rowCount: 0, error: undefined });
      this.scheduleFlush();
      if (this.silenceTimer === undefined && this.statementTimeoutMs > 0 && this.state === 'ready') this.watchSilence();
    });
  }

  private scheduleFlush(): void {
    if (this.flushQueued || this.state !== 'ready') return;
    this.flushQueued = true;
    // the calls made until the event loop has run the callbacks of everything it read go out in one write
    setImmediate(this.flushNow);
  }

  private readonly flushNow = (): void => {
    this.flushQueued = false;
    this.flush();
  };

  private flush(): void {
    const bytes = this.writer.take();
    if (bytes !== undefined && this.socket !== undefined && this.state !== 'closed') this.socket.write(bytes);
  }

  // --- start-up ---

  private start(socket: Transport, timeLeftMs: number): void {
    if (this.state !== 'opening') {
      socket.destroy(); // closed while the socket was opening
      return;
    }
    this.socket = socket;
    this.state = 'authenticating';
    this.auth = new Authentication(this.config.user, this.config.password, this.target);
    socket.on('data', this.onData);
    socket.on('error', (err: Error) => this.fail(new PgError('connection_lost', `connection to ${this.target} lost: ${err.message}`)));
    socket.on('close', () => this.fail(this.fatal ?? new PgError('connection_lost', `connection to ${this.target} closed by the server`)));
    if (socket.destroyed) {
      this.fail(new PgError('connect_failed', `cannot connect to ${this.target}: the connection closed`)); // closed before these listeners came
      return;
    }
    this.startupTimer = setTimeout(
      () => this.fail(new PgError('connect_failed', `cannot connect to ${this.target}: no answer to start-up in ${this.config.connectTimeoutMs} ms`)),
      Math.max(1, timeLeftMs),
    );
    const params: Record<string, string> = {
      user: this.config.user,
      database: this.config.database,
      client_encoding: 'UTF8',
      DateStyle: 'ISO',
    };
    if (this.config.applicationName !== undefined) params['application_name'] = this.config.applicationName;
    if (this.statementTimeoutMs > 0) params['statement_timeout'] = String(this.statementTimeoutMs);
    socket.write(startupMessage(params));
  }

  private becomeReady(): void {
    clearTimeout(this.startupTimer);
    this.auth = undefined;
    this.state = 'ready';
    this.readyResolve();
    if (this.inFlightQueue.length > 0) {
      this.lastProgress = Date.now();
      if (this.statementTimeoutMs > 0) this.watchSilence();
    }
    this.flush();
  }

  // --- answers ---

  private readonly onData = (chunk: Buffer): void => {
    this.lastProgress = Date.now();
    const r = this.reader;
    r.push(chunk);
    try {
      while (this.state !== 'closed' && r.next()) this.handle(r.type, r.body, r.offset, r.bodyEnd);
    } catch (err) {
      this.fail(err instanceof PgError ? err : new PgError('protocol', `${this.target}: ${err instanceof Error ? err.message : String(err)}`));
    }
  };

  private handle(type: number, buf: Buffer, at: number, end: number): void {
    const head = this.inFlightQueue[0];
    switch (type) {
      case 0x44: // D DataRow
        if (head !== undefined && head.statement !== undefined) head.rows.push(decodeDataRow(buf, at));
        return;
      case 0x43: {
        // C CommandComplete
        if (head === undefined) throw new PgError('protocol', 'CommandComplete with no query in flight');
        const tag = decodeCommandTag(buf, at, end);
        head.command = tag.command;
        head.rowCount = tag.rowCount;
        return;
      }
      case 0x5a: // Z ReadyForQuery
        this.txStatus = buf[at] === 0x54 ? 'transaction' : buf[at] === 0x45 ? 'failed' : 'idle';
        if (this.state === 'authenticating') this.becomeReady();
        else this.settle();
        return;
      case 0x31: // 1 ParseComplete
        if (head?.statement !== undefined && head.parses) head.statement.parsed = true;
        return;
      case 0x54: // T RowDescription
        if (head?.statement !== undefined && head.parses) head.statement.fields = Object.freeze(decodeFieldNames(buf, at, end));
        return;
      case 0x32: // 2 BindComplete
      case 0x33: // 3 CloseComplete
      case 0x74: // t ParameterDescription
      case 0x6e: // n NoData
      case 0x49: // I EmptyQueryResponse
      case 0x4e: // N NoticeResponse
      case 0x48: // H CopyOutResponse, then its d CopyData and c CopyDone: dropped like rows of an exec
      case 0x64:
      case 0x63:
        return;
      case 0x45: {
        // E ErrorResponse
        const error = new PgServerError(decodeErrorFields(buf, at, end));
        if (error.fatal) this.fatal = error;
        if (this.state === 'authenticating') throw error;
        if (head !== undefined) head.error ??= error;
        return;
      }
      case 0x41: // A NotificationResponse
        this.events.onNotification?.(decodeNotification(buf, at, end));
        return;
      case 0x53: {
        // S ParameterStatus
        const [name, value] = decodeParameterStatus(buf, at, end);
        this.serverParameters.set(name, value);
        return;
      }
      case 0x4b: // K BackendKeyData
        this.pid = buf.readInt32BE(at);
        return;
      case 0x52: {
        // R Authentication*
        if (this.auth === undefined) throw new PgError('protocol', 'authentication request after start-up');
        const answer = this.auth.answer(buf, at, end);
        if (answer instanceof Promise) {
          answer.then(
            (bytes) => {
              if (this.state === 'authenticating') this.socket?.write(bytes);
            },
            (err: unknown) => this.fail(err instanceof PgError ? err : new PgError('auth_failed', `${this.target}: authentication failed`)),
          );
        } else if (answer !== undefined) {
          this.socket?.write(answer);
        }
        return;
      }
      case 0x47: // G CopyInResponse: a COPY FROM STDIN in an exec; refuse it so the server ends it
        this.writer.copyFail('COPY FROM STDIN is not supported by this client');
        this.flush();
        return;
      default:
        throw new PgError('protocol', `${this.target}: unexpected message type 0x${type.toString(16)}`);
    }
  }

  /** ReadyForQuery: the oldest query in flight is complete. */
  private settle(): void {
    const q = this.inFlightQueue.shift();
    if (q === undefined) throw new PgError('protocol', 'ReadyForQuery with no query in flight');
    const statement = q.statement;
    if (statement !== undefined && q.parses && !statement.parsed) {
      // the Parse failed: the statement does not exist on the server, so forget it
      statement.failure = q.error;
      if (this.statements.get(statement.text) === statement) this.statements.delete(statement.text);
    }
    if (q.error === undefined) {
      q.resolve({ fields: statement?.fields ?? NO_FIELDS, rows: q.rows, command: q.command, rowCount: q.rowCount });
    } else {
      let error = q.error;
      if (statement !== undefined && !q.parses && statement.failure !== undefined && error.code === '26000') {
        error = statement.failure; // sent before its Parse failed: report why the Parse failed
      } else if (statement !== undefined && (error.code === '26000' || error.code === '0A000')) {
        this.evict(statement); // gone (DEALLOCATE) or stale ("cached plan must not change result type"): prepare anew next time
      }
      q.reject(error);
    }
    this.events.onSettled?.(this);
  }

  /**
   * Drops the connection if the server falls silent with queries in flight: each statement
   * ends within statement_timeout, so a longer silence means the server or the network is gone.
   */
  private watchSilence(): void {
    const limit = this.statementTimeoutMs + SILENCE_GRACE_MS;
    const check = (): void => {
      this.silenceTimer = undefined;
      if (this.inFlightQueue.length === 0 || this.state === 'closed') return;
      const quiet = Date.now() - this.lastProgress;
      // an exec may run past statement_timeout on purpose (SET LOCAL in a migration): not watched
      if (quiet >= limit && this.inFlightQueue[0]?.statement !== undefined) {
        this.fail(new PgError('connection_lost', `connection to ${this.target} lost: no answer for ${quiet} ms`));
        return;
      }
      this.silenceTimer = setTimeout(check, Math.max(1000, limit - quiet));
    };
    this.silenceTimer = setTimeout(check, limit);
  }

  /** The end of the connection: every query still in flight fails, once, and the socket goes. */
  private fail(cause: PgError): void {
    if (this.state === 'closed') return;
    const wasReady = this.state === 'ready' || this.state === 'closing';
    this.state = 'closed';
    clearTimeout(this.startupTimer);
    clearTimeout(this.silenceTimer);
    this.auth = undefined;
    this.socket?.destroy();
    this.readyReject(cause);
    // Queries sent on a live session fail as "connection lost" unless the server said why;
    // those that never left (start-up failed) fail with the start-up error itself.
    const lost =
      wasReady && cause.kind !== 'connection_lost'
        ? new PgError('connection_lost', `connection to ${this.target} lost: ${cause.message}`)
        : cause;
    const queue = this.inFlightQueue.splice(0);
    for (const q of queue) q.reject(q.error !== undefined && wasReady ? q.error : lost);
    this.events.onClose?.(this, cause);
    this.closedResolve?.();
  }
}

/** Opens a connection and waits until it is ready for queries. */
export async function connect(config: ConnectionConfig, options: ConnectionOptions = {}, events: ConnectionEvents = {}): Promise<Connection> {
  const connection = new Connection(config, options, events);
  await connection.ready;
  return connection;
}
