// The sqlite engine's counts and totals as SQL (../../domain/numbers.ts): every read of one is a
// count whatever the file holds (node:sqlite throws on an integer past 2^53 and SUM on one past
// 2^63), every sum saturates, and the start puts back in range what an earlier release stored
// out of it (two indexes that hold only such rows find them without reading the tables).
import { COUNT_MAX } from '../../domain/numbers.js';
import { turnJsonInRange } from '../../domain/records.js';
import { bytesOf, text, type Database } from './binding.js';
import type { NumbersRepaired } from '../totals.js';

const MAX = String(COUNT_MAX);

/** Whether column (or expression) `c` holds a count as this release writes it: an integer from 0 to COUNT_MAX. */
const isCountSql = (c: string): string => `(typeof(${c}) = 'integer' AND ${c} BETWEEN 0 AND ${MAX})`;

/** `c` read as a count, whatever the file holds: a count as it is, a larger number COUNT_MAX, a fraction rounded down, anything else 0. */
export function countSql(c: string): string {
  return `(CASE WHEN ${isCountSql(c)} THEN ${c} WHEN typeof(${c}) IN ('integer', 'real') AND ${c} > 0 THEN CAST(min(${c}, ${MAX}) AS INTEGER) ELSE 0 END)`;
}

/** Columns read as counts under their own names (`t.input_tokens` as `input_tokens`), for a SELECT list. */
export function countColumns(...columns: readonly string[]): string {
  return columns.map((c) => `${countSql(c)} AS ${c.slice(c.indexOf('.') + 1)}`).join(', ');
}

/** The saturating sum of `c` over a query's rows, read as countSql reads each (total() never overflows; exact below 2^53). */
export function totalSql(c: string): string {
  return `CAST(min(total(${countSql(c)}), ${MAX}) AS INTEGER)`;
}

/**
 * A total of tokens `c` after a group's delta (parameter `delta`; `recount` a 0/1 parameter),
 * as ../totals.ts decides it: `again` (its count from its parts) when the group says so or takes
 * from a total at the top, else the delta added, within 0..COUNT_MAX.
 */
export function settledSql(c: string, delta: string, recount: string, again: string): string {
  return `(CASE WHEN ${recount} = 1 OR (${delta} < 0 AND ${countSql(c)} >= ${MAX}) THEN ${again} ELSE max(0, min(${MAX}, ${countSql(c)} + ${delta})) END)`;
}

/** The turns whose token columns are not counts: the partial index turns_out_of_range holds them. */
export const TURNS_OUT_OF_RANGE = `NOT (${['input_tokens', 'output_tokens', 'cached_tokens'].map(isCountSql).join(' AND ')})`;
/** The sessions whose sizes or totals are not counts: the partial index sessions_out_of_range holds them. */
export const SESSIONS_OUT_OF_RANGE = `NOT (${['json_bytes', 'turn_count', 'turn_bytes', 'input_tokens', 'output_tokens', 'cached_tokens'].map(isCountSql).join(' AND ')})`;
const USERS_OUT_OF_RANGE = `NOT (${['sessions', 'turns', 'bytes', 'input_tokens', 'output_tokens', 'cached_tokens'].map(isCountSql).join(' AND ')})`;

/** One session's turns counted again from their rows (a streaming turn's bytes are its last delta's: ../pieces.ts). */
export const RECOUNT_SESSION_SQL = `UPDATE sessions SET (turn_count, turn_bytes, input_tokens, output_tokens, cached_tokens) = (
    SELECT count(*), CAST(min(total(coalesce((SELECT p.bytes FROM turn_pieces p WHERE p.turn = t.id ORDER BY p.seq DESC LIMIT 1), length(t.json))), ${MAX}) AS INTEGER),
      ${totalSql('t.input_tokens')}, ${totalSql('t.output_tokens')}, ${totalSql('t.cached_tokens')}
    FROM turns t WHERE t.session = sessions.id)
  WHERE id = ?`;

/** One session's tokens counted again from its turns' rows (a writer's Held that says `recount`). */
export const RECOUNT_SESSION_TOKENS_SQL = `UPDATE sessions SET (input_tokens, output_tokens, cached_tokens) = (
    SELECT ${totalSql('t.input_tokens')}, ${totalSql('t.output_tokens')}, ${totalSql('t.cached_tokens')} FROM turns t WHERE t.session = sessions.id)
  WHERE id = ?`;

