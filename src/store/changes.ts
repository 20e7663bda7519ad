// What a committed group of writes changed, one Change per write, as the serial writer decides
// them (./writer.ts), the engines commit them and the live feed tells them (src/live/changes.ts).
import type { DeltaPlace, Piece } from '../domain/deltas.js';
import type { TurnKey } from '../domain/order.js';
import type { ChatSession, Turn } from '../domain/records.js';

/** A turn of a change, with its JSON as UTF-8 bytes. */
export interface TurnWithJson {
  readonly turn: Turn;
  readonly json: Buffer;
}

/** One change of a group, as the engine commits it. Each carries the session's state as it leaves it. */
export type Change =
  | { readonly kind: 'create'; readonly session: ChatSession; readonly json: string; readonly version: string }
  /** Any change of a session's own fields (a rename, archive, a switch of its head). */
  | { readonly kind: 'update'; readonly session: ChatSession; readonly json: string; readonly version: string }
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
    }
  | {
      readonly kind: 'editTurn';
      /** The turn as edited (same _id, place and createdAt). */
      readonly turn: Turn;
      readonly json: Buffer;
      /** UTF-8 bytes of the turn's JSON before the edit. */
      readonly previousBytes: number;
      readonly session: ChatSession;
      readonly sessionJson: string;
      readonly version: string;
      /** The session's newest turn (an edit does not change it). */
      readonly lastTurn: TurnKey | undefined;
    }
  | {
      readonly kind: 'deleteTurns';
      readonly sessionId: string;
      /** The turn the deletion named. */
      readonly turnId: string;
      /** The turn deleted and its descendants. */
      readonly ids: readonly string[];
      /** UTF-8 bytes of their JSON. */
      readonly bytes: number;
      /** The session as the deletion leaves it (its head moved when it was among them). */
      readonly session: ChatSession;
      readonly sessionJson: string;
      readonly version: string;
      /** Its newest turn once they are gone. */
      readonly lastTurn: TurnKey | undefined;
    }
  | {
      readonly kind: 'fork';
      /** The new session, its head the last copy. */
      readonly session: ChatSession;
      readonly json: string;
      readonly version: string;
      /** The copies, root first. */
      readonly turns: readonly TurnWithJson[];
    }
  | {
      readonly kind: 'delta';
      /** The streaming turn with the text appended (same _id, place and createdAt). */
      readonly turn: Turn;
      readonly json: Buffer;
      /** UTF-8 bytes of the turn's JSON before the delta. */
      readonly previousBytes: number;
      /** What was appended, in order, and where each piece went. */
      readonly pieces: readonly Piece[];
      readonly places: readonly DeltaPlace[];
      /** The live feed was told of the pieces as they came (a reply's): the commit tells it nothing. */
      readonly quiet: boolean;
      /** The session, which a delta does not change (the live feed tells whoever may see it). */
      readonly session: ChatSession;
    }
  | {
      readonly kind: 'delete';
      readonly id: string;
      /** The session as it was (the live feed tells its owner's and its project's subscribers). */
      readonly session: ChatSession;
    };

/**
 * Called with the changes of each group once the group is committed, in commit order: see
 * SerialWriter.onCommitted for exactly when.
 */
export type CommitListener = (changes: readonly Change[]) => void;
