// One group of writes on PostgreSQL: one transaction on a connection of its own. It opens by
// locking the group's sessions (SELECT ... FOR UPDATE, in id order), so a write decided here
// sees what every other instance committed before it and none can commit in between: If-Match
// and ownership checks hold across instances. It then reads, in the same transaction, what the
// group's writes will ask about those sessions' turns (the writer says which: a parent, a path
// to copy, a subtree to delete), since a write is decided synchronously at the serial point.
// Then its Changes' statements (./apply.ts) go out at once (pipelined) and one COMMIT makes them
// durable together.
import type { TurnKey } from '../../domain/order.js';
import { isStreamingJson } from '../../domain/deltas.js';
import type { ChatSession, Tokens } from '../../domain/records.js';
import type { QueryResult, Row } from '../../pg/query.js';
import { PgServerError } from '../../pg/errors.js';
import type { Queryable } from '../../pg/pool.js';
import type { Change } from '../changes.js';
import { injectedFault } from '../faults.js';
import { GroupConflict, NotReadAhead, WriteRefused, type Group, type TreeNeeds } from '../group.js';
import { tailOfJson, tailOfRow, withDeltas, type Tail } from '../pieces.js';
import { pathSql } from '../sql.js';
import { NO_USAGE, type SessionState, type TreeTurn, type TurnNode, type Usage } from '../store.js';
import { applyChanges, type GroupEvents } from './apply.js';
import { deltasSql, finish, rowOf, SESSION_ROW, turnBytesSql, type SessionRow } from './rows.js';
import { countOf, postgresDialect, sqlText, storeError, textArray, type Indexing } from './values.js';

/**
 * Locks the owners a group charges, one transaction-scoped advisory lock each, so that the
 * groups of several instances charging one owner are decided one at a time: the usage row
 * cannot be locked instead, since a user's first writes have none yet. $1: the schema (the
 * locks of two schemas in one database are apart); $2: the owners of the group's creates;
 * $3: the sessions it locked, whose owners it charges. The keys are taken in order, each once,
 * so two groups cannot deadlock on them (two owners whose names hash alike share a key: their
 * groups wait for each other, nothing worse).
 */
const ownerLocksSql = (S: string): string => `SELECT pg_advisory_xact_lock(hashtext($1), k) FROM (
    SELECT DISTINCT hashtext(o.owner) AS k FROM (SELECT unnest($2::text[]) AS owner UNION SELECT owner FROM ${S}.sessions WHERE id = ANY($3::text[])) o ORDER BY k) keys`;

/** The ids from a turn up to its root, along the parents (each a primary-key lookup). */
const pathCte = (S: string): string => `WITH RECURSIVE ${pathSql(postgresDialect(S, []), 'id = $1', '$2')}`;

/** A turn and its descendants (children found by the parent_id index), and the newest turn of the session outside them. */
const subtreeSql = (S: string): string => `WITH RECURSIVE sub(id) AS (
    SELECT id FROM ${S}.turns WHERE id = $1 AND session = $2
    UNION ALL SELECT t.id FROM ${S}.turns t JOIN sub s ON t.parent_id = s.id)
  SELECT t.id, t.created_at, t.parent_id, ${turnBytesSql(S, 't')}, false, t.input_tokens, t.output_tokens, t.cached_tokens FROM sub JOIN ${S}.turns t ON t.id = sub.id
  UNION ALL
  (SELECT o.id, o.created_at, o.parent_id, 0, true, 0, 0, 0 FROM ${S}.turns o WHERE o.session = $2 AND o.id NOT IN (SELECT id FROM sub) ORDER BY o.created_at DESC, o.id DESC LIMIT 1)`;

/** The columns treeTurnOf reads, of the turns table `t`. */
const treeTurnColumns = (S: string, t: string): string => `${t}.id, ${t}.session, ${t}.created_at, ${t}.parent_id, ${t}.json, ${deltasSql(S, t)}, ${t}.input_tokens, ${t}.output_tokens, ${t}.cached_tokens`;

const tokensOfRow = (r: Row, from: number): Tokens => ({ inputTokens: countOf(r[from]), outputTokens: countOf(r[from + 1]), cachedTokens: countOf(r[from + 2]) });

const treeTurnOf = (r: Row): TreeTurn => {
  const json = withDeltas(Buffer.from(r[4] as string), r[5]);
  return { _id: r[0] as string, createdAt: r[2] as string, parentId: r[3] ?? null, bytes: json.length, json, tokens: tokensOfRow(r, 6) };
};

