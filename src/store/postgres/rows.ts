// The rows of sessions and turns as both halves of the PostgreSQL engine read and write them: a
// session's columns as a group locks them, a turn's deltas and its bytes with them, how a turn's
// row is inserted and when it counts as streaming, and how a transaction's statements are ended.
import type { TurnKey } from '../../domain/order.js';
import type { Tokens } from '../../domain/records.js';
import { STREAMING_MARK, STREAMING_MARK_FROM_END } from '../../domain/deltas.js';
import type { QueryResult } from '../../pg/query.js';
import type { Queryable } from '../../pg/pool.js';
import type { Held } from '../store.js';
import { JUMP } from '../tree-index.js';
import { countOf, storeError, textArray, wordsSql } from './values.js';

/** A session's row as the group locked it. */
export interface SessionRow {
  readonly json: string;
  readonly version: string;
  readonly lastTurn: TurnKey | undefined;
  readonly held: Held;
  readonly head: string | null;
}

export function rowOf(r: readonly (string | null)[]): SessionRow {
  const [, json, version, lastAt, lastId, turnCount, turnBytes, input, output, cached, head] = r;
  return {
    head: head ?? null,
    json: json as string,
    version: version as string,
    lastTurn: lastAt === null || lastId === null || lastAt === undefined || lastId === undefined ? undefined : { createdAt: lastAt, _id: lastId },
    held: { turns: countOf(turnCount), turnBytes: countOf(turnBytes), inputTokens: countOf(input), outputTokens: countOf(output), cachedTokens: countOf(cached) },
  };
}

export const SESSION_ROW = 'id, json, version, last_turn_at, last_turn_id, turn_count, turn_bytes, input_tokens, output_tokens, cached_tokens, head_turn_id';

/**
 * A turn's deltas (../pieces.ts), read beside its row by the same statement (one snapshot): the
 * `pieces` of its delta rows joined in order, for a streaming turn only. `t` names the turns table.
 */
export function deltasSql(S: string, t: string): string {
  return `CASE WHEN ${t}.streamed_at IS NOT NULL THEN (SELECT string_agg(p.pieces, ',' ORDER BY p.seq) FROM ${S}.turn_pieces p WHERE p.turn = ${t}.id) END`;
}

/** The UTF-8 bytes of a turn's JSON with its deltas: its last delta's count, else its row's. */
export function turnBytesSql(S: string, t: string): string {
  return `coalesce(CASE WHEN ${t}.streamed_at IS NOT NULL THEN (SELECT p.bytes FROM ${S}.turn_pieces p WHERE p.turn = ${t}.id ORDER BY p.seq DESC LIMIT 1) END, octet_length(${t}.json))`;
}

/** The tokens of a turn's usage, as the turns table keeps them ($ columns of a turn's row). */
export const tokensParams = (t: Tokens): [string, string, string] => [String(t.inputTokens), String(t.outputTokens), String(t.cachedTokens)];

/** What a session's turns hold, as the columns turn_count, turn_bytes and the three tokens take it. */
export function heldParams(h: Held): [string, string, string, string, string] {
  return [String(h.turns), String(h.turnBytes), ...tokensParams(h)];
}

/**
 * A turn's `streamed_at` as a write of its JSON leaves it: the time of that write when the JSON
 * says `status: "streaming"` (at its place near the end: ../../domain/deltas.ts), else null.
 */
export function streamedAtSql(json: string): string {
  return `CASE WHEN ${isStreamingSql(json)} THEN clock_timestamp() END`;
}

/** Whether a turn's JSON says `status: "streaming"`. */
export function isStreamingSql(json: string): string {
  return `substr(${json}, length(${json}) - ${STREAMING_MARK_FROM_END - 1}, ${STREAMING_MARK.length}) = '${STREAMING_MARK}'`;
}

/**
 * A turn's row ($1-$6: id, session, parent, createdAt, JSON, words; $7-$9: its usage's tokens;
 * $10: its path key or null; $11: the instance generating it, a reply, or null), its depth and
 * jump pointer made from its parent's.
 */
export function insertTurnSql(S: string): string {
  return `INSERT INTO ${S}.turns (id, session, parent_id, created_at, json, depth, skip_id, streamed_at, words, input_tokens, output_tokens, cached_tokens, path_key, generator)
    SELECT $1, $2, $3, $4, $5, coalesce(p.depth + 1, 0), CASE WHEN p.id IS NULL THEN NULL WHEN p.depth % ${JUMP} = 0 THEN p.id ELSE p.skip_id END, ${streamedAtSql('$5::text')}, ${wordsSql('$6::text')}, $7, $8, $9, $10, $11
    FROM (SELECT 1) one LEFT JOIN ${S}.turns p ON p.id = $3`;
}

/** A text[] literal whose nulls are SQL NULLs (a quoted element is text, the bare word NULL is none). */
export function nullableTextArray(values: readonly (string | null)[]): string {
  return `{${values.map((v) => (v === null ? 'NULL' : textArray([v]).slice(1, -1))).join(',')}}`;
}

/**
 * Sends COMMIT after `sent` and waits for all of them. The first statement that failed is the
 * error (those after it only say the transaction was aborted); a COMMIT answered ROLLBACK means
 * nothing was written.
 */
export async function finish(q: Queryable, sent: readonly Promise<QueryResult>[], done: () => void, ended: () => void): Promise<void> {
  const commit = q.query('COMMIT');
  q.send?.(); // all of the transaction is queued: out now, not after whatever the event loop runs next
  const results = await Promise.allSettled([...sent, commit]);
  ended();
  const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed !== undefined) {
    if (results[results.length - 1]?.status === 'fulfilled') {
      // the statement failed but COMMIT was answered (with ROLLBACK): the connection is usable
    } else await q.query('ROLLBACK').catch(() => undefined);
    done();
    throw storeError(failed.reason);
  }
  done();
  const c = results[results.length - 1] as PromiseFulfilledResult<QueryResult>;
  if (c.value.command !== 'COMMIT') throw storeError(new Error('the transaction was rolled back at COMMIT'));
}
