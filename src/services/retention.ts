// Deleting what must go: sessions gone by their expiry (src/domain/retention.ts), in the
// background and by `purge`, and every session of one user (`erase-user`). Each batch is a few
// deleteSession writes queued together, so the serial writer commits them as one group and the
// requests' writes queued meanwhile go between two batches.
import { livenessAt } from '../domain/retention.js';
import type { Logger } from '../log.js';
import { SessionNotFound, SessionStillLive, type ExpiredSession, type Store, type Usage } from '../store/store.js';

/** Sessions deleted per group commit: small, so a request's write never waits behind many. */
export const PURGE_BATCH = 100;

export interface Purged {
  sessions: number;
  turns: number;
}


/** Lets the event loop serve what waits (requests, their writes) before the next batch. */
const yieldToRequests = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/**
 * The background purge's pause after a batch: as long as the batch took (wall time, its commit
 * included), so the purge is at work half the time at most, and less of the main thread.
 * Deleting 100,000 sessions back to back raised the reads' p99 beside it 3.7-fold on the
 * journal (bench/purge.mjs); the garbage each batch leaves is collected in the pauses. Under a
 * slow disk the pauses grow with the commits, and so does a stop's wait for the one under way.
 */
export function pausedLike(batchMs: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(1, Math.ceil(batchMs))));
}

/**
 * Deletes every session gone now, a batch at a time, and answers what it deleted. A session
 * deleted meanwhile by someone else (a user, another PostgreSQL instance) is skipped: deleting
 * one twice is harmless. `each` hears of every session as it goes; `between` waits after each
 * batch (by default only for what the event loop has waiting; the server's purge, pausedLike).
 */
export async function purgeExpired(
  store: Store,
  retentionDays: number | undefined,
  each?: (e: ExpiredSession) => void,
  stopping: () => boolean = () => false,
  between: (batchMs: number) => Promise<void> = yieldToRequests,
): Promise<Purged> {
  const purged: Purged = { sessions: 0, turns: 0 };
  while (!stopping()) {
    const started = performance.now();
    const live = livenessAt(Date.now(), retentionDays);
    const batch = await store.expiredSessions(live, PURGE_BATCH);
    const done = await Promise.allSettled(
      batch.map((e) =>
        store
          // a session found expired that is live again at the serial point (an import brought it back) stays
          .deleteSession(e.session._id, { guard: { goneAt: live } })
          .then(() => e),
      ),
    );
    let deleted = 0;
    for (const d of done) {
      if (d.status === 'fulfilled') {
        deleted++;
        purged.sessions++;
        purged.turns += d.value.turns;
        each?.(d.value);
      } else if (!(d.reason instanceof SessionNotFound) && !(d.reason instanceof SessionStillLive)) {
        throw d.reason;
      }
    }
    // a batch of which nothing could go would come back whole: the rest waits for the next run
    if (batch.length < PURGE_BATCH || deleted === 0) break;
    await between(performance.now() - started);
  }
  return purged;
}

/** The server's background purge: a run every `intervalMs`, one at a time, counted for /metrics. */
export class BackgroundPurge {
  readonly total: Purged = { sessions: 0, turns: 0 };
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;

  constructor(
    private readonly store: Store,
    private readonly retentionDays: number | undefined,
    private readonly intervalMs: number,
    private readonly log: Logger,
  ) {}

  start(): void {
    this.timer = setInterval(() => this.run(), this.intervalMs).unref();
    this.run(); // what expired while the server was stopped goes now
  }

  private run(): void {
    if (this.running !== undefined || this.stopped) return;
    const counted = (e: ExpiredSession): void => {
      this.total.sessions++;
      this.total.turns += e.turns;
    };
    this.running = purgeExpired(this.store, this.retentionDays, counted, () => this.stopped, pausedLike)
      .then(
        (p) => {
          if (p.sessions > 0) this.log.info('purged expired sessions', { sessions: p.sessions, turns: p.turns });
        },
        (e: unknown) => this.log.warn('purging expired sessions failed; trying again at the next run', { err: e }),
      )
      .finally(() => {
        this.running = undefined;
      });
  }

  /** Stops the timer and waits for the batch under way (before the store closes). */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.running;
  }
}

/**
 * Deletes every session `user` owns, with all their turns (whoever wrote them), a batch at a time;
 * `each` hears of each id. Answers what went: the user's usage before less after.
 */
export async function eraseUser(store: Store, user: string, each: (id: string) => void): Promise<Usage> {
  const before = await store.usage(user);
  const ids: string[] = [];
  // archived ones and expired ones too: no `live` filter
  for await (const chunk of store.scanSessions({ user, archived: 'all' })) for (const r of chunk) ids.push(r.session._id);
  for (let i = 0; i < ids.length; i += PURGE_BATCH) {
    const batch = ids.slice(i, i + PURGE_BATCH);
    const done = await Promise.allSettled(batch.map((id) => store.deleteSession(id).then(() => id)));
    for (const d of done) {
      if (d.status === 'fulfilled') each(d.value);
      else if (!(d.reason instanceof SessionNotFound)) throw d.reason;
    }
    await yieldToRequests();
  }
  const after = await store.usage(user);
  return {
    sessions: before.sessions - after.sessions,
    turns: before.turns - after.turns,
    bytes: before.bytes - after.bytes,
    inputTokens: before.inputTokens - after.inputTokens,
    outputTokens: before.outputTokens - after.outputTokens,
    cachedTokens: before.cachedTokens - after.cachedTokens,
  };
}
