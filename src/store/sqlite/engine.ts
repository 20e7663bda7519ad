// The sqlite engine: data on disk in one SQLite file (node:sqlite, WAL), memory bounded by its
// page caches. This file opens it (checking for damage first: ./file-check.ts), runs the writer
// thread (./worker.ts) that commits each group of the serial writer (./group.ts), reports, and
// closes it; the reads are ./reads.ts, an import's rows ./import.ts, the full check in the
// background ./full-check.ts. Once damage is found, writes are refused and health is not ok.
import { closeSync, existsSync, mkdirSync, openSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Server } from 'node:net';
import { Worker } from 'node:worker_threads';
import type { ChatSession, Turn } from '../../domain/records.js';
import type { Quotas } from '../../config.js';
import { Sparing, type Logger } from '../../log.js';
import { holdName } from '../../data-dir-lock.js';
import { recordCacheBudget } from '../../memory.js';
import type { Change } from '../changes.js';
import { RoomOnlyForDeletes, type Group, type GroupSource } from '../group.js';
import { RecordCache } from '../record-cache.js';
import { NO_USAGE, StorageDamaged, StorageWriteFailed, StoreOpenFailed, type ImportSummary, type Store, type StoreObserver, type StoreStats, type Usage } from '../store.js';
import { logRepaired, type NumbersRepaired } from '../totals.js';
import { SerialWriter } from '../writer.js';
import { int, sqliteDatabase, text, type Database } from './binding.js';
import { Connection, isDamage, openReader } from './connection.js';
import { checkFiles } from './file-check.js';
import { FullCheck } from './full-check.js';
import { SqliteGroup } from './group.js';
import { importRowsOf } from './import.js';
import { countSql, repairNumbers } from './numbers.js';
import { SqliteReads } from './reads.js';
import { reserveFileOf } from './reserve.js';
import { ScanPool } from './scans.js';
import { checkSchema, prepareSchema, registerSearchFunctions, REINDEX_SQL, unreadable } from './schema.js';
import { WRITER_ROLE, type FromWriter, type ToWriter, type WriterData } from './worker.js';

export interface SqliteOptions {
  readonly file: string;
  readonly log: Logger;
  /** Page cache of the reading and the writing connection each. */
  readonly cacheBytes: number;
  readonly fsync: boolean;
  readonly observer?: StoreObserver | undefined;
  /** What one user's sessions may hold, checked at the serial point. */
  readonly quotas?: Quotas | undefined;
  /** false only to measure what group commit buys: one write per transaction. */
  readonly groupCommit?: boolean;
  /** Documents of a query's rarest word from which search walks the sessions (SEARCH_WALK_FROM); 1 always walks. */
  readonly searchWalkFrom?: number;
  /** false with SEARCH=off: the writer leaves what it queues for the index unindexed (a start with search on indexes it). */
  readonly search?: boolean;
  /** true for a server: the whole file is checked in the background (./full-check.ts); a command's store is not. */
  readonly fullCheck?: boolean;
}

export class SqliteStore extends SqliteReads implements Store, GroupSource {
  readonly engine = 'sqlite';
  protected readonly reader: Connection;
  protected readonly scans: ScanPool;
  protected readonly writer: SerialWriter;
  protected cache: RecordCache | undefined;
  protected readonly searchWalkFrom: number | undefined;
  /** The one group: stateless, it reads the committed state (the writer takes one group at a time). */
  private readonly group: SqliteGroup;
  private worker: Worker | undefined;
  /** The background indexer's failures, logged once a minute at most. */
  private readonly indexWarnings = new Sparing(60_000);
  /** The background indexer's batches, and the idle merge's steps, since start. */
  private indexBatches = 0;
  private mergeSteps = 0;
  private seq = 0;
  private readonly pending = new Map<number, { resolve: () => void; reject: (e: Error) => void; writes: number }>();
  private closed = false;
  /** The name the kernel holds for the file while this store writes it (Linux): guardFile. */
  private guard: Server | undefined;
  /** What found the file damaged, once something did: writes are refused from then on. */
  private damage: string | undefined;
  private fullCheck: FullCheck | undefined;
  /** What a connection's errors pass through: damage marks the store and becomes StorageDamaged. */
  private readonly watch = (e: unknown): unknown => {
    if (e instanceof StorageDamaged || !isDamage(e)) return e;
    this.damaged(`a read: ${e instanceof Error ? e.message : String(e)}`);
    return new StorageDamaged(e);
  };

