// The journal engine's image of the data in memory: an entry per session (the session, its
// version, its turns), and per-user and per-project lists kept in list order. It knows nothing
// about files; the engine changes it only after a change is durable.
import { PAGE_BYTE_BUDGET, PAGE_SCAN_BUDGET, sessionBefore, turnBefore, type SessionKey, type TurnKey } from '../../domain/order.js';
import { raisedByTurn, type ChatSession } from '../../domain/records.js';
import { foldForSearch } from '../../domain/search.js';
import { versionOf } from '../../domain/version.js';
import type { Page, SessionFilter, SessionRecord, TurnRecord } from '../store.js';
import { ceilingsOf } from '../../memory.js';
import { SortedList } from './sorted-list.js';
import { StoredTurn, TurnArena } from './turns.js';

export { StoredTurn } from './turns.js';

/**
 * Read records are cached (their JSON made once), but not without bound: past a budget the
 * oldest cached records are dropped and made again on their next read. The budget follows V8's
 * heap limit (a sixty-fourth of it, from 1 to 64 MiB), so that near a small ceiling a client
 * that only reads cannot fill the heap with cached JSON.
 */
export function recordCacheBudget(heapBytes: number = ceilingsOf('off').heapBytes): number {
  return Math.min(64 * 1024 * 1024, Math.max(1024 * 1024, Math.floor(heapBytes / 64)));
}
/** What a cached record costs beside its JSON: the record, its string's header, its place in the ring. */
const RECORD_OVERHEAD = 96;

/**
 * One session as held in memory. Its answer (an immutable record with its JSON) is made on the
 * first read and kept for later reads while the record cache has room. A writer leaves the
 * version, which its own answer needs anyway, but not its JSON: most sessions written are not read
 * again soon. Entries change in place when the session changes; readers get the immutable records.
 */
export class SessionEntry {
  private cached: SessionRecord | undefined;
  private cachedVersion: string | undefined;
  turns: StoredTurn[] | undefined;
  /** Bytes of the journal lines that hold this session's current state and its turns. */
  putBytes = 0;
  turnBytes = 0;

  constructor(public session: ChatSession) {}

  /** The session as a reader gets it: never changed afterwards, whatever later writes do. */
  record(cache: RecordCache): SessionRecord {
    let r = this.cached;
    if (r === undefined) {
      const json = JSON.stringify(this.session);
      r = { session: this.session, json, version: (this.cachedVersion ??= versionOf(json, this.lastTurn)) };
      this.cached = r;
      cache.admit(this, json.length + RECORD_OVERHEAD);
    }
    return r;
  }

  /**
   * The session as a reader gets it, made without entering the cache when not there (a whole
   * list, read once): its JSON and version are made when asked for and kept by no one after.
   */
  peekRecord(): SessionRecord {
    return this.cached ?? new LazyRecord(this.session, this.lastTurn, this.cachedVersion);
  }

  /** Drops the cached record (the cache ran out of room). */
  evict(): void {
    this.cached = undefined;
  }

  get version(): string {
    return (this.cachedVersion ??= versionOf(this.cached?.json ?? JSON.stringify(this.session), this.lastTurn));
  }

  get lastTurn(): StoredTurn | undefined {
    return this.turns?.[this.turns.length - 1];
  }

  /** A writer's new state, with the version it computed. */
  replace(session: ChatSession, version?: string): void {
    this.session = session;
    this.cached = undefined;
    this.cachedVersion = version;
  }

  /** A turn was added or removed: the version moves. */
  turnsChanged(): void {
    this.cached = undefined;
    this.cachedVersion = undefined;
  }

  get updatedAt(): string {
    return this.session.updatedAt;
  }
  get _id(): string {
    return this.session._id;
  }
}

/** A session as of one moment, its JSON and version made when first read from this object. */
export class LazyRecord implements SessionRecord {
  private text: string | undefined;
  constructor(
    readonly session: ChatSession,
    private readonly lastTurn: TurnKey | undefined,
    private known?: string | undefined,
  ) {}
  get json(): string {
    return (this.text ??= JSON.stringify(this.session));
  }
  get version(): string {
    return (this.known ??= versionOf(this.json, this.lastTurn));
  }
}

