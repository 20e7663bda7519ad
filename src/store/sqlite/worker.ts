// The sqlite engine's writer: a worker thread that owns the writing connection. Each group of
// changes from the serial writer becomes one transaction (synchronous=FULL: durable when
// COMMIT returns), applied here so that neither the commit's fsync nor a WAL checkpoint ever
// blocks the event loop that answers requests. It keeps what the main thread reads cheaply:
// each session's newest turn, its version, its turn count and bytes, and the store's counters.
import { isMainThread, parentPort, workerData, type MessagePort } from 'node:worker_threads';
import { turnBefore, type TurnKey } from '../../domain/order.js';
import type { Tokens } from '../../domain/records.js';
import type { UsageDelta } from '../changes.js';
import type { Held } from '../store.js';
import { versionOfSession } from '../../domain/version.js';
import { held, injectedFault } from '../faults.js';
import { int, sqliteCode, sqliteDatabase, text, textOrUndefined, type Database, type Statement } from './binding.js';
import { runFullCheckIfAsked } from './full-check.js';
import { placesOfChain, placesSql, placeUnder, type TreePlace } from '../tree-index.js';
import { QUEUED_WORDS_SQL, registerSearchFunctions } from './schema.js';
import { RECOUNT_COUNTERS_SQL, RECOUNT_SESSION_SQL, RECOUNT_SESSION_TOKENS_SQL, RECOUNT_USER_SQL, settledSql, totalSql } from './numbers.js';
import { TOKEN_FIGURES, TotalDelta, type TokenFigure } from '../totals.js';
import { COUNT_MAX } from '../../domain/numbers.js';
import { reserveFileOf, SpaceReserve } from './reserve.js';

export const WRITER_ROLE = 'chat-session-api:sqlite-writer';

export interface WriterData {
  readonly role: typeof WRITER_ROLE;
  readonly file: string;
  readonly cacheBytes: number;
  readonly fsync: boolean;
  /** Whether the writer indexes what the commits queue (SEARCH=on). */
  readonly index: boolean;
}

/** A session's columns as a put writes them (a create, an update, an import). */
export interface PutSession {
  readonly id: string;
  readonly user: string;
  readonly project: string;
  readonly archived: boolean;
  readonly updatedAt: string;
  readonly nameFolded: string;
  readonly json: string;
  readonly version: string;
  readonly head: string | null;
  /** Its tags, folded, each once. */
  readonly tags: readonly string[];
  /** Its own expiry (null: none given or never) and whether it is kept whatever RETENTION_DAYS says. */
  readonly expiresAt: string | null;
  readonly keep: boolean;
}

/** A session's row as a change of its turns leaves it (the writer decided it all). */
export interface SessionAfter {
  readonly json: string;
  readonly version: string;
  readonly updatedAt: string;
  readonly head: string | null;
  readonly lastTurn: TurnKey | undefined;
  readonly held: Held;
  readonly usage: UsageDelta;
}

/** A turn's row. */
export interface TurnRow {
  readonly id: string;
  readonly parentId: string | null;
  readonly createdAt: string;
  readonly json: Uint8Array;
  /** What the search index is given for it (schema.ts queuedTurnWords; null with SEARCH=off). */
  readonly words: string | true | null;
  /** Its usage's tokens (kept so that deleting it gives them back without reading its JSON). */
  readonly tokens: Tokens;
  /** The hash of its path from the root (the OpenAI door's index), or null. */
  readonly pathKey: string | null;
}

/**
 * One change of a group, as the main thread sends it. A write's carries what its session's
 * turns hold after it (`held`) and what it adds to its owner's usage (`usage`), as the serial
 * writer decided them: applied here as they are. An import's ops carry neither: its `recount`
 * sums the sessions and users it touched from their rows.
 */
export type Op =
  | { readonly op: 'put'; readonly s: PutSession; readonly usage: UsageDelta | undefined }
  | {
      readonly op: 'turn';
      readonly session: string;
      readonly t: TurnRow;
      /** The session as the turn leaves it, what it holds and adds; undefined for an import, which leaves the session as it put it. */
      readonly after: SessionAfter | undefined;
    }
  | {
      readonly op: 'editTurn';
      readonly session: string;
      readonly id: string;
      readonly json: Uint8Array;
      readonly words: string | true | null;
      readonly tokens: Tokens;
      readonly after: SessionAfter;
      /** Its path key: set, cleared (null), or kept (undefined). */
      readonly pathKey: string | null | undefined;
    }
  /** A streaming turn's delta, a row of its own (../pieces.ts): its session changes only in what its turns hold. */
  | { readonly op: 'delta'; readonly session: string; readonly turn: string; readonly seq: number; readonly pieces: string; readonly bytes: number; readonly end: string; readonly held: Held; readonly usage: UsageDelta }
  | { readonly op: 'dropTurns'; readonly session: string; readonly ids: readonly string[]; readonly after: SessionAfter }
  | { readonly op: 'fork'; readonly s: PutSession; readonly lastTurn: TurnKey | undefined; readonly turns: readonly TurnRow[]; readonly held: Held; readonly usage: UsageDelta }
  /** Removes one turn (an import replacing it). */
  | { readonly op: 'dropTurn'; readonly id: string; readonly session: string }
  | { readonly op: 'delete'; readonly id: string; readonly usage: UsageDelta }
  /** After an import's ops: what these sessions' turns hold, counted from their rows, then these users' usage and the store's counters from the sessions'. */
  | { readonly op: 'recount'; readonly sessions: readonly string[]; readonly users: readonly string[] };

