// Refusing writes before the process runs out of memory (the 503 of DECISIONS "Limits"). Two
// ceilings are watched: V8's heap limit (--max-old-space-size), past which the process dies of
// an out-of-memory error, and the memory the process may use (MEMORY_LIMIT: the cgroup's limit
// when one is set), past which the kernel's OOM killer ends it. Writes are refused at a share of
// each, leaving the headroom that reads need to go on being served.
import { oldGenerationUsed, type MemoryCeilings } from '../memory.js';

/**
 * Writes are refused once the old generation leaves less than this share of its limit free (at
 * least HEAP_MIN_FREE: a small heap needs room for reads and for the collector too)...
 */
export const HEAP_FREE_SHARE = 0.2;
export const HEAP_MIN_FREE = 16 * 1024 * 1024;
/** ...or resident memory leaves less than this share of MEMORY_LIMIT free (at least RSS_MIN_FREE). */
export const RSS_FREE_SHARE = 0.15;
export const RSS_MIN_FREE = 32 * 1024 * 1024;

/** The use past which writes are refused, for a ceiling and the room to keep free below it. */
export function refuseAbove(ceiling: number, share: number, minFree: number): number {
  return ceiling - Math.max(ceiling * share, minFree);
}
/** How often memory is measured, at most (a write in between uses the last measure). */
const SAMPLE_MS = 100;

export class MemoryGuard {
  private sampledAt = -Infinity;
  private lowNow = false;
  /** Writes refused for want of memory, for /metrics. */
  refused = 0;

  constructor(
    readonly ceilings: MemoryCeilings,
    /** Called when memory becomes low, and when it is no longer (for a log line). */
    private readonly changed: (low: boolean, measure: { heapUsed: number; resident: number }) => void,
  ) {}

  /** Whether writes are to be refused now. */
  low(): boolean {
    const now = performance.now();
    if (now - this.sampledAt < SAMPLE_MS) return this.lowNow;
    this.sampledAt = now;
    const heapUsed = oldGenerationUsed();
    const resident = process.memoryUsage.rss();
    const { heapBytes, residentBytes } = this.ceilings;
    const low =
      heapUsed > refuseAbove(heapBytes, HEAP_FREE_SHARE, HEAP_MIN_FREE) ||
      (residentBytes !== undefined && resident > refuseAbove(residentBytes, RSS_FREE_SHARE, RSS_MIN_FREE));
    if (low !== this.lowNow) {
      this.lowNow = low;
      this.changed(low, { heapUsed, resident });
    }
    return low;
  }

  /** A write refused: counted. */
  refuse(): void {
    this.refused++;
  }
}
