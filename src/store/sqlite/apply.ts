// How the sqlite writer thread applies a group's Changes (../changes.ts) as they were decided, one
// small function per kind, in one transaction with what they add to their owners' usage; and an
// import's rows, which carry no usage: their sessions and owners are counted again from the rows.
import { turnBefore, type TurnKey } from '../../domain/order.js';
import { tokensOf, type ChatSession, type Turn } from '../../domain/records.js';
import { foldedTags, foldForSearch } from '../../domain/search.js';
import { versionOfSession } from '../../domain/version.js';
import { COUNT_MAX } from '../../domain/numbers.js';
import type { Change, Held } from '../changes.js';
import { injectedFault } from '../faults.js';
import { endText, piecesText } from '../pieces.js';
import { TOKEN_FIGURES, usageByOwner, type TokenFigure, type TotalDelta } from '../totals.js';
import { placesOfChain, placesSql, placeUnder, type TreePlace } from '../tree-index.js';
import { int, text, textOrUndefined, type Database, type Statement } from './binding.js';
import { RECOUNT_COUNTERS_SQL, RECOUNT_SESSION_SQL, RECOUNT_SESSION_TOKENS_SQL, RECOUNT_USER_SQL, settledSql, totalSql } from './numbers.js';
import { queuedTurnWords } from './schema.js';

/** What an import writes, planned on the main thread (../import-plan.ts): each session's row and each turn's, then a recount. */
export interface ImportRows {
  readonly sessions: readonly { readonly session: ChatSession; readonly json: string; readonly version: string }[];
  /** Each with the session a stored turn of the same id sits under, which it replaces. */
  readonly turns: readonly { readonly turn: Turn; readonly json: Uint8Array; readonly replaces: string | undefined }[];
  /** What these sessions' turns hold is counted from their rows, then these users' usage and the store's counters from the sessions'. */
  readonly recount: { readonly sessions: readonly string[]; readonly users: readonly string[] };
}

type Of<K extends Change['kind']> = Extract<Change, { readonly kind: K }>;

/** A change of a session's turns, with the session's row as it leaves it. */
type TurnsChange = Of<'turn'> | Of<'editTurn'> | Of<'deleteTurns'>;

/** The writing connection's statements and what one group's transaction does with them. */
export class SqliteWrites {
  private readonly begin: Statement;
  private readonly commitTx: Statement;
  private readonly rollback: Statement;
  private readonly sessionRow: Statement;
  private readonly upsertSession: Statement;
  private readonly dropTags: Statement;
  private readonly addTag: Statement;
  private readonly insertTurn: Statement;
  private readonly turnSession: Statement;
  private readonly deleteTurn: Statement;
  private readonly newestTurn: Statement;
  private readonly setLastTurn: Statement;
  private readonly setHeld: Statement;
  private readonly recountTokens: Statement;
  private readonly deleteTurns: Statement;
  private readonly deleteSession: Statement;
  private readonly addCounter: Statement;
  private readonly settleCounter: Readonly<Record<TokenFigure, Statement>>;
  private readonly addUsage: Statement;
  private readonly dropIdleUser: Statement;
  private readonly setTurnJson: Statement;
  private readonly insertDelta: Statement;
  private readonly foldDeltas: Statement;
  private readonly queueTurn: Statement;
  private readonly queueNewTurn: Statement;
  private readonly unindexTurn: Statement;
  private readonly setSessionAfter: Statement;
  private readonly placeOf: Statement;
  /** Sets depth and jump pointer of every turn of a session (after an import). */
  private readonly replace: Statement;
  /** An import's recount: one session's turns counted from their rows, then users and counters from the sessions'. */
  private readonly recountSession: Statement;
  private readonly dropUser: Statement;
  private readonly recountUser: Statement;
  private readonly recountCounters: Statement;

