// The PostgreSQL engine's reads: each a query of its own on the pool (nothing is kept in an
// instance's memory), whole lists, exports and a reply's conversation in a REPEATABLE READ snapshot
// on a connection of their own; search from the GIN index or by walking the caller's sessions.
import { PAGE_BYTE_BUDGET, PAGE_SCAN_BUDGET, SCAN_CHUNK, SCAN_CHUNK_BYTES, type SessionKey, type TurnKey } from '../../domain/order.js';
import type { ChatSession } from '../../domain/records.js';
import type { Liveness } from '../../domain/retention.js';
import { textHolds } from '../../domain/search.js';
import type { Row } from '../../pg/query.js';
import type { Pool, Queryable } from '../../pg/pool.js';
import { withDeltas } from '../pieces.js';
import { keysetFrom, walkBudget, walkSearch, type TurnsFrom, type WalkSource } from '../search-walk.js';
import { SerialWrites } from '../serial-writes.js';
import { SessionRow } from '../session-row.js';
import { conversationKeySql, expiredSql, liveSql, pathKeySql, pathSql } from '../sql.js';
import {
  NO_USAGE,
  TurnNotFound,
  type Branch,
  type ExpiredSession,
  type ExportItem,
  type ExportSnapshot,
  type Page,
  type SearchFilter,
  type SearchHit,
  type SearchKey,
  type SessionFilter,
  type SessionRecord,
  type TurnRecord,
  type Usage,
} from '../store.js';
import { pageByDepthSql } from '../tree-index.js';
import { budgetedTurnPage } from '../turn-page.js';
import { pageSql, scanSql } from './lists.js';
import { deltasSql, turnBytesSql } from './rows.js';
import { countOf, postgresDialect, sqlText, storeError, textArray } from './values.js';

const CHUNK = 256;
/** Below this many times SEARCH_WALK_FROM, the planner's estimate of a word's matches is checked by counting them. */
const UNSURE_UP_TO = 4;

/** The words as a tsquery of prefixes, every one required (the words are letters and digits only). */
function tsQuery(words: readonly string[]): string {
  return words.map((w) => `'${w}':*`).join(' & ');
}

/** Sessions a search walk lists at a time. */
const WALK_SESSIONS = 64;


/** A turn from a row of its id, createdAt, JSON and deltas (./rows.ts deltasSql), in that order. */
const turnOf = (r: Row): TurnRecord => ({ _id: r[0] as string, createdAt: r[1] as string, json: withDeltas(Buffer.from(r[2] as string), r[3]) });
/** A row of a budgeted page: past the budget its JSON is left out (null), saying only that there is more. */
const pagedTurnOf = (r: Row): TurnRecord | undefined => (r[2] === null ? undefined : turnOf(r));

/** Every owner's usage summed, in Usage's order. */
export const USAGE_SUMS = ['sessions', 'turns', 'bytes', 'input_tokens', 'output_tokens', 'cached_tokens'].map((c) => `coalesce(sum(${c}), 0)`).join(', ');

/** A Usage from a row of its six figures, in Usage's order. */
export function usageOfRow(r: Row): Usage {
  return { sessions: countOf(r[0]), turns: countOf(r[1]), bytes: countOf(r[2]), inputTokens: countOf(r[3]), outputTokens: countOf(r[4]), cachedTokens: countOf(r[5]) };
}

/** A connection of its own until `done` is called. */
export function lease(pool: Pool): Promise<{ q: Queryable; done: () => void }> {
  return new Promise((resolve, reject) => {
    let granted = false;
    pool
      .withConnection(
        (q) =>
          new Promise<void>((done) => {
            granted = true;
            resolve({ q, done: () => done() });
          }),
      )
      .catch((e: unknown) => {
        if (!granted) reject(storeError(e));
      });
  });
}

/** Turns a client failure into what the store reports. */
export function rethrow(e: unknown): never {
  throw storeError(e);
}

