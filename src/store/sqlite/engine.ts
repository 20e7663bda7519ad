// The sqlite engine: data on disk in one SQLite file (node:sqlite, WAL), memory bounded by its
// page caches. Reads run on the main thread through a connection of their own; whole lists and
// exports read a snapshot through pooled connections, so a slow client never pins the snapshot
// other requests see. Writes pass through the shared serial writer on the main thread, and each
// group is committed by the writer thread (./worker.ts) in one transaction. Damage is looked for
// before SQLite opens the file (./file-check.ts) and in the background (./full-check.ts); once
// found, writes are refused and health is not ok. Split by job as the PostgreSQL engine is: the
// SQL of lists (./lists.ts), turns and branches (./turns.ts) and search (./search.ts), the reading
// connections (./connection.ts), the room deletes keep on a full disk (./reserve.ts); this file
// opens, reads through those, commits and reports.
import { closeSync, existsSync, mkdirSync, openSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Server } from 'node:net';
import { Worker } from 'node:worker_threads';
import { PAGE_BYTE_BUDGET, PAGE_SCAN_BUDGET, SCAN_CHUNK, type SessionKey, type TurnKey } from '../../domain/order.js';
import { isStreamingJson } from '../../domain/deltas.js';
import { tokensOf, type ChatSession, type Turn } from '../../domain/records.js';
import type { Liveness } from '../../domain/retention.js';
import { foldedTags, foldForSearch, textHolds, turnTextOfJson } from '../../domain/search.js';
import { versionOfSession } from '../../domain/version.js';
import type { Quotas } from '../../config.js';
import { Sparing, type Logger } from '../../log.js';
import { planImport } from '../import-plan.js';
import {
  NO_USAGE,
  StorageDamaged,
  StorageWriteFailed,
  StoreOpenFailed,
  TurnNotFound,
  type Branch,
  type SessionState,
  type TreeTurn,
  type TurnNode,
  type ExpiredSession,
  type ExportItem,
  type ExportSnapshot,
  type ImportSummary,
  type Page,
  type SearchFilter,
  type SearchHit,
  type SearchKey,
  type SessionFilter,
  type SessionRecord,
  type Store,
  type StoreObserver,
  type StoreStats,
  type TurnRecord,
  type Usage,
  type Held,
} from '../store.js';
import type { UsageDelta } from '../changes.js';
import { budgetedTurnPage } from '../turn-page.js';
import { keysetFrom, walkBudget, walkSearchNow, type WalkSource } from '../search-walk.js';
import { SerialWrites } from '../serial-writes.js';
import { RecordCache } from '../record-cache.js';
import { recordCacheBudget } from '../../memory.js';
import type { Change } from '../changes.js';
import { RoomOnlyForDeletes, type Group, type GroupSource } from '../group.js';
import { SerialWriter } from '../writer.js';
import {
  bytesOf,
  int,
  sqliteDatabase,
  sqliteDialect,
  text,
  textOrUndefined,
  type Database,
  type Row,
  type SqlValue,
} from './binding.js';
import { checkFiles } from './file-check.js';
import { FullCheck } from './full-check.js';
import {
  checkSchema,
  prepareSchema,
  queuedTurnWords,
  registerSearchFunctions,
  REINDEX_SQL,
  STREAMING_WHERE,
  unreadable,
} from './schema.js';
import { endText, piecesText, tailOfJson, tailOfRow, withDeltas, type Tail } from '../pieces.js';
import { conversationKeySql, expiredSql, pathKeySql } from '../sql.js';
import { holdName } from '../../data-dir-lock.js';
import { reserveFileOf } from './reserve.js';
import {
  WRITER_ROLE,
  type FromWriter,
  type Op,
  type PutSession,
  type SessionAfter,
  type ToWriter,
  type TurnRow,
  type WriterData,
} from './worker.js';
import { recordOf, sessionRows, narrowed, pageOfRows, listRows } from './lists.js';
import { countColumns, countSql, repairNumbers } from './numbers.js';
import { logRepaired, type NumbersRepaired } from '../totals.js';
import { deltasSql, turnBytesSql, TURN_COLUMNS, TREE_TURN_COLUMNS, turnOf, tokensOfRow, treeTurnOf, branchKeysSql, branchParams, branchPageSql, branchTurns, turnChunks, chunksOf } from './turns.js';
import { filterWords, WALK_SESSIONS, searchPart } from './search.js';
import { Connection, isDamage, openReader } from './connection.js';

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

