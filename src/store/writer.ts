// The serial point of a store. Every write waits in one queue; the writes that arrived while
// the previous group was committing form the next group (group commit). For each write, in
// order, the caller's callback (a check, a change, a turn to build) runs against the committed
// state plus the group's earlier changes, then the engine commits the whole group at once:
// all of it durable, or none of it and every write of the group refused. Engines supply only
// the committed state and the commit; the rules of what a write does live here, once.
import { versionOf } from '../domain/version.js';
import { chatSession, raisedByTurn, type ChatSession, type Turn } from '../domain/records.js';
import type { TurnKey } from '../domain/order.js';
import type { Quotas } from '../config.js';
import type { Logger } from '../log.js';
import { QuotaExceeded, SessionNotFound, StorageWriteFailed, type Current, type SessionRecord, type TurnRecord, type Usage } from './store.js';

/** One change of a group, as the engine commits it. */
export type Change =
  | { readonly kind: 'create'; readonly session: ChatSession; readonly json: string; readonly version: string }
  | { readonly kind: 'update'; readonly session: ChatSession; readonly json: string; readonly version: string }
  | {
      readonly kind: 'turn';
      readonly turn: Turn;
      /** The turn's JSON as UTF-8 bytes. */
      readonly json: Buffer;
      /** The session as the turn leaves it (its updatedAt raised, or unchanged). */
      readonly session: ChatSession;
      readonly raised: boolean;
    }
  | { readonly kind: 'delete'; readonly id: string };

/** What one group sees of the committed state, and how it becomes durable. */
export interface Group {
  /** A session as committed before this group, or undefined when there is none. */
  current(id: string): Current | undefined;
  /** What a user's sessions held as committed before this group. */
  usageOf(user: string): Usage;
  /** Makes every change durable at once, in order; rejects (changing nothing) if it cannot. */
  commit(changes: readonly Change[]): Promise<void>;
  /** The group made no change: let go of whatever `begin` took. */
  release(): void;
}

export interface GroupSource {
  /** Opens a group touching these sessions (an engine that serializes across processes locks them here). */
  begin(ids: readonly string[]): Group | Promise<Group>;
}

interface PendingWrite {
  readonly id: string;
  /** Decides the change against the group's view; throws to refuse. */
  decide(view: GroupView): Change;
  /** The write's answer once its change is durable. */
  result(change: Change): unknown;
  resolve(value: unknown): void;
  reject(err: unknown): void;
}

/** A session as changed by an earlier write of the same group (null: deleted). */
interface Staged {
  readonly session: ChatSession;
  readonly lastTurn: TurnKey | undefined;
}

/** The committed state seen through the changes the group has decided so far. */
class GroupView {
  private readonly staged = new Map<string, Staged | null>();
  /** What the group's earlier writes add to each owner's committed usage. */
  private readonly added = new Map<string, { sessions: number; turns: number; bytes: number }>();
  constructor(
    readonly group: Group,
    private readonly quotas: Quotas | undefined,
  ) {}

  /**
   * Charges a write to `user`'s usage, or throws QuotaExceeded when it would take a quota past
   * its limit (only what grows is checked: a user over a quota lowered since may still shrink).
   * The usage is the committed one plus what the group's earlier writes added, so writes that
   * arrive together cannot pass a quota between them. A delete gives its share back at commit.
   */
  charge(user: string, sessions: number, turns: number, bytes: () => number): void {
    const q = this.quotas;
    if (q === undefined || (q.sessions === undefined && q.turns === undefined && q.bytes === undefined)) return;
    let a = this.added.get(user);
    const b = q.bytes === undefined ? 0 : bytes();
    const committed = this.group.usageOf(user);
    const over = (name: keyof Usage, limit: number | undefined, delta: number): void => {
      if (limit !== undefined && delta > 0 && committed[name] + (a?.[name] ?? 0) + delta > limit) throw new QuotaExceeded(name, limit);
    };
    over('sessions', q.sessions, sessions);
    over('turns', q.turns, turns);
    over('bytes', q.bytes, b);
    if (a === undefined) this.added.set(user, (a = { sessions: 0, turns: 0, bytes: 0 }));
    a.sessions += sessions;
    a.turns += turns;
    a.bytes += b;
  }

  current(id: string): Current | undefined {
    const staged = this.staged.get(id);
    if (staged === undefined) return this.group.current(id);
    if (staged === null) return undefined;
    return { session: staged.session, lastTurn: staged.lastTurn, version: () => versionOf(JSON.stringify(staged.session), staged.lastTurn) };
  }

