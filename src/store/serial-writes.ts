// The write half of every engine: each write becomes a value (./writes.ts) handed to the engine's
// serial writer, and its answer is read from the changes it made. Engines supply the writer (and,
// through it, how a group reads and commits); the methods are the same for all of them, so they
// are written once here.
import type { Piece } from '../domain/deltas.js';
import type { ReplyEnd } from '../domain/reply-end.js';
import type { ChatSession, TurnStatus } from '../domain/records.js';
import type { Change, CommitListener } from './changes.js';
import type { SessionRecord, TurnDelta, TurnEdit, TurnRecord, TurnUpdate } from './store.js';
import type { SerialWriter } from './writer.js';
import type { AppendOptions, EditOptions, ForkAs, Guard, NewTurn, SessionFields, WriteOptions } from './writes.js';

export abstract class SerialWrites {
  protected abstract readonly writer: SerialWriter;

  createSession(session: ChatSession): Promise<SessionRecord> {
    return this.writer.submit({ kind: 'create', session }).then(sessionAnswer);
  }

  updateSession(id: string, set: SessionFields, opts?: WriteOptions & { readonly unlessSame?: boolean }): Promise<SessionRecord> {
    return this.writer.submit({ kind: 'update', id, set, guard: opts?.guard, now: opts?.now ?? Date.now(), unlessSame: opts?.unlessSame === true }).then(sessionAnswer);
  }

  deleteSession(id: string, opts?: WriteOptions): Promise<void> {
    return this.writer.submit({ kind: 'delete', id, guard: opts?.guard }).then(() => undefined);
  }

  appendTurn(sessionId: string, turn: NewTurn, opts?: AppendOptions): Promise<TurnRecord> {
    return this.appendTurns(sessionId, [turn], opts).then((t) => t[0] as TurnRecord);
  }

  appendTurns(sessionId: string, turns: readonly NewTurn[], opts?: AppendOptions): Promise<TurnRecord[]> {
    return this.writer.submit({ kind: 'turns', sessionId, turns, guard: opts?.guard, now: opts?.now ?? Date.now(), refuse: opts?.refuse, pathKeys: opts?.pathKeys, generated: opts?.generated === true }).then((changes) => changes.map(turnAnswer));
  }

  updateTurn(sessionId: string, turnId: string, edit: TurnEdit, opts?: EditOptions): Promise<TurnUpdate> {
    return this.writer
      .submit({ kind: 'editTurn', sessionId, turnId, edit, guard: opts?.guard, now: opts?.now ?? Date.now(), onlyStreaming: opts?.onlyStreaming === true, uncharged: opts?.uncharged === true })
      .then(turnUpdateAnswer);
  }

  endReply(sessionId: string, turnId: string, end: ReplyEnd): Promise<TurnUpdate & { readonly status: TurnStatus }> {
    return this.writer.submit({ kind: 'endReply', sessionId, turnId, end, now: Date.now() }).then((changes) => ({ ...turnUpdateAnswer(changes), status: editOf(changes).turn.status }));
  }

  deleteTurn(sessionId: string, turnId: string, opts?: WriteOptions): Promise<SessionRecord> {
    return this.writer.submit({ kind: 'deleteTurns', sessionId, turnId, guard: opts?.guard, now: opts?.now ?? Date.now() }).then(sessionAnswer);
  }

  forkSession(sourceId: string, turnId: string | undefined, as: ForkAs, opts?: WriteOptions): Promise<SessionRecord> {
    return this.writer.submit({ kind: 'fork', sourceId, turnId, as, guard: opts?.guard }).then(sessionAnswer);
  }

  appendDelta(sessionId: string, turnId: string, pieces: readonly Piece[], maxBytes: number, opts?: { readonly guard?: Guard; readonly quiet?: boolean }): Promise<TurnDelta> {
    return this.writer.submit({ kind: 'delta', sessionId, turnId, pieces, maxBytes, quiet: opts?.quiet === true, guard: opts?.guard }).then((changes) => {
      const c = changes[0];
      if (c?.kind !== 'delta') throw new Error('a delta made no delta');
      return { _id: c.turnId, places: c.places };
    });
  }

  /** Committed changes, announced after each commit and before any write of the group is answered. */
  onCommitted(listener: CommitListener): void {
    this.writer.onCommitted(listener);
  }
}

/** The session a write leaves (a create, an update, a fork, a deletion of turns). */
function sessionAnswer(changes: readonly Change[]): SessionRecord {
  const c = changes[0];
  if (c === undefined) throw new Error('a write made no change');
  switch (c.kind) {
    case 'create':
    case 'update':
    case 'fork':
      return { session: c.session, json: c.json, version: c.version };
    case 'deleteTurns':
    case 'turn':
    case 'editTurn':
      return { session: c.session, json: c.sessionJson, version: c.version };
    default:
      throw new Error(`a ${c.kind} change has no session answer`);
  }
}

function turnAnswer(c: Change): TurnRecord {
  if (c.kind !== 'turn') throw new Error(`a ${c.kind} change has no turn answer`);
  return { _id: c.turn._id, createdAt: c.turn.createdAt, json: c.json };
}

/** The one change an edit (or a reply's end) made. */
function editOf(changes: readonly Change[]): Extract<Change, { readonly kind: 'editTurn' }> {
  const c = changes[0];
  if (c?.kind !== 'editTurn') throw new Error('an edit made no edit');
  return c;
}

function turnUpdateAnswer(changes: readonly Change[]): TurnUpdate {
  const c = editOf(changes);
  return { turn: { _id: c.turn._id, createdAt: c.turn.createdAt, json: c.json }, session: { session: c.session, json: c.sessionJson, version: c.version } };
}
