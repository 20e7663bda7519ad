// The serial point of a store. Every write waits in one queue; the writes that arrived while
// the previous group was committing form the next group (group commit). For each write, in
// order, the caller's callback (a check, a change, a turn to build) runs against the committed
// state plus the group's earlier changes, then the engine commits the whole group at once:
// all of it durable, or none of it and every write of the group refused. Engines supply only
// the committed state and the commit; the rules of what a write does live here, once: every
// resulting session state, its version and its newest turn are decided here, and so is what
// each change adds to its owner's usage (the Change carries it; engines add it as it is).
import { appendPieces, appendToEnd, isStreamingJson, type DeltaPlace, type Piece } from '../domain/deltas.js';
import type { Change, CommitListener, TurnWithJson, UsageDelta } from './changes.js';
import { newObjectId } from '../domain/ids.js';
import { turnBefore, type TurnKey } from '../domain/order.js';
import { COUNT_MAX, countIn } from '../domain/numbers.js';
import { chatSession, nextTimestamp, NO_TOKENS, raisedByTurn, tokensOf, turnRecord, type ChatSession, type Tokens, type Turn } from '../domain/records.js';
import { versionOfSession } from '../domain/version.js';
import type { Quotas } from '../config.js';
import type { Logger } from '../log.js';
import { tailOfJson, type Tail } from './pieces.js';
import {
  NOTHING_HELD,
  NO_USAGE,
  QuotaExceeded,
  SessionNotFound,
  StorageDamaged,
  StorageUnavailable,
  StorageWriteFailed,
  TurnNotFound,
  TurnNotStreaming,
  TurnTooLarge,
  type Held,
  type SessionAtWrite,
  type SessionRecord,
  type SessionState,
  type TreeTurn,
  type TurnDelta,
  type TurnEdit,
  type TurnNode,
  type TurnRecord,
  type TurnUpdate,
  type Usage,
  type WriteHint,
} from './store.js';

/**
 * What the writes of a group will ask about one session's turns, known from their requests
 * before they are decided. An engine that cannot read at the serial point (PostgreSQL, whose
 * reads are a round trip) reads these when the group begins; the others may ignore them.
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

/** Whether a write's change (or changes) only takes data away: a delete of a session or of turns. */
function takesAway(d: Change | readonly Change[]): boolean {
  const all: readonly Change[] = Array.isArray(d) ? (d as readonly Change[]) : [d as Change];
  return all.every((c) => c.kind === 'delete' || c.kind === 'deleteTurns');
}

/** Times a group is tried before its writes are refused. */
const ATTEMPTS = 3;
const NOTHING_FRESH: ReadonlySet<string> = new Set();

interface PendingWrite {
  /** The sessions it touches. */
  readonly ids: readonly string[];
  /** The new session a create makes (among `ids`). */
  readonly creates: string | undefined;
  /** Times it was put off to the next group (NotReadAhead). */
  deferrals: number;
  /** The owner of the session a create or a fork makes. */
  readonly owner: string | undefined;
  readonly needs: TreeNeeds | undefined;
  /** Decides the change (or changes, in order) against the group's view; throws to refuse, having staged nothing. */
  decide(view: GroupView): Change | readonly Change[];
  /** The write's answer once its changes are durable. */
  result(change: Change | readonly Change[]): unknown;
  resolve(value: unknown): void;
  reject(err: unknown): void;
}

/** A session as changed by an earlier write of the same group (null: deleted). */
interface Staged {
  readonly session: ChatSession;
  readonly lastTurn: TurnKey | undefined;
  readonly held: Held;
  /** Its JSON, once made. */
  readonly json?: string;
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

const treeTurnOf = (turn: Turn, json: Buffer): TreeTurn => ({ _id: turn._id, createdAt: turn.createdAt, parentId: turn.parentId, bytes: json.length, json, tokens: tokensOf(turn.usage) });
const keyOf = (t: TurnKey): TurnKey => ({ createdAt: t.createdAt, _id: t._id });

/** The committed state seen through the changes the group has decided so far. */
class GroupView {
  private readonly staged = new Map<string, Staged | null>();
  private readonly trees = new Map<string, StagedTree>();
  /** What the group's earlier writes add to each owner's committed usage. */
  private readonly added = new Map<string, { sessions: number; turns: number; bytes: number }>();
  constructor(
    readonly group: Group,
    private readonly quotas: Quotas | undefined,
  ) {}