export type ToWriter =
  | { readonly kind: 'commit'; readonly seq: number; readonly ops: readonly Op[] }
  /** The file was found damaged: the indexer writes nothing more to it (commits are refused before they get here). */
  | { readonly kind: 'damaged' }
  | { readonly kind: 'close' };
export type FromWriter =
  | { readonly kind: 'ready' }
  | { readonly kind: 'done'; readonly seq: number; readonly seconds: number }
  /**
   * `damaged`: SQLite reported the file malformed (SQLITE_CORRUPT, SQLITE_NOTADB). `roomForDeletes`:
   * a full disk refused a group that mixes deletes with writes that add; its deletes alone would have the reserve.
   */
  | { readonly kind: 'failed'; readonly seq: number; readonly message: string; readonly damaged: boolean; readonly roomForDeletes: boolean }
  | { readonly kind: 'fatal'; readonly message: string }
  /** The background indexer's transaction failed (rolled back; tried again after the next commit). */
  | { readonly kind: 'indexFailed'; readonly message: string }
  /** The background indexer committed a batch of names and turns. */
  | { readonly kind: 'indexed' }
  /** The idle merge committed a step that merged something; or failed one (rolled back; tried again when next idle). */
  | { readonly kind: 'merged' }
  | { readonly kind: 'mergeFailed'; readonly message: string }
  | { readonly kind: 'closed' };

/**
 * Starts the writer when this thread is one, or the full check (./full-check.ts) when this
 * process was started as one; false otherwise.
 */
export function runSqliteWriterIfWorker(): boolean {
  if (runFullCheckIfAsked()) return true;
  if (isMainThread || parentPort === null) return false;
  const data = workerData as Partial<WriterData> | undefined;
  if (data?.role !== WRITER_ROLE) return false;
  runWriter(data as WriterData, parentPort);
  return true;
}

/** Commits between two passive checkpoints (or less time, see CHECKPOINT_MS). */
const CHECKPOINT_EVERY = 256;
const CHECKPOINT_MS = 1000;

function runWriter(data: WriterData, port: MessagePort): void {
  const post = (m: FromWriter): void => port.postMessage(m);
  let commits = 0;
  let lastCheckpoint = Date.now();
  /** After each transaction (a group's, the indexer's): a passive checkpoint when due, so an idle merge's writes do not pile up in the log either. */
  const committed = (): void => {
    if (++commits < CHECKPOINT_EVERY && Date.now() - lastCheckpoint < CHECKPOINT_MS) return;
    commits = 0;
    lastCheckpoint = Date.now();
    try {
      db.exec('PRAGMA wal_checkpoint(PASSIVE)');
    } catch {
      // busy: the next one catches up
    }
  };
  let db: Database;
  let w: Writes;
  let indexer: Indexer | undefined;
  const reserve = new SpaceReserve(reserveFileOf(data.file));
  try {
    const DatabaseSync = sqliteDatabase();
    db = new DatabaseSync(data.file, { timeout: 10_000 });
    db.exec(`PRAGMA synchronous = ${data.fsync ? 'FULL' : 'OFF'}`);
    db.exec(`PRAGMA cache_size = ${-Math.max(64, Math.floor(data.cacheBytes / 1024))}`);
    db.exec('PRAGMA wal_autocheckpoint = 0'); // checkpoints are run here, between commits
    db.exec('PRAGMA journal_size_limit = 67108864');
    registerSearchFunctions(db);
    w = new Writes(db);
    reserve.take();
    if (data.index) {
      indexer = new Indexer(
        db,
        data.fsync,
        (message) => post({ kind: 'indexFailed', message }),
        committed,
        () => post({ kind: 'indexed' }),
        () => post({ kind: 'merged' }),
        (message) => post({ kind: 'mergeFailed', message }),
      );
    }
  } catch (e) {
    post({ kind: 'fatal', message: e instanceof Error ? e.message : String(e) });
    return;
  }
  port.on('message', (m: ToWriter) => {
    if (m.kind === 'damaged') {
      indexer?.stop();
      indexer = undefined;
      return;
    }
    if (m.kind === 'close') {
      // what is still queued is indexed first: a store at rest leaves nothing for the next start to write
      indexer?.finish();
      try {
        db.exec('PRAGMA wal_checkpoint(TRUNCATE)');
      } catch {
        // a reader still holds the WAL: it is checkpointed at the next start
      }
      db.close();
      reserve.remove();
      post({ kind: 'closed' });
      port.close();
      return;
    }
    const started = process.hrtime.bigint();
    // the reserve is taken again before anything else may use the room (a no-op while it is whole)
    if (reserve.short) reserve.take();
    let roomMade = false;
    try {
      roomMade = commitMakingRoom(w, m.ops, reserve);
      post({ kind: 'done', seq: m.seq, seconds: Number(process.hrtime.bigint() - started) / 1e9 });
    } catch (e) {
      const code = sqliteCode(e);
      // deletes grouped with writes that add: the reserve is theirs once they go alone (../writer.ts RoomOnlyForDeletes)
      const roomForDeletes = code === SQLITE_FULL && reserve.held > 0 && m.ops.some(takesAway);
      post({ kind: 'failed', seq: m.seq, message: e instanceof Error ? e.message : String(e), damaged: code === 11 || code === 26, roomForDeletes });
    }
    if (roomMade) afterRoomMade(db, reserve);
    // a delta queues nothing: the index keeps a streaming turn's text as it was before its deltas
    indexer?.queued(m.ops.reduce((n, op) => n + (op.op === 'fork' ? 1 + op.turns.length : op.op === 'delta' || op.op === 'recount' ? 0 : 1), 0));
    committed();
  });
  post({ kind: 'ready' });
  // what an earlier run (or one with SEARCH=off) left queued
  indexer?.schedule();
}