  stage(id: string, s: Staged | null): void {
    this.staged.set(id, s);
  }
}

export class SerialWriter {
  private queue: PendingWrite[] = [];
  private writing = false;
  private paused = false;
  private closed = false;
  private idleWaiters: (() => void)[] = [];

  /** `quotas`: what one user's sessions may hold (usage by session owner), checked at this serial point. */
  constructor(
    private readonly source: GroupSource,
    private readonly log: Logger,
    private readonly quotas?: Quotas,
  ) {}

  createSession(session: ChatSession): Promise<SessionRecord> {
    return this.submit<SessionRecord>(session._id, (view) => {
      if (view.current(session._id) !== undefined) throw new Error('duplicate session id');
      const json = JSON.stringify(session);
      view.charge(session.user, 1, 0, () => Buffer.byteLength(json));
      view.stage(session._id, { session, lastTurn: undefined });
      return { kind: 'create', session, json, version: versionOf(json, undefined) };
    }, sessionResult);
  }

  updateSession(id: string, change: (current: Current) => ChatSession): Promise<SessionRecord> {
    return this.submit<SessionRecord>(id, (view) => {
      const current = view.current(id);
      if (current === undefined) throw new SessionNotFound();
      const next = chatSession(change(current));
      const json = JSON.stringify(next);
      view.charge(next.user, 0, 0, () => Buffer.byteLength(json) - Buffer.byteLength(JSON.stringify(current.session)));
      view.stage(id, { session: next, lastTurn: current.lastTurn });
      return { kind: 'update', session: next, json, version: versionOf(json, current.lastTurn) };
    }, sessionResult);
  }

  deleteSession(id: string, check: (current: Current) => void): Promise<void> {
    return this.submit<void>(id, (view) => {
      const current = view.current(id);
      if (current === undefined) throw new SessionNotFound();
      check(current);
      view.stage(id, null);
      return { kind: 'delete', id };
    }, () => undefined);
  }

  appendTurn(sessionId: string, build: (current: Current) => Turn): Promise<TurnRecord> {
    return this.submit<TurnRecord>(sessionId, (view) => {
      const current = view.current(sessionId);
      if (current === undefined) throw new SessionNotFound();
      const turn = build(current);
      const session = raisedByTurn(current.session, turn.createdAt);
      const json = ownBytes(JSON.stringify(turn));
      // the session's owner is charged, whoever writes the turn
      view.charge(current.session.user, 0, 1, () => json.length);
      view.stage(sessionId, { session, lastTurn: turn });
      return { kind: 'turn', turn, json, session, raised: session !== current.session };
    }, turnResult);
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

  private submit<T>(id: string, decide: (view: GroupView) => Change, result: (change: Change) => T): Promise<T> {
    if (this.closed) return Promise.reject(new StorageWriteFailed(new Error('store is closed')));
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ id, decide, result, resolve: resolve as (v: unknown) => void, reject });
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
    const writes = this.queue;
    this.queue = [];
    let begun: Group | Promise<Group>;
    try {
      begun = this.source.begin(writes.map((w) => w.id));
    } catch (e) {
      this.refuseAll(writes, e);
      return;
    }
    if (begun instanceof Promise) begun.then((g) => this.decideAndCommit(writes, g), (e: unknown) => this.refuseAll(writes, e));
    else this.decideAndCommit(writes, begun);
  }

  private refuseAll(writes: readonly PendingWrite[], err: unknown): void {
    this.log.error('store write failed; the writes of this group were refused and nothing changed', { err, writes: writes.length });
    for (const w of writes) w.reject(err instanceof StorageWriteFailed ? err : new StorageWriteFailed(err));
    this.nextGroup();
  }

  private decideAndCommit(writes: readonly PendingWrite[], group: Group): void {
    const view = new GroupView(group, this.quotas);
    const accepted: PendingWrite[] = [];
    const changes: Change[] = [];
    for (const w of writes) {
      try {
        changes.push(w.decide(view));
        accepted.push(w);
      } catch (e) {
        w.reject(e);
      }
    }
    if (changes.length === 0) {
      group.release();
      this.nextGroup();
      return;
    }
    group.commit(changes).then(
      () => {
        for (let i = 0; i < accepted.length; i++) {
          const w = accepted[i] as PendingWrite;
          w.resolve(w.result(changes[i] as Change));
        }
        this.nextGroup();
      },
      (e: unknown) => this.refuseAll(accepted, e),
    );
  }
}

function sessionResult(c: Change): SessionRecord {
  if (c.kind === 'create' || c.kind === 'update') return { session: c.session, json: c.json, version: c.version };
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