  /**
   * Charges a change's usage to its owner, or throws QuotaExceeded when it would take a quota
   * past its limit (only what grows is checked: a user over a quota lowered since may still
   * shrink; nothing with `uncharged`, the end of a reply). The usage is the committed one plus
   * what the group's earlier writes added or gave back, so writes that arrive together cannot
   * pass a quota between them. Tokens have no quota.
   */
  charge(u: UsageDelta, uncharged = false): UsageDelta {
    const q = this.quotas;
    if (q === undefined || (q.sessions === undefined && q.turns === undefined && q.bytes === undefined)) return u;
    let a = this.added.get(u.owner);
    const committed = this.group.usageOf(u.owner);
    const over = (name: 'sessions' | 'turns' | 'bytes', limit: number | undefined): void => {
      const delta = u[name];
      if (!uncharged && limit !== undefined && delta > 0 && committed[name] + (a?.[name] ?? 0) + delta > limit) throw new QuotaExceeded(name, limit);
    };
    over('sessions', q.sessions);
    over('turns', q.turns);
    over('bytes', q.bytes);
    if (a === undefined) this.added.set(u.owner, (a = { sessions: 0, turns: 0, bytes: 0 }));
    a.sessions += u.sessions;
    a.turns += u.turns;
    a.bytes += u.bytes;
    return u;
  }