  constructor(
    db: Database,
    /** Whether a turn's words are queued for the index with it (SEARCH=on); with SEARCH=off it is queued as-is, indexed by a later start. */
    private readonly index: boolean,
  ) {
    this.begin = db.prepare('BEGIN IMMEDIATE');
    this.commitTx = db.prepare('COMMIT');
    this.rollback = db.prepare('ROLLBACK');
    this.sessionRow = db.prepare('SELECT json, updated_at, head_turn_id, last_turn_at, last_turn_id FROM sessions WHERE id = ?');
    this.upsertSession = db.prepare(
      `INSERT INTO sessions (id, user, project, archived, updated_at, name_folded, json, json_bytes, version, head_turn_id, expires_at, keep) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (id) DO UPDATE SET user = excluded.user, project = excluded.project, archived = excluded.archived, updated_at = excluded.updated_at,
         name_folded = excluded.name_folded, json = excluded.json, json_bytes = excluded.json_bytes, version = excluded.version, head_turn_id = excluded.head_turn_id,
         expires_at = excluded.expires_at, keep = excluded.keep`,
    );
    this.dropTags = db.prepare('DELETE FROM session_tags WHERE session = ?');
    this.addTag = db.prepare('INSERT INTO session_tags (session, tag, user, project, archived, updated_at) VALUES (?, ?, ?, ?, ?, ?)');
    this.insertTurn = db.prepare('INSERT INTO turns (id, session, parent_id, created_at, json, depth, skip_id, input_tokens, output_tokens, cached_tokens, path_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)');
    this.placeOf = db.prepare('SELECT id, depth, skip_id FROM turns WHERE id = ?');
    this.replace = db.prepare(placesSql('turns', 'session = ?'));
    this.setTurnJson = db.prepare('UPDATE turns SET json = ?, input_tokens = ?, output_tokens = ?, cached_tokens = ?, path_key = CASE WHEN ? THEN ? ELSE path_key END WHERE id = ?');
    this.insertDelta = db.prepare('INSERT INTO turn_pieces (turn, seq, pieces, bytes, tail) VALUES (?, ?, ?, ?, ?)');
    this.foldDeltas = db.prepare('DELETE FROM turn_pieces WHERE turn = ?');
    this.unindexTurn = db.prepare('DELETE FROM turn_words WHERE rowid = (SELECT rowid FROM turns WHERE id = ?)');
    this.queueNewTurn = db.prepare('INSERT INTO turns_unindexed (rowid, words, content_as_is) VALUES (?, ?, ?)');
    this.queueTurn = db.prepare('INSERT OR REPLACE INTO turns_unindexed (rowid, words, content_as_is) SELECT rowid, ?, ? FROM turns WHERE id = ?');
    this.setSessionAfter = db.prepare(
      `UPDATE sessions SET updated_at = ?, json = ?, json_bytes = ?, version = ?, head_turn_id = ?, last_turn_at = ?, last_turn_id = ?,
         turn_count = ?, turn_bytes = ?, input_tokens = ?, output_tokens = ?, cached_tokens = ? WHERE id = ?`,
    );
    this.setHeld = db.prepare('UPDATE sessions SET turn_count = ?, turn_bytes = ?, input_tokens = ?, output_tokens = ?, cached_tokens = ? WHERE id = ?');
    this.recountTokens = db.prepare(RECOUNT_SESSION_TOKENS_SQL);
    this.turnSession = db.prepare('SELECT session FROM turns WHERE id = ?');
    this.deleteTurn = db.prepare('DELETE FROM turns WHERE id = ?');
    this.newestTurn = db.prepare('SELECT created_at, id FROM turns WHERE session = ? ORDER BY created_at DESC, id DESC LIMIT 1');
    this.setLastTurn = db.prepare('UPDATE sessions SET version = ?, last_turn_at = ?, last_turn_id = ? WHERE id = ?');
    this.deleteTurns = db.prepare('DELETE FROM turns WHERE session = ?');
    this.deleteSession = db.prepare('DELETE FROM sessions WHERE id = ?');
    this.addCounter = db.prepare('UPDATE counters SET value = value + ? WHERE name = ?');
    // a token counter settles as ../totals.ts says, counted again from the users' rows (written before it)
    const counter = (c: string): Statement => db.prepare(`UPDATE counters SET value = ${settledSql('value', '?1', '?2', `(SELECT ${totalSql(c)} FROM users)`)} WHERE name = '${c}'`);
    this.settleCounter = { inputTokens: counter('input_tokens'), outputTokens: counter('output_tokens'), cachedTokens: counter('cached_tokens') };
    // ?1 the user, ?2-?4 sessions, turns and bytes added; ?5-?7 each token figure's delta, ?8-?10 whether it is counted again (from the user's sessions)
    const tokens = TOKEN_COLUMNS.map((c, i) => ({ c, delta: `?${5 + i}`, recount: `?${8 + i}`, again: `(SELECT ${totalSql(`s.${c}`)} FROM sessions s WHERE s.user = ?1)` }));
    this.addUsage = db.prepare(
      `INSERT INTO users (user, sessions, turns, bytes, input_tokens, output_tokens, cached_tokens)
         VALUES (?1, ?2, ?3, ?4, ${tokens.map((t) => `CASE WHEN ${t.recount} = 1 THEN ${t.again} ELSE max(0, min(${COUNT_MAX}, ${t.delta})) END`).join(', ')})
       ON CONFLICT (user) DO UPDATE SET sessions = sessions + excluded.sessions, turns = turns + excluded.turns, bytes = bytes + excluded.bytes,
         ${tokens.map((t) => `${t.c} = ${settledSql(`users.${t.c}`, t.delta, t.recount, t.again)}`).join(', ')}`,
    );
    this.dropIdleUser = db.prepare('DELETE FROM users WHERE user = ? AND sessions = 0');
    this.recountSession = db.prepare(RECOUNT_SESSION_SQL);
    this.dropUser = db.prepare('DELETE FROM users WHERE user = ?');
    this.recountUser = db.prepare(RECOUNT_USER_SQL);
    this.recountCounters = db.prepare(RECOUNT_COUNTERS_SQL);
  }

