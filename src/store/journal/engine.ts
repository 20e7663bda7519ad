// The journal engine: the whole data set in memory, every change appended to one journal file
// and made durable before it is applied or acknowledged. Reads are served from memory; writes
// pass through the shared serial writer, whose groups become one append and one fdatasync.
// When dead records outweigh live ones, the journal is rewritten beside the old one.
import { closeSync, existsSync, fstatSync, ftruncateSync, fsyncSync, mkdirSync, openSync, statfs, statfsSync, unlinkSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { SCAN_CHUNK, type SessionKey, type TurnKey } from '../../domain/order.js';
import { appendText, isStreamingJson } from '../../domain/deltas.js';
import { turnRecord, type ChatSession, type Turn } from '../../domain/records.js';
import { isLive, type Liveness } from '../../domain/retention.js';
import { lockHolder } from '../../data-dir-lock.js';
import { fsyncDir, writeFullySync } from '../../files.js';
import type { Quotas } from '../../config.js';
import type { Logger } from '../../log.js';
import { planImport } from '../import-plan.js';
import {
  StorageWriteFailed,
  StoreOpenFailed,
  TurnNotFound,
  type Branch,
  type SearchFilter,
  type SearchHit,
  type SearchKey,
  type SessionState,
  type TreeTurn,
  type TurnNode,
  type ExpiredSession,
  type ExportItem,
  type ExportSnapshot,
  type ImportSummary,
  type Page,
  type SessionFilter,
  type SessionRecord,
  type Store,
  type StoreObserver,
  type StoreStats,
  type TurnRecord,
  type Usage,
} from '../store.js';
import { SerialWrites } from '../serial-writes.js';
import { SerialWriter, type Change, type Group, type GroupSource } from '../writer.js';
import { Appender, COMPACT_SUFFIX, IMPORT_SUFFIX, JOURNAL_FILE, NEXT_SUFFIX, readCommitted } from './appender.js';
import { Compaction, CompactionAborted, TailFirstCompaction, type TailFirstHost } from './compaction.js';
import { WordThread } from './word-thread.js';
import {
  deltaLine,
  delLine,
  editLine,
  findDeletions,
  forkLine,
  headerLine,
  JOURNAL_VERSION,
  pruneLine,
  putLine,
  PUT_LINE_OVERHEAD,
  scanJournal,
  TURN_LINE_OVERHEAD,
  turnLine,
  upgradeTurnJson,
  type Deleted,
  type Deletions,
  type JournalRecord,
  type ScanResult,
} from './format.js';
import { LazyRecord, MemoryState, pageOf, SessionEntry, StoredTurn } from './state.js';

export interface JournalStoreOptions {
  readonly dir: string;
  readonly log: Logger;
  /** false only to measure what durability costs; acknowledged writes may then be lost. */
  readonly fsync: boolean;
  /** The journal is not compacted below this size. */
  readonly compactMinBytes: number;
  readonly observer?: StoreObserver | undefined;
  /** false only to measure what group commit buys: one write per append and fsync. */
  readonly groupCommit?: boolean;
  /** What one user's sessions may hold, checked at the serial point. */
  readonly quotas?: Quotas | undefined;
  /** Documents of a query's rarest word from which search walks the sessions (SEARCH_WALK_FROM); 1 always walks. */
  readonly searchWalkFrom?: number;
  /** false with SEARCH=off: no word index is kept (search is not served). */
  readonly search?: boolean;
}

const HEADER_BYTES = headerLine().length;
/** Bounds of what a compaction moves at a time (see pieceBytes). */
const MIN_PIECE = 64 * 1024;
const MAX_PIECE = 8 * 1024 * 1024;
/** The longest wait before a failed compaction (not for want of space) is tried again. */
const MAX_RETRY_MS = 5 * 60_000;
const NO_USAGE: Usage = { sessions: 0, turns: 0, bytes: 0 };

export class JournalStore extends SerialWrites implements Store, GroupSource, Group {
  readonly engine = 'journal';
  private state: MemoryState;
  private readonly file: string;
  private readonly next: string;
  protected readonly writer: SerialWriter;
  /** UTF-8 bytes of the JSON of every live session and turn. */
  private jsonBytes = 0;
  private compactions = 0;
  /** After a failed compaction: what lets the next one start (see mayRetryCompaction). */
  private compactBackoff: { readonly at: number; readonly needBytes: number; readonly delayMs: number } | undefined;
  private checkingSpace = false;
  private compaction: TailFirstCompaction | undefined;
  private compactionDone: Promise<void> = Promise.resolve();
  private closed = false;
  /** The search index's thread (none with SEARCH=off, and for an export): ./word-thread.ts. */
  private readonly words: WordThread | undefined;
  /** What each user's sessions hold (by owner), kept as changes are applied. */
  private usageByUser = new Map<string, { sessions: number; turns: number; bytes: number }>();

  private constructor(
    private readonly opts: JournalStoreOptions,
    private readonly appender: Appender | undefined,
    loaded: Loaded,
  ) {
    super();
    this.file = join(opts.dir, JOURNAL_FILE);
    this.next = this.file + NEXT_SUFFIX;
    this.state = loaded.state;
    this.recountUsage();
    this.writer = new SerialWriter(this, opts.log, opts.quotas, opts.groupCommit === false ? 1 : Infinity);
    if (appender !== undefined && (opts.search ?? true)) {
      const words = new WordThread(__filename, () => this.feedIndex(), (err) => opts.log.error('the search index thread stopped; it is started again and fed from memory, searches answer 503 meanwhile', { err }));
      this.words = words;
      void this.feedIndex(words);
    }
  }

  /** Feeds the search index from memory, in the background: searches wait for it (logged when done). */
  private feedIndex(words = this.words): Promise<void> {
    if (words === undefined) return Promise.resolve();
    const started = performance.now();
    const fed = this.state.useIndex(words);
    return fed.then(
      () => this.opts.log.info('search index fed from memory', { sessions: this.state.sessionCount, turns: this.state.turnCount, ms: Math.round(performance.now() - started) }),
      () => undefined,
    );
  }

  /**
   * Replays the journal of `dir` and opens it for appending. A journal of the first release is
   * rewritten in this release's version first (through compaction: a crash leaves the old file or
   * the new one). The data directory's lock is the caller's.
   */
  static async open(opts: JournalStoreOptions): Promise<JournalStore> {
    const { log } = opts;
    mkdirSync(opts.dir, { recursive: true });
    const file = join(opts.dir, JOURNAL_FILE);
    for (const suffix of [COMPACT_SUFFIX, IMPORT_SUFFIX]) {
      if (existsSync(file + suffix)) {
        unlinkSync(file + suffix);
        log.warn('removed an unfinished rewrite of the journal left by an earlier run; the journal itself is complete', { file: file + suffix });
      }
    }
    if (!existsSync(file)) createEmpty(file);
    const started = process.hrtime.bigint();
    const next = file + NEXT_SUFFIX;
    const files = [{ file }];
    const twoFiles = existsSync(next);
    if (twoFiles) files.push({ file: next });
    const loaded = load(files, log);
    const sizes: number[] = [];
    loaded.scans.forEach((scan, i) => {
      const f = files[i]?.file as string;
      sizes.push(scan.validBytes);
      if (scan.header === undefined) return;
      if (scan.tornBytes > 0) {
        log.warn('dropped an interrupted final write from the journal; it was never acknowledged', { file: f, offset: scan.validBytes, droppedBytes: scan.tornBytes });
        const fd = openSync(f, 'r+');
        try {
          ftruncateSync(fd, scan.validBytes);
          fsyncSync(fd);
        } finally {
          closeSync(fd);
        }
      }
    });
    let nextSize: number | undefined;
    if (twoFiles) {
      if (loaded.scans[1]?.header === undefined) {
        // a compaction was stopped while making its new file, before any write went to it
        unlinkSync(next);
        log.warn('removed the unfinished start of a compaction left by an earlier run; the journal itself is complete', { file: next });
      } else nextSize = sizes[1];
    }
    const scan = loaded.scans[0] as ScanResult;
    let size = sizes[0] as number;
    if (scan.header === undefined) {
      if (nextSize !== undefined) throw new StoreOpenFailed(`${file}: the journal has no intact header while ${next} continues it; restore from a backup (\`node dist/server.js import <backup.ndjson>\` into a new data directory)`);
      // nothing intact, not even the header: a journal whose creation was interrupted
      log.warn('the journal had no intact header; starting it afresh', { file, droppedBytes: scan.tornBytes });
      createEmpty(file);
      size = HEADER_BYTES;
    } else if (scan.header.version !== JOURNAL_VERSION && nextSize !== undefined) {
      // only this release splits a journal in two, and it writes its own version
      throw new StoreOpenFailed(`${file}: a journal of version ${scan.header.version} with ${next} beside it was not written by a release of this application; restore from a backup`);
    }
    const appender = new Appender(file, size, { dir: opts.dir, fsync: opts.fsync, log }, nextSize === undefined ? undefined : { file: next, size: nextSize });
    const store = new JournalStore(opts, appender, loaded);
    const ms = Number(process.hrtime.bigint() - started) / 1e6;
    const records = loaded.scans.reduce((n, sc) => n + sc.records, 0);
    // turnBytesLoaded: what replay copied of turns' JSON (the turns a later record deletes are not)
    log.info('journal replayed', { sessions: loaded.state.sessionCount, turns: loaded.state.turnCount, records, bytes: appender.totalSize, turnBytesLoaded: loaded.state.arena.replayedBytes, ms: Math.round(ms) });
    if (scan.header !== undefined && scan.header.version !== JOURNAL_VERSION) {
      try {
        await new Compaction().run(store.compactionHost(), store.state.snapshot());
      } catch (e) {
        store.appender?.close();
        await store.words?.close();
        throw new StoreOpenFailed(`${file}: a journal of version ${scan.header.version} could not be rewritten in version ${JOURNAL_VERSION} (${(e as Error).message}); it is unchanged`);
      }
      log.info('journal rewritten in this release\'s format: turns have their parents, sessions their heads', { file, fromVersion: scan.header.version, toVersion: JOURNAL_VERSION, bytes: appender.size });
    }
    // a journal replayed mostly dead, or a compaction the last run left under way: at once, in the background
    setImmediate(() => store.maybeCompact());
    return store;
  }

  /**
   * The data of `dir` as of one instant, read-only, beside a server that may be running: the
   * journal's durable prefix as the server publishes it (see COMMITTED_FILE).
   */
  static openSnapshot(dir: string, log: Logger): JournalStore {
    const file = join(dir, JOURNAL_FILE);
    if (!existsSync(file)) throw new StoreOpenFailed(`no journal at ${file} (is DATA_DIR right?)`);
    for (let attempt = 0; ; attempt++) {
      const files = openConsistent(dir, file);
      try {
        // an export reads no search index
        const loaded = load(files, log);
        // a compaction cut the older file while it was read: read again
        if (attempt < 50 && loaded.scans.some((scan, i) => files[i]?.upTo !== undefined && scan.validBytes + scan.tornBytes < (files[i]?.upTo as number))) continue;
        return new JournalStore({ dir, log, fsync: false, compactMinBytes: Infinity }, undefined, loaded);
      } finally {
        for (const f of files) closeSync(f.fd);
      }
    }
  }

  // ---- reads: memory only ----

  getSession(id: string): Promise<SessionRecord | undefined> {
    const e = this.state.get(id);
    return Promise.resolve(e === undefined ? undefined : e.record(this.state.cache));
  }

  search(filter: SearchFilter, after: SearchKey | undefined, limit: number): Promise<Page<SearchHit, SearchKey>> {
    return this.state.search(filter, after, limit, this.opts.searchWalkFrom ?? Infinity);
  }

  reindex(): Promise<number> {
    return this.state.reindex();
  }

  listSessions(filter: SessionFilter, after: SessionKey | undefined, limit: number): Promise<Page<SessionRecord, SessionKey>> {
    return Promise.resolve(this.state.listSessions(filter, after, limit));
  }

  async *scanSessions(filter: SessionFilter): AsyncIterable<readonly SessionRecord[]> {
    const { sessions, keep } = this.state.snapshotList(filter);
    for (let i = 0; i < sessions.length; i += SCAN_CHUNK) {
      const out: SessionRecord[] = [];
      for (let j = i; j < Math.min(i + SCAN_CHUNK, sessions.length); j++) {
        const s = sessions[j] as ChatSession;
        if (keep(s)) out.push(this.recordOf(s));
      }
      yield out;
    }
  }

  listTurns(sessionId: string, after: TurnKey | undefined, limit: number, branch?: Branch): Promise<Page<TurnRecord, TurnKey>> {
    if (branch === undefined) return Promise.resolve(this.state.listTurns(sessionId, after, limit));
    const path = this.state.branch(sessionId, branch === 'head' ? 'head' : branch.turnId);
    return path === undefined ? Promise.reject(new TurnNotFound()) : Promise.resolve(pageOf(path, after, limit));
  }

  getTurn(sessionId: string, turnId: string): Promise<TurnRecord | undefined> {
    return Promise.resolve(this.state.get(sessionId)?.turn(turnId));
  }

  async *scanTurns(sessionId: string, branch?: Branch): AsyncIterable<readonly TurnRecord[]> {
    const turns = branch === undefined ? this.state.snapshotTurns(sessionId) : this.state.branch(sessionId, branch === 'head' ? 'head' : branch.turnId);
    if (turns === undefined) throw new TurnNotFound();
    // the turns are references to what memory keeps: a chunk costs no copy of their JSON
    for (let i = 0; i < turns.length; i += SCAN_CHUNK) yield turns.slice(i, i + SCAN_CHUNK);
  }

  /**
   * The record of a session as a snapshot took it: the live entry's when it has not changed
   * since. A whole list is read once: it uses what the cache holds but adds nothing to it.
   */
  private recordOf(s: ChatSession, lastTurn?: TurnKey): SessionRecord {
    const e = this.state.get(s._id);
    if (e !== undefined && e.session === s) return e.peekRecord();
    return new LazyRecord(s, lastTurn);
  }

  /** Memory holds no index by expiry: every session is looked at until `limit` are found (a few ms per 100 000 sessions). */
  expiredSessions(live: Liveness, limit: number): Promise<readonly ExpiredSession[]> {
    const out: ExpiredSession[] = [];
    for (const e of this.state.entries.values()) {
      if (out.length === limit) break;
      if (!isLive(e.session, live)) out.push({ session: e.session, turns: e.turns?.length ?? 0 });
    }
    return Promise.resolve(out);
  }

  async exportAll(): Promise<ExportSnapshot> {
    const snapshot = this.state.snapshot().sort((a, b) => (a.session._id < b.session._id ? -1 : a.session._id > b.session._id ? 1 : 0));
    let turns = 0;
    for (const item of snapshot) turns += item.turns.length;
    const recordOf = (s: ChatSession, lastTurn: TurnKey | undefined): SessionRecord => this.recordOf(s, lastTurn);
    async function* items(): AsyncIterable<ExportItem> {
      for (const item of snapshot) yield { session: recordOf(item.session, item.turns[item.turns.length - 1]), turns: item.turns };
    }
    return { sessions: snapshot.length, turns, items: items() };
  }

  health(): Promise<void> {
    return Promise.resolve();
  }

  usage(user: string): Promise<Usage> {
    return Promise.resolve(this.usageOf(user));
  }

  /** Group: a user's usage as committed (memory holds exactly what is). */
  usageOf(user: string): Usage {
    const u = this.usageByUser.get(user);
    return u === undefined ? NO_USAGE : { sessions: u.sessions, turns: u.turns, bytes: u.bytes };
  }

  async stats(): Promise<StoreStats> {
    const { sessionCount: sessions, turnCount: turns } = this.state;
    return {
      sessions,
      turns,
      bytes: this.jsonBytes,
      engine: [
        { name: 'journal_bytes', type: 'gauge', help: 'Size of the journal (both its files while a compaction is under way).', value: this.appender?.totalSize ?? 0 },
        { name: 'journal_live_bytes', type: 'gauge', help: 'Bytes of the journal still holding live records.', value: this.liveBytes },
        { name: 'compactions_total', type: 'counter', help: 'Journal compactions completed.', value: this.compactions },
        { name: 'journal_record_cache_bytes', type: 'gauge', help: "Sessions' JSON kept for reads (at most a sixty-fourth of V8's heap limit, 1 to 64 MiB).", value: this.state.cache.bytes },
        { name: 'journal_search_unindexed', type: 'gauge', help: "Names and turns changed but not taken by the search index's thread yet (a search waits for them).", value: this.words?.behind ?? 0 },
        { name: 'journal_turn_memory_bytes', type: 'gauge', help: "Memory holding the turns' JSON (the slabs turns were replayed into, and buffers of turns written since).", value: this.state.arena.heldBytes },
      ],
    };
  }

  // ---- writes: handed to the serial writer by SerialWrites; what the writer asks of the engine ----

  /** At start, every streaming turn: one server per data directory, so the one that streamed them is gone. */
  leftStreaming(atStart: boolean): Promise<readonly { session: string; turnId: string }[]> {
    const out: { session: string; turnId: string }[] = [];
    if (atStart) {
      for (const e of this.state.entries.values()) for (const t of e.turns ?? []) if (isStreamingJson(t.json)) out.push({ session: e.session._id, turnId: t._id });
    }
    return Promise.resolve(out);
  }

  sharedEventLog(): undefined {
    return undefined;
  }

  /** GroupSource: one group at a time, seeing memory, which holds exactly what is committed. */
  begin(): Group {
    if (this.appender === undefined) throw new StorageWriteFailed(new Error('this journal was opened read-only'));
    return this;
  }

  current(id: string): SessionState | undefined {
    const e = this.state.get(id);
    if (e === undefined) return undefined;
    return { session: e.session, lastTurn: e.lastTurn, version: () => e.version };
  }

  turn(session: string, id: string): TreeTurn | undefined {
    return this.state.get(session)?.turn(id);
  }

  path(session: string, id: string): readonly TreeTurn[] | undefined {
    const t = this.state.get(session)?.turn(id);
    return t === undefined ? undefined : SessionEntry.pathTo(t);
  }

  subtree(session: string, id: string): readonly TurnNode[] | undefined {
    const e = this.state.get(session);
    const t = e?.turn(id);
    return e === undefined || t === undefined ? undefined : e.subtreeOf(t);
  }

  lastTurnExcept(session: string, excluded: ReadonlySet<string>): TurnKey | undefined {
    const turns = this.state.get(session)?.turns ?? [];
    for (let i = turns.length - 1; i >= 0; i--) {
      const t = turns[i] as StoredTurn;
      if (!excluded.has(t._id)) return { createdAt: t.createdAt, _id: t._id };
    }
    return undefined;
  }

  release(): void {
    // nothing was taken
  }

  commit(changes: readonly Change[]): Promise<void> {
    const appender = this.appender as Appender;
    const lines = changes.map(lineOf);
    const data = lines.length === 1 ? (lines[0] as Buffer) : Buffer.concat(lines);
    const started = process.hrtime.bigint();
    return new Promise((resolve, reject) => {
      appender.append(data, (err) => {
        if (err !== undefined) return reject(err);
        this.opts.observer?.commit(Number(process.hrtime.bigint() - started) / 1e9, changes.length);
        for (const c of changes) this.apply(c);
        // durable and in memory; acknowledged once the search index is not far behind (it almost never is)
        const kept = this.words?.keptUp();
        if (kept === undefined) resolve();
        else void kept.then(resolve);
        this.maybeCompact();
      });
    });
  }

  /** Applies a durable change to memory, with what it changes in its owner's usage. */
  private apply(c: Change): void {
    const state = this.state;
    const id = c.kind === 'delete' ? c.id : c.kind === 'deleteTurns' ? c.sessionId : c.session._id;
    const before = state.get(id);
    const bytesBefore = before === undefined ? 0 : before.sessionBytes + before.turnBytes;
    if (before !== undefined) this.addUsage(before.session.user, -1, -(before.turns?.length ?? 0), -bytesBefore);
    switch (c.kind) {
      case 'create':
        state.insertNew(c.session, c.version).sessionBytes = Buffer.byteLength(c.json);
        break;
      case 'update':
        state.putSession(c.session, c.version).sessionBytes = Buffer.byteLength(c.json);
        break;
      case 'turn':
        state.addTurn(c.session._id, this.written(c.turn, c.json), c.turn.parentId, { session: c.session, version: c.version, bytes: Buffer.byteLength(c.sessionJson) });
        break;
      case 'editTurn':
        state.editTurn(this.written(c.turn, c.json), c.session, Buffer.byteLength(c.sessionJson), c.version);
        break;
      case 'deleteTurns':
        state.pruneTurns(c.ids, c.session, Buffer.byteLength(c.sessionJson), c.version);
        break;
      case 'delta':
        state.deltaTurn(c.session._id, StoredTurn.of(c.turn._id, c.turn.createdAt, c.json));
        break;
      case 'fork': {
        const e = state.insertNew(c.session, c.version);
        for (const t of c.turns) state.placeTurn(c.session._id, this.written(t.turn, t.json), t.turn.parentId);
        e.replace(c.session, c.version);
        e.sessionBytes = Buffer.byteLength(c.json);
        break;
      }
      case 'delete':
        state.deleteSession(c.id);
    }
    const after = state.get(id);
    if (after !== undefined) this.addUsage(after.session.user, 1, after.turns?.length ?? 0, after.sessionBytes + after.turnBytes);
    this.jsonBytes += (after === undefined ? 0 : after.sessionBytes + after.turnBytes) - bytesBefore;
  }

  /** A turn the writer made, kept in its own buffer. */
  private written(turn: Turn, json: Buffer): StoredTurn {
    const t = StoredTurn.of(turn._id, turn.createdAt, json);
    this.state.arena.written(t);
    return t;
  }

  /** Bytes of the journal holding live records: what a compaction would write. */
  private get liveBytes(): number {
    return HEADER_BYTES + this.jsonBytes + PUT_LINE_OVERHEAD * this.state.sessionCount + TURN_LINE_OVERHEAD * this.state.turnCount;
  }

  private addUsage(user: string, sessions: number, turns: number, bytes: number): void {
    const u = this.usageByUser.get(user);
    if (u === undefined) {
      this.usageByUser.set(user, { sessions, turns, bytes });
      return;
    }
    u.sessions += sessions;
    u.turns += turns;
    u.bytes += bytes;
    if (u.sessions === 0) this.usageByUser.delete(user);
  }

  /** Every user's usage, and the bytes of all JSON, from the entries (after a load or an import). */
  private recountUsage(): void {
    this.usageByUser = new Map();
    this.jsonBytes = 0;
    for (const e of this.state.entries.values()) {
      this.addUsage(e.session.user, 1, e.turns?.length ?? 0, e.sessionBytes + e.turnBytes);
      this.jsonBytes += e.sessionBytes + e.turnBytes;
    }
  }

  async importAll(sessions: readonly ChatSession[], turns: readonly Turn[]): Promise<ImportSummary> {
    if (this.appender === undefined) throw new StorageWriteFailed(new Error('this journal was opened read-only'));
    await this.compactionDone;
    if (this.appender.twoFiles) {
      // a compaction the last run left under way is finished first: the rewrite below makes one file
      try {
        await new TailFirstCompaction(this.pieceBytes()).run(this.tailFirstHost());
      } catch (e) {
        throw new StorageWriteFailed(e);
      }
    }
    await this.writer.pause();
    try {
      const state = this.state;
      const stored = new Map<string, { session: string; json: Buffer }>();
      for (const item of state.snapshot()) for (const t of item.turns) stored.set(t._id, { session: item.session._id, json: t.json });
      const plan = planImport(sessions, turns, {
        session: (id) => {
          const e = state.get(id);
          return e === undefined ? undefined : { json: JSON.stringify(e.session), lastTurnAt: e.lastTurn?.createdAt };
        },
        turn: (id) => stored.get(id),
      });
      if (plan.sessions.length + plan.turns.length === 0) return plan.summary;
      for (const s of plan.sessions) state.putSession(s);
      for (const t of plan.turns) {
        const turn = StoredTurn.of(t.turn._id, t.turn.createdAt, t.json);
        state.arena.written(turn);
        if (t.replaces === undefined) state.placeTurn(t.turn.session, turn, t.turn.parentId);
        else state.reimportTurn(t.turn.session, turn, t.turn.parentId);
      }
      try {
        await new Compaction().run(this.compactionHost(), state.snapshot());
      } catch (e) {
        // the journal is untouched: memory goes back to what it holds
        this.state = load([{ file: this.file }], this.opts.log).state;
        void this.feedIndex();
        throw new StorageWriteFailed(e);
      }
      if (this.appender.waitingForDirSync) throw new StorageWriteFailed(new Error("the data directory could not be fsync'd after the journal was rewritten"));
      this.recountLive();
      this.recountUsage();
      return plan.summary;
    } finally {
      this.writer.resume();
    }
  }

  compactionHost(): { file: string; appender: Appender; pauseWriter: () => Promise<void>; resumeWriter: () => void } {
    return { file: this.file, appender: this.appender as Appender, pauseWriter: () => this.writer.pause(), resumeWriter: () => this.writer.resume() };
  }

  /** After an import rewrote the journal: each entry's sizes as written. */
  private recountLive(): void {
    for (const e of this.state.entries.values()) {
      e.sessionBytes = Buffer.byteLength(JSON.stringify(e.session));
      e.turnBytes = 0;
      for (const t of e.turns ?? []) e.turnBytes += t.bytes;
    }
  }

  // ---- compaction ----

  private tailFirstHost(): TailFirstHost {
    return {
      file: this.file,
      next: this.next,
      dir: this.opts.dir,
      appender: this.appender as Appender,
      live: (id) => this.state.get(id)?.session,
      turn: (session, id) => this.state.get(session)?.turn(id),
      pauseWriter: () => this.writer.pause(),
      resumeWriter: () => this.writer.resume(),
    };
  }

  /** How much of the journal a compaction moves at a time: an eighth of the free space, within bounds. */
  private pieceBytes(): number {
    let free = MAX_PIECE;
    try {
      const st = statfsSync(this.opts.dir);
      free = st.bavail * st.bsize;
    } catch {
      // no figure: the largest piece
    }
    return Math.min(MAX_PIECE, Math.max(MIN_PIECE, Math.floor(free / 8)));
  }

  /**
   * Starts a compaction when dead records outweigh live ones (and the journal is at least
   * COMPACT_MIN_SIZE), or goes on with one a failure or a restart left under way.
   */
  maybeCompact(): void {
    const appender = this.appender;
    if (appender === undefined || this.compaction !== undefined || this.closed) return;
    const size = appender.totalSize;
    if (!appender.twoFiles && (size < this.opts.compactMinBytes || size - this.liveBytes <= this.liveBytes)) return;
    if (this.compactBackoff !== undefined && !this.mayRetryCompaction()) return;
    const c = new TailFirstCompaction(this.pieceBytes());
    this.compaction = c;
    const started = process.hrtime.bigint();
    this.compactionDone = c
      .run(this.tailFirstHost())
      .then(
        () => {
          this.compactions++;
          this.compactBackoff = undefined;
          this.opts.log.info('journal compacted', { bytesBefore: size, bytesAfter: appender.totalSize, ms: Math.round(Number(process.hrtime.bigint() - started) / 1e6) });
        },
        (err: unknown) => {
          if (err instanceof CompactionAborted) {
            this.opts.log.info(err.message);
            return;
          }
          const code = (err as NodeJS.ErrnoException).code;
          if (code === 'ENOSPC' || code === 'EDQUOT') {
            // again once the disk has room for the piece that did not fit (with some to spare)
            this.compactBackoff = { at: performance.now() + 1000, needBytes: 2 * Math.max(c.needed, MIN_PIECE), delayMs: 1000 };
            this.opts.log.error('journal compaction stopped: no space left for its next piece; it goes on once there is room, the journal meanwhile stays as it is (two files while under way)', { err, needBytes: this.compactBackoff.needBytes });
          } else {
            const delayMs = Math.min(MAX_RETRY_MS, 2 * (this.compactBackoff?.delayMs ?? 500));
            this.compactBackoff = { at: performance.now() + delayMs, needBytes: 0, delayMs };
            this.opts.log.error('journal compaction failed; it is tried again later, the journal meanwhile stays as it is (two files while under way)', { err, retryInMs: delayMs });
          }
        },
      )
      .finally(() => {
        this.compaction = undefined;
      });
  }

  /**
   * After a failed compaction: true once its delay has passed and, after a full disk, once the
   * file system reports room for the piece that did not fit (asked at most once a second; the
   * answer starts the compaction itself).
   */
  private mayRetryCompaction(): boolean {
    const b = this.compactBackoff;
    if (b === undefined) return true;
    if (performance.now() < b.at) return false;
    if (b.needBytes === 0) return true;
    if (this.checkingSpace) return false;
    this.checkingSpace = true;
    statfs(this.opts.dir, (err, st) => {
      this.checkingSpace = false;
      if (err === null && st.bavail * st.bsize >= b.needBytes) {
        this.compactBackoff = { ...b, at: 0, needBytes: 0 };
        this.maybeCompact();
      } else this.compactBackoff = { ...b, at: performance.now() + 1000 };
    });
    return false;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.compaction !== undefined) this.compaction.abort = true;
    await this.compactionDone;
    await this.writer.close();
    this.appender?.close();
    await this.words?.close();
  }
}

