// The turns of a session as use cases: the list (all, or one branch), one turn, recording a
// turn under a parent, editing or deleting one (with its descendants), and a streaming turn's
// text deltas. Plain inputs in, the store's records out; the checks run at the serial point.
import { newObjectId } from '../domain/ids.js';
import { checkNewContent } from '../domain/inputs.js';
import { DEFAULT_TURN_STATUS, nextTimestamp, type JsonObject, type Turn, type TurnContent, type TurnRole, type TurnStatus, type TurnUsage } from '../domain/records.js';
import { ValidationError } from '../domain/schema.js';
import { TurnNotFound, TurnStillStreaming, type Branch, type Page, type SessionAtWrite, type SessionRecord, type Store, type TurnDelta, type TurnEdit, type TurnKey, type TurnRecord, type TurnUpdate } from '../store/store.js';
import { stateOf, type Access, type Caller } from './access.js';

/** A turn as a request records it. */
export interface TurnInput {
  readonly role: TurnRole;
  readonly content: TurnContent;
  /** A turn of the session to put it under; null: a root; absent: the session's head. */
  readonly parentId?: string | null | undefined;
  readonly model?: string | undefined;
  readonly metadata?: JsonObject | undefined;
  readonly usage?: TurnUsage | undefined;
  readonly status?: TurnStatus | undefined;
}

/**
 * The createdAt and _id of a new turn: now, never before the session's updatedAt or its newest
 * turn. Turns recorded within one millisecond share it, their ids in the order they were made
 * (a burst of turns is never stamped ahead of the clock); on a tie with the newest turn whose id
 * does not sort before the new one (ids sort in creation order within one process, not across a
 * restart with the clock set back) it is a millisecond later. The version still moves with every
 * turn: the newest turn is part of it.
 */
export function turnStamp(current: { readonly session: { readonly updatedAt: string }; readonly lastTurn: TurnKey | undefined }, nowMs: number = Date.now()): { createdAt: string; _id: string } {
  const now = new Date(nowMs).toISOString();
  let at = current.session.updatedAt > now ? current.session.updatedAt : now;
  const last = current.lastTurn;
  if (last !== undefined && last.createdAt > at) at = last.createdAt;
  let _id = newObjectId(Date.parse(at));
  if (last !== undefined && last.createdAt === at && _id <= last._id) {
    at = nextTimestamp(at, nowMs);
    _id = newObjectId(Date.parse(at));
  }
  return { createdAt: at, _id };
}

/**
 * The turn a write records in session `current` for `who`: under `parentId` (a turn of the
 * session, else a ValidationError), or the head; stamped now.
 */
export function newTurn(current: SessionAtWrite, who: string, t: TurnInput): Turn {
  if (typeof t.parentId === 'string' && current.turn(t.parentId) === undefined) throw new ValidationError('parentId must be a turn of this session');
  const { createdAt, _id } = turnStamp(current);
  return {
    _id,
    session: current.session._id,
    parentId: t.parentId === undefined ? current.session.headTurnId : t.parentId,
    user: who,
    role: t.role,
    content: t.content,
    ...(t.model !== undefined ? { model: t.model } : {}),
    ...(t.metadata !== undefined ? { metadata: t.metadata } : {}),
    ...(t.usage !== undefined ? { usage: t.usage } : {}),
    status: t.status ?? DEFAULT_TURN_STATUS,
    createdAt,
  };
}

export class TurnService {
  constructor(
    private readonly store: Store,
    private readonly access: Access,
  ) {}

  /** Whether the caller may see session `id`'s turns (a session that does not exist has none). */
  async visible(caller: Caller, id: string): Promise<boolean> {
    return this.access.found(await this.store.getSession(id), caller.user);
  }

  /** A page of a session's turns (or of one branch), strictly after `after`; none for a session the caller cannot see. */
  async list(caller: Caller, id: string, branch: Branch | undefined, after: TurnKey | undefined, limit: number): Promise<Page<TurnRecord, TurnKey>> {
    if (!(await this.visible(caller, id))) return { items: [], next: undefined };
    return this.store.listTurns(id, after, limit, branch);
  }

  /** Every turn of a session (or of one branch) as of one moment, in chunks; none for a session the caller cannot see. */
  async *scan(caller: Caller, id: string, branch: Branch | undefined): AsyncIterable<readonly TurnRecord[]> {
    if (!(await this.visible(caller, id))) return;
    yield* this.store.scanTurns(id, branch);
  }

  /** One turn of a session the caller may see: SessionNotFound, TurnNotFound. */
  async get(caller: Caller, id: string, turnId: string): Promise<TurnRecord> {
    this.access.seen(await this.store.getSession(id), caller.user);
    const turn = await this.store.getTurn(id, turnId);
    if (turn === undefined) throw new TurnNotFound();
    return turn;
  }

  append(caller: Caller, id: string, t: TurnInput, ifMatch: string | undefined): Promise<TurnRecord> {
    checkNewContent(t.content, t.status);
    const check = this.access.mine(caller.user, ifMatch);
    return this.store.appendTurn(
      id,
      (cur) => {
        check(cur);
        // under a reply still being written, the turn would take the head from it mid-stream
        const parent = t.parentId === undefined ? cur.session.headTurnId : t.parentId;
        if (parent !== null && cur.isStreaming(parent)) throw new TurnStillStreaming();
        return newTurn(cur, caller.user, t);
      },
      { ...(t.parentId === undefined ? {} : { parentId: t.parentId }), streaming: true },
    );
  }

  /** Changes a turn's content, metadata, usage or status; with nothing to change, the turn as it is (no write), and its session. */
  async edit(caller: Caller, id: string, turnId: string, edit: TurnEdit, ifMatch: string | undefined): Promise<TurnUpdate> {
    const check = this.access.mine(caller.user, ifMatch);
    if (Object.keys(edit).length === 0) {
      const current: SessionRecord = this.access.seen(await this.store.getSession(id), caller.user);
      check(stateOf(current));
      const turn = await this.store.getTurn(id, turnId);
      if (turn === undefined) throw new TurnNotFound();
      return { turn, session: current };
    }
    return this.store.updateTurn(id, turnId, check, () => edit);
  }

  delete(caller: Caller, id: string, turnId: string, ifMatch: string | undefined): Promise<SessionRecord> {
    return this.store.deleteTurn(id, turnId, this.access.mine(caller.user, ifMatch));
  }

  delta(caller: Caller, id: string, turnId: string, text: string, maxBytes: number, ifMatch: string | undefined): Promise<TurnDelta> {
    return this.store.appendDelta(id, turnId, this.access.mine(caller.user, ifMatch), [{ kind: 'text', text }], maxBytes);
  }
}
