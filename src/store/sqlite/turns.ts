// The sqlite engine's turns as rows: the columns a turn is read with (its deltas beside it), a
// branch's keys and pages along the parents, a session's turns in chunks.
import { SCAN_CHUNK, SCAN_CHUNK_BYTES, type TurnKey } from '../../domain/order.js';
import type { Tokens } from '../../domain/records.js';
import type { Branch, TreeTurn, TurnRecord } from '../store.js';
import { bytesOf, int, sqliteDialect, text, textOrUndefined, type Row, type SqlValue } from './binding.js';
import { streamingSql } from './schema.js';
import { withDeltas } from '../pieces.js';
import { pageByDepthSql } from '../tree-index.js';
import { pathSql, type Dialect } from '../sql.js';
import { Connection } from './connection.js';
import { countColumns } from './numbers.js';

/**
 * A turn's deltas (../pieces.ts), read beside its row by the same statement (one moment: the
 * edit that folds them in could otherwise fall between two reads): the `pieces` of its delta
 * rows joined in order, for a streaming turn only. `t` names the turns table in the statement.
 */
export function deltasSql(t: string): string {
  return `CASE WHEN ${streamingSql(`${t}.json`)} THEN (SELECT group_concat(p.pieces, ',' ORDER BY p.seq) FROM turn_pieces p WHERE p.turn = ${t}.id) END`;
}

/** The UTF-8 bytes of a turn's JSON with its deltas: its last delta's count, else its row's. */
export function turnBytesSql(t: string): string {
  return `coalesce(CASE WHEN ${streamingSql(`${t}.json`)} THEN (SELECT p.bytes FROM turn_pieces p WHERE p.turn = ${t}.id ORDER BY p.seq DESC LIMIT 1) END, length(${t}.json))`;
}

/** The columns turnOf reads, from the turns table unaliased. */
export const TURN_COLUMNS = `id, created_at, json, ${deltasSql('turns')} AS deltas`;

/** The columns treeTurnOf reads. */
export const TREE_TURN_COLUMNS = `${TURN_COLUMNS}, parent_id, ${countColumns('input_tokens', 'output_tokens', 'cached_tokens')}`;

export const turnOf = (row: Row): TurnRecord => ({ _id: text(row['id']), createdAt: text(row['created_at']), json: withDeltas(bytesOf(row['json']), textOrUndefined(row['deltas'])) });

export const tokensOfRow = (row: Row): Tokens => ({ inputTokens: int(row['input_tokens']), outputTokens: int(row['output_tokens']), cachedTokens: int(row['cached_tokens']) });

export const treeTurnOf = (row: Row): TreeTurn => {
  const json = withDeltas(bytesOf(row['json']), textOrUndefined(row['deltas']));
  return { _id: text(row['id']), createdAt: text(row['created_at']), parentId: textOrUndefined(row['parent_id']) ?? null, bytes: json.length, json, tokens: tokensOfRow(row) };
};

/** For statements whose numbered parameters (?1, ?2...) are written by hand: pathSql needs only the table's name. */
export const NUMBERED: Dialect = sqliteDialect([]);

/**
 * The keys of a branch's path, oldest first: from its turn (`?1`, in session `?2`; the head's
 * read from the session row) up to the root along the parents, each step a primary-key lookup
 * that reads no JSON; strictly after (?3, ?4) and at most ?5 when asked (a page after a cursor walks
 * from the head to the cursor only). The JSON of the page is
 * read afterwards, turn by turn: sorting rows that carry their JSON cost more than the whole walk.
 */
export function branchKeysSql(branch: Branch, after: boolean, limit: boolean): string {
  const start = branch === 'head' ? 'id = (SELECT head_turn_id FROM sessions WHERE id = ?2)' : 'id = ?1';
  return `WITH RECURSIVE ${pathSql(NUMBERED, start, '?2', after ? '(?3, ?4)' : undefined)}
    SELECT id, created_at FROM path ${after ? 'WHERE (created_at, id) > (?3, ?4)' : ''} ORDER BY created_at, id ${limit ? 'LIMIT ?5' : ''}`;
}

/** The parameters of branchKeysSql: the turn (or null for the head), the session, the key after, the limit. */
export function branchParams(sessionId: string, branch: Branch, after: TurnKey | undefined, limit: number | undefined): SqlValue[] {
  const out: SqlValue[] = [branch === 'head' ? null : branch.turnId, sessionId];
  if (after !== undefined) out.push(after.createdAt, after._id);
  else if (limit !== undefined) out.push(null, null);
  if (limit !== undefined) out.push(limit);
  return out;
}

/**
 * A page of a branch by depth (../tree-index.ts): the keys of the turns at depths ?3 .. ?3 + ?4 - 1
 * of the path to the branch's turn (?1, or the head of session ?2), oldest first, each with its
 * parent: about depth / JUMP + JUMP lookups beside the page's own, however deep the branch.
 */
export function branchPageSql(branch: Branch): string {
  const start = branch === 'head' ? 'id = (SELECT head_turn_id FROM sessions WHERE id = ?2)' : 'id = ?1';
  return `WITH RECURSIVE
    target(id, depth) AS (SELECT id, depth FROM turns WHERE ${start} AND session = ?2),
    bounds(lo, hi) AS (SELECT ?3, min(depth, ?3 + ?4 - 1) FROM target),
    ${pageByDepthSql('turns')}
    SELECT id, created_at, parent_id, depth FROM walk WHERE depth >= (SELECT lo FROM bounds) ORDER BY depth`;
}

/** The turns of a branch's keys, in their order, their JSON read one by one. */
export function* branchTurns(c: Connection, keys: Iterable<Row>): IterableIterator<Row> {
  const one = c.prepare(`SELECT ${TURN_COLUMNS} FROM turns WHERE id = ?`);
  for (const k of keys) {
    const row = one.get(k['id'] as string);
    if (row !== undefined) yield row;
  }
}

export function turnChunks(c: Connection, sessionId: string): Iterable<TurnRecord[]> {
  return chunksOf(c.prepare(`SELECT ${TURN_COLUMNS} FROM turns WHERE session = ? ORDER BY created_at, id`).iterate(sessionId));
}

/** Turns in chunks of SCAN_CHUNK turns or SCAN_CHUNK_BYTES of JSON, whichever comes first (rows are copies). */
export function* chunksOf(rows: Iterable<Row>): Iterable<TurnRecord[]> {
  let chunk: TurnRecord[] = [];
  let bytes = 0;
  for (const row of rows) {
    const t = turnOf(row);
    chunk.push(t);
    bytes += t.json.length;
    if (chunk.length === SCAN_CHUNK || bytes >= SCAN_CHUNK_BYTES) {
      yield chunk;
      chunk = [];
      bytes = 0;
    }
  }
  if (chunk.length > 0) yield chunk;
}