  /** One group: every change in one transaction, with what they add to each owner's usage and the store's counters; all of it or none. */
  commit(changes: readonly Change[]): void {
    this.transaction(() => {
      for (const c of changes) this.apply(c);
      // the users first: a token counter is counted again from them
      const users = usageByOwner(changes);
      for (const [user, u] of users) {
        const t = TOKEN_FIGURES.map((k) => u.token(k));
        this.addUsage.run(user, u.sessions, u.turns, u.bytes, ...t.map((x) => x.delta), ...t.map((x) => (x.recount ? 1 : 0)));
        if (u.sessions < 0) this.dropIdleUser.run(user);
      }
      const total = usageByOwner(changes, () => '').get('');
      if (total !== undefined) this.addToCounters(total);
    });
  }

  /** An import: its rows as given, the sessions it touched counted again from them, then their owners and the counters. */
  importRows(rows: ImportRows): void {
    this.transaction(() => {
      for (const s of rows.sessions) this.putSession(s.session, s.json, s.version, this.sessionRow.get(s.session._id) !== undefined);
      const imported = new Set<string>();
      for (const t of rows.turns) {
        if (t.replaces !== undefined) {
          this.dropTurn(t.turn._id);
          imported.add(t.replaces);
        }
        const session = t.turn.session;
        const before = this.sessionRow.get(session);
        if (before === undefined) throw new Error(`turn ${t.turn._id} of a session that is not stored`);
        this.insert(session, t.turn, t.json, this.placeUnder(t.turn.parentId), null);
        // the session stays as it was put; its newest turn and version follow (what it holds: the recount)
        const last = newer({ createdAt: t.turn.createdAt, _id: t.turn._id }, lastTurnOf(before));
        this.setLastTurn.run(versionOfSession(text(before['json']), last), last.createdAt, last._id, session);
        imported.add(session);
      }
      // an import may give a stored turn another parent: its session's depths are made again
      for (const session of imported) this.replace.run(session);
      for (const id of rows.recount.sessions) this.recountSession.run(id);
      for (const user of rows.recount.users) {
        this.dropUser.run(user);
        this.recountUser.run(user);
      }
      this.recountCounters.run();
    });
  }

  private transaction(body: () => void): void {
    this.begin.run();
    try {
      body();
      const fault = injectedFault('commit');
      if (fault !== undefined) throw fault;
      this.commitTx.run();
    } catch (e) {
      try {
        this.rollback.run();
      } catch {
        // SQLite already rolled back (a failed COMMIT of an I/O error does)
      }
      throw e;
    }
  }

