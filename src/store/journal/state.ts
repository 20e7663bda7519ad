// The journal engine's image of the data in memory: an entry per session (the session, its
// version, its turns), and per-user and per-project lists kept in list order, apart for active
// and archived sessions (as the other engines' indexes keep them, so a page examines the same
// items on every engine). It knows nothing about files; the engine changes it only after a
// change is durable.
import { hitBefore, PAGE_BYTE_BUDGET, PAGE_SCAN_BUDGET, sessionBefore, turnBefore, type SessionKey, type TurnKey } from '../../domain/order.js';
import { chatSession, foldedTags, raisedByTurn, type ChatSession } from '../../domain/records.js';
import { isLive } from '../../domain/retention.js';
import { foldForSearch } from '../../domain/search.js';
import { versionOfSession } from '../../domain/version.js';
import type { Page, SearchFilter, SearchHit, SearchKey, SessionFilter, SessionRecord, TurnRecord } from '../store.js';
import { ceilingsOf } from '../../memory.js';
import { SortedList } from './sorted-list.js';
import { StoredTurn, TurnArena } from './turns.js';
import { docParts, nameDoc, turnDoc } from './word-index.js';
import type { WordThread } from './word-thread.js';
import { walkBudget, walkSearch, type WalkSource } from '../search-walk.js';

export { StoredTurn } from './turns.js';