/** SQLITE_FULL: a write found the disk (or the file's size limit) full. */
const SQLITE_FULL = 13;

/** Whether an op only takes data away (a delete of a session or of turns). */
function takesAway(op: Op): boolean {
  return op.op === 'delete' || op.op === 'dropTurns';
}

/** Whether a group only takes data away: the only groups the reserve is given back for. */
function onlyTakesAway(ops: readonly Op[]): boolean {
  return ops.every(takesAway);
}

/**
 * Commits a group; one that only takes data away and meets a full disk is tried once more with
 * the reserve given back (./reserve.ts). Answers whether that happened: the caller then makes the
 * room lasting (afterRoomMade). A group that adds data never gets the reserve: on a full disk it
 * fails as before.
 */
function commitMakingRoom(w: Writes, ops: readonly Op[], reserve: SpaceReserve): boolean {
  try {
    w.commit(ops);
    return false;
  } catch (e) {
    if (sqliteCode(e) !== SQLITE_FULL || !onlyTakesAway(ops) || reserve.held === 0) throw e;
  }
  reserve.giveBack();
  try {
    w.commit(ops);
  } catch (e) {
    // still no room (a delete larger than the reserve): try to hold the reserve again
    reserve.take();
    throw e;
  }
  return true;
}

/**
 * After a delete that used the reserve: its frames and the log's older ones are checkpointed
 * into the file (where the delete's pages are free for new rows) and the log is cut to nothing,
 * which gives its room back; then the reserve is taken again, as much of it as there is room for
 * (the rest before a later commit). Not waiting for readers: what a reader still needs stays in
 * the log, and the writer's next passive checkpoint takes it.
 */
function afterRoomMade(db: Database, reserve: SpaceReserve): void {
  try {
    db.exec('PRAGMA busy_timeout = 0');
    db.exec('PRAGMA wal_checkpoint(TRUNCATE)');
  } catch {
    // a full disk may stop the checkpoint short (the file must grow for pages the log added): the log keeps them
  } finally {
    db.exec('PRAGMA busy_timeout = 10000');
  }
  reserve.take();
}

/**
 * Names and turns the indexer takes from each queue in one transaction: what has gathered, at
 * least 64, twice as many with each batch while the queue has more, at most 1,024 (FTS5 writes
 * each transaction's words as a segment of its own: a turn of 1 KiB cost it ~26 µs in batches of
 * 64, ~20 in batches of 256 and ~14 in batches of 1,024), back to 64 once it is empty. A commit
 * waiting for the thread waits for one batch.
 */
const FIRST_INDEX_BATCH = 64;
const MOST_INDEX_BATCH = 1024;
/**
 * The indexer starts once about this many names and turns are queued, or once the writer has
 * had nothing queued for INDEX_IDLE_MS: under a steady load it indexes about a thousand at a
 * time (FTS5 took ~20 µs a turn of 1 KiB in batches of 256 against ~14 in batches of 1,024; a
 * batch per commit, of what that commit queued, cost twice as much again), when quiet at once.
 * A search meanwhile reads its caller's queued names and turns by their text (a few ms for a
 * thousand queued turns).
 */
const INDEX_GATHER = 1024;
const INDEX_IDLE_MS = 5;
/**
 * FTS5 merges an index's segments as it writes them, 16 of a level at a time (automerge, set by
 * schema 8 with crisismerge 64; its defaults are 4 and 16): each word's list is rewritten once a
 * level, and with 16 a level there are half as many levels (the indexer's CPU per 1 KiB turn
 * ~19 -> ~15 µs), but more segments for a search to read (24 against 12 at 1M turns). Once the
 * writer has had nothing to commit for MERGE_IDLE_MS, the indexer merges further, MERGE_PAGES
 * pages of each index a step (~25 ms at 1M turns), one step per turn of the thread's event loop,
 * until FTS5's 'merge' command finds nothing to do (no level holds 4 segments, no segment is
 * mostly deleted) or a commit comes: a busy server writes cheaply, one with time to spare reads
 * fewer segments again.
 */
const MERGE_IDLE_MS = 1000;
const MERGE_PAGES = 128;

