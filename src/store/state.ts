// The in-memory image of the data: an entry per session (the session, its JSON once
// serialized, its turns), and per-user and per-project lists kept in list order. Any store
// that serves reads from memory keeps one; it knows nothing about files.
import * as crypto from 'node:crypto';
import { chatSession, type ChatSession } from '../domain/records.js';
import { SortedList } from './sorted-list.js';
import type { SessionFilter, SessionKey, SessionRecord, Slice, StoredTurn, TurnKey } from './store.js';

/** True when a comes before b in session lists (updatedAt desc, then _id desc). */
function sessionBefore(a: SessionKey, b: SessionKey): boolean {
  return a.updatedAt > b.updatedAt || (a.updatedAt === b.updatedAt && a._id > b._id);
}

/** True when a comes before b in turn lists (createdAt asc, then _id asc). */
export function turnBefore(a: TurnKey, b: TurnKey): boolean {
  return a.createdAt < b.createdAt || (a.createdAt === b.createdAt && a._id < b._id);
}

/**
 * The version tag of a session: a digest of its JSON and of its newest turn. It follows the
 * state, not the clock, so any change (a field, a new turn) gives a new tag even within one
 * millisecond, and the same state gives the same tag after a restart or a compaction.
 */
export function versionOf(sessionJson: string, lastTurn: TurnKey | undefined): string {
  const text = lastTurn === undefined ? sessionJson : `${sessionJson}\n${lastTurn.createdAt}\n${lastTurn._id}`;
  return base64url22(digest(text));
}

type OneShotHash = (algorithm: string, data: string, encoding: 'buffer') => Buffer;
const oneShot = (crypto as { hash?: OneShotHash }).hash;
/** SHA-256: the one-shot crypto.hash where the runtime has it (20.12+), else a Hash object. */
const digest: (text: string) => Buffer = oneShot !== undefined ? (text) => oneShot('sha256', text, 'buffer') : (text) => crypto.createHash('sha256').update(text).digest();

const B64URL = Buffer.from('ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_', 'latin1');
const tag = Buffer.alloc(22);
/**
 * The first 22 characters of the base64url form of `d` (132 bits), as one flat string: slicing
 * the 43-character form would keep both strings alive in every entry.
 */
function base64url22(d: Buffer): string {
  let o = 0;
  for (let i = 0; i < 15; i += 3) {
    const n = ((d[i] as number) << 16) | ((d[i + 1] as number) << 8) | (d[i + 2] as number);
    tag[o++] = B64URL[n >>> 18] as number;
    tag[o++] = B64URL[(n >>> 12) & 63] as number;
    tag[o++] = B64URL[(n >>> 6) & 63] as number;
    tag[o++] = B64URL[n & 63] as number;
  }
  const n = ((d[15] as number) << 16) | ((d[16] as number) << 8);
  tag[o++] = B64URL[n >>> 18] as number;
  tag[o] = B64URL[(n >>> 12) & 63] as number;
  return tag.toString('latin1');
}

/**
 * One session as held in memory. Its JSON is made on the first read of a version and kept for
 * the reads after it. A writer does not leave the JSON it made: most sessions written are not
 * read again soon, and every kept string is 300 bytes more for the garbage collector to move
 * into the old generation (about 1 µs of a create, measured). It leaves the version, which the
 * writer's answer needs anyway. Entries change in place when the session changes: read them
 * synchronously.
 */
export class SessionEntry implements SessionRecord {
  private cachedJson: string | undefined;
  private cachedVersion: string | undefined;
  turns: StoredTurn[] | undefined;
  /** Bytes of the file records that hold this session's current state and its turns (for stores that keep a file). */
  putBytes = 0;
  turnBytes = 0;

  constructor(public session: ChatSession) {}

  get json(): string {
    return (this.cachedJson ??= JSON.stringify(this.session));
  }

  cachedJsonOrUndefined(): string | undefined {
    return this.cachedJson;
  }

  get version(): string {
    return (this.cachedVersion ??= versionOf(this.json, this.lastTurn));
  }

  get lastTurn(): StoredTurn | undefined {
    return this.turns?.[this.turns.length - 1];
  }

  /** A writer's new state: its version from the JSON the writer made, the JSON itself not kept (made again on first read). */
  wrote(json: string): string {
    return (this.cachedVersion = versionOf(json, this.lastTurn));
  }

  /** A turn was added: the version moves. */
  turnsChanged(): void {
    this.cachedVersion = undefined;
  }

  /** Sort key of the lists: the session's own fields. */
  get updatedAt(): string {
    return this.session.updatedAt;
  }
  get _id(): string {
    return this.session._id;
  }

  replace(session: ChatSession): void {
    this.session = session;
    this.cachedJson = undefined;
    this.cachedVersion = undefined;
  }
}

export interface SnapshotItem {
  readonly session: ChatSession;
  readonly json: string | undefined;
  readonly turns: readonly StoredTurn[];
}

const entryBefore = (a: SessionEntry, b: SessionEntry): boolean => sessionBefore(a.session, b.session);
const sameEntry = (a: SessionEntry, b: SessionEntry): boolean => a === b;