function lineOf(c: Change): Buffer {
  switch (c.kind) {
    case 'create':
    case 'update':
      return putLine(c.json);
    case 'turn':
      return turnLine(c.json);
    case 'editTurn':
      return editLine(c.json, c.sessionJson);
    case 'deleteTurns':
      return pruneLine(c.ids, c.sessionJson);
    case 'fork':
      return forkLine(c.json, c.turns.map((t) => t.json));
    case 'delta':
      return deltaLine(c.turn._id, c.turn.session, c.text);
    case 'delete':
      return delLine(c.id);
  }
}

interface Loaded {
  readonly state: MemoryState;
  /** One scan per file of the journal, older first. */
  readonly scans: readonly ScanResult[];
}

/** A journal file to replay: by path, or an open descriptor read up to `upTo` (a consistent prefix). */
interface JournalFile {
  readonly file: string;
  readonly fd?: number;
  readonly upTo?: number;
}

/**
 * Replays a journal (its files in order) into a new state, indexes built once at the end. The
 * records that delete (tombstones, prunes) are found first, so the turns they delete are never
 * copied into memory. A journal of the first release gets its turns' parents and its sessions'
 * heads at the end of the load.
 */
function load(files: readonly JournalFile[], log: Logger): Loaded {
  const state = new MemoryState();
  state.beginLoad();
  const deletions: Deletions = { sessions: new Map(), turns: new Map() };
  const bases: number[] = [];
  let base = 0;
  for (const f of files) {
    bases.push(base);
    findDeletions(f.file, deletions, { ...(f.fd !== undefined ? { fd: f.fd } : {}), ...(f.upTo !== undefined ? { upTo: f.upTo } : {}), base });
    base += f.upTo ?? fileSize(f);
  }
  const { sessions, turns } = deletions;
  const dead: Deleted | undefined =
    sessions.size + turns.size === 0 ? undefined : (session, turn, pos) => (sessions.get(session) ?? -1) > pos || (turn !== undefined && (turns.get(turn) ?? -1) > pos);
  const scans = files.map((f, i) =>
    scanJournal(f.file, (r, bytes) => replay(state, r, bytes), {
      ...(f.fd !== undefined ? { fd: f.fd } : {}),
      ...(f.upTo !== undefined ? { upTo: f.upTo } : {}),
      arena: state.arena,
      base: bases[i] as number,
      ...(dead !== undefined ? { dead } : {}),
    }),
  );
  const first = scans[0]?.header;
  const legacy = first !== undefined && first.version < JOURNAL_VERSION;
  const { orphanTurns, unlinkedTurns } = state.finishLoad(legacy ? upgradeTurnJson : undefined);
  if (orphanTurns > 0) log.warn('dropped turns whose session does not exist', { turns: orphanTurns });
  if (unlinkedTurns > 0) log.warn('turns whose parent does not exist are kept as roots', { turns: unlinkedTurns });
  return { state, scans };
}

