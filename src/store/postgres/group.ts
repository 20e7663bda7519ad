// One group of writes on PostgreSQL: one transaction on a connection of its own. It opens by
// locking the group's sessions (SELECT ... FOR UPDATE, in id order), so a write decided here
// sees what every other instance committed before it and none can commit in between: If-Match
// and ownership checks hold across instances. It then reads, in the same transaction, what the
// group's writes will ask about those sessions' turns (the writer says which: a parent, a path
// to copy, a subtree to delete), since a write is decided synchronously at the serial point.
// Then every statement of the group goes out at once (pipelined) and one COMMIT makes them
// durable together.
import type { TurnKey } from '../../domain/order.js';
import { isStreamingJson } from '../../domain/deltas.js';
import { tokensOf, type ChatSession, type Tokens } from '../../domain/records.js';
import { foldForSearch } from '../../domain/search.js';
import type { QueryResult, Row } from '../../pg/connection.js';
import type { Queryable } from '../../pg/pool.js';
import { NO_USAGE, type Announce, type Held, type SessionState, type TreeTurn, type TurnNode, type Usage } from '../store.js';
import type { Change, UsageDelta } from '../changes.js';
import { endText, piecesText, tailOfJson, tailOfRow, withDeltas, type Tail } from '../pieces.js';
import { GroupConflict, NotReadAhead, type Group, type TreeNeeds } from '../group.js';
import { PgServerError } from '../../pg/errors.js';
import { injectedFault } from '../faults.js';
import { JUMP, placesOfChain } from '../tree-index.js';
import { STREAMING_MARK, STREAMING_MARK_FROM_END } from '../../domain/deltas.js';
import { eventStatements } from './events.js';
import { countOf, keptColumns, postgresDialect, settledSql, sqlText, storeError, textArray, totalSql, wordsSql, type Indexing } from './values.js';
import { TOKEN_FIGURES, TotalDelta, type TokenFigure } from '../totals.js';
import { pathSql } from '../sql.js';

/** How a group logs the live feed's events of its changes (absent with EVENTS=off). */
export interface GroupEvents {
  readonly announce: Announce;
  readonly channel: string;
}

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

