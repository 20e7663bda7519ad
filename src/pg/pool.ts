// A pool of connections. One-off queries (`pool.query`) share connections, pipelined: each
// joins the connection whose next write is being gathered, else goes to an idle connection,
// else a new one, else the least busy one, each up to a depth. A
// session (`withConnection`, `transaction`) has a connection to itself until it ends. Past
// all that, callers wait in a bounded queue, for a bounded time. A connection that breaks
// leaves the pool at once; the next demand opens its replacement.
import { Connection, type ConnectionOptions } from './connection.js';
import type { Param, QueryResult } from './query.js';
import { PgError } from './errors.js';
import { parseDatabaseUrl, type ConnectionConfig } from './url.js';

export interface PoolOptions {
  /** Connections at most (default 10). */
  readonly max?: number;
  /** Callers waiting for a connection at most; one more fails at once with `pool_queue_full` (default 1000). */
  readonly maxWaiting?: number;
  /** How long a caller may wait in that queue before failing with `acquire_timeout` (default 10 s). */
  readonly acquireTimeoutMs?: number;
  /** One-off queries in flight on one connection before more wait (default 16). */
  readonly pipelineDepth?: number;
  /** statement_timeout of every connection, in ms (default 30 s; 0: none). */
  readonly statementTimeoutMs?: number;
  /** Prepared statements kept per connection (default 200). */
  readonly statementCacheSize?: number;
}

/** What a session can do: run statements on its one connection, in order. */
export interface Queryable {
  query(text: string, params?: readonly Param[]): Promise<QueryResult>;
  exec(sql: string): Promise<void>;
  /** Writes the statements queued so far now (Connection.send); absent where there is nothing to hurry. */
  send?(): void;
}

export type Isolation = 'read committed' | 'repeatable read' | 'serializable';

const BEGIN: Readonly<Record<Isolation, string>> = {
  'read committed': 'BEGIN ISOLATION LEVEL READ COMMITTED',
  'repeatable read': 'BEGIN ISOLATION LEVEL REPEATABLE READ',
  serializable: 'BEGIN ISOLATION LEVEL SERIALIZABLE',
};

export interface PoolStats {
  readonly connections: number;
  /** Held by sessions. */
  readonly reserved: number;
  /** Queries sent and not yet answered, on all connections. */
  readonly inFlight: number;
  /** Callers in the wait queue. */
  readonly waiting: number;
}

interface Slot {
  readonly connection: Connection;
  /** Held by a session: no one-off query goes to it. */
  reserved: boolean;
  /** Set while a session waits for the one-off queries still on its connection; false if it closed. */
  drained: ((usable: boolean) => void) | undefined;
}

interface Waiter {
  /** Wants a connection of its own (a session), rather than room for one query. */
  readonly exclusive: boolean;
  readonly grant: (slot: Slot) => void;
  readonly fail: (error: PgError) => void;
  readonly timer: NodeJS.Timeout;
}

/** A session's handle on its connection, which stops working when the session ends. */
class Session implements Queryable {
  constructor(private connection: Connection | undefined) {}

  query(text: string, params?: readonly Param[]): Promise<QueryResult> {
    return this.connection === undefined ? Promise.reject(released()) : this.connection.query(text, params);
  }

  exec(sql: string): Promise<void> {
    return this.connection === undefined ? Promise.reject(released()) : this.connection.exec(sql);
  }

  send(): void {
    this.connection?.send();
  }

  end(): void {
    this.connection = undefined;
  }
}

function released(): PgError {
  return new PgError('usage', 'this session has ended: its connection went back to the pool');
}

export class Pool implements Queryable {
  private readonly config: ConnectionConfig;
  private readonly max: number;
  private readonly maxWaiting: number;
  private readonly acquireTimeoutMs: number;
  private readonly pipelineDepth: number;
  private readonly connectionOptions: ConnectionOptions;
  private readonly slots = new Map<Connection, Slot>();
  private readonly waiters: Waiter[] = [];
  private ended = false;

  /** `database` is a DATABASE_URL or its parsed form; a bad URL throws PgError `config` here. */
  constructor(database: string | ConnectionConfig, options: PoolOptions = {}) {
    this.config = typeof database === 'string' ? parseDatabaseUrl(database) : database;
    this.max = positive(options.max ?? 10, 'max');
    this.maxWaiting = positive(options.maxWaiting ?? 1000, 'maxWaiting');
    this.acquireTimeoutMs = positive(options.acquireTimeoutMs ?? 10_000, 'acquireTimeoutMs');
    this.pipelineDepth = positive(options.pipelineDepth ?? 16, 'pipelineDepth');
    const statementTimeoutMs = options.statementTimeoutMs ?? 30_000;
    if (!Number.isInteger(statementTimeoutMs) || statementTimeoutMs < 0) {
      throw new PgError('config', 'pool option statementTimeoutMs must be a whole number of ms, 0 for none');
    }
    this.connectionOptions = {
      statementTimeoutMs,
      statementCacheSize: options.statementCacheSize ?? 200,
    };
  }