/** The reads every PostgreSQL store (a server's, a command's, a snapshot's) answers; the writes are SerialWrites'. */
export abstract class PgReads extends SerialWrites {
  protected abstract readonly pool: Pool;
  /** The schema, quoted. */
  protected abstract readonly S: string;
  /** Documents of a query's rarest word from which search walks the sessions (SEARCH_WALK_FROM). */
  protected abstract readonly searchWalkFrom: number | undefined;
  /** Snapshots open at once at most: whole lists hold a connection while the client reads. */
  protected abstract readonly scanMax: number;
  private scans = 0;
  private readonly scanWaiters: (() => void)[] = [];

  getSession(id: string): Promise<SessionRecord | undefined> {
    return this.pool.query(`SELECT json, version FROM ${this.S}.sessions WHERE id = $1`, [sqlText(id)]).then((r) => {
      const row = r.rows[0];
      return row === undefined ? undefined : new SessionRow(row[0] as string, row[1] as string);
    }, rethrow);
  }

  /**
   * Search hits newest first: from the GIN index when the planner expects fewer than
   * SEARCH_WALK_FROM turns to hold the query (the query sorts its matches), else by walking the caller's sessions newest first and
   * stopping at the page (../search-walk.ts).
   */
  async search(filter: SearchFilter, after: SearchKey | undefined, limit: number): Promise<Page<SearchHit, SearchKey>> {
    const walkFrom = this.searchWalkFrom ?? Infinity;
    /** Whether few turns hold the query (fewer than SEARCH_WALK_FROM, estimated or counted). */
    let few = false;
    if (walkFrom !== Infinity) {
      // the planner's estimate from the table's statistics: counting even a few thousand matches
      // would read as many rows (a word in every turn is found by reading the table)
      const plan = (await this.pool.query(`EXPLAIN SELECT 1 FROM ${this.S}.turns WHERE words @@ $1::tsquery`, [tsQuery(filter.words)]).catch(rethrow)).rows;
      let n = Number(/ rows=(\d+)/.exec(String(plan[0]?.[0] ?? ''))?.[1] ?? 0);
      if (n >= walkFrom && n < UNSURE_UP_TO * walkFrom) {
        // a word the statistics do not know is given a share of the table (up to 0.5%): near the
        // threshold, the matches are counted (no further than it) rather than trusted
        n = Number((await this.pool.query(`SELECT count(*) FROM (SELECT 1 FROM ${this.S}.turns WHERE words @@ $1::tsquery LIMIT $2) x`, [tsQuery(filter.words), String(walkFrom)]).catch(rethrow)).rows[0]?.[0] ?? 0);
      }
      few = n < walkFrom;
      if (n >= walkFrom) {
        const walked = await walkSearch(this.walkSource(filter), after, limit, walkBudget(n, walkFrom)).catch(rethrow);
        if (walked !== undefined) return walked;
      }
    }
    const params: string[] = [];
    const p = (v: string): string => {
      params.push(v);
      return `$${params.length}`;
    };
    const query = p(tsQuery(filter.words));
    const where: string[] = [];
    if (filter.user !== undefined) {
      where.push(`s.owner = ${p(sqlText(filter.user))}`);
      if (filter.project !== undefined) where.push(`s.project = ${p(sqlText(filter.project))}`);
    } else where.push(`s.project = ${p(sqlText(filter.project ?? ''))}`);
    if (filter.archived !== 'all') where.push(`s.archived = ${filter.archived === 'true'}`);
    where.push(liveSql(postgresDialect(this.S, params), filter.live));
    const keyset = (at: string, doc: string): string => (after === undefined ? '' : ` AND (${at}, ${doc}) < (${p(after.at)}, ${p(after.doc)})`);
    const names = `SELECT s.updated_at AS at, s.id AS doc, s.json, s.version, NULL::text AS turn_json, NULL::text AS turn_deltas FROM ${this.S}.sessions s
      WHERE s.name_words @@ ${query}::tsquery AND ${where.join(' AND ')}${keyset('s.updated_at', 's.id')}`;
    // few, each match's session is looked up by its key (OFFSET 0 keeps the planner from
    // flattening it): planned for the estimate of thousands of matches, the join read every
    // session of the table into a hash first (19 of 26 ms for a word in one turn of 1M)
    const turns = few
      ? `SELECT t.created_at, t.id, s.json, s.version, t.json, ${deltasSql(this.S, 't')} FROM ${this.S}.turns t
          CROSS JOIN LATERAL (SELECT s.json, s.version FROM ${this.S}.sessions s WHERE s.id = t.session AND ${where.join(' AND ')} OFFSET 0) s
          WHERE t.words @@ ${query}::tsquery${keyset('t.created_at', 't.id')}`
      : `SELECT t.created_at, t.id, s.json, s.version, t.json, ${deltasSql(this.S, 't')} FROM ${this.S}.turns t JOIN ${this.S}.sessions s ON s.id = t.session
          WHERE t.words @@ ${query}::tsquery AND ${where.join(' AND ')}${keyset('t.created_at', 't.id')}`;
    const rows = (await this.pool.query(`${names} UNION ALL ${turns} ORDER BY at DESC, doc DESC LIMIT ${p(String(limit + 1))}`, params).catch(rethrow)).rows;
    const items: SearchHit[] = rows.slice(0, limit).map((r) => {
      const key = { at: r[0] as string, doc: r[1] as string };
      const turn = r[4] === null ? undefined : { _id: key.doc, createdAt: key.at, json: withDeltas(Buffer.from(r[4] as string), r[5]) };
      return { key, session: new SessionRow(r[2] as string, r[3] as string), turn };
    });
    return { items, next: rows.length > limit ? items[items.length - 1]?.key : undefined };
  }

