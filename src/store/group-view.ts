// What a write of a group reads at the serial point: the committed state (the engine's Group) seen
// through the changes the group's earlier writes decided. Reading never changes it; the writer
// charges a write's changes to their owners' quotas and applies them here once it is decided.
import { appendPieces, isStreamingJson, type Piece } from '../domain/deltas.js';
import type { TurnKey } from '../domain/order.js';
import { tokensOf, turnRecord, type ChatSession, type Turn } from '../domain/records.js';
import { versionOfSession } from '../domain/version.js';
import type { Quotas } from '../config.js';
import { NOTHING_HELD, type Change, type Held } from './changes.js';
import type { Group } from './group.js';
import { tailOfJson, type Tail } from './pieces.js';
import { QuotaExceeded, type SessionAtWrite, type SessionState, type TreeTurn, type TurnNode } from './store.js';
import { usageByOwner, type TotalDelta } from './totals.js';

/** A session as changed by an earlier write of the same group (null: deleted). */
interface Staged {
  readonly session: ChatSession;
  readonly lastTurn: TurnKey | undefined;
  readonly held: Held;
  /** Its JSON, once made. */
  readonly json?: string | undefined;
}

/** A streaming turn's deltas decided by earlier writes of the group: its tail after them, and their pieces (not yet in any JSON the view holds). */
interface StagedTail {
  readonly tail: Tail;
  /** The pieces of the group's deltas to the turn, in order: appended to, never copied (many deltas in a group cost what they add). */
  readonly pieces: Piece[];
}

/** What the earlier writes of a group did to one session's turns. */
class StagedTree {
  /** Turns added, oldest first (each newer than every committed one), as they now are. */
  readonly added = new Map<string, TreeTurn>();
  /** Committed turns edited, as they now are. */
  readonly edited = new Map<string, TreeTurn>();
  /** Committed turns deleted. */
  readonly removed = new Set<string>();
  /** Streaming turns appended to, by their id. */
  readonly tails = new Map<string, StagedTail>();
  /** A session made in this group: nothing of it is committed. */
  constructor(readonly fresh: boolean) {}
}

export const treeTurnOf = (turn: Turn, json: Buffer): TreeTurn => ({ _id: turn._id, createdAt: turn.createdAt, parentId: turn.parentId, bytes: json.length, json, tokens: tokensOf(turn.usage) });
export const keyOf = (t: TurnKey): TurnKey => ({ createdAt: t.createdAt, _id: t._id });

/** What a decision reads: the sessions and turns as the group's earlier writes leave them. */
export interface WriteView {
  current(id: string): SessionAtWrite | undefined;
  /** What a delta needs of a turn (Group.tail), without its text. */
  tail(session: string, id: string): Tail | 'not streaming' | undefined;
}

/** The committed state seen through the changes the group has decided so far. */
export class GroupView implements WriteView {
  private readonly staged = new Map<string, Staged | null>();
  private readonly trees = new Map<string, StagedTree>();
  /** What the group's earlier writes add to each owner's committed usage. */
  private readonly added = new Map<string, TotalDelta>();
  constructor(
    readonly group: Group,
    private readonly quotas: Quotas | undefined,
  ) {}

  /**
   * Charges a write's changes to their owners, or throws QuotaExceeded when they would take a
   * quota past its limit (only what grows is checked: a user over a quota lowered since may still
   * shrink; nothing with `uncharged`, the end of a reply). The usage is the committed one plus
   * what the group's earlier writes added or gave back, so writes that arrive together cannot
   * pass a quota between them. Tokens have no quota.
   */
  charge(changes: readonly Change[], uncharged: boolean): void {
    const q = this.quotas;
    if (q === undefined || (q.sessions === undefined && q.turns === undefined && q.bytes === undefined)) return;
    const mine = usageByOwner(changes);
    if (!uncharged) {
      for (const [owner, u] of mine) {
        const before = this.added.get(owner);
        const committed = this.group.usageOf(owner);
        for (const [name, limit] of [['sessions', q.sessions], ['turns', q.turns], ['bytes', q.bytes]] as const) {
          if (limit !== undefined && u[name] > 0 && committed[name] + (before?.[name] ?? 0) + u[name] > limit) throw new QuotaExceeded(name, limit);
        }
      }
    }
    usageByOwner(changes, undefined, this.added);
  }

  /** Stages a decided write's changes, in order: what the group's later writes read. */
  apply(changes: readonly Change[]): void {
    for (const c of changes) this.applyOne(c);
  }

