// The records this service keeps, in the spec's words: ChatSession, ChatSessionMode, Turn.
// Field order here is the order clients see in JSON.
import { countIn, isCount } from './numbers.js';

export const CHAT_SESSION_MODES = ['Build', 'Plan', 'Ask'] as const;
export type ChatSessionMode = (typeof CHAT_SESSION_MODES)[number];
export const DEFAULT_MODE: ChatSessionMode = 'Build';

export function isChatSessionMode(value: string): value is ChatSessionMode {
  return (CHAT_SESSION_MODES as readonly string[]).includes(value);
}

/** Where a fork came from: the source session and the turn its copy ends at (null: the source had no turns). */
export interface ForkedFrom {
  readonly session: string;
  readonly turn: string | null;
}

/**
 * A chat session as stored and as returned. Records are never mutated: a change makes a new
 * object. The ten fields of the first release come first, in their order (the version tag is a
 * digest of them: src/domain/version.ts); the fields added since follow.
 */
export interface ChatSession {
  readonly _id: string;
  readonly name: string;
  readonly provider: string;
  readonly selectedModel: string;
  readonly mode: ChatSessionMode;
  readonly user: string;
  readonly project: string;
  readonly createdAt: string;
  readonly updatedAt: string;
  readonly archived: boolean;
  /** The newest turn of the active branch; null while the session has no turns. */
  readonly headTurnId: string | null;
  /** Only on a session made by a fork. */
  readonly forkedFrom?: ForkedFrom;
  /** Only when it has some: labels the lists filter by, matched ignoring case. */
  readonly tags?: readonly string[];
  /** Only when it has some: the client's own string values by key. */
  readonly metadata?: SessionMetadata;
  /**
   * Only when the client set it: when it is gone (an ISO time, UTC with milliseconds), or null
   * for never (RETENTION_DAYS then does not apply to it).
   */
  readonly expiresAt?: string | null;
  /** Only when set: the system message of the replies the server asks for (at most INSTRUCTIONS_MAX_BYTES). */
  readonly instructions?: string;
}

/** A session's metadata: at most 16 keys, each value a string. */
export type SessionMetadata = { readonly [key: string]: string };

export const TURN_ROLES = ['user', 'assistant', 'system', 'tool'] as const;
export type TurnRole = (typeof TURN_ROLES)[number];

export type JsonObject = { readonly [key: string]: JsonValue };
export type JsonValue = null | boolean | number | string | readonly JsonValue[] | JsonObject;

export const TURN_STATUSES = ['complete', 'streaming', 'interrupted', 'error'] as const;
export type TurnStatus = (typeof TURN_STATUSES)[number];
export const DEFAULT_TURN_STATUS: TurnStatus = 'complete';

/** Why a reply ended, as its provider said, in the words OpenAI's API uses for them. */
export const STOP_REASONS = ['stop', 'length', 'tool_calls', 'content_filter'] as const;
export type StopReason = (typeof STOP_REASONS)[number];

export const PART_TYPES = ['text', 'reasoning', 'tool_call', 'tool_result', 'file'] as const;
export type PartType = (typeof PART_TYPES)[number];

/** One typed part of a turn's content. */
export type Part =
  | { readonly type: 'text'; readonly text: string }
  | { readonly type: 'reasoning'; readonly text: string }
  | { readonly type: 'tool_call'; readonly id: string; readonly name: string; readonly arguments: JsonValue }
  | { readonly type: 'tool_result'; readonly toolCallId: string; readonly content: JsonValue; readonly isError?: boolean }
  | { readonly type: 'file'; readonly name: string; readonly mediaType: string; readonly data?: string; readonly url?: string };

/** What a turn says: plain text (what the first release stored), or typed parts. */
export type TurnContent = string | readonly Part[];

/** The token usage of one turn. */
export interface TurnUsage {
  readonly inputTokens: number;
  readonly outputTokens: number;
  readonly cachedTokens?: number;
  /** Of the output, tokens of the model's reasoning (as OpenAI reports them). */
  readonly reasoningTokens?: number;
  readonly costUsd?: number;
}

/** The tokens a turn's usage reports, each 0 when it reports none: what usage counts of a turn (its cost is not counted). */
export interface Tokens {
  readonly inputTokens: number;
  readonly outputTokens: number;
  readonly cachedTokens: number;
}

export const NO_TOKENS: Tokens = { inputTokens: 0, outputTokens: 0, cachedTokens: 0 };

/**
 * The tokens of a turn's `usage` (absent: none), each a count (numbers.ts): what a turn an
 * earlier release stored out of range counts for, whatever its JSON says.
 */
export function tokensOf(usage: TurnUsage | undefined): Tokens {
  if (usage === undefined) return NO_TOKENS;
  return { inputTokens: countIn(usage.inputTokens), outputTokens: countIn(usage.outputTokens), cachedTokens: countIn(usage.cachedTokens ?? 0) };
}

/** The counts a turn's usage may report. */
const USAGE_COUNTS = ['inputTokens', 'outputTokens', 'cachedTokens', 'reasoningTokens'] as const;

/**
 * A stored turn's usage with every figure in its range, or undefined when it is in range
 * already: a count as countIn takes it (a required one missing or not a number is 0, an
 * optional one is left out), a cost that is not a finite non-negative number left out, the
 * other fields and the order as they were. For what an earlier release stored: this release
 * refuses such numbers where they enter.
 */
