// One group of writes on PostgreSQL: one transaction on a connection of its own. It opens by
// locking the group's sessions (SELECT ... FOR UPDATE, in id order), so a write decided here
// sees what every other instance committed before it and none can commit in between: If-Match
// and ownership checks hold across instances. Then every statement of the group goes out at
// once (pipelined) and one COMMIT makes them durable together.
import { turnBefore, type TurnKey } from '../../domain/order.js';
import type { ChatSession } from '../../domain/records.js';
import { foldForSearch } from '../../domain/search.js';
import { versionOf } from '../../domain/version.js';
import type { QueryResult } from '../../pg/connection.js';
import type { Queryable } from '../../pg/pool.js';
import type { Announce, Current, Usage } from '../store.js';
import type { Change, Group } from '../writer.js';
import { injectedFault } from '../faults.js';
import { eventStatements } from './events.js';
import { sqlText, storeError, textArray } from './values.js';

/** How a group logs the live feed's events of its changes (absent with EVENTS=off). */
export interface GroupEvents {
  readonly announce: Announce;
  readonly channel: string;
}

/** A session's row as the group locked it, and as its changes leave it. */
export interface SessionRow {
  /** As stored (see sqlText). */
  readonly owner: string;
  readonly json: string;
  readonly jsonBytes: number;
  readonly version: string;
  readonly lastTurn: TurnKey | undefined;
  readonly turnCount: number;
  readonly turnBytes: number;
}

const NO_USAGE: Usage = { sessions: 0, turns: 0, bytes: 0 };

export function rowOf(r: readonly (string | null)[]): SessionRow {
  const [, owner, json, jsonBytes, version, lastAt, lastId, turnCount, turnBytes] = r;
  return {
    owner: owner as string,
    json: json as string,
    jsonBytes: Number(jsonBytes),
    version: version as string,
    lastTurn: lastAt === null || lastId === null || lastAt === undefined || lastId === undefined ? undefined : { createdAt: lastAt, _id: lastId },
    turnCount: Number(turnCount),
    turnBytes: Number(turnBytes),
  };
}

export const SESSION_ROW = 'id, owner, json, json_bytes, version, last_turn_at, last_turn_id, turn_count, turn_bytes';

export class PgGroup implements Group {
  private ended = false;

  constructor(
    private readonly S: string,
    private readonly q: Queryable,
    private readonly done: () => void,
    private readonly rows: ReadonlyMap<string, SessionRow>,
    private readonly usage: ReadonlyMap<string, Usage>,
    private readonly events: GroupEvents | undefined,
  ) {}

  /** Opens the transaction and locks the sessions; `owners` (with the sessions' own) get their usage read. */
  static async open(S: string, q: Queryable, done: () => void, ids: readonly string[], owners: readonly string[], events?: GroupEvents): Promise<PgGroup> {
    try {
      // both sent at once; both awaited, so a failure of either is handled
      const [, locked] = await Promise.all([
        q.query('BEGIN'),
        q.query(`SELECT ${SESSION_ROW} FROM ${S}.sessions WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE`, [textArray([...new Set(ids)].map(sqlText))]),
      ]);
      const rows = new Map<string, SessionRow>();
      for (const r of locked.rows) rows.set(r[0] as string, rowOf(r));
      // owners as stored (see sqlText): the keys of the usage table
      const who = new Set(owners.map(sqlText));
      for (const r of rows.values()) who.add(r.owner);
      const usage = new Map<string, Usage>();
      if (who.size > 0) {
        for (const r of (await q.query(`SELECT owner, sessions, turns, bytes FROM ${S}.usage WHERE owner = ANY($1::text[])`, [textArray([...who])])).rows) {
          usage.set(r[0] as string, { sessions: Number(r[1]), turns: Number(r[2]), bytes: Number(r[3]) });
        }
      }
      return new PgGroup(S, q, done, rows, usage, events);
    } catch (e) {
      await q.query('ROLLBACK').catch(() => undefined);
      done();
      throw storeError(e);
    }
  }

  current(id: string): Current | undefined {
    const row = this.rows.get(sqlText(id));
    if (row === undefined) return undefined;
    return { session: JSON.parse(row.json) as ChatSession, lastTurn: row.lastTurn, version: () => row.version };
  }

  usageOf(user: string): Usage {
    return this.usage.get(sqlText(user)) ?? NO_USAGE;
  }

  release(): void {
    if (this.ended) return;
    this.ended = true;
    void this.q
      .query('ROLLBACK')
      .catch(() => undefined)
      .finally(this.done);
  }