  private constructor(
    private readonly opts: SqliteOptions,
    reader: Database,
  ) {
    super();
    this.reader = new Connection(reader, this.watch);
    this.scans = new ScanPool(opts.file, this.watch);
    this.group = new SqliteGroup(this.reader, (changes) => this.commit(changes));
    this.writer = new SerialWriter(this, opts.log, opts.quotas, opts.groupCommit === false ? 1 : Infinity);
    this.searchWalkFrom = opts.searchWalkFrom;
  }

  /**
   * Marks the store damaged (once): writes are refused with StorageDamaged, health is not ok,
   * the writer thread's indexer stops writing, and one error line names the file.
   */
  private damaged(found: string): void {
    if (this.damage !== undefined) return;
    this.damage = found;
    const m: ToWriter = { kind: 'damaged' };
    this.worker?.postMessage(m);
    this.opts.log.error('the sqlite file is damaged: writes are refused (503 Storage damaged) and /healthz is not ok until it is restored from a backup; reads go on where they can', {
      file: this.opts.file,
      found,
      todo: 'stop the server, keep a copy of the file with its -wal and -shm, and restore the last good backup (`import` into a new SQLITE_FILE)',
    });
  }

  /** Opens (creating or migrating) the file and starts the writer thread. */
  static async open(opts: SqliteOptions): Promise<SqliteStore> {
    sqliteDatabase(); // on a Node.js without node:sqlite, the start stops here, before anything is made
    mkdirSync(dirname(opts.file), { recursive: true });
    // made here when new, so it is private to the service user like the journal (SQLite gives its WAL the same mode)
    closeSync(openSync(opts.file, 'a', 0o600));
    const guard = await guardFile(opts.file);
    try {
      const store = await SqliteStore.openGuarded(opts);
      store.guard = guard;
      store.cache = new RecordCache(recordCacheBudget());
      return store;
    } catch (e) {
      guard?.close();
      throw e;
    }
  }

  private static async openGuarded(opts: SqliteOptions): Promise<SqliteStore> {
    const DatabaseSync = sqliteDatabase();
    const started = process.hrtime.bigint();
    // before any connection: the first one replays the log, and would drop what follows damage in it
    checkFiles(opts.file);
    let setup: Database;
    try {
      setup = new DatabaseSync(opts.file, { timeout: 10_000 });
    } catch (e) {
      throw unreadable(opts.file, e);
    }
    let repaired: NumbersRepaired | undefined;
    try {
      prepareSchema(setup, opts.file, opts.search ?? true);
      try {
        repaired = repairNumbers(setup);
      } catch (e) {
        throw unreadable(opts.file, e);
      }
    } finally {
      setup.close();
    }
    if (repaired !== undefined) logRepaired(opts.log, opts.file, repaired);
    const store = new SqliteStore(opts, openReader(opts.file, opts.cacheBytes));
    try {
      await store.startWorker();
    } catch (e) {
      store.reader.db.close();
      throw e;
    }
    const counts = store.counters();
    opts.log.info('sqlite store opened', { file: opts.file, sessions: counts.sessions, turns: counts.turns, ms: Math.round(Number(process.hrtime.bigint() - started) / 1e6) });
    if (opts.fullCheck === true) {
      store.fullCheck = new FullCheck(
        opts.file,
        (problems) => store.damaged(`the full check (PRAGMA quick_check): ${problems.slice(0, 3).join('; ')}${problems.length > 3 ? `; and ${problems.length - 3} more` : ''}`),
        (message) => opts.log.warn('the full check of the sqlite file could not run to its end; it is tried again at the next one', { file: opts.file, err: message }),
      );
    }
    return store;
  }