  /**
   * Runs one statement on a shared connection, pipelined with others: any connection, so no
   * session state (SET, temporary tables) carries from one call to the next, and no retry:
   * on an `unavailable` error the caller decides whether the statement may be sent again.
   */
  query(text: string, params?: readonly Param[]): Promise<QueryResult> {
    if (this.ended) return Promise.reject(poolClosed());
    if (this.waiters.length === 0) {
      const slot = this.pickShared();
      if (slot !== undefined) return slot.connection.query(text, params);
    }
    return new Promise<QueryResult>((resolve, reject) => {
      this.wait(false, (slot) => resolve(slot.connection.query(text, params)), reject);
    });
  }

  /** Runs SQL through the simple protocol (several statements, no parameters) on a connection of its own. */
  exec(sql: string): Promise<void> {
    return this.withConnection((session) => session.exec(sql));
  }

  /**
   * Lends `fn` a connection of its own: its statements run in order on it (call without
   * awaiting to pipeline them). The connection comes back when `fn` settles; if `fn` left a
   * transaction open or queries in flight, it is closed rather than reused.
   */
  async withConnection<T>(fn: (session: Queryable) => Promise<T>): Promise<T> {
    const slot = await this.acquire();
    const session = new Session(slot.connection);
    try {
      return await fn(session);
    } finally {
      session.end();
      this.release(slot);
    }
  }

  /**
   * A connection of its own right now, without waiting: an idle one, or a new one (its queries
   * then wait for it to be ready); undefined when the caller would have to wait for one
   * (withConnection waits). `done` gives it back as withConnection does when its `fn` settles.
   */
  reserveNow(): { readonly session: Queryable; readonly done: () => void } | undefined {
    if (this.ended || this.waiters.length > 0) return undefined;
    const slot = this.reserve();
    if (slot === undefined) return undefined;
    if (slot.connection.inFlight > 0) {
      slot.reserved = false; // busy with one-off queries: withConnection would wait for them
      return undefined;
    }
    const session = new Session(slot.connection);
    let given = false;
    const done = (): void => {
      if (given) return;
      given = true;
      session.end();
      this.release(slot);
    };
    return { session, done };
  }

  /**
   * BEGIN, `fn`, COMMIT on one connection; ROLLBACK if `fn` throws. Serialization failures
   * and deadlocks are not retried here: they reject with their kind, for the caller to retry.
   */
  transaction<T>(fn: (tx: Queryable) => Promise<T>, options: { readonly isolation?: Isolation } = {}): Promise<T> {
    const begin = options.isolation === undefined ? 'BEGIN' : BEGIN[options.isolation];
    if (begin === undefined) return Promise.reject(new PgError('usage', 'unknown isolation level'));
    return this.withConnection(async (tx) => {
      await tx.query(begin);
      let result: T;
      try {
        result = await fn(tx);
      } catch (err) {
        await tx.query('ROLLBACK').catch(() => undefined); // a broken connection is not reused anyway
        throw err;
      }
      const commit = await tx.query('COMMIT');
      if (commit.command !== 'COMMIT') {
        // COMMIT of a failed transaction answers ROLLBACK: a statement in it failed unawaited
        throw new PgError('server', 'the transaction was rolled back at COMMIT: one of its statements had failed', '25P02');
      }
      return result;
    });
  }

  /** Resolves if the database answers a query now; rejects with why not (`err.unavailable`). */
  async ping(): Promise<void> {
    await this.query('SELECT 1');
  }

  /** True when `pid` is the backend of one of this pool's connections (a notification it sent came from here). */
  servedBy(pid: number): boolean {
    for (const c of this.slots.keys()) if (c.backendPid === pid) return true;
    return false;
  }

  stats(): PoolStats {
    let reserved = 0;
    let inFlight = 0;
    for (const s of this.slots.values()) {
      if (s.reserved) reserved++;
      inFlight += s.connection.inFlight;
    }
    return { connections: this.slots.size, reserved, inFlight, waiting: this.waiters.length };
  }

  /** Refuses new work, fails the waiting callers, and closes every connection after its queries in flight. */
  async end(): Promise<void> {
    this.ended = true;
    for (const w of this.waiters.splice(0)) {
      clearTimeout(w.timer);
      w.fail(poolClosed());
    }
    await Promise.all([...this.slots.keys()].map((c) => c.close()));
  }