/**
 * Indexes what the commits queued (names_unindexed, turns_unindexed: ./schema.ts), a batch per
 * turn of the thread's event loop, so a commit waiting for the thread waits for one batch at
 * most. Its transactions are not fsync'd: each one's words and its queue's rows go together,
 * so one lost to a power cut leaves its names and turns queued, and the next durable commit
 * syncs the log they are in anyway.
 */
export class Indexer {
  private scheduled = false;
  private stopped = false;
  /** The idle merge's next step: waiting for the writer to be idle, or for the next turn of the event loop. */
  private mergeIdle: NodeJS.Timeout | undefined;
  private mergeNext: NodeJS.Immediate | undefined;
  private size = FIRST_INDEX_BATCH;
  /** About how many wait since the queue was last emptied (unknown at start: as many as may be). */
  private waiting = Infinity;
  private idle: NodeJS.Timeout | undefined;
  private readonly lastName: Statement;
  private readonly lastTurn: Statement;
  private readonly indexNames: Statement;
  private readonly indexTurns: Statement;
  private readonly dequeueNames: Statement;
  private readonly dequeueTurns: Statement;
  private readonly mergeNames: Statement;
  private readonly mergeTurns: Statement;
  private readonly totalChanges: Statement;

  constructor(
    private readonly db: Database,
    private readonly fsync: boolean,
    private readonly failed: (message: string) => void,
    private readonly committed: () => void,
    /** A batch committed, of `taken` from the fuller queue. */
    private readonly batched: (taken: number) => void,
    /** A step of the idle merge committed. */
    private readonly merged: () => void = () => {},
    private readonly mergeFailed: (message: string) => void = failed,
  ) {
    this.lastName = db.prepare('SELECT max(rowid) AS upto FROM (SELECT rowid FROM names_unindexed ORDER BY rowid LIMIT ?)');
    this.lastTurn = db.prepare('SELECT max(rowid) AS upto FROM (SELECT rowid FROM turns_unindexed ORDER BY rowid LIMIT ?)');
    // the queue first (CROSS JOIN): left to the planner, a join read every turn to find the queued ones (74 µs a turn at 20,000)
    this.indexNames = db.prepare('INSERT INTO name_words (rowid, words) SELECT s.rowid, csa_name_words(s.json) FROM names_unindexed u CROSS JOIN sessions s ON s.rowid = u.rowid WHERE u.rowid <= ?');
    this.indexTurns = db.prepare(`INSERT INTO turn_words (rowid, words) SELECT rowid, ${QUEUED_WORDS_SQL} FROM turns_unindexed u WHERE rowid <= ?`);
    this.dequeueNames = db.prepare('DELETE FROM names_unindexed WHERE rowid <= ?');
    this.dequeueTurns = db.prepare('DELETE FROM turns_unindexed WHERE rowid <= ?');
    this.mergeNames = db.prepare("INSERT INTO name_words (name_words, rank) VALUES ('merge', ?)");
    this.mergeTurns = db.prepare("INSERT INTO turn_words (turn_words, rank) VALUES ('merge', ?)");
    this.totalChanges = db.prepare('SELECT total_changes() AS n');
  }

  /** A commit queued about `n` names and turns. */
  queued(n: number): void {
    this.mergeWhenIdle();
    this.waiting += n;
    if (this.waiting >= INDEX_GATHER) {
      // what has gathered goes in one transaction where it can
      this.size = Math.min(MOST_INDEX_BATCH, Math.max(this.size, this.waiting));
      this.schedule();
    } else this.indexWhenIdle();
  }

  /** (Re)starts the wait after which what is queued is indexed whatever its number (INDEX_IDLE_MS). */
  private indexWhenIdle(): void {
    if (this.idle !== undefined) clearTimeout(this.idle);
    this.idle = setTimeout(() => this.schedule(), INDEX_IDLE_MS);
  }

