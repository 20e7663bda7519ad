// What this process may use of memory, and what it uses: V8's old-generation limit (set with
// --max-old-space-size) and the resident memory allowed (MEMORY_LIMIT, or the cgroup's limit).
// The low-memory guard (http/memory-guard.ts) and the caches of records size themselves by it.
import { totalmem } from 'node:os';
import { PerformanceObserver } from 'node:perf_hooks';
import { getHeapSpaceStatistics, getHeapStatistics, setFlagsFromString } from 'node:v8';

/** What memory this process may use. */
export interface MemoryCeilings {
  /** Bytes the old generation of V8's heap may hold (where V8 stops with out of memory). */
  readonly heapBytes: number;
  /** Bytes of resident memory the process may use, or undefined for no such check (MEMORY_LIMIT=off). */
  readonly residentBytes: number | undefined;
}

/** The most V8's young generation reserves within the heap limit, among the supported releases. */
const YOUNG_RESERVE = 192 * 1024 * 1024;
/** The words of NODE_OPTIONS and then this process's own arguments to node, in the order node reads them. */
function nodeFlags(): string[] {
  return [...(process.env['NODE_OPTIONS'] ?? '').split(/\s+/), ...process.execArgv];
}

/** The --max-old-space-size (MiB) given to this process, the last one in NODE_OPTIONS and then its arguments. */
function maxOldSpaceFlag(): number | undefined {
  let found: number | undefined;
  const words = nodeFlags();
  for (let i = 0; i < words.length; i++) {
    const w = words[i] as string;
    const m = /^--max[-_]old[-_]space[-_]size(?:=(\d+))?$/.exec(w);
    if (m === null) continue;
    const v = m[1] ?? words[i + 1];
    if (v !== undefined && /^\d+$/.test(v)) found = Number(v);
  }
  return found;
}

/**
 * The most V8's new space (the young generation's two semi-spaces) grows to here. V8 alone grows
 * it when many objects outlive a scavenge, up to 128 MiB on Node 24, and keeps the pages: a
 * thousand replies in flight left 150 MiB of resident memory behind. Creates under load are
 * 10-20% cheaper a request with 8 MiB than with the 4 MiB it starts with (bench/README.md).
 */
export const YOUNG_GENERATION_CAP = 8 * 1024 * 1024;

/**
 * Stops V8's young generation from growing past YOUNG_GENERATION_CAP (after a garbage collection
 * finds it there, V8's growth factor is set to 1: the one sizing flag V8 reads while it runs; the
 * others only count on node's command line), unless the operator sized it with a flag of their
 * own (--max-semi-space-size, --min-semi-space-size or --semi-space-growth-factor). V8 grows
 * the space by doubling it, so it may stop one step past the cap when two scavenges grow it
 * before this hears of the first.
 */
export function capYoungGeneration(): void {
  if (nodeFlags().some((w) => /^--(?:max|min)[-_]semi[-_]space[-_]size|^--semi[-_]space[-_]growth[-_]factor/.test(w))) return;
  const observer = new PerformanceObserver(() => {
    if (newSpaceSize() < YOUNG_GENERATION_CAP) return;
    setFlagsFromString('--semi-space-growth-factor=1');
    observer.disconnect();
  });
  observer.observe({ entryTypes: ['gc'] });
}

function newSpaceSize(): number {
  for (const s of getHeapSpaceStatistics()) if (s.space_name === 'new_space') return s.space_size;
  return 0;
}

/**
 * The ceilings of this process: V8's old-generation limit (the flag when given, else the heap
 * limit less what its young generation reserves), and `memoryLimit` bytes of resident memory,
 * or with 'auto' the cgroup's limit when one is set, else the machine's memory.
 */
export function ceilingsOf(memoryLimit: number | 'auto' | 'off'): MemoryCeilings {
  const flag = maxOldSpaceFlag();
  const limit = getHeapStatistics().heap_size_limit;
  // the heap limit counts the young generation too (48 MiB on Node 20, 192 MiB on Node 24)
  const heapBytes = flag !== undefined ? flag * 1024 * 1024 : Math.max(limit / 2, limit - YOUNG_RESERVE);
  let residentBytes: number | undefined;
  if (memoryLimit === 'off') residentBytes = undefined;
  else if (memoryLimit !== 'auto') residentBytes = memoryLimit;
  else {
    const machine = totalmem();
    const constrained = (process as { constrainedMemory?: () => number | undefined }).constrainedMemory?.();
    // no cgroup limit reads as 0 or as a huge number, depending on the release
    residentBytes = constrained !== undefined && constrained > 0 && constrained < machine ? constrained : machine;
  }
  return { heapBytes, residentBytes };
}

/** The old generation's bytes in use: the heap less its young generation, which a scavenge empties. */
export function oldGenerationUsed(): number {
  let n = 0;
  for (const s of getHeapSpaceStatistics()) if (s.space_name !== 'new_space' && s.space_name !== 'new_large_object_space') n += s.space_used_size;
  return n;
}

/**
 * What a cache of read records may hold: a sixty-fourth of V8's heap limit, from 1 to 64 MiB, so
 * that near a small ceiling a client that only reads cannot fill the heap with cached JSON.
 */
export function recordCacheBudget(heapBytes: number = ceilingsOf('off').heapBytes): number {
  return Math.min(64 * 1024 * 1024, Math.max(1024 * 1024, Math.floor(heapBytes / 64)));
}
