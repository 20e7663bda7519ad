// The sqlite engine's reads, on the main thread: a session by id (from the record cache when it is
// hot), lists, a session's turns and branches, search, the door's lookups, exports and the purge's
// finds, through one reading connection, or a pooled snapshot (./scans.ts) for what is read whole.
import { PAGE_BYTE_BUDGET, PAGE_SCAN_BUDGET, SCAN_CHUNK, type SessionKey, type TurnKey } from '../../domain/order.js';
import type { ChatSession } from '../../domain/records.js';
import type { Liveness } from '../../domain/retention.js';
import { textHolds, turnTextOfJson } from '../../domain/search.js';
import type { RecordCache } from '../record-cache.js';
import { keysetFrom, walkBudget, walkSearchNow, type WalkSource } from '../search-walk.js';
import { SerialWrites } from '../serial-writes.js';
import { conversationKeySql, expiredSql, pathKeySql } from '../sql.js';
import {
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
import { budgetedTurnPage } from '../turn-page.js';
import { withDeltas } from '../pieces.js';
import { bytesOf, int, sqliteDialect, text, textOrUndefined, type Row, type SqlValue } from './binding.js';
import type { Connection } from './connection.js';
import { usageOn } from './group.js';
import { listRows, narrowed, pageOfRows, recordOf, sessionRows } from './lists.js';
import { countColumns } from './numbers.js';
import type { ScanPool } from './scans.js';
import { STREAMING_WHERE } from './schema.js';
import { filterWords, searchPart, WALK_SESSIONS } from './search.js';
import { branchKeysSql, branchPageSql, branchParams, branchTurns, chunksOf, turnChunks, TURN_COLUMNS, turnOf } from './turns.js';

/** What the purge reads of an expired session (its count in range whatever the file holds: ./numbers.ts). */
const EXPIRED_COLUMNS = `json, ${countColumns('turn_count')}`;

/** The reads every sqlite store (a server's, or a snapshot beside one) answers; the writes are SerialWrites'. */
export abstract class SqliteReads extends SerialWrites {
  protected abstract readonly reader: Connection;
  protected abstract readonly scans: ScanPool;
  /** Hot sessions for GET by id and hot pages of lists; only where this store commits every write (a read-only store beside a server has none). */
  protected abstract cache: RecordCache | undefined;
  /** Documents of a query's rarest word from which search walks the sessions (SEARCH_WALK_FROM). */
  protected abstract readonly searchWalkFrom: number | undefined;

  getSession(id: string): Promise<SessionRecord | undefined> {
    return Promise.resolve(this.getSessionNow(id));
  }

  readonly getSessionNow = (id: string): SessionRecord | undefined => {
    const cache = this.cache;
    const hit = cache?.get(id);
    if (hit !== undefined) return hit;
    const row = this.reader.prepare('SELECT json, version FROM sessions WHERE id = ?').get(id);
    if (row === undefined) return undefined;
    const record = recordOf(row);
    // read and kept in one go on this thread: a commit's changes reach the cache only between reads
    cache?.put(id, record);
    return record;
  };

  /**
   * Search hits newest first: from the index when fewer than SEARCH_WALK_FROM turns hold the
   * query (FTS5 finds them, the query sorts them; counting stops there), else by walking the
   * caller's sessions newest first and stopping at the page (../search-walk.ts).
   */
  search(filter: SearchFilter, after: SearchKey | undefined, limit: number): Promise<Page<SearchHit, SearchKey>> {
    const walkFrom = this.searchWalkFrom ?? Infinity;
    // counted no further than walkFrom: the walk's budget is then walkFrom too (../search-walk.ts walkBudget).
    // The words as whole words first: FTS5 reads a whole word's matches as it goes, but merges every
    // match of a prefix before the first (a word in 1M turns: ~20 ms), so a common word is told by
    // its own matches and only a rarer one pays for its prefix
    let counted = 0;
    if (walkFrom !== Infinity) {
      const count = this.reader.prepare('SELECT count(*) AS n FROM (SELECT 1 FROM turn_words WHERE turn_words MATCH ? LIMIT ?)');
      counted = int(count.get(filterWords(filter.words, false), walkFrom)?.['n']);
      if (counted < walkFrom) counted = int(count.get(filterWords(filter.words), walkFrom)?.['n']);
    }
    if (counted >= walkFrom) {
      const walked = walkSearchNow(this.walkSource(filter), after, limit, walkBudget(counted, walkFrom));
      if (walked !== undefined) return Promise.resolve(walked);
    }
    const params: SqlValue[] = [];
    // one statement, one snapshot: what the index holds and what is queued for it are read at the same moment
    const parts = (['names', 'turns', 'queuedNames', 'queuedTurns'] as const).map((part) => searchPart(filter, after, part, params));
    const sql = `${parts.join(' UNION ALL ')} ORDER BY at DESC, doc DESC LIMIT ?`;
    params.push(limit + 1);
    const rows = this.reader.prepare(sql).all(...params);
    const items: SearchHit[] = rows.slice(0, limit).map((row) => {
      const key = { at: text(row['at']), doc: text(row['doc']) };
      const turn = row['turn_json'] === null ? undefined : { _id: key.doc, createdAt: key.at, json: withDeltas(bytesOf(row['turn_json']), textOrUndefined(row['turn_deltas'])) };
      return { key, session: recordOf(row), turn };
    });
    return Promise.resolve({ items, next: rows.length > limit ? items[items.length - 1]?.key : undefined });
  }

  /**
   * The caller's sessions as its lists read them, and their turns newest first, a few at a time,
   * each checked against the query's words as the index would: the words of its row's text (a
   * streaming turn's row holds its text before its deltas, as the index does until its next edit).
   */
  private walkSource(filter: SearchFilter): WalkSource<SessionRecord, SessionKey, TurnRecord> {
    const query = filter.words;
    const turns = this.reader.prepare(`SELECT ${TURN_COLUMNS} FROM turns WHERE session = ? AND (created_at, id) < (?, ?) ORDER BY created_at DESC, id DESC LIMIT ?`);
    return {
      sessions: (after) => this.sessionPage(filter, after, WALK_SESSIONS),
      updatedAt: (r) => r.session.updatedAt,
      id: (r) => r.session._id,
      nameMatches: (r) => textHolds(r.session.name, query),
      turns: (from) =>
        from.map(({ s, before, want }) => {
          const rows = turns.all(s.session._id, ...keysetFrom(before), want);
          const hits: { key: SearchKey; turn: TurnRecord }[] = [];
          for (const row of rows) {
            if (textHolds(turnTextOfJson(bytesOf(row['json'])), query)) hits.push({ key: { at: text(row['created_at']), doc: text(row['id']) }, turn: turnOf(row) });
          }
          const last = rows[rows.length - 1];
          return { hits, next: rows.length === want && last !== undefined ? { at: text(last['created_at']), doc: text(last['id']) } : undefined, examined: rows.length };
        }),
      hit: (s, key, turn) => ({ key, session: s, turn }),
    };
  }

  listSessions(filter: SessionFilter, after: SessionKey | undefined, limit: number): Promise<Page<SessionRecord, SessionKey>> {
    const cache = this.cache;
    const kept = cache?.getPage(filter, after, limit);
    if (kept !== undefined) return Promise.resolve(kept);
    const page = this.sessionPage(filter, after, limit);
    // read and kept in one go on this thread, as getSession's records
    cache?.putPage(filter, after, limit, page);
    return Promise.resolve(page);
  }

  private sessionPage(filter: SessionFilter, after: SessionKey | undefined, limit: number): Page<SessionRecord, SessionKey> {
    if ((filter.user ?? filter.project) === undefined) return { items: [], next: undefined };
    if (!narrowed(filter) && filter.archived !== 'all') {
      // only expiry can leave a row out (a session gone and not yet purged: rare), so the page's
      // rows and the one after are read in one call; if one was left out, the page is read again
      // row by row. Not for archived=all: its two halves read by two finished statements would be
      // two snapshots (a session archived between them on both halves); iterated side by side
      // they are one
      const quick = pageOfRows(listRows(this.reader, filter, after, Math.min(limit, PAGE_SCAN_BUDGET) + 1), limit);
      if (!quick.leftOut) return quick.page;
    }
    return pageOfRows(listRows(this.reader, filter, after), limit).page;
  }

  async *scanSessions(filter: SessionFilter): AsyncIterable<readonly SessionRecord[]> {
    if ((filter.user ?? filter.project) === undefined) return;
    if (filter.archived !== 'all') {
      // a list of one chunk is one statement on the shared connection, its own snapshot: no
      // scan connection, no transaction (most lists); a longer one is read again below
      const rows = sessionRows(this.reader, filter, filter.archived === 'true' ? 1 : 0, undefined, SCAN_CHUNK + 1) as Row[];
      if (rows.length <= SCAN_CHUNK) {
        const chunk: SessionRecord[] = [];
        for (const row of rows) if (row['json'] !== null) chunk.push(recordOf(row));
        if (chunk.length > 0) yield chunk;
        return;
      }
    }
    const c = await this.scans.take();
    try {
      c.db.exec('BEGIN');
      let chunk: SessionRecord[] = [];
      let examined = 0;
      for (const row of listRows(c, filter, undefined)) {
        if (row['json'] !== null) chunk.push(recordOf(row));
        // a chunk per SCAN_CHUNK rows examined, empty when the filter left them all out, so the
        // list yields to other requests however few of its rows match
        if (++examined === SCAN_CHUNK) {
          yield chunk;
          chunk = [];
          examined = 0;
        }
      }
      if (chunk.length > 0) yield chunk;
    } finally {
      this.scans.giveBack(c);
    }
  }

  listTurns(sessionId: string, after: TurnKey | undefined, limit: number, branch?: Branch): Promise<Page<TurnRecord, TurnKey>> {
    if (branch !== undefined) {
      const keys = this.branchPage(sessionId, branch, after, limit + 1);
      const page = budgetedTurnPage(branchTurns(this.reader, keys), limit, PAGE_BYTE_BUDGET, turnOf);
      if (page.items.length === 0 && branch !== 'head' && !this.hasTurn(this.reader, sessionId, branch.turnId)) return Promise.reject(new TurnNotFound());
      return Promise.resolve(page);
    }
    const rows =
      after === undefined
        ? this.reader.prepare(`SELECT ${TURN_COLUMNS} FROM turns WHERE session = ? ORDER BY created_at, id LIMIT ?`).iterate(sessionId, limit + 1)
        : this.reader.prepare(`SELECT ${TURN_COLUMNS} FROM turns WHERE session = ? AND (created_at, id) > (?, ?) ORDER BY created_at, id LIMIT ?`).iterate(sessionId, after.createdAt, after._id, limit + 1);
    return Promise.resolve(budgetedTurnPage(rows, limit, PAGE_BYTE_BUDGET, turnOf));
  }

  getTurn(sessionId: string, turnId: string): Promise<TurnRecord | undefined> {
    const row = this.reader.prepare(`SELECT ${TURN_COLUMNS} FROM turns WHERE id = ? AND session = ?`).get(turnId, sessionId);
    return Promise.resolve(row === undefined ? undefined : turnOf(row));
  }

  turnsByPathKey(user: string, pathKey: string, live: Liveness, limit: number): Promise<readonly { readonly session: string; readonly turn: string }[]> {
    const params: SqlValue[] = [];
    const sql = pathKeySql(sqliteDialect(params), user, pathKey, live, limit);
    return Promise.resolve(this.reader.prepare(sql).all(...params).map((r) => ({ session: text(r['session']), turn: text(r['id']) })));
  }

  sessionOfTurn(turnId: string): Promise<string | undefined> {
    const row = this.reader.prepare('SELECT session FROM turns WHERE id = ?').get(turnId);
    return Promise.resolve(row === undefined ? undefined : text(row['session']));
  }

  sessionByConversationKey(user: string, key: string, live: Liveness): Promise<string | undefined> {
    const params: SqlValue[] = [];
    const row = this.reader.prepare(conversationKeySql(sqliteDialect(params), user, key, live)).get(...params);
    return Promise.resolve(row === undefined ? undefined : text(row['id']));
  }

  async *scanTurns(sessionId: string, branch?: Branch): AsyncIterable<readonly TurnRecord[]> {
    const c = await this.scans.take();
    try {
      c.db.exec('BEGIN');
      if (branch === undefined) yield* turnChunks(c, sessionId);
      else {
        if (branch !== 'head' && !this.hasTurn(c, sessionId, branch.turnId)) throw new TurnNotFound();
        yield* chunksOf(branchTurns(c, c.prepare(branchKeysSql(branch, false, false)).all(...branchParams(sessionId, branch, undefined, undefined))));
      }
    } finally {
      this.scans.giveBack(c);
    }
  }

  /**
   * The keys of a page of a branch: by depth when the cursor is a turn of the path (or there is
   * none), else (the cursor's turn deleted, the head moved elsewhere) by walking the path from
   * its end to the cursor, which gives the same page wherever the cursor is.
   */
  private branchPage(sessionId: string, branch: Branch, after: TurnKey | undefined, limit: number): Row[] {
    const c = this.reader;
    const turnId = branch === 'head' ? null : branch.turnId;
    if (after === undefined) return c.prepare(branchPageSql(branch)).all(turnId, sessionId, 0, limit);
    const cursor = c.prepare('SELECT depth FROM turns WHERE id = ? AND session = ?').get(after._id, sessionId);
    if (cursor !== undefined) {
      const rows = c.prepare(branchPageSql(branch)).all(turnId, sessionId, int(cursor['depth']) + 1, limit);
      if (rows[0]?.['parent_id'] === after._id) return rows;
    }
    return c.prepare(branchKeysSql(branch, true, true)).all(...branchParams(sessionId, branch, after, limit));
  }

  private hasTurn(c: Connection, sessionId: string, id: string): boolean {
    return c.prepare('SELECT 1 AS found FROM turns WHERE id = ? AND session = ?').get(id, sessionId) !== undefined;
  }

  async exportAll(): Promise<ExportSnapshot> {
    const c = await this.scans.take();
    let counts: { sessions: number; turns: number };
    try {
      c.db.exec('BEGIN');
      // counted, not the counters: the header of a store an earlier release left with counters out of range must still match its lines
      const row = c.prepare('SELECT (SELECT count(*) FROM sessions) AS sessions, (SELECT count(*) FROM turns) AS turns').get();
      counts = { sessions: int(row?.['sessions']), turns: int(row?.['turns']) };
    } catch (e) {
      this.scans.giveBack(c);
      throw e;
    }
    const give = (): void => this.scans.giveBack(c);
    async function* items(): AsyncIterable<ExportItem> {
      try {
        for (const row of c.prepare('SELECT id, json, version FROM sessions ORDER BY id').iterate()) {
          const turns: TurnRecord[] = [];
          for (const chunk of turnChunks(c, text(row['id']))) turns.push(...chunk);
          yield { session: recordOf(row), turns };
        }
      } finally {
        give();
      }
    }
    return { sessions: counts.sessions, turns: counts.turns, items: items() };
  }

  /** From the two expiry indexes: own expiries passed, then (RETENTION_DAYS) activity before the cutoff, each oldest first. */
  expiredSessions(live: Liveness, limit: number): Promise<readonly ExpiredSession[]> {
    const own: SqlValue[] = [];
    const rows = this.reader.prepare(expiredSql(sqliteDialect(own), 'own', live.now, limit, EXPIRED_COLUMNS)).all(...own);
    if (live.cutoff !== undefined && rows.length < limit) {
      const idle: SqlValue[] = [];
      rows.push(...this.reader.prepare(expiredSql(sqliteDialect(idle), 'idle', live.cutoff, limit - rows.length, EXPIRED_COLUMNS)).all(...idle));
    }
    return Promise.resolve(rows.map((r) => ({ session: JSON.parse(text(r['json'])) as ChatSession, turns: int(r['turn_count']) })));
  }


  usage(user: string): Promise<Usage> {
    return Promise.resolve(usageOn(this.reader, user));
  }

  /** At start, every streaming turn (the index turns_streaming holds them): one server per file, so the one that streamed them is gone. */
  leftStreaming(atStart: boolean): Promise<readonly { session: string; turnId: string }[]> {
    if (!atStart) return Promise.resolve([]);
    const rows = this.reader.prepare(`SELECT session, id FROM turns WHERE ${STREAMING_WHERE}`).all();
    return Promise.resolve(rows.map((r) => ({ session: text(r['session']), turnId: text(r['id']) })));
  }

  /** One server per file: nothing to tell others. */
  broadcast(): undefined {
    return undefined;
  }

  /** One server per file: its door's own turns per conversation key suffice. */
  nameLocks(): undefined {
    return undefined;
  }

  sharedEventLog(): undefined {
    return undefined;
  }
}