  /**
   * The caller's sessions as its lists read them, and each one's next turns holding the query,
   * newest first, read for several sessions in one query (PostgreSQL checks the words: the index's
   * own tsvector, read by row).
   */
  private walkSource(filter: SearchFilter): WalkSource<SessionRecord, SessionKey, TurnRecord> {
    const query = tsQuery(filter.words);
    const sql = `SELECT x.i, t.id, t.created_at, t.json, t.deltas FROM unnest($1::text[], $2::text[], $3::text[], $5::int[]) WITH ORDINALITY AS x(sid, at, doc, want, i)
      CROSS JOIN LATERAL (SELECT id, created_at, json, ${deltasSql(this.S, 't')} AS deltas FROM ${this.S}.turns t WHERE t.session = x.sid AND (t.created_at, t.id) < (x.at COLLATE "C", x.doc COLLATE "C") AND t.words @@ $4::tsquery
        ORDER BY t.created_at DESC, t.id DESC LIMIT x.want) t`;
    const words = filter.words;
    return {
      sessions: (after) => this.listSessions(filter, after, WALK_SESSIONS),
      updatedAt: (r) => r.session.updatedAt,
      id: (r) => r.session._id,
      nameMatches: (r) => textHolds(r.session.name, words),
      turns: async (from) => {
        const rows = (await this.pool.query(sql, [textArray(from.map((f) => f.s.session._id)), textArray(from.map((f) => keysetFrom(f.before)[0])), textArray(from.map((f) => keysetFrom(f.before)[1])), query, `{${from.map((f) => f.want).join(',')}}`])).rows;
        const hits = from.map((): { key: SearchKey; turn: TurnRecord }[] => []);
        for (const r of rows) hits[Number(r[0]) - 1]?.push({ key: { at: r[2] as string, doc: r[1] as string }, turn: { _id: r[1] as string, createdAt: r[2] as string, json: withDeltas(Buffer.from(r[3] as string), r[4]) } });
        return hits.map((h, k) => {
          const last = h[h.length - 1];
          const want = (from[k] as TurnsFrom<SessionRecord>).want;
          // fewer hits than asked for: PostgreSQL read the session's turns to its first; at least `want` of them count
          return { hits: h, next: h.length === want && last !== undefined ? last.key : undefined, examined: Math.max(h.length, want) };
        });
      },
      hit: (s, key, turn) => ({ key, session: s, turn }),
    };
  }

  async listSessions(filter: SessionFilter, after: SessionKey | undefined, limit: number): Promise<Page<SessionRecord, SessionKey>> {
    if ((filter.user ?? filter.project) === undefined) return { items: [], next: undefined };
    const sql = pageSql(this.S, filter, after, limit, PAGE_SCAN_BUDGET);
    const rows = (await this.pool.query(sql.text, sql.params).catch(rethrow)).rows;
    const items: SessionRecord[] = [];
    let examined = 0;
    let last: SessionKey | undefined;
    let next: SessionKey | undefined;
    for (const r of rows) {
      if (last !== undefined && (items.length === limit || examined === PAGE_SCAN_BUDGET)) {
        next = last;
        break;
      }
      examined++;
      last = { updatedAt: r[1] as string, _id: r[0] as string };
      if (r[2] !== null) items.push(new SessionRow(r[2] as string, r[3] as string));
    }
    return { items, next };
  }

