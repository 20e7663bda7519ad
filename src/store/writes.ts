// A write as a value: what a use case asks of the store and on what condition, in data. The
// serial point (./writer.ts) decides each one against what it reads (./decide.ts), never calling
// back up into the use case; a refusal is an error the decision throws.
import type { Piece } from '../domain/deltas.js';
import type { ReplyEnd } from '../domain/reply-end.js';
import type { Liveness } from '../domain/retention.js';
import type { ChatSession, JsonObject, StopReason, TurnContent, TurnError, TurnRole, TurnStatus, TurnUsage } from '../domain/records.js';

/**
 * What a write requires of the session it touches, checked at the serial point against the
 * session as it stands (each absent: no such check), in this order.
 */
export interface Guard {
  /** The session must be this user's to see: its own (any user's with `anyOwner`), live at `live` when given; else SessionNotVisible (a 404). */
  readonly caller?: { readonly user: string; readonly anyOwner?: boolean; readonly live?: Liveness | undefined } | undefined;
  /** If-Match's value: PreconditionFailed unless it names the session's version, or is `*`. */
  readonly ifMatch?: string | undefined;
  /**
   * The session's fields a use case decided the write from (it read first), as it read them:
   * SessionMoved when one is not so any more. Not its version, which every turn moves: a write
   * decided from a busy session's version would be decided again and again.
   */
  readonly same?: { readonly [K in keyof ChatSession]?: ChatSession[K] | undefined } | undefined;
  /** The purge's: the session must be gone at this moment, else SessionStillLive. */
  readonly goneAt?: Liveness | undefined;
}

/**
 * A turn a write records. The serial point stamps it (createdAt now, never before its session's
 * newest turn: ../domain/records.ts turnStamp) unless it carries its own `_id` and `createdAt`,
 * which must then be newer than its session's turns (an import's, a test's).
 */
export interface NewTurn {
  /** Who writes it (the session's owner is charged for it, whoever writes it). */
  readonly user: string;
  readonly role: TurnRole;
  readonly content: TurnContent;
  /** A turn of the session (or an earlier one of the same write) to put it under; null: a root; absent: the head, which each turn of the write becomes in turn. */
  readonly parentId?: string | null | undefined;
  readonly model?: string | undefined;
  readonly metadata?: JsonObject | undefined;
  readonly usage?: TurnUsage | undefined;
  /** Default `complete`. */
  readonly status?: TurnStatus | undefined;
  readonly _id?: string | undefined;
  readonly createdAt?: string | undefined;
}

/** What a turn's edit may change (PUT .../turns/:turnId); absent fields stay as they are. */
export interface TurnEdit {
  readonly content?: TurnContent;
  readonly metadata?: JsonObject;
  readonly usage?: TurnUsage;
  readonly status?: TurnStatus;
  /** Why it ended with `error` (a reply's). */
  readonly error?: TurnError;
  /** Why a reply ended, as its provider said. */
  readonly stopReason?: StopReason;
  /** The hash of the turn's path from the root as it ends (a reply's, for the OpenAI door's index). */
  readonly pathKey?: string;
}

/** The fields of a session a write may set; absent ones stay as they are. */
export type SessionFields = Partial<Pick<ChatSession, 'name' | 'provider' | 'selectedModel' | 'mode' | 'archived' | 'tags' | 'metadata' | 'expiresAt' | 'instructions'>> & {
  /** One of its turns (a ValidationError otherwise). */
  readonly headTurnId?: string | undefined;
};

/** A new session copying the path to a turn of another: its own id, owner, time and (else the source's) name. */
export interface ForkAs {
  readonly _id: string;
  readonly owner: string;
  readonly name?: string | undefined;
  readonly at: string;
}

/** When each turn-adding write refuses to go under a reply still being written. */
export interface TurnsRefusal {
  /** TurnStillStreaming when the parent of the first turn is `streaming` (a turn posted under a reply). */
  readonly streamingParent?: boolean;
  /** reply_in_progress when any turn of the session is `streaming` (a reply begun beside another). */
  readonly anyStreaming?: boolean;
}

/** Every kind of write; `now` is the clock as the use case asked (milliseconds), what the write's times come from. */
export type Write =
  | { readonly kind: 'create'; readonly session: ChatSession }
  | { readonly kind: 'update'; readonly id: string; readonly set: SessionFields; readonly guard: Guard | undefined; readonly now: number; readonly unlessSame: boolean }
  | { readonly kind: 'delete'; readonly id: string; readonly guard: Guard | undefined }
  | {
      readonly kind: 'turns';
      readonly sessionId: string;
      readonly turns: readonly NewTurn[];
      readonly guard: Guard | undefined;
      readonly now: number;
      readonly refuse: TurnsRefusal | undefined;
      /** The path keys of the turns, in their order (the OpenAI door's index; undefined: none). */
      readonly pathKeys: readonly (string | undefined)[] | undefined;
      /** The last turn is a reply this instance generates (see Store.leftStreaming). */
      readonly generated: boolean;
    }
  | {
      readonly kind: 'editTurn';
      readonly sessionId: string;
      readonly turnId: string;
      readonly edit: TurnEdit;
      readonly guard: Guard | undefined;
      readonly now: number;
      /** TurnNotStreaming unless the turn is `streaming` (an end, a cancel, the sweep). */
      readonly onlyStreaming: boolean;
      /** Never refused for a quota (the end of a reply, which must always be recorded), though what it adds is counted. */
      readonly uncharged: boolean;
    }
  /** A reply's end: its text not yet written, its status, usage and tool calls (../domain/reply-end.ts decides the edit); never refused for a quota. */
  | { readonly kind: 'endReply'; readonly sessionId: string; readonly turnId: string; readonly end: ReplyEnd; readonly now: number }
  | { readonly kind: 'deleteTurns'; readonly sessionId: string; readonly turnId: string; readonly guard: Guard | undefined; readonly now: number }
  | { readonly kind: 'fork'; readonly sourceId: string; readonly turnId: string | undefined; readonly as: ForkAs; readonly guard: Guard | undefined }
  | {
      readonly kind: 'delta';
      readonly sessionId: string;
      readonly turnId: string;
      readonly pieces: readonly Piece[];
      readonly maxBytes: number;
      /** The live feed was told of the pieces as they came (a reply's): the commit tells it nothing. */
      readonly quiet: boolean;
      readonly guard: Guard | undefined;
    };

/** What every write may say beside its value: its guard, and the clock it is decided at (default: the clock as it is asked). */
export interface WriteOptions {
  readonly guard?: Guard | undefined;
  readonly now?: number | undefined;
}

export interface AppendOptions extends WriteOptions {
  readonly refuse?: TurnsRefusal | undefined;
  /** The path keys of the turns, in their order (the OpenAI door's index). */
  readonly pathKeys?: readonly (string | undefined)[] | undefined;
  /** The last turn is a reply this instance generates (see Store.leftStreaming). */
  readonly generated?: boolean | undefined;
}

export interface EditOptions extends WriteOptions {
  /** TurnNotStreaming unless the turn is `streaming` (a cancel, the sweep). */
  readonly onlyStreaming?: boolean | undefined;
  /** Never refused for a quota, though what it adds is counted. */
  readonly uncharged?: boolean | undefined;
}
