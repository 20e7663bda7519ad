// The PostgreSQL engine: several instances of the service on one database. Nothing is kept in
// an instance's memory: reads go to the database (./reads.ts), and each group of writes is one
// transaction that locks what it changes (./group.ts) and applies its Changes (./apply.ts), so
// every instance sees one history. This file opens the store (creating or migrating its schema:
// ./schema.ts), gives the serial writer its groups, reports, and closes it.
import type { ChatSession, Turn } from '../../domain/records.js';
import type { Logger } from '../../log.js';
import type { Quotas } from '../../config.js';
import { PgError } from '../../pg/errors.js';
import { Pool } from '../../pg/pool.js';
import { describeTarget, parseDatabaseUrl } from '../../pg/url.js';
import type { Group, GroupSource, TreeNeeds } from '../group.js';
import { NO_USAGE, StorageWriteFailed, StoreOpenFailed, type Announce, type Broadcast, type ImportSummary, type NameLocks, type SharedEventLog, type Store, type StoreObserver, type StoreStats } from '../store.js';
import { logRepaired } from '../totals.js';
import { SerialWriter } from '../writer.js';
import type { GroupEvents } from './apply.js';
import { channelOf, PgBroadcast, PgEventLog } from './events.js';
import { PgNameLocks } from './name-locks.js';
import { PgGroup } from './group.js';
import { importInto } from './import.js';
import { InstanceLiveness } from './liveness.js';
import { lease, PgReads, rethrow, USAGE_SUMS, usageOfRow } from './reads.js';
import { prepareSchema, quotedSchema, reindexRows } from './schema.js';
import { INDEXING, NO_INDEXING, textArray, type Indexing } from './values.js';

export interface PostgresOptions {
  readonly url: string;
  readonly schema: string;
  readonly poolSize: number;
  /** A streaming turn no instance generates (a client's own) with no write for this long was left by a crash (see leftStreaming); default 5 minutes. */
  readonly streamingIdleMs?: number;
  /** INSTANCE_TIMEOUT, for a store that serves: the instance proves it is alive (./liveness.ts); undefined: it does not (a command). */
  readonly instanceTimeoutMs?: number | undefined;
  readonly log: Logger;
  /** false only to measure what group commit buys: one write per transaction. */
  readonly groupCommit: boolean;
  readonly observer?: StoreObserver | undefined;
  /** For export: reads only; a write is refused. */
  readonly readOnly?: boolean;
  /** What one user's sessions may hold, checked at the serial point. */
  readonly quotas?: Quotas | undefined;
  /** The live feed's events of each group's changes, logged in its transaction (EVENTS=on). */
  readonly announce?: Announce | undefined;
  /** Turns matching a query from which search walks the sessions (SEARCH_WALK_FROM); 1 always walks. */
  readonly searchWalkFrom?: number;
  /** false with SEARCH=off: names and turns are written without their words (the schema notes it; the next start with search on indexes them). */
  readonly search?: boolean;
}

/** How long a start waits for an unreachable database before it gives up. */
const START_PATIENCE_MS = 30_000;

export class PostgresStore extends PgReads implements Store, GroupSource {
  readonly engine = 'postgres';
  protected readonly S: string;
  protected readonly writer: SerialWriter;
  protected readonly scanMax: number;
  protected readonly searchWalkFrom: number | undefined;
  private broadcaster: PgBroadcast | undefined;
  private locks: PgNameLocks | undefined;
  private readonly events: GroupEvents | undefined;
  /** How writes make the words they store (none with SEARCH=off). */
  private readonly index: Indexing;
  private eventLog: PgEventLog | undefined;
  /** A group reads its owners' usage only when a quota needs it (the writer asks for none otherwise). */
  private readonly readUsage: boolean;
  /** This instance's proof that it is alive, when it serves. */
  private readonly liveness: InstanceLiveness | undefined;

  private constructor(
    protected readonly pool: Pool,
    private readonly opts: PostgresOptions,
    private readonly where: string,
  ) {
    super();
    this.S = quotedSchema(opts.schema);
    const q = opts.quotas;
    this.readUsage = q !== undefined && (q.sessions !== undefined || q.turns !== undefined || q.bytes !== undefined);
    this.writer = new SerialWriter(this, opts.log, opts.quotas, opts.groupCommit ? Infinity : 1, true);
    // whole lists hold a connection while the client reads: leave the rest to pages and writes
    this.scanMax = Math.max(1, Math.floor(opts.poolSize / 2));
    this.events = opts.announce === undefined ? undefined : { announce: opts.announce, channel: channelOf(opts.schema) };
    this.index = opts.search === false ? NO_INDEXING : INDEXING;
    this.searchWalkFrom = opts.searchWalkFrom;
    this.liveness = opts.instanceTimeoutMs === undefined || opts.readOnly === true ? undefined : new InstanceLiveness(opts.url, this.S, opts.instanceTimeoutMs, opts.log);
  }

  /** How often the server looks for streaming turns left (the liveness's pace: replies of an instance gone end within INSTANCE_TIMEOUT). */
  get sweepEveryMs(): number | undefined {
    return this.liveness?.sweepEveryMs;
  }

