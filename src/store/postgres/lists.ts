// The SQL of session lists on PostgreSQL. Each list is read from the index that keeps it in
// order (a user's or a project's, per archived value); `archived=all` merges the two ordered
// halves. Filters the index does not serve (a project under owner-only access, a name) are
// either applied (whole lists) or marked on each examined row (pages, which stop at the scan
// budget, so a filter that matches little cannot make a page scan the whole list).
import type { SessionKey } from '../../domain/order.js';
import type { SessionFilter } from '../store.js';
import { liveSql } from '../sql.js';
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

/** The residual filters of a list, as one SQL condition (undefined when there are none). */
function residual(S: string, filter: SessionFilter, params: string[]): string | undefined {
  const parts: string[] = [];
  if (filter.user !== undefined && filter.project !== undefined) parts.push(`s.project = ${param(params, filter.project)}`);
  if (filter.nameContains !== undefined) parts.push(`strpos(s.name_folded, ${param(params, filter.nameContains)}) > 0`);
  if (filter.live !== undefined) parts.push(liveSql(postgresDialect(S, params), filter.live));
  for (const tag of filter.tags?.slice(1) ?? []) parts.push(`EXISTS (SELECT 1 FROM ${S}.session_tags o WHERE o.session = s.id AND o.tag = ${param(params, tag)})`);
  return parts.length === 0 ? undefined : parts.join(' AND ');
}

/** The rows of the list in order, from `after` on: `archived=all` as two index-ordered halves merged. */
function ordered(S: string, filter: SessionFilter, after: SessionKey | undefined, params: string[], columns: string, where: string | undefined, limit: string): string {
  const byOwner = filter.user !== undefined;
  const owner = byOwner ? 'owner' : 'project';
  const extra = where === undefined ? '' : ` AND ${where}`;
  const tag = filter.tags?.[0];
  let half: (archived: boolean) => string;
  if (tag === undefined) {
    const key = param(params, (byOwner ? filter.user : filter.project) as string);
    const keyset = after === undefined ? '' : ` AND (s.updated_at, s.id) < (${param(params, after.updatedAt)}, ${param(params, after._id)})`;
    half = (archived) => `SELECT ${columns} FROM ${S}.sessions s WHERE s.${owner} = ${key} AND s.archived = ${archived}${keyset}${extra} ORDER BY s.updated_at DESC, s.id DESC LIMIT ${limit}`;
  } else {
    // a tag's list is read from its own index, in list order; the other tags filter it
    const t = param(params, tag);
    const key = param(params, (byOwner ? filter.user : filter.project) as string);
    const keyset = after === undefined ? '' : ` AND (t.updated_at, t.session) < (${param(params, after.updatedAt)}, ${param(params, after._id)})`;
    half = (archived) =>
      `SELECT ${columns} FROM ${S}.session_tags t JOIN ${S}.sessions s ON s.id = t.session WHERE t.tag = ${t} AND t.${owner} = ${key} AND t.archived = ${archived}${keyset}${extra} ORDER BY t.updated_at DESC, t.session DESC LIMIT ${limit}`;
  }
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
  const where = residual(S, filter, params);
  const columns = where === undefined ? 's.id, s.updated_at, s.json, s.version' : `s.id, s.updated_at, CASE WHEN ${where} THEN s.json END AS json, CASE WHEN ${where} THEN s.version END AS version`;
  return { text: ordered(S, filter, after, params, columns, undefined, param(params, String(limit))), params };
}

/**
 * One page: the rows examined from `after` on, at most `budget` + 1 of them, each with its JSON
 * only when it matches; cut after the first row past the `limit`-th match. With no residual
 * filter that is just the first `limit` + 1 rows.
 */
export function pageSql(S: string, filter: SessionFilter, after: SessionKey | undefined, limit: number, budget: number): Sql {
  const params: string[] = [];
  const where = residual(S, filter, params);
  if (where === undefined) return { text: ordered(S, filter, after, params, 's.id, s.updated_at, s.json, s.version', undefined, param(params, String(limit + 1))), params };
  const scanned = ordered(S, filter, after, params, `s.id, s.updated_at, s.json, s.version, (${where}) AS hit`, undefined, param(params, String(budget + 1)));
  const lim = param(params, String(limit));
  return {
    text:
      `SELECT id, updated_at, CASE WHEN hit THEN json END AS json, CASE WHEN hit THEN version END AS version FROM (` +
      `SELECT *, coalesce(count(*) FILTER (WHERE hit) OVER (ORDER BY updated_at DESC, id DESC ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before FROM (${scanned}) scanned` +
      `) counted WHERE before <= ${lim} ORDER BY updated_at DESC, id DESC`,
    params,
  };
}
