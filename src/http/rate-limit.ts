// Per-key token buckets (RATE_LIMIT): a user, or a client address for requests without a
// valid token. Buckets refill continuously; full ones are forgotten, so memory follows the
// number of recently active clients. Time here is the monotonic clock (performance.now()):
// a step of the wall clock (NTP, an operator, a VM resumed) must not refill or empty a bucket.

/** Buckets kept at most; past it full ones are swept, then the least recently created dropped. */
const MAX_BUCKETS = 100_000;

interface Bucket {
  tokens: number;
  atMs: number;
}

export class RateLimiter {
  private readonly buckets = new Map<string, Bucket>();
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly rate: number,
    private readonly burst: number,
  ) {
    this.sweeper = setInterval(() => this.sweep(), 60_000);
    this.sweeper.unref();
  }

  /** Takes one token for `key`: 0 when allowed, else the whole seconds to wait. */
  take(key: string, nowMs: number = performance.now()): number {
    let b = this.buckets.get(key);
    if (b === undefined) {
      if (this.buckets.size >= MAX_BUCKETS) this.makeRoom(nowMs);
      b = { tokens: this.burst, atMs: nowMs };
      this.buckets.set(key, b);
    } else {
      b.tokens = Math.min(this.burst, b.tokens + ((nowMs - b.atMs) / 1000) * this.rate);
      b.atMs = nowMs;
    }
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return 0;
    }
    return Math.max(1, Math.ceil((1 - b.tokens) / this.rate));
  }

  /** Under a flood of new keys: forget full buckets, and if that is not enough, the oldest tenth. */
  private makeRoom(nowMs: number): void {
    this.sweep(nowMs);
    if (this.buckets.size < MAX_BUCKETS) return;
    let drop = MAX_BUCKETS / 10;
    for (const key of this.buckets.keys()) {
      this.buckets.delete(key);
      if (--drop === 0) break;
    }
  }

  private sweep(nowMs: number = performance.now()): void {
    for (const [key, b] of this.buckets) {
      if (b.tokens + ((nowMs - b.atMs) / 1000) * this.rate >= this.burst) this.buckets.delete(key);
    }
  }

  stop(): void {
    clearInterval(this.sweeper);
  }
}