  current(id: string): SessionAtWrite | undefined {
    const staged = this.staged.get(id);
    let state: SessionState | undefined;
    if (staged === undefined) state = this.group.current(id);
    else if (staged !== null) state = { session: staged.session, lastTurn: staged.lastTurn, held: staged.held, version: () => versionOfSession(staged.json ?? JSON.stringify(staged.session), staged.lastTurn) };
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
  streamingTurn(session: string): string | undefined {
    const t = this.trees.get(session);
    if (t !== undefined) {
      for (const m of [t.added, t.edited]) for (const x of m.values()) if (isStreamingJson(x.json)) return x._id;
      if (t.fresh) return undefined;
    }
    for (const id of this.group.streamingTurns(session)) if (t === undefined || (!t.removed.has(id) && !t.edited.has(id))) return id;
    return undefined;
  }

  /** Whether turn `id` is streaming as the group's earlier writes leave it. */
  isStreaming(session: string, id: string): boolean {
    const t = this.trees.get(session);
    if (t !== undefined) {
      if (t.removed.has(id)) return false;
      const x = t.added.get(id) ?? t.edited.get(id);
      if (x !== undefined) return isStreamingJson(x.json);
      if (t.fresh) return false;
    }
    return this.group.streamingTurns(session).includes(id);
  }

  stage(id: string, s: Staged | null): void {
    this.staged.set(id, s);
    if (s === null) this.trees.delete(id);
  }

  /** The staged tree of a session; `fresh` for one this group makes. */
  tree(id: string, fresh = false): StagedTree {
    let t = this.trees.get(id);
    if (t === undefined || fresh) {
      t = new StagedTree(fresh);
      this.trees.set(id, t);
    }
    return t;
  }

  /** Records a turn as a write of the group leaves it (made, or edited: its staged deltas are in it now). */
  put(t: StagedTree, turn: TreeTurn): void {
    if (t.added.has(turn._id)) t.added.set(turn._id, turn);
    else t.edited.set(turn._id, turn);
    t.tails.delete(turn._id);
  }

  /**
   * A turn with the pieces the group's deltas staged for it folded in (what a write that needs
   * its text sees: the end of a reply, a fork). Folded once: the view keeps the result, and the
   * tail stays for the deltas that follow.
   */
  private folded(t: StagedTree, turn: TreeTurn): TreeTurn {
    const staged = t.tails.get(turn._id);
    if (staged === undefined || staged.pieces.length === 0) return turn;
    const was = JSON.parse(turn.json.toString('utf8')) as Turn;
    const json = ownBytes(JSON.stringify(turnRecord({ ...was, content: appendPieces(was.content, staged.pieces) })));
    const whole = { ...turn, bytes: json.length, json };
    if (t.added.has(turn._id)) t.added.set(turn._id, whole);
    else t.edited.set(turn._id, whole);
    t.tails.set(turn._id, { tail: staged.tail, pieces: [] });
    return whole;
  }

  turn(session: string, id: string): TreeTurn | undefined {
    const t = this.trees.get(session);
    if (t === undefined) return this.group.turn(session, id);
    if (t.removed.has(id)) return undefined;
    const found = t.added.get(id) ?? t.edited.get(id) ?? (t.fresh ? undefined : this.group.turn(session, id));
    return found === undefined ? undefined : this.folded(t, found);
  }

  /** What a delta needs of a turn as the group's earlier writes leave it (Group.tail), without its text. */
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

  path(session: string, id: string): readonly TreeTurn[] | undefined {
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

  subtree(session: string, id: string): readonly TurnNode[] | undefined {
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

  lastTurnExcept(session: string, excluded: ReadonlySet<string>): TurnKey | undefined {
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

/** An empty TreeNeeds for a session, to fill in. */
function needsOf(session: string, over: Partial<Omit<TreeNeeds, 'session'>>): TreeNeeds {
  return { session, turns: over.turns ?? [], paths: over.paths ?? [], subtrees: over.subtrees ?? [], ...(over.streaming === true ? { streaming: true } : {}), ...(over.tails !== undefined ? { tails: over.tails } : {}) };
}

export class SerialWriter {
  private queue: PendingWrite[] = [];
  private writing = false;
  private paused = false;
  private closed = false;
  private idleWaiters: (() => void)[] = [];
  private committed: CommitListener | undefined;

  constructor(
    private readonly source: GroupSource,
    private readonly log: Logger,
    /** What one user's sessions may hold (usage by session owner), checked at this serial point. */
    private readonly quotas?: Quotas,
    /** Writes in one group at most: 1 only to measure what group commit buys (GROUP_COMMIT=off). */
    private readonly maxGroup = Infinity,
    /**
     * Begin the next group before answering the writes of the one that committed, for an engine
     * whose begin is a round trip (PostgreSQL): its locks are taken while the answers are written.
     * The next group holds the same writes either way (those queued while the last committed).
     */
    private readonly beginBeforeAnswering = false,
  ) {}

  createSession(session: ChatSession): Promise<SessionRecord> {
    return this.submit<SessionRecord>([session._id], session.user, undefined, (view) => {
      if (view.current(session._id) !== undefined) throw new Error('duplicate session id');
      const s = chatSession({ ...session, headTurnId: null });
      const json = JSON.stringify(s);
      const usage = view.charge(usageDelta(s.user, { sessions: 1, bytes: Buffer.byteLength(json) }));
      view.stage(s._id, { session: s, lastTurn: undefined, held: NOTHING_HELD, json });
      view.tree(s._id, true);
      return { kind: 'create', session: s, json, version: versionOfSession(json, undefined), usage };
    }, sessionResult, session._id);
  }

  updateSession(id: string, change: (current: SessionAtWrite) => ChatSession, hint?: WriteHint): Promise<SessionRecord> {
    const head = hint?.headTurnId;
    return this.submit<SessionRecord>([id], undefined, head === undefined ? undefined : needsOf(id, { turns: [head] }), (view) => {
      const current = view.current(id);
      if (current === undefined) throw new SessionNotFound();
      const next = chatSession(change(current));
      if (next.headTurnId !== current.session.headTurnId && next.headTurnId !== null && current.turn(next.headTurnId) === undefined) {
        throw new Error('a session head must be one of its turns');
      }
      // its owner too: what a session holds is its owner's (only an import moves a session to another)
      if (next._id !== id || next.user !== current.session.user || next.forkedFrom?.session !== current.session.forkedFrom?.session) throw new Error('an update cannot change what a session is');
      const json = JSON.stringify(next);
      const usage = view.charge(usageDelta(next.user, { bytes: Buffer.byteLength(json) - sessionBytes(current) }));
      view.stage(id, { session: next, lastTurn: current.lastTurn, held: current.held, json });
      return { kind: 'update', session: next, json, version: versionOfSession(json, current.lastTurn), usage };
    }, sessionResult);
  }

  deleteSession(id: string, check: (current: SessionAtWrite) => void): Promise<void> {
    return this.submit<void>([id], undefined, undefined, (view) => {
      const current = view.current(id);
      if (current === undefined) throw new SessionNotFound();
      check(current);
      // never refused: what it gives back counts for the group's later writes
      const h = current.held;
      const usage = view.charge(
        usageDelta(current.session.user, { sessions: -1, turns: -h.turns, bytes: -(sessionBytes(current) + h.turnBytes), inputTokens: -h.inputTokens, outputTokens: -h.outputTokens, cachedTokens: -h.cachedTokens }),
      );
      view.stage(id, null);
      return { kind: 'delete', id, session: current.session, usage };
    }, () => undefined);
  }

  appendTurn(sessionId: string, build: (current: SessionAtWrite) => Turn, hint?: WriteHint): Promise<TurnRecord> {
    return this.appendTurns(sessionId, (current) => [build(current)], hint).then((t) => t[0] as TurnRecord);
  }

  /**
   * Appends the turns `build(current)` returns, in order, in one write: each newer than the one
   * before, under the head, a turn of the session or an earlier turn of the list; the last
   * becomes the head. All or none (a message and the start of its reply).
   */
  appendTurns(sessionId: string, build: (current: SessionAtWrite) => readonly Turn[], hint?: WriteHint): Promise<TurnRecord[]> {
    const parent = hint?.parentId;
    const needs = typeof parent === 'string' || hint?.streaming === true ? needsOf(sessionId, { turns: typeof parent === 'string' ? [parent] : [], streaming: hint?.streaming === true }) : undefined;
    return this.submit<TurnRecord[]>([sessionId], undefined, needs, (view) => {
      const current = view.current(sessionId);
      if (current === undefined) throw new SessionNotFound();
      const built = build(current);
      // every turn is checked before any is staged: a write that refuses leaves the group's view as it found it
      let head = current.session.headTurnId;
      let newest = current.lastTurn;
      let session = current.session;
      let sessionJsonBytes = sessionBytes(current);
      let held = current.held;
      const made: { turn: Turn; json: Buffer; session: ChatSession; sessionJson: string; lastTurn: TurnKey; raised: boolean; held: Held; usage: UsageDelta }[] = [];
      const mine = new Set<string>();
      for (const b of built) {
        // a builder that leaves the parent out (as the first release's callers did) continues the head
        const parentId = b.parentId === undefined ? head : b.parentId;
        const turn = turnRecord({ ...b, session: sessionId, parentId });
        // the head is one of the session's turns; another parent is one the request named (and the hint read ahead), or one of this list
        if (parentId !== null && parentId !== head && !mine.has(parentId) && current.turn(parentId) === undefined) throw new Error('a turn parent must be a turn of its session');
        if (turn.createdAt < session.updatedAt || (newest !== undefined && !turnBefore(newest, turn))) throw new Error("a new turn must be newer than its session's turns and not older than its updatedAt");
        const next = chatSession({ ...raisedByTurn(session, turn.createdAt), headTurnId: turn._id });
        const json = ownBytes(JSON.stringify(turn));
        const sessionJson = JSON.stringify(next);
        const nextBytes = Buffer.byteLength(sessionJson);
        const tokens = tokensOf(turn.usage);
        // the session's owner is charged, whoever writes the turn
        const usage = usageDelta(session.user, { turns: 1, bytes: json.length + nextBytes - sessionJsonBytes, ...tokens });
        held = heldPlus(held, 1, json.length, tokens);
        made.push({ turn, json, session: next, sessionJson, lastTurn: keyOf(turn), raised: next.updatedAt !== session.updatedAt, held, usage });
        mine.add(turn._id);
        head = turn._id;
        newest = keyOf(turn);
        session = next;
        sessionJsonBytes = nextBytes;
      }
      const last = made[made.length - 1];
      if (last === undefined) throw new Error('no turn to append');
      view.charge(made.reduce((sum, m) => sumOf(sum, m.usage), usageDelta(current.session.user, {})));
      view.stage(sessionId, { session: last.session, lastTurn: last.lastTurn, held: last.held, json: last.sessionJson });
      const tree = view.tree(sessionId);
      for (const m of made) tree.added.set(m.turn._id, treeTurnOf(m.turn, m.json));
      const keys = hint?.pathKeys;
      const generated = hint?.generated === true ? made.length - 1 : -1;
      return made.map((m, i): Change => ({ kind: 'turn', turn: m.turn, json: m.json, session: m.session, sessionJson: m.sessionJson, version: versionOfSession(m.sessionJson, m.lastTurn), raised: m.raised, held: m.held, usage: m.usage, ...(keys?.[i] !== undefined ? { pathKey: keys[i] } : {}), ...(i === generated ? { generated: true } : {}) }));
    }, (changes) => (Array.isArray(changes) ? changes : [changes]).map(turnResult));
  }

  updateTurn(sessionId: string, turnId: string, check: (current: SessionAtWrite) => void, edit: (turn: Turn) => TurnEdit, opts?: { readonly uncharged?: boolean }): Promise<TurnUpdate> {
    return this.submit<TurnUpdate>([sessionId], undefined, needsOf(sessionId, { turns: [turnId] }), (view) => {
      const current = view.current(sessionId);
      if (current === undefined) throw new SessionNotFound();
      check(current);
      // a streaming turn's text so far is in it: the edit folds its deltas into the turn for good
      const found = current.turn(turnId);
      if (found === undefined) throw new TurnNotFound();
      const was = turnRecord(JSON.parse(found.json.toString('utf8')) as Turn);
      const e = edit(was);
      const turn = turnRecord({
        ...was,
        ...(e.content !== undefined ? { content: e.content } : {}),
        ...(e.metadata !== undefined ? { metadata: e.metadata } : {}),
        ...(e.usage !== undefined ? { usage: e.usage } : {}),
        ...(e.status !== undefined ? { status: e.status } : {}),
        ...(e.error !== undefined ? { error: e.error } : {}),
        ...(e.stopReason !== undefined ? { stopReason: e.stopReason } : {}),
      });
      const session = chatSession({ ...current.session, updatedAt: nextTimestamp(current.session.updatedAt) });
      const json = ownBytes(JSON.stringify(turn));
      const sessionJson = JSON.stringify(session);
      const tokens = minus(tokensOf(turn.usage), found.tokens);
      const usage = view.charge(usageDelta(session.user, { bytes: json.length - found.bytes + Buffer.byteLength(sessionJson) - sessionBytes(current), ...tokens }), opts?.uncharged === true);
      const held = heldPlus(current.held, 0, json.length - found.bytes, tokens);
      view.stage(sessionId, { session, lastTurn: current.lastTurn, held, json: sessionJson });
      view.put(view.tree(sessionId), treeTurnOf(turn, json));
      // a turn whose content changed no longer has the path it was indexed by; a reply's end gives its own
      const pathKey = e.pathKey !== undefined ? e.pathKey : e.content !== undefined ? null : undefined;
      return { kind: 'editTurn', turn, json, session, sessionJson, version: versionOfSession(sessionJson, current.lastTurn), lastTurn: current.lastTurn, held, usage, ...(pathKey !== undefined ? { pathKey } : {}) };
    }, (c) => {
      if (c.kind !== 'editTurn') throw new Error(`a ${c.kind} change has no turn update answer`);
      return { turn: { _id: c.turn._id, createdAt: c.turn.createdAt, json: c.json }, session: { session: c.session, json: c.sessionJson, version: c.version } };
    });
  }

  deleteTurn(sessionId: string, turnId: string, check: (current: SessionAtWrite) => void): Promise<SessionRecord> {
    return this.submit<SessionRecord>([sessionId], undefined, needsOf(sessionId, { turns: [turnId], subtrees: [turnId] }), (view) => {
      const current = view.current(sessionId);
      if (current === undefined) throw new SessionNotFound();
      check(current);
      const target = current.turn(turnId);
      const removed = target === undefined ? undefined : current.subtree(turnId);
      if (target === undefined || removed === undefined) throw new TurnNotFound();
      const ids = new Set(removed.map((n) => n._id));
      const lastTurn = current.lastTurnAfterRemoving(ids);
      const head = current.session.headTurnId;
      const session = chatSession({ ...current.session, headTurnId: head !== null && ids.has(head) ? target.parentId : head, updatedAt: nextTimestamp(current.session.updatedAt) });
      const sessionJson = JSON.stringify(session);
      let bytes = 0;
      let tokens: Tokens = NO_TOKENS;
      for (const n of removed) {
        bytes += n.bytes;
        tokens = plus(tokens, n.tokens);
      }
      const gone = minus(NO_TOKENS, tokens);
      // never refused: what it gives back counts for the group's later writes
      const usage = view.charge(usageDelta(session.user, { turns: -ids.size, bytes: Buffer.byteLength(sessionJson) - sessionBytes(current) - bytes, ...gone }));
      const held = heldPlus(current.held, -ids.size, -bytes, gone);
      view.stage(sessionId, { session, lastTurn, held, json: sessionJson });
      const tree = view.tree(sessionId);
      for (const id of ids) {
        tree.tails.delete(id);
        if (tree.added.delete(id)) continue;
        tree.edited.delete(id);
        tree.removed.add(id);
      }
      return { kind: 'deleteTurns', sessionId, turnId, ids: [...ids], session, sessionJson, version: versionOfSession(sessionJson, lastTurn), lastTurn, held, usage };
    }, (c) => {
      if (c.kind !== 'deleteTurns') throw new Error(`a ${c.kind} change has no session answer`);
      return { session: c.session, json: c.sessionJson, version: c.version };
    });
  }

  forkSession(sourceId: string, turnId: string | undefined, owner: string, build: (source: SessionAtWrite) => ChatSession): Promise<SessionRecord> {
    return this.submit<SessionRecord>([sourceId], owner, needsOf(sourceId, { paths: [turnId ?? null], ...(turnId !== undefined ? { turns: [turnId] } : {}) }), (view) => {
      const source = view.current(sourceId);
      if (source === undefined) throw new SessionNotFound();
      const given = chatSession(build(source));
      if (given.user !== owner) throw new Error("a fork is its caller's");
      const end = turnId ?? source.session.headTurnId;
      const path = end === null ? [] : source.path(end);
      if (path === undefined) throw new TurnNotFound();
      if (view.current(given._id) !== undefined) throw new Error('duplicate session id');
      const turns: TurnWithJson[] = [];
      const copyOf = new Map<string, string>();
      let previous: Turn | undefined;
      let held = NOTHING_HELD;
      for (const t of path) {
        const was = turnRecord(JSON.parse(t.json.toString('utf8')) as Turn);
        const turn = turnRecord({ ...was, _id: copyId(was, previous), session: given._id, parentId: was.parentId === null ? null : (copyOf.get(was.parentId) ?? null) });
        copyOf.set(was._id, turn._id);
        const json = ownBytes(JSON.stringify(turn));
        turns.push({ turn, json });
        held = heldPlus(held, 1, json.length, tokensOf(turn.usage));
        previous = turn;
      }
      const last = previous === undefined ? undefined : keyOf(previous);
      const session = chatSession({
        ...(last === undefined ? given : raisedByTurn(given, last.createdAt)),
        headTurnId: previous?._id ?? null,
        forkedFrom: { session: sourceId, turn: end },
      });
      const json = JSON.stringify(session);
      // the copies are the fork's owner's, like turns they wrote
      const usage = view.charge(usageDelta(owner, { sessions: 1, turns: held.turns, bytes: Buffer.byteLength(json) + held.turnBytes, inputTokens: held.inputTokens, outputTokens: held.outputTokens, cachedTokens: held.cachedTokens }));
      view.stage(session._id, { session, lastTurn: last, held, json });
      const tree = view.tree(session._id, true);
      for (const c of turns) tree.added.set(c.turn._id, treeTurnOf(c.turn, c.json));
      return { kind: 'fork', session, json, version: versionOfSession(json, last), turns, held, usage };
    }, sessionResult);
  }

  /**
   * Appends pieces to a streaming turn from its tail alone (its bytes, where its content ends,
   * its last delta's number): the places, the size check and the bytes charged cost what the
   * pieces hold, whatever the turn's length; the engine stores the delta as a row of its own.
   */
  appendDelta(sessionId: string, turnId: string, check: (current: SessionAtWrite) => void, pieces: readonly Piece[], maxBytes: number, quiet = false): Promise<TurnDelta> {
    return this.submit<TurnDelta>([sessionId], undefined, needsOf(sessionId, { tails: [turnId] }), (view) => {
      const current = view.current(sessionId);
      if (current === undefined) throw new SessionNotFound();
      check(current);
      const tail = view.tail(sessionId, turnId);
      if (tail === undefined) throw new TurnNotFound();
      if (tail === 'not streaming') throw new TurnNotStreaming();
      let end = tail.end;
      let grown = 0;
      const places: DeltaPlace[] = [];
      for (const p of pieces) {
        const r = appendToEnd(end, p);
        end = r.end;
        grown += r.bytes;
        places.push(r.place);
      }
      const bytes = tail.bytes + grown;
      if (bytes > maxBytes) throw new TurnTooLarge();
      // a streaming turn grows its session's owner's bytes, delta by delta
      const usage = view.charge(usageDelta(current.session.user, { bytes: grown }));
      const held = heldPlus(current.held, 0, grown, NO_TOKENS);
      const next: Tail = { bytes, end, seq: tail.seq + 1 };
      // the session's own fields stay: its JSON, version and newest turn are as they were
      view.stage(sessionId, { session: current.session, lastTurn: current.lastTurn, held });
      const tree = view.tree(sessionId);
      const staged = tree.tails.get(turnId)?.pieces ?? [];
      for (const p of pieces) staged.push(p);
      tree.tails.set(turnId, { tail: next, pieces: staged });
      return { kind: 'delta', turnId, seq: next.seq, pieces, places, bytes, end, quiet, session: current.session, held, usage };
    }, (c) => {
      if (c.kind !== 'delta') throw new Error(`a ${c.kind} change has no delta answer`);
      return { _id: c.turnId, places: c.places };
    });
  }

  /**
   * Sets the one listener of committed changes (the live feed). It is called once per group
   * that committed, with the group's changes in order (the writes its callbacks refused are not
   * among them), after the engine's commit resolved (the changes are durable, and visible to
   * reads) and before any write of the group is answered: whoever waits on a write's promise
   * runs after the listener has returned. A group that fails to commit is never announced. What
   * the listener throws is logged; the writes are answered all the same.
   */
  onCommitted(listener: CommitListener): void {
    this.committed = listener;
  }

  /** Stops taking groups once the one being committed is done (compaction swaps files then). */
  pause(): Promise<void> {
    this.paused = true;
    return this.whenIdle();
  }

  resume(): void {
    this.paused = false;
    if (!this.writing) this.nextGroup();
  }

  /** Refuses new writes and resolves once the queued ones are settled. */
  close(): Promise<void> {
    this.closed = true;
    return this.whenIdle();
  }

  /** Resolves when no group is being committed and the queue is empty (or the writer paused). */
  whenIdle(): Promise<void> {
    if (!this.writing) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private submit<T>(
    ids: readonly string[],
    owner: string | undefined,
    needs: TreeNeeds | undefined,
    decide: (view: GroupView) => Change | readonly Change[],
    result: (change: Change) => T,
    creates?: string,
  ): Promise<T>;
  private submit<T>(
    ids: readonly string[],
    owner: string | undefined,
    needs: TreeNeeds | undefined,
    decide: (view: GroupView) => Change | readonly Change[],
    result: (change: Change | readonly Change[]) => T,
    creates?: string,
  ): Promise<T>;
  private submit<T>(
    ids: readonly string[],
    owner: string | undefined,
    needs: TreeNeeds | undefined,
    decide: (view: GroupView) => Change | readonly Change[],
    result: ((change: Change) => T) | ((change: Change | readonly Change[]) => T),
    creates?: string,
  ): Promise<T> {
    if (this.closed) return Promise.reject(new StorageWriteFailed(new Error('store is closed')));
    return new Promise<T>((resolve, reject) => {
      const w: PendingWrite = { ids, creates, owner, needs, decide, result, resolve: resolve as (v: unknown) => void, reject, deferrals: 0 };
      this.queue.push(w);
      if (!this.writing) this.nextGroup();
    });
  }

  private nextGroup(): void {
    if (this.paused || this.queue.length === 0) {
      this.writing = false;
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      for (const w of waiters) w();
      return;
    }
    this.writing = true;
    let writes: PendingWrite[];
    if (this.queue.length <= this.maxGroup) {
      writes = this.queue;
      this.queue = [];
    } else writes = this.queue.splice(0, this.maxGroup);
    this.attempt(writes, 1);
  }

  /** Opens a group for `writes`, decides each against it and commits; a conflict tries again. */
  private attempt(writes: readonly PendingWrite[], n: number): void {
    let begun: Group | Promise<Group>;
    try {
      begun = this.source.begin(
        writes.flatMap((w) => w.ids),
        writes.flatMap((w) => (w.owner === undefined ? [] : [w.owner])),
        writes.flatMap((w) => (w.needs === undefined ? [] : [w.needs])),
        n === 1 ? new Set(writes.flatMap((w) => (w.creates === undefined ? [] : [w.creates]))) : NOTHING_FRESH,
      );
    } catch (e) {
      this.refuseAll(writes, e);
      return;
    }
    if (begun instanceof Promise) begun.then((g) => this.decideAndCommit(writes, g, n), (e: unknown) => this.refuseAll(writes, e));
    else this.decideAndCommit(writes, begun, n);
  }

  private refuseAll(writes: readonly PendingWrite[], err: unknown): void {
    // damage was logged once by the engine when it found it, and a database away is reported by
    // whoever asked for the write (a request's failure, sparingly): each refusal is no news here
    if (!(err instanceof StorageDamaged) && !(err instanceof StorageUnavailable)) this.log.error('store write failed; the writes of this group were refused and nothing changed', { err, writes: writes.length });
    const refusal = err instanceof StorageWriteFailed || err instanceof StorageUnavailable || err instanceof StorageDamaged ? err : new StorageWriteFailed(err);
    for (const w of writes) w.reject(refusal);
    this.nextGroup();
  }

  /** After RoomOnlyForDeletes: the writes that add are refused, those that only take away go again by themselves. */
  private deletesAlone(accepted: readonly PendingWrite[], decided: readonly (Change | readonly Change[])[], err: RoomOnlyForDeletes): void {
    const alone = accepted.filter((_, i) => takesAway(decided[i] as Change | readonly Change[]));
    if (alone.length === 0 || alone.length === accepted.length) {
      this.refuseAll(accepted, err);
      return;
    }
    const refused = accepted.filter((w) => !alone.includes(w));
    this.log.error('store write failed; the writes of this group that add data were refused and nothing changed, its deletes are committed alone', { err, writes: refused.length });
    const refusal = new StorageWriteFailed(err);
    for (const w of refused) w.reject(refusal);
    this.attempt(alone, 1);
  }

  private decideAndCommit(writes: readonly PendingWrite[], group: Group, n: number): void {
    const view = new GroupView(group, this.quotas);
    const accepted: PendingWrite[] = [];
    /** Each accepted write's change (or changes), in order; `changes` has them flat, as the engine commits them. */
    const decided: (Change | readonly Change[])[] = [];
    const changes: Change[] = [];
    const deferred: PendingWrite[] = [];
    const waiting = new Set<string>();
    for (const w of writes) {
      // a write after a deferred one of the same session waits too, so each session's writes keep their order
      if (w.ids.some((id) => waiting.has(id))) {
        deferred.push(w);
        continue;
      }
      try {
        const d = w.decide(view);
        decided.push(d);
        if (Array.isArray(d)) changes.push(...(d as readonly Change[]));
        else changes.push(d as Change);
        accepted.push(w);
      } catch (e) {
        // put off once: first of its session in the next group, what it asks is what its needs read
        if (e instanceof NotReadAhead && w.deferrals++ === 0) {
          deferred.push(w);
          for (const id of w.ids) waiting.add(id);
        } else w.reject(e);
      }
    }
    if (deferred.length > 0) this.queue.unshift(...deferred);
    if (changes.length === 0) {
      group.release();
      this.nextGroup();
      return;
    }
    group.commit(changes).then(
      () => {
        // the writes queued while this group committed: the same group whether it begins now or after the answers
        const early = this.beginBeforeAnswering && this.queue.length > 0 && !this.paused;
        if (early) this.nextGroup();
        if (this.committed !== undefined) {
          try {
            this.committed(changes);
          } catch (e) {
            this.log.error('the listener of committed changes failed; the writes are answered all the same', { err: e });
          }
        }
        for (let i = 0; i < accepted.length; i++) {
          const w = accepted[i] as PendingWrite;
          w.resolve(w.result(decided[i] as Change | readonly Change[]));
        }
        if (!early) this.nextGroup();
      },
      (e: unknown) => {
        if (e instanceof GroupConflict && n < ATTEMPTS) this.attempt(accepted, n + 1);
        else if (e instanceof RoomOnlyForDeletes) this.deletesAlone(accepted, decided, e);
        else this.refuseAll(accepted, e);
      },
    );
  }
}

/**
 * The id of a turn's copy: a new id carrying its createdAt's second. Ids made in one second
 * sort in the order they are made, so copies keep the order of their originals; a copy that
 * shares a millisecond with the one before it (data of the first release) is made to sort after it.
 */
function copyId(original: Turn, previous: Turn | undefined): string {
  const id = newObjectId(Date.parse(original.createdAt));
  if (previous === undefined || previous.createdAt !== original.createdAt || id > previous._id) return id;
  return (BigInt(`0x${previous._id}`) + 1n).toString(16).padStart(24, '0');
}

/** A usage delta of `owner`: the figures given, 0 for the others. */
function usageDelta(owner: string, figures: Partial<Usage>): UsageDelta {
  return { ...NO_USAGE, ...figures, owner };
}

/** Two usage deltas of one owner added up. */
function sumOf(a: UsageDelta, b: UsageDelta): UsageDelta {
  return {
    owner: a.owner,
    sessions: a.sessions + b.sessions,
    turns: a.turns + b.turns,
    bytes: a.bytes + b.bytes,
    inputTokens: a.inputTokens + b.inputTokens,
    outputTokens: a.outputTokens + b.outputTokens,
    cachedTokens: a.cachedTokens + b.cachedTokens,
  };
}

/** The tokens of several turns added up, each figure saturating at COUNT_MAX as a total does. */
function plus(a: Tokens, b: Tokens): Tokens {
  return { inputTokens: Math.min(COUNT_MAX, a.inputTokens + b.inputTokens), outputTokens: Math.min(COUNT_MAX, a.outputTokens + b.outputTokens), cachedTokens: Math.min(COUNT_MAX, a.cachedTokens + b.cachedTokens) };
}

/** The change from tokens `b` to tokens `a` (each figure a count: the difference is exact). */
function minus(a: Tokens, b: Tokens): Tokens {
  return { inputTokens: a.inputTokens - b.inputTokens, outputTokens: a.outputTokens - b.outputTokens, cachedTokens: a.cachedTokens - b.cachedTokens };
}

/**
 * What a session's turns hold once `turns` turns, `bytes` bytes and `tokens` are added (negative:
 * taken away). Token figures saturate at COUNT_MAX; taking from one at the top leaves a figure
 * not known here, so the held says `recount` and the engine counts the session's tokens again.
 */
function heldPlus(h: Held, turns: number, bytes: number, tokens: Tokens): Held {
  let recount = h.recount === true;
  const figure = (k: keyof Tokens): number => {
    if (tokens[k] < 0 && h[k] >= COUNT_MAX) {
      recount = true;
      return COUNT_MAX;
    }
    return countIn(h[k] + tokens[k]);
  };
  const next: Held = { turns: h.turns + turns, turnBytes: h.turnBytes + bytes, inputTokens: figure('inputTokens'), outputTokens: figure('outputTokens'), cachedTokens: figure('cachedTokens') };
  return recount ? { ...next, recount: true } : next;
}

/** UTF-8 bytes of a session's JSON as it stands before a write. */
function sessionBytes(current: SessionAtWrite): number {
  return Buffer.byteLength(JSON.stringify(current.session));
}

function sessionResult(c: Change): SessionRecord {
  if (c.kind === 'create' || c.kind === 'update' || c.kind === 'fork') return { session: c.session, json: c.json, version: c.version };
  throw new Error(`a ${c.kind} change has no session answer`);
}

function turnResult(c: Change): TurnRecord {
  if (c.kind !== 'turn') throw new Error(`a ${c.kind} change has no turn answer`);
  return { _id: c.turn._id, createdAt: c.turn.createdAt, json: c.json };
}

/**
 * The UTF-8 bytes of `text` in a buffer of their own. Buffer.from puts small strings in slices
 * of a shared 8 KiB pool, and an engine that keeps the turn (the journal) would keep the whole
 * pool slab alive with it.
 */
function ownBytes(text: string): Buffer {
  const b = Buffer.allocUnsafeSlow(Buffer.byteLength(text));
  b.write(text, 0, 'utf8');
  return b;
}