  /**
   * Indexes batch after batch, a batch per turn of the thread's event loop, while a whole batch
   * waits; what is left of less than that waits, like any commit's, until enough gather or the
   * writer is idle (under a steady load a batch after each commit would take only what that
   * commit queued: FTS5's dearest way, which once cost twice as much per turn under load as
   * the same queue indexed at start).
   */
  schedule(): void {
    if (this.idle !== undefined) clearTimeout(this.idle);
    this.idle = undefined;
    if (this.scheduled || this.stopped || held('index')) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      if (this.stopped) return;
      const size = this.size;
      const taken = this.batch();
      if (taken < 0) {
        // failed (a full disk, say): how many wait is unknown again, and the next commit tries again
        this.waiting = Infinity;
        return;
      }
      // fewer than asked for: the queue is empty
      this.waiting = taken < size ? 0 : Math.max(0, this.waiting - taken);
      if (taken < size) this.mergeWhenIdle();
      else if (this.waiting >= this.size) this.schedule();
      else this.indexWhenIdle();
    });
  }

  /** (Re)starts the wait for the writer to be idle, after which the index is merged (MERGE_IDLE_MS); a merge under way stops. */
  mergeWhenIdle(): void {
    if (this.mergeIdle !== undefined) this.mergeIdle.refresh();
    else this.mergeIdle = setTimeout(() => this.merge(), MERGE_IDLE_MS);
    if (this.mergeNext !== undefined) clearImmediate(this.mergeNext);
    this.mergeNext = undefined;
  }

  /** One step of the idle merge, and the next on the next turn of the event loop while a step finds work. */
  private merge(): void {
    this.mergeIdle = undefined;
    this.mergeNext = undefined;
    if (this.stopped || this.scheduled || held('merge')) return;
    const changes = (): number => int(this.totalChanges.get()?.['n']);
    let worked = false;
    const done = this.transaction(() => {
      // each command is a no-op when it changes fewer than 2 rows (FTS5's documentation)
      for (const command of [this.mergeTurns, this.mergeNames]) {
        const before = changes();
        command.run(MERGE_PAGES);
        if (changes() - before >= 2) worked = true;
      }
    }, this.mergeFailed);
    if (!done || !worked) return; // a failed step is tried again when the writer is next idle
    this.merged();
    this.mergeNext = setImmediate(() => this.merge());
  }

  /** Stops at once, leaving what is queued queued. */
  stop(): void {
    this.stopped = true;
    if (this.idle !== undefined) clearTimeout(this.idle);
    if (this.mergeIdle !== undefined) clearTimeout(this.mergeIdle);
    if (this.mergeNext !== undefined) clearImmediate(this.mergeNext);
  }

  /** Indexes everything still queued, batch after batch, and stops (the store is closing). */
  finish(): void {
    this.stop();
    if (held('index')) return;
    this.size = MOST_INDEX_BATCH;
    while (this.batch() === MOST_INDEX_BATCH) {
      // until the queue is empty, or a batch fails (it stays queued for the next start)
    }
  }

  /** One batch of `size` from each queue in one transaction: how many it took from the fuller one (0: both empty; -1: it failed). */
  private batch(): number {
    const size = this.size;
    const names = this.lastName.get(size)?.['upto'];
    const turns = this.lastTurn.get(size)?.['upto'];
    if (typeof names !== 'number' && typeof turns !== 'number') {
      this.size = FIRST_INDEX_BATCH;
      return 0;
    }
    let taken = 0;
    const done = this.transaction(() => {
      if (typeof names === 'number') {
        this.indexNames.run(names);
        taken = Number(this.dequeueNames.run(names).changes);
      }
      if (typeof turns === 'number') {
        this.indexTurns.run(turns);
        taken = Math.max(taken, Number(this.dequeueTurns.run(turns).changes));
      }
    });
    // a failed one (a full disk, say) leaves the queue as it was
    if (!done) return -1;
    this.batched(taken);
    this.size = taken < size ? FIRST_INDEX_BATCH : Math.min(MOST_INDEX_BATCH, size * 2);
    return taken;
  }

  /** One transaction of the indexer's, not fsync'd; whether it committed (a failure is rolled back and reported to `failed`). */
  private transaction(body: () => void, failed: (message: string) => void = this.failed): boolean {
    if (this.fsync) this.db.exec('PRAGMA synchronous = NORMAL');
    try {
      this.db.exec('BEGIN IMMEDIATE');
      try {
        body();
        this.db.exec('COMMIT');
      } catch (e) {
        try {
          this.db.exec('ROLLBACK');
        } catch {
          // already rolled back
        }
        throw e;
      }
    } catch (e) {
      failed(e instanceof Error ? e.message : String(e));
      return false;
    } finally {
      if (this.fsync) this.db.exec('PRAGMA synchronous = FULL');
    }
    this.committed();
    return true;
  }
}

/** The writing connection's statements and what one group's transaction does with them. */
class Writes {
  private readonly begin: Statement;
  private readonly commitTx: Statement;
  private readonly rollback: Statement;
  private readonly sessionRow: Statement;
  private readonly upsertSession: Statement;
  private readonly dropTags: Statement;
  private readonly addTag: Statement;
  private readonly insertTurn: Statement;
  private readonly turnSession: Statement;
  private readonly deleteTurn: Statement;
  private readonly newestTurn: Statement;
  private readonly setLastTurn: Statement;
  private readonly setHeld: Statement;
  private readonly recountTokens: Statement;
  private readonly deleteTurns: Statement;
  private readonly deleteSession: Statement;
  private readonly addCounter: Statement;
  private readonly settleCounter: Readonly<Record<TokenFigure, Statement>>;
  private readonly addUsage: Statement;
  private readonly dropIdleUser: Statement;
  private readonly setTurnJson: Statement;
  private readonly insertDelta: Statement;
  private readonly foldDeltas: Statement;
  private readonly queueTurn: Statement;
  private readonly queueNewTurn: Statement;
  private readonly unindexTurn: Statement;
  private readonly setSessionAfter: Statement;
  private readonly placeOf: Statement;
  /** Sets depth and jump pointer of every turn of a session (after an import). */
  private readonly replace: Statement;
  /** An import's recount: one session's turns counted from their rows, then users and counters from the sessions'. */
  private readonly recountSession: Statement;
  private readonly dropUser: Statement;
  private readonly recountUser: Statement;
  private readonly recountCounters: Statement;

