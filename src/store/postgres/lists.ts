// The SQL of session lists on PostgreSQL. Each list is read from the index that keeps it in
// order (a user's or a project's, per archived value); `archived=all` merges the two ordered
// halves. Filters the index does not serve (a project under owner-only access, a name) are
// either applied (whole lists) or marked on each examined row (pages, which stop at the scan
// budget, so a filter that matches little cannot make a page scan the whole list).
import type { SessionKey } from '../../domain/order.js';
import type { SessionFilter } from '../store.js';
import { sqlText } from './values.js';

export interface Sql {
  readonly text: string;
  readonly params: string[];
}

/** Adds a parameter (as the database holds text, see sqlText) and returns its placeholder. */
function param(params: string[], value: string): string {
  params.push(sqlText(value));
  return `$${params.length}`;
}

/** The residual filters of a list, as one SQL condition (undefined when there are none). */
function residual(filter: SessionFilter, params: string[]): string | undefined {
  const parts: string[] = [];
  if (filter.user !== undefined && filter.project !== undefined) parts.push(`project = ${param(params, filter.project)}`);
  if (filter.nameContains !== undefined) parts.push(`strpos(name_folded, ${param(params, filter.nameContains)}) > 0`);
  return parts.length === 0 ? undefined : parts.join(' AND ');
}

/** The rows of the list in order, from `after` on: `archived=all` as two index-ordered halves merged. */
function ordered(S: string, filter: SessionFilter, after: SessionKey | undefined, params: string[], columns: string, where: string | undefined, limit: string): string {
  const byOwner = filter.user !== undefined;
  const key = param(params, (byOwner ? filter.user : filter.project) as string);
  const keyset = after === undefined ? '' : ` AND (updated_at, id) < (${param(params, after.updatedAt)}, ${param(params, after._id)})`;
  const extra = where === undefined ? '' : ` AND ${where}`;
  const half = (archived: boolean): string =>
    `SELECT ${columns} FROM ${S}.sessions WHERE ${byOwner ? 'owner' : 'project'} = ${key} AND archived = ${archived}${keyset}${extra} ORDER BY updated_at DESC, id DESC LIMIT ${limit}`;
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
  const where = residual(filter, params);
  const columns = where === undefined ? 'id, updated_at, json, version' : `id, updated_at, CASE WHEN ${where} THEN json END AS json, CASE WHEN ${where} THEN version END AS version`;
  return { text: ordered(S, filter, after, params, columns, undefined, param(params, String(limit))), params };
}

/**
 * One page: the rows examined from `after` on, at most `budget` + 1 of them, each with its JSON
 * only when it matches; cut after the first row past the `limit`-th match. With no residual
 * filter that is just the first `limit` + 1 rows.
 */
export function pageSql(S: string, filter: SessionFilter, after: SessionKey | undefined, limit: number, budget: number): Sql {
  const params: string[] = [];
  const where = residual(filter, params);
  if (where === undefined) return { text: ordered(S, filter, after, params, 'id, updated_at, json, version', undefined, param(params, String(limit + 1))), params };
  const scanned = ordered(S, filter, after, params, `id, updated_at, json, version, (${where}) AS hit`, undefined, param(params, String(budget + 1)));
  const lim = param(params, String(limit));
  return {
    text:
      `SELECT id, updated_at, CASE WHEN hit THEN json END AS json, CASE WHEN hit THEN version END AS version FROM (` +
      `SELECT *, coalesce(count(*) FILTER (WHERE hit) OVER (ORDER BY updated_at DESC, id DESC ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before FROM (${scanned}) scanned` +
      `) counted WHERE before <= ${lim} ORDER BY updated_at DESC, id DESC`,
    params,
  };
}