  private applyOne(c: Change): void {
    switch (c.kind) {
      case 'create':
        this.stage(c.session._id, { session: c.session, lastTurn: undefined, held: NOTHING_HELD, json: c.json });
        this.tree(c.session._id, true);
        return;
      case 'update': {
        const was = this.state(c.session._id);
        this.stage(c.session._id, { session: c.session, lastTurn: was?.lastTurn, held: was?.held ?? NOTHING_HELD, json: c.json });
        return;
      }
      case 'delete':
        this.stage(c.id, null);
        return;
      case 'turn':
        this.stage(c.session._id, { session: c.session, lastTurn: keyOf(c.turn), held: c.held, json: c.sessionJson });
        this.tree(c.session._id).added.set(c.turn._id, treeTurnOf(c.turn, c.json));
        return;
      case 'editTurn': {
        this.stage(c.session._id, { session: c.session, lastTurn: c.lastTurn, held: c.held, json: c.sessionJson });
        // the turn as edited holds what the group's deltas staged for it: they are folded in now
        const t = this.tree(c.session._id);
        if (t.added.has(c.turn._id)) t.added.set(c.turn._id, treeTurnOf(c.turn, c.json));
        else t.edited.set(c.turn._id, treeTurnOf(c.turn, c.json));
        t.tails.delete(c.turn._id);
        return;
      }
      case 'deleteTurns': {
        this.stage(c.sessionId, { session: c.session, lastTurn: c.lastTurn, held: c.held, json: c.sessionJson });
        const t = this.tree(c.sessionId);
        for (const id of c.ids) {
          t.tails.delete(id);
          if (t.added.delete(id)) continue;
          t.edited.delete(id);
          t.removed.add(id);
        }
        return;
      }
      case 'fork': {
        const last = c.turns[c.turns.length - 1]?.turn;
        this.stage(c.session._id, { session: c.session, lastTurn: last === undefined ? undefined : keyOf(last), held: c.held, json: c.json });
        const t = this.tree(c.session._id, true);
        for (const copy of c.turns) t.added.set(copy.turn._id, treeTurnOf(copy.turn, copy.json));
        return;
      }
      case 'delta': {
        // the session's own fields stay: its JSON, version and newest turn are as they were
        const was = this.state(c.session._id);
        const prev = this.staged.get(c.session._id);
        this.stage(c.session._id, { session: c.session, lastTurn: was?.lastTurn, held: c.held, json: prev?.json });
        const t = this.tree(c.session._id);
        const staged = t.tails.get(c.turnId)?.pieces ?? [];
        for (const p of c.pieces) staged.push(p);
        t.tails.set(c.turnId, { tail: { bytes: c.bytes, end: c.end, seq: c.seq }, pieces: staged });
        return;
      }
    }
  }

  /** A session as the group's earlier writes leave it, without its tree. */
  private state(id: string): SessionState | undefined {
    const staged = this.staged.get(id);
    if (staged === undefined) return this.group.current(id);
    if (staged === null) return undefined;
    return { session: staged.session, lastTurn: staged.lastTurn, held: staged.held, version: () => versionOfSession(staged.json ?? JSON.stringify(staged.session), staged.lastTurn) };
  }

  current(id: string): SessionAtWrite | undefined {
    const state = this.state(id);
    if (state === undefined) return undefined;
    const { session, lastTurn, held, version } = state;
    return {
      session,
      lastTurn,
      held,
      version,
      turn: (t) => this.turn(id, t),
      path: (t) => this.path(id, t),
      subtree: (t) => this.subtree(id, t),
      lastTurnAfterRemoving: (removed) => (lastTurn === undefined || !removed.has(lastTurn._id) ? lastTurn : this.lastTurnExcept(id, removed)),
      streamingTurn: () => this.streamingTurn(id),
      isStreaming: (t) => this.isStreaming(id, t),
    };
  }

  /** A streaming turn of the session as the group's earlier writes leave it: one they added or edited so, else a committed one they left so. */
  private streamingTurn(session: string): string | undefined {
    const t = this.trees.get(session);
    if (t !== undefined) {
      for (const m of [t.added, t.edited]) for (const x of m.values()) if (isStreamingJson(x.json)) return x._id;
      if (t.fresh) return undefined;
    }
    for (const id of this.group.streamingTurns(session)) if (t === undefined || (!t.removed.has(id) && !t.edited.has(id))) return id;
    return undefined;
  }

  /** Whether turn `id` is streaming as the group's earlier writes leave it. */
  private isStreaming(session: string, id: string): boolean {
    const t = this.trees.get(session);
    if (t !== undefined) {
      if (t.removed.has(id)) return false;
      const x = t.added.get(id) ?? t.edited.get(id);
      if (x !== undefined) return isStreamingJson(x.json);
      if (t.fresh) return false;
    }
    return this.group.streamingTurns(session).includes(id);
  }

  private stage(id: string, s: Staged | null): void {
    this.staged.set(id, s);
    if (s === null) this.trees.delete(id);
  }