  async commit(changes: readonly Change[]): Promise<void> {
    const { S, q } = this;
    const staged = new Map<string, SessionRow | null>();
    const rowNow = (id: string): SessionRow => {
      const r = staged.has(id) ? staged.get(id) : this.rows.get(id);
      if (r === undefined || r === null) throw new Error(`session ${id} is not in the group`);
      return r;
    };
    const usage = new Map<string, { sessions: number; turns: number; bytes: number }>();
    const charge = (owner: string, sessions: number, turns: number, bytes: number): void => {
      const u = usage.get(owner);
      if (u === undefined) usage.set(owner, { sessions, turns, bytes });
      else {
        u.sessions += sessions;
        u.turns += turns;
        u.bytes += bytes;
      }
    };
    const sent: Promise<QueryResult>[] = [];
    try {
      for (const c of changes) {
        switch (c.kind) {
          case 'create':
          case 'update': {
            const s = c.session;
            const bytes = Buffer.byteLength(c.json);
            const before = c.kind === 'update' ? rowNow(s._id) : undefined;
            sent.push(
              q.query(
                c.kind === 'create'
                  ? `INSERT INTO ${S}.sessions (owner, project, archived, updated_at, name_folded, json, json_bytes, version, id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`
                  : `UPDATE ${S}.sessions SET owner = $1, project = $2, archived = $3, updated_at = $4, name_folded = $5, json = $6, json_bytes = $7, version = $8 WHERE id = $9`,
                [sqlText(s.user), sqlText(s.project), String(s.archived), s.updatedAt, sqlText(foldForSearch(s.name)), c.json, String(bytes), c.version, s._id],
              ),
            );
            const turnCount = before?.turnCount ?? 0;
            const turnBytes = before?.turnBytes ?? 0;
            if (before !== undefined) charge(before.owner, -1, -turnCount, -(before.jsonBytes + turnBytes));
            charge(sqlText(s.user), 1, turnCount, bytes + turnBytes);
            staged.set(s._id, { owner: sqlText(s.user), json: c.json, jsonBytes: bytes, version: c.version, lastTurn: before?.lastTurn, turnCount, turnBytes });
            break;
          }
          case 'turn': {
            const id = c.session._id;
            const before = rowNow(id);
            const json = c.raised ? JSON.stringify(c.session) : before.json;
            const bytes = Buffer.byteLength(json);
            const key = { createdAt: c.turn.createdAt, _id: c.turn._id };
            const last = before.lastTurn === undefined || turnBefore(before.lastTurn, key) ? key : before.lastTurn;
            const version = versionOf(json, last);
            sent.push(q.query(`INSERT INTO ${S}.turns (id, session, created_at, json) VALUES ($1, $2, $3, $4)`, [c.turn._id, id, c.turn.createdAt, c.json.toString('utf8')]));
            sent.push(
              q.query(
                `UPDATE ${S}.sessions SET updated_at = $1, json = $2, json_bytes = $3, version = $4, last_turn_at = $5, last_turn_id = $6, turn_count = turn_count + 1, turn_bytes = turn_bytes + $7 WHERE id = $8`,
                [c.session.updatedAt, json, String(bytes), version, last.createdAt, last._id, String(c.json.length), id],
              ),
            );
            charge(before.owner, 0, 1, c.json.length + bytes - before.jsonBytes);
            staged.set(id, { ...before, json, jsonBytes: bytes, version, lastTurn: last, turnCount: before.turnCount + 1, turnBytes: before.turnBytes + c.json.length });
            break;
          }
          case 'delete': {
            const before = rowNow(c.id);
            sent.push(q.query(`DELETE FROM ${S}.turns WHERE session = $1`, [c.id]));
            sent.push(q.query(`DELETE FROM ${S}.sessions WHERE id = $1`, [c.id]));
            charge(before.owner, -1, -before.turnCount, -(before.jsonBytes + before.turnBytes));
            staged.set(c.id, null);
          }
        }
      }
      // in owner order, so two groups touching the same owners cannot deadlock on their rows
      for (const owner of [...usage.keys()].sort()) {
        const u = usage.get(owner) as { sessions: number; turns: number; bytes: number };
        sent.push(
          q.query(
            `INSERT INTO ${S}.usage (owner, sessions, turns, bytes) VALUES ($1, $2, $3, $4)
             ON CONFLICT (owner) DO UPDATE SET sessions = usage.sessions + excluded.sessions, turns = usage.turns + excluded.turns, bytes = usage.bytes + excluded.bytes`,
            [owner, String(u.sessions), String(u.turns), String(u.bytes)],
          ),
        );
        if (u.sessions < 0) sent.push(q.query(`DELETE FROM ${S}.usage WHERE owner = $1 AND sessions = 0`, [owner]));
      }
      // last before COMMIT: the events' ids are taken under a lock held until COMMIT (./events.ts)
      if (this.events !== undefined) sent.push(...eventStatements(q, S, this.events.channel, this.events.announce(changes)));
      const fault = injectedFault('commit');
      if (fault !== undefined) throw fault;
    } catch (e) {
      await Promise.allSettled(sent);
      this.release();
      throw e;
    }
    await finish(q, sent, this.done, () => (this.ended = true));
  }
}

/**
 * Sends COMMIT after `sent` and waits for all of them. The first statement that failed is the
 * error (those after it only say the transaction was aborted); a COMMIT answered ROLLBACK means
 * nothing was written.
 */
export async function finish(q: Queryable, sent: readonly Promise<QueryResult>[], done: () => void, ended: () => void): Promise<void> {
  const commit = q.query('COMMIT');
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
