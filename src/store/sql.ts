// The SQL both engines write alike, once, over the few things their dialects write apart: a
// parameter's placeholder, a boolean, a table's name, the owner's column, a substring test. The
// session lists (their index-ordered halves and the filters the index does not serve), the rules
// of retention (which session is live, which is expired) and the walk from a turn up to its root
// are here; each engine keeps only what its planner needs differently (sqlite runs each half of
// archived=all as a statement of its own and merges them; PostgreSQL unions them in one, and
// cuts a page with a window).
import type { SessionKey } from '../domain/order.js';
import type { Liveness } from '../domain/retention.js';
import type { SessionFilter } from './store.js';

/** How one statement of an engine writes the dialect's differences. */
export interface Dialect {
  /** Adds `value` to the statement's parameters and answers its placeholder; called in text order (sqlite's `?` are positional). */
  param(value: string | number): string;
  /** The condition that a boolean column is set (sqlite stores 0 and 1). */
  isSet(column: string): string;
  /** A true condition. */
  readonly yes: string;
  /** A table's name as the statement writes it (PostgreSQL's are qualified by their schema). */
  table(name: string): string;
  /** The sessions' (and session_tags') column of the owner. */
  readonly owner: string;
  /** A boolean value as the engine stores it. */
  bool(value: boolean): string;
  /** Whether `needle` occurs in `hay`. */
  contains(hay: string, needle: string): string;
  /** A session's metadata.conversationKey from its unqualified `json` column, as the engine's index on it writes it. */
  readonly conversationKey: string;
}

/**
 * The filters of a list that its index does not serve, as one condition on the sessions row `s`
 * (undefined when there are none): a project under owner-only access, a name's substring,
 * liveness, the tags after the first (the first is the index's).
 */
export function residualSql(d: Dialect, filter: SessionFilter): string | undefined {
  const parts: string[] = [];
  if (filter.user !== undefined && filter.project !== undefined) parts.push(`s.project = ${d.param(filter.project)}`);
  if (filter.nameContains !== undefined) parts.push(d.contains('s.name_folded', d.param(filter.nameContains)));
  if (filter.live !== undefined) parts.push(liveSql(d, filter.live));
  for (const tag of filter.tags?.slice(1) ?? []) parts.push(`EXISTS (SELECT 1 FROM ${d.table('session_tags')} o WHERE o.session = s.id AND o.tag = ${d.param(tag)})`);
  return parts.length === 0 ? undefined : parts.join(' AND ');
}

/**
 * One half of a list (its `archived` value), newest first, strictly after `after`, read from the
 * index that keeps it in order: the owner's or the project's, or with a tag that tag's. `columns`
 * of the sessions row `s` (and the tag's row `t`); no limit.
 */
export function listHalfSql(d: Dialect, filter: SessionFilter, archived: boolean, after: SessionKey | undefined, columns: string): string {
  const byOwner = filter.user !== undefined;
  const column = byOwner ? d.owner : 'project';
  const tag = filter.tags?.[0];
  if (tag === undefined) {
    const key = d.param((byOwner ? filter.user : filter.project) as string);
    const keyset = after === undefined ? '' : ` AND (s.updated_at, s.id) < (${d.param(after.updatedAt)}, ${d.param(after._id)})`;
    return `SELECT ${columns} FROM ${d.table('sessions')} s WHERE s.${column} = ${key} AND s.archived = ${d.bool(archived)}${keyset} ORDER BY s.updated_at DESC, s.id DESC`;
  }
  const t = d.param(tag);
  const key = d.param((byOwner ? filter.user : filter.project) as string);
  const keyset = after === undefined ? '' : ` AND (t.updated_at, t.session) < (${d.param(after.updatedAt)}, ${d.param(after._id)})`;
  return `SELECT ${columns} FROM ${d.table('session_tags')} t JOIN ${d.table('sessions')} s ON s.id = t.session
      WHERE t.tag = ${t} AND t.${column} = ${key} AND t.archived = ${d.bool(archived)}${keyset} ORDER BY t.updated_at DESC, t.session DESC`;
}

/**
 * Live (`s` names the sessions table in the statement): an own expiry later than now, kept for
 * good, or (no own expiry) activity after the RETENTION_DAYS cutoff.
 */
export function liveSql(d: Dialect, live: Liveness, s = 's'): string {
  const now = d.param(live.now);
  const active = live.cutoff === undefined ? d.yes : `${s}.updated_at > ${d.param(live.cutoff)}`;
  return `(CASE WHEN ${s}.expires_at IS NOT NULL THEN ${s}.expires_at > ${now} WHEN ${d.isSet(`${s}.keep`)} THEN ${d.yes} ELSE ${active} END)`;
}

/**
 * The sessions the purge takes, oldest first, from the two expiry indexes: `own`, an own expiry
 * passed (the parameter is now); `idle`, no own expiry, not kept, no activity since the cutoff
 * (the parameter is the cutoff). The negation of liveSql, split so each half reads one index.
 */
export function expiredSql(d: Dialect, which: 'own' | 'idle', at: string, limit: number, columns: string): string {
  const sessions = d.table('sessions');
  if (which === 'own') return `SELECT ${columns} FROM ${sessions} WHERE expires_at IS NOT NULL AND expires_at <= ${d.param(at)} ORDER BY expires_at LIMIT ${d.param(limit)}`;
  return `SELECT ${columns} FROM ${sessions} WHERE expires_at IS NULL AND NOT (${d.isSet('keep')}) AND updated_at <= ${d.param(at)} ORDER BY updated_at LIMIT ${d.param(limit)}`;
}

/**
 * `path(id, parent_id, created_at)`: the turns from the one `start` selects (a condition on the
 * turns table, of session `session`) up to the root along the parents, each step a primary-key
 * lookup that reads no JSON. With `after` (the placeholders of a created_at and an id) the walk
 * stops at that key: keys fall along the path toward the root.
 */
export function pathSql(d: Dialect, start: string, session: string, after?: string): string {
  const turns = d.table('turns');
  return `path(id, parent_id, created_at) AS (
      SELECT id, parent_id, created_at FROM ${turns} WHERE ${start} AND session = ${session}
      UNION ALL SELECT t.id, t.parent_id, t.created_at FROM ${turns} t JOIN path p ON t.id = p.parent_id ${after === undefined ? '' : `WHERE (t.created_at, t.id) > ${after}`})`;
}

/**
 * The OpenAI door's index, a path: `session, id` of the turns whose path key is the parameter,
 * in `user`'s live sessions, the most recently updated first (the key's index, then each turn's
 * session by its primary key: the cost is the turns found, not the user's sessions).
 */
export function pathKeySql(d: Dialect, user: string, pathKey: string, live: Liveness, limit: number): string {
  return `SELECT t.session, t.id FROM ${d.table('turns')} t JOIN ${d.table('sessions')} s ON s.id = t.session
    WHERE t.path_key = ${d.param(pathKey)} AND s.${d.owner} = ${d.param(user)} AND ${liveSql(d, live)}
    ORDER BY s.updated_at DESC, s.id DESC LIMIT ${d.param(limit)}`;
}

/** The OpenAI door's index, a conversation: the id of `user`'s most recently updated live session whose metadata.conversationKey is `key`. */
export function conversationKeySql(d: Dialect, user: string, key: string, live: Liveness): string {
  const sessions = d.table('sessions');
  return `SELECT id FROM ${sessions} WHERE ${d.owner} = ${d.param(user)} AND ${d.conversationKey} = ${d.param(key)} AND ${liveSql(d, live, sessions)}
    ORDER BY updated_at DESC, id DESC LIMIT 1`;
}