  /**
   * Read-only, beside a server that may be writing: reads see each statement's snapshot, exports
   * one snapshot. The files are checked first unless a server (or command) writes them: its
   * connections keep the log's index, so this one replays nothing, and the log may be mid-write.
   */
  static async openReadOnly(opts: SqliteOptions): Promise<SqliteStore> {
    if (!(await writerHolds(opts.file))) checkFiles(opts.file);
    const reader = openReader(opts.file, opts.cacheBytes);
    checkSchema(reader, opts.file, true);
    return new SqliteStore(opts, reader);
  }

  private startWorker(): Promise<void> {
    const data: WriterData = { role: WRITER_ROLE, file: this.opts.file, cacheBytes: this.opts.cacheBytes, fsync: this.opts.fsync, index: this.opts.search ?? true };
    const worker = new Worker(__filename, { workerData: data });
    this.worker = worker;
    return new Promise((resolve, reject) => {
      let ready = false;
      worker.on('message', (m: FromWriter) => {
        switch (m.kind) {
          case 'ready':
            ready = true;
            resolve();
            return;
          case 'fatal':
            reject(new StoreOpenFailed(`${this.opts.file}: the writer could not open it (${m.message})`));
            return;
          case 'done':
          case 'failed': {
            const p = this.pending.get(m.seq);
            if (p === undefined) return;
            this.pending.delete(m.seq);
            if (m.kind === 'done') {
              this.opts.observer?.commit(m.seconds, p.writes);
              p.resolve();
            } else if (m.damaged) {
              this.damaged(`a commit: ${m.message}`);
              p.reject(new StorageDamaged(new Error(m.message)));
            } else if (m.roomForDeletes) p.reject(new RoomOnlyForDeletes(m.message));
            else p.reject(new Error(m.message));
            return;
          }
          case 'indexFailed':
            this.warnOfIndex('the search index could not take what was written; it stays queued and is tried again after the next write', m.message);
            return;
          case 'indexed':
            this.indexBatches++;
            return;
          case 'merged':
            this.mergeSteps++;
            return;
          case 'mergeFailed':
            this.warnOfIndex('the search index could not be merged while idle; it is searched as it is, and merged when next idle', m.message);
            return;
          case 'closed':
            return;
        }
      });
      worker.on('error', (err) => {
        if (!ready) reject(err);
        this.opts.log.error('the sqlite writer thread failed', { err });
      });
      worker.on('exit', (code) => {
        if (this.worker === worker) this.worker = undefined;
        for (const p of this.pending.values()) p.reject(new Error(`the sqlite writer thread exited (${code})`));
        this.pending.clear();
        if (!ready) reject(new StoreOpenFailed(`${this.opts.file}: the writer thread exited before it was ready`));
      });
    });
  }

  /**
   * Indexes every name and turn again, in one transaction on a connection of its own (the CLI's
   * `reindex`, under the data-directory lock: no server writes meanwhile).
   */
  reindex(): Promise<number> {
    const db = new (sqliteDatabase())(this.opts.file, { timeout: 10_000 });
    try {
      registerSearchFunctions(db);
      db.exec('BEGIN IMMEDIATE');
      try {
        db.exec(REINDEX_SQL);
        db.exec('COMMIT');
      } catch (e) {
        db.exec('ROLLBACK');
        throw e;
      }
      const row = db.prepare('SELECT (SELECT count(*) FROM sessions) + (SELECT count(*) FROM turns) AS n').get();
      return Promise.resolve(int(row?.['n']));
    } finally {
      db.close();
    }
  }

  private counters(): Usage {
    return countersOf(this.reader);
  }