  async *scanSessions(filter: SessionFilter): AsyncIterable<readonly SessionRecord[]> {
    if ((filter.user ?? filter.project) === undefined) return;
    yield* this.inSnapshot(async function* (q: Queryable, S: string) {
      let after: SessionKey | undefined;
      for (;;) {
        // a chunk per SCAN_CHUNK rows examined (empty when the filter left them all out), so no
        // query scans more than that and the list yields to other requests between chunks
        const sql = scanSql(S, filter, after, SCAN_CHUNK);
        const rows = (await q.query(sql.text, sql.params)).rows;
        yield rows.flatMap((r) => (r[2] === null ? [] : [new SessionRow(r[2] as string, r[3] as string)]));
        const lastRow = rows[rows.length - 1];
        if (rows.length < SCAN_CHUNK || lastRow === undefined) return;
        after = { updatedAt: lastRow[1] as string, _id: lastRow[0] as string };
      }
    });
  }

  async listTurns(sessionId: string, after: TurnKey | undefined, limit: number, branch?: Branch): Promise<Page<TurnRecord, TurnKey>> {
    if (branch !== undefined) {
      const rows = await this.branchPage(sessionId, branch, after, limit + 1);
      if (rows.length === 0 && branch !== 'head' && !(await this.hasTurn(this.pool, sessionId, branch.turnId))) throw new TurnNotFound();
      return budgetedTurnPage(rows, limit, PAGE_BYTE_BUDGET, pagedTurnOf);
    }
    const sql = turnsSql(this.S, sessionId, after, limit + 1, PAGE_BYTE_BUDGET);
    return budgetedTurnPage((await this.pool.query(sql.text, sql.params).catch(rethrow)).rows, limit, PAGE_BYTE_BUDGET, pagedTurnOf);
  }

  async getTurn(sessionId: string, turnId: string): Promise<TurnRecord | undefined> {
    const row = (await this.pool.query(`SELECT t.id, t.created_at, t.json, ${deltasSql(this.S, 't')} FROM ${this.S}.turns t WHERE t.id = $1 AND t.session = $2`, [sqlText(turnId), sqlText(sessionId)]).catch(rethrow)).rows[0];
    return row === undefined ? undefined : turnOf(row);
  }

  async turnsByPathKey(user: string, pathKey: string, live: Liveness, limit: number): Promise<readonly { readonly session: string; readonly turn: string }[]> {
    const params: string[] = [];
    const rows = (await this.pool.query(pathKeySql(postgresDialect(this.S, params), user, pathKey, live, limit), params).catch(rethrow)).rows;
    return rows.map((r) => ({ session: r[0] as string, turn: r[1] as string }));
  }

  async sessionOfTurn(turnId: string): Promise<string | undefined> {
    const row = (await this.pool.query(`SELECT session FROM ${this.S}.turns WHERE id = $1`, [sqlText(turnId)]).catch(rethrow)).rows[0];
    return row === undefined ? undefined : (row[0] as string);
  }

  async sessionByConversationKey(user: string, key: string, live: Liveness): Promise<string | undefined> {
    const params: string[] = [];
    const row = (await this.pool.query(conversationKeySql(postgresDialect(this.S, params), user, key, live), params).catch(rethrow)).rows[0];
    return row === undefined ? undefined : (row[0] as string);
  }