/** What the group read ahead about one session's turns. */
interface ReadAhead {
  /** Turns by id (asked for, or on a path read). */
  readonly turns: Map<string, TreeTurn>;
  /** Turn ids asked for that are not the session's. */
  readonly absent: Set<string>;
  /** Paths read, root first, by the turn they end at. */
  readonly paths: Map<string, readonly TreeTurn[]>;
  /** Subtrees read by their root, with the newest turn outside each. */
  readonly subtrees: Map<string, { readonly nodes: readonly TurnNode[]; readonly newestOutside: TurnKey | undefined }>;
  /** Its streaming turns, when a write asked. */
  streaming: readonly string[] | undefined;
  /** What deltas need of turns they append to, by id. */
  readonly tails: Map<string, Tail | 'not streaming'>;
}

const aheadOf = (): ReadAhead => ({ turns: new Map(), absent: new Set(), paths: new Map(), subtrees: new Map(), streaming: undefined, tails: new Map() });

export class PgGroup implements Group {
  /** The instance a reply turn of this group is generated by (turns.generator, ./liveness.ts); null when it proves nothing. */
  generator: string | null = null;
  private ended = false;
  /** BEGIN has been sent (at once, or by an unread group with its statements). */
  private begun: boolean;

  constructor(
    private readonly S: string,
    private readonly q: Queryable,
    private readonly done: () => void,
    private readonly rows: ReadonlyMap<string, SessionRow>,
    private readonly usage: ReadonlyMap<string, Usage>,
    private readonly ahead: ReadonlyMap<string, ReadAhead>,
    private readonly events: GroupEvents | undefined,
    private readonly index: Indexing,
    /** Nothing was read or locked (every session new): BEGIN goes out with the statements, and an id found present is a GroupConflict. */
    private readonly unread = false,
  ) {
    this.begun = !unread;
  }

  /**
   * A group of creates alone, whose ids are new (the writer's `fresh`): nothing to lock or read,
   * so no round trip before its decisions; its transaction is begun with its statements, in one
   * write with its COMMIT. Should one of the ids be present after all, the INSERT fails on the
   * primary key and the commit answers GroupConflict: the writer decides the writes again in a
   * group that locks and reads as usual (which refuses that write alone).
   */
  static unread(S: string, q: Queryable, done: () => void, index: Indexing, events?: GroupEvents): PgGroup {
    return new PgGroup(S, q, done, new Map(), new Map(), new Map(), events, index, true);
  }