  health(): Promise<void> {
    return this.damage === undefined ? Promise.resolve() : Promise.reject(new StorageDamaged());
  }

  async stats(): Promise<StoreStats> {
    const counts = this.counters();
    const size = (f: string): number => {
      try {
        return statSync(f).size;
      } catch {
        return 0;
      }
    };
    return {
      ...counts,
      engine: [
        { name: 'sqlite_file_bytes', type: 'gauge', help: 'Size of the SQLite database file.', value: size(this.opts.file) },
        { name: 'sqlite_wal_bytes', type: 'gauge', help: 'Size of its write-ahead log (checkpointed back into the file by the writer thread).', value: size(`${this.opts.file}-wal`) },
        ...(this.cache?.gauges('sqlite') ?? []),
        {
          name: 'sqlite_search_unindexed',
          type: 'gauge',
          help: 'Names and turns written but not in the search index yet (the writer thread indexes them between commits; search reads them meanwhile).',
          value: int(this.reader.prepare('SELECT (SELECT count(*) FROM names_unindexed) + (SELECT count(*) FROM turns_unindexed) AS n').get()?.['n']),
        },
        {
          name: 'sqlite_search_index_batches_total',
          type: 'counter',
          help: 'Transactions in which the writer thread indexed names and turns since start (under a steady load of appends, one per about 1,024 turns).',
          value: this.indexBatches,
        },
        {
          name: 'sqlite_search_merge_steps_total',
          type: 'counter',
          help: "Steps in which the writer thread, idle, merged the search index's segments since start.",
          value: this.mergeSteps,
        },
        {
          name: 'sqlite_reserve_bytes',
          type: 'gauge',
          help: 'Room held beside the sqlite file for deletes on a full disk (16 MiB, or an eighth of a smaller file system, when whole; less: the disk is full).',
          value: size(reserveFileOf(this.opts.file)),
        },
        { name: 'sqlite_damaged', type: 'gauge', help: 'Whether the file was found damaged (1: writes are refused, /healthz is not ok; the error log line says where).', value: this.damage === undefined ? 0 : 1 },
        {
          name: 'sqlite_full_checks_total',
          type: 'counter',
          help: 'Full checks of the file (PRAGMA quick_check, in a process of its own a minute after the start, then daily) that ran to their end since start.',
          value: this.fullCheck?.finished ?? 0,
        },
      ],
    };
  }

  /** A warning of the background indexer's, once a minute at most (a full disk fails every try). */
  private warnOfIndex(text: string, err: string): void {
    if (this.indexWarnings.due()) this.opts.log.warn(text, { err });
  }

  /** GroupSource: one group at a time, so the reading connection sees every group committed before. */
  begin(): Group {
    if (this.damage !== undefined) throw new StorageDamaged();
    if (this.worker === undefined) throw new StorageWriteFailed(new Error(this.closed ? 'store is closed' : 'the sqlite writer is not running'));
    return this.group;
  }

  /** A group's changes to the writer thread; the record cache takes them at the serial point, before the writer answers any of its writes. */
  private commit(changes: readonly Change[]): Promise<void> {
    const sent = this.send({ kind: 'commit', seq: ++this.seq, changes }, changes.length);
    const cache = this.cache;
    if (cache === undefined) return sent;
    return sent.then(
      () => cache.committed(changes),
      (e: unknown) => {
        // refused, or lost with the writer thread: what the file holds of these sessions is read again
        cache.forget(changes.map((c) => c.session));
        throw e;
      },
    );
  }

  private send(m: ToWriter & { readonly seq: number }, writes: number): Promise<void> {
    const worker = this.worker;
    if (worker === undefined) return Promise.reject(new Error('the sqlite writer is not running'));
    return new Promise((resolve, reject) => {
      this.pending.set(m.seq, { resolve, reject, writes });
      worker.postMessage(m);
    });
  }

