// The records this service keeps, in the spec's words: ChatSession, ChatSessionMode, Turn.
// Field order here is the order clients see in JSON.

export const CHAT_SESSION_MODES = ['Build', 'Plan', 'Ask'] as const;
export type ChatSessionMode = (typeof CHAT_SESSION_MODES)[number];
export const DEFAULT_MODE: ChatSessionMode = 'Build';

export function isChatSessionMode(value: string): value is ChatSessionMode {
  return (CHAT_SESSION_MODES as readonly string[]).includes(value);
}

/** A chat session as stored and as returned. Records are never mutated: a change makes a new object. */
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
}

export const TURN_ROLES = ['user', 'assistant', 'system', 'tool'] as const;
export type TurnRole = (typeof TURN_ROLES)[number];

export type JsonObject = { readonly [key: string]: JsonValue };
export type JsonValue = null | boolean | number | string | readonly JsonValue[] | JsonObject;

/** One turn of a session; `model` and `metadata` are present only when given. */
export interface Turn {
  readonly _id: string;
  readonly session: string;
  readonly user: string;
  readonly role: TurnRole;
  readonly content: string;
  readonly model?: string;
  readonly metadata?: JsonObject;
  readonly createdAt: string;
}

/** Builds a session with the fields in their wire order, so every record shares one shape. */
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
  };
}

/** Builds a turn with the fields in their wire order (`_id` and `session` first, `createdAt` last). */
export function turnRecord(f: Turn): Turn {
  return {
    _id: f._id,
    session: f.session,
    user: f.user,
    role: f.role,
    content: f.content,
    ...(f.model !== undefined ? { model: f.model } : {}),
    ...(f.metadata !== undefined ? { metadata: f.metadata } : {}),
    createdAt: f.createdAt,
  };
}

/**
 * The next `updatedAt` of a record: now, or the previous value when that is later (the clock
 * stepped back since the record last changed). A record never goes back in time: its turns are
 * listed in the order of their times, and replay, compaction and import raise a session to its
 * newest turn, so a step back would not survive a restart. A record changed while the clock ran
 * ahead therefore keeps that time until the clock passes it; new records take the clock's time.
 */
export function nextTimestamp(previous: string | undefined, nowMs: number = Date.now()): string {
  const now = new Date(nowMs).toISOString();
  return previous !== undefined && previous > now ? previous : now;
}

/**
 * The session as a new turn leaves it: its `updatedAt` raised to the turn's `createdAt` when that
 * is later (recording a turn moves its session to the front of its lists), else unchanged.
 */
export function raisedByTurn(session: ChatSession, turnCreatedAt: string): ChatSession {
  return turnCreatedAt > session.updatedAt ? chatSession({ ...session, updatedAt: turnCreatedAt }) : session;
}