  constructor(db: Database) {
    this.begin = db.prepare('BEGIN IMMEDIATE');
    this.commitTx = db.prepare('COMMIT');
    this.rollback = db.prepare('ROLLBACK');
    this.sessionRow = db.prepare('SELECT json, updated_at, head_turn_id, last_turn_at, last_turn_id FROM sessions WHERE id = ?');
    this.upsertSession = db.prepare(
      `INSERT INTO sessions (id, user, project, archived, updated_at, name_folded, json, json_bytes, version, head_turn_id, expires_at, keep) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (id) DO UPDATE SET user = excluded.user, project = excluded.project, archived = excluded.archived, updated_at = excluded.updated_at,
         name_folded = excluded.name_folded, json = excluded.json, json_bytes = excluded.json_bytes, version = excluded.version, head_turn_id = excluded.head_turn_id,
         expires_at = excluded.expires_at, keep = excluded.keep`,
    );
    this.dropTags = db.prepare('DELETE FROM session_tags WHERE session = ?');
    this.addTag = db.prepare('INSERT INTO session_tags (session, tag, user, project, archived, updated_at) VALUES (?, ?, ?, ?, ?, ?)');
    this.insertTurn = db.prepare('INSERT INTO turns (id, session, parent_id, created_at, json, depth, skip_id, input_tokens, output_tokens, cached_tokens, path_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)');
    this.placeOf = db.prepare('SELECT id, depth, skip_id FROM turns WHERE id = ?');
    this.replace = db.prepare(placesSql('turns', 'session = ?'));
    this.setTurnJson = db.prepare('UPDATE turns SET json = ?, input_tokens = ?, output_tokens = ?, cached_tokens = ?, path_key = CASE WHEN ? THEN ? ELSE path_key END WHERE id = ?');
    this.insertDelta = db.prepare('INSERT INTO turn_pieces (turn, seq, pieces, bytes, tail) VALUES (?, ?, ?, ?, ?)');
    this.foldDeltas = db.prepare('DELETE FROM turn_pieces WHERE turn = ?');
    this.unindexTurn = db.prepare('DELETE FROM turn_words WHERE rowid = (SELECT rowid FROM turns WHERE id = ?)');
    this.queueNewTurn = db.prepare('INSERT INTO turns_unindexed (rowid, words, content_as_is) VALUES (?, ?, ?)');
    this.queueTurn = db.prepare('INSERT OR REPLACE INTO turns_unindexed (rowid, words, content_as_is) SELECT rowid, ?, ? FROM turns WHERE id = ?');
    this.setSessionAfter = db.prepare(
      `UPDATE sessions SET updated_at = ?, json = ?, json_bytes = ?, version = ?, head_turn_id = ?, last_turn_at = ?, last_turn_id = ?,
         turn_count = ?, turn_bytes = ?, input_tokens = ?, output_tokens = ?, cached_tokens = ? WHERE id = ?`,
    );
    this.setHeld = db.prepare('UPDATE sessions SET turn_count = ?, turn_bytes = ?, input_tokens = ?, output_tokens = ?, cached_tokens = ? WHERE id = ?');
    this.recountTokens = db.prepare(RECOUNT_SESSION_TOKENS_SQL);
    this.turnSession = db.prepare('SELECT session FROM turns WHERE id = ?');
    this.deleteTurn = db.prepare('DELETE FROM turns WHERE id = ?');
    this.newestTurn = db.prepare('SELECT created_at, id FROM turns WHERE session = ? ORDER BY created_at DESC, id DESC LIMIT 1');
    this.setLastTurn = db.prepare('UPDATE sessions SET version = ?, last_turn_at = ?, last_turn_id = ? WHERE id = ?');
    this.deleteTurns = db.prepare('DELETE FROM turns WHERE session = ?');
    this.deleteSession = db.prepare('DELETE FROM sessions WHERE id = ?');
    this.addCounter = db.prepare('UPDATE counters SET value = value + ? WHERE name = ?');
    // a token counter settles as ../totals.ts says, counted again from the users' rows (written before it)
    const counter = (c: string): Statement => db.prepare(`UPDATE counters SET value = ${settledSql('value', '?1', '?2', `(SELECT ${totalSql(c)} FROM users)`)} WHERE name = '${c}'`);
    this.settleCounter = { inputTokens: counter('input_tokens'), outputTokens: counter('output_tokens'), cachedTokens: counter('cached_tokens') };
    // ?1 the user, ?2-?4 sessions, turns and bytes added; ?5-?7 each token figure's delta, ?8-?10 whether it is counted again (from the user's sessions)
    const tokens = TOKEN_COLUMNS.map((c, i) => ({ c, delta: `?${5 + i}`, recount: `?${8 + i}`, again: `(SELECT ${totalSql(`s.${c}`)} FROM sessions s WHERE s.user = ?1)` }));
    this.addUsage = db.prepare(
      `INSERT INTO users (user, sessions, turns, bytes, input_tokens, output_tokens, cached_tokens)
         VALUES (?1, ?2, ?3, ?4, ${tokens.map((t) => `CASE WHEN ${t.recount} = 1 THEN ${t.again} ELSE max(0, min(${COUNT_MAX}, ${t.delta})) END`).join(', ')})
       ON CONFLICT (user) DO UPDATE SET sessions = sessions + excluded.sessions, turns = turns + excluded.turns, bytes = bytes + excluded.bytes,
         ${tokens.map((t) => `${t.c} = ${settledSql(`users.${t.c}`, t.delta, t.recount, t.again)}`).join(', ')}`,
    );
    this.dropIdleUser = db.prepare('DELETE FROM users WHERE user = ? AND sessions = 0');
    this.recountSession = db.prepare(RECOUNT_SESSION_SQL);
    this.dropUser = db.prepare('DELETE FROM users WHERE user = ?');
    this.recountUser = db.prepare(RECOUNT_USER_SQL);
    this.recountCounters = db.prepare(RECOUNT_COUNTERS_SQL);
  }

