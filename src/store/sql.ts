// The SQL both engines write alike, once, over the few things their dialects write apart: a
// parameter's placeholder, a boolean column, a table's name. The rules of retention (which
// session is live, which is expired) and the walk from a turn up to its root are here; each
// engine keeps only what its planner needs differently (its list halves, its page cuts).
import type { Liveness } from '../domain/retention.js';

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
