// The Store every engine implements (the errors it raises are ./errors.ts). Reads return promises
// of immutable values, safe to hold across an `await`. Writes are values (./writes.ts) passed
// through one serial point per store (./writer.ts), where each is decided against the current
// state (./decide.ts), so ownership and If-Match checks cannot race; a write's promise settles
// once its changes are committed (or it has failed and changed nothing).
import type { EngineName } from '../config.js';
import type { SessionKey, TurnKey } from '../domain/order.js';
import type { Liveness } from '../domain/retention.js';
import type { ChatSession, Tokens, Turn, TurnStatus } from '../domain/records.js';
import type { DeltaPlace, Piece } from '../domain/deltas.js';
import type { ReplyEnd } from '../domain/reply-end.js';
import type { Change, CommitListener, Held, Usage } from './changes.js';
import type { AppendOptions, EditOptions, ForkAs, Guard, NewTurn, SessionFields, TurnEdit, WriteOptions } from './writes.js';

export type { TurnEdit } from './writes.js';

export { NO_USAGE, NOTHING_HELD, type Held, type Usage } from './changes.js';
export * from './errors.js';

export type { SessionKey, TurnKey } from '../domain/order.js';


/** A session as read: its record, its JSON (what GET answers in `data`) and its version tag (the ETag). */
export interface SessionRecord {
  readonly session: ChatSession;
  readonly json: string;
  readonly version: string;
}

/** A turn as read: its sort key and its JSON as UTF-8 bytes, what the turns list answers. */
export interface TurnRecord {
  readonly _id: string;
  readonly createdAt: string;
  readonly json: Buffer;
}

/** A session's state as committed (what a Group reads). */
export interface SessionState {
  readonly session: ChatSession;
  /** Its newest turn, if any. */
  readonly lastTurn: TurnKey | undefined;
  /** What its turns hold. */
  readonly held: Held;
  /** Its version tag (computed on demand: only conditional writes need it). */
  version(): string;
}

/** A turn's place in its session's tree, the UTF-8 bytes of its JSON (a streaming turn's with its text so far) and its usage's tokens. */
export interface TurnNode {
  readonly _id: string;
  readonly createdAt: string;
  readonly parentId: string | null;
  readonly bytes: number;
  readonly tokens: Tokens;
}

/** A turn as the serial point reads it: its place in the tree and its JSON. */
export interface TreeTurn extends TurnNode {
  readonly json: Buffer;
}

/**
 * A session as a write finds it at the serial point, with a view of its turn tree: what every
 * earlier write (of this group too) left.
 */
export interface SessionAtWrite extends SessionState {
  /** A turn of this session, or undefined when it has none by that id. */
  turn(id: string): TreeTurn | undefined;
  /** The turns from the root to turn `id`, oldest first; undefined when `id` is not one of its turns. */
  path(id: string): readonly TreeTurn[] | undefined;
  /** Turn `id` and all its descendants; undefined when `id` is not one of its turns. */
  subtree(id: string): readonly TurnNode[] | undefined;
  /** What would be its newest turn once the turns `removed` are gone. */
  lastTurnAfterRemoving(removed: ReadonlySet<string>): TurnKey | undefined;
  /** One of its turns whose status is `streaming` (a reply in progress), if any. */
  streamingTurn(): string | undefined;
  /** Whether turn `id` is `streaming` (the write must hint `streaming`, as for streamingTurn). */
  isStreaming(id: string): boolean;
}


/** A list of turns: all of a session's (none given), or one branch: the path from the root to the head or to a turn. */
export type Branch = 'head' | { readonly turnId: string };

/** An edited turn and its session as the edit left them. */
export interface TurnUpdate {
  readonly turn: TurnRecord;
  readonly session: SessionRecord;
}

export type ArchivedFilter = 'false' | 'true' | 'all';

