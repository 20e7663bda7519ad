// The SQL of session lists on PostgreSQL. Each list is read from the index that keeps it in
// order (a user's or a project's, per archived value); `archived=all` merges the two ordered
// halves. Filters the index does not serve (a project under owner-only access, a name) are
// either applied (whole lists) or marked on each examined row (pages, which stop at the scan
// budget, so a filter that matches little cannot make a page scan the whole list).
import type { SessionKey } from '../../domain/order.js';
import type { SessionFilter } from '../store.js';
import { listHalfSql, residualSql } from '../sql.js';
import { postgresDialect, sqlText } from './values.js';

export interface Sql {
  readonly text: string;
  readonly params: string[];
}

/** Adds a parameter (as the database holds text, see sqlText) and returns its placeholder. */
function param(params: string[], value: string): string {
  params.push(sqlText(value));
  return `$${params.length}`;
}

/** The rows of the list in order, from `after` on: `archived=all` as two index-ordered halves merged. */
function ordered(S: string, filter: SessionFilter, after: SessionKey | undefined, params: string[], columns: string, limit: string): string {
  const d = postgresDialect(S, params);
  const half = (archived: boolean): string => `${listHalfSql(d, filter, archived, after, columns)} LIMIT ${limit}`;
  if (filter.archived !== 'all') return half(filter.archived === 'true');
  return `(${half(false)}) UNION ALL (${half(true)}) ORDER BY updated_at DESC, id DESC LIMIT ${limit}`;
}

/**
 * The next `limit` rows of a list from `after` on (a chunk of a whole list), each with its JSON
 * and version only when it matches all the list's filters: a filter that matches little cannot
 * make one query scan the whole list.
 */
export function scanSql(S: string, filter: SessionFilter, after: SessionKey | undefined, limit: number): Sql {
  const params: string[] = [];
  const where = residualSql(postgresDialect(S, params), filter);
  const columns = where === undefined ? 's.id, s.updated_at, s.json, s.version' : `s.id, s.updated_at, CASE WHEN ${where} THEN s.json END AS json, CASE WHEN ${where} THEN s.version END AS version`;
  return { text: ordered(S, filter, after, params, columns, param(params, String(limit))), params };
}

/**
 * One page: the rows examined from `after` on, at most `budget` + 1 of them, each with its JSON
 * only when it matches; cut after the first row past the `limit`-th match. With no residual
 * filter that is just the first `limit` + 1 rows.
 */
export function pageSql(S: string, filter: SessionFilter, after: SessionKey | undefined, limit: number, budget: number): Sql {
  const params: string[] = [];
  const where = residualSql(postgresDialect(S, params), filter);
  if (where === undefined) return { text: ordered(S, filter, after, params, 's.id, s.updated_at, s.json, s.version', param(params, String(limit + 1))), params };
  const scanned = ordered(S, filter, after, params, `s.id, s.updated_at, s.json, s.version, (${where}) AS hit`, param(params, String(budget + 1)));
  const lim = param(params, String(limit));
  return {
    text:
      `SELECT id, updated_at, CASE WHEN hit THEN json END AS json, CASE WHEN hit THEN version END AS version FROM (` +
      `SELECT *, coalesce(count(*) FILTER (WHERE hit) OVER (ORDER BY updated_at DESC, id DESC ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before FROM (${scanned}) scanned` +
      `) counted WHERE before <= ${lim} ORDER BY updated_at DESC, id DESC`,
    params,
  };
}