/** The entries whose records are cached, oldest first; past its budget the oldest lose theirs. */
export class RecordCache {
  private ring: (SessionEntry | undefined)[] = [];
  private sizes: number[] = [];
  private head = 0;
  private held = 0;

  constructor(readonly budget = recordCacheBudget()) {}

  /** Bytes the cached records hold now (at most the budget). */
  get bytes(): number {
    return this.held;
  }

  admit(e: SessionEntry, size: number): void {
    this.ring.push(e);
    this.sizes.push(size);
    this.held += size;
    while (this.held > this.budget && this.head < this.ring.length) {
      // an entry read twice is in the ring twice; evicting its older place early costs one re-read
      this.ring[this.head]?.evict();
      this.ring[this.head] = undefined;
      this.held -= this.sizes[this.head] as number;
      this.head++;
    }
    if (this.head > 4096 && this.head * 2 > this.ring.length) {
      this.ring = this.ring.slice(this.head);
      this.sizes = this.sizes.slice(this.head);
      this.head = 0;
    }
  }
}

/** A session with its turns as of one moment: immutable references, unchanged by later writes. */
export interface SnapshotItem {
  readonly session: ChatSession;
  readonly turns: readonly StoredTurn[];
}

const entryBefore = (a: SessionEntry, b: SessionEntry): boolean => sessionBefore(a.session, b.session);
const sameEntry = (a: SessionEntry, b: SessionEntry): boolean => a === b;

export class MemoryState {
  readonly entries = new Map<string, SessionEntry>();
  readonly cache = new RecordCache();
  /** Where the turns' JSON is kept. */
  readonly arena = new TurnArena();
  private readonly byUser = new Map<string, SortedList<SessionEntry>>();
  private readonly byProject = new Map<string, SortedList<SessionEntry>>();
  private turnTotal = 0;
  /** Whether the last addTurn replaced a turn already there. */
  lastTurnReplaced = false;
  /** While loading, indexes are left alone and built once by `finishLoad`. */
  private loading = false;

  get turnCount(): number {
    return this.turnTotal;
  }

  get sessionCount(): number {
    return this.entries.size;
  }

  beginLoad(): void {
    this.loading = true;
    this.arena.beginLoad();
  }

  /** Builds the list indexes after a bulk load; drops turns whose session does not exist. */
  finishLoad(): { orphanTurns: number } {
    this.loading = false;
    this.arena.finishLoad();
    const byUser = new Map<string, SessionEntry[]>();
    const byProject = new Map<string, SessionEntry[]>();
    let orphanTurns = 0;
    for (const [id, e] of this.entries) {
      if (e.session === ORPHAN) {
        orphanTurns += e.turns?.length ?? 0;
        this.turnTotal -= e.turns?.length ?? 0;
        for (const t of e.turns ?? []) this.arena.released(t);
        this.entries.delete(id);
        continue;
      }
      // a turn replayed before its session did not move it: apply that now
      const lastAt = e.lastTurn?.createdAt;
      if (lastAt !== undefined && lastAt > e.session.updatedAt) e.replace(raisedByTurn(e.session, lastAt));
      push(byUser, e.session.user, e);
      push(byProject, e.session.project, e);
    }
    const order = (a: SessionEntry, b: SessionEntry): number => (entryBefore(a, b) ? -1 : 1);
    for (const [k, items] of byUser) this.listOf(this.byUser, k).fill(items.sort(order));
    for (const [k, items] of byProject) this.listOf(this.byProject, k).fill(items.sort(order));
    return { orphanTurns };
  }

  get(id: string): SessionEntry | undefined {
    const e = this.entries.get(id);
    return e === undefined || e.session === ORPHAN ? undefined : e;
  }

  /** Puts a session's new state (with its version when the writer has it). */
  putSession(s: ChatSession, version?: string): SessionEntry {
    const e = this.entries.get(s._id);
    if (e === undefined) return this.insertNew(s, version);
    if (this.loading) {
      e.replace(s, version);
      return e;
    }
    if (e.session !== ORPHAN) this.unindex(e);
    e.replace(s, version);
    this.index(e);
    return e;
  }

