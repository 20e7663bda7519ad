// Between the store and PostgreSQL: what the client's failures mean to the store (a database
// that cannot be used right now is StorageUnavailable, 503; a transaction that lost a deadlock
// is a GroupConflict, tried again; anything else stays what it was, 500), text as the database
// can hold it, and counts as the store reads them whatever the database holds.
import { COUNT_MAX, countIn } from '../../domain/numbers.js';
import type { ChatSession } from '../../domain/records.js';
import { foldedTags } from '../../domain/search.js';
import { indexedTurnWords, indexedWords } from '../../domain/search.js';
import { PgError } from '../../pg/errors.js';
import { StorageUnavailable } from '../store.js';
import type { Dialect } from '../sql.js';
import { GroupConflict } from '../group.js';

export function storeError(e: unknown): unknown {
  if (e instanceof StorageUnavailable || e instanceof GroupConflict) return e;
  if (e instanceof PgError) {
    if (e.unavailable || e.kind === 'pool_closed') return new StorageUnavailable(e);
    if (e.kind === 'deadlock' || e.kind === 'serialization_failure') return new GroupConflict(e.message, { cause: e });
  }
  return e;
}

/** A text[] literal of `values` (each quoted, backslashes and quotes escaped), for `$n::text[]`. */
export function textArray(values: readonly string[]): string {
  let out = '{';
  for (let i = 0; i < values.length; i++) {
    if (i > 0) out += ',';
    out += `"${(values[i] as string).replace(/[\\"]/g, '\\$&')}"`;
  }
  return `${out}}`;
}

/**
 * Text as a PostgreSQL text value, which cannot hold NUL, while ids, users, projects and names
 * given to the API may. Backslash and NUL are escaped (as a backslash pair and backslash-0):
 * a change that is one-to-one and keeps substrings, so lookups and name search mean the same.
 */
export function sqlText(s: string): string {
  return s.includes('\0') || s.includes('\\') ? s.replace(/[\\\0]/g, (c) => (c === '\\' ? '\\\\' : '\\0')) : s;
}

/**
 * A session's metadata.conversationKey, as its index (schema.ts, step 8) and the door's lookup
 * write it: the same expression, or the index is not used. A session whose JSON holds a NUL
 * (`\u0000`, which PostgreSQL's text cannot hold) has none: taking a field out of it would fail,
 * and the index is computed as the row is written.
 */
export const CONVERSATION_KEY_PG = "(CASE WHEN strpos(json, '\"conversationKey\":') > 0 AND strpos(json, '\\u0000') = 0 THEN json::json -> 'metadata' ->> 'conversationKey' END)";

/** A statement's dialect for PostgreSQL: its values (as text the database holds, see sqlText) pushed to `params`, its tables in schema `S`. */
export function postgresDialect(S: string, params: string[]): Dialect {
  return { param: (v) => `$${params.push(sqlText(String(v)))}`, isSet: (c) => c, yes: 'true', table: (n) => `${S}.${n}`, owner: 'owner', bool: (b) => String(b), contains: (hay, needle) => `strpos(${hay}, ${needle}) > 0`, conversationKey: CONVERSATION_KEY_PG };
}

/** The columns of a session that lists by tag and the purge read: its folded tags, its own expiry and whether it is kept for good. */
export function keptColumns(s: ChatSession): [string, string | null, string] {
  return [textArray(foldedTags(s).map(sqlText)), s.expiresAt ?? null, String(s.expiresAt === null)];
}

/** How a write makes the words it stores with a name and a turn (src/domain/search.ts), or none with SEARCH=off. */
export interface Indexing {
  readonly name: (name: string) => string;
  readonly turn: (json: Buffer | string) => string;
}

export const INDEXING: Indexing = { name: indexedWords, turn: indexedTurnWords };
export const NO_INDEXING: Indexing = { name: () => '', turn: () => '' };

/** A tsvector from one text parameter holding the domain's words joined by spaces (src/domain/search.ts indexedWords). */
export function wordsSql(param: string): string {
  return `array_to_tsvector(string_to_array(${param}, ' '))`;
}

const MAX = String(COUNT_MAX);

/**
 * A count as the database gives it (a bigint or numeric column, as text), read as a count
 * whatever it holds (../../domain/numbers.ts): numeric sums are exact, but a JavaScript number
 * past 2^53 is not, and an earlier release stored sums past it.
 */
export function countOf(v: string | null | undefined): number {
  return v === null || v === undefined ? 0 : countIn(Number(v));
}

/** `c` (a bigint or numeric column or expression) taken as a count in SQL: below 0 is 0, a fraction rounded down, past the top the top. */
export function countSql(c: string): string {
  return `least(${MAX}, greatest(0, trunc(${c}::numeric)))`;
}

/** The saturating sum of `c` over a query's rows (0 for none), each row taken as countSql takes it. */
export function totalSql(c: string): string {
  return `least(${MAX}, coalesce(sum(${countSql(c)}), 0))`;
}

/**
 * A total of tokens `c` after a group's delta (`delta`, within -COUNT_MAX..COUNT_MAX), as
 * ../totals.ts decides it: `again` (its count from its parts) when it takes from a total at the
 * top, else the delta added, within 0..COUNT_MAX.
 */
export function settledSql(c: string, delta: string, again: string): string {
  return `CASE WHEN ${delta} < 0 AND ${c} >= ${MAX} THEN ${again} ELSE least(${MAX}, greatest(0, ${c} + ${delta})) END`;
}
