// The write half of every engine: each write goes to the engine's serial writer, where its
// check, change or build runs against the committed state plus its group's earlier writes.
// Engines supply the writer (and, through it, how a group reads and commits); the methods that
// hand a write over are the same for all of them, so they are written once here.
import type { Piece } from '../domain/deltas.js';
import type { ChatSession, Turn } from '../domain/records.js';
import type { SessionAtWrite, SessionRecord, TurnDelta, TurnEdit, TurnRecord, TurnUpdate, WriteHint } from './store.js';
import type { CommitListener } from './changes.js';
import type { SerialWriter } from './writer.js';

export abstract class SerialWrites {
  protected abstract readonly writer: SerialWriter;

  createSession(session: ChatSession): Promise<SessionRecord> {
    return this.writer.createSession(session);
  }

  updateSession(id: string, change: (current: SessionAtWrite) => ChatSession, hint?: WriteHint): Promise<SessionRecord> {
    return this.writer.updateSession(id, change, hint);
  }

  deleteSession(id: string, check: (current: SessionAtWrite) => void): Promise<void> {
    return this.writer.deleteSession(id, check);
  }

  appendTurn(sessionId: string, build: (current: SessionAtWrite) => Turn, hint?: WriteHint): Promise<TurnRecord> {
    return this.writer.appendTurn(sessionId, build, hint);
  }

  appendTurns(sessionId: string, build: (current: SessionAtWrite) => readonly Turn[], hint?: WriteHint): Promise<TurnRecord[]> {
    return this.writer.appendTurns(sessionId, build, hint);
  }

  updateTurn(sessionId: string, turnId: string, check: (current: SessionAtWrite) => void, edit: (turn: Turn) => TurnEdit, opts?: { readonly uncharged?: boolean }): Promise<TurnUpdate> {
    return this.writer.updateTurn(sessionId, turnId, check, edit, opts);
  }

  deleteTurn(sessionId: string, turnId: string, check: (current: SessionAtWrite) => void): Promise<SessionRecord> {
    return this.writer.deleteTurn(sessionId, turnId, check);
  }

  forkSession(sourceId: string, turnId: string | undefined, owner: string, build: (source: SessionAtWrite) => ChatSession): Promise<SessionRecord> {
    return this.writer.forkSession(sourceId, turnId, owner, build);
  }

  appendDelta(sessionId: string, turnId: string, check: (current: SessionAtWrite) => void, pieces: readonly Piece[], maxBytes: number, quiet?: boolean): Promise<TurnDelta> {
    return this.writer.appendDelta(sessionId, turnId, check, pieces, maxBytes, quiet);
  }

  /** Committed changes, announced after each commit and before any write of the group is answered. */
  onCommitted(listener: CommitListener): void {
    this.writer.onCommitted(listener);
  }
}
