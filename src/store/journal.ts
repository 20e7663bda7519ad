// The journal store: the whole data set in memory, every change appended to one journal file
// and made durable before it is applied or acknowledged. All writes pass through one serial
// writer; writes that arrive while an fsync is under way share the next one (group commit).
// When dead records outweigh live ones, the journal is rewritten beside the old one and
// swapped in by rename.
import { closeSync, existsSync, fdatasync, fstatSync, fsyncSync, ftruncate, ftruncateSync, mkdirSync, openSync, readFileSync, renameSync, unlinkSync, write, writeSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { ChatSession, Turn } from '../domain/records.js';
import { chatSession } from '../domain/records.js';
import type { Logger } from '../log.js';
import { crashpoint, injectedFault } from './faults.js';
import { delLine, headerLine, putLine, scanJournal, TURN_JSON_END_FROM_END, TURN_JSON_START, turnLine, type JournalRecord } from './journal-format.js';
import { acquireLock, type Lock } from '../data-dir-lock.js';
import { MemoryState, versionOf, type SessionEntry, type SnapshotItem } from './state.js';
import {
  SessionNotFound,
  StorageWriteFailed,
  StoredTurn,
  type SessionFilter,
  type SessionKey,
  type Current,
  type SessionRecord,
  type Slice,
  type Store,
  type StoreObserver,
  type StoreStats,
  type TurnKey,
} from './store.js';

export const JOURNAL_FILE = 'sessions.journal';
/**
 * Where a running server says how much of the journal is durable: `<inode> <bytes>`. Readers
 * that run beside it (export) stop there, so they never see a batch that is written but not
 * yet fsync'd, which a failed fsync would still take back. A hint for readers only: recovery
 * never needs it, so it is not fsync'd.
 */
export const COMMITTED_FILE = 'sessions.journal.committed';
const COMMITTED_WIDTH = 48;

/** The committed journal length a running server last published, if any. */
export function readCommitted(dir: string): { ino: string; size: number } | undefined {
  try {
    const [ino, size] = readFileSync(join(dir, COMMITTED_FILE), 'latin1').trim().split(' ');
    if (ino === undefined || size === undefined || !/^\d+$/.test(ino) || !/^\d+$/.test(size)) return undefined;
    return { ino, size: Number(size) };
  } catch {
    return undefined;
  }
}
export const COMPACT_SUFFIX = '.compact';
/** Temp file of `import`, which rewrites the journal the same way. */
export const IMPORT_SUFFIX = '.import';

export interface JournalStoreOptions {
  readonly dir: string;
  readonly log: Logger;
  /** false only to measure what durability costs; acknowledged writes may then be lost. */
  readonly fsync: boolean;
  /** The journal is not compacted below this size. */
  readonly compactMinBytes: number;
  readonly observer?: StoreObserver;
}

/** A write waiting for the writer. `prepare` runs at the serial point against the batch's view. */
interface PendingWrite {
  prepare(view: BatchView): Prepared;
  resolve(value: unknown): void;
  reject(err: unknown): void;
}

interface Prepared {
  /** The record's journal line. */
  readonly line: Buffer;
  /** Applies the change to memory once the record is durable; returns the write's result. */
  apply(lineBytes: number): unknown;
}

/** A session as staged by an earlier write of the same batch (null: deleted). */
interface Staged {
  readonly session: ChatSession;
  readonly lastTurn: TurnKey | undefined;
}

/** What writes in one batch see: the committed state plus the batch's earlier changes. */
class BatchView {
  private readonly staged = new Map<string, Staged | null>();
  constructor(private readonly state: MemoryState) {}

  current(id: string): Current | undefined {
    const staged = this.staged.get(id);
    if (staged === null) return undefined;
    if (staged !== undefined) {
      return { session: staged.session, lastTurn: staged.lastTurn, version: () => versionOf(JSON.stringify(staged.session), staged.lastTurn) };
    }
    const e = this.state.get(id);
    if (e === undefined) return undefined;
    return { session: e.session, lastTurn: e.lastTurn, version: () => e.version };
  }
  stage(id: string, s: Staged | null): void {
    this.staged.set(id, s);
  }
}

/** Applies one journal record to a state, the way start-up replay does; returns the entry a put or turn went to. */
export function replayRecord(state: MemoryState, r: JournalRecord): SessionEntry | undefined {
  if (r.kind === 'put') return state.putSession(chatSession(r.session));
  if (r.kind === 'turn') return state.addTurn(r.session, r.turn);
  state.deleteSession(r.id);
  return undefined;
}

/** The journal lines that hold one session and its turns, as compaction and import write them. */
export function linesOf(item: SnapshotItem): Buffer[] {
  const lines = [putLine(item.json ?? JSON.stringify(item.session))];
  for (const t of item.turns) lines.push(turnLine(t.json));
  return lines;
}

/** A session raised to a turn's createdAt, as appending the turn does. */
function touchedBy(s: ChatSession, t: Turn): ChatSession {
  return t.createdAt > s.updatedAt ? chatSession({ ...s, updatedAt: t.createdAt }) : s;
}

interface Compaction {
  /** Journal batches committed after the snapshot, to be appended to the new file. */
  readonly tail: Buffer[];
  abort: boolean;
}

export class JournalStore implements Store {
  private readonly state = new MemoryState();
  private readonly file: string;
  private fd = -1;
  /** Bytes of the journal that are durable. */
  private size = 0;
  /** Bytes of the journal holding live records: the header, each session's last put, its turns. */
  private liveBytes = 0;
  private compactions = 0;
  private queue: PendingWrite[] = [];
  private writing = false;
  private paused = false;
  /** Set after a failed write could not be rolled back; writes fail until a rollback succeeds. */
  private broken = false;
  /** Set after compaction's rename until the directory fsync succeeds; writes fail until then. */
  private dirSyncPending = false;
  /** After a failed compaction, no new one before the journal reaches this size. */
  private compactRetryAt = 0;
  private closed = false;
  private compaction: Compaction | undefined;
  private compactionDone: Promise<void> = Promise.resolve();
  private idleWaiters: (() => void)[] = [];
  private lock: Lock | undefined;
  private committedFd = -1;
  /** Inode of the journal, for COMMITTED_FILE (it changes only when compaction swaps the file). */
  private ino = '';

  private constructor(private readonly opts: JournalStoreOptions) {
    this.file = join(opts.dir, JOURNAL_FILE);
  }

  /** Takes the directory lock, replays the journal and opens it for appending. */
  static open(opts: JournalStoreOptions): JournalStore {
    const store = new JournalStore(opts);
    mkdirSync(opts.dir, { recursive: true });
    store.lock = acquireLock(opts.dir);
    try {
      if (store.lock.tookOver !== undefined) {
        opts.log.warn('took over a stale data directory lock', { pid: store.lock.tookOver.pid, since: store.lock.tookOver.startedAt });
      }
      store.load();
    } catch (e) {
      store.lock.release();
      throw e;
    }
    return store;
  }

  private load(): void {
    const { log } = this.opts;
    for (const suffix of [COMPACT_SUFFIX, IMPORT_SUFFIX]) {
      const leftover = this.file + suffix;
      if (existsSync(leftover)) {
        unlinkSync(leftover);
        log.warn('removed an unfinished rewrite of the journal left by an earlier run; the journal itself is complete', { file: leftover });
      }
    }
    if (!existsSync(this.file)) {
      this.createEmpty(this.file);
    }
    const started = process.hrtime.bigint();
    this.state.beginLoad();
    const scan = scanJournal(this.file, (r, bytes) => this.replay(r, bytes));
    const { orphanTurns } = this.state.finishLoad();
    if (orphanTurns > 0) log.warn('dropped turns whose session does not exist', { turns: orphanTurns });
    this.recountLive();
    if (scan.header === undefined) {
      // nothing intact, not even the header: a journal whose creation was interrupted
      log.warn('the journal had no intact header; starting it afresh', { file: this.file, droppedBytes: scan.tornBytes });
      this.createEmpty(this.file);
      this.size = headerLine().length;
    } else {
      if (scan.tornBytes > 0) {
        log.warn('dropped an interrupted final write from the journal; it was never acknowledged', {
          file: this.file,
          offset: scan.validBytes,
          droppedBytes: scan.tornBytes,
        });
        const fd = openSync(this.file, 'r+');
        try {
          ftruncateSync(fd, scan.validBytes);
          fsyncSync(fd);
        } finally {
          closeSync(fd);
        }
      }
      this.size = scan.validBytes;
    }
    this.fd = openSync(this.file, 'a');
    this.ino = String(fstatSync(this.fd).ino);
    this.committedFd = openSync(join(this.opts.dir, COMMITTED_FILE), 'w', 0o600);
    this.publishCommitted();
    const ms = Number(process.hrtime.bigint() - started) / 1e6;
    log.info('journal replayed', { sessions: this.state.sessionCount, turns: this.state.turnCount, records: scan.records, bytes: this.size, ms: Math.round(ms) });
  }

  private createEmpty(path: string): void {
    const fd = openSync(path, 'w', 0o600);
    try {
      const h = headerLine();
      writeFullySync(fd, h);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    fsyncDir(dirname(path));
  }

  /** Applies one record during start-up (indexes are built afterwards) and counts its bytes. */
  private replay(r: JournalRecord, bytes: number): void {
    const e = replayRecord(this.state, r);
    if (e === undefined) return;
    if (r.kind === 'put') e.putBytes = bytes;
    else e.turnBytes += bytes;
  }

  /** Tells readers beside the server how far the journal is durable (see COMMITTED_FILE). */
  private publishCommitted(): void {
    const text = `${this.ino} ${this.size}`.padEnd(COMMITTED_WIDTH - 1) + '\n';
    writeSync(this.committedFd, text, 0, 'latin1');
  }

  private recountLive(): void {
    let live = headerLine().length;
    for (const e of this.state.entries.values()) live += e.putBytes + e.turnBytes;
    this.liveBytes = live;
  }

  // ---- reads: memory only ----

  getSession(id: string): SessionRecord | undefined {
    return this.state.get(id);
  }

  listSessions(filter: SessionFilter, after: SessionKey | undefined, limit: number | undefined): Slice<SessionRecord> {
    return this.state.listSessions(filter, after, limit);
  }

  listTurns(sessionId: string, after: TurnKey | undefined, limit: number | undefined): Slice<StoredTurn> {
    return this.state.listTurns(sessionId, after, limit);
  }

  stats(): StoreStats {
    return {
      sessions: this.state.sessionCount,
      turns: this.state.turnCount,
      journalBytes: this.size,
      liveBytes: this.liveBytes,
      compactions: this.compactions,
    };
  }

  // ---- writes: through the serial writer ----

  createSession(session: ChatSession): Promise<SessionRecord> {
    return this.submit((view) => {
      if (view.current(session._id) !== undefined) throw new Error('duplicate session id');
      view.stage(session._id, { session, lastTurn: undefined });
      return this.put(session, true);
    }) as Promise<SessionRecord>;
  }

  updateSession(id: string, change: (current: Current) => ChatSession): Promise<SessionRecord> {
    return this.submit((view) => {
      const current = view.current(id);
      if (current === undefined) throw new SessionNotFound();
      const next = chatSession(change(current));
      view.stage(id, { session: next, lastTurn: current.lastTurn });
      return this.put(next);
    }) as Promise<SessionRecord>;
  }

  /** A put record: the session's JSON is made once, for the journal and the answer alike. */
  private put(session: ChatSession, isNew = false): Prepared {
    const json = JSON.stringify(session);
    return {
      line: putLine(json),
      apply: (bytes) => {
        const e = isNew ? this.state.insertNew(session) : this.state.putSession(session);
        this.liveBytes += bytes - e.putBytes;
        e.putBytes = bytes;
        return { session, json, version: e.wrote(json) };
      },
    };
  }

  deleteSession(id: string, check: (current: Current) => void): Promise<void> {
    return this.submit((view) => {
      const current = view.current(id);
      if (current === undefined) throw new SessionNotFound();
      check(current);
      view.stage(id, null);
      return {
        line: delLine(id),
        apply: () => {
          const e = this.state.deleteSession(id);
          if (e !== undefined) this.liveBytes -= e.putBytes + e.turnBytes;
          return undefined;
        },
      };
    }) as Promise<void>;
  }

  appendTurn(sessionId: string, build: (current: Current) => Turn): Promise<StoredTurn> {
    return this.submit((view) => {
      const current = view.current(sessionId);
      if (current === undefined) throw new SessionNotFound();
      const turn = build(current);
      view.stage(sessionId, { session: touchedBy(current.session, turn), lastTurn: turn });
      const line = turnLine(JSON.stringify(turn));
      const stored = new StoredTurn(turn._id, turn.createdAt, line, TURN_JSON_START, line.length - TURN_JSON_END_FROM_END);
      return {
        line,
        apply: (bytes) => {
          const e = this.state.addTurn(sessionId, stored);
          e.turnBytes += bytes;
          this.liveBytes += bytes;
          return stored;
        },
      };
    }) as Promise<StoredTurn>;
  }

  private submit(prepare: (view: BatchView) => Prepared): Promise<unknown> {
    if (this.closed) return Promise.reject(new StorageWriteFailed(new Error('store is closed')));
    return new Promise((resolve, reject) => {
      this.queue.push({ prepare, resolve, reject });
      if (!this.writing) this.nextBatch();
    });
  }

  /** Takes every queued write as one batch: one append, one fsync, then memory, then answers. */
  private nextBatch(): void {
    if (this.paused || this.queue.length === 0) {
      this.writing = false;
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      for (const w of waiters) w();
      return;
    }
    this.writing = true;
    const writes = this.queue;
    this.queue = [];
    const view = new BatchView(this.state);
    const accepted: { w: PendingWrite; p: Prepared; bytes: number }[] = [];
    const lines: Buffer[] = [];
    let total = 0;
    for (const w of writes) {
      try {
        const p = w.prepare(view);
        const line = p.line;
        lines.push(line);
        total += line.length;
        accepted.push({ w, p, bytes: line.length });
      } catch (e) {
        w.reject(e);
      }
    }
    if (accepted.length === 0) {
      this.nextBatch();
      return;
    }
    const data = lines.length === 1 ? (lines[0] as Buffer) : Buffer.concat(lines, total);
    this.appendDurably(data, (err) => {
      if (err !== undefined) {
        this.opts.log.error('journal write failed; the writes of this batch were refused and nothing changed', { err, writes: accepted.length });
        for (const a of accepted) a.w.reject(new StorageWriteFailed(err));
      } else {
        this.size += data.length;
        this.publishCommitted();
        this.compaction?.tail.push(data);
        for (const a of accepted) a.w.resolve(a.p.apply(a.bytes));
        this.maybeCompact();
      }
      this.nextBatch();
    });
  }

  /** Appends and fsyncs; on failure cuts the file back to its last durable size. */
  private appendDurably(data: Buffer, done: (err?: Error) => void): void {
    const fail = (err: Error): void => {
      ftruncate(this.fd, this.size, (e1) => {
        if (e1 !== null) {
          this.broken = true;
          done(err);
          return;
        }
        fdatasync(this.fd, (e2) => {
          this.broken = e2 !== null;
          done(err);
        });
      });
    };
    if (this.dirSyncPending && !this.syncDir()) {
      done(new Error('the data directory could not be fsync\'d after the journal was compacted'));
      return;
    }
    if (this.broken) {
      // an earlier failure left bytes we could not remove: remove them before anything else
      ftruncate(this.fd, this.size, (e) => {
        if (e !== null) return done(e);
        this.broken = false;
        this.appendDurably(data, done);
      });
      return;
    }
    const writeFrom = (offset: number): void => {
      const fault = injectedFault('write');
      const len = fault === undefined ? data.length - offset : Math.ceil((data.length - offset) / 2);
      write(this.fd, data, offset, len, null, (err, n) => {
        if (err !== null) return fail(err);
        if (fault !== undefined) return fail(fault);
        if (offset + n < data.length) return writeFrom(offset + n);
        if (!this.opts.fsync) return done();
        const started = process.hrtime.bigint();
        fdatasync(this.fd, (e) => {
          this.opts.observer?.fsync(Number(process.hrtime.bigint() - started) / 1e9);
          const f = e ?? injectedFault('fsync') ?? null;
          if (f !== null) return fail(f);
          done();
        });
      });
    };
    writeFrom(0);
  }

  /** fsyncs the data directory if a compaction's rename awaits it; false when that fails. */
  private syncDir(): boolean {
    if (!this.dirSyncPending) return true;
    const fault = injectedFault('dirsync');
    try {
      if (fault !== undefined) throw fault;
      fsyncDir(this.opts.dir);
      this.dirSyncPending = false;
      return true;
    } catch (err) {
      this.opts.log.error('fsync of the data directory failed after compaction; writes are refused until it succeeds', { err });
      return false;
    }
  }

  /** Resolves when no batch is being written and the writer is paused or has nothing queued. */
  private whenIdle(): Promise<void> {
    if (!this.writing) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  // ---- compaction ----

  private maybeCompact(): void {
    if (this.compaction !== undefined || this.closed) return;
    if (this.size < this.opts.compactMinBytes || this.size < this.compactRetryAt || this.size - this.liveBytes <= this.liveBytes) return;
    const c: Compaction = { tail: [], abort: false };
    this.compaction = c;
    this.compactionDone = this.compact(c).then(
      () => {
        this.compactions++;
      },
      (err: unknown) => {
        if (err instanceof CompactionAborted) this.opts.log.info(err.message);
        else {
          // not again until the journal has grown by half or COMPACT_MIN_SIZE: each try costs a full snapshot
          this.compactRetryAt = this.size + Math.max(this.opts.compactMinBytes, this.size >> 1);
          this.opts.log.error('journal compaction failed; the old journal stays in use', { err, retryAtBytes: this.compactRetryAt });
        }
      },
    ).finally(() => {
      this.compaction = undefined;
    });
  }

  /**
   * Writes the live records to a new file while writes go on, then, with the writer paused,
   * appends what was committed meanwhile, fsyncs, renames it over the journal and fsyncs the
   * directory. A crash at any step leaves either the old journal or the new one, both complete.
   */
  private async compact(c: Compaction): Promise<void> {
    const started = process.hrtime.bigint();
    const before = this.size;
    const snap = this.state.snapshot(); // at the same instant as `tail` started collecting
    const tmp = this.file + COMPACT_SUFFIX;
    const fd = openSync(tmp, 'w', 0o600);
    let renamed = false;
    try {
      crashpoint('compact-start');
      const out = new ChunkWriter(fd);
      out.add(headerLine());
      for (let i = 0; i < snap.length; i++) {
        if (out.full()) {
          await out.flush(); // yields to the event loop between chunks
          if (c.abort) throw new CompactionAborted();
        }
        for (const line of linesOf(snap[i] as SnapshotItem)) out.add(line);
        if (i === snap.length >> 1) crashpoint('compact-middle');
      }
      await out.flush();
      await fsyncAsync(fd);
      crashpoint('compact-written');
      this.paused = true;
      await this.whenIdle();
      try {
        for (const b of c.tail) out.add(b);
        await out.flush();
        await fsyncAsync(fd);
        closeSync(fd);
        // the append descriptor is opened before the rename (it follows the file), so nothing
        // that can fail stands between the rename and writing to the new journal
        const newFd = openSync(tmp, 'a');
        const st = fstatSync(newFd);
        crashpoint('compact-before-rename');
        try {
          renameSync(tmp, this.file);
        } catch (e) {
          closeSync(newFd);
          throw e;
        }
        renamed = true;
        closeSync(this.fd);
        this.fd = newFd;
        this.size = st.size;
        this.ino = String(st.ino);
        crashpoint('compact-after-rename');
        // until the directory is fsync'd, a crash may bring back the old journal, which lacks
        // whatever is appended to the new one: no write is acknowledged before that succeeds
        this.dirSyncPending = true;
        this.syncDir();
        this.publishCommitted();
        crashpoint('compact-done');
      } finally {
        this.paused = false;
        if (!this.writing) this.nextBatch();
      }
      this.opts.log.info('journal compacted', {
        bytesBefore: before,
        bytesAfter: this.size,
        ms: Math.round(Number(process.hrtime.bigint() - started) / 1e6),
      });
    } catch (e) {
      if (!renamed) {
        try {
          closeSync(fd);
        } catch {
          // already closed
        }
        try {
          unlinkSync(tmp);
        } catch {
          // never created or already gone
        }
      }
      throw e;
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.compaction !== undefined) this.compaction.abort = true;
    await this.compactionDone;
    await this.whenIdle();
    if (this.fd >= 0) closeSync(this.fd);
    this.fd = -1;
    if (this.committedFd >= 0) {
      closeSync(this.committedFd);
      unlinkSync(join(this.opts.dir, COMMITTED_FILE));
    }
    this.committedFd = -1;
    this.lock?.release();
  }
}

class CompactionAborted extends Error {
  override readonly name = 'CompactionAborted';
  constructor() {
    super('compaction stopped for shutdown');
  }
}

/** Gathers small buffers into writes of about a megabyte. */
class ChunkWriter {
  private parts: Buffer[] = [];
  private bytes = 0;
  constructor(private readonly fd: number) {}

  add(b: Buffer): void {
    this.parts.push(b);
    this.bytes += b.length;
  }

  full(): boolean {
    return this.bytes >= 1 << 20;
  }

  async flush(): Promise<void> {
    if (this.bytes === 0) return;
    const data = Buffer.concat(this.parts, this.bytes);
    this.parts = [];
    this.bytes = 0;
    let offset = 0;
    while (offset < data.length) {
      offset += await new Promise<number>((resolve, reject) => {
        write(this.fd, data, offset, data.length - offset, null, (err, n) => (err !== null ? reject(err) : resolve(n)));
      });
    }
  }
}

function fsyncAsync(fd: number): Promise<void> {
  return new Promise((resolve, reject) => fdatasync(fd, (err) => (err !== null ? reject(err) : resolve())));
}

export function fsyncDir(dir: string): void {
  const fd = openSync(dir, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

export function writeFullySync(fd: number, data: Buffer): void {
  let offset = 0;
  while (offset < data.length) offset += writeSync(fd, data, offset, data.length - offset);
}
