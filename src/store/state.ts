// The in-memory image of the data: sessions by id, per-user and per-project lists kept in
// list order, and each session's turns. Every store implementation that serves reads from
// memory keeps one; it knows nothing about files.
import type { ChatSession, Turn } from '../domain/records.js';
import type { SessionFilter, SessionKey, Slice, TurnKey } from './store.js';

/** True when a comes before b in session lists (updatedAt desc, then _id desc). */
function sessionBefore(a: SessionKey, b: SessionKey): boolean {
  return a.updatedAt > b.updatedAt || (a.updatedAt === b.updatedAt && a._id > b._id);
}

/** True when a comes before b in turn lists (createdAt asc, then _id asc). */
function turnBefore(a: TurnKey, b: TurnKey): boolean {
  return a.createdAt < b.createdAt || (a.createdAt === b.createdAt && a._id < b._id);
}

/** Index of the first element of a sorted array that does not come before `key`. */
function lowerBound<T, K>(items: readonly T[], key: K, before: (a: T, b: K) => boolean): number {
  let lo = 0;
  let hi = items.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (before(items[mid] as T, key)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Sessions of one user or one project, in list order. */
class SessionList {
  items: ChatSession[] = [];

  insert(s: ChatSession): void {
    const i = lowerBound(this.items, s, sessionBefore);
    if (i === 0) this.items.unshift(s); // the common case: a change makes a session the newest
    else this.items.splice(i, 0, s);
  }

  remove(s: ChatSession): void {
    const i = lowerBound(this.items, s, sessionBefore);
    if (this.items[i]?._id === s._id) this.items.splice(i, 1);
  }

  /** Position of the first session after `key` in list order. */
  after(key: SessionKey): number {
    const i = lowerBound(this.items, key, sessionBefore);
    return this.items[i]?._id === key._id && this.items[i]?.updatedAt === key.updatedAt ? i + 1 : i;
  }
}

export class MemoryState {
  readonly sessions = new Map<string, ChatSession>();
  private readonly byUser = new Map<string, SessionList>();
  private readonly byProject = new Map<string, SessionList>();
  private readonly turns = new Map<string, Turn[]>();
  private turnTotal = 0;
  /** While loading, indexes are left alone and built once by `finishLoad`. */
  private loading = false;

  get turnCount(): number {
    return this.turnTotal;
  }

  beginLoad(): void {
    this.loading = true;
  }

  /** Builds the list indexes after a bulk load; drops turns whose session does not exist. */
  finishLoad(): { orphanTurns: number } {
    this.loading = false;
    for (const s of this.sessions.values()) {
      listFor(this.byUser, s.user).items.push(s);
      listFor(this.byProject, s.project).items.push(s);
    }
    const sort = (a: ChatSession, b: ChatSession): number => (sessionBefore(a, b) ? -1 : 1);
    for (const l of this.byUser.values()) l.items.sort(sort);
    for (const l of this.byProject.values()) l.items.sort(sort);
    let orphanTurns = 0;
    for (const [id, list] of this.turns) {
      if (!this.sessions.has(id)) {
        orphanTurns += list.length;
        this.turnTotal -= list.length;
        this.turns.delete(id);
      }
    }
    return { orphanTurns };
  }

  putSession(s: ChatSession): void {
    const old = this.sessions.get(s._id);
    this.sessions.set(s._id, s);
    if (this.loading) return;
    if (old !== undefined) {
      this.byUser.get(old.user)?.remove(old);
      this.byProject.get(old.project)?.remove(old);
    }
    listFor(this.byUser, s.user).insert(s);
    listFor(this.byProject, s.project).insert(s);
  }

  /** Removes a session and its turns; returns false when there was none. */
  deleteSession(id: string): boolean {
    const old = this.sessions.get(id);
    const turns = this.turns.get(id);
    if (turns !== undefined) {
      this.turnTotal -= turns.length;
      this.turns.delete(id);
    }
    if (old === undefined) return false;
    this.sessions.delete(id);
    if (!this.loading) {
      dropFrom(this.byUser, old.user, old);
      dropFrom(this.byProject, old.project, old);
    }
    return true;
  }

  addTurn(t: Turn): void {
    let list = this.turns.get(t.session);
    if (list === undefined) {
      list = [];
      this.turns.set(t.session, list);
    }
    const last = list[list.length - 1];
    if (last === undefined || turnBefore(last, t)) list.push(t);
    else list.splice(lowerBound(list, t, turnBefore), 0, t);
    this.turnTotal++;
  }

  /** Newest turn's createdAt of a session. */
  lastTurnAt(sessionId: string): string | undefined {
    const list = this.turns.get(sessionId);
    return list?.[list.length - 1]?.createdAt;
  }

  turnsOf(sessionId: string): readonly Turn[] {
    return this.turns.get(sessionId) ?? EMPTY;
  }

  listSessions(filter: SessionFilter, after: SessionKey | undefined, limit: number | undefined): Slice<ChatSession> {
    const list = filter.project !== undefined ? this.byProject.get(filter.project) : filter.user !== undefined ? this.byUser.get(filter.user) : undefined;
    if (list === undefined) return { items: [], more: false };
    const items = list.items;
    const userFilter = filter.project !== undefined ? filter.user : undefined;
    const { archived, nameContains } = filter;
    const want = limit === undefined ? Infinity : limit;
    const out: ChatSession[] = [];
    for (let i = after === undefined ? 0 : list.after(after); i < items.length; i++) {
      const s = items[i] as ChatSession;
      if (archived === 'false' ? s.archived : archived === 'true' ? !s.archived : false) continue;
      if (userFilter !== undefined && s.user !== userFilter) continue;
      if (nameContains !== undefined && !s.name.toLowerCase().includes(nameContains)) continue;
      if (out.length === want) return { items: out, more: true };
      out.push(s);
    }
    return { items: out, more: false };
  }

  listTurns(sessionId: string, after: TurnKey | undefined, limit: number | undefined): Slice<Turn> {
    const list = this.turns.get(sessionId);
    if (list === undefined) return { items: [], more: false };
    let start = 0;
    if (after !== undefined) {
      start = lowerBound(list, after, turnBefore);
      if (list[start]?._id === after._id && list[start]?.createdAt === after.createdAt) start++;
    }
    const end = limit === undefined ? list.length : Math.min(list.length, start + limit);
    return { items: list.slice(start, end), more: end < list.length };
  }

  /** Every live session and the turns of each, for compaction and export (references, no copies). */
  snapshot(): { sessions: ChatSession[]; turns: (readonly Turn[])[] } {
    const sessions = Array.from(this.sessions.values());
    const turns: (readonly Turn[])[] = [];
    for (const s of sessions) {
      const list = this.turns.get(s._id);
      turns.push(list === undefined ? EMPTY : list.slice());
    }
    return { sessions, turns };
  }
}

const EMPTY: readonly Turn[] = [];

function listFor(map: Map<string, SessionList>, key: string): SessionList {
  let l = map.get(key);
  if (l === undefined) {
    l = new SessionList();
    map.set(key, l);
  }
  return l;
}

function dropFrom(map: Map<string, SessionList>, key: string, s: ChatSession): void {
  const l = map.get(key);
  if (l === undefined) return;
  l.remove(s);
  if (l.items.length === 0) map.delete(key);
}