function fileSize(f: JournalFile): number {
  if (f.fd !== undefined) return fstatSync(f.fd).size;
  const fd = openSync(f.file, 'r');
  try {
    return fstatSync(fd).size;
  } finally {
    closeSync(fd);
  }
}

/** Applies one journal record during a load, counting the bytes of each session's JSON. */
function replay(state: MemoryState, r: JournalRecord, bytes: number): void {
  switch (r.kind) {
    case 'put':
      state.putSession(r.session).sessionBytes = bytes - PUT_LINE_OVERHEAD;
      return;
    case 'turn':
      state.addTurn(r.session, r.turn, r.parentId);
      return;
    case 'edit':
      state.editTurn(r.turn, r.session, Buffer.byteLength(JSON.stringify(r.session)));
      return;
    case 'prune':
      state.pruneTurns(r.ids, r.session, Buffer.byteLength(JSON.stringify(r.session)));
      return;
    case 'fork': {
      const e = state.putSession(r.session);
      for (const t of r.turns) state.placeTurn(r.session._id, t.turn, t.parentId);
      e.sessionBytes = Buffer.byteLength(JSON.stringify(r.session));
      return;
    }
    case 'delta': {
      const old = state.get(r.session)?.turn(r.turnId);
      if (old === undefined) return;
      const was = JSON.parse(old.json.toString('utf8')) as Turn;
      const turn = turnRecord({ ...was, content: appendText(was.content, r.text).content });
      state.deltaTurn(r.session, StoredTurn.of(turn._id, turn.createdAt, Buffer.from(JSON.stringify(turn))));
      return;
    }
    case 'del':
      state.deleteSession(r.id);
      return;
    case 'dead-turn':
    // a turn a later record deletes: never kept
  }
}