  /** Adds a session the writer has checked is not there (a create): one lookup in the table instead of two. */
  insertNew(s: ChatSession, version?: string): SessionEntry {
    const e = new SessionEntry(s);
    if (version !== undefined) e.replace(s, version);
    this.entries.set(s._id, e);
    if (!this.loading) this.index(e);
    return e;
  }

  /** Removes a session and its turns; returns the entry that was removed. */
  deleteSession(id: string): SessionEntry | undefined {
    const e = this.entries.get(id);
    if (e === undefined) return undefined;
    this.entries.delete(id);
    this.turnTotal -= e.turns?.length ?? 0;
    for (const t of e.turns ?? []) this.arena.released(t);
    if (!this.loading && e.session !== ORPHAN) this.unindex(e);
    return e;
  }

  /**
   * Adds a turn and raises its session's updatedAt to the turn's createdAt (what appending a
   * turn does). While loading, a turn may come before its session; it waits on a placeholder.
   * A turn already there (the same id and time: a journal compacted while it was being written
   * can hold a turn twice) is replaced, and `lastTurnReplaced` says so.
   */
  addTurn(sessionId: string, t: StoredTurn): SessionEntry {
    let e = this.entries.get(sessionId);
    if (e === undefined) {
      e = new SessionEntry(ORPHAN);
      this.entries.set(sessionId, e);
    }
    const list = (e.turns ??= []);
    const last = list[list.length - 1];
    let replaced = false;
    if (last === undefined || turnBefore(last, t)) list.push(t);
    else {
      const at = turnsBefore(list, t);
      const there = list[at];
      if (there !== undefined && there._id === t._id && there.createdAt === t.createdAt) {
        this.arena.released(there);
        list[at] = t;
        replaced = true;
        this.turnTotal--;
      } else list.splice(at, 0, t);
    }
    this.turnTotal++;
    e.turnsChanged();
    this.lastTurnReplaced = replaced;
    if (e.session !== ORPHAN) {
      const raised = raisedByTurn(e.session, t.createdAt);
      if (raised !== e.session) this.putSession(raised);
    }
    return e;
  }

  /** Removes one turn (import replacing it with the backup's version); false when it is not there. */
  removeTurn(sessionId: string, turnId: string): boolean {
    const e = this.entries.get(sessionId);
    const i = e?.turns?.findIndex((t) => t._id === turnId) ?? -1;
    if (e === undefined || i < 0) return false;
    const [gone] = e.turns?.splice(i, 1) ?? [];
    if (gone !== undefined) this.arena.released(gone);
    this.turnTotal--;
    e.turnsChanged();
    return true;
  }

  /** The list a filter reads: a project's, or under owner-only access the caller's own (so its cost says nothing of others' sessions). */
  private listFor(filter: SessionFilter): SortedList<SessionEntry> | undefined {
    if (filter.user !== undefined) return this.byUser.get(filter.user);
    return filter.project !== undefined ? this.byProject.get(filter.project) : undefined;
  }

  listSessions(filter: SessionFilter, after: SessionKey | undefined, limit: number): Page<SessionRecord, SessionKey> {
    const list = this.listFor(filter);
    if (list === undefined) return { items: [], next: undefined };
    const keep = matcher(filter);
    const out: SessionRecord[] = [];
    let examined = 0;
    let last: ChatSession | undefined;
    let next: SessionKey | undefined;
    list.forEachAfter(after === undefined ? undefined : keyEntry(after), (e) => {
      if (last !== undefined && (out.length === limit || examined === PAGE_SCAN_BUDGET)) {
        next = { updatedAt: last.updatedAt, _id: last._id };
        return false;
      }
      examined++;
      last = e.session;
      if (keep(e.session)) out.push(e.record(this.cache));
      return true;
    });
    return { items: out, next };
  }

