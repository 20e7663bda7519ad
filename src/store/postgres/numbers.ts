// The PostgreSQL engine's counts out of range (../../domain/numbers.ts): the conditions of the
// two indexes that hold only the turns and sessions whose counts are not counts, and the start's
// repair of what an earlier release stored so (sums past 2^53 in numeric columns, a provider's
// 1e300 or 1.5 in a turn's JSON), made in the start's schema transaction.
import { COUNT_MAX } from '../../domain/numbers.js';
import { turnJsonInRange } from '../../domain/records.js';
import type { Queryable } from '../../pg/pool.js';
import type { NumbersRepaired } from '../totals.js';
import { turnBytesSql } from './rows.js';
import { textArray, totalSql } from './values.js';

const MAX = String(COUNT_MAX);
const TOKENS = ['input_tokens', 'output_tokens', 'cached_tokens'];

/** The turns whose token columns (bigint) are not counts: the partial index turns_out_of_range holds them. */
export const TURNS_OUT_OF_RANGE = `NOT (${TOKENS.map((c) => `${c} BETWEEN 0 AND ${MAX}`).join(' AND ')})`;

/** Whether numeric column `c` holds a count (NaN is not one: it is not between 0 and the top). */
const isCountSql = (c: string): string => `(${c} BETWEEN 0 AND ${MAX} AND ${c} = trunc(${c}))`;
/** The sessions whose sizes or token sums are not counts: the partial index sessions_out_of_range holds them. */
export const SESSIONS_OUT_OF_RANGE = `NOT (json_bytes >= 0 AND turn_count >= 0 AND turn_bytes BETWEEN 0 AND ${MAX} AND ${TOKENS.map(isCountSql).join(' AND ')})`;
const USAGE_OUT_OF_RANGE = `NOT (${['sessions', 'turns', 'bytes'].map((c) => `${c} BETWEEN 0 AND ${MAX}`).join(' AND ')} AND ${TOKENS.map(isCountSql).join(' AND ')})`;

/**
 * A count in a turn's JSON usage (`u`, its usage as json) as migration 7 fills a token column:
 * the number when it is a count, 0 when absent, -1 when it is anything else, so that
 * turns_out_of_range finds the turn and the start's repair takes its JSON into range.
 */
export function jsonCountSql(u: string, key: string): string {
  const v = `(${u} ->> '${key}')`;
  return `CASE WHEN ${u} -> '${key}' IS NULL THEN 0
    WHEN json_typeof(${u} -> '${key}') = 'number' AND ${v}::numeric BETWEEN 0 AND ${MAX} AND ${v}::numeric = trunc(${v}::numeric) THEN ${v}::bigint
    ELSE -1 END`;
}

/**
 * Puts back in range, in the caller's transaction, every stored count that is not one: a turn's
 * usage (JSON and columns, as turnJsonInRange takes it), then the sums that hold it, counted again
 * from their parts (a session's from its turns, an owner's from their sessions). Answers what it
 * changed, or undefined when everything was in range (two empty indexes and the usage rows read).
 */
export async function repairNumbers(q: Queryable, S: string): Promise<NumbersRepaired | undefined> {
  const [badTurns, badSessions, badOwners] = await Promise.all([
    q.query(`SELECT id, session, json FROM ${S}.turns WHERE ${TURNS_OUT_OF_RANGE}`),
    q.query(`SELECT id FROM ${S}.sessions WHERE ${SESSIONS_OUT_OF_RANGE}`),
    q.query(`SELECT owner FROM ${S}.usage WHERE ${USAGE_OUT_OF_RANGE}`),
  ]);
  if (badTurns.rows.length + badSessions.rows.length + badOwners.rows.length === 0) return undefined;
  const sessions = new Set(badSessions.rows.map((r) => r[0] as string));
  for (const r of badTurns.rows) {
    const json = r[2] as string;
    const inRange = turnJsonInRange(json);
    const fixed = inRange.json ?? json;
    const t = inRange.tokens;
    await q.query(`UPDATE ${S}.turns SET json = $1, input_tokens = $2, output_tokens = $3, cached_tokens = $4 WHERE id = $5`, [fixed, String(t.inputTokens), String(t.outputTokens), String(t.cachedTokens), r[0] as string]);
    // a streaming turn's delta rows count its bytes with its JSON's: they follow its length
    const grown = Buffer.byteLength(fixed) - Buffer.byteLength(json);
    if (grown !== 0) await q.query(`UPDATE ${S}.turn_pieces SET bytes = bytes + $1 WHERE turn = $2`, [String(grown), r[0] as string]);
    sessions.add(r[1] as string);
  }
  const ids = textArray([...sessions]);
  await q.query(
    `UPDATE ${S}.sessions s SET json_bytes = octet_length(s.json), turn_count = coalesce(t.n, 0), turn_bytes = coalesce(t.bytes, 0),
       input_tokens = coalesce(t.i, 0), output_tokens = coalesce(t.o, 0), cached_tokens = coalesce(t.c, 0)
     FROM (SELECT id FROM unnest($1::text[]) AS id) ids
     LEFT JOIN (SELECT session, count(*) AS n, ${totalSql(turnBytesSql(S, 'x'))} AS bytes, ${totalSql('input_tokens')} AS i, ${totalSql('output_tokens')} AS o, ${totalSql('cached_tokens')} AS c
                FROM ${S}.turns x WHERE session = ANY($1::text[]) GROUP BY session) t ON t.session = ids.id
     WHERE s.id = ids.id`,
    [ids],
  );
  const owners = new Set(badOwners.rows.map((r) => r[0] as string));
  for (const r of (await q.query(`SELECT DISTINCT owner FROM ${S}.sessions WHERE id = ANY($1::text[])`, [ids])).rows) owners.add(r[0] as string);
  const who = textArray([...owners]);
  await q.query(`DELETE FROM ${S}.usage WHERE owner = ANY($1::text[])`, [who]);
  await q.query(
    `INSERT INTO ${S}.usage (owner, sessions, turns, bytes, input_tokens, output_tokens, cached_tokens)
     SELECT owner, count(*), ${totalSql('turn_count')}, ${totalSql('json_bytes + turn_bytes')}, ${totalSql('input_tokens')}, ${totalSql('output_tokens')}, ${totalSql('cached_tokens')}
     FROM ${S}.sessions WHERE owner = ANY($1::text[]) GROUP BY owner`,
    [who],
  );
  return { turns: badTurns.rows.length, sessions: sessions.size, users: owners.size };
}
