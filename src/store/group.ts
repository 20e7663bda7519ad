// What an engine gives the serial point (./writer.ts): a group of writes reads the committed state
// through a Group, and commits its changes through it, all of them durable or none.
import type { TurnKey } from '../domain/order.js';
import type { Change } from './changes.js';
import type { Tail } from './pieces.js';
import type { SessionState, TreeTurn, TurnNode, Usage } from './store.js';

/**
 * What the writes of a group will ask about one session's turns, known from their values before
 * they are decided. An engine that cannot read at the serial point (PostgreSQL, whose reads are
 * a round trip) reads these when the group begins; the others may ignore them.
 */
export interface TreeNeeds {
  readonly session: string;
  /** Turns looked up by id (a parent, a new head, a turn to edit or delete). */
  readonly turns: readonly string[];
  /** Paths from the root to these turns; null: to the session's head (a fork). */
  readonly paths: readonly (string | null)[];
  /** Subtrees a write deletes, each with the newest turn outside it. */
  readonly subtrees: readonly string[];
  /** Which of its turns are streaming (a reply asks before it starts). */
  readonly streaming?: boolean;
  /** Streaming turns a delta appends to: their tails, not their text. */
  readonly tails?: readonly string[];
}

/** What one group sees of the committed state, and how it becomes durable. */
export interface Group {
  /** A session as committed before this group, or undefined when there is none. */
  current(id: string): SessionState | undefined;
  /** A committed turn of a session (a streaming one with its text so far); undefined when the session has none by that id. */
  turn(session: string, id: string): TreeTurn | undefined;
  /**
   * What a delta needs of a committed turn: its tail when it is streaming, `'not streaming'`
   * when it is not, undefined when the session has no turn by that id. Never its text: a
   * delta's cost must not grow with the turn.
   */
  tail(session: string, id: string): Tail | 'not streaming' | undefined;
  /** The committed path from the root to a turn, oldest first; undefined when it is not a turn of the session. */
  path(session: string, id: string): readonly TreeTurn[] | undefined;
  /** A committed turn and its committed descendants; undefined when it is not a turn of the session. */
  subtree(session: string, id: string): readonly TurnNode[] | undefined;
  /** The newest committed turn of a session not in `excluded`. */
  lastTurnExcept(session: string, excluded: ReadonlySet<string>): TurnKey | undefined;
  /** What a user's sessions held as committed before this group. */
  usageOf(user: string): Usage;
  /** The committed turns of a session whose status is `streaming` (an engine that reads ahead has them when `needs` asked). */
  streamingTurns(session: string): readonly string[];
  /** Makes every change durable at once, in order; rejects (changing nothing) if it cannot. */
  commit(changes: readonly Change[]): Promise<void>;
  /** The group made no change: let go of whatever `begin` took. */
  release(): void;
}

export interface GroupSource {
  /**
   * Opens a group touching these sessions (an engine that serializes across processes locks
   * them here); `owners` are the users of the sessions the group creates; `needs` what its
   * writes will ask about the sessions' turns. `fresh`: the ids among `ids` that the group's
   * creates make, new ids no committed session should hold; given on a group's first attempt
   * only, so an engine may take them for absent without asking, provided a commit that finds
   * one present fails with GroupConflict (the writes are then decided again, with nothing fresh).
   */
  begin(ids: readonly string[], owners: readonly string[], needs: readonly TreeNeeds[], fresh: ReadonlySet<string>): Group | Promise<Group>;
}

/**
 * A commit that failed only because another process's transaction got in its way (a deadlock):
 * nothing was written, and the group is decided and committed again from the start.
 */
export class GroupConflict extends Error {
  override readonly name = 'GroupConflict';
}

/**
 * A Group asked about turns it did not read when it began (an engine that reads ahead, when an
 * earlier write of the same group moved the tree): the write waits for the next group, where it
 * comes first for its session and its own needs are read.
 */
export class NotReadAhead extends Error {
  override readonly name = 'NotReadAhead';
}

/**
 * A commit refused for want of room that the group's deletes alone would have had (the sqlite
 * engine keeps a reserve for groups that only take data away): nothing was written; the writes
 * that only take data away are decided and committed again by themselves, the others refused.
 */
export class RoomOnlyForDeletes extends Error {
  override readonly name = 'RoomOnlyForDeletes';
}

/**
 * A commit the database refused for what a write holds (a value it cannot take, a constraint),
 * not for being away: nothing was written, and when the group held several writes each is
 * decided and committed again by itself, so that one write's data fails that write alone.
 */
export class WriteRefused extends Error {
  override readonly name = 'WriteRefused';
}

/** Whether changes only take data away (deletes of sessions or of turns): the only ones the reserve is given back for. */
export function takesAway(changes: readonly Change[]): boolean {
  return changes.every((c) => c.kind === 'delete' || c.kind === 'deleteTurns');
}
