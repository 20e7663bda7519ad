// The journal engine: the whole data set in memory, every change appended to one journal file
// and made durable before it is applied or acknowledged. Reads are served from memory; writes
// pass through the shared serial writer, whose groups become one append and one fdatasync.
// When dead records outweigh live ones, the journal is rewritten beside the old one.
import { closeSync, existsSync, fstatSync, ftruncateSync, fsyncSync, mkdirSync, openSync, unlinkSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { SessionKey, TurnKey } from '../../domain/order.js';
import { appendText, isStreamingJson } from '../../domain/deltas.js';
import { turnRecord, type ChatSession, type Turn } from '../../domain/records.js';
import { isLive, type Liveness } from '../../domain/retention.js';
import { versionOfSession } from '../../domain/version.js';
import { lockHolder } from '../../data-dir-lock.js';
import { fsyncDir, writeFullySync } from '../../files.js';
import type { Logger } from '../../log.js';
import { planImport } from '../import-plan.js';
import {
  StorageWriteFailed,
  StoreOpenFailed,
  TurnNotFound,
  type Branch,
  type Current,
  type SessionState,
  type TreeTurn,
  type TurnDelta,
  type TurnEdit,
  type TurnNode,
  type TurnUpdate,
  type WriteHint,
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
import { SerialWriter, type Change, type CommitListener, type Group, type GroupSource } from '../writer.js';
import { Appender, COMPACT_SUFFIX, IMPORT_SUFFIX, JOURNAL_FILE, readCommitted } from './appender.js';
import { Compaction, CompactionAborted } from './compaction.js';
import { deltaLine, delLine, editLine, forkLine, headerLine, JOURNAL_VERSION, pruneLine, putLine, PUT_LINE_OVERHEAD, scanJournal, TURN_LINE_OVERHEAD, turnLine, upgradeTurnJson, type JournalRecord, type ScanResult } from './format.js';
import { MemoryState, pageOf, SessionEntry, StoredTurn } from './state.js';

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
}

const HEADER_BYTES = headerLine().length;
const NO_USAGE: Usage = { sessions: 0, turns: 0, bytes: 0 };
const CHUNK = 256;

export class JournalStore implements Store, GroupSource, Group {
  readonly engine = 'journal';
  private state: MemoryState;
  private readonly file: string;
  private readonly writer: SerialWriter;
  /** UTF-8 bytes of the JSON of every live session and turn. */
  private jsonBytes = 0;
  private compactions = 0;
  /** After a failed compaction, no new one before the journal reaches this size. */
  private compactRetryAt = 0;
  private compaction: Compaction | undefined;
  private compactionDone: Promise<void> = Promise.resolve();
  private closed = false;
  /** What each user's sessions hold (by owner), kept as changes are applied. */
  private usageByUser = new Map<string, { sessions: number; turns: number; bytes: number }>();

  private constructor(
    private readonly opts: JournalStoreOptions,
    private readonly appender: Appender | undefined,
    loaded: Loaded,
  ) {
    this.file = join(opts.dir, JOURNAL_FILE);
    this.state = loaded.state;
    this.recountUsage();
    this.writer = new SerialWriter(this, opts.log, opts.groupCommit === false ? 1 : Infinity);
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
    const loaded = load(file, log, {});
    const { scan } = loaded;
    let size = scan.validBytes;
    if (scan.header === undefined) {
      // nothing intact, not even the header: a journal whose creation was interrupted
      log.warn('the journal had no intact header; starting it afresh', { file, droppedBytes: scan.tornBytes });
      createEmpty(file);
      size = HEADER_BYTES;
    } else if (scan.tornBytes > 0) {
      log.warn('dropped an interrupted final write from the journal; it was never acknowledged', { file, offset: scan.validBytes, droppedBytes: scan.tornBytes });
      const fd = openSync(file, 'r+');
      try {
        ftruncateSync(fd, scan.validBytes);
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
    }
    const appender = new Appender(file, size, { dir: opts.dir, fsync: opts.fsync, log });
    const store = new JournalStore(opts, appender, loaded);
    const ms = Number(process.hrtime.bigint() - started) / 1e6;
    log.info('journal replayed', { sessions: loaded.state.sessionCount, turns: loaded.state.turnCount, records: scan.records, bytes: size, ms: Math.round(ms) });
    if (scan.header !== undefined && scan.header.version !== JOURNAL_VERSION) {
      try {
        await new Compaction().run(store.compactionHost(), store.state.snapshot());
      } catch (e) {
        store.appender?.close();
        throw new StoreOpenFailed(`${file}: a journal of version ${scan.header.version} could not be rewritten in version ${JOURNAL_VERSION} (${(e as Error).message}); it is unchanged`);
      }
      log.info('journal rewritten in this release\'s format: turns have their parents, sessions their heads', { file, fromVersion: scan.header.version, toVersion: JOURNAL_VERSION, bytes: appender.size });
    }
    return store;
  }

  /**
   * The data of `dir` as of one instant, read-only, beside a server that may be running: the
   * journal's durable prefix as the server publishes it (see COMMITTED_FILE).
   */
  static openSnapshot(dir: string, log: Logger): JournalStore {
    const file = join(dir, JOURNAL_FILE);
    if (!existsSync(file)) throw new StoreOpenFailed(`no journal at ${file} (is DATA_DIR right?)`);
    const { fd, upTo } = openConsistent(dir, file);
    try {
      return new JournalStore({ dir, log, fsync: false, compactMinBytes: Infinity }, undefined, load(file, log, { fd, upTo }));
    } finally {
      closeSync(fd);
    }
  }

  // ---- reads: memory only ----

  getSession(id: string): Promise<SessionRecord | undefined> {
    const e = this.state.get(id);
    return Promise.resolve(e === undefined ? undefined : e.record(this.state.cache));
  }

  listSessions(filter: SessionFilter, after: SessionKey | undefined, limit: number): Promise<Page<SessionRecord, SessionKey>> {
    return Promise.resolve(this.state.listSessions(filter, after, limit));
  }

  async *scanSessions(filter: SessionFilter): AsyncIterable<readonly SessionRecord[]> {
    const sessions = this.state.snapshotList(filter);
    for (let i = 0; i < sessions.length; i += CHUNK) yield sessions.slice(i, i + CHUNK).map((s) => this.recordOf(s));
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
    for (let i = 0; i < turns.length; i += CHUNK * 4) yield turns.slice(i, i + CHUNK * 4);
  }

  /** The record of a session as a snapshot took it: the live entry's when it has not changed since. */
  private recordOf(s: ChatSession, lastTurn?: TurnKey): SessionRecord {
    const e = this.state.get(s._id);
    if (e !== undefined && e.session === s) return e.record(this.state.cache);
    return new SnapshotRecord(s, lastTurn);
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
        { name: 'journal_bytes', type: 'gauge', help: 'Size of the journal file.', value: this.appender?.size ?? 0 },
        { name: 'journal_live_bytes', type: 'gauge', help: 'Bytes of the journal still holding live records.', value: this.liveBytes },
        { name: 'compactions_total', type: 'counter', help: 'Journal compactions completed.', value: this.compactions },
      ],
    };
  }

  // ---- writes: through the serial writer ----

  createSession(session: ChatSession): Promise<SessionRecord> {
    return this.writer.createSession(session);
  }

  updateSession(id: string, change: (current: Current) => ChatSession, hint?: WriteHint): Promise<SessionRecord> {
    return this.writer.updateSession(id, change, hint);
  }

  deleteSession(id: string, check: (current: Current) => void): Promise<void> {
    return this.writer.deleteSession(id, check);
  }

  appendTurn(sessionId: string, build: (current: Current) => Turn, hint?: WriteHint): Promise<TurnRecord> {
    return this.writer.appendTurn(sessionId, build, hint);
  }

  updateTurn(sessionId: string, turnId: string, check: (current: Current) => void, edit: (turn: Turn) => TurnEdit): Promise<TurnUpdate> {
    return this.writer.updateTurn(sessionId, turnId, check, edit);
  }

  deleteTurn(sessionId: string, turnId: string, check: (current: Current) => void): Promise<SessionRecord> {
    return this.writer.deleteTurn(sessionId, turnId, check);
  }

  forkSession(sourceId: string, turnId: string | undefined, owner: string, build: (source: Current) => ChatSession): Promise<SessionRecord> {
    return this.writer.forkSession(sourceId, turnId, owner, build);
  }

  appendDelta(sessionId: string, turnId: string, check: (current: Current) => void, text: string, maxBytes: number): Promise<TurnDelta> {
    return this.writer.appendDelta(sessionId, turnId, check, text, maxBytes);
  }

  /** At start, every streaming turn: one server per data directory, so the one that streamed them is gone. */
  leftStreaming(atStart: boolean): Promise<readonly { session: string; turnId: string }[]> {
    const out: { session: string; turnId: string }[] = [];
    if (atStart) {
      for (const e of this.state.entries.values()) for (const t of e.turns ?? []) if (isStreamingJson(t.json)) out.push({ session: e.session._id, turnId: t._id });
    }
    return Promise.resolve(out);
  }

  onCommitted(listener: CommitListener): void {
    this.writer.onCommitted(listener);
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
        this.compaction?.tail.push(data);
        for (const c of changes) this.apply(c);
        resolve();
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
        state.addTurn(c.session._id, StoredTurn.of(c.turn._id, c.turn.createdAt, c.json), c.turn.parentId, { session: c.session, version: c.version, bytes: Buffer.byteLength(c.sessionJson) });
        break;
      case 'editTurn':
        state.editTurn(StoredTurn.of(c.turn._id, c.turn.createdAt, c.json), c.session, Buffer.byteLength(c.sessionJson), c.version);
        break;
      case 'deleteTurns':
        state.pruneTurns(c.ids, c.session, Buffer.byteLength(c.sessionJson), c.version);
        break;
      case 'delta':
        state.deltaTurn(c.session._id, StoredTurn.of(c.turn._id, c.turn.createdAt, c.json));
        break;
      case 'fork': {
        const e = state.insertNew(c.session, c.version);
        for (const t of c.turns) state.placeTurn(c.session._id, StoredTurn.of(t.turn._id, t.turn.createdAt, t.json), t.turn.parentId);
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
        if (t.replaces === undefined) state.placeTurn(t.turn.session, turn, t.turn.parentId);
        else state.reimportTurn(t.turn.session, turn, t.turn.parentId);
      }
      try {
        await new Compaction().run(this.compactionHost(), state.snapshot());
      } catch (e) {
        // the journal is untouched: memory goes back to what it holds
        this.state = load(this.file, this.opts.log, {}).state;
        throw new StorageWriteFailed(e);
      }
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

  private maybeCompact(): void {
    const size = (this.appender as Appender).size;
    if (this.compaction !== undefined || this.closed) return;
    if (size < this.opts.compactMinBytes || size < this.compactRetryAt || size - this.liveBytes <= this.liveBytes) return;
    const c = new Compaction();
    this.compaction = c;
    const started = process.hrtime.bigint();
    // the snapshot is taken at the same instant as `c.tail` starts collecting
    this.compactionDone = c
      .run(this.compactionHost(), this.state.snapshot())
      .then(
        () => {
          this.compactions++;
          this.opts.log.info('journal compacted', { bytesBefore: size, bytesAfter: (this.appender as Appender).size, ms: Math.round(Number(process.hrtime.bigint() - started) / 1e6) });
        },
        (err: unknown) => {
          if (err instanceof CompactionAborted) this.opts.log.info(err.message);
          else {
            // not again until the journal has grown by half or COMPACT_MIN_SIZE: each try costs a full snapshot
            const now = (this.appender as Appender).size;
            this.compactRetryAt = now + Math.max(this.opts.compactMinBytes, now >> 1);
            this.opts.log.error('journal compaction failed; the old journal stays in use', { err, retryAtBytes: this.compactRetryAt });
          }
        },
      )
      .finally(() => {
        this.compaction = undefined;
      });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.compaction !== undefined) this.compaction.abort = true;
    await this.compactionDone;
    await this.writer.close();
    this.appender?.close();
  }
}

