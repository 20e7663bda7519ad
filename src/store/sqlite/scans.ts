// The sqlite engine's snapshot connections: whole lists, exports and a reply's conversation read one
// snapshot each on a connection of their own, pooled, so a slow reader never pins what others see.
import { Connection, openReader } from './connection.js';

/** Snapshot connections kept open between scans, and the most open at once (more scans wait). */
const SCAN_IDLE = 4;
const SCAN_MAX = 16;
/**
 * How long the ones past SCAN_IDLE stay open after their last scan: a burst of replies (each
 * reads its conversation on one) or of whole lists reuses them instead of opening a connection
 * each, which cost a tenth of a reply's CPU with 64 replies starting at once.
 */
const SCAN_LINGER_MS = 30_000;
/** Page cache of a snapshot connection: scans read sequentially and need little. */
const SCAN_CACHE_KIB = 1024;

export class ScanPool {
  /** Idle snapshot connections, the least recently used first, with when each was given back. */
  private readonly idle: { c: Connection; since: number }[] = [];
  private trim: NodeJS.Timeout | undefined;
  private open = 0;
  private readonly waiters: (() => void)[] = [];
  private closed = false;

  constructor(
    private readonly file: string,
    /** What a connection's errors pass through (the store's damage watch). */
    private readonly watch: (e: unknown) => unknown,
  ) {}

  /** A snapshot connection from the pool (at most SCAN_MAX open; more wait their turn). */
  async take(): Promise<Connection> {
    for (;;) {
      const idle = this.idle.pop();
      if (idle !== undefined) return idle.c;
      if (this.open < SCAN_MAX) {
        this.open++;
        try {
          const db = openReader(this.file, SCAN_CACHE_KIB * 1024);
          return new Connection(db, this.watch);
        } catch (e) {
          this.open--;
          throw e;
        }
      }
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    }
  }

  /** Ends the snapshot (and the statements still open on it) and puts the connection back. */
  giveBack(c: Connection): void {
    try {
      c.db.exec('COMMIT');
    } catch {
      // no transaction was open
    }
    if (this.closed) {
      c.db.close();
      this.open--;
    } else {
      this.idle.push({ c, since: performance.now() });
      this.trimIdle();
    }
    this.waiters.shift()?.();
  }

  /** Closes the idle connections; those in use close as they are given back. */
  close(): void {
    this.closed = true;
    clearTimeout(this.trim);
    for (const { c } of this.idle.splice(0)) c.db.close();
  }

  /** Closes the idle snapshot connections past SCAN_IDLE that no scan took for SCAN_LINGER_MS, now or when the time comes. */
  private trimIdle(): void {
    const idle = this.idle;
    const now = performance.now();
    while (idle.length > SCAN_IDLE && now - (idle[0] as { since: number }).since >= SCAN_LINGER_MS) {
      (idle.shift() as { c: Connection }).c.db.close();
      this.open--;
    }
    if (idle.length > SCAN_IDLE && this.trim === undefined && !this.closed) {
      this.trim = setTimeout(() => {
        this.trim = undefined;
        this.trimIdle();
      }, SCAN_LINGER_MS);
      this.trim.unref();
    }
  }
}
