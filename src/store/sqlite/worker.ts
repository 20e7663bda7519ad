// The sqlite engine's writer: a worker thread that owns the writing connection. Each group of
// Changes from the serial writer becomes one transaction (synchronous=FULL: durable when COMMIT
// returns), applied here (./apply.ts) so that neither the commit's fsync nor a WAL checkpoint ever
// blocks the event loop that answers requests; between commits it keeps the search index up
// (./indexer.ts).
import { isMainThread, parentPort, workerData, type MessagePort } from 'node:worker_threads';
import type { Change } from '../changes.js';
import { takesAway } from '../group.js';
import { sqliteCode, sqliteDatabase, type Database } from './binding.js';
import { SqliteWrites, type ImportRows } from './apply.js';
import { runFullCheckIfAsked } from './full-check.js';
import { Indexer } from './indexer.js';
import { registerSearchFunctions } from './schema.js';
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

export type ToWriter =
  /** A group's changes, as the serial writer decided them. */
  | { readonly kind: 'commit'; readonly seq: number; readonly changes: readonly Change[] }
  /** An import's rows (./apply.ts ImportRows), written past the serial writer while it is paused. */
  | { readonly kind: 'import'; readonly seq: number; readonly rows: ImportRows }
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
  let w: SqliteWrites;
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
    w = new SqliteWrites(db, data.index);
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
      if (m.kind === 'import') w.importRows(m.rows);
      else roomMade = commitMakingRoom(w, m.changes, reserve);
      post({ kind: 'done', seq: m.seq, seconds: Number(process.hrtime.bigint() - started) / 1e9 });
    } catch (e) {
      const code = sqliteCode(e);
      // deletes grouped with writes that add: the reserve is theirs once they go alone (../writer.ts RoomOnlyForDeletes)
      const roomForDeletes = code === SQLITE_FULL && reserve.held > 0 && m.kind === 'commit' && m.changes.some((c) => takesAway([c]));
      post({ kind: 'failed', seq: m.seq, message: e instanceof Error ? e.message : String(e), damaged: code === 11 || code === 26, roomForDeletes });
    }
    if (roomMade) afterRoomMade(db, reserve);
    indexer?.queued(m.kind === 'import' ? m.rows.sessions.length + m.rows.turns.length : queuedBy(m.changes));
    committed();
  });
  post({ kind: 'ready' });
  // what an earlier run (or one with SEARCH=off) left queued
  indexer?.schedule();
}

/** SQLITE_FULL: a write found the disk (or the file's size limit) full. */
const SQLITE_FULL = 13;

/** About how many names and turns a group queues for the index (a delta none: the index keeps a streaming turn's text as it was before its deltas). */
function queuedBy(changes: readonly Change[]): number {
  let n = 0;
  for (const c of changes) n += c.kind === 'fork' ? 1 + c.turns.length : c.kind === 'delta' ? 0 : 1;
  return n;
}

/**
 * Commits a group; one that only takes data away and meets a full disk is tried once more with
 * the reserve given back (./reserve.ts). Answers whether that happened: the caller then makes the
 * room lasting (afterRoomMade). A group that adds data never gets the reserve: on a full disk it
 * fails as before.
 */
function commitMakingRoom(w: SqliteWrites, changes: readonly Change[], reserve: SpaceReserve): boolean {
  try {
    w.commit(changes);
    return false;
  } catch (e) {
    if (sqliteCode(e) !== SQLITE_FULL || !takesAway(changes) || reserve.held === 0) throw e;
  }
  reserve.giveBack();
  try {
    w.commit(changes);
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

