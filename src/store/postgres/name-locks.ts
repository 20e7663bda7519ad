// Names one instance at a time may hold, among the instances on one schema (the OpenAI door's
// conversation key while its first request makes the session): PostgreSQL's session-level
// advisory locks on a connection of their own, only ever tried (never waited for inside the
// database), so that nothing else of the instance queues behind a lock another instance holds.
import { connect, type Connection } from '../../pg/connection.js';
import { parseDatabaseUrl } from '../../pg/url.js';
import { Sparing, type Logger } from '../../log.js';
import type { NameLocks } from '../store.js';

/** How often a name held by another instance is tried again. */
const RETRY_MS = 20;
/** How long a name is waited for before going on without it (a holder that hangs must not stop the door). */
const PATIENCE_MS = 5_000;
/**
 * The statement_timeout of the lock's connection: a try never waits in the database, so it also
 * says when a connection that falls silent is taken for dead (the client's watch), instead of
 * every hold of every name waiting on it for as long as TCP takes to notice.
 */
const STATEMENT_TIMEOUT_MS = 2_000;

export class PgNameLocks implements NameLocks {
  private connection: Promise<Connection> | undefined;
  private closed = false;
  /** A database away fails every hold: said once every 10 s, with how many were not. */
  private readonly failing = new Sparing(10_000);

  constructor(
    private readonly url: string,
    /** Names of one schema never meet another's: the schema is part of the lock's key. */
    private readonly schema: string,
    private readonly log: Logger,
  ) {}

  private connected(): Promise<Connection> {
    this.connection ??= connect(parseDatabaseUrl(this.url), { statementTimeoutMs: STATEMENT_TIMEOUT_MS }, {
      // a lock held on a connection that closes is let go by the database: the next hold connects anew
      onClose: () => (this.connection = undefined),
    }).catch((e: unknown) => {
      this.connection = undefined;
      throw e;
    });
    return this.connection;
  }

  async hold(name: string): Promise<() => void> {
    const key = `${this.schema}\n${name}`;
    const until = Date.now() + PATIENCE_MS;
    try {
      for (;;) {
        if (this.closed) return () => undefined;
        const c = await this.connected();
        const r = await c.query('SELECT pg_try_advisory_lock(hashtextextended($1, 0))', [key]);
        if (r.rows[0]?.[0] === 't') break;
        if (Date.now() > until) {
          this.log.warn('a name another instance holds was waited for too long; going on without it', { name });
          return () => undefined;
        }
        await new Promise((resolve) => setTimeout(resolve, RETRY_MS));
      }
    } catch (e) {
      // the database away: what the lock guards (two instances making one thing) goes on unguarded, as with one instance
      if (this.failing.due()) this.log.warn('a name could not be held among the instances; going on without it', { err: (e as Error).message, unlogged: this.failing.since });
      return () => undefined;
    }
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      void this.connected()
        .then((c) => c.query('SELECT pg_advisory_unlock(hashtextextended($1, 0))', [key]))
        .catch(() => undefined); // a connection lost took the lock with it
    };
  }

  async close(): Promise<void> {
    this.closed = true;
    const c = this.connection;
    this.connection = undefined;
    if (c !== undefined) await c.then((x) => x.close(), () => undefined);
  }
}