  /** Connects (waiting a while for a database that is starting), creates or migrates the schema. */
  static async open(opts: PostgresOptions): Promise<PostgresStore> {
    let where: string;
    let pool: Pool;
    try {
      where = `PostgreSQL ${describeTarget(parseDatabaseUrl(opts.url))}`;
      pool = new Pool(opts.url, { max: opts.poolSize });
    } catch (e) {
      throw new StoreOpenFailed(`DATABASE_URL: ${(e as Error).message}`);
    }
    quotedSchema(opts.schema);
    const started = Date.now();
    for (let attempt = 1; ; attempt++) {
      try {
        const { reindexed, repaired } = await prepareSchema(pool, opts.schema, where, opts.readOnly !== true, opts.search ?? true);
        if (reindexed !== undefined) opts.log.info('search is on again: indexed every name and turn written while it was off', { documents: reindexed });
        if (repaired !== undefined) logRepaired(opts.log, `${where} schema ${opts.schema}`, repaired);
        break;
      } catch (e) {
        const unavailable = e instanceof PgError && e.unavailable;
        if (!unavailable || Date.now() - started > START_PATIENCE_MS) {
          await pool.end();
          if (e instanceof StoreOpenFailed) throw e;
          throw new StoreOpenFailed(`${where}: ${(e as Error).message}${unavailable ? ` (waited ${Math.round(START_PATIENCE_MS / 1000)} s)` : ''}`);
        }
        if (attempt % 5 === 1) opts.log.warn('the database is not reachable yet; waiting for it', { database: where, err: (e as Error).message });
        await new Promise((r) => setTimeout(r, 1000));
      }
    }
    opts.log.info('postgres store opened', { database: where, schema: opts.schema, poolSize: opts.poolSize });
    const store = new PostgresStore(pool, opts, where);
    try {
      await store.liveness?.start();
    } catch (e) {
      await store.close().catch(() => undefined);
      throw new StoreOpenFailed(`${where}: ${(e as Error).message}`);
    }
    return store;
  }

  /** Indexes every name and turn again, in one transaction. */
  async reindex(): Promise<number> {
    return this.pool.transaction((tx) => reindexRows(tx, this.S)).catch(rethrow);
  }

  async stats(): Promise<StoreStats> {
    const r = (await this.pool.query(`SELECT ${USAGE_SUMS} FROM ${this.S}.usage`).catch(rethrow)).rows[0];
    const p = this.pool.stats();
    return {
      ...(r === undefined ? NO_USAGE : usageOfRow(r)),
      engine: [
        { name: 'postgres_connections', type: 'gauge', help: 'Connections open to the database (DATABASE_POOL_SIZE bounds them).', value: p.connections },
        { name: 'postgres_connections_busy', type: 'gauge', help: 'Connections held by a transaction or a whole-list read.', value: p.reserved },
        { name: 'postgres_waiting', type: 'gauge', help: 'Requests waiting for a connection.', value: p.waiting },
      ],
    };
  }

  /** Resolves when the database answers; StorageUnavailable when it does not. */
  async health(): Promise<void> {
    await this.pool.ping().catch(rethrow);
  }

  // ---- writes: handed to the serial writer by SerialWrites; what the writer asks of the engine ----

  /**
   * Streaming turns left, at any time (instances share the data): a reply whose instance stopped
   * proving it is alive (./liveness.ts; judged only while this one's own proofs go through), one
   * of this instance's that `generating` does not hold and that took no write for as long as an
   * instance takes to be gone (its end could not be recorded), and a turn no instance generates
   * (a client streams it) that took no write (creation, delta, edit) for STREAMING_IDLE.
   */
  async leftStreaming(_atStart: boolean, generating: ReadonlySet<string> = new Set()): Promise<readonly { session: string; turnId: string }[]> {
    const idle = this.opts.streamingIdleMs ?? 5 * 60_000;
    const live = this.liveness;
    // its last write: its last delta's row (a delta leaves the turn's row as it is), else its creation or edit
    const silentFor = (ms: string): string =>
      `t.streamed_at < clock_timestamp() - ${ms}::bigint * interval '1 millisecond'
       AND coalesce((SELECT p.at FROM ${this.S}.turn_pieces p WHERE p.turn = t.id ORDER BY p.seq DESC LIMIT 1), t.streamed_at) < clock_timestamp() - ${ms}::bigint * interval '1 millisecond'`;
    const r = await this.pool.query(
      `SELECT t.session, t.id FROM ${this.S}.turns t
       WHERE t.streamed_at IS NOT NULL AND CASE
         WHEN t.generator IS NULL THEN ${silentFor('$1')}
         WHEN t.generator = $3 THEN NOT (t.id = ANY($4::text[])) AND ${silentFor('$5')}
         ELSE $2::boolean AND NOT EXISTS (SELECT 1 FROM ${this.S}.instances i WHERE i.id = t.generator AND i.seen_at >= clock_timestamp() - $5::bigint * interval '1 millisecond')
       END`,
      [String(idle), String(live?.judging ?? false), live?.id ?? '', textArray([...generating]), String(Math.round(live?.goneAfterMs ?? idle))],
    );
    // an instance gone whose replies are all ended is forgotten
    if (live?.judging === true) {
      await this.pool
        .query(
          `DELETE FROM ${this.S}.instances i WHERE i.seen_at < clock_timestamp() - $1::bigint * interval '1 millisecond'
           AND NOT EXISTS (SELECT 1 FROM ${this.S}.turns t WHERE t.streamed_at IS NOT NULL AND t.generator = i.id)`,
          [String(Math.round(live.goneAfterMs))],
        )
        .catch(rethrow);
    }
    return r.rows.map((row) => ({ session: row[0] as string, turnId: row[1] as string }));
  }

