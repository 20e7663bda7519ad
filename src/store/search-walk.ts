// Search by walking the caller's sessions, for a query too common to read from its index whole.
// An index answers "which documents hold these words" in no order, so a common word costs every
// match it has, keyed and sorted, before the newest page can be cut. But hits are read newest
// first (a turn by its createdAt, a name by its session's updatedAt), and a turn is never newer
// than its session's updatedAt (a turn raises it: the writer, an import and a fork all keep
// this, src/domain/records.ts raisedByTurn). So the sessions the caller may list, read newest
// first as their lists are, with each session's turns read newest first and merged as they come,
// give the hits in order: a session need not be opened before the newest hit still waiting is
// newer than everything it may hold. A common word then costs about the page it answers.
//
// The walk gives up (answers undefined) past a budget of documents examined, so a word that
// turns out to be rare in the caller's sessions, or a deep page whose sessions were all updated
// since, goes back to the index; the engine decides which plan a query takes (SEARCH_WALK_FROM).
import { hitBefore } from '../domain/order.js';
import type { Page, SearchHit, SearchKey } from './store.js';

/** Sessions opened at once when the walk first needs more (one query for all of them on PostgreSQL), doubled each time after. */
export const OPEN_GROUP = 8;

/** Documents (sessions, names, turns) a walk examines before it gives the query back to the index. */
export const WALK_BUDGET = 20_000;

/**
 * How many documents a walk may examine before it gives the query back to the index: about as
 * many as the index would read for it (the engine's estimate of its matches, `estimate`), so a
 * word that turns out too rare among the caller's newest turns costs at most about twice what
 * the index alone would; never more than WALK_BUDGET. With `walkFrom` 1 (SEARCH_WALK_FROM=1,
 * every query walks) the walk goes as far as WALK_BUDGET, whatever the estimate.
 */
export function walkBudget(estimate: number, walkFrom: number): number {
  return walkFrom <= 1 ? WALK_BUDGET : Math.min(WALK_BUDGET, Math.max(estimate, walkFrom));
}

/**
 * The (createdAt, id) a session's turns are read strictly before, newest first: `before`, or
 * from after every createdAt when the walk starts at the session's newest turn.
 */
export function keysetFrom(before: SearchKey | undefined): [string, string] {
  return before === undefined ? ['~', ''] : [before.at, before.doc];
}

/** Some of one session's hits, newest first, and where to go on from. */
export interface TurnBatch<T> {
  readonly hits: readonly { readonly key: SearchKey; readonly turn: T }[];
  /** Where the next batch starts (strictly before it); undefined when the session has no more. */
  readonly next: SearchKey | undefined;
  /** Turns examined to find these (the budget's unit). */
  readonly examined: number;
}

/** Where to read a session's turns from, and how many. */
export interface TurnsFrom<S> {
  readonly s: S;
  readonly before: SearchKey | undefined;
  readonly want: number;
}

/**
 * Turns (or hits) a session's first batch asks for, doubled with each batch after, up to the
 * most: most sessions a page opens give it one hit or none (their newest turns are all a busy
 * page needs), a session that keeps giving hits is read in longer strides.
 */
export const FIRST_BATCH = 4;
export const MOST_BATCH = 64;

/** Some sessions in list order, and where the next call starts (undefined: no more). */
export interface SessionBatch<S, C> {
  readonly items: readonly S[];
  readonly next: C | undefined;
}

/** An engine reading in the request's own turn (the journal, sqlite) answers at once; PostgreSQL answers later. */
type Step<R> = R | Promise<R>;

/** What an engine gives the walk: the caller's sessions in list order, and their turns that hold the words. */
export interface WalkSource<S, C, T> {
  /** The sessions the search may read, newest first, after `after` (the `next` of the call before). */
  sessions(after: C | undefined): Step<SessionBatch<S, C>>;
  updatedAt(s: S): string;
  id(s: S): string;
  /** Whether the session's name holds every query word. */
  nameMatches(s: S): boolean;
  /**
   * For each session, its next hits strictly before `before` (from its newest when undefined),
   * newest first: those among its next `want` turns (the journal, sqlite), or its next `want`
   * hits (PostgreSQL, which checks the words itself).
   */
  turns(from: readonly TurnsFrom<S>[]): Step<readonly TurnBatch<T>[]>;
  /** The answer's hit. */
  hit(s: S, key: SearchKey, turn: T | undefined): SearchHit;
}

/** A session's hits waiting in the merge: the newest first, then the rest of its batch; or none in hand and where its next batch starts. */
interface Cursor<S, T> {
  readonly s: S;
  hits: readonly { readonly key: SearchKey; readonly turn: T | undefined }[];
  i: number;
  next: SearchKey | undefined;
  /** What its next batch asks for. */
  want: number;
}

/**
 * Up to `limit` hits strictly after `after`, in hit order, with `next` when there are more;
 * undefined when the walk went past `budget` documents (the caller asks the index instead).
 * For a source that answers at once: the walk runs in the request's turn, with no other work
 * between its reads (the journal's answer is one moment's, as its other reads are).
 */
export function walkSearchNow<S, C, T>(source: WalkSource<S, C, T>, after: SearchKey | undefined, limit: number, budget = WALK_BUDGET): Page<SearchHit, SearchKey> | undefined {
  const steps = walk(source, after, limit, budget);
  let r = steps.next();
  while (r.done !== true) r = steps.next(r.value);
  return r.value;
}

/** walkSearchNow for a source whose reads are awaited. */
export async function walkSearch<S, C, T>(source: WalkSource<S, C, T>, after: SearchKey | undefined, limit: number, budget = WALK_BUDGET): Promise<Page<SearchHit, SearchKey> | undefined> {
  const steps = walk(source, after, limit, budget);
  let r = steps.next();
  while (r.done !== true) r = steps.next(await r.value);
  return r.value;
}