  /**
   * Opens the transaction, locks the sessions and reads what `needs` name of their turns. With
   * `readUsage` (quotas are checked), `owners` and the locked sessions' owners are locked too
   * (ownerLocksSql), then their usage is read: each statement sees what was committed before it
   * began, so the usage read is what the owners' last group on any instance left. All of it
   * goes out in one write.
   */
  static async open(S: string, q: Queryable, done: () => void, ids: readonly string[], owners: readonly string[], needs: readonly TreeNeeds[], index: Indexing, readUsage: boolean, events?: GroupEvents): Promise<PgGroup> {
    try {
      const locking = textArray([...new Set(ids)].map(sqlText));
      const charged = textArray([...new Set(owners.map(sqlText))]);
      const opening = [
        q.query('BEGIN'),
        q.query(`SELECT ${SESSION_ROW} FROM ${S}.sessions WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE`, [locking]),
        // owners as stored (see sqlText): the keys of the usage table
        ...(readUsage
          ? ([
              q.query(ownerLocksSql(S), [S, charged, locking]),
              q.query(`SELECT owner, sessions, turns, bytes FROM ${S}.usage WHERE owner = ANY($1::text[]) OR owner IN (SELECT owner FROM ${S}.sessions WHERE id = ANY($2::text[]))`, [charged, locking]),
            ] as const)
          : []),
      ] as const;
      q.send?.(); // one round trip, begun now; all awaited, so a failure of any is handled
      const [, locked, , used] = await Promise.all(opening);
      const rows = new Map<string, SessionRow>();
      for (const r of locked.rows) rows.set(r[0] as string, rowOf(r));
      const usage = new Map<string, Usage>();
      // what quotas hold: tokens have none
      for (const row of used?.rows ?? []) usage.set(row[0] as string, { ...NO_USAGE, sessions: countOf(row[1]), turns: countOf(row[2]), bytes: countOf(row[3]) });
      const reads: Promise<void>[] = [];
      const ahead = new Map<string, ReadAhead>();
      for (const need of needs) {
        const row = rows.get(sqlText(need.session));
        if (row === undefined) continue; // no such session: the write is refused before asking
        let a = ahead.get(need.session);
        if (a === undefined) ahead.set(need.session, (a = aheadOf()));
        const read = a;
        if (need.turns.length > 0) {
          reads.push(
            q.query(`SELECT ${treeTurnColumns(S, 't')} FROM ${S}.turns t WHERE t.id = ANY($1::text[]) AND t.session = $2`, [textArray(need.turns.map(sqlText)), sqlText(need.session)]).then((r) => {
              for (const t of r.rows) read.turns.set(t[0] as string, treeTurnOf(t));
              for (const id of need.turns) if (!read.turns.has(id)) read.absent.add(id);
            }),
          );
        }
        for (const end of need.paths) {
          const to = end ?? row.head;
          if (to === null) continue;
          reads.push(
            q.query(`${pathCte(S)} SELECT ${treeTurnColumns(S, 't')} FROM path JOIN ${S}.turns t ON t.id = path.id ORDER BY t.created_at, t.id`, [sqlText(to), sqlText(need.session)]).then((r) => {
              if (r.rows.length === 0) {
                read.absent.add(to);
                return;
              }
              const path = r.rows.map(treeTurnOf);
              read.paths.set(to, path);
              for (const t of path) read.turns.set(t._id, t);
            }),
          );
        }
        const tails = need.tails ?? [];
        if (tails.length > 0) {
          // the last delta's row, else (none since the turn was made or edited) its JSON: never its text and its deltas
          reads.push(
            q.query(
              `SELECT t.id, t.streamed_at IS NOT NULL, p.seq, p.bytes, p.tail, CASE WHEN p.seq IS NULL AND t.streamed_at IS NOT NULL THEN t.json END
               FROM ${S}.turns t LEFT JOIN LATERAL (SELECT seq, bytes, tail FROM ${S}.turn_pieces WHERE turn = t.id ORDER BY seq DESC LIMIT 1) p ON true
               WHERE t.id = ANY($1::text[]) AND t.session = $2`,
              [textArray(tails.map(sqlText)), sqlText(need.session)],
            ).then((r) => {
              for (const t of r.rows) {
                const id = t[0] as string;
                if (t[1] !== 't') read.tails.set(id, 'not streaming');
                else if (t[2] !== null) read.tails.set(id, tailOfRow(Number(t[2]), Number(t[3]), t[4] as string));
                else {
                  const json = Buffer.from(t[5] as string);
                  read.tails.set(id, isStreamingJson(json) ? tailOfJson(json) : 'not streaming');
                }
              }
              for (const id of tails) if (!read.tails.has(id)) read.absent.add(id);
            }),
          );
        }
        if (need.streaming === true && read.streaming === undefined) {
          read.streaming = [];
          reads.push(
            q.query(`SELECT id FROM ${S}.turns WHERE session = $1 AND streamed_at IS NOT NULL`, [sqlText(need.session)]).then((r) => {
              read.streaming = r.rows.map((t) => t[0] as string);
            }),
          );
        }
        for (const root of need.subtrees) {
          reads.push(
            q.query(subtreeSql(S), [sqlText(root), sqlText(need.session)]).then((r) => {
              const nodes: TurnNode[] = [];
              let newestOutside: TurnKey | undefined;
              for (const t of r.rows) {
                if (t[4] === 't') newestOutside = { createdAt: t[1] as string, _id: t[0] as string };
                else nodes.push({ _id: t[0] as string, createdAt: t[1] as string, parentId: t[2] ?? null, bytes: Number(t[3]), tokens: tokensOfRow(t, 5) });
              }
              if (nodes.length === 0) read.absent.add(root);
              else read.subtrees.set(root, { nodes, newestOutside });
            }),
          );
        }
      }
      await Promise.all(reads);
      return new PgGroup(S, q, done, rows, usage, ahead, events, index);
    } catch (e) {
      await q.query('ROLLBACK').catch(() => undefined);
      done();
      throw storeError(e);
    }
  }