  /** Messages among the instances on this schema (./events.ts PgBroadcast), made when first asked for. */
  broadcast(): Broadcast {
    this.broadcaster ??= new PgBroadcast(this.pool, this.opts.url, `csa_ctl_${channelOf(this.opts.schema).slice('csa_events_'.length)}`, this.opts.log);
    return this.broadcaster;
  }

  /** Names held among the instances on this schema (./name-locks.ts), its connection made when first asked for. */
  nameLocks(): NameLocks {
    this.locks ??= new PgNameLocks(this.opts.url, this.opts.schema, this.opts.log);
    return this.locks;
  }

  /** The feed's log in the schema, read by every instance (./events.ts); undefined unless events are announced. */
  sharedEventLog(): SharedEventLog | undefined {
    if (this.events === undefined) return undefined;
    this.eventLog ??= new PgEventLog(this.pool, this.S, this.opts.url, this.events.channel, this.opts.log);
    return this.eventLog;
  }

  /**
   * GroupSource: a transaction that has locked the group's sessions and read what its writes
   * need of their turns (see ./group.ts). With a connection free it is begun at once: its locks
   * are asked for, or a group of creates alone, which reads nothing (its sessions are new:
   * `fresh`), is decided and sent, before the writer answers the group committed just before it.
   */
  begin(ids: readonly string[], owners: readonly string[], needs: readonly TreeNeeds[], fresh: ReadonlySet<string>): Group | Promise<Group> {
    if (this.opts.readOnly === true) throw new StorageWriteFailed(new Error('this store was opened read-only'));
    const started = process.hrtime.bigint();
    // with no quota to check, creates alone need nothing read
    const unread = !this.readUsage && needs.length === 0 && ids.every((id) => fresh.has(id));
    const now = this.pool.reserveNow();
    if (now !== undefined) {
      if (unread) return this.observed(PgGroup.unread(this.S, now.session, now.done, this.index, this.events), started);
      // its locks are asked for now, before the writer answers the group committed just before it
      return PgGroup.open(this.S, now.session, now.done, ids, owners, needs, this.index, this.readUsage, this.events).then((g) => this.observed(g, started));
    }
    return lease(this.pool).then(async ({ q, done }) => {
      const group = unread ? PgGroup.unread(this.S, q, done, this.index, this.events) : await PgGroup.open(this.S, q, done, ids, owners, needs, this.index, this.readUsage, this.events);
      return this.observed(group, started);
    });
  }

  /** The group with its commit's duration given to the metrics (from taking the connection to COMMIT answered), its replies named after this instance. */
  private observed(group: PgGroup, started: bigint): Group {
    group.generator = this.liveness?.id ?? null;
    const observer = this.opts.observer;
    if (observer === undefined) return group;
    return {
      current: (id) => group.current(id),
      turn: (session, id) => group.turn(session, id),
      path: (session, id) => group.path(session, id),
      subtree: (session, id) => group.subtree(session, id),
      lastTurnExcept: (session, excluded) => group.lastTurnExcept(session, excluded),
      usageOf: (user) => group.usageOf(user),
      tail: (session, id) => group.tail(session, id),
      streamingTurns: (session) => group.streamingTurns(session),
      release: () => group.release(),
      commit: async (changes) => {
        await group.commit(changes);
        observer.commit(Number(process.hrtime.bigint() - started) / 1e9, changes.length);
      },
    };
  }

  async importAll(sessions: readonly ChatSession[], turns: readonly Turn[]): Promise<ImportSummary> {
    if (this.opts.readOnly === true) throw new StorageWriteFailed(new Error('this store was opened read-only'));
    await this.writer.pause();
    try {
      return await importInto(this.pool, this.S, this.index, this.events, sessions, turns);
    } finally {
      this.writer.resume();
    }
  }

  async close(): Promise<void> {
    await this.writer.close();
    await this.liveness?.close();
    await this.eventLog?.close();
    await this.broadcaster?.close();
    await this.locks?.close();
    await this.pool.end();
  }

  /** The database this store uses, as logs may name it (never the password). */
  get database(): string {
    return this.where;
  }
}

/** Opens the PostgreSQL store (a server, an import, or an export: all may run beside other instances). */
export function openPostgresStore(opts: PostgresOptions): Promise<Store> {
  return PostgresStore.open(opts);
}