/**
 * The walk, one read at a time: it yields each read of the source and is resumed with what the
 * read answered (the drivers above await it or not), so one algorithm serves both kinds of engine.
 */
function* walk<S, C, T>(source: WalkSource<S, C, T>, after: SearchKey | undefined, limit: number, budget: number): Generator<unknown, Page<SearchHit, SearchKey> | undefined, unknown> {
  const heap = new CursorHeap<S, T>();
  let waiting: readonly S[] = [];
  let w = 0;
  let sessionsAfter: C | undefined;
  let sessionsDone = false;
  let examined = 0;
  let groupSize = OPEN_GROUP;
  // each `yield` hands back what the read it yielded answered: the casts name that read's type
  const turnsOf = function* (from: readonly TurnsFrom<S>[]): Generator<unknown, readonly TurnBatch<T>[], unknown> {
    return (yield source.turns(from)) as readonly TurnBatch<T>[];
  };
  const out: SearchHit[] = [];
  for (;;) {
    // open every session that may hold a hit newer than the newest one waiting: a session's hits
    // are all at or before (its updatedAt, any doc), and the sessions come newest first
    for (;;) {
      if (w === waiting.length) {
        if (sessionsDone) break;
        const got = (yield source.sessions(sessionsAfter)) as SessionBatch<S, C>;
        waiting = got.items;
        w = 0;
        sessionsAfter = got.next;
        sessionsDone = got.next === undefined;
        examined += got.items.length + 1;
        if (examined > budget) return undefined;
        continue;
      }
      const top = heap.peek();
      if (top !== undefined && source.updatedAt(waiting[w] as S) < top.at) break;
      const group: S[] = [];
      while (w < waiting.length && group.length < groupSize && (top === undefined || source.updatedAt(waiting[w] as S) >= top.at)) group.push(waiting[w++] as S);
      for (const s of group) {
        const key = { at: source.updatedAt(s), doc: source.id(s) };
        if ((after === undefined || hitBefore(after, key)) && source.nameMatches(s)) heap.push({ s, hits: [{ key, turn: undefined }], i: 0, next: undefined, want: 0 });
      }
      // a page that keeps opening sessions opens more at a time (fewer queries on PostgreSQL)
      groupSize = Math.min(MOST_BATCH, groupSize * 2);
      const batches = yield* turnsOf(group.map((s) => ({ s, before: after, want: FIRST_BATCH })));
      for (let k = 0; k < batches.length; k++) {
        const b = batches[k] as TurnBatch<T>;
        examined += b.examined;
        const c: Cursor<S, T> = { s: group[k] as S, hits: b.hits, i: 0, next: b.next, want: FIRST_BATCH };
        if (c.hits.length > 0 || c.next !== undefined) heap.push(c);
      }
      if (examined > budget) return undefined;
    }
    // nothing unopened can hold a hit newer than the top
    const c = heap.pop();
    if (c === undefined) break;
    if (c.i === c.hits.length) {
      // a session with no hit in hand ranks by where its next batch starts: read only now, when
      // nothing waiting is newer than what that batch may hold
      c.want = Math.min(MOST_BATCH, c.want * 2);
      const [b] = (yield* turnsOf([{ s: c.s, before: c.next, want: c.want }])) as [TurnBatch<T>];
      examined += b.examined;
      if (examined > budget) return undefined;
      c.hits = b.hits;
      c.i = 0;
      c.next = b.next;
      if (c.hits.length > 0 || c.next !== undefined) heap.push(c);
      continue;
    }
    const h = c.hits[c.i++] as { key: SearchKey; turn: T | undefined };
    out.push(source.hit(c.s, h.key, h.turn));
    if (out.length > limit) break;
    if (c.i < c.hits.length || c.next !== undefined) heap.push(c);
  }
  const items = out.slice(0, limit);
  return { items, next: out.length > limit ? items[items.length - 1]?.key : undefined };
}

/** A max-heap of cursors by their next hit (the newest first), or by where their next batch starts when they hold none. */
class CursorHeap<S, T> {
  private readonly items: Cursor<S, T>[] = [];

  /** The key of the newest hit waiting (undefined: none). */
  peek(): SearchKey | undefined {
    const c = this.items[0];
    return c === undefined ? undefined : keyOf(c);
  }

  push(c: Cursor<S, T>): void {
    const a = this.items;
    a.push(c);
    let i = a.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!hitBefore(keyOf(a[i] as Cursor<S, T>), keyOf(a[p] as Cursor<S, T>))) break;
      [a[i], a[p]] = [a[p] as Cursor<S, T>, a[i] as Cursor<S, T>];
      i = p;
    }
  }

  pop(): Cursor<S, T> | undefined {
    const a = this.items;
    const top = a[0];
    if (top === undefined) return undefined;
    const last = a.pop() as Cursor<S, T>;
    if (a.length > 0) {
      a[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < a.length && hitBefore(keyOf(a[l] as Cursor<S, T>), keyOf(a[m] as Cursor<S, T>))) m = l;
        if (r < a.length && hitBefore(keyOf(a[r] as Cursor<S, T>), keyOf(a[m] as Cursor<S, T>))) m = r;
        if (m === i) break;
        [a[i], a[m]] = [a[m] as Cursor<S, T>, a[i] as Cursor<S, T>];
        i = m;
      }
    }
    return top;
  }
}

/** Where a cursor ranks: its next hit, or where its next batch starts (everything it may still hold is before that). */
function keyOf<S, T>(c: Cursor<S, T>): SearchKey {
  return c.i < c.hits.length ? (c.hits[c.i] as { key: SearchKey }).key : (c.next as SearchKey);
}
