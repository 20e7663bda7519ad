// LISTEN / NOTIFY on a connection of its own. When that connection drops, the listener makes
// a new one, with growing pauses between attempts, LISTENs again on every channel, and then
// calls onReconnect: notifications sent meanwhile are lost, so its user catches up by
// reading what changed. A quiet connection is pinged, so that a silent network is noticed.
import type { Notification } from './backend.js';
import { Connection } from './connection.js';
import { PgError } from './errors.js';
import { parseDatabaseUrl, type ConnectionConfig } from './url.js';

export type { Notification } from './backend.js';

export interface ListenerEvents {
  /** Each notification on a channel listened to. */
  readonly onNotification: (notification: Notification) => void;
  /** Listening again after the connection was lost (or first failed): what was notified meanwhile was missed. */
  readonly onReconnect?: () => void;
  /** The connection was lost, or an attempt to make it failed; the listener keeps trying. */
  readonly onError?: (error: PgError) => void;
}

export interface ListenerOptions {
  /** The first pause before reconnecting, doubled after each failure (default 100 ms). */
  readonly reconnectMinMs?: number;
  /** The longest pause between attempts (default 5 s). */
  readonly reconnectMaxMs?: number;
  /** How often a quiet connection is pinged (default 30 s). */
  readonly pingIntervalMs?: number;
}

/** A ping or LISTEN longer than this means the connection is gone (see Connection's silence check). */
const STATEMENT_TIMEOUT_MS = 10_000;

/** Channel names are identifiers: quoted, they keep their case and may hold any character. */
function quoteIdentifier(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

export class Listener {
  private readonly config: ConnectionConfig;
  private readonly channels = new Set<string>();
  private connection: Connection | undefined;
  /** Resolves to `connection` once it listens on every channel. */
  private session: Promise<Connection> | undefined;
  private up = false;
  private failures = 0;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private readonly pingTimer: NodeJS.Timeout;
  private closed = false;
  private readonly reconnectMinMs: number;
  private readonly reconnectMaxMs: number;

  /** `database` is a DATABASE_URL or its parsed form. Nothing connects until the first listen(). */
  constructor(
    database: string | ConnectionConfig,
    private readonly events: ListenerEvents,
    options: ListenerOptions = {},
  ) {
    this.config = typeof database === 'string' ? parseDatabaseUrl(database) : database;
    this.reconnectMinMs = options.reconnectMinMs ?? 100;
    this.reconnectMaxMs = options.reconnectMaxMs ?? 5_000;
    this.pingTimer = setInterval(() => this.ping(), options.pingIntervalMs ?? 30_000);
    this.pingTimer.unref();
  }

  /** True while a connection listens on every channel. */
  get connected(): boolean {
    return this.up;
  }

  /**
   * Listens on `channel`. Resolves once the server listens; rejects if that failed now, in
   * which case the listener keeps trying in the background and calls onReconnect on success.
   */
  async listen(channel: string): Promise<void> {
    if (this.closed) throw new PgError('usage', 'the listener is closed');
    this.channels.add(channel);
    const c = await this.connect();
    await c.exec(`LISTEN ${quoteIdentifier(channel)}`); // again if connect() just did: harmless
  }

  async unlisten(channel: string): Promise<void> {
    this.channels.delete(channel);
    if (this.up && this.connection !== undefined) await this.connection.exec(`UNLISTEN ${quoteIdentifier(channel)}`);
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.reconnectTimer);
    clearInterval(this.pingTimer);
    this.up = false;
    await this.connection?.close();
  }

  private connect(): Promise<Connection> {
    this.session ??= this.establish();
    return this.session;
  }

  private async establish(): Promise<Connection> {
    const c = new Connection(this.config, { statementTimeoutMs: STATEMENT_TIMEOUT_MS }, {
      onNotification: (n) => this.deliver(n),
      onClose: (closed, cause) => this.dropped(closed, cause),
    });
    this.connection = c;
    try {
      await c.ready;
      if (this.channels.size > 0) await c.exec([...this.channels].map((ch) => `LISTEN ${quoteIdentifier(ch)}`).join('; '));
    } catch (err) {
      c.destroy(err instanceof PgError ? err : undefined); // so that dropped() schedules the next attempt
      throw err;
    }
    this.up = true;
    return c;
  }

  private dropped(c: Connection, cause: PgError): void {
    if (c !== this.connection) return;
    const wasUp = this.up;
    this.up = false;
    this.connection = undefined;
    this.session = undefined;
    if (this.closed) return;
    this.failures = wasUp ? 0 : this.failures + 1;
    this.callback(() => this.events.onError?.(cause));
    if (this.channels.size > 0) this.scheduleReconnect();
  }

  private scheduleReconnect(): void {
    if (this.reconnectTimer !== undefined || this.closed) return;
    const delay = Math.min(this.reconnectMaxMs, this.reconnectMinMs * 2 ** Math.min(this.failures, 20));
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = undefined;
      if (this.closed || this.session !== undefined) return;
      this.connect().then(
        () => this.callback(() => this.events.onReconnect?.()),
        () => undefined, // dropped() has reported it and scheduled the next attempt
      );
    }, delay);
  }

  private ping(): void {
    // a failure closes the connection, and dropped() takes it from there
    if (this.up && this.connection !== undefined && this.connection.inFlight === 0) this.connection.query('SELECT 1').catch(() => undefined);
  }

  private deliver(n: Notification): void {
    if (this.channels.has(n.channel)) this.callback(() => this.events.onNotification(n));
  }

  /** Runs a user callback; if it throws, that is an uncaught exception (as from an EventEmitter listener), not a broken connection. */
  private callback(fn: () => void): void {
    try {
      fn();
    } catch (err) {
      queueMicrotask(() => {
        throw err;
      });
    }
  }
}
