// The Store every engine implements, and the domain errors it raises. Reads return promises of
// immutable values, safe to hold across an `await`. Writes pass through one serial point per
// store (src/store/writer.ts), where the caller's check or change runs against the current
// state, so ownership and If-Match checks cannot race; a write's promise settles once the change
// is committed (or has failed and changed nothing).
import type { SessionKey, TurnKey } from '../domain/order.js';
import type { ChatSession, Turn } from '../domain/records.js';

export type { SessionKey, TurnKey } from '../domain/order.js';

export const ENGINES = ['journal', 'sqlite', 'postgres'] as const;
export type EngineName = (typeof ENGINES)[number];

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

/** A session as a write finds it at the serial point. */
export interface Current {
  readonly session: ChatSession;
  /** Its newest turn, if any. */
  readonly lastTurn: TurnKey | undefined;
  /** Its version tag (computed on demand: only conditional writes need it). */
  version(): string;
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

/** An engine's own measure, shown in /metrics beside the generic ones. */
export interface EngineGauge {
  readonly name: string;
  readonly help: string;
  readonly type: 'gauge' | 'counter';
  readonly value: number;
}

/** What one user's sessions hold: the sessions, their turns (whoever wrote them), and the UTF-8 bytes of all their JSON. */
export interface Usage {
  readonly sessions: number;
  readonly turns: number;
  readonly bytes: number;
}

export interface StoreStats {
  readonly sessions: number;
  readonly turns: number;
  /** UTF-8 bytes of the JSON of every live session and turn: the same figure on every engine. */
  readonly bytes: number;
  readonly engine: readonly EngineGauge[];
}

/** Hooks the store calls so metrics can watch it without the store knowing about metrics. */
export interface StoreObserver {
  /** Every commit (one per group of writes), with its duration and the number of writes it made durable. */
  commit(seconds: number, writes: number): void;
}

export interface Store {
  readonly engine: EngineName;

  getSession(id: string): Promise<SessionRecord | undefined>;
  /** Sessions matching `filter` in list order, strictly after `after`, at most `limit` (1-1000). */
  listSessions(filter: SessionFilter, after: SessionKey | undefined, limit: number): Promise<Page<SessionRecord, SessionKey>>;
  /**
   * The whole of a list as of one moment, in list order, in chunks: what a list without `limit`
   * answers. The snapshot holds while the caller reads it slowly; writes go on meanwhile.
   */
  scanSessions(filter: SessionFilter): AsyncIterable<readonly SessionRecord[]>;
  /** Turns of a session oldest first, strictly after `after`, at most `limit`; an unknown session has none. */
  listTurns(sessionId: string, after: TurnKey | undefined, limit: number): Promise<Page<TurnRecord, TurnKey>>;
  /** Every turn of a session as of one moment, oldest first, in chunks. */
  scanTurns(sessionId: string): AsyncIterable<readonly TurnRecord[]>;

  createSession(session: ChatSession): Promise<SessionRecord>;
  /**
   * Replaces a session with `change(current)`. `change` runs at the store's serial point, after
   * every earlier write, so checks it makes (ownership, If-Match) cannot race. It may throw to
   * refuse; a missing session is a SessionNotFound before `change` is called.
   */
  updateSession(id: string, change: (current: Current) => ChatSession): Promise<SessionRecord>;
  /** Deletes a session and its turns after `check(current)` passes. */
  deleteSession(id: string, check: (current: Current) => void): Promise<void>;
  /** Appends the turn `build(current)` returns; the session's `updatedAt` is raised to the turn's `createdAt` when later. */
  appendTurn(sessionId: string, build: (current: Current) => Turn): Promise<TurnRecord>;

  /** Every live session with its turns, as of one moment. */
  exportAll(): Promise<ExportSnapshot>;
  /**
   * Writes these sessions and turns as given, all or nothing: a record whose `_id` is stored is
   * replaced by this version (a session's `updatedAt` is raised to its newest turn, as a turn does),
   * records not given stay. Turns must come after their session in `sessions` or be stored already.
   */
  importAll(sessions: readonly ChatSession[], turns: readonly Turn[]): Promise<ImportSummary>;

  stats(): Promise<StoreStats>;
  /** What the sessions `user` owns hold (the same figures on every engine). */
  usage(user: string): Promise<Usage>;
  /** Finishes queued writes, then releases what the engine holds. */
  close(): Promise<void>;
}

export class SessionNotFound extends Error {
  override readonly name = 'SessionNotFound';
  constructor() {
    super('Chat session not found');
  }
}

export class PreconditionFailed extends Error {
  override readonly name = 'PreconditionFailed';
  constructor() {
    super('Chat session was modified');
  }
}

/** A quota of the session's owner (QUOTA_SESSIONS, QUOTA_TURNS, QUOTA_BYTES) would be passed; nothing changed. */
export class QuotaExceeded extends Error {
  override readonly name = 'QuotaExceeded';
  constructor(
    readonly quota: keyof Usage,
    readonly limit: number,
  ) {
    super(`Quota exceeded: ${quota} (at most ${limit} per user)`);
  }
}

/** A write that could not be committed; nothing changed. The message leaks no path. */
export class StorageWriteFailed extends Error {
  override readonly name = 'StorageWriteFailed';
  constructor(cause?: unknown) {
    super('Storage write failed', { cause });
  }
}

/** The engine cannot be reached (a database that is down); the request may be retried later. */
export class StorageUnavailable extends Error {
  override readonly name = 'StorageUnavailable';
  constructor(cause?: unknown) {
    super('Storage unavailable', { cause });
  }
}

/** What the engine found on opening stops the start: one line naming the file or database and what to do. */
export class StoreOpenFailed extends Error {
  override readonly name = 'StoreOpenFailed';
}