export interface SessionFilter {
  /** Sessions of this project (the spec's rule 1), else of `user`. */
  readonly project?: string;
  /** With `project`: only this user's sessions of it (owner-only access). Without: the user's sessions. */
  readonly user?: string;
  readonly archived: ArchivedFilter;
  /** A substring of the name, already folded with foldForSearch. */
  readonly nameContains?: string;
  /** Only sessions live at that moment (src/domain/retention.ts); undefined: all. */
  readonly live?: Liveness;
  /** Tags the sessions must all have, folded with foldForSearch, each once. */
  readonly tags?: readonly string[];
}

/** Which sessions a search reads: those a list with the same filter would (no name or tag filter). */
export interface SearchFilter {
  readonly project?: string;
  readonly user?: string;
  readonly archived: ArchivedFilter;
  /** Only sessions live at that moment. */
  readonly live: Liveness;
  /** The query's words, folded (src/domain/search.ts wordsOf), at least one: each must start a word of the text. */
  readonly words: readonly string[];
}

/**
 * Where a hit stands in search answers, newest first: `at` is the turn's createdAt for a turn,
 * the session's updatedAt for its name; ties by `doc` descending (the turn's id, or the session's
 * id for its name).
 */
export interface SearchKey {
  readonly at: string;
  readonly doc: string;
}

/** A search hit: a session whose name matched (turn undefined) or one of its turns. */
export interface SearchHit {
  readonly key: SearchKey;
  readonly session: SessionRecord;
  readonly turn: TurnRecord | undefined;
}

/** One page of a list. */
export interface Page<T, K> {
  readonly items: readonly T[];
  /**
   * Where the next page starts: the key of the last item examined, which is the last item
   * returned unless the page stopped at PAGE_SCAN_BUDGET. undefined when the list is done.
   */
  readonly next: K | undefined;
}

/** One session with its turns, oldest first, as export writes it. */
export interface ExportItem {
  readonly session: SessionRecord;
  readonly turns: readonly TurnRecord[];
}

/** Every live session with its turns as of one moment, and how many there are. */
export interface ExportSnapshot {
  readonly sessions: number;
  readonly turns: number;
  /** Sessions in `_id` order, each with its turns. */
  readonly items: AsyncIterable<ExportItem>;
}

/** What an import changed: records written, and records already stored exactly as given. */
export interface ImportSummary {
  readonly sessions: number;
  readonly turns: number;
  readonly unchanged: number;
}

/** A session past its expiry whose storage is still there, as the purge finds it, with how many turns it holds. */
export interface ExpiredSession {
  readonly session: ChatSession;
  readonly turns: number;
}

/** An engine's own measure, shown in /metrics beside the generic ones. */
export interface EngineGauge {
  readonly name: string;
  readonly help: string;
  readonly type: 'gauge' | 'counter';
  readonly value: number;
}

/** What every live session holds (Usage over all users): the same figures on every engine. */
export interface StoreStats extends Usage {
  readonly engine: readonly EngineGauge[];
}

/** Hooks the store calls so metrics can watch it without the store knowing about metrics. */
export interface StoreObserver {
  /** Every commit (one per group of writes), with its duration and the number of writes it made durable. */
  commit(seconds: number, writes: number): void;
}

/**
 * An event of the live feed as a change announces it, before the feed gives it an id
 * (src/live/changes.ts makes them; the feed decides who sees them from `owner` and `project`).
 */
export interface ChangeEvent {
  readonly type: string;
  /** The session it is about. */
  readonly session: string;
  /** The session's owner and project. */
  readonly owner: string;
  readonly project: string;
  /** The event's `data`: JSON. */
  readonly data: string | Buffer;
  /** The turn a `turn.*` event is about (for `turn.deleted`, the turn the DELETE named). */
  readonly turnId?: string | undefined;
  /** The status of the turn a `turn.created` or `turn.updated` carries. */
  readonly status?: TurnStatus | undefined;
}

