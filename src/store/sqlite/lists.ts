// The sqlite engine's session lists: a list's rows from the index that serves its filter, newest
// first, the residual filters marked on each row, a page cut from them, archived=all merged.
import { PAGE_SCAN_BUDGET, sessionBefore, type SessionKey } from '../../domain/order.js';
import type { Page, SessionFilter, SessionRecord } from '../store.js';
import { SessionRow } from '../session-row.js';
import { sqliteDialect, text, type Row, type SqlValue } from './binding.js';
import { listHalfSql, residualSql } from '../sql.js';
import { Connection } from './connection.js';

/** A session from a row of its JSON and version. */
export const recordOf = (row: Row): SessionRow => new SessionRow(text(row['json']), text(row['version']));

/**
 * The rows of a session list, newest first, from the index that serves its filter. Rows that
 * the residual filters (a project under owner-only access, a name) leave out come back without
 * their JSON, so a page can count what it examined without reading it. With `limit`, at most
 * that many rows, read in one call (one crossing into SQLite instead of one per row).
 */
export function sessionRows(c: Connection, filter: SessionFilter, archived: 0 | 1, after: SessionKey | undefined, limit?: number): Iterable<Row> {
  const params: SqlValue[] = [];
  const d = sqliteDialect(params);
  // the residual's parameters first: it is written before the half's (sqlite's ? are positional)
  const residual = residualSql(d, filter);
  const json = residual === undefined ? 's.json' : `CASE WHEN ${residual} THEN s.json END AS json`;
  // `archived` is written into the text, so the two halves of archived=all are two statements (one statement iterates once at a time)
  const sql = listHalfSql(d, filter, archived === 1, after, `s.id, s.updated_at, s.version, ${json}`);
  if (limit === undefined) return c.prepare(sql).iterate(...params);
  return c.prepare(`${sql} LIMIT ?`).all(...params, limit);
}

/** True when a residual filter other than expiry (a project under owner-only access, a name, a second tag) may leave rows out. */
export function narrowed(filter: SessionFilter): boolean {
  return (filter.user !== undefined && filter.project !== undefined) || filter.nameContains !== undefined || (filter.tags?.length ?? 0) > 1;
}

/**
 * A page from a list's rows: at most `limit` sessions, or fewer when PAGE_SCAN_BUDGET rows were
 * examined; `leftOut` when a residual filter left a row out.
 */
export function pageOfRows(rows: Iterable<Row>, limit: number): { page: Page<SessionRecord, SessionKey>; leftOut: boolean } {
  const items: SessionRecord[] = [];
  let examined = 0;
  let last: SessionKey | undefined;
  let next: SessionKey | undefined;
  let leftOut = false;
  for (const row of rows) {
    if (last !== undefined && (items.length === limit || examined === PAGE_SCAN_BUDGET)) {
      next = last;
      break;
    }
    examined++;
    last = keyOfRow(row);
    if (row['json'] !== null) items.push(recordOf(row));
    else leftOut = true;
  }
  return { page: { items, next }, leftOut };
}

/** Both halves of an `archived=all` list (each served by the index) merged in list order. */
export function* merged(first: Iterable<Row>, second: Iterable<Row>): IterableIterator<Row> {
  const a = first[Symbol.iterator]();
  const b = second[Symbol.iterator]();
  try {
    let x = a.next();
    let y = b.next();
    while (x.done !== true || y.done !== true) {
      if (y.done === true || (x.done !== true && sessionBefore(keyOfRow(x.value), keyOfRow(y.value)))) {
        yield x.value as Row;
        x = a.next();
      } else {
        yield y.value;
        y = b.next();
      }
    }
  } finally {
    a.return?.();
    b.return?.();
  }
}

export function keyOfRow(row: Row): SessionKey {
  return { updatedAt: text(row['updated_at']), _id: text(row['id']) };
}

export function listRows(c: Connection, filter: SessionFilter, after: SessionKey | undefined, limit?: number): Iterable<Row> {
  if (filter.archived === 'all') return merged(sessionRows(c, filter, 0, after, limit), sessionRows(c, filter, 1, after, limit));
  return sessionRows(c, filter, filter.archived === 'true' ? 1 : 0, after, limit);
}
