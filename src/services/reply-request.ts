// What a reply is asked for, recorded (a message, a chain, or a reply alone, and the model's
// options) or not (the OpenAI door's `X-Record: off`), and what beginning or ending one answers.
import type { Piece } from '../domain/deltas.js';
import type { JsonObject, StopReason, TurnContent, TurnRole, TurnStatus, TurnUsage } from '../domain/records.js';
import type { ProviderFailed } from '../providers/failure.js';
import type { ReplyCall, ReplyOptions, ToolChoice, ToolSpec } from '../providers/wire.js';
import type { TurnRecord } from '../store/store.js';

/** What a message or a reply asks for. */
export interface ReplyRequest {
  /** A message's content: recorded as a user turn (or a tool turn), which the reply answers. Absent: a reply to `parentId`. */
  readonly content?: TurnContent | undefined;
  /** A message's role: `user` (the default), or `tool` (its `tool_result` parts answer tool calls on the path it follows). */
  readonly role?: 'user' | 'tool' | undefined;
  /** The turn the message follows (null: a new root), or the turn to reply to; absent: the head. */
  readonly parentId?: string | null | undefined;
  /** The model to ask; absent: the session's selectedModel. */
  readonly model?: string | undefined;
  /** The provider to ask it of (its `_id`); absent: the session's (the OpenAI door names one per request). */
  readonly providerId?: string | undefined;
  readonly options?: ReplyOptions | undefined;
  /** The client's tools the model may call, and whether it must. */
  readonly tools?: readonly ToolSpec[] | undefined;
  readonly toolChoice?: ToolChoice | undefined;
  /**
   * Turns to record first, in order, each under the one before (the first under `parentId`):
   * the reply answers the last (the OpenAI door's messages past what the session holds).
   */
  readonly chain?: readonly { readonly role: TurnRole; readonly content: TurnContent }[] | undefined;
  /** The chain's turns' path keys, in its order (undefined: none), for the OpenAI door's index. */
  readonly pathKeys?: readonly (string | undefined)[] | undefined;
  /** Told each piece of text and reasoning as it comes (the OpenAI door's stream). */
  readonly onPiece?: ((piece: Piece) => void) | undefined;
  /** The system message of this reply alone, in place of the session's instructions (OpenAI's Responses `instructions`). */
  readonly instructions?: string | undefined;
  /** The reply turn's metadata (what OpenAI's Responses keep of a response). */
  readonly replyMetadata?: JsonObject | undefined;
}

/** What a reply that is not recorded (the OpenAI door's `X-Record: off`) asks for. */
export interface UnrecordedRequest extends Omit<ReplyCall, 'signal'> {
  readonly onPiece?: ((piece: Piece) => void) | undefined;
  /** Aborted when its client leaves. */
  readonly signal: AbortSignal;
}

/** How a reply that is not recorded ended: what a recorded one would hold. */
export interface UnrecordedReply {
  readonly status: TurnStatus;
  readonly content: TurnContent;
  readonly usage?: TurnUsage | undefined;
  readonly stopReason?: StopReason | undefined;
  readonly error?: string | undefined;
  /** The provider's failure it ended with, if it did. */
  readonly failure?: ProviderFailed | undefined;
}

/** A reply under way: the user turn a message recorded, the reply as it began, and the reply as recorded at its end. */
export interface StartedReply {
  readonly turn: TurnRecord | undefined;
  /** Every turn recorded before the reply (the message's, or a chain's), in order. */
  readonly recorded: readonly TurnRecord[];
  readonly reply: TurnRecord;
  readonly done: Promise<TurnRecord>;
  /** Once done: the provider's failure it ended with, if it did (its status and whether it was passing are not recorded). */
  readonly failure: () => ProviderFailed | undefined;
}
