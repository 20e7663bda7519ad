// Each user's share of the server (MAX_REQUESTS_PER_USER): the requests one owner (a user, or a
// client address for requests without one) has in flight at once, so that one token cannot hold
// every connection with bodies that never finish or answers it never reads.
import { HttpError } from '../api/errors.js';

/**
 * Whole lists one owner may be sent at once. Each holds one of the store's few snapshot readers
 * (half the PostgreSQL pool, 16 on sqlite) for as long as its client takes to read it, and other
 * users' whole lists wait for one: a client that never reads must not hold them all.
 */
export const WHOLE_LISTS_PER_USER = 2;

/**
 * The refusal of a request past its owner's share (MAX_REQUESTS_PER_USER, or its part of
 * BODY_MEMORY). The connection is closed after it, so a hoarder's refused requests free their
 * slots rather than wait on them for the next try.
 */
export class OverShare extends HttpError {
  constructor() {
    super(429, 'Too many requests in flight', [['retry-after', '1']], true);
  }
}

/**
 * Requests in flight by owner (`user:<sub>` or `addr:<ip>`, the rate limiter's keys). An entry
 * lives while its owner has a request in flight, so memory follows the requests, not the owners.
 */
export class InFlight {
  private readonly byOwner = new Map<string, number>();
  private count = 0;

  constructor(readonly max: number) {}

  /** Counts one more request for `owner`; false, counting nothing, when it has `max` in flight already. */
  take(owner: string): boolean {
    const mine = this.byOwner.get(owner) ?? 0;
    if (mine >= this.max) return false;
    this.byOwner.set(owner, mine + 1);
    this.count++;
    return true;
  }

  /** Whether `owner` has `max` in flight: its next `take` would be refused. */
  full(owner: string): boolean {
    return (this.byOwner.get(owner) ?? 0) >= this.max;
  }

  /** The request `take` counted has ended. */
  give(owner: string): void {
    const mine = (this.byOwner.get(owner) ?? 1) - 1;
    if (mine <= 0) this.byOwner.delete(owner);
    else this.byOwner.set(owner, mine);
    this.count--;
  }

  /** Requests in flight, all owners together. */
  get total(): number {
    return this.count;
  }

  /** The most requests one owner has in flight now (a scrape's figure: it walks every owner). */
  busiest(): number {
    let most = 0;
    for (const n of this.byOwner.values()) if (n > most) most = n;
    return most;
  }
}