  current(id: string): SessionState | undefined {
    const row = this.rows.get(sqlText(id));
    if (row === undefined) return undefined;
    return { session: JSON.parse(row.json) as ChatSession, lastTurn: row.lastTurn, held: row.held, version: () => row.version };
  }

  tail(session: string, id: string): Tail | 'not streaming' | undefined {
    const a = this.aheadFor(session);
    const t = a.tails.get(id);
    if (t !== undefined) return t;
    if (a.absent.has(id)) return undefined;
    throw new NotReadAhead(`the tail of turn ${id} was not read ahead`);
  }

  /** What was read ahead of a session; a session not locked by this group has no committed turns to ask about. */
  private aheadFor(session: string): ReadAhead {
    const a = this.ahead.get(session);
    if (a === undefined) throw new NotReadAhead(`nothing was read ahead of session ${session}`);
    return a;
  }

  streamingTurns(session: string): readonly string[] {
    const s = this.aheadFor(session).streaming;
    if (s === undefined) throw new NotReadAhead(`the streaming turns of session ${session} were not read ahead`);
    return s;
  }

  turn(session: string, id: string): TreeTurn | undefined {
    const a = this.aheadFor(session);
    const t = a.turns.get(id);
    if (t !== undefined) return t;
    if (a.absent.has(id)) return undefined;
    throw new NotReadAhead(`turn ${id} was not read ahead`);
  }

  path(session: string, id: string): readonly TreeTurn[] | undefined {
    const a = this.aheadFor(session);
    if (a.absent.has(id)) return undefined;
    // the path to a turn on a path read is that path's beginning
    for (const path of a.paths.values()) {
      const i = path.findIndex((t) => t._id === id);
      if (i >= 0) return path.slice(0, i + 1);
    }
    throw new NotReadAhead(`the path to turn ${id} was not read ahead`);
  }

  subtree(session: string, id: string): readonly TurnNode[] | undefined {
    const a = this.aheadFor(session);
    const sub = a.subtrees.get(id);
    if (sub !== undefined) return sub.nodes;
    if (a.absent.has(id)) return undefined;
    throw new NotReadAhead(`the subtree of turn ${id} was not read ahead`);
  }

  lastTurnExcept(session: string, excluded: ReadonlySet<string>): TurnKey | undefined {
    const last = this.rows.get(sqlText(session))?.lastTurn;
    if (last === undefined || !excluded.has(last._id)) return last;
    // the newest turn outside a subtree is the newest outside `excluded` when the subtree is all
    // excluded and that turn is not
    for (const sub of this.aheadFor(session).subtrees.values()) {
      if (!sub.nodes.every((n) => excluded.has(n._id))) continue;
      if (sub.newestOutside === undefined || !excluded.has(sub.newestOutside._id)) return sub.newestOutside;
    }
    throw new NotReadAhead(`the newest turn of session ${session} outside those deleted was not read ahead`);
  }

  usageOf(user: string): Usage {
    return this.usage.get(sqlText(user)) ?? NO_USAGE;
  }

  release(): void {
    if (this.ended) return;
    this.ended = true;
    if (!this.begun) {
      this.done(); // no transaction was begun
      return;
    }
    void this.q
      .query('ROLLBACK')
      .catch(() => undefined)
      .finally(this.done);
  }

  async commit(changes: readonly Change[]): Promise<void> {
    try {
      await this.write(changes);
    } catch (e) {
      if (this.unread && e instanceof PgServerError && e.kind === 'unique_violation' && e.constraint === 'sessions_pkey') {
        throw new GroupConflict('a new session id is taken: the group is decided again with its sessions locked', { cause: e });
      }
      // a value or a constraint the database refused (SQLSTATE classes 22, 23, 54): one write's, not the database's state
      if (e instanceof PgServerError && /^(22|23|54)/.test(e.code ?? '')) throw new WriteRefused(e.message, { cause: e });
      throw e;
    }
  }

  private async write(changes: readonly Change[]): Promise<void> {
    const sent: Promise<QueryResult>[] = this.begun ? [] : [this.q.query('BEGIN')];
    this.begun = true;
    try {
      applyChanges({ S: this.S, q: this.q, index: this.index, generator: this.generator, events: this.events }, changes, sent);
      const fault = injectedFault('commit');
      if (fault !== undefined) throw fault;
    } catch (e) {
      await Promise.allSettled(sent);
      this.release();
      throw e;
    }
    await finish(this.q, sent, this.done, () => (this.ended = true));
  }
}