  async *scanTurns(sessionId: string, branch?: Branch): AsyncIterable<readonly TurnRecord[]> {
    const hasTurn = (q: Queryable, id: string): Promise<boolean> => this.hasTurn(q, sessionId, id);
    yield* this.inSnapshot(async function* (q: Queryable, S: string) {
      if (branch === undefined) {
        yield* turnPages(q, S, sessionId);
        return;
      }
      if (branch !== 'head' && !(await hasTurn(q, branch.turnId))) throw new TurnNotFound();
      let after: TurnKey | undefined;
      for (;;) {
        // a chunk of SCAN_CHUNK turns or SCAN_CHUNK_BYTES of JSON, as sqlite's: a path of long turns is never read whole at once
        const sql = branchQuery(S, sessionId, branch, after, SCAN_CHUNK + 1, SCAN_CHUNK_BYTES);
        const page = budgetedTurnPage((await q.query(sql.text, sql.params)).rows, SCAN_CHUNK, SCAN_CHUNK_BYTES, pagedTurnOf);
        if (page.items.length > 0) yield page.items as TurnRecord[];
        if (page.next === undefined) return;
        after = page.next;
      }
    });
  }

  /**
   * The turns of a page of a branch: by depth when the cursor is a turn of the path (or there is
   * none), else (the cursor's turn deleted, the head moved elsewhere) by walking the path from
   * its end to the cursor, which gives the same page wherever the cursor is.
   */
  private async branchPage(sessionId: string, branch: Branch, after: TurnKey | undefined, limit: number): Promise<Row[]> {
    const byDepth = async (lo: string | undefined): Promise<Row[] | undefined> => {
      const sql = branchPageQuery(this.S, sessionId, branch, lo, limit);
      const rows = (await this.pool.query(sql.text, sql.params).catch(rethrow)).rows;
      // the page's first turn follows the cursor, or the cursor is not on this path
      if (after !== undefined && rows[0]?.[4] !== sqlText(after._id)) return undefined;
      return rows;
    };
    const page = await byDepth(after === undefined ? undefined : sqlText(after._id));
    if (page !== undefined) return page;
    const sql = branchQuery(this.S, sessionId, branch, after, limit);
    return (await this.pool.query(sql.text, sql.params).catch(rethrow)).rows;
  }

  private async hasTurn(q: Queryable, sessionId: string, id: string): Promise<boolean> {
    return (await q.query(`SELECT 1 FROM ${this.S}.turns WHERE id = $1 AND session = $2`, [sqlText(id), sqlText(sessionId)]).catch(rethrow)).rows.length > 0;
  }

  /**
   * Runs `read` in a REPEATABLE READ, READ ONLY transaction on a connection of its own, at most
   * scanMax at once; the connection goes back when the reader finishes or stops early.
   */
  private async *inSnapshot<T>(read: (q: Queryable, S: string) => AsyncIterable<T>): AsyncIterable<T> {
    while (this.scans >= this.scanMax) await new Promise<void>((resolve) => this.scanWaiters.push(resolve));
    this.scans++;
    let held: { q: Queryable; done: () => void } | undefined;
    try {
      held = await lease(this.pool);
      await held.q.query('BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY');
      try {
        yield* read(held.q, this.S);
      } finally {
        await held.q.query('COMMIT').catch(() => undefined);
      }
    } catch (e) {
      if (e instanceof TurnNotFound) throw e;
      throw storeError(e);
    } finally {
      held?.done();
      this.scans--;
      this.scanWaiters.shift()?.();
    }
  }

  async exportAll(): Promise<ExportSnapshot> {
    // the counts and the items from one snapshot: the generator holds it from its first step
    const it = this.inSnapshot(async function* (q: Queryable, S: string): AsyncIterable<{ counts: Usage } | ExportItem> {
      // counted, not summed from the usage rows: the header of a store an earlier release left with sums out of range must still match its lines
      const totals = (await q.query(`SELECT (SELECT count(*) FROM ${S}.sessions), (SELECT count(*) FROM ${S}.turns)`)).rows[0] ?? ['0', '0'];
      yield { counts: { ...NO_USAGE, sessions: countOf(totals[0]), turns: countOf(totals[1]) } };
      let after = '';
      for (;;) {
        const rows = (await q.query(`SELECT id, json, version FROM ${S}.sessions WHERE id > $1 ORDER BY id LIMIT $2`, [after, String(CHUNK)])).rows;
        for (const r of rows) {
          const turns: TurnRecord[] = [];
          for await (const chunk of turnPages(q, S, r[0] as string)) turns.push(...chunk);
          yield { session: new SessionRow(r[1] as string, r[2] as string), turns };
        }
        const lastRow = rows[rows.length - 1];
        if (rows.length < CHUNK || lastRow === undefined) return;
        after = lastRow[0] as string;
      }
    })[Symbol.asyncIterator]();
    const first = await it.next();
    const counts = first.done === true || !('counts' in first.value) ? { sessions: 0, turns: 0 } : first.value.counts;
    async function* items(): AsyncIterable<ExportItem> {
      try {
        for (let r = await it.next(); r.done !== true; r = await it.next()) if (!('counts' in r.value)) yield r.value;
      } finally {
        await it.return?.();
      }
    }
    return { sessions: counts.sessions, turns: counts.turns, items: items() };
  }

