// The sqlite engine's search: one part of a query (names or turns, from the index or still
// queued for it) as SQL over the caller's sessions.
import type { SearchFilter, SearchKey } from '../store.js';
import { sqliteDialect, type SqlValue } from './binding.js';
import { liveSql } from '../sql.js';
import { deltasSql } from './turns.js';

/** The query's words as an FTS5 query: each a prefix (or with `prefixes` false, a whole word), all required (the words are letters and digits only). */
export function filterWords(words: readonly string[], prefixes = true): string {
  return words.map((w) => (prefixes ? `"${w}"*` : `"${w}"`)).join(' ');
}

/** Sessions a search walk reads at a time. */
export const WALK_SESSIONS = 64;

/** Where one part of a search finds its documents: the index's names or turns, or those still queued for it. */
export type SearchPart = 'names' | 'turns' | 'queuedNames' | 'queuedTurns';

/**
 * One part of a search: the index finds the documents (or, for those still queued for it, their
 * text is checked as the index will hold it), the session's columns decide whether the caller
 * may read them (the lists' rules), keys after the cursor only.
 */
export function searchPart(filter: SearchFilter, after: SearchKey | undefined, part: SearchPart, params: SqlValue[]): string {
  const where: string[] = [];
  const indexed = part === 'names' || part === 'turns';
  if (indexed) params.push(filterWords(filter.words));
  if (filter.user !== undefined) {
    where.push('s.user = ?');
    params.push(filter.user);
    if (filter.project !== undefined) {
      where.push('s.project = ?');
      params.push(filter.project);
    }
  } else {
    where.push('s.project = ?');
    params.push(filter.project ?? '');
  }
  if (filter.archived !== 'all') where.push(`s.archived = ${filter.archived === 'true' ? 1 : 0}`);
  where.push(liveSql(sqliteDialect(params), filter.live));
  const turns = part === 'turns' || part === 'queuedTurns';
  const [at, doc] = turns ? ['t.created_at', 't.id'] : ['s.updated_at', 's.id'];
  if (after !== undefined) {
    where.push(`(${at}, ${doc}) < (?, ?)`);
    params.push(after.at, after.doc);
  }
  let condition = where.join(' AND ');
  if (!indexed) {
    // in a CASE, so the text is read only for what the scope lets through: as a term of its own,
    // SQLite checked it before the session's columns (every queued turn of every user parsed)
    condition = `CASE WHEN ${condition} THEN ${turns ? 'csa_turn_holds(t.json, ?)' : 'csa_name_holds(s.json, ?)'} ELSE 0 END`;
    params.push(filter.words.join(' '));
  }
  const columns = turns ? `t.created_at AS at, t.id AS doc, s.json, s.version, t.json AS turn_json, ${deltasSql('t')} AS turn_deltas` : 's.updated_at AS at, s.id AS doc, s.json, s.version, NULL AS turn_json, NULL AS turn_deltas';
  switch (part) {
    case 'names':
      return `SELECT ${columns} FROM name_words f JOIN sessions s ON s.rowid = f.rowid WHERE name_words MATCH ? AND ${condition}`;
    case 'turns':
      return `SELECT ${columns} FROM turn_words f JOIN turns t ON t.rowid = f.rowid JOIN sessions s ON s.id = t.session WHERE turn_words MATCH ? AND ${condition}`;
    case 'queuedNames':
      return `SELECT ${columns} FROM names_unindexed u CROSS JOIN sessions s ON s.rowid = u.rowid WHERE ${condition}`;
    case 'queuedTurns':
      // CROSS JOIN: the queue first (short), never the caller's sessions' every turn first
      return `SELECT ${columns} FROM turns_unindexed u CROSS JOIN turns t ON t.rowid = u.rowid CROSS JOIN sessions s ON s.id = t.session WHERE ${condition}`;
  }
}
