// The sqlite engine's search index, kept up on the writer thread: what the commits queue is indexed
// in batches between them, and merged further while the writer is idle.
import { held } from '../faults.js';
import { int, type Database, type Statement } from './binding.js';
import { QUEUED_WORDS_SQL } from './schema.js';

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