export class MemoryState {
  readonly entries = new Map<string, SessionEntry>();
  private readonly byUser = new Map<string, SortedList<SessionEntry>>();
  private readonly byProject = new Map<string, SortedList<SessionEntry>>();
  private turnTotal = 0;
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
  }

  /** Builds the list indexes after a bulk load; drops turns whose session does not exist. */
  finishLoad(): { orphanTurns: number } {
    this.loading = false;
    const byUser = new Map<string, SessionEntry[]>();
    const byProject = new Map<string, SessionEntry[]>();
    let orphanTurns = 0;
    for (const [id, e] of this.entries) {
      if (e.session === ORPHAN) {
        orphanTurns += e.turns?.length ?? 0;
        this.turnTotal -= e.turns?.length ?? 0;
        this.entries.delete(id);
        continue;
      }
      // a turn replayed before its session did not move it: apply that now
      const lastAt = e.turns?.[e.turns.length - 1]?.createdAt;
      if (lastAt !== undefined && lastAt > e.session.updatedAt) e.replace(chatSession({ ...e.session, updatedAt: lastAt }));
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

  /** Puts a session's new state. */
  putSession(s: ChatSession): SessionEntry {
    const e = this.entries.get(s._id);
    if (e === undefined) return this.insertNew(s);
    if (this.loading) {
      e.replace(s);
      return e;
    }
    if (e.session !== ORPHAN) this.unindex(e);
    e.replace(s);
    this.index(e);
    return e;
  }

  /** Adds a session the writer has checked is not there (a create): one lookup in the table instead of two. */
  insertNew(s: ChatSession): SessionEntry {
    const e = new SessionEntry(s);
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
    if (!this.loading && e.session !== ORPHAN) this.unindex(e);
    return e;
  }

  /**
   * Adds a turn and raises its session's updatedAt to the turn's createdAt (what appending a
   * turn does). While loading, a turn may come before its session; it waits on a placeholder.
   */
  addTurn(sessionId: string, t: StoredTurn): SessionEntry {
    let e = this.entries.get(sessionId);
    if (e === undefined) {
      e = new SessionEntry(ORPHAN);
      this.entries.set(sessionId, e);
    }
    const list = (e.turns ??= []);
    const last = list[list.length - 1];
    if (last === undefined || turnBefore(last, t)) list.push(t);
    else list.splice(turnsBefore(list, t), 0, t);
    this.turnTotal++;
    e.turnsChanged();
    if (e.session !== ORPHAN && t.createdAt > e.session.updatedAt) {
      this.putSession(chatSession({ ...e.session, updatedAt: t.createdAt }));
    }
    return e;
  }

  /** Removes one turn (import replacing it with the backup's version); false when it is not there. */
  removeTurn(sessionId: string, turnId: string): boolean {
    const e = this.entries.get(sessionId);
    const i = e?.turns?.findIndex((t) => t._id === turnId) ?? -1;
    if (e === undefined || i < 0) return false;
    e.turns?.splice(i, 1);
    this.turnTotal--;
    e.turnsChanged();
    return true;
  }

  listSessions(filter: SessionFilter, after: SessionKey | undefined, limit: number | undefined): Slice<SessionEntry> {
    const list = filter.project !== undefined ? this.byProject.get(filter.project) : filter.user !== undefined ? this.byUser.get(filter.user) : undefined;
    if (list === undefined) return { items: [], more: false };
    const userFilter = filter.project !== undefined ? filter.user : undefined;
    const { archived, nameContains } = filter;
    const want = limit === undefined ? Infinity : limit;
    const out: SessionEntry[] = [];
    let more = false;
    list.forEachAfter(after === undefined ? undefined : keyEntry(after), (e) => {
      const s = e.session;
      if (archived === 'false' ? s.archived : archived === 'true' ? !s.archived : false) return true;
      if (userFilter !== undefined && s.user !== userFilter) return true;
      if (nameContains !== undefined && !s.name.toLowerCase().includes(nameContains)) return true;
      if (out.length === want) {
        more = true;
        return false;
      }
      out.push(e);
      return true;
    });
    return { items: out, more };
  }

  listTurns(sessionId: string, after: TurnKey | undefined, limit: number | undefined): Slice<StoredTurn> {
    const list = this.get(sessionId)?.turns;
    if (list === undefined) return { items: [], more: false };
    let start = 0;
    if (after !== undefined) {
      start = turnsBefore(list, after);
      if (list[start]?._id === after._id && list[start]?.createdAt === after.createdAt) start++;
    }
    const end = limit === undefined ? list.length : Math.min(list.length, start + limit);
    return { items: start === 0 && end === list.length ? list.slice() : list.slice(start, end), more: end < list.length };
  }

  /**
   * Every live session with its turns as of now, for compaction and export: references to
   * immutable records, so later writes do not change it. JSON is included only where cached.
   */
  snapshot(): SnapshotItem[] {
    const out: SnapshotItem[] = [];
    for (const e of this.entries.values()) {
      if (e.session === ORPHAN) continue;
      out.push({ session: e.session, json: e.cachedJsonOrUndefined(), turns: e.turns === undefined ? EMPTY : e.turns.slice() });
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