  async importAll(sessions: readonly ChatSession[], turns: readonly Turn[]): Promise<ImportSummary> {
    if (this.damage !== undefined) throw new StorageDamaged();
    await this.writer.pause();
    try {
      const { rows, summary } = importRowsOf(this.reader, sessions, turns);
      if (rows !== undefined) {
        try {
          await this.send({ kind: 'import', seq: ++this.seq, rows }, rows.sessions.length + rows.turns.length);
        } catch (e) {
          throw new StorageWriteFailed(e);
        } finally {
          // an import writes past the serial writer's changes
          this.cache?.clear();
        }
      }
      return summary;
    } finally {
      this.writer.resume();
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    try {
      await this.closeFiles();
    } finally {
      // whatever failed above, the file is this process's no more
      this.guard?.close();
      this.guard = undefined;
    }
  }

  private async closeFiles(): Promise<void> {
    await this.fullCheck?.stop();
    await this.writer.close();
    this.closed = true;
    // the writer closes last: the last connection checkpoints the WAL and removes it
    this.scans.close();
    this.reader.db.close();
    const worker = this.worker;
    if (worker !== undefined) {
      await new Promise<void>((resolve) => {
        worker.once('exit', () => resolve());
        const m: ToWriter = { kind: 'close' };
        worker.postMessage(m);
      });
    }
  }
}

/**
 * One writer per sqlite file, whatever DATA_DIR says (the data directory's lock cannot see two
 * directories naming one SQLITE_FILE): on Linux, a name the kernel holds for the file (its device
 * and inode, whatever path reaches it) while a store has it open for writing, freed when the
 * process dies (../../data-dir-lock.ts holdName). Elsewhere, or where no unix socket can be made,
 * SQLite's own locks are all there is.
 */
async function guardFile(file: string): Promise<Server | undefined> {
  if (process.platform !== 'linux') return undefined;
  const held = await holdName(guardName(file));
  if (typeof held !== 'string') {
    // it must not keep a stopping process alive
    held.unref();
    return held;
  }
  if (held === 'EADDRINUSE') {
    throw new StoreOpenFailed(`${file}: is in use by another server or command on this host (a SQLITE_FILE serves one at a time, whatever their DATA_DIR); stop that one first, or give this one a file of its own. Nothing was changed.`);
  }
  return undefined;
}

function guardName(file: string): string {
  const st = statSync(file, { bigint: true });
  return `\0chat-session-api/sqlite-file/${st.dev}:${st.ino}`;
}

/** Whether a server or command writes the file now (guardFile; false where it cannot be told). */
async function writerHolds(file: string): Promise<boolean> {
  if (process.platform !== 'linux' || !existsSync(file)) return false;
  const held = await holdName(guardName(file));
  if (typeof held === 'string') return held === 'EADDRINUSE';
  await new Promise((resolve) => held.close(resolve));
  return false;
}

/** The store's counters (each in range whatever the file holds: ./numbers.ts). */
const COUNTERS_SQL = `SELECT name, ${countSql('value')} AS value FROM counters`;

/** The store's counters, each the sum of a Usage figure over every user. */
function countersOf(c: Connection): Usage {
  const out = { ...NO_USAGE };
  const figures: { readonly [name: string]: keyof Usage } = { sessions: 'sessions', turns: 'turns', bytes: 'bytes', input_tokens: 'inputTokens', output_tokens: 'outputTokens', cached_tokens: 'cachedTokens' };
  for (const row of c.prepare(COUNTERS_SQL).all()) {
    const figure = figures[text(row['name'])];
    if (figure !== undefined) out[figure] = int(row['value']);
  }
  return out;
}

/** Opens the sqlite store for a server or an import. */
export function openSqliteStore(opts: SqliteOptions): Promise<Store> {
  return SqliteStore.open(opts);
}

/** Opens the sqlite store read-only beside a running server (export). */
export function openSqliteSnapshot(opts: { file: string; log: Logger; cacheBytes: number }): Promise<Store> {
  return SqliteStore.openReadOnly({ ...opts, fsync: false });
}