  private addToCounters(total: TotalDelta): void {
    for (const [name, key] of COUNTERS) if (total[key] !== 0) this.addCounter.run(total[key], name);
    for (const k of TOKEN_FIGURES) {
      const t = total.token(k);
      if (t.delta !== 0 || t.recount) this.settleCounter[k].run(t.delta, t.recount ? 1 : 0);
    }
  }

  private apply(c: Change): void {
    switch (c.kind) {
      case 'create':
        return this.putSession(c.session, c.json, c.version, false);
      case 'update':
        return this.putSession(c.session, c.json, c.version, true);
      case 'turn':
        return this.addTurn(c);
      case 'editTurn':
        return this.editTurn(c);
      case 'delta':
        return this.addDelta(c);
      case 'deleteTurns':
        return this.dropTurns(c);
      case 'fork':
        return this.fork(c);
      case 'delete':
        this.deleteTurns.run(c.id);
        this.deleteSession.run(c.id);
    }
  }

  /** A session's row and its tags' rows (`stored`: it had rows already, which go). */
  private putSession(s: ChatSession, json: string, version: string, stored: boolean): void {
    this.upsertSession.run(s._id, s.user, s.project, s.archived ? 1 : 0, s.updatedAt, foldForSearch(s.name), json, Buffer.byteLength(json), version, s.headTurnId, s.expiresAt ?? null, s.expiresAt === null ? 1 : 0);
    if (stored) this.dropTags.run(s._id);
    for (const tag of foldedTags(s)) this.addTag.run(s._id, tag, s.user, s.project, s.archived ? 1 : 0, s.updatedAt);
  }

  private addTurn(c: Of<'turn'>): void {
    if (this.sessionRow.get(c.session._id) === undefined) throw new Error(`turn ${c.turn._id} of a session that is not stored`);
    this.insert(c.session._id, c.turn, c.json, this.placeUnder(c.turn.parentId), c.pathKey ?? null);
    // the writer made it the session's newest turn
    this.sessionAfter(c, { createdAt: c.turn.createdAt, _id: c.turn._id });
  }

  private editTurn(c: Of<'editTurn'>): void {
    const id = c.turn._id;
    const t = this.turnSession.get(id);
    if (t === undefined || text(t['session']) !== c.session._id) throw new Error(`turn ${id} of session ${c.session._id} is not stored`);
    // the edit holds the text of its deltas (the writer folded them in): their rows go
    const tokens = tokensOf(c.turn.usage);
    this.setTurnJson.run(c.json, tokens.inputTokens, tokens.outputTokens, tokens.cachedTokens, c.pathKey === undefined ? 0 : 1, c.pathKey ?? null, id);
    this.foldDeltas.run(id);
    // an edit's text is found at once (search reads a queued turn by its text); a delta's waits for the turn's next edit (docs/DECISIONS.md)
    this.unindexTurn.run(id);
    this.queueTurn.run(...queuedColumns(this.words(c.turn)), id);
    this.sessionAfter(c, c.lastTurn);
  }

  /** A delta is a row of its own (../pieces.ts): the turn's row is not touched, and the index keeps the text it had before its deltas until its next edit. */
  private addDelta(c: Of<'delta'>): void {
    this.insertDelta.run(c.turnId, c.seq, piecesText(c.pieces), c.bytes, endText(c.end));
    this.setHeldOf(c.session._id, c.held);
  }

  private dropTurns(c: Of<'deleteTurns'>): void {
    for (const id of c.ids) {
      const t = this.turnSession.get(id);
      if (t === undefined || text(t['session']) !== c.sessionId) throw new Error(`turn ${id} of session ${c.sessionId} is not stored`);
      this.deleteTurn.run(id);
    }
    this.sessionAfter(c, c.lastTurn);
  }

  private fork(c: Of<'fork'>): void {
    const s = c.session;
    this.putSession(s, c.json, c.version, false);
    const places = placesOfChain(c.turns.map((t) => t.turn._id));
    c.turns.forEach((t, i) => this.insert(s._id, t.turn, t.json, places[i] as TreePlace, null));
    const last = c.turns[c.turns.length - 1]?.turn;
    this.setLastTurn.run(c.version, last?.createdAt ?? null, last?._id ?? null, s._id);
    this.setHeldOf(s._id, c.held);
  }

