// The serial point of a store. Every write (a value: ./writes.ts) waits in one queue; the writes
// that arrived while the previous group was committing form the next group (group commit). Each
// write of a group is decided in order (./decide.ts) against the committed state plus the group's
// earlier changes (./group-view.ts), charged to its owners' quotas, then the engine commits the
// whole group at once (./group.ts): all of it durable, or none of it and every write of the group
// refused. Engines supply only the committed state and the commit.
import type { Quotas } from '../config.js';
import type { Logger } from '../log.js';
import type { Change, CommitListener } from './changes.js';
import { decide } from './decide.js';
import { GroupConflict, NotReadAhead, RoomOnlyForDeletes, takesAway, WriteRefused, type Group, type GroupSource, type TreeNeeds } from './group.js';
import { GroupView } from './group-view.js';
import { StorageDamaged, StorageUnavailable, StorageWriteFailed } from './store.js';
import type { Write } from './writes.js';

/** Times a group is tried before its writes are refused. */
const ATTEMPTS = 3;
const NOTHING_FRESH: ReadonlySet<string> = new Set();

interface PendingWrite {
  readonly write: Write;
  /** The sessions it touches. */
  readonly ids: readonly string[];
  /** The new session a create makes (among `ids`). */
  readonly creates: string | undefined;
  /** The owner of the session a create or a fork makes. */
  readonly owner: string | undefined;
  readonly needs: TreeNeeds | undefined;
  /** Times it was put off to the next group (NotReadAhead). */
  deferrals: number;
  resolve(changes: readonly Change[]): void;
  reject(err: unknown): void;
}

/** An empty TreeNeeds for a session, to fill in. */
function needsOf(session: string, over: Partial<Omit<TreeNeeds, 'session'>>): TreeNeeds {
  return { session, turns: over.turns ?? [], paths: over.paths ?? [], subtrees: over.subtrees ?? [], ...(over.streaming === true ? { streaming: true } : {}), ...(over.tails !== undefined ? { tails: over.tails } : {}) };
}

/** What the serial point knows of a write before deciding it: the sessions it touches and locks, and what it will read of their turns. */
function pendingOf(write: Write): Pick<PendingWrite, 'ids' | 'creates' | 'owner' | 'needs'> {
  switch (write.kind) {
    case 'create':
      return { ids: [write.session._id], creates: write.session._id, owner: write.session.user, needs: undefined };
    case 'update': {
      const head = write.set.headTurnId;
      return { ids: [write.id], creates: undefined, owner: undefined, needs: head === undefined ? undefined : needsOf(write.id, { turns: [head] }) };
    }
    case 'delete':
      return { ids: [write.id], creates: undefined, owner: undefined, needs: undefined };
    case 'turns': {
      // the parents the turns name (a request's), and whether a refusal asks which turns stream
      const parents = write.turns.flatMap((t) => (typeof t.parentId === 'string' ? [t.parentId] : []));
      const streaming = write.refuse?.anyStreaming === true || write.refuse?.streamingParent === true;
      return { ids: [write.sessionId], creates: undefined, owner: undefined, needs: parents.length > 0 || streaming ? needsOf(write.sessionId, { turns: parents, streaming }) : undefined };
    }
    case 'editTurn':
    case 'endReply':
      return { ids: [write.sessionId], creates: undefined, owner: undefined, needs: needsOf(write.sessionId, { turns: [write.turnId] }) };
    case 'deleteTurns':
      return { ids: [write.sessionId], creates: undefined, owner: undefined, needs: needsOf(write.sessionId, { turns: [write.turnId], subtrees: [write.turnId] }) };
    case 'fork':
      return { ids: [write.sourceId], creates: undefined, owner: write.as.owner, needs: needsOf(write.sourceId, { paths: [write.turnId ?? null], ...(write.turnId !== undefined ? { turns: [write.turnId] } : {}) }) };
    case 'delta':
      return { ids: [write.sessionId], creates: undefined, owner: undefined, needs: needsOf(write.sessionId, { tails: [write.turnId] }) };
  }
}

/** A write never refused for a quota (the end of a reply must always be recorded), though what it adds is counted. */
const uncharged = (w: Write): boolean => w.kind === 'endReply' || (w.kind === 'editTurn' && w.uncharged);

export class SerialWriter {
  private queue: PendingWrite[] = [];
  private writing = false;
  private paused = false;
  private closed = false;
  private idleWaiters: (() => void)[] = [];
  private committed: CommitListener | undefined;
  /** Groups still to take one write each: the writes of a group the database refused, tried one by one. */
  private singly = 0;

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

  /** Queues a write; resolves with the changes it made once they are committed, or rejects with its refusal. */
  submit(write: Write): Promise<readonly Change[]> {
    if (this.closed) return Promise.reject(new StorageWriteFailed(new Error('store is closed')));
    return new Promise<readonly Change[]>((resolve, reject) => {
      this.queue.push({ write, ...pendingOf(write), deferrals: 0, resolve, reject });
      if (!this.writing) this.nextGroup();
    });
  }

  /**
   * Sets the one listener of committed changes (the live feed). It is called once per group
   * that committed, with the group's changes in order (the writes refused are not among them),
   * after the engine's commit resolved (the changes are durable, and visible to reads) and
   * before any write of the group is answered: whoever waits on a write's promise runs after
   * the listener has returned. A group that fails to commit is never announced. What the
   * listener throws is logged; the writes are answered all the same.
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
    if (this.singly > 0) {
      this.singly--;
      writes = this.queue.splice(0, 1);
    } else if (this.queue.length <= this.maxGroup) {
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
  private deletesAlone(accepted: readonly PendingWrite[], decided: readonly (readonly Change[])[], err: RoomOnlyForDeletes): void {
    const alone = accepted.filter((_, i) => takesAway(decided[i] as readonly Change[]));
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

  /** After WriteRefused of a group of several: each of its writes goes again by itself, first in the queue and in order. */
  private oneByOne(accepted: readonly PendingWrite[], err: WriteRefused): void {
    this.log.warn('the database refused a group of writes for what one of them holds; each is committed by itself', { err, writes: accepted.length });
    this.queue.unshift(...accepted);
    this.singly += accepted.length;
    this.nextGroup();
  }

  private decideAndCommit(writes: readonly PendingWrite[], group: Group, n: number): void {
    const view = new GroupView(group, this.quotas);
    const accepted: PendingWrite[] = [];
    /** Each accepted write's changes, in order; `changes` has them flat, as the engine commits them. */
    const decided: (readonly Change[])[] = [];
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
        const d = decide(view, w.write);
        view.charge(d, uncharged(w.write));
        view.apply(d);
        decided.push(d);
        for (const c of d) changes.push(c);
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
        for (let i = 0; i < accepted.length; i++) (accepted[i] as PendingWrite).resolve(decided[i] as readonly Change[]);
        if (!early) this.nextGroup();
      },
      (e: unknown) => {
        if (e instanceof GroupConflict && n < ATTEMPTS) this.attempt(accepted, n + 1);
        else if (e instanceof RoomOnlyForDeletes) this.deletesAlone(accepted, decided, e);
        else if (e instanceof WriteRefused && accepted.length > 1) this.oneByOne(accepted, e);
        else this.refuseAll(accepted, e);
      },
    );
  }
}