/** Snapshot connections kept open between scans, and the most open at once (more scans wait). */
const SCAN_IDLE = 4;
const SCAN_MAX = 16;
/**
 * How long the ones past SCAN_IDLE stay open after their last scan: a burst of replies (each
 * reads its conversation on one) or of whole lists reuses them instead of opening a connection
 * each, which cost a tenth of a reply's CPU with 64 replies starting at once.
 */
const SCAN_LINGER_MS = 30_000;
/** Page cache of a snapshot connection: scans read sequentially and need little. */
const SCAN_CACHE_KIB = 1024;

export class SqliteStore extends SerialWrites implements Store, GroupSource, Group {
  readonly engine = 'sqlite';
  private readonly reader: Connection;
  protected readonly writer: SerialWriter;
  /** Idle snapshot connections, the least recently used first, with when each was given back. */
  private readonly idleScans: { c: Connection; since: number }[] = [];
  private scanTrim: NodeJS.Timeout | undefined;
  private scansOpen = 0;
  private readonly scanWaiters: (() => void)[] = [];
  private worker: Worker | undefined;
  /** The background indexer's failures, logged once a minute at most. */
  private readonly indexWarnings = new Sparing(60_000);
  /** The background indexer's batches, and the idle merge's steps, since start. */
  private indexBatches = 0;
  private mergeSteps = 0;
  /** How a write makes a turn's words for the index (none with SEARCH=off). */
  private get turnWords(): (t: Turn) => string | true | null {
    return this.opts.search === false ? noWords : turnWordsOf;
  }
  private seq = 0;
  private readonly pending = new Map<number, { resolve: () => void; reject: (e: Error) => void; writes: number }>();
  private closed = false;
  /** The name the kernel holds for the file while this store writes it (Linux): guardFile. */
  private guard: Server | undefined;
  /** What found the file damaged, once something did: writes are refused from then on. */
  private damage: string | undefined;
  private fullCheck: FullCheck | undefined;
  /** Hot sessions for GET by id and hot pages of lists; only where this store commits every write (a read-only store beside a server has none). */
  private cache: RecordCache | undefined;
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
    this.writer = new SerialWriter(this, opts.log, opts.quotas, opts.groupCommit === false ? 1 : Infinity);
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

  // ---- reads ----

  getSession(id: string): Promise<SessionRecord | undefined> {
    return Promise.resolve(this.getSessionNow(id));
  }

  readonly getSessionNow = (id: string): SessionRecord | undefined => {
    const cache = this.cache;
    const hit = cache?.get(id);
    if (hit !== undefined) return hit;
    const row = this.reader.prepare('SELECT json, version FROM sessions WHERE id = ?').get(id);
    if (row === undefined) return undefined;
    const record = recordOf(row);
    // read and kept in one go on this thread: a commit's changes reach the cache only between reads
    cache?.put(id, record);
    return record;
  };

  /**
   * Search hits newest first: from the index when fewer than SEARCH_WALK_FROM turns hold the
   * query (FTS5 finds them, the query sorts them; counting stops there), else by walking the
   * caller's sessions newest first and stopping at the page (../search-walk.ts).
   */
  search(filter: SearchFilter, after: SearchKey | undefined, limit: number): Promise<Page<SearchHit, SearchKey>> {
    const walkFrom = this.opts.searchWalkFrom ?? Infinity;
    // counted no further than walkFrom: the walk's budget is then walkFrom too (../search-walk.ts walkBudget).
    // The words as whole words first: FTS5 reads a whole word's matches as it goes, but merges every
    // match of a prefix before the first (a word in 1M turns: ~20 ms), so a common word is told by
    // its own matches and only a rarer one pays for its prefix
    let counted = 0;
    if (walkFrom !== Infinity) {
      const count = this.reader.prepare('SELECT count(*) AS n FROM (SELECT 1 FROM turn_words WHERE turn_words MATCH ? LIMIT ?)');
      counted = int(count.get(filterWords(filter.words, false), walkFrom)?.['n']);
      if (counted < walkFrom) counted = int(count.get(filterWords(filter.words), walkFrom)?.['n']);
    }
    if (counted >= walkFrom) {
      const walked = walkSearchNow(this.walkSource(filter), after, limit, walkBudget(counted, walkFrom));
      if (walked !== undefined) return Promise.resolve(walked);
    }
    const params: SqlValue[] = [];
    // one statement, one snapshot: what the index holds and what is queued for it are read at the same moment
    const parts = (['names', 'turns', 'queuedNames', 'queuedTurns'] as const).map((part) => searchPart(filter, after, part, params));
    const sql = `${parts.join(' UNION ALL ')} ORDER BY at DESC, doc DESC LIMIT ?`;
    params.push(limit + 1);
    const rows = this.reader.prepare(sql).all(...params);
    const items: SearchHit[] = rows.slice(0, limit).map((row) => {
      const key = { at: text(row['at']), doc: text(row['doc']) };
      const turn = row['turn_json'] === null ? undefined : { _id: key.doc, createdAt: key.at, json: withDeltas(bytesOf(row['turn_json']), textOrUndefined(row['turn_deltas'])) };
      return { key, session: recordOf(row), turn };
    });
    return Promise.resolve({ items, next: rows.length > limit ? items[items.length - 1]?.key : undefined });
  }

