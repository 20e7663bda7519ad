// A group of writes on sqlite: the serial point reads the committed state on the main thread's
// reading connection (one group at a time, so it sees every group committed before), and hands
// the group's Changes to the writer thread (./worker.ts), which commits them in one transaction.
import { isStreamingJson } from '../../domain/deltas.js';
import type { TurnKey } from '../../domain/order.js';
import type { ChatSession } from '../../domain/records.js';
import type { Change } from '../changes.js';
import type { Group } from '../group.js';
import { tailOfJson, tailOfRow, type Tail } from '../pieces.js';
import { NO_USAGE, type SessionState, type TreeTurn, type TurnNode, type Usage } from '../store.js';
import { bytesOf, int, text, textOrUndefined, type Row } from './binding.js';
import type { Connection } from './connection.js';
import { countColumns } from './numbers.js';
import { STREAMING_WHERE } from './schema.js';
import { branchKeysSql, branchParams, tokensOfRow, TREE_TURN_COLUMNS, treeTurnOf, turnBytesSql } from './turns.js';

// the counts a read takes, each in range whatever the file holds (./numbers.ts)
/** A user's usage row. */
const USAGE_SQL = `SELECT ${countColumns('sessions', 'turns', 'bytes', 'input_tokens', 'output_tokens', 'cached_tokens')} FROM users WHERE user = ?`;
/** A session's row as a write decides against it. */
const CURRENT_SQL = `SELECT json, version, last_turn_at, last_turn_id, ${countColumns('turn_count', 'turn_bytes', 'input_tokens', 'output_tokens', 'cached_tokens')} FROM sessions WHERE id = ?`;
/**
 * A turn (?1, of session ?2) and its descendants, with their bytes and tokens. CROSS JOIN keeps
 * the few rows of `sub` outside: joined plainly, the planner scanned every turn of the file.
 */
export const SUBTREE_SQL = `WITH RECURSIVE sub(id) AS (SELECT id FROM turns WHERE id = ?1 AND session = ?2 UNION ALL SELECT t.id FROM turns t JOIN sub s ON t.parent_id = s.id)
  SELECT t.id, t.created_at, t.parent_id, ${turnBytesSql('t')} AS bytes, ${countColumns('t.input_tokens', 't.output_tokens', 't.cached_tokens')} FROM sub CROSS JOIN turns t ON t.id = sub.id`;

/** A user's usage as committed (a read, and what a group charges a quota against). */
export function usageOn(reader: Connection, user: string): Usage {
  const row = reader.prepare(USAGE_SQL).get(user);
  return row === undefined ? NO_USAGE : { sessions: int(row['sessions']), turns: int(row['turns']), bytes: int(row['bytes']), ...tokensOfRow(row) };
}

export class SqliteGroup implements Group {
  constructor(
    private readonly reader: Connection,
    /** Sends the changes to the writer thread; resolves once they are committed. */
    private readonly send: (changes: readonly Change[]) => Promise<void>,
  ) {}

  current(id: string): SessionState | undefined {
    const row = this.reader.prepare(CURRENT_SQL).get(id);
    if (row === undefined) return undefined;
    const createdAt = textOrUndefined(row['last_turn_at']);
    const _id = textOrUndefined(row['last_turn_id']);
    const version = text(row['version']);
    return {
      session: JSON.parse(text(row['json'])) as ChatSession,
      lastTurn: createdAt === undefined || _id === undefined ? undefined : { createdAt, _id },
      held: { turns: int(row['turn_count']), turnBytes: int(row['turn_bytes']), ...tokensOfRow(row) },
      version: () => version,
    };
  }

  turn(session: string, id: string): TreeTurn | undefined {
    const row = this.reader.prepare(`SELECT ${TREE_TURN_COLUMNS} FROM turns WHERE id = ? AND session = ?`).get(id, session);
    return row === undefined ? undefined : treeTurnOf(row);
  }

  path(session: string, id: string): readonly TreeTurn[] | undefined {
    const keys = this.reader.prepare(branchKeysSql({ turnId: id }, false, false)).all(...branchParams(session, { turnId: id }, undefined, undefined));
    if (keys.length === 0) return undefined;
    const one = this.reader.prepare(`SELECT ${TREE_TURN_COLUMNS} FROM turns WHERE id = ?`);
    return keys.map((k) => treeTurnOf(one.get(k['id'] as string) as Row));
  }

  subtree(session: string, id: string): readonly TurnNode[] | undefined {
    const rows = this.reader.prepare(SUBTREE_SQL).all(id, session);
    if (rows.length === 0) return undefined;
    return rows.map((r) => ({ _id: text(r['id']), createdAt: text(r['created_at']), parentId: textOrUndefined(r['parent_id']) ?? null, bytes: int(r['bytes']), tokens: tokensOfRow(r) }));
  }

  lastTurnExcept(session: string, excluded: ReadonlySet<string>): TurnKey | undefined {
    for (const row of this.reader.prepare('SELECT created_at, id FROM turns WHERE session = ? ORDER BY created_at DESC, id DESC').iterate(session)) {
      const id = text(row['id']);
      if (!excluded.has(id)) return { createdAt: text(row['created_at']), _id: id }; // leaving the loop resets the statement
    }
    return undefined;
  }

  /** A streaming turn's tail from its last delta's row, or (none since it was made or edited) from its JSON. */
  tail(session: string, id: string): Tail | 'not streaming' | undefined {
    const last = this.reader.prepare('SELECT p.seq, p.bytes, p.tail FROM turns t JOIN turn_pieces p ON p.turn = t.id WHERE t.id = ? AND t.session = ? ORDER BY p.seq DESC LIMIT 1').get(id, session);
    if (last !== undefined) return tailOfRow(int(last['seq']), int(last['bytes']), text(last['tail']));
    const row = this.reader.prepare('SELECT json FROM turns WHERE id = ? AND session = ?').get(id, session);
    if (row === undefined) return undefined;
    const json = bytesOf(row['json']);
    return isStreamingJson(json) ? tailOfJson(json) : 'not streaming';
  }

  usageOf(user: string): Usage {
    return usageOn(this.reader, user);
  }

  /** The session's streaming turns, from the index that holds them (turns_streaming). */
  streamingTurns(session: string): readonly string[] {
    return this.reader
      .prepare(`SELECT id FROM turns WHERE session = ? AND ${STREAMING_WHERE}`)
      .all(session)
      .map((row) => text(row['id']));
  }

  commit(changes: readonly Change[]): Promise<void> {
    return this.send(changes);
  }

  release(): void {
    // nothing was taken
  }
}