  /** The staged tree of a session; `fresh` for one this group makes. */
  private tree(id: string, fresh = false): StagedTree {
    let t = this.trees.get(id);
    if (t === undefined || fresh) {
      t = new StagedTree(fresh);
      this.trees.set(id, t);
    }
    return t;
  }

  /**
   * A turn with the pieces the group's deltas staged for it folded in (what a write that needs
   * its text sees: the end of a reply, a fork), made anew at each read: the view is not changed
   * by reading it.
   */
  private folded(t: StagedTree, turn: TreeTurn): TreeTurn {
    const staged = t.tails.get(turn._id);
    if (staged === undefined || staged.pieces.length === 0) return turn;
    const was = JSON.parse(turn.json.toString('utf8')) as Turn;
    const json = ownBytes(JSON.stringify(turnRecord({ ...was, content: appendPieces(was.content, staged.pieces) })));
    return { ...turn, bytes: json.length, json };
  }

  private turn(session: string, id: string): TreeTurn | undefined {
    const t = this.trees.get(session);
    if (t === undefined) return this.group.turn(session, id);
    if (t.removed.has(id)) return undefined;
    const found = t.added.get(id) ?? t.edited.get(id) ?? (t.fresh ? undefined : this.group.turn(session, id));
    return found === undefined ? undefined : this.folded(t, found);
  }

  tail(session: string, id: string): Tail | 'not streaming' | undefined {
    const t = this.trees.get(session);
    if (t === undefined) return this.group.tail(session, id);
    if (t.removed.has(id)) return undefined;
    const staged = t.tails.get(id);
    if (staged !== undefined) return staged.tail;
    // made or edited by this group: its JSON is at hand, read once (the edit's commit removes its delta rows: numbering starts again)
    const whole = t.added.get(id) ?? t.edited.get(id);
    if (whole !== undefined) return isStreamingJson(whole.json) ? tailOfJson(whole.json) : 'not streaming';
    return t.fresh ? undefined : this.group.tail(session, id);
  }

  private path(session: string, id: string): readonly TreeTurn[] | undefined {
    const t = this.trees.get(session);
    if (t === undefined) return this.group.path(session, id);
    const tail: TreeTurn[] = [];
    let at: string | null = id;
    while (at !== null) {
      if (t.removed.has(at)) return undefined;
      const added = t.added.get(at);
      if (added === undefined) break;
      tail.push(this.folded(t, added));
      at = added.parentId;
    }
    tail.reverse();
    if (at === null) return tail;
    if (t.fresh) return undefined;
    const base = this.group.path(session, at);
    if (base === undefined) return undefined;
    return [...base.map((b) => this.folded(t, t.edited.get(b._id) ?? b)), ...tail];
  }

  private subtree(session: string, id: string): readonly TurnNode[] | undefined {
    const t = this.trees.get(session);
    if (t === undefined) return this.group.subtree(session, id);
    if (t.removed.has(id)) return undefined;
    let nodes: TurnNode[];
    const added = t.added.get(id);
    if (added !== undefined) nodes = [added];
    else {
      if (t.fresh) return undefined;
      const base = this.group.subtree(session, id);
      if (base === undefined) return undefined;
      nodes = base.filter((n) => !t.removed.has(n._id)).map((n) => t.edited.get(n._id) ?? n);
    }
    const inside = new Set(nodes.map((n) => n._id));
    for (const a of t.added.values()) {
      if (!inside.has(a._id) && a.parentId !== null && inside.has(a.parentId)) {
        nodes.push(a);
        inside.add(a._id);
      }
    }
    // a turn the group's deltas grew counts its bytes with them
    return nodes.map((n) => {
      const staged = t.tails.get(n._id);
      return staged === undefined ? n : { ...n, bytes: staged.tail.bytes };
    });
  }

  private lastTurnExcept(session: string, excluded: ReadonlySet<string>): TurnKey | undefined {
    const t = this.trees.get(session);
    if (t === undefined) return this.group.lastTurnExcept(session, excluded);
    const added = [...t.added.values()];
    for (let i = added.length - 1; i >= 0; i--) {
      const a = added[i] as TreeTurn;
      if (!excluded.has(a._id)) return keyOf(a);
    }
    if (t.fresh) return undefined;
    return this.group.lastTurnExcept(session, t.removed.size === 0 ? excluded : new Set([...t.removed, ...excluded]));
  }
}

/**
 * The UTF-8 bytes of `text` in a buffer of their own. Buffer.from puts small strings in slices
 * of a shared 8 KiB pool, and an engine that keeps the turn would keep the whole pool slab alive
 * with it.
 */
export function ownBytes(text: string): Buffer {
  const b = Buffer.allocUnsafeSlow(Buffer.byteLength(text));
  b.write(text, 0, 'utf8');
  return b;
}