/** An event as the feed's log keeps it: ids increase in commit order. */
export interface LoggedEvent extends ChangeEvent {
  readonly id: number;
}

/** Short messages to every instance sharing a store, this one included (PostgreSQL's NOTIFY). */
export interface Broadcast {
  send(message: string): Promise<void>;
  /** Calls `on` with every message sent, by any instance, until close. */
  listen(on: (message: string) => void): Promise<void>;
  close(): Promise<void>;
}

/**
 * Names one instance at a time may hold among those sharing the store (PostgreSQL): `hold`
 * resolves once this instance holds the name, with the function that lets it go. Best effort:
 * a database away, or a holder that keeps it past a few seconds, lets the caller go on without.
 */
export interface NameLocks {
  hold(name: string): Promise<() => void>;
}

/** The events a group's changes make, in order (src/live/changes.ts). */
export type Announce = (changes: readonly Change[]) => readonly ChangeEvent[];

/**
 * The live feed's log where an engine keeps it for several instances (PostgreSQL): events are
 * written with the changes that make them, in the same transaction, with ids in commit order.
 */
export interface SharedEventLog {
  /** The newest committed event's id (0 before the first) and the oldest kept one's (undefined when none is kept). */
  bounds(): Promise<{ readonly newest: number; readonly oldest: number | undefined }>;
  /** Events with ids in (after, upTo], in id order, at most `limit`. */
  read(after: number, upTo: number, limit: number): Promise<readonly LoggedEvent[]>;
  /** Calls `onChange` whenever events may have been committed (by any instance), and after a lost notification; until close. */
  watch(onChange: () => void): Promise<void>;
  /** Keeps the newest `keep` events, and every one after `readTo` (what the caller has not read yet); forgets tickets used before `nowMs`'s expiries. */
  trim(keep: number, readTo: number, nowMs: number): Promise<void>;
  /** Records a ticket's single use: false when any instance recorded it before. */
  claimTicket(id: string, expiresAtMs: number): Promise<boolean>;
  /**
   * Logs events that no change makes (a reply's text as it comes, ahead of the commit that
   * records it), in a transaction of their own: ids in commit order as always. Resolves with
   * the id the last of them got (they have the ids before it, in order; undefined for none).
   */
  append(events: readonly ChangeEvent[]): Promise<number | undefined>;
  close(): Promise<void>;
}

export interface Store {
  readonly engine: EngineName;

  getSession(id: string): Promise<SessionRecord | undefined>;
  /**
   * The same read, answered on this thread by an engine that reads here (sqlite): a GET by id
   * then answers in the tick its request arrived, with no promise between. Absent on PostgreSQL.
   */
  readonly getSessionNow?: (id: string) => SessionRecord | undefined;
  /** Sessions matching `filter` in list order, strictly after `after`, at most `limit` (1-1000). */
  listSessions(filter: SessionFilter, after: SessionKey | undefined, limit: number): Promise<Page<SessionRecord, SessionKey>>;
  /**
   * The whole of a list as of one moment, in list order, in chunks: what a list without `limit`
   * answers. The snapshot holds while the caller reads it slowly; writes go on meanwhile.
   */
  scanSessions(filter: SessionFilter): AsyncIterable<readonly SessionRecord[]>;
  /**
   * Turns of a session oldest first, strictly after `after`, at most `limit`; an unknown session
   * has none. With `branch`, only the turns of that path; TurnNotFound when its turn is not one
   * of the session's.
   */
  listTurns(sessionId: string, after: TurnKey | undefined, limit: number, branch?: Branch): Promise<Page<TurnRecord, TurnKey>>;
  /** One turn of a session, or undefined when the session has none by that id. */
  getTurn(sessionId: string, turnId: string): Promise<TurnRecord | undefined>;
  /**
   * The OpenAI door's index: turns of `user`'s live sessions whose path key (the hash of their path
   * from the root, kept for assistant turns) is `pathKey`, most recently updated sessions first.
   */
  turnsByPathKey(user: string, pathKey: string, live: Liveness, limit: number): Promise<readonly { readonly session: string; readonly turn: string }[]>;
  /** The session a turn is of, by the turn's id alone (OpenAI's response ids name a turn, not its session); undefined when there is none. */
  sessionOfTurn(turnId: string): Promise<string | undefined>;
  /** The OpenAI door's index: the id of `user`'s most recently updated live session whose metadata.conversationKey is `key`. */
  sessionByConversationKey(user: string, key: string, live: Liveness): Promise<string | undefined>;
  /**
   * Every turn of a session (or of one branch) as of one moment, oldest first, in chunks. An
   * unknown branch turn rejects the first chunk with TurnNotFound.
   */
  scanTurns(sessionId: string, branch?: Branch): AsyncIterable<readonly TurnRecord[]>;