  /** One group: every op in one transaction, all of them committed or none. */
  commit(ops: readonly Op[]): void {
    this.begin.run();
    try {
      const users = new Map<string, TotalDelta>();
      const total = new TotalDelta();
      let charged = false;
      const imported = new Set<string>();
      for (const op of ops) {
        this.apply(op);
        const usage = usageOfOp(op);
        if (usage !== undefined) {
          let u = users.get(usage.owner);
          if (u === undefined) users.set(usage.owner, (u = new TotalDelta()));
          u.add(usage);
          total.add(usage);
          charged = true;
        }
        if ((op.op === 'turn' && op.after === undefined) || op.op === 'dropTurn') imported.add(op.session);
      }
      // an import may give a stored turn another parent: its session's depths are made again
      for (const session of imported) this.replace.run(session);
      // the users first: a token counter is counted again from them
      for (const [user, u] of users) {
        const t = TOKEN_FIGURES.map((k) => u.token(k));
        this.addUsage.run(user, u.sessions, u.turns, u.bytes, ...t.map((x) => x.delta), ...t.map((x) => (x.recount ? 1 : 0)));
        if (u.sessions < 0) this.dropIdleUser.run(user);
      }
      if (charged) {
        for (const [name, key] of COUNTERS) if (total[key] !== 0) this.addCounter.run(total[key], name);
        for (const k of TOKEN_FIGURES) {
          const t = total.token(k);
          if (t.delta !== 0 || t.recount) this.settleCounter[k].run(t.delta, t.recount ? 1 : 0);
        }
      }
      const fault = injectedFault('commit');
      if (fault !== undefined) throw fault;
      this.commitTx.run();
    } catch (e) {
      try {
        this.rollback.run();
      } catch {
        // SQLite already rolled back (a failed COMMIT of an I/O error does)
      }
      throw e;
    }
  }

  /** A session's row and its tags' rows (`stored`: it had rows already, which go). */
  private putSession(s: PutSession, stored: boolean): void {
    this.upsertSession.run(s.id, s.user, s.project, s.archived ? 1 : 0, s.updatedAt, s.nameFolded, s.json, Buffer.byteLength(s.json), s.version, s.head, s.expiresAt, s.keep ? 1 : 0);
    if (stored) this.dropTags.run(s.id);
    for (const tag of s.tags) this.addTag.run(s.id, tag, s.user, s.project, s.archived ? 1 : 0, s.updatedAt);
  }

  /** The depth and jump pointer of a turn under `parentId` (null: a root). */
  private placeUnder(parentId: string | null): TreePlace {
    if (parentId === null) return placeUnder(undefined);
    const p = this.placeOf.get(parentId);
    return placeUnder(p === undefined ? undefined : { id: text(p['id']), depth: int(p['depth']), skipId: textOrUndefined(p['skip_id']) ?? null });
  }

  /** A session's row as a change of its turns leaves it. */
  private sessionAfter(id: string, after: SessionAfter): void {
    const last = after.lastTurn;
    const h = after.held;
    this.setSessionAfter.run(after.updatedAt, after.json, Buffer.byteLength(after.json), after.version, after.head, last?.createdAt ?? null, last?._id ?? null, h.turns, h.turnBytes, h.inputTokens, h.outputTokens, h.cachedTokens, id);
    this.recountIfAsked(id, h);
  }

  /** What a session's turns hold, written as the writer decided it. */
  private setHeldOf(id: string, h: Held): void {
    this.setHeld.run(h.turns, h.turnBytes, h.inputTokens, h.outputTokens, h.cachedTokens, id);
    this.recountIfAsked(id, h);
  }

  /** The session's tokens counted again from its turns as this group leaves them, when the writer took from a figure at the top. */
  private recountIfAsked(id: string, h: Held): void {
    if (h.recount === true) this.recountTokens.run(id);
  }

  private insert(session: string, t: TurnRow, place: TreePlace): void {
    const rowid = this.insertTurn.run(t.id, session, t.parentId, t.createdAt, t.json, place.depth, place.skipId, t.tokens.inputTokens, t.tokens.outputTokens, t.tokens.cachedTokens, t.pathKey).lastInsertRowid;
    this.queueNewTurn.run(rowid, ...queuedColumns(t.words));
  }

