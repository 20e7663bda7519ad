// The order of the lists and the keys that page through them, the same on every engine:
// session lists by updatedAt newest first, ties by _id descending; turns by createdAt oldest
// first, ties by _id ascending. A page resumes strictly after a key, so items that share a
// timestamp are never skipped or repeated. Timestamps are ISO 8601 UTC with milliseconds and
// ids are lowercase hex of one length, so plain string comparison is time order.

/** Where a session stands in its lists. */
export interface SessionKey {
  readonly updatedAt: string;
  readonly _id: string;
}

/** Where a turn stands in its session's list. */
export interface TurnKey {
  readonly createdAt: string;
  readonly _id: string;
}

/** True when a comes before b in session lists. */
export function sessionBefore(a: SessionKey, b: SessionKey): boolean {
  return a.updatedAt > b.updatedAt || (a.updatedAt === b.updatedAt && a._id > b._id);
}

/** True when a comes before b in turn lists. */
export function turnBefore(a: TurnKey, b: TurnKey): boolean {
  return a.createdAt < b.createdAt || (a.createdAt === b.createdAt && a._id < b._id);
}

/**
 * How many items one page request may examine, whatever its filters (archived, a project seen
 * under owner-only access, a name search). A page that reaches it before filling up ends early
 * with a cursor that resumes where it stopped, so no request costs more than a bounded amount of
 * work however many of the list's items the filters leave out.
 */
export const PAGE_SCAN_BUDGET = 4096;

/** Where a search hit stands: newest first by `at`, ties by `doc` descending (src/store/store.ts SearchKey). */
export interface HitKey {
  readonly at: string;
  readonly doc: string;
}

/** True when a comes before b in search answers. */
export function hitBefore(a: HitKey, b: HitKey): boolean {
  return a.at > b.at || (a.at === b.at && a.doc > b.doc);
}