/** A session of a snapshot whose live entry has changed since: its JSON and version made when read. */
class SnapshotRecord implements SessionRecord {
  private text: string | undefined;
  constructor(
    readonly session: ChatSession,
    private readonly lastTurn: TurnKey | undefined,
  ) {}
  get json(): string {
    return (this.text ??= JSON.stringify(this.session));
  }
  get version(): string {
    return versionOfSession(this.json, this.lastTurn);
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
  readonly scan: ScanResult;
}

/**
 * Replays a journal into a new state (indexes built once at the end); `fd`/`upTo` read a
 * consistent prefix. A journal of the first release gets its turns' parents and its sessions'
 * heads at the end of the load.
 */
function load(file: string, log: Logger, opts: { fd?: number; upTo?: number }): Loaded {
  const state = new MemoryState();
  state.beginLoad();
  const scan = scanJournal(file, (r, bytes) => replay(state, r, bytes), opts);
  const legacy = scan.header !== undefined && scan.header.version < JOURNAL_VERSION;
  const { orphanTurns, unlinkedTurns } = state.finishLoad(legacy ? upgradeTurnJson : undefined);
  if (orphanTurns > 0) log.warn('dropped turns whose session does not exist', { turns: orphanTurns });
  if (unlinkedTurns > 0) log.warn('turns whose parent does not exist are kept as roots', { turns: unlinkedTurns });
  return { state, scan };
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
 * Opens the journal and decides how much of it to read: all of it when no server is running;
 * else only what the server has published as durable (COMMITTED_FILE), on the same inode (a
 * compaction may swap the file in between: then look again).
 */
function openConsistent(dataDir: string, file: string): { fd: number; upTo: number } {
  let published = false;
  for (let attempt = 0; attempt < 200; attempt++) {
    const fd = openSync(file, 'r');
    const st = fstatSync(fd);
    if (lockHolder(dataDir) === undefined) return { fd, upTo: st.size };
    const committed = readCommitted(dataDir);
    if (committed !== undefined && committed.ino === String(st.ino)) return { fd, upTo: Math.min(committed.size, st.size) };
    published ||= committed !== undefined;
    closeSync(fd);
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 5); // the server is swapping files: a moment
  }
  const holder = lockHolder(dataDir);
  throw new StoreOpenFailed(
    published
      ? `${file}: the journal kept changing under the export; try again`
      : `the server holding ${dataDir} (pid ${holder?.pid ?? '?'}) does not say how much of its journal is durable (an older release?); stop it, or export with its own release`,
  );
}