/** Turns of a session past which a lookup by id builds the session's index instead of scanning. */
const SCAN_TURNS = 16;
/** Sessions a search walk takes from a list at a time. */
const WALK_SESSIONS = 64;

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
  /** Its turns, oldest first (a parent always comes before its children). */
  turns: StoredTurn[] | undefined;
  /** Its turns by id, made when first needed in a session of more than a few turns. */
  private index: Map<string, StoredTurn> | undefined;
  /** UTF-8 bytes of its JSON, and of all its turns' JSON. */
  sessionBytes = 0;
  turnBytes = 0;

  constructor(public session: ChatSession) {}

  /** One of its turns by id. */
  turn(id: string): StoredTurn | undefined {
    const list = this.turns;
    if (list === undefined) return undefined;
    if (this.index === undefined) {
      if (list.length <= SCAN_TURNS) {
        for (let i = list.length - 1; i >= 0; i--) if ((list[i] as StoredTurn)._id === id) return list[i];
        return undefined;
      }
      this.index = new Map(list.map((t) => [t._id, t]));
    }
    return this.index.get(id);
  }

  /** The turns from the root to `t`, oldest first. */
  static pathTo(t: StoredTurn): StoredTurn[] {
    const out: StoredTurn[] = [];
    for (let at: StoredTurn | null = t; at !== null; at = at.parent) out.push(at);
    return out.reverse();
  }

  /** Turn `t` and its descendants, in list order: children come after their parent. */
  subtreeOf(t: StoredTurn): StoredTurn[] {
    const list = this.turns as StoredTurn[];
    const inside = new Set<StoredTurn>([t]);
    const out = [t];
    for (let i = turnsBefore(list, t) + 1; i < list.length; i++) {
      const c = list[i] as StoredTurn;
      if (c.parent !== null && inside.has(c.parent)) {
        inside.add(c);
        out.push(c);
      }
    }
    return out;
  }

  /**
   * Adds a turn at its place in the list (at the end but on replays out of order). A turn
   * already there (the same id and time: a compaction moves a turn's newest state after its
   * older records, and a kill between its steps can leave a turn twice) is replaced, its
   * children following the new one; returns the turn replaced, if any.
   */
  placeTurn(t: StoredTurn): StoredTurn | undefined {
    const list = (this.turns ??= []);
    const last = list[list.length - 1];
    if (last === undefined || turnBefore(last, t)) list.push(t);
    else {
      const at = turnsBefore(list, t);
      const there = list[at];
      if (there !== undefined && there._id === t._id && there.createdAt === t.createdAt) {
        this.replaceTurn(there, t);
        return there;
      }
      list.splice(at, 0, t);
    }
    this.index?.set(t._id, t);
    this.turnBytes += t.bytes;
    this.turnsChanged();
    return undefined;
  }

  /** Puts an edited turn (same id and createdAt) in the place of the old one; its children follow it. */
  replaceTurn(old: StoredTurn, t: StoredTurn): void {
    const list = this.turns as StoredTurn[];
    const i = turnsBefore(list, old);
    t.parent ??= old.parent;
    list[i] = t;
    for (let j = i + 1; j < list.length; j++) if ((list[j] as StoredTurn).parent === old) (list[j] as StoredTurn).parent = t;
    this.index?.set(t._id, t);
    this.turnBytes += t.bytes - old.bytes;
    this.turnsChanged();
  }

  /** Removes these turns; returns them. */
  removeTurns(ids: ReadonlySet<string>): StoredTurn[] {
    const list = this.turns;
    if (list === undefined) return [];
    const kept: StoredTurn[] = [];
    const removed: StoredTurn[] = [];
    for (const t of list) {
      if (ids.has(t._id)) {
        removed.push(t);
        this.turnBytes -= t.bytes;
        this.index?.delete(t._id);
      } else kept.push(t);
    }
    this.turns = kept;
    this.turnsChanged();
    return removed;
  }

  /** The session as a reader gets it: never changed afterwards, whatever later writes do. */
  record(cache: RecordCache): SessionRecord {
    let r = this.cached;
    if (r === undefined) {
      const json = JSON.stringify(this.session);
      r = { session: this.session, json, version: (this.cachedVersion ??= versionOfSession(json, this.lastTurn)) };
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
    return (this.cachedVersion ??= versionOfSession(this.cached?.json ?? JSON.stringify(this.session), this.lastTurn));
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
    return (this.known ??= versionOfSession(this.json, this.lastTurn));
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
  /** The same lists for each tag of their sessions (apart, so no user or project name can meet a tag's key). */
  private readonly byUserTag = new Map<string, SortedList<SessionEntry>>();
  private readonly byProjectTag = new Map<string, SortedList<SessionEntry>>();
  private turnTotal = 0;
  /** While loading, indexes are left alone and built once by `finishLoad`. */
  private loading = false;
  /**
   * Turns replayed before their parent (a compaction moves a piece of the journal's end after
   * its older records), linked at the end of the load; those whose parent never comes are kept as roots.
   */
  private readonly unlinked = new Map<StoredTurn, { readonly session: string; readonly parentId: string }>();

  /**
   * The search index's thread (none with SEARCH=off, and for an export), given every session's
   * name and every turn with each change once a load is done and it is fed from memory (`useIndex`).
   */
  private words: WordThread | undefined;

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

  /**
   * Builds the list indexes after a bulk load; drops turns whose session does not exist. A
   * journal of the first release (`upgrade` given) has turns without parents and sessions without
   * heads: each turn gets the one before it as parent (its JSON made anew by `upgrade`), each
   * session its newest turn as head.
   */
  finishLoad(upgrade?: (json: Buffer, parentId: string | null) => Buffer): { orphanTurns: number; unlinkedTurns: number } {
    this.loading = false;
    const byUser = new Map<string, SessionEntry[]>();
    const byProject = new Map<string, SessionEntry[]>();
    const byUserTag = new Map<string, SessionEntry[]>();
    const byProjectTag = new Map<string, SessionEntry[]>();
    let orphanTurns = 0;
    let unlinkedTurns = 0;
    for (const [t, { session, parentId }] of this.unlinked) {
      const e = this.entries.get(session);
      // the turn as it is now (a later record may have replaced it), if it is still there
      const now = e?.turn(t._id);
      if (e === undefined || now === undefined || now.parent !== null) continue;
      const parent = e.turn(parentId);
      if (parent === undefined || parent === now) unlinkedTurns++;
      else now.parent = parent;
    }
    this.unlinked.clear();
    for (const [id, e] of this.entries) {
      if (e.session === ORPHAN) {
        orphanTurns += e.turns?.length ?? 0;
        this.dropTurns(id, e.turns ?? []);
        this.entries.delete(id);
        continue;
      }
      if (upgrade !== undefined) {
        const turns = e.turns ?? [];
        let previous: StoredTurn | null = null;
        e.turnBytes = 0;
        for (let i = 0; i < turns.length; i++) {
          const t = turns[i] as StoredTurn;
          const up = StoredTurn.of(t._id, t.createdAt, upgrade(t.json, previous === null ? null : previous._id));
          this.arena.released(t);
          this.arena.written(up);
          up.parent = previous;
          turns[i] = up;
          e.turnBytes += up.bytes;
          previous = up;
        }
        e.replace(chatSession({ ...e.session, headTurnId: previous === null ? null : previous._id }));
        e.turnsChanged();
      }
      // a turn replayed before its session did not move it: apply that now
      const lastAt = e.lastTurn?.createdAt;
      if (lastAt !== undefined && lastAt > e.session.updatedAt) e.replace(raisedByTurn(e.session, lastAt));
      if (upgrade !== undefined) e.sessionBytes = Buffer.byteLength(JSON.stringify(e.session));
      push(byUser, listKey(e.session.user, e.session.archived), e);
      push(byProject, listKey(e.session.project, e.session.archived), e);
      for (const k of tagKeys(e.session.user, e.session)) push(byUserTag, k, e);
      for (const k of tagKeys(e.session.project, e.session)) push(byProjectTag, k, e);
    }
    const order = (a: SessionEntry, b: SessionEntry): number => (entryBefore(a, b) ? -1 : 1);
    for (const [k, items] of byUser) this.listOf(this.byUser, k).fill(items.sort(order));
    for (const [k, items] of byProject) this.listOf(this.byProject, k).fill(items.sort(order));
    for (const [k, items] of byUserTag) this.listOf(this.byUserTag, k).fill(items.sort(order));
    for (const [k, items] of byProjectTag) this.listOf(this.byProjectTag, k).fill(items.sort(order));
    this.arena.finishLoad();
    return { orphanTurns, unlinkedTurns };
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
    if (e.session === ORPHAN || e.session.name !== s.name) this.words?.name(nameDoc(s._id), s.name, false);
    e.replace(s, version);
    this.index(e);
    return e;
  }

  /** Adds a session the writer has checked is not there (a create): one lookup in the table instead of two. */
  insertNew(s: ChatSession, version?: string): SessionEntry {
    const e = new SessionEntry(s);
    if (version !== undefined) e.replace(s, version);
    this.entries.set(s._id, e);
    if (!this.loading) {
      this.index(e);
      this.words?.name(nameDoc(s._id), s.name, true);
    }
    return e;
  }

  /** Turns gone from memory, whatever took them: out of the count, the search index and the arena. */
  private dropTurns(sessionId: string, turns: readonly StoredTurn[]): void {
    this.turnTotal -= turns.length;
    for (const t of turns) {
      if (!this.loading) this.words?.remove(turnDoc(sessionId, t._id));
      this.arena.released(t);
    }
  }

  /** Removes a session and its turns; returns the entry that was removed. */
  deleteSession(id: string): SessionEntry | undefined {
    const e = this.entries.get(id);
    if (e === undefined) return undefined;
    this.entries.delete(id);
    if (!this.loading) this.words?.remove(nameDoc(id));
    this.dropTurns(id, e.turns ?? []);
    if (!this.loading && e.session !== ORPHAN) this.unindex(e);
    return e;
  }

  /**
   * Puts a turn in its session's tree under `parentId` (undefined: a turn of the first
   * release, its parent given by finishLoad), leaving the session as it is. While loading, a
   * turn may come before its session (it waits on a placeholder) or before its parent (it is
   * linked at the end of the load). A turn already there is replaced (see SessionEntry.placeTurn).
   */
  placeTurn(sessionId: string, t: StoredTurn, parentId: string | null | undefined): SessionEntry {
    let e = this.entries.get(sessionId);
    if (e === undefined) {
      e = new SessionEntry(ORPHAN);
      this.entries.set(sessionId, e);
    }
    if (parentId !== undefined && parentId !== null) {
      const last = e.lastTurn;
      const parent = last !== undefined && last._id === parentId ? last : e.turn(parentId);
      if (parent !== undefined) t.parent = parent;
      else if (this.loading) this.unlinked.set(t, { session: sessionId, parentId });
    }
    const replaced = e.placeTurn(t);
    if (!this.loading) this.words?.turn(turnDoc(sessionId, t._id), t.json, replaced === undefined);
    if (replaced === undefined) this.turnTotal++;
    else this.arena.released(replaced);
    return e;
  }

  /**
   * Appends a turn: it becomes its session's head and raises its updatedAt to its createdAt;
   * `after` is the session's new state when the writer has it (else it is made here, as replay
   * does).
   */
  addTurn(sessionId: string, t: StoredTurn, parentId: string | null | undefined, after?: { session: ChatSession; version: string; bytes: number }): SessionEntry {
    const e = this.placeTurn(sessionId, t, parentId);
    if (e.session === ORPHAN) return e;
    if (after !== undefined) {
      this.putSession(after.session, after.version);
      e.sessionBytes = after.bytes;
    } else if (parentId === undefined) {
      // the first release's turn: its session's head is set once the load is done
      const raised = raisedByTurn(e.session, t.createdAt);
      if (raised !== e.session) this.putSession(raised);
    } else {
      const head = e.session.headTurnId;
      this.putSession(chatSession({ ...raisedByTurn(e.session, t.createdAt), headTurnId: t._id }));
      e.sessionBytes += headBytes(t._id) - headBytes(head);
    }
    return e;
  }

  /** An edited turn (same id and createdAt) in the place of the old one, and its session's new state. */
  editTurn(t: StoredTurn | undefined, session: ChatSession, sessionBytes: number, version?: string): void {
    const e = this.get(session._id);
    const old = t === undefined ? undefined : e?.turn(t._id);
    if (t !== undefined && old === undefined) this.arena.released(t);
    if (e === undefined) return;
    // replay: a turn a later record deletes is not kept (`t` undefined, or not there); its session still moves
    if (t !== undefined && old !== undefined) {
      e.replaceTurn(old, t);
      if (!this.loading) this.words?.turn(turnDoc(session._id, t._id), t.json, false);
      this.arena.released(old);
    }
    this.putSession(session, version);
    e.sessionBytes = sessionBytes;
  }

  /** A streaming turn with a delta's text appended, in the place of the old one; its session does not change. */
  deltaTurn(sessionId: string, t: StoredTurn): void {
    const e = this.get(sessionId);
    const old = e?.turn(t._id);
    if (e === undefined || old === undefined) return;
    e.replaceTurn(old, t);
    this.arena.released(old);
    this.arena.written(t);
  }

  /** Turns deleted (a turn and its descendants), and their session's new state. */
  pruneTurns(ids: readonly string[], session: ChatSession, sessionBytes: number, version?: string): void {
    const e = this.get(session._id);
    if (e === undefined) return;
    this.dropTurns(session._id, e.removeTurns(new Set(ids)));
    this.putSession(session, version);
    e.sessionBytes = sessionBytes;
  }

  /** A backup's version of a turn stored in the same session (import): its children follow it. */
  reimportTurn(sessionId: string, t: StoredTurn, parentId: string | null): void {
    const e = this.entries.get(sessionId);
    const old = e?.turn(t._id);
    if (e === undefined || old === undefined) {
      this.placeTurn(sessionId, t, parentId);
      return;
    }
    // its words go with it: placeTurn below sees a new turn and only adds the new text's
    this.dropTurns(sessionId, e.removeTurns(new Set([t._id])));
    this.placeTurn(sessionId, t, parentId);
    for (const c of e.turns ?? []) if (c.parent === old) c.parent = t;
  }

  /**
   * The lists a filter reads, one per archived state it wants: a project's, or under owner-only
   * access the caller's own (so its cost says nothing of others' sessions).
   */
  private listsFor(filter: SessionFilter): SortedList<SessionEntry>[] {
    const owner = filter.user ?? filter.project;
    if (owner === undefined) return [];
    // a tag filter reads the list of its first tag's sessions; the other tags filter it
    const tag = filter.tags?.[0];
    const map = filter.user !== undefined ? (tag === undefined ? this.byUser : this.byUserTag) : tag === undefined ? this.byProject : this.byProjectTag;
    const key = tag === undefined ? owner : tagListKey(owner, tag);
    const states = filter.archived === 'all' ? [false, true] : [filter.archived === 'true'];
    const out: SortedList<SessionEntry>[] = [];
    for (const archived of states) {
      const l = map.get(listKey(key, archived));
      if (l !== undefined) out.push(l);
    }
    return out;
  }

  listSessions(filter: SessionFilter, after: SessionKey | undefined, limit: number): Page<SessionRecord, SessionKey> {
    const keep = matcher(filter);
    const out: SessionRecord[] = [];
    let examined = 0;
    let last: ChatSession | undefined;
    let next: SessionKey | undefined;
    const each = (e: SessionEntry): boolean => {
      if (last !== undefined && (out.length === limit || examined === PAGE_SCAN_BUDGET)) {
        next = { updatedAt: last.updatedAt, _id: last._id };
        return false;
      }
      examined++;
      last = e.session;
      if (keep(e.session)) out.push(e.record(this.cache));
      return true;
    };
    const lists = this.listsFor(filter);
    const from = after === undefined ? undefined : keyEntry(after);
    if (lists.length === 1) (lists[0] as SortedList<SessionEntry>).forEachAfter(from, each);
    else if (lists.length === 2) {
      // both halves, as far as a page can examine, merged in list order
      for (const e of merge(lists.map((l) => take(l, from, PAGE_SCAN_BUDGET + 1)))) if (!each(e)) break;
    }
    return { items: out, next };
  }

  /**
   * Every session of a list as of now, in list order (immutable session records; their answers
   * are made as they are read), and the filter to apply to them: applied as they are read, so
   * taking the snapshot costs a copy of references, not a pass of the filter over the list.
   */
  snapshotList(filter: SessionFilter): { sessions: ChatSession[]; keep: (s: ChatSession) => boolean } {
    const sessions = merge(this.listsFor(filter).map((l) => take(l, undefined, Infinity))).map((e) => e.session);
    return { sessions, keep: matcher(filter) };
  }

  listTurns(sessionId: string, after: TurnKey | undefined, limit: number): Page<TurnRecord, TurnKey> {
    return pageOf(this.get(sessionId)?.turns ?? EMPTY, after, limit);
  }

  /**
   * The path of a branch of a session as of now, root first: to its head ('head'; [] while it has
   * no turns) or to a turn; undefined when that turn is not one of the session's. [] for a
   * session that does not exist.
   */
  branch(sessionId: string, to: 'head' | string): StoredTurn[] | undefined {
    const e = this.get(sessionId);
    if (e === undefined) return [];
    const id = to === 'head' ? e.session.headTurnId : to;
    if (id === null) return [];
    const t = e.turn(id);
    return t === undefined ? undefined : SessionEntry.pathTo(t);
  }

  /** The turns of a session as of now (a copy of the list; the turns themselves never change). */
  snapshotTurns(sessionId: string): StoredTurn[] {
    return this.get(sessionId)?.turns?.slice() ?? [];
  }

  /**
   * Search hits newest first. A query whose rarest word starts words of fewer than `walkFrom`
   * documents reads its matches from the word index and sorts them; a more common one walks the
   * caller's sessions newest first and stops at the page (../search-walk.ts), back to the index
   * only if the walk finds the words too rare after all. The index answers from its thread
   * (./word-thread.ts), having taken every change made before it was asked; each answer is
   * read against memory as it is when it comes.
   */
  async search(filter: SearchFilter, after: SearchKey | undefined, limit: number, walkFrom: number): Promise<Page<SearchHit, SearchKey>> {
    const words = this.words;
    if (words === undefined) return { items: [], next: undefined };
    const plan = await words.plan(filter.words, walkFrom);
    if (plan.docs === undefined) {
      const walked = await walkSearch(this.walkSource(filter, words), after, limit, walkBudget(plan.estimate, walkFrom));
      if (walked !== undefined) return walked;
    }
    const docs = plan.docs ?? (await words.find(filter.words));
    const found: { key: SearchKey; e: SessionEntry; turn: StoredTurn | undefined }[] = [];
    for (const doc of docs) {
      const [sid, tid] = docParts(doc);
      const e = this.get(sid);
      if (e === undefined || !searchable(e.session, filter)) continue;
      const turn = tid === undefined ? undefined : e.turn(tid);
      if (tid !== undefined && turn === undefined) continue;
      const key = turn === undefined ? { at: e.session.updatedAt, doc: sid } : { at: turn.createdAt, doc: turn._id };
      if (after !== undefined && !hitBefore(after, key)) continue;
      found.push({ key, e, turn });
    }
    found.sort((a, b) => (hitBefore(a.key, b.key) ? -1 : 1));
    const page = found.slice(0, limit);
    return {
      items: page.map((h) => ({ key: h.key, session: h.e.record(this.cache), turn: h.turn })),
      next: found.length > limit ? page[page.length - 1]?.key : undefined,
    };
  }

  /**
   * The caller's sessions and their turns as a search walks them, words checked by the index:
   * a batch of sessions' names in one question, a batch of turns (the turns the walk asks for,
   * read from memory as it is when it asks) in another.
   */
  private walkSource(filter: SearchFilter, words: WordThread): WalkSource<SessionEntry, SessionEntry, StoredTurn> {
    const lists = this.listsFor(filter);
    const query = filter.words;
    /** Sessions whose names hold the words, among those the walk was given. */
    const named = new Set<SessionEntry>();
    return {
      sessions: async (from) => {
        const taken = merge(lists.map((l) => take(l, from, WALK_SESSIONS))).slice(0, WALK_SESSIONS);
        const items = taken.filter((e) => searchable(e.session, filter));
        const held = await words.holds(items.map((e) => nameDoc(e.session._id)), query);
        items.forEach((e, i) => {
          if (held[i] === 1) named.add(e);
        });
        return { items, next: taken.length === WALK_SESSIONS ? taken[taken.length - 1] : undefined };
      },
      updatedAt: (e) => e.session.updatedAt,
      id: (e) => e.session._id,
      nameMatches: (e) => named.has(e),
      turns: async (from) => {
        const picked = from.map(({ s: e, before, want }) => {
          const list = e.turns ?? EMPTY;
          const end = before === undefined ? list.length : turnsBefore(list, { createdAt: before.at, _id: before.doc });
          const start = Math.max(0, end - want);
          const last = list[start];
          return { e, turns: list.slice(start, end).reverse(), next: start > 0 && last !== undefined ? { at: last.createdAt, doc: last._id } : undefined };
        });
        const docs: string[] = [];
        for (const p of picked) for (const t of p.turns) docs.push(turnDoc(p.e.session._id, t._id));
        const held = await words.holds(docs, query);
        let k = 0;
        return picked.map((p) => {
          const hits: { key: SearchKey; turn: StoredTurn }[] = [];
          for (const t of p.turns) if (held[k++] === 1) hits.push({ key: { at: t.createdAt, doc: t._id }, turn: t });
          return { hits, next: p.next, examined: p.turns.length };
        });
      },
      hit: (e, key, turn) => ({ key, session: e.record(this.cache), turn }),
    };
  }

  /**
   * Feeds the search index from memory (emptied first): after a load, and for `reindex`. It runs
   * while the server serves, a session at a time; searches wait until it is done.
   */
  feedIndex(): Promise<void> {
    const entries = this.entries;
    if (this.words === undefined) return Promise.resolve();
    return this.words.feed(function* (give) {
      for (const [id, e] of entries) {
        if (e.session === ORPHAN) continue;
        give.name(nameDoc(id), e.session.name, false);
        yield;
        // its turns as they are now, each as it is when its turn comes (one deleted meanwhile is
        // not given: its removal went to the index already; one edited is given as it is now)
        const turns = (e.turns ?? EMPTY).slice();
        for (const t of turns) {
          if (entries.get(id) !== e) break;
          const now = e.turn(t._id);
          if (now === undefined) continue;
          give.turn(turnDoc(id, now._id), now.json, false);
          yield;
        }
      }
    });
  }

  /** From now on, changes go to `words` too; it is fed from memory (what it is fed is done when the promise is). */
  useIndex(words: WordThread): Promise<void> {
    this.words = words;
    return this.feedIndex();
  }

  /** Builds the word index again from memory; answers how many documents it holds. */
  async reindex(): Promise<number> {
    if (this.words === undefined) return 0;
    await this.feedIndex();
    return this.words.size();
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
    this.listOf(this.byUser, listKey(e.session.user, e.session.archived)).insert(e);
    this.listOf(this.byProject, listKey(e.session.project, e.session.archived)).insert(e);
    for (const k of tagKeys(e.session.user, e.session)) this.listOf(this.byUserTag, k).insert(e);
    for (const k of tagKeys(e.session.project, e.session)) this.listOf(this.byProjectTag, k).insert(e);
  }

  private unindex(e: SessionEntry): void {
    dropFrom(this.byUser, listKey(e.session.user, e.session.archived), e);
    dropFrom(this.byProject, listKey(e.session.project, e.session.archived), e);
    for (const k of tagKeys(e.session.user, e.session)) dropFrom(this.byUserTag, k, e);
    for (const k of tagKeys(e.session.project, e.session)) dropFrom(this.byProjectTag, k, e);
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

/** A session search may read for this filter (the lists' rules: owner or project, archived, live). */
function searchable(s: ChatSession, f: SearchFilter): boolean {
  if (f.user !== undefined ? s.user !== f.user || (f.project !== undefined && s.project !== f.project) : s.project !== f.project) return false;
  if (f.archived !== 'all' && s.archived !== (f.archived === 'true')) return false;
  return isLive(s, f.live);
}

/** The filters a list applies beyond the lists it reads (the same residual filters on every engine). */
function matcher(filter: SessionFilter): (s: ChatSession) => boolean {
  const { nameContains } = filter;
  const project = filter.user !== undefined ? filter.project : undefined;
  const otherTags = filter.tags?.slice(1) ?? [];
  const { live } = filter;
  return (s) =>
    (live === undefined || isLive(s, live)) &&
    (project === undefined || s.project === project) &&
    (nameContains === undefined || foldForSearch(s.name).includes(nameContains)) &&
    (otherTags.length === 0 || hasTags(s, otherTags));
}

function hasTags(s: ChatSession, tags: readonly string[]): boolean {
  const own = foldedTags(s);
  return tags.every((t) => own.includes(t));
}

/** The key of the list of a user's or a project's sessions with one tag (folded). */
function tagListKey(key: string, tag: string): string {
  return JSON.stringify([key, tag]);
}

/** The keys of the tag lists of a user or a project a session is in: one per tag of it. */
function tagKeys(key: string, s: ChatSession): string[] {
  return foldedTags(s).map((t) => listKey(tagListKey(key, t), s.archived));
}

/** The key of a user's or a project's list of active or archived sessions. */
function listKey(key: string, archived: boolean): string {
  return archived ? `${key}\u0000archived` : key;
}

/** At most `n` items of a list after `from`, in list order. */
function take(list: SortedList<SessionEntry>, from: SessionEntry | undefined, n: number): SessionEntry[] {
  const out: SessionEntry[] = [];
  list.forEachAfter(from, (e) => out.push(e) < n);
  return out;
}

/** Lists in list order merged into one (one list is itself). */
function merge(lists: SessionEntry[][]): SessionEntry[] {
  if (lists.length < 2) return lists[0] ?? [];
  const [a, b] = lists as [SessionEntry[], SessionEntry[]];
  const out: SessionEntry[] = [];
  let i = 0;
  let j = 0;
  while (i < a.length || j < b.length) {
    if (j === b.length || (i < a.length && entryBefore(a[i] as SessionEntry, b[j] as SessionEntry))) out.push(a[i++] as SessionEntry);
    else out.push(b[j++] as SessionEntry);
  }
  return out;
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
  headTurnId: null,
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

/**
 * A page of a list of turns (oldest first) strictly after `after`: at most `limit` turns, ending
 * early once it holds PAGE_BYTE_BUDGET bytes of JSON (at least one turn, whatever its size).
 */
export function pageOf(list: readonly StoredTurn[], after: TurnKey | undefined, limit: number): Page<TurnRecord, TurnKey> {
  let start = 0;
  if (after !== undefined) {
    start = turnsBefore(list, after);
    if (list[start]?._id === after._id && list[start]?.createdAt === after.createdAt) start++;
  }
  let end = start;
  for (let bytes = 0; end < list.length && end - start < limit && (end === start || bytes < PAGE_BYTE_BUDGET); end++) bytes += (list[end] as StoredTurn).bytes;
  const items = list.slice(start, end);
  const last = items[items.length - 1];
  return { items, next: end < list.length && last !== undefined ? { createdAt: last.createdAt, _id: last._id } : undefined };
}

/** UTF-8 bytes of a session's `headTurnId` value in its JSON: null, or a quoted 24-character id. */
function headBytes(head: string | null): number {
  return head === null ? 4 : head.length + 2;
}

/** How many turns of a list (oldest first) come before `key`: where `key` is, or would go. */
function turnsBefore(list: readonly TurnKey[], key: TurnKey): number {
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (turnBefore(list[mid] as TurnKey, key)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** A stand-in entry carrying only a sort key, to search the lists with. */
function keyEntry(key: SessionKey): SessionEntry {
  return new SessionEntry({ ...ORPHAN, _id: key._id, updatedAt: key.updatedAt });
}