  /** From the two expiry indexes: own expiries passed, then (RETENTION_DAYS) activity before the cutoff, each oldest first. */
  async expiredSessions(live: Liveness, limit: number): Promise<readonly ExpiredSession[]> {
    const own: string[] = [];
    const rows = (await this.pool.query(expiredSql(postgresDialect(this.S, own), 'own', live.now, limit, 'json, turn_count'), own).catch(rethrow)).rows;
    if (live.cutoff !== undefined && rows.length < limit) {
      const idle: string[] = [];
      rows.push(...(await this.pool.query(expiredSql(postgresDialect(this.S, idle), 'idle', live.cutoff, limit - rows.length, 'json, turn_count'), idle).catch(rethrow)).rows);
    }
    return rows.map((r) => ({ session: JSON.parse(r[0] as string) as ChatSession, turns: countOf(r[1]) }));
  }

  async usage(user: string): Promise<Usage> {
    const row = (await this.pool.query(`SELECT sessions, turns, bytes, input_tokens, output_tokens, cached_tokens FROM ${this.S}.usage WHERE owner = $1`, [sqlText(user)]).catch(rethrow)).rows[0];
    return row === undefined ? NO_USAGE : usageOfRow(row);
  }
}

/**
 * A branch's turns in list order: the keys of the path from its turn up to the root along the
 * parents (each a primary-key lookup; the head's turn read from the session row), the page cut
 * from those keys (strictly after a key when given, at most `limit`; the walk then stops at that
 * key), and only then the page's JSON: sorting the whole path with its JSON would cost more than
 * walking it.
 */
function branchQuery(S: string, sessionId: string, branch: Branch, after: TurnKey | undefined, limit: number, budget?: number): { text: string; params: string[] } {
  const params = [sqlText(sessionId)];
  const at = (v: string): string => `$${params.push(v)}`;
  const start = branch === 'head' ? `id = (SELECT head_turn_id FROM ${S}.sessions WHERE id = $1)` : `id = ${at(sqlText(branch.turnId))}`;
  const key = after === undefined ? undefined : `(${at(sqlText(after.createdAt))}, ${at(sqlText(after._id))})`;
  const paths = `WITH RECURSIVE ${pathSql(postgresDialect(S, params), start, '$1', key)},
    page AS MATERIALIZED (SELECT id, created_at FROM path ${key === undefined ? '' : `WHERE (created_at, id) > ${key}`} ORDER BY created_at, id LIMIT ${at(String(limit))})`;
  if (budget === undefined) {
    return { text: `${paths} SELECT t.id, t.created_at, t.json, ${deltasSql(S, 't')} FROM page JOIN ${S}.turns t ON t.id = page.id ORDER BY page.created_at, page.id`, params };
  }
  // the JSON of the turns whose turns before them hold less than `budget` bytes (the first
  // always), null for the rest, which only say there is more (octet_length reads no JSON)
  const b = at(String(budget));
  const text = `${paths},
    sized AS (SELECT page.id, page.created_at, coalesce(sum(octet_length(t.json)) OVER (ORDER BY page.created_at, page.id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before
      FROM page JOIN ${S}.turns t ON t.id = page.id)
    SELECT t.id, t.created_at, CASE WHEN s.before < ${b}::bigint THEN t.json END, CASE WHEN s.before < ${b}::bigint THEN ${deltasSql(S, 't')} END
    FROM sized s JOIN ${S}.turns t ON t.id = s.id ORDER BY s.created_at, s.id`;
  return { text, params };
}