  /**
   * The caller's sessions as its lists read them, and their turns newest first, a few at a time,
   * each checked against the query's words as the index would: the words of its row's text (a
   * streaming turn's row holds its text before its deltas, as the index does until its next edit).
   */
  private walkSource(filter: SearchFilter): WalkSource<SessionRecord, SessionKey, TurnRecord> {
    const query = filter.words;
    const turns = this.reader.prepare(`SELECT ${TURN_COLUMNS} FROM turns WHERE session = ? AND (created_at, id) < (?, ?) ORDER BY created_at DESC, id DESC LIMIT ?`);
    return {
      sessions: (after) => this.sessionPage(filter, after, WALK_SESSIONS),
      updatedAt: (r) => r.session.updatedAt,
      id: (r) => r.session._id,
      nameMatches: (r) => textHolds(r.session.name, query),
      turns: (from) =>
        from.map(({ s, before, want }) => {
          const rows = turns.all(s.session._id, ...keysetFrom(before), want);
          const hits: { key: SearchKey; turn: TurnRecord }[] = [];
          for (const row of rows) {
            if (textHolds(turnTextOfJson(bytesOf(row['json'])), query)) hits.push({ key: { at: text(row['created_at']), doc: text(row['id']) }, turn: turnOf(row) });
          }
          const last = rows[rows.length - 1];
          return { hits, next: rows.length === want && last !== undefined ? { at: text(last['created_at']), doc: text(last['id']) } : undefined, examined: rows.length };
        }),
      hit: (s, key, turn) => ({ key, session: s, turn }),
    };
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

  listSessions(filter: SessionFilter, after: SessionKey | undefined, limit: number): Promise<Page<SessionRecord, SessionKey>> {
    const cache = this.cache;
    const kept = cache?.getPage(filter, after, limit);
    if (kept !== undefined) return Promise.resolve(kept);
    const page = this.sessionPage(filter, after, limit);
    // read and kept in one go on this thread, as getSession's records
    cache?.putPage(filter, after, limit, page);
    return Promise.resolve(page);
  }

  private sessionPage(filter: SessionFilter, after: SessionKey | undefined, limit: number): Page<SessionRecord, SessionKey> {
    if ((filter.user ?? filter.project) === undefined) return { items: [], next: undefined };
    if (!narrowed(filter) && filter.archived !== 'all') {
      // only expiry can leave a row out (a session gone and not yet purged: rare), so the page's
      // rows and the one after are read in one call; if one was left out, the page is read again
      // row by row. Not for archived=all: its two halves read by two finished statements would be
      // two snapshots (a session archived between them on both halves); iterated side by side
      // they are one
      const quick = pageOfRows(listRows(this.reader, filter, after, Math.min(limit, PAGE_SCAN_BUDGET) + 1), limit);
      if (!quick.leftOut) return quick.page;
    }
    return pageOfRows(listRows(this.reader, filter, after), limit).page;
  }

  async *scanSessions(filter: SessionFilter): AsyncIterable<readonly SessionRecord[]> {
    if ((filter.user ?? filter.project) === undefined) return;
    if (filter.archived !== 'all') {
      // a list of one chunk is one statement on the shared connection, its own snapshot: no
      // scan connection, no transaction (most lists); a longer one is read again below
      const rows = sessionRows(this.reader, filter, filter.archived === 'true' ? 1 : 0, undefined, SCAN_CHUNK + 1) as Row[];
      if (rows.length <= SCAN_CHUNK) {
        const chunk: SessionRecord[] = [];
        for (const row of rows) if (row['json'] !== null) chunk.push(recordOf(row));
        if (chunk.length > 0) yield chunk;
        return;
      }
    }
    const c = await this.takeScan();
    try {
      c.db.exec('BEGIN');
      let chunk: SessionRecord[] = [];
      let examined = 0;
      for (const row of listRows(c, filter, undefined)) {
        if (row['json'] !== null) chunk.push(recordOf(row));
        // a chunk per SCAN_CHUNK rows examined, empty when the filter left them all out, so the
        // list yields to other requests however few of its rows match
        if (++examined === SCAN_CHUNK) {
          yield chunk;
          chunk = [];
          examined = 0;
        }
      }
      if (chunk.length > 0) yield chunk;
    } finally {
      this.giveBackScan(c);
    }
  }

  listTurns(sessionId: string, after: TurnKey | undefined, limit: number, branch?: Branch): Promise<Page<TurnRecord, TurnKey>> {
    if (branch !== undefined) {
      const keys = this.branchPage(sessionId, branch, after, limit + 1);
      const page = budgetedTurnPage(branchTurns(this.reader, keys), limit, PAGE_BYTE_BUDGET, turnOf);
      if (page.items.length === 0 && branch !== 'head' && !this.hasTurn(this.reader, sessionId, branch.turnId)) return Promise.reject(new TurnNotFound());
      return Promise.resolve(page);
    }
    const rows =
      after === undefined
        ? this.reader.prepare(`SELECT ${TURN_COLUMNS} FROM turns WHERE session = ? ORDER BY created_at, id LIMIT ?`).iterate(sessionId, limit + 1)
        : this.reader.prepare(`SELECT ${TURN_COLUMNS} FROM turns WHERE session = ? AND (created_at, id) > (?, ?) ORDER BY created_at, id LIMIT ?`).iterate(sessionId, after.createdAt, after._id, limit + 1);
    return Promise.resolve(budgetedTurnPage(rows, limit, PAGE_BYTE_BUDGET, turnOf));
  }

  getTurn(sessionId: string, turnId: string): Promise<TurnRecord | undefined> {
    const row = this.reader.prepare(`SELECT ${TURN_COLUMNS} FROM turns WHERE id = ? AND session = ?`).get(turnId, sessionId);
    return Promise.resolve(row === undefined ? undefined : turnOf(row));
  }

  turnsByPathKey(user: string, pathKey: string, live: Liveness, limit: number): Promise<readonly { readonly session: string; readonly turn: string }[]> {
    const params: SqlValue[] = [];
    const sql = pathKeySql(sqliteDialect(params), user, pathKey, live, limit);
    return Promise.resolve(this.reader.prepare(sql).all(...params).map((r) => ({ session: text(r['session']), turn: text(r['id']) })));
  }

  sessionOfTurn(turnId: string): Promise<string | undefined> {
    const row = this.reader.prepare('SELECT session FROM turns WHERE id = ?').get(turnId);
    return Promise.resolve(row === undefined ? undefined : text(row['session']));
  }

  sessionByConversationKey(user: string, key: string, live: Liveness): Promise<string | undefined> {
    const params: SqlValue[] = [];
    const row = this.reader.prepare(conversationKeySql(sqliteDialect(params), user, key, live)).get(...params);
    return Promise.resolve(row === undefined ? undefined : text(row['id']));
  }

  async *scanTurns(sessionId: string, branch?: Branch): AsyncIterable<readonly TurnRecord[]> {
    const c = await this.takeScan();
    try {
      c.db.exec('BEGIN');
      if (branch === undefined) yield* turnChunks(c, sessionId);
      else {
        if (branch !== 'head' && !this.hasTurn(c, sessionId, branch.turnId)) throw new TurnNotFound();
        yield* chunksOf(branchTurns(c, c.prepare(branchKeysSql(branch, false, false)).all(...branchParams(sessionId, branch, undefined, undefined))));
      }
    } finally {
      this.giveBackScan(c);
    }
  }

  /**
   * The keys of a page of a branch: by depth when the cursor is a turn of the path (or there is
   * none), else (the cursor's turn deleted, the head moved elsewhere) by walking the path from
   * its end to the cursor, which gives the same page wherever the cursor is.
   */
  private branchPage(sessionId: string, branch: Branch, after: TurnKey | undefined, limit: number): Row[] {
    const c = this.reader;
    const turnId = branch === 'head' ? null : branch.turnId;
    if (after === undefined) return c.prepare(branchPageSql(branch)).all(turnId, sessionId, 0, limit);
    const cursor = c.prepare('SELECT depth FROM turns WHERE id = ? AND session = ?').get(after._id, sessionId);
    if (cursor !== undefined) {
      const rows = c.prepare(branchPageSql(branch)).all(turnId, sessionId, int(cursor['depth']) + 1, limit);
      if (rows[0]?.['parent_id'] === after._id) return rows;
    }
    return c.prepare(branchKeysSql(branch, true, true)).all(...branchParams(sessionId, branch, after, limit));
  }

  private hasTurn(c: Connection, sessionId: string, id: string): boolean {
    return c.prepare('SELECT 1 AS found FROM turns WHERE id = ? AND session = ?').get(id, sessionId) !== undefined;
  }

  async exportAll(): Promise<ExportSnapshot> {
    const c = await this.takeScan();
    let counts: { sessions: number; turns: number };
    try {
      c.db.exec('BEGIN');
      // counted, not the counters: the header of a store an earlier release left with counters out of range must still match its lines
      const row = c.prepare('SELECT (SELECT count(*) FROM sessions) AS sessions, (SELECT count(*) FROM turns) AS turns').get();
      counts = { sessions: int(row?.['sessions']), turns: int(row?.['turns']) };
    } catch (e) {
      this.giveBackScan(c);
      throw e;
    }
    const give = (): void => this.giveBackScan(c);
    async function* items(): AsyncIterable<ExportItem> {
      try {
        for (const row of c.prepare('SELECT id, json, version FROM sessions ORDER BY id').iterate()) {
          const turns: TurnRecord[] = [];
          for (const chunk of turnChunks(c, text(row['id']))) turns.push(...chunk);
          yield { session: recordOf(row), turns };
        }
      } finally {
        give();
      }
    }
    return { sessions: counts.sessions, turns: counts.turns, items: items() };
  }

  /** From the two expiry indexes: own expiries passed, then (RETENTION_DAYS) activity before the cutoff, each oldest first. */
  expiredSessions(live: Liveness, limit: number): Promise<readonly ExpiredSession[]> {
    const own: SqlValue[] = [];
    const rows = this.reader.prepare(expiredSql(sqliteDialect(own), 'own', live.now, limit, EXPIRED_COLUMNS)).all(...own);
    if (live.cutoff !== undefined && rows.length < limit) {
      const idle: SqlValue[] = [];
      rows.push(...this.reader.prepare(expiredSql(sqliteDialect(idle), 'idle', live.cutoff, limit - rows.length, EXPIRED_COLUMNS)).all(...idle));
    }
    return Promise.resolve(rows.map((r) => ({ session: JSON.parse(text(r['json'])) as ChatSession, turns: int(r['turn_count']) })));
  }

  private counters(): Usage {
    return countersOf(this.reader);
  }

  health(): Promise<void> {
    return this.damage === undefined ? Promise.resolve() : Promise.reject(new StorageDamaged());
  }

  usage(user: string): Promise<Usage> {
    return Promise.resolve(this.usageOf(user));
  }

  /** Group (and reads): a user's usage as committed. */
  usageOf(user: string): Usage {
    const row = this.reader.prepare(USAGE_SQL).get(user);
    return row === undefined ? NO_USAGE : { sessions: int(row['sessions']), turns: int(row['turns']), bytes: int(row['bytes']), ...tokensOfRow(row) };
  }

  /** Group: the session's streaming turns, from the index that holds them (turns_streaming). */
  streamingTurns(session: string): readonly string[] {
    return this.reader
      .prepare(`SELECT id FROM turns WHERE session = ? AND ${STREAMING_WHERE}`)
      .all(session)
      .map((row) => text(row['id']));
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

  /** A snapshot connection from the pool (at most SCAN_MAX open; more wait their turn). */
  private async takeScan(): Promise<Connection> {
    for (;;) {
      const idle = this.idleScans.pop();
      if (idle !== undefined) return idle.c;
      if (this.scansOpen < SCAN_MAX) {
        this.scansOpen++;
        try {
          const db = openReader(this.opts.file, SCAN_CACHE_KIB * 1024);
          return new Connection(db, this.watch);
        } catch (e) {
          this.scansOpen--;
          throw e;
        }
      }
      await new Promise<void>((resolve) => this.scanWaiters.push(resolve));
    }
  }

  /** Ends the snapshot (and the statements still open on it) and puts the connection back. */
  private giveBackScan(c: Connection): void {
    try {
      c.db.exec('COMMIT');
    } catch {
      // no transaction was open
    }
    if (this.closed) {
      c.db.close();
      this.scansOpen--;
    } else {
      this.idleScans.push({ c, since: performance.now() });
      this.trimScans();
    }
    this.scanWaiters.shift()?.();
  }

  /** Closes the idle snapshot connections past SCAN_IDLE that no scan took for SCAN_LINGER_MS, now or when the time comes. */
  private trimScans(): void {
    const idle = this.idleScans;
    const now = performance.now();
    while (idle.length > SCAN_IDLE && now - (idle[0] as { since: number }).since >= SCAN_LINGER_MS) {
      (idle.shift() as { c: Connection }).c.db.close();
      this.scansOpen--;
    }
    if (idle.length > SCAN_IDLE && this.scanTrim === undefined && !this.closed) {
      this.scanTrim = setTimeout(() => {
        this.scanTrim = undefined;
        this.trimScans();
      }, SCAN_LINGER_MS);
      this.scanTrim.unref();
    }
  }

  // ---- writes: handed to the serial writer by SerialWrites; what the writer asks of the engine ----

  /** At start, every streaming turn (the index turns_streaming holds them): one server per file, so the one that streamed them is gone. */
  leftStreaming(atStart: boolean): Promise<readonly { session: string; turnId: string }[]> {
    if (!atStart) return Promise.resolve([]);
    const rows = this.reader.prepare(`SELECT session, id FROM turns WHERE ${STREAMING_WHERE}`).all();
    return Promise.resolve(rows.map((r) => ({ session: text(r['session']), turnId: text(r['id']) })));
  }

  /** One server per file: nothing to tell others. */
  broadcast(): undefined {
    return undefined;
  }

  sharedEventLog(): undefined {
    return undefined;
  }

  /** GroupSource: one group at a time, so the reading connection sees every group committed before. */
  begin(): Group {
    if (this.damage !== undefined) throw new StorageDamaged();
    if (this.worker === undefined) throw new StorageWriteFailed(new Error(this.closed ? 'store is closed' : 'the sqlite writer is not running'));
    return this;
  }

  turn(session: string, id: string): TreeTurn | undefined {
    const row = this.reader.prepare(`SELECT ${TREE_TURN_COLUMNS} FROM turns WHERE id = ? AND session = ?`).get(id, session);
    return row === undefined ? undefined : treeTurnOf(row);
  }

  path(session: string, id: string): readonly TreeTurn[] | undefined {
    const keys = this.reader.prepare(branchKeysSql({ turnId: id }, false, false)).all(...branchParams(session, { turnId: id }, undefined, undefined));
    if (keys.length === 0) return undefined;
    const one = this.reader.prepare(`SELECT ${TREE_TURN_COLUMNS} FROM turns WHERE id = ?`);
    return keys.map((k) => treeTurnOf(one.get(k['id'] as string) as Row));
  }

  subtree(session: string, id: string): readonly TurnNode[] | undefined {
    const rows = this.reader
      .prepare(SUBTREE_SQL)
      .all(id, session);
    if (rows.length === 0) return undefined;
    return rows.map((r) => ({ _id: text(r['id']), createdAt: text(r['created_at']), parentId: textOrUndefined(r['parent_id']) ?? null, bytes: int(r['bytes']), tokens: tokensOfRow(r) }));
  }

  lastTurnExcept(session: string, excluded: ReadonlySet<string>): TurnKey | undefined {
    for (const row of this.reader.prepare('SELECT created_at, id FROM turns WHERE session = ? ORDER BY created_at DESC, id DESC').iterate(session)) {
      const id = text(row['id']);
      if (!excluded.has(id)) return { createdAt: text(row['created_at']), _id: id }; // leaving the loop resets the statement
    }
    return undefined;
  }

  current(id: string): SessionState | undefined {
    const row = this.reader.prepare(CURRENT_SQL).get(id);
    if (row === undefined) return undefined;
    const createdAt = textOrUndefined(row['last_turn_at']);
    const _id = textOrUndefined(row['last_turn_id']);
    const version = text(row['version']);
    return {
      session: JSON.parse(text(row['json'])) as ChatSession,
      lastTurn: createdAt === undefined || _id === undefined ? undefined : { createdAt, _id },
      held: { turns: int(row['turn_count']), turnBytes: int(row['turn_bytes']), ...tokensOfRow(row) },
      version: () => version,
    };
  }

  /** Group: a streaming turn's tail from its last delta's row, or (none since it was made or edited) from its JSON. */
  tail(session: string, id: string): Tail | 'not streaming' | undefined {
    const last = this.reader.prepare('SELECT p.seq, p.bytes, p.tail FROM turns t JOIN turn_pieces p ON p.turn = t.id WHERE t.id = ? AND t.session = ? ORDER BY p.seq DESC LIMIT 1').get(id, session);
    if (last !== undefined) return tailOfRow(int(last['seq']), int(last['bytes']), text(last['tail']));
    const row = this.reader.prepare('SELECT json FROM turns WHERE id = ? AND session = ?').get(id, session);
    if (row === undefined) return undefined;
    const json = bytesOf(row['json']);
    return isStreamingJson(json) ? tailOfJson(json) : 'not streaming';
  }

  release(): void {
    // nothing was taken
  }

  commit(changes: readonly Change[]): Promise<void> {
    const sent = this.send(changes.map((c) => opOf(c, this.turnWords)), changes.length);
    const cache = this.cache;
    if (cache === undefined) return sent;
    // at the serial point: the cache takes the group's sessions before the writer answers any of its writes
    return sent.then(
      () => cache.committed(changes),
      (e: unknown) => {
        // refused, or lost with the writer thread: what the file holds of these sessions is read again
        cache.forget(changes.map((c) => c.session));
        throw e;
      },
    );
  }

  private send(ops: readonly Op[], writes: number): Promise<void> {
    const worker = this.worker;
    if (worker === undefined) return Promise.reject(new Error('the sqlite writer is not running'));
    const seq = ++this.seq;
    return new Promise((resolve, reject) => {
      this.pending.set(seq, { resolve, reject, writes });
      const m: ToWriter = { kind: 'commit', seq, ops };
      worker.postMessage(m);
    });
  }

  async importAll(sessions: readonly ChatSession[], turns: readonly Turn[]): Promise<ImportSummary> {
    if (this.damage !== undefined) throw new StorageDamaged();
    await this.writer.pause();
    try {
      const sessionRow = this.reader.prepare('SELECT json, last_turn_at, last_turn_id FROM sessions WHERE id = ?');
      const turnRow = this.reader.prepare(`SELECT session, json, ${deltasSql('turns')} AS deltas FROM turns WHERE id = ?`);
      const ownerOf = this.reader.prepare('SELECT user FROM sessions WHERE id = ?');
      const lastTurns = new Map<string, TurnKey | undefined>();
      const plan = planImport(sessions, turns, {
        session: (id) => {
          const row = sessionRow.get(id);
          if (row === undefined) return undefined;
          const createdAt = textOrUndefined(row['last_turn_at']);
          const _id = textOrUndefined(row['last_turn_id']);
          lastTurns.set(id, createdAt === undefined || _id === undefined ? undefined : { createdAt, _id });
          return { json: text(row['json']), lastTurnAt: createdAt };
        },
        turn: (id) => {
          const row = turnRow.get(id);
          return row === undefined ? undefined : { session: text(row['session']), json: Buffer.from(withDeltas(bytesOf(row['json']), textOrUndefined(row['deltas']))) };
        },
      });
      const ops: Op[] = [];
      for (const s of plan.sessions) {
        const json = JSON.stringify(s);
        ops.push({ op: 'put', s: putOf(s, json, versionOfSession(json, lastTurns.get(s._id))), usage: undefined });
      }
      for (const t of plan.turns) {
        if (t.replaces !== undefined) ops.push({ op: 'dropTurn', id: t.turn._id, session: t.replaces });
        ops.push({ op: 'turn', session: t.turn.session, t: turnRowOf(t.turn, t.json, this.turnWords), after: undefined });
      }
      if (ops.length > 0) {
        // what the sessions it wrote hold is counted from their rows, then their owners' usage (before and after: an import may move a session)
        const touched = new Set([...plan.sessions.map((s) => s._id), ...plan.turns.flatMap((t) => [t.turn.session, ...(t.replaces !== undefined ? [t.replaces] : [])])]);
        const users = new Set(plan.sessions.map((s) => s.user));
        for (const id of touched) {
          const row = ownerOf.get(id);
          if (row !== undefined) users.add(text(row['user']));
        }
        ops.push({ op: 'recount', sessions: [...touched], users: [...users] });
        try {
          await this.send(ops, ops.length);
        } catch (e) {
          throw new StorageWriteFailed(e);
        } finally {
          // an import writes past the serial writer's changes
          this.cache?.clear();
        }
      }
      return plan.summary;
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
    clearTimeout(this.scanTrim);
    for (const { c } of this.idleScans.splice(0)) c.db.close();
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

// the counts a read takes, each in range whatever the file holds (./numbers.ts)
/** What the purge reads of an expired session. */
const EXPIRED_COLUMNS = `json, ${countColumns('turn_count')}`;
/** A user's usage row. */
const USAGE_SQL = `SELECT ${countColumns('sessions', 'turns', 'bytes', 'input_tokens', 'output_tokens', 'cached_tokens')} FROM users WHERE user = ?`;
/** A session's row as a write decides against it. */
const CURRENT_SQL = `SELECT json, version, last_turn_at, last_turn_id, ${countColumns('turn_count', 'turn_bytes', 'input_tokens', 'output_tokens', 'cached_tokens')} FROM sessions WHERE id = ?`;
/**
 * A turn (?1, of session ?2) and its descendants, with their bytes and tokens. CROSS JOIN keeps
 * the few rows of `sub` outside: joined plainly, the planner scanned every turn of the file.
 */
export const SUBTREE_SQL = `WITH RECURSIVE sub(id) AS (SELECT id FROM turns WHERE id = ?1 AND session = ?2 UNION ALL SELECT t.id FROM turns t JOIN sub s ON t.parent_id = s.id)
  SELECT t.id, t.created_at, t.parent_id, ${turnBytesSql('t')} AS bytes, ${countColumns('t.input_tokens', 't.output_tokens', 't.cached_tokens')} FROM sub CROSS JOIN turns t ON t.id = sub.id`;
/** The store's counters. */
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

function putOf(s: ChatSession, json: string, version: string): PutSession {
  return {
    id: s._id,
    user: s.user,
    project: s.project,
    archived: s.archived,
    updatedAt: s.updatedAt,
    nameFolded: foldForSearch(s.name),
    json,
    version,
    head: s.headTurnId,
    tags: foldedTags(s),
    expiresAt: s.expiresAt ?? null,
    keep: s.expiresAt === null,
  };
}

function afterOf(c: { readonly session: ChatSession; readonly sessionJson: string; readonly version: string; readonly held: Held; readonly usage: UsageDelta }, lastTurn: TurnKey | undefined): SessionAfter {
  return { json: c.sessionJson, version: c.version, updatedAt: c.session.updatedAt, head: c.session.headTurnId, lastTurn, held: c.held, usage: c.usage };
}

/** What a write queues for the index with a turn (schema.ts). */
function turnWordsOf(t: Turn): string | true | null {
  return queuedTurnWords(t.content);
}

function noWords(): null {
  return null;
}

function turnRowOf(turn: Turn, json: Buffer, words: (t: Turn) => string | true | null, pathKey: string | null = null): TurnRow {
  return { id: turn._id, parentId: turn.parentId, createdAt: turn.createdAt, json, words: words(turn), tokens: tokensOf(turn.usage), pathKey };
}

function opOf(c: Change, words: (t: Turn) => string | true | null): Op {
  switch (c.kind) {
    case 'create':
    case 'update':
      return { op: 'put', s: putOf(c.session, c.json, c.version), usage: c.usage };
    case 'turn':
      return { op: 'turn', session: c.session._id, t: turnRowOf(c.turn, c.json, words, c.pathKey ?? null), after: afterOf(c, { createdAt: c.turn.createdAt, _id: c.turn._id }) };
    case 'editTurn':
      return { op: 'editTurn', session: c.session._id, id: c.turn._id, json: c.json, words: words(c.turn), tokens: tokensOf(c.turn.usage), after: afterOf(c, c.lastTurn), pathKey: c.pathKey };
    case 'delta':
      return { op: 'delta', session: c.session._id, turn: c.turnId, seq: c.seq, pieces: piecesText(c.pieces), bytes: c.bytes, end: endText(c.end), held: c.held, usage: c.usage };
    case 'deleteTurns':
      return { op: 'dropTurns', session: c.sessionId, ids: c.ids, after: afterOf(c, c.lastTurn) };
    case 'fork': {
      const last = c.turns[c.turns.length - 1]?.turn;
      return {
        op: 'fork',
        s: putOf(c.session, c.json, c.version),
        lastTurn: last === undefined ? undefined : { createdAt: last.createdAt, _id: last._id },
        turns: c.turns.map((t) => turnRowOf(t.turn, t.json, words)),
        held: c.held,
        usage: c.usage,
      };
    }
    case 'delete':
      return { op: 'delete', id: c.id, usage: c.usage };
  }
}

/** Opens the sqlite store for a server or an import. */
export function openSqliteStore(opts: SqliteOptions): Promise<Store> {
  return SqliteStore.open(opts);
}

/** Opens the sqlite store read-only beside a running server (export). */
export function openSqliteSnapshot(opts: { file: string; log: Logger; cacheBytes: number }): Promise<Store> {
  return SqliteStore.openReadOnly({ ...opts, fsync: false });
}