/** The tokens of a turn's usage, as the turns table keeps them ($ columns of a turn's row). */
const tokensParams = (t: Tokens): [string, string, string] => [String(t.inputTokens), String(t.outputTokens), String(t.cachedTokens)];

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
      throw e;
    }
  }

  private async write(changes: readonly Change[]): Promise<void> {
    const { S, q } = this;
    // what the writer decided each change adds to its owner, added up per owner (owners as stored: see sqlText)
    const usage = new Map<string, TotalDelta>();
    const charge = (u: UsageDelta): void => {
      const owner = sqlText(u.owner);
      let d = usage.get(owner);
      if (d === undefined) usage.set(owner, (d = new TotalDelta()));
      d.add(u);
    };
    /** The session's tokens counted again from its turns as the group leaves them, when the writer took from a figure at the top. */
    const recountIfAsked = (id: string, held: Held): void => {
      if (held.recount === true) sent.push(q.query(recountTokensSql(S), [id]));
    };
    const sent: Promise<QueryResult>[] = this.begun ? [] : [q.query('BEGIN')];
    this.begun = true;
    /** The session row as a change of its turns leaves it: its JSON, version, head, newest turn and what its turns hold. */
    const setSession = (s: ChatSession, json: string, version: string, lastTurn: TurnKey | undefined, held: Held): void => {
      sent.push(
        q.query(
          `UPDATE ${S}.sessions SET updated_at = $1, json = $2, json_bytes = $3, version = $4, head_turn_id = $5, last_turn_at = $6, last_turn_id = $7,
             turn_count = $8, turn_bytes = $9, input_tokens = $10, output_tokens = $11, cached_tokens = $12 WHERE id = $13`,
          [s.updatedAt, json, String(Buffer.byteLength(json)), version, s.headTurnId, lastTurn?.createdAt ?? null, lastTurn?._id ?? null, ...heldParams(held), s._id],
        ),
      );
      recountIfAsked(s._id, held);
    };
    /** Consecutive creates, inserted by one statement: a group of creates is one INSERT, not one per session. */
    let creates: SessionColumns[] = [];
    const insertCreates = (): void => {
      if (creates.length > 0) sent.push(q.query(insertSessionsSql(S), sessionsParams(creates)));
      creates = [];
    };
    try {
      for (const c of changes) {
        if (c.kind !== 'create') insertCreates();
        charge(c.usage);
        switch (c.kind) {
          case 'create':
          case 'update': {
            const s = c.session;
            const columns: SessionColumns = [sqlText(s.user), sqlText(s.project), String(s.archived), s.updatedAt, sqlText(foldForSearch(s.name)), c.json, String(Buffer.byteLength(c.json)), c.version, s.headTurnId, s._id, ...keptColumns(s), this.index.name(s.name)];
            if (c.kind === 'create') creates.push(columns);
            else {
              sent.push(
                q.query(
                  `UPDATE ${S}.sessions SET owner = $1, project = $2, archived = $3, updated_at = $4, name_folded = $5, json = $6, json_bytes = $7, version = $8, head_turn_id = $9,
                     tags = $11::text[], expires_at = $12, keep = $13, name_words = ${wordsSql('$14')} WHERE id = $10`,
                  columns,
                ),
              );
            }
            break;
          }
          case 'turn': {
            sent.push(q.query(insertTurnSql(S), [c.turn._id, c.session._id, c.turn.parentId, c.turn.createdAt, c.json.toString('utf8'), this.index.turn(c.json), ...tokensParams(tokensOf(c.turn.usage)), c.pathKey ?? null, c.generated === true ? this.generator : null]));
            // the writer made it the session's newest turn
            setSession(c.session, c.sessionJson, c.version, { createdAt: c.turn.createdAt, _id: c.turn._id }, c.held);
            break;
          }
          case 'editTurn': {
            // an edit's text is found at once; a delta's waits for the turn's next edit (docs/DECISIONS.md). The edit holds its deltas' text (the writer folded it in): their rows go
            sent.push(
              q.query(
                `UPDATE ${S}.turns SET json = $1, streamed_at = ${streamedAtSql('$1::text')}, words = ${wordsSql('$3')}, input_tokens = $4, output_tokens = $5, cached_tokens = $6,
                   path_key = CASE WHEN $7::boolean THEN $8::text ELSE path_key END WHERE id = $2`,
                [c.json.toString('utf8'), c.turn._id, this.index.turn(c.json), ...tokensParams(tokensOf(c.turn.usage)), c.pathKey === undefined ? 'false' : 'true', c.pathKey ?? null],
              ),
            );
            sent.push(q.query(`DELETE FROM ${S}.turn_pieces WHERE turn = $1`, [c.turn._id]));
            setSession(c.session, c.sessionJson, c.version, c.lastTurn, c.held);
            break;
          }
          case 'delta': {
            // a row of its own: the turn's row (its JSON, its indexes) is not touched
            sent.push(q.query(`INSERT INTO ${S}.turn_pieces (turn, seq, pieces, bytes, tail) VALUES ($1, $2, $3, $4, $5)`, [c.turnId, String(c.seq), piecesText(c.pieces), String(c.bytes), endText(c.end)]));
            sent.push(q.query(`UPDATE ${S}.sessions SET turn_count = $1, turn_bytes = $2, input_tokens = $3, output_tokens = $4, cached_tokens = $5 WHERE id = $6`, [...heldParams(c.held), c.session._id]));
            recountIfAsked(c.session._id, c.held);
            break;
          }
          case 'deleteTurns': {
            sent.push(q.query(`DELETE FROM ${S}.turn_pieces WHERE turn = ANY($1::text[])`, [textArray(c.ids)]));
            sent.push(q.query(`DELETE FROM ${S}.turns WHERE id = ANY($1::text[]) AND session = $2`, [textArray(c.ids), c.sessionId]));
            setSession(c.session, c.sessionJson, c.version, c.lastTurn, c.held);
            break;
          }
          case 'fork': {
            const s = c.session;
            const last = c.turns[c.turns.length - 1]?.turn;
            sent.push(
              q.query(
                `INSERT INTO ${S}.sessions (owner, project, archived, updated_at, name_folded, json, json_bytes, version, head_turn_id, id, last_turn_at, last_turn_id,
                   turn_count, turn_bytes, input_tokens, output_tokens, cached_tokens, tags, expires_at, keep, name_words)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18::text[], $19, $20, ${wordsSql('$21')})`,
                [sqlText(s.user), sqlText(s.project), String(s.archived), s.updatedAt, sqlText(foldForSearch(s.name)), c.json, String(Buffer.byteLength(c.json)), c.version, s.headTurnId, s._id, last?.createdAt ?? null, last?._id ?? null, ...heldParams(c.held), ...keptColumns(s), this.index.name(s.name)],
              ),
            );
            const places = placesOfChain(c.turns.map((t) => t.turn._id));
            if (c.turns.length > 0) {
              const tokens = c.turns.map((t) => tokensOf(t.turn.usage));
              // all the copies in one statement: a long path is one round of parsing, not one per turn
              sent.push(
                q.query(
                  `INSERT INTO ${S}.turns (id, session, parent_id, created_at, json, depth, skip_id, streamed_at, words, input_tokens, output_tokens, cached_tokens)
                   SELECT id, $1, parent_id, created_at, json, depth, skip_id, ${streamedAtSql('json')}, ${wordsSql('words')}, input_tokens, output_tokens, cached_tokens
                   FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::int[], $7::text[], $8::text[], $9::bigint[], $10::bigint[], $11::bigint[])
                     AS c(id, parent_id, created_at, json, depth, skip_id, words, input_tokens, output_tokens, cached_tokens)`,
                  [
                    s._id,
                    textArray(c.turns.map((t) => t.turn._id)),
                    nullableTextArray(c.turns.map((t) => t.turn.parentId)),
                    textArray(c.turns.map((t) => t.turn.createdAt)),
                    textArray(c.turns.map((t) => t.json.toString('utf8'))),
                    `{${places.map((p) => p.depth).join(',')}}`,
                    nullableTextArray(places.map((p) => p.skipId)),
                    textArray(c.turns.map((t) => this.index.turn(t.json))),
                    `{${tokens.map((t) => t.inputTokens).join(',')}}`,
                    `{${tokens.map((t) => t.outputTokens).join(',')}}`,
                    `{${tokens.map((t) => t.cachedTokens).join(',')}}`,
                  ],
                ),
              );
            }
            break;
          }
          case 'delete': {
            sent.push(q.query(`DELETE FROM ${S}.turn_pieces p USING ${S}.turns t WHERE t.session = $1 AND p.turn = t.id`, [c.id]));
            sent.push(q.query(`DELETE FROM ${S}.turns WHERE session = $1`, [c.id]));
            sent.push(q.query(`DELETE FROM ${S}.sessions WHERE id = $1`, [c.id]));
          }
        }
      }
      insertCreates();
      // every owner's usage in one statement, its rows in owner order, so two groups touching the
      // same owners cannot deadlock on their rows
      const owners = [...usage.keys()].sort();
      if (owners.length > 0) {
        const figures = owners.map((o) => usage.get(o) as TotalDelta);
        const column = (k: 'sessions' | 'turns' | 'bytes'): string => `{${figures.map((u) => u[k]).join(',')}}`;
        // a figure counted again adds nothing here: the statement after this one counts it
        const tokens = (k: TokenFigure): string => `{${figures.map((u) => (u.token(k).recount ? 0 : u.token(k).delta)).join(',')}}`;
        const settled = (c: string): string => `${c} = ${settledSql(`usage.${c}`, `excluded.${c}`, `(SELECT ${totalSql(`s.${c}`)} FROM ${S}.sessions s WHERE s.owner = usage.owner)`)}`;
        sent.push(
          q.query(
            `INSERT INTO ${S}.usage (owner, sessions, turns, bytes, input_tokens, output_tokens, cached_tokens)
             SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::numeric[], $6::numeric[], $7::numeric[])
             ON CONFLICT (owner) DO UPDATE SET sessions = usage.sessions + excluded.sessions, turns = usage.turns + excluded.turns, bytes = usage.bytes + excluded.bytes,
               ${TOKEN_COLUMNS.map(settled).join(', ')}`,
            [textArray(owners), column('sessions'), column('turns'), column('bytes'), tokens('inputTokens'), tokens('outputTokens'), tokens('cachedTokens')],
          ),
        );
        // the rows are this transaction's now (locked by the statement above): counting them again takes no lock in another order
        owners.forEach((owner, i) => {
          const recount = TOKEN_FIGURES.map((k) => (figures[i] as TotalDelta).token(k).recount);
          if (!recount.some((r) => r)) return;
          const again = TOKEN_COLUMNS.filter((_, j) => recount[j]).map((c) => `${c} = (SELECT ${totalSql(`s.${c}`)} FROM ${S}.sessions s WHERE s.owner = usage.owner)`);
          sent.push(q.query(`UPDATE ${S}.usage SET ${again.join(', ')} WHERE owner = $1`, [owner]));
        });
        const shrunk = owners.filter((_, i) => (figures[i] as TotalDelta).sessions < 0);
        if (shrunk.length > 0) sent.push(q.query(`DELETE FROM ${S}.usage WHERE owner = ANY($1::text[]) AND sessions = 0`, [textArray(shrunk)]));
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

/** The token columns of the usage and sessions rows, in TOKEN_FIGURES' order. */
const TOKEN_COLUMNS = ['input_tokens', 'output_tokens', 'cached_tokens'] as const;

/** One session's tokens ($1) counted again from its turns' rows (a Held that says `recount`). */
const recountTokensSql = (S: string): string =>
  `UPDATE ${S}.sessions SET (input_tokens, output_tokens, cached_tokens) = (SELECT ${TOKEN_COLUMNS.map((c) => totalSql(`t.${c}`)).join(', ')} FROM ${S}.turns t WHERE t.session = $1) WHERE id = $1`;

/** What a session's turns hold, as the columns turn_count, turn_bytes and the three tokens take it. */
function heldParams(h: Held): [string, string, string, string, string] {
  return [String(h.turns), String(h.turnBytes), ...tokensParams(h)];
}

/** A session's columns as a create or an update writes them, in the order of their parameters ($1...$14). */
type SessionColumns = [owner: string, project: string, archived: string, updatedAt: string, nameFolded: string, json: string, jsonBytes: string, version: string, head: string | null, id: string, tags: string, expiresAt: string | null, keep: string, words: string];

/** New sessions, one row per element of the arrays sessionsParams makes. */
const insertSessionsSql = (S: string): string => `INSERT INTO ${S}.sessions (owner, project, archived, updated_at, name_folded, json, json_bytes, version, head_turn_id, id, tags, expires_at, keep, name_words)
  SELECT owner, project, archived, updated_at, name_folded, json, json_bytes, version, head_turn_id, id, tags::text[], expires_at, keep, ${wordsSql('words')}
  FROM unnest($1::text[], $2::text[], $3::boolean[], $4::text[], $5::text[], $6::text[], $7::integer[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::boolean[], $14::text[])
    AS c(owner, project, archived, updated_at, name_folded, json, json_bytes, version, head_turn_id, id, tags, expires_at, keep, words)`;

/** The parameters of insertSessionsSql: each column's values as one array (a session's tags, an array literal, are one text). */
function sessionsParams(rows: readonly SessionColumns[]): string[] {
  const column = (i: number): string => nullableTextArray(rows.map((r) => r[i] as string | null));
  return Array.from({ length: 14 }, (_, i) => column(i));
}

/** A turn's row, its depth and jump pointer made from its parent's (inserted before it, in this transaction or earlier). */
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
