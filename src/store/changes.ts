// What a committed group of writes changed, one Change per write, as the serial writer decides
// them (./writer.ts), the engines commit them and the live feed tells them (src/live/changes.ts).
// Each carries what it adds to its owner's usage, decided once by the writer: an engine adds
// it as it is and never works it out again.
import type { ContentEnd, DeltaPlace, Piece } from '../domain/deltas.js';
import type { TurnKey } from '../domain/order.js';
import type { ChatSession, Tokens, Turn } from '../domain/records.js';

/**
 * What one session's turns hold: how many, the UTF-8 bytes of their JSON, and the tokens of their
 * usage, each token figure saturating at COUNT_MAX (../domain/numbers.ts).
 */
export interface Held extends Tokens {
  readonly turns: number;
  readonly turnBytes: number;
  /**
   * The writer took tokens from a figure at the top, which says only "at least": the engine
   * counts the session's tokens again from its turns as the group leaves them (the figures here
   * are then the top, or exact where they were below it).
   */
  readonly recount?: true;
}

export const NOTHING_HELD: Held = { turns: 0, turnBytes: 0, inputTokens: 0, outputTokens: 0, cachedTokens: 0 };

/**
 * What one user's sessions hold: the sessions, their turns (whoever wrote them), the UTF-8
 * bytes of all their JSON, and the tokens their turns' usage reports.
 */
export interface Usage extends Tokens {
  readonly sessions: number;
  readonly turns: number;
  readonly bytes: number;
}

export const NO_USAGE: Usage = { sessions: 0, turns: 0, bytes: 0, inputTokens: 0, outputTokens: 0, cachedTokens: 0 };


/** A turn of a change, with its JSON as UTF-8 bytes. */
export interface TurnWithJson {
  readonly turn: Turn;
  readonly json: Buffer;
}

/** What a change adds to its session's owner's usage (negative figures give back). */
export interface UsageDelta extends Usage {
  readonly owner: string;
}

/** One change of a group, as the engine commits it. Each carries the session's state as it leaves it. */
export type Change =
  | { readonly kind: 'create'; readonly session: ChatSession; readonly json: string; readonly version: string; readonly usage: UsageDelta }
  /** Any change of a session's own fields (a rename, archive, a switch of its head). */
  | { readonly kind: 'update'; readonly session: ChatSession; readonly json: string; readonly version: string; readonly usage: UsageDelta }
  | {
      readonly kind: 'turn';
      readonly turn: Turn;
      /** The turn's JSON as UTF-8 bytes. */
      readonly json: Buffer;
      /** The session as the turn leaves it: the turn its head and its newest, its updatedAt raised. */
      readonly session: ChatSession;
      readonly sessionJson: string;
      readonly version: string;
      readonly raised: boolean;
      /** What the session's turns hold with it. */
      readonly held: Held;
      readonly usage: UsageDelta;
      /** The hash of its path from the root (the OpenAI door's index), for an assistant turn the door records. */
      readonly pathKey?: string | undefined;
      /** A reply this instance generates (PostgreSQL names the instance with the turn: its liveness says when the reply is left). */
      readonly generated?: boolean | undefined;
    }
  | {
      readonly kind: 'editTurn';
      /** The turn as edited (same _id, place and createdAt), a streaming turn's text so far folded in. */
      readonly turn: Turn;
      readonly json: Buffer;
      readonly session: ChatSession;
      readonly sessionJson: string;
      readonly version: string;
      /** The session's newest turn (an edit does not change it). */
      readonly lastTurn: TurnKey | undefined;
      readonly held: Held;
      readonly usage: UsageDelta;
      /** Its path key: a reply's as it ends; null, none any more (its content changed); undefined, as it was. */
      readonly pathKey?: string | null | undefined;
    }
  | {
      readonly kind: 'deleteTurns';
      readonly sessionId: string;
      /** The turn the deletion named. */
      readonly turnId: string;
      /** The turn deleted and its descendants. */
      readonly ids: readonly string[];
      /** The session as the deletion leaves it (its head moved when it was among them). */
      readonly session: ChatSession;
      readonly sessionJson: string;
      readonly version: string;
      /** Its newest turn once they are gone. */
      readonly lastTurn: TurnKey | undefined;
      readonly held: Held;
      readonly usage: UsageDelta;
    }
  | {
      readonly kind: 'fork';
      /** The new session, its head the last copy. */
      readonly session: ChatSession;
      readonly json: string;
      readonly version: string;
      /** The copies, root first. */
      readonly turns: readonly TurnWithJson[];
      readonly held: Held;
      readonly usage: UsageDelta;
    }
  | {
      readonly kind: 'delta';
      /** The streaming turn the pieces go to. */
      readonly turnId: string;
      /** Its deltas are numbered from 1 since it was created or last edited: this one's number. */
      readonly seq: number;
      /** What was appended, in order, and where each piece went. */
      readonly pieces: readonly Piece[];
      readonly places: readonly DeltaPlace[];
      /** UTF-8 bytes of the turn's JSON with them, and where its content then ends (what the next delta starts from). */
      readonly bytes: number;
      readonly end: ContentEnd;
      /** The live feed was told of the pieces as they came (a reply's): the commit tells it nothing. */
      readonly quiet: boolean;
      /** The session, whose own fields a delta does not change (the live feed tells whoever may see it). */
      readonly session: ChatSession;
      readonly held: Held;
      readonly usage: UsageDelta;
    }
  | {
      readonly kind: 'delete';
      readonly id: string;
      /** The session as it was (the live feed tells its owner's and its project's subscribers). */
      readonly session: ChatSession;
      readonly usage: UsageDelta;
    };

/**
 * Called with the changes of each group once the group is committed, in commit order: see
 * SerialWriter.onCommitted for exactly when.
 */
export type CommitListener = (changes: readonly Change[]) => void;