  /** Removes one turn (an import replacing it), its session's newest turn and version following. */
  private dropTurn(id: string): void {
    const t = this.turnSession.get(id);
    if (t === undefined) return;
    const session = text(t['session']);
    this.deleteTurn.run(id);
    const before = this.sessionRow.get(session);
    if (before === undefined) return;
    const newest = this.newestTurn.get(session);
    const last = newest === undefined ? undefined : { createdAt: text(newest['created_at']), _id: text(newest['id']) };
    this.setLastTurn.run(versionOfSession(text(before['json']), last), last?.createdAt ?? null, last?._id ?? null, session);
  }

  /** What a write queues for the index with a turn (./schema.ts), none with SEARCH=off. */
  private words(t: Turn): string | true | null {
    return this.index ? queuedTurnWords(t.content) : null;
  }

  /** The depth and jump pointer of a turn under `parentId` (null: a root). */
  private placeUnder(parentId: string | null): TreePlace {
    if (parentId === null) return placeUnder(undefined);
    const p = this.placeOf.get(parentId);
    return placeUnder(p === undefined ? undefined : { id: text(p['id']), depth: int(p['depth']), skipId: textOrUndefined(p['skip_id']) ?? null });
  }

  private insert(session: string, turn: Turn, json: Uint8Array, place: TreePlace, pathKey: string | null): void {
    const tokens = tokensOf(turn.usage);
    const rowid = this.insertTurn.run(turn._id, session, turn.parentId, turn.createdAt, json, place.depth, place.skipId, tokens.inputTokens, tokens.outputTokens, tokens.cachedTokens, pathKey).lastInsertRowid;
    this.queueNewTurn.run(rowid, ...queuedColumns(this.words(turn)));
  }

  /** A session's row as a change of its turns leaves it: its JSON, version, head, newest turn and what its turns hold. */
  private sessionAfter(c: TurnsChange, last: TurnKey | undefined): void {
    const s = c.session;
    const h = c.held;
    this.setSessionAfter.run(s.updatedAt, c.sessionJson, Buffer.byteLength(c.sessionJson), c.version, s.headTurnId, last?.createdAt ?? null, last?._id ?? null, h.turns, h.turnBytes, h.inputTokens, h.outputTokens, h.cachedTokens, s._id);
    this.recountIfAsked(s._id, h);
  }

  /** What a session's turns hold, written as the writer decided it. */
  private setHeldOf(id: string, h: Held): void {
    this.setHeld.run(h.turns, h.turnBytes, h.inputTokens, h.outputTokens, h.cachedTokens, id);
    this.recountIfAsked(id, h);
  }

  /** The session's tokens counted again from its turns as this group leaves them, when the writer took from a figure at the top. */
  private recountIfAsked(id: string, h: Held): void {
    if (h.recount === true) this.recountTokens.run(id);
  }
}

/** The counters' rows that sum a Usage figure as it is (the token counters saturate: settleCounter). */
const COUNTERS = [
  ['sessions', 'sessions'],
  ['turns', 'turns'],
  ['bytes', 'bytes'],
] as const;

/** The token columns of the users' rows, in TOKEN_FIGURES' order. */
const TOKEN_COLUMNS = ['input_tokens', 'output_tokens', 'cached_tokens'] as const;

/** A queued turn's words and content_as_is columns. */
function queuedColumns(words: string | true | null): [string | null, number] {
  return words === true ? [null, 1] : [words, 0];
}

function lastTurnOf(row: Readonly<Record<string, unknown>>): TurnKey | undefined {
  const createdAt = textOrUndefined(row['last_turn_at'] as string | null);
  const _id = textOrUndefined(row['last_turn_id'] as string | null);
  return createdAt === undefined || _id === undefined ? undefined : { createdAt, _id };
}

function newer(a: TurnKey, b: TurnKey | undefined): TurnKey {
  return b === undefined || turnBefore(b, a) ? a : b;
}