  /**
   * Hits of `filter.words` in session names and turn texts, newest first (SearchKey), strictly
   * after `after`, at most `limit`: read from the engine's search index, never by reading every turn.
   */
  search(filter: SearchFilter, after: SearchKey | undefined, limit: number): Promise<Page<SearchHit, SearchKey>>;
  /** Builds the search index again from the stored sessions and turns; answers how many documents it indexed. */
  reindex(): Promise<number>;

  // Writes: each is a value (./writes.ts) decided at the serial point against the session as it
  // stands (./decide.ts); what it requires of the session is its Guard, checked there (a missing
  // session is a SessionNotFound first). Times come from `now` (default: the clock as it is asked).

  createSession(session: ChatSession): Promise<SessionRecord>;
  /**
   * Sets `set` on a session and moves its updatedAt (with `unlessSame`, a write that changes
   * nothing leaves it as it is). ValidationError when `set.headTurnId` is none of its turns.
   */
  updateSession(id: string, set: SessionFields, opts?: WriteOptions & { readonly unlessSame?: boolean }): Promise<SessionRecord>;
  /** Deletes a session and its turns. */
  deleteSession(id: string, opts?: WriteOptions): Promise<void>;
  /** appendTurns of one turn. */
  appendTurn(sessionId: string, turn: NewTurn, opts?: AppendOptions): Promise<TurnRecord>;
  /**
   * Records turns in order, all or none, each newer than everything in its session: the first
   * under its parent (by default the head), each next under the one before unless it names its
   * own; the last becomes the head and raises the session's `updatedAt` to its `createdAt` (a
   * message and the start of its reply, in one write). ValidationError for a parent that is none
   * of the session's turns.
   */
  appendTurns(sessionId: string, turns: readonly NewTurn[], opts?: AppendOptions): Promise<TurnRecord[]>;
  /** Changes one turn by `edit`; the session's updatedAt moves. SessionNotFound, TurnNotFound. */
  updateTurn(sessionId: string, turnId: string, edit: TurnEdit, opts?: EditOptions): Promise<TurnUpdate>;
  /**
   * Ends a reply (src/domain/reply-end.ts decides how from the turn as it stands): never refused
   * for a quota, though what it adds is counted. TurnNotStreaming when it ended already.
   */
  endReply(sessionId: string, turnId: string, end: ReplyEnd): Promise<TurnUpdate & { readonly status: TurnStatus }>;
  /**
   * Deletes a turn and its descendants; the head moves to the turn's parent when it was among
   * them. Answers the session as it leaves it.
   */
  deleteTurn(sessionId: string, turnId: string, opts?: WriteOptions): Promise<SessionRecord>;
  /**
   * A new session `as` says (its id, owner, time and name) holding copies of the path from the
   * root to `turnId` (undefined: the head) of the source: new ids, the same contents and
   * createdAt; its other fields the source's (src/store/decide.ts forkedSession). SessionNotFound, TurnNotFound.
   */
  forkSession(sourceId: string, turnId: string | undefined, as: ForkAs, opts?: WriteOptions): Promise<SessionRecord>;
  /**
   * Appends `pieces` (text, reasoning) to a streaming turn's content (src/domain/deltas.ts says
   * where); the session does not change (its updatedAt, its version). Refused with
   * TurnNotStreaming when the turn's status is not `streaming`, TurnTooLarge when its JSON would
   * pass `maxBytes`. SessionNotFound, TurnNotFound. `quiet`: the live feed was told of the pieces
   * as they came (a reply's), so the commit tells it nothing. A delta costs what its pieces hold,
   * whatever the turn's length: it is stored apart (./pieces.ts) until the turn's next edit folds
   * it in, and every read shows the turn with it.
   */
  appendDelta(sessionId: string, turnId: string, pieces: readonly Piece[], maxBytes: number, opts?: { readonly guard?: Guard; readonly quiet?: boolean }): Promise<TurnDelta>;
  /**
   * Streaming turns that no server is streaming any more: with `atStart` on an engine of one
   * server (sqlite), every streaming turn, since the server that streamed them is gone;
   * on PostgreSQL, whose instances share the data, at any time: the replies of instances that
   * stopped proving they are alive, this instance's own replies that `generating` (what it
   * generates now) does not hold and that took no write for a while, and the turns clients
   * stream themselves that took no write for STREAMING_IDLE. The server marks them `interrupted`.
   */
  leftStreaming(atStart: boolean, generating?: ReadonlySet<string>): Promise<readonly { readonly session: string; readonly turnId: string }[]>;
  /** How often the server asks leftStreaming again while it runs; undefined: the server's own default. */
  readonly sweepEveryMs?: number | undefined;