/**
 * A page of a branch by depth (../tree-index.ts): the turns at the depths after the cursor's
 * (`after`: its id, or none for the first page), at most `limit`, oldest first, each with its
 * JSON and its parent: about depth / JUMP + JUMP lookups beside the page's own, however deep the
 * branch. A cursor that is not a turn of the session gives no page (the caller walks instead).
 */
function branchPageQuery(S: string, sessionId: string, branch: Branch, after: string | undefined, limit: number): { text: string; params: string[] } {
  const params = [sqlText(sessionId)];
  const at = (v: string): string => `$${params.push(v)}`;
  const start = branch === 'head' ? `id = (SELECT head_turn_id FROM ${S}.sessions WHERE id = $1)` : `id = ${at(sqlText(branch.turnId))}`;
  const lo = after === undefined ? '0' : `(SELECT depth + 1 FROM ${S}.turns WHERE id = ${at(after)} AND session = $1)`;
  const text = `WITH RECURSIVE
      target(id, depth) AS (SELECT id, depth FROM ${S}.turns WHERE ${start} AND session = $1),
      bounds(lo, hi) AS (SELECT b.lo, least(target.depth, b.lo + ${at(String(limit))} - 1) FROM target CROSS JOIN (SELECT ${lo} AS lo) b WHERE b.lo IS NOT NULL),
      ${pageByDepthSql(`${S}.turns`)}
    SELECT t.id, t.created_at, t.json, ${deltasSql(S, 't')}, w.parent_id FROM walk w JOIN ${S}.turns t ON t.id = w.id WHERE w.depth >= (SELECT lo FROM bounds) ORDER BY w.depth`;
  return { text, params };
}

/**
 * A session's turns, oldest first, from `after` on: at most `limit` rows, the JSON of those whose
 * turns before them hold less than `budget` bytes (so the first always) and null for the rest,
 * which only say there is more. The sizes are the stored ones (octet_length reads no JSON; a
 * streaming turn's is its last delta's).
 */
function turnsSql(S: string, sessionId: string, after: TurnKey | undefined, limit: number, budget: number): { text: string; params: string[] } {
  const params = [sqlText(sessionId), String(limit), String(budget)];
  let keyset = '';
  if (after !== undefined) {
    params.push(sqlText(after.createdAt), sqlText(after._id));
    keyset = ' AND (created_at, id) > ($4, $5)';
  }
  const text =
    `SELECT id, created_at, CASE WHEN before < $3 THEN json END AS json, CASE WHEN before < $3 THEN deltas END AS deltas FROM (` +
    `SELECT id, created_at, json, deltas, coalesce(sum(bytes) OVER (ORDER BY created_at, id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before, ` +
    `coalesce(sum(bytes) OVER (ORDER BY created_at, id ROWS BETWEEN UNBOUNDED PRECEDING AND 2 PRECEDING), 0) AS before_previous ` +
    `FROM (SELECT t.id, t.created_at, t.json, ${deltasSql(S, 't')} AS deltas, ${turnBytesSql(S, 't')} AS bytes FROM ${S}.turns t WHERE t.session = $1${keyset.replaceAll('(created_at, id)', '(t.created_at, t.id)')} ORDER BY t.created_at, t.id LIMIT $2) page` +
    `) sized WHERE before_previous < $3 ORDER BY created_at, id`;
  return { text, params };
}

/** A session's turns, oldest first, a chunk at a time (SCAN_CHUNK turns or SCAN_CHUNK_BYTES of JSON), on one connection. */
async function* turnPages(q: Queryable, S: string, sessionId: string): AsyncIterable<TurnRecord[]> {
  let after: TurnKey | undefined;
  for (;;) {
    const sql = turnsSql(S, sessionId, after, SCAN_CHUNK + 1, SCAN_CHUNK_BYTES);
    const page = budgetedTurnPage((await q.query(sql.text, sql.params)).rows, SCAN_CHUNK, SCAN_CHUNK_BYTES, pagedTurnOf);
    if (page.items.length > 0) yield page.items as TurnRecord[];
    if (page.next === undefined) return;
    after = page.next;
  }
}