  // --- handing out connections ---

  /**
   * Room for one more one-off query: a connection whose next write is being gathered (one
   * write and one answer for many queries), an idle one, a new one, or the least busy one below
   * the depth.
   */
  private pickShared(): Slot | undefined {
    let best: Slot | undefined;
    let idle: Slot | undefined;
    for (const s of this.slots.values()) {
      if (s.reserved || s.connection.closed) continue;
      const n = s.connection.inFlight;
      if (s.connection.gathering && n < this.pipelineDepth) return s;
      if (n === 0) {
        idle ??= s;
        continue;
      }
      if (best === undefined || n < best.connection.inFlight) best = s;
    }
    if (idle !== undefined) return idle;
    if (this.slots.size < this.max) return this.open();
    return best !== undefined && best.connection.inFlight < this.pipelineDepth ? best : undefined;
  }

  /** A connection for a session: idle, new, or the least busy (the session waits for it to drain). */
  private reserve(): Slot | undefined {
    let best: Slot | undefined;
    for (const s of this.slots.values()) {
      if (s.reserved || s.connection.closed) continue;
      if (best === undefined || s.connection.inFlight < best.connection.inFlight) best = s;
      if (s.connection.inFlight === 0) break;
    }
    if ((best === undefined || best.connection.inFlight > 0) && this.slots.size < this.max) best = this.open();
    if (best !== undefined) best.reserved = true;
    return best;
  }

  private async acquire(): Promise<Slot> {
    for (;;) {
      if (this.ended) throw poolClosed();
      const ready = this.waiters.length === 0 ? this.reserve() : undefined;
      const slot = ready ?? (await new Promise<Slot>((resolve, reject) => this.wait(true, resolve, reject)));
      const c = slot.connection;
      if (c.inFlight === 0 || c.closed) return slot;
      const usable = await new Promise<boolean>((resolve) => {
        slot.drained = resolve;
      });
      if (usable) return slot;
      // it broke under the queries that were on it: try again rather than fail a session that never started
    }
  }

  private wait(exclusive: boolean, grant: (slot: Slot) => void, fail: (error: PgError) => void): void {
    if (this.waiters.length >= this.maxWaiting) {
      fail(new PgError('pool_queue_full', `the connection pool's wait queue is full (${this.maxWaiting} waiting)`));
      return;
    }
    const timer = setTimeout(() => {
      const i = this.waiters.indexOf(waiter);
      if (i !== -1) this.waiters.splice(i, 1);
      fail(new PgError('acquire_timeout', `waited ${this.acquireTimeoutMs} ms for a database connection`));
    }, this.acquireTimeoutMs);
    const waiter: Waiter = { exclusive, grant, fail, timer };
    this.waiters.push(waiter);
  }

  /** Serves waiters in order, while there is capacity for the first one. */
  private dispatch(): void {
    while (this.waiters.length > 0 && !this.ended) {
      const w = this.waiters[0] as Waiter;
      const slot = w.exclusive ? this.reserve() : this.pickShared();
      if (slot === undefined) return;
      this.waiters.shift();
      clearTimeout(w.timer);
      w.grant(slot);
    }
  }

  private release(slot: Slot): void {
    slot.reserved = false;
    const c = slot.connection;
    // queries left in flight may belong to a transaction begun but not yet answered
    if (!c.closed && (this.ended || c.inFlight > 0 || c.transactionStatus !== 'idle')) {
      this.slots.delete(c);
      void c.close();
    }
    this.dispatch();
  }

  private open(): Slot {
    const connection = new Connection(this.config, this.connectionOptions, {
      onSettled: (c) => this.settled(c),
      onClose: (c) => this.closed(c),
    });
    const slot: Slot = { connection, reserved: false, drained: undefined };
    this.slots.set(connection, slot);
    return slot;
  }

  private settled(c: Connection): void {
    const slot = this.slots.get(c);
    if (slot?.drained !== undefined && c.inFlight === 0) {
      const drained = slot.drained;
      slot.drained = undefined;
      drained(true);
    }
    if (this.waiters.length > 0) this.dispatch();
  }

  private closed(c: Connection): void {
    const slot = this.slots.get(c);
    this.slots.delete(c);
    if (slot?.drained !== undefined) {
      const drained = slot.drained;
      slot.drained = undefined;
      drained(false);
    }
    if (this.waiters.length > 0) this.dispatch();
  }
}

function poolClosed(): PgError {
  return new PgError('pool_closed', 'the connection pool is closed');
}

function positive(n: number, name: string): number {
  if (!Number.isInteger(n) || n < 1) throw new PgError('config', `pool option ${name} must be a whole number, at least 1`);
  return n;
}