  /**
   * At most `limit` sessions gone at `live` (src/domain/retention.ts) and still stored, for the
   * purge: read from the expiry indexes.
   */
  expiredSessions(live: Liveness, limit: number): Promise<readonly ExpiredSession[]>;

  /** Every live session with its turns, as of one moment. */
  exportAll(): Promise<ExportSnapshot>;
  /**
   * Writes these sessions and turns as given, all or nothing: a record whose `_id` is stored is
   * replaced by this version (a session's `updatedAt` is raised to its newest turn, as a turn does),
   * records not given stay. Turns must come after their session in `sessions` or be stored already.
   */
  importAll(sessions: readonly ChatSession[], turns: readonly Turn[]): Promise<ImportSummary>;

  /**
   * Sets the listener of committed changes: each group's changes, once committed, before any of
   * its writes is answered (SerialWriter.onCommitted says exactly when). Imports are not announced.
   */
  onCommitted(listener: CommitListener): void;
  /** The engine's own event log, shared by several instances; undefined: the server keeps the feed in memory. */
  sharedEventLog(): SharedEventLog | undefined;
  /** Messages among the instances sharing the store (PostgreSQL): a cancel reaches the instance generating the reply. undefined: one instance. */
  broadcast(): Broadcast | undefined;
  /** Names held among the instances sharing the store (PostgreSQL); undefined: one instance, whose own turns suffice. */
  nameLocks(): NameLocks | undefined;

  stats(): Promise<StoreStats>;
  /** What the sessions `user` owns hold (the same figures on every engine). */
  usage(user: string): Promise<Usage>;
  /** Resolves when the engine can serve now; rejects with StorageUnavailable when it cannot (a database that is down), StorageDamaged once it found damage. */
  health(): Promise<void>;
  /** Finishes queued writes, then releases what the engine holds. */
  close(): Promise<void>;
}

/**
 * What a read of one moment offers (`export`, `purge --dry-run`): a store opened as a snapshot,
 * or the journal of a data directory that was never migrated.
 */
export type StoreSnapshot = Pick<Store, 'exportAll' | 'expiredSessions' | 'close'>;

/** A delta as committed: the turn it went to, and where each piece went. */
export interface TurnDelta {
  readonly _id: string;
  readonly places: readonly DeltaPlace[];
}