  private apply(op: Op): void {
    switch (op.op) {
      case 'put': {
        this.putSession(op.s, this.sessionRow.get(op.s.id) !== undefined);
        return;
      }
      case 'turn': {
        const before = this.sessionRow.get(op.session);
        if (before === undefined) throw new Error(`turn ${op.t.id} of a session that is not stored`);
        this.insert(op.session, op.t, this.placeUnder(op.t.parentId));
        if (op.after !== undefined) this.sessionAfter(op.session, op.after);
        else {
          // an import: the session stays as it was put; its newest turn and version follow (what it holds: the import's recount)
          const json = text(before['json']);
          const last = newer({ createdAt: op.t.createdAt, _id: op.t.id }, keyOf(before));
          this.setLastTurn.run(versionOfSession(json, last), last.createdAt, last._id, op.session);
        }
        return;
      }
      case 'editTurn': {
        const t = this.turnSession.get(op.id);
        if (t === undefined || text(t['session']) !== op.session) throw new Error(`turn ${op.id} of session ${op.session} is not stored`);
        // the edit holds the text of its deltas (the writer folded them in): their rows go
        this.setTurnJson.run(op.json, op.tokens.inputTokens, op.tokens.outputTokens, op.tokens.cachedTokens, op.pathKey === undefined ? 0 : 1, op.pathKey ?? null, op.id);
        this.foldDeltas.run(op.id);
        // an edit's text is found at once (search reads a queued turn by its text); a delta's waits for the turn's next edit (docs/DECISIONS.md)
        this.unindexTurn.run(op.id);
        this.queueTurn.run(...queuedColumns(op.words), op.id);
        this.sessionAfter(op.session, op.after);
        return;
      }
      case 'delta': {
        // the turn's row is not touched: the index keeps the text it had before its deltas, until its next edit
        this.insertDelta.run(op.turn, op.seq, op.pieces, op.bytes, op.end);
        this.setHeldOf(op.session, op.held);
        return;
      }
      case 'dropTurns': {
        for (const id of op.ids) {
          const t = this.turnSession.get(id);
          if (t === undefined || text(t['session']) !== op.session) throw new Error(`turn ${id} of session ${op.session} is not stored`);
          this.deleteTurn.run(id);
        }
        this.sessionAfter(op.session, op.after);
        return;
      }
      case 'fork': {
        const { s } = op;
        this.putSession(s, false);
        const places = placesOfChain(op.turns.map((t) => t.id));
        op.turns.forEach((t, i) => this.insert(s.id, t, places[i] as TreePlace));
        const last = op.lastTurn;
        this.setLastTurn.run(s.version, last?.createdAt ?? null, last?._id ?? null, s.id);
        this.setHeldOf(s.id, op.held);
        return;
      }
      case 'dropTurn': {
        const t = this.turnSession.get(op.id);
        if (t === undefined) return;
        const session = text(t['session']);
        this.deleteTurn.run(op.id);
        const before = this.sessionRow.get(session);
        if (before !== undefined) {
          const newest = this.newestTurn.get(session);
          const last = newest === undefined ? undefined : { createdAt: text(newest['created_at']), _id: text(newest['id']) };
          this.setLastTurn.run(versionOfSession(text(before['json']), last), last?.createdAt ?? null, last?._id ?? null, session);
        }
        return;
      }
      case 'delete': {
        this.deleteTurns.run(op.id);
        this.deleteSession.run(op.id);
        return;
      }
      case 'recount': {
        for (const id of op.sessions) this.recountSession.run(id);
        for (const user of op.users) {
          this.dropUser.run(user);
          this.recountUser.run(user);
        }
        this.recountCounters.run();
      }
    }
  }
}

/** The counters' rows that sum a Usage figure as it is (the token counters saturate: settleCounter). */
const COUNTERS = [
  ['sessions', 'sessions'],
  ['turns', 'turns'],
  ['bytes', 'bytes'],
] as const;

/** The token columns of the users' rows, in TOKEN_FIGURES' order. */
const TOKEN_COLUMNS = ['input_tokens', 'output_tokens', 'cached_tokens'] as const;

/** What an op adds to its owner's usage, as the writer decided it (none for an import's ops). */
function usageOfOp(op: Op): UsageDelta | undefined {
  switch (op.op) {
    case 'put':
    case 'delta':
    case 'fork':
    case 'delete':
      return op.usage;
    case 'turn':
      return op.after?.usage;
    case 'editTurn':
    case 'dropTurns':
      return op.after.usage;
    default:
      return undefined;
  }
}

/** A queued turn's words and content_as_is columns. */
function queuedColumns(words: string | true | null): [string | null, number] {
  return words === true ? [null, 1] : [words, 0];
}

function keyOf(row: Readonly<Record<string, unknown>>): { createdAt: string; _id: string } | undefined {
  const createdAt = textOrUndefined(row['last_turn_at'] as string | null);
  const _id = textOrUndefined(row['last_turn_id'] as string | null);
  return createdAt === undefined || _id === undefined ? undefined : { createdAt, _id };
}

function newer(a: { createdAt: string; _id: string }, b: { createdAt: string; _id: string } | undefined): { createdAt: string; _id: string } {
  return b === undefined || turnBefore(b, a) ? a : b;
}