function createEmpty(path: string): void {
  const fd = openSync(path, 'w', 0o600);
  try {
    writeFullySync(fd, headerLine());
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  fsyncDir(dirname(path));
}

/**
 * Opens the journal's files and decides how much of each to read: all of them when no server is
 * running; else only what the server has published as durable (COMMITTED_FILE), on the same
 * inodes (a compaction may cut or swap the files in between: then look again).
 */
function openConsistent(dataDir: string, file: string): { file: string; fd: number; upTo: number }[] {
  let published = false;
  const next = file + NEXT_SUFFIX;
  for (let attempt = 0; attempt < 200; attempt++) {
    const opened: { file: string; fd: number; upTo: number }[] = [];
    const close = (): void => {
      for (const o of opened) closeSync(o.fd);
    };
    for (const f of [file, next]) {
      try {
        const fd = openSync(f, 'r');
        opened.push({ file: f, fd, upTo: fstatSync(fd).size });
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'ENOENT' || f === file) {
          close();
          throw e;
        }
      }
    }
    if (lockHolder(dataDir) === undefined) return opened;
    const committed = readCommitted(dataDir);
    if (committed !== undefined && committed.length <= opened.length) {
      // the same files, none shorter than published (a compaction cuts the older one after the
      // newer one's growth is published); one file published: a `.next` beside it is not part of it yet
      const match = committed.every((c, i) => {
        const o = opened[i] as { fd: number; upTo: number };
        return c.ino === String(fstatSync(o.fd).ino) && o.upTo >= c.size;
      });
      if (match) {
        for (const extra of opened.splice(committed.length)) closeSync(extra.fd);
        committed.forEach((c, i) => {
          (opened[i] as { upTo: number }).upTo = c.size;
        });
        return opened;
      }
    }
    published ||= committed !== undefined;
    close();
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 5); // the server is swapping files: a moment
  }
  const holder = lockHolder(dataDir);
  throw new StoreOpenFailed(
    published
      ? `${file}: the journal kept changing under the export; try again`
      : `the server holding ${dataDir} (pid ${holder?.pid ?? '?'}) does not say how much of its journal is durable (an older release?); stop it, or export with its own release`,
  );
}
