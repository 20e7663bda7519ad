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
 * work however many of the list's items the filters leave out. 1024 rows are about 3 ms of the
 * main thread on sqlite (each examined row is a table lookup), a few hundred µs on the journal.
 */
export const PAGE_SCAN_BUDGET = 1024;

/**
 * How many bytes of JSON one page of turns may hold (at least one turn, whatever its size). A
 * page of a thousand large turns would otherwise be read into memory whole for one request; one
 * that reaches it ends early with a cursor, as a page ending at PAGE_SCAN_BUDGET does.
 */
export const PAGE_BYTE_BUDGET = 1024 * 1024;

/** The items a whole list is read in at a time: the store yields to the event loop between chunks. */
export const SCAN_CHUNK = 1024;
/** ...and a chunk of turns ends early once it holds this many bytes of JSON. */
export const SCAN_CHUNK_BYTES = 1024 * 1024;
