// The turns of a session as use cases: the list (all, or one branch), one turn, recording a
// turn under a parent, editing or deleting one (with its descendants), and a streaming turn's
// text deltas. Plain inputs in, the store's records out; the checks run at the serial point.
import { checkNewContent } from '../domain/inputs.js';
import { TurnNotFound, type Branch, type Page, type SessionRecord, type Store, type TurnDelta, type TurnEdit, type TurnKey, type TurnRecord, type TurnUpdate } from '../store/store.js';
import type { NewTurn } from '../store/writes.js';
import type { Access, Caller } from './access.js';

/** A turn as a request records it: what the store records (src/store/writes.ts NewTurn) but its writer, who is the caller, and its stamp, which the serial point gives. */
export type TurnInput = Omit<NewTurn, 'user' | '_id' | 'createdAt'>;

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
    // under a reply still being written, the turn would take the head from it mid-stream
    return this.store.appendTurn(id, { ...t, user: caller.user }, { guard: this.access.guard(caller.user, ifMatch), refuse: { streamingParent: true } });
  }

  /** Changes a turn's content, metadata, usage or status; with nothing to change, the turn as it is (no write), and its session. */
  async edit(caller: Caller, id: string, turnId: string, edit: TurnEdit, ifMatch: string | undefined): Promise<TurnUpdate> {
    if (Object.keys(edit).length === 0) {
      const current: SessionRecord = this.access.seen(await this.store.getSession(id), caller.user);
      this.access.check(caller.user, ifMatch, current);
      const turn = await this.store.getTurn(id, turnId);
      if (turn === undefined) throw new TurnNotFound();
      return { turn, session: current };
    }
    return this.store.updateTurn(id, turnId, edit, { guard: this.access.guard(caller.user, ifMatch) });
  }

  delete(caller: Caller, id: string, turnId: string, ifMatch: string | undefined): Promise<SessionRecord> {
    return this.store.deleteTurn(id, turnId, { guard: this.access.guard(caller.user, ifMatch) });
  }

  delta(caller: Caller, id: string, turnId: string, text: string, maxBytes: number, ifMatch: string | undefined): Promise<TurnDelta> {
    return this.store.appendDelta(id, turnId, [{ kind: 'text', text }], maxBytes, { guard: this.access.guard(caller.user, ifMatch) });
  }
}