export function usageInRange(usage: unknown): TurnUsage | undefined {
  const given = usage !== null && typeof usage === 'object' && !Array.isArray(usage) ? (usage as JsonObject) : {};
  const out: Record<string, JsonValue> = { ...given };
  for (const k of USAGE_COUNTS) {
    const v = given[k];
    if (isCount(v)) continue;
    if (typeof v === 'number') out[k] = countIn(v);
    else if (k === 'inputTokens' || k === 'outputTokens') out[k] = 0;
    else delete out[k];
  }
  const cost = given['costUsd'];
  if (cost !== undefined && !(typeof cost === 'number' && Number.isFinite(cost) && cost >= 0)) delete out['costUsd'];
  return JSON.stringify(out) === JSON.stringify(usage) ? undefined : (out as unknown as TurnUsage);
}

/**
 * A stored turn's JSON with its usage taken into range (usageInRange), or undefined when it is
 * in range already; and the tokens the turn counts for.
 */
export function turnJsonInRange(json: string): { readonly json: string | undefined; readonly tokens: Tokens } {
  const turn = JSON.parse(json) as Turn;
  const usage = turn.usage === undefined ? undefined : usageInRange(turn.usage);
  return { json: usage === undefined ? undefined : JSON.stringify(turnRecord({ ...turn, usage })), tokens: tokensOf(usage ?? turn.usage) };
}

/**
 * One turn of a session. Turns form a tree: `parentId` is a turn of the same session, or null
 * for a root. `model`, `metadata` and `usage` are present only when given.
 */
export interface Turn {
  readonly _id: string;
  readonly session: string;
  readonly parentId: string | null;
  readonly user: string;
  readonly role: TurnRole;
  readonly content: TurnContent;
  readonly model?: string;
  readonly metadata?: JsonObject;
  readonly usage?: TurnUsage;
  /** Only on a turn that ended with `error` (a reply the provider refused or failed): what happened, in words that name the provider, never its key. */
  readonly error?: TurnError;
  /** Only on a reply whose provider said why it ended. */
  readonly stopReason?: StopReason;
  readonly status: TurnStatus;
  readonly createdAt: string;
}

/** Why a turn ended with status `error`. */
export interface TurnError {
  readonly message: string;
}

/**
 * Builds a session with the fields in their wire order, so every record shares one shape. A
 * record of the first release (no `headTurnId`) gets null there; callers that know its turns
 * set its head.
 */
export function chatSession(f: ChatSession): ChatSession {
  return {
    _id: f._id,
    name: f.name,
    provider: f.provider,
    selectedModel: f.selectedModel,
    mode: f.mode,
    user: f.user,
    project: f.project,
    createdAt: f.createdAt,
    updatedAt: f.updatedAt,
    archived: f.archived,
    headTurnId: f.headTurnId ?? null,
    ...(f.forkedFrom !== undefined ? { forkedFrom: { session: f.forkedFrom.session, turn: f.forkedFrom.turn } } : {}),
    ...(f.tags !== undefined && f.tags.length > 0 ? { tags: f.tags } : {}),
    ...(f.metadata !== undefined && Object.keys(f.metadata).length > 0 ? { metadata: f.metadata } : {}),
    ...(f.expiresAt !== undefined ? { expiresAt: f.expiresAt } : {}),
    ...(f.instructions !== undefined && f.instructions !== '' ? { instructions: f.instructions } : {}),
  };
}


/**
 * Builds a turn with the fields in their wire order: `_id`, `session` and `parentId` first and
 * `createdAt` last, where the journal's fast replay path finds them. A record of the first
 * release (no `parentId`, no `status`) gets null and `complete`; callers that know its place in
 * its session set its parent.
 */
export function turnRecord(f: Turn): Turn {
  return {
    _id: f._id,
    session: f.session,
    parentId: f.parentId ?? null,
    user: f.user,
    role: f.role,
    content: f.content,
    ...(f.model !== undefined ? { model: f.model } : {}),
    ...(f.metadata !== undefined ? { metadata: f.metadata } : {}),
    ...(f.usage !== undefined ? { usage: f.usage } : {}),
    ...(f.error !== undefined ? { error: { message: f.error.message } } : {}),
    ...(f.stopReason !== undefined ? { stopReason: f.stopReason } : {}),
    status: f.status ?? DEFAULT_TURN_STATUS,
    createdAt: f.createdAt,
  };
}

/**
 * The next `updatedAt` of a record: now when that is later than the previous value, else one
 * millisecond after it. So every change moves it forward, even two within one millisecond or
 * after a step back of the clock: the version tag, a digest of the first release's fields, then
 * tells apart states that differ only in what was added since (the head, a turn's content). A
 * record never goes back in time: its turns are listed in the order of their times, and replay,
 * compaction and import raise a session to its newest turn, so a step back would not survive a
 * restart. A record changed while the clock runs behind it creeps on by a millisecond a change
 * until the clock passes it; new records take the clock's time.
 */
export function nextTimestamp(previous: string | undefined, nowMs: number = Date.now()): string {
  if (previous === undefined) return new Date(nowMs).toISOString();
  const before = Date.parse(previous);
  return new Date(nowMs > before ? nowMs : before + 1).toISOString();
}

/**
 * The session as a new turn leaves it: its `updatedAt` raised to the turn's `createdAt` when that
 * is later (recording a turn moves its session to the front of its lists), else unchanged.
 */
export function raisedByTurn(session: ChatSession, turnCreatedAt: string): ChatSession {
  return turnCreatedAt > session.updatedAt ? chatSession({ ...session, updatedAt: turnCreatedAt }) : session;
}