/** One user's usage row made again from their sessions' rows (after the user's row was deleted; none when they have no session). */
export const RECOUNT_USER_SQL = `INSERT INTO users (user, sessions, turns, bytes, input_tokens, output_tokens, cached_tokens)
  SELECT user, count(*), ${totalSql('turn_count')}, CAST(min(total(${countSql('json_bytes')}) + total(${countSql('turn_bytes')}), ${MAX}) AS INTEGER),
    ${totalSql('input_tokens')}, ${totalSql('output_tokens')}, ${totalSql('cached_tokens')}
  FROM sessions WHERE user = ? GROUP BY user`;

/** Every counter made again from the users' rows. */
export const RECOUNT_COUNTERS_SQL = `UPDATE counters SET value = (SELECT ${totalSql(`CASE counters.name WHEN 'sessions' THEN sessions WHEN 'turns' THEN turns WHEN 'bytes' THEN bytes
    WHEN 'input_tokens' THEN input_tokens WHEN 'output_tokens' THEN output_tokens ELSE cached_tokens END`)} FROM users)`;

/**
 * Puts back in range, in one transaction, every stored count that is not one: a turn's usage
 * (JSON and columns, as turnJsonInRange takes it), then the totals that hold it, counted again from
 * their parts. Answers what it changed, or undefined when everything was in range (the usual
 * case: two empty indexes and the users' rows read).
 */
export function repairNumbers(db: Database): NumbersRepaired | undefined {
  const badTurns = db.prepare(`SELECT id, session, json FROM turns INDEXED BY turns_out_of_range WHERE ${TURNS_OUT_OF_RANGE}`).all();
  const badSessions = db.prepare(`SELECT id FROM sessions INDEXED BY sessions_out_of_range WHERE ${SESSIONS_OUT_OF_RANGE}`).all();
  const badUsers = db.prepare(`SELECT user FROM users WHERE ${USERS_OUT_OF_RANGE}`).all();
  const badCounters = db.prepare(`SELECT name FROM counters WHERE NOT ${isCountSql('value')}`).all();
  if (badTurns.length + badSessions.length + badUsers.length + badCounters.length === 0) return undefined;
  db.exec('BEGIN IMMEDIATE');
  try {
    const sessions = new Set(badSessions.map((r) => text(r['id'])));
    const setTurn = db.prepare('UPDATE turns SET json = ?, input_tokens = ?, output_tokens = ?, cached_tokens = ? WHERE id = ?');
    // a streaming turn's delta rows count its bytes with its JSON's: they follow its length
    const shiftDeltas = db.prepare('UPDATE turn_pieces SET bytes = bytes + ? WHERE turn = ?');
    for (const r of badTurns) {
      const json = bytesOf(r['json']);
      const inRange = turnJsonInRange(json.toString('utf8'));
      const fixed = inRange.json === undefined ? json : Buffer.from(inRange.json);
      const t = inRange.tokens;
      setTurn.run(fixed, t.inputTokens, t.outputTokens, t.cachedTokens, text(r['id']));
      if (fixed.length !== json.length) shiftDeltas.run(fixed.length - json.length, text(r['id']));
      sessions.add(text(r['session']));
    }
    const recountSession = db.prepare(RECOUNT_SESSION_SQL);
    const jsonBytes = db.prepare('UPDATE sessions SET json_bytes = length(CAST(json AS BLOB)) WHERE id = ?');
    const ownerOf = db.prepare('SELECT user FROM sessions WHERE id = ?');
    const users = new Set(badUsers.map((r) => text(r['user'])));
    for (const id of sessions) {
      recountSession.run(id);
      jsonBytes.run(id);
      const owner = ownerOf.get(id);
      if (owner !== undefined) users.add(text(owner['user']));
    }
    const dropUser = db.prepare('DELETE FROM users WHERE user = ?');
    const recountUser = db.prepare(RECOUNT_USER_SQL);
    for (const user of users) {
      dropUser.run(user);
      recountUser.run(user);
    }
    db.exec(RECOUNT_COUNTERS_SQL);
    db.exec('COMMIT');
    return { turns: badTurns.length, sessions: sessions.size, users: users.size };
  } catch (e) {
    db.exec('ROLLBACK');
    throw e;
  }
}