  /**
   * Every session of a list as of now, in list order (immutable session records; their answers
   * are made as they are read), and the filter to apply to them: applied as they are read, so
   * taking the snapshot costs a copy of references, not a pass of the filter over the list.
   */
  snapshotList(filter: SessionFilter): { sessions: ChatSession[]; keep: (s: ChatSession) => boolean } {
    const list = this.listFor(filter);
    const sessions: ChatSession[] = [];
    list?.forEachAfter(undefined, (e) => {
      sessions.push(e.session);
      return true;
    });
    return { sessions, keep: matcher(filter) };
  }

  listTurns(sessionId: string, after: TurnKey | undefined, limit: number): Page<TurnRecord, TurnKey> {
    const list = this.get(sessionId)?.turns;
    if (list === undefined) return { items: [], next: undefined };
    let start = 0;
    if (after !== undefined) {
      start = turnsBefore(list, after);
      if (list[start]?._id === after._id && list[start]?.createdAt === after.createdAt) start++;
    }
    let end = start;
    for (let bytes = 0; end < list.length && end - start < limit && (end === start || bytes < PAGE_BYTE_BUDGET); end++) bytes += (list[end] as StoredTurn).jsonLength;
    const items = list.slice(start, end);
    const last = items[items.length - 1];
    return { items, next: end < list.length && last !== undefined ? { createdAt: last.createdAt, _id: last._id } : undefined };
  }

  /** The turns of a session as of now (a copy of the list; the turns themselves never change). */
  snapshotTurns(sessionId: string): StoredTurn[] {
    return this.get(sessionId)?.turns?.slice() ?? [];
  }

  /** Every live session with its turns as of now, for compaction and export. */
  snapshot(): SnapshotItem[] {
    const out: SnapshotItem[] = [];
    for (const e of this.entries.values()) {
      if (e.session === ORPHAN) continue;
      out.push({ session: e.session, turns: e.turns === undefined ? EMPTY : e.turns.slice() });
    }
    return out;
  }

  private index(e: SessionEntry): void {
    this.listOf(this.byUser, e.session.user).insert(e);
    this.listOf(this.byProject, e.session.project).insert(e);
  }

  private unindex(e: SessionEntry): void {
    dropFrom(this.byUser, e.session.user, e);
    dropFrom(this.byProject, e.session.project, e);
  }

  private listOf(map: Map<string, SortedList<SessionEntry>>, key: string): SortedList<SessionEntry> {
    let l = map.get(key);
    if (l === undefined) {
      l = new SortedList(entryBefore);
      map.set(key, l);
    }
    return l;
  }
}

/** The filters a list applies beyond the list it reads. */
function matcher(filter: SessionFilter): (s: ChatSession) => boolean {
  const { archived, nameContains } = filter;
  const project = filter.user !== undefined ? filter.project : undefined;
  return (s) =>
    (archived === 'all' || s.archived === (archived === 'true')) &&
    (project === undefined || s.project === project) &&
    (nameContains === undefined || foldForSearch(s.name).includes(nameContains));
}

/** Placeholder session of turns replayed before their session (dropped if it never comes). */
const ORPHAN: ChatSession = Object.freeze({
  _id: '',
  name: '',
  provider: '',
  selectedModel: '',
  mode: 'Build',
  user: '',
  project: '',
  createdAt: '',
  updatedAt: '',
  archived: false,
});

const EMPTY: readonly StoredTurn[] = [];

function push<K, V>(map: Map<K, V[]>, key: K, v: V): void {
  const list = map.get(key);
  if (list === undefined) map.set(key, [v]);
  else list.push(v);
}

function dropFrom(map: Map<string, SortedList<SessionEntry>>, key: string, e: SessionEntry): void {
  const l = map.get(key);
  if (l === undefined) return;
  l.remove(e, sameEntry);
  if (l.size === 0) map.delete(key);
}

/** How many turns of a list (oldest first) come before `key`: where `key` is, or would go. */
function turnsBefore(list: readonly StoredTurn[], key: TurnKey): number {
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (turnBefore(list[mid] as StoredTurn, key)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** A stand-in entry carrying only a sort key, to search the lists with. */
function keyEntry(key: SessionKey): SessionEntry {
  return new SessionEntry({ ...ORPHAN, _id: key._id, updatedAt: key.updatedAt });
}
