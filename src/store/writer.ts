// The serial point of a store. Every write waits in one queue; the writes that arrived while
// the previous group was committing form the next group (group commit). For each write, in
// order, the caller's callback (a check, a change, a turn to build) runs against the committed
// state plus the group's earlier changes, then the engine commits the whole group at once:
// all of it durable, or none of it and every write of the group refused. Engines supply only
// the committed state and the commit; the rules of what a write does live here, once.
import { versionOf } from '../domain/version.js';
import { chatSession, raisedByTurn, type ChatSession, type Turn } from '../domain/records.js';
import type { TurnKey } from '../domain/order.js';
import type { Logger } from '../log.js';
import { SessionNotFound, StorageUnavailable, StorageWriteFailed, type Current, type SessionRecord, type TurnRecord, type Usage } from './store.js';

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
  /**
   * Opens a group touching these sessions (an engine that serializes across processes locks
   * them here); `owners` are the users of the sessions the group creates.
   */
  begin(ids: readonly string[], owners: readonly string[]): Group | Promise<Group>;
}

/**
 * A commit that failed only because another process's transaction got in its way (a deadlock):
 * nothing was written, and the group is decided and committed again from the start.
 */
export class GroupConflict extends Error {
  override readonly name = 'GroupConflict';
}

/** Times a group is tried before its writes are refused. */
const ATTEMPTS = 3;

interface PendingWrite {
  readonly id: string;
  /** The owner of the session a create makes. */
  readonly owner: string | undefined;
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
  constructor(readonly group: Group) {}

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
  private committed: CommitListener | undefined;

  constructor(
    private readonly source: GroupSource,
    private readonly log: Logger,
    /** Writes in one group at most: 1 only to measure what group commit buys (GROUP_COMMIT=off). */
    private readonly maxGroup = Infinity,
  ) {}

  createSession(session: ChatSession): Promise<SessionRecord> {
    return this.submit<SessionRecord>(session._id, session.user, (view) => {
      if (view.current(session._id) !== undefined) throw new Error('duplicate session id');
      view.stage(session._id, { session, lastTurn: undefined });
      const json = JSON.stringify(session);
      return { kind: 'create', session, json, version: versionOf(json, undefined) };
    }, sessionResult);
  }

  updateSession(id: string, change: (current: Current) => ChatSession): Promise<SessionRecord> {
    return this.submit<SessionRecord>(id, undefined, (view) => {
      const current = view.current(id);
      if (current === undefined) throw new SessionNotFound();
      const next = chatSession(change(current));
      view.stage(id, { session: next, lastTurn: current.lastTurn });
      const json = JSON.stringify(next);
      return { kind: 'update', session: next, json, version: versionOf(json, current.lastTurn) };
    }, sessionResult);
  }

  deleteSession(id: string, check: (current: Current) => void): Promise<void> {
    return this.submit<void>(id, undefined, (view) => {
      const current = view.current(id);
      if (current === undefined) throw new SessionNotFound();
      check(current);
      view.stage(id, null);
      return { kind: 'delete', id, session: current.session };
    }, () => undefined);
  }

  appendTurn(sessionId: string, build: (current: Current) => Turn): Promise<TurnRecord> {
    return this.submit<TurnRecord>(sessionId, undefined, (view) => {
      const current = view.current(sessionId);
      if (current === undefined) throw new SessionNotFound();
      const turn = build(current);
      const session = raisedByTurn(current.session, turn.createdAt);
      view.stage(sessionId, { session, lastTurn: turn });
      return { kind: 'turn', turn, json: ownBytes(JSON.stringify(turn)), session, raised: session !== current.session };
    }, turnResult);
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

  private submit<T>(id: string, owner: string | undefined, decide: (view: GroupView) => Change, result: (change: Change) => T): Promise<T> {
    if (this.closed) return Promise.reject(new StorageWriteFailed(new Error('store is closed')));
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ id, owner, decide, result, resolve: resolve as (v: unknown) => void, reject });
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
        writes.map((w) => w.id),
        writes.flatMap((w) => (w.owner === undefined ? [] : [w.owner])),
      );
    } catch (e) {
      this.refuseAll(writes, e);
      return;
    }
    if (begun instanceof Promise) begun.then((g) => this.decideAndCommit(writes, g, n), (e: unknown) => this.refuseAll(writes, e));
    else this.decideAndCommit(writes, begun, n);
  }

  private refuseAll(writes: readonly PendingWrite[], err: unknown): void {
    this.log.error('store write failed; the writes of this group were refused and nothing changed', { err, writes: writes.length });
    const refusal = err instanceof StorageWriteFailed || err instanceof StorageUnavailable ? err : new StorageWriteFailed(err);
    for (const w of writes) w.reject(refusal);
    this.nextGroup();
  }

  private decideAndCommit(writes: readonly PendingWrite[], group: Group, n: number): void {
    const view = new GroupView(group);
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
        if (this.committed !== undefined) {
          try {
            this.committed(changes);
          } catch (e) {
            this.log.error('the listener of committed changes failed; the writes are answered all the same', { err: e });
          }
        }
        for (let i = 0; i < accepted.length; i++) {
          const w = accepted[i] as PendingWrite;
          w.resolve(w.result(changes[i] as Change));
        }
        this.nextGroup();
      },
      (e: unknown) => {
        if (e instanceof GroupConflict && n < ATTEMPTS) this.attempt(accepted, n + 1);
        else this.refuseAll(accepted, e);
      },
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
