// A sorted list kept in chunks of at most CHUNK items, so inserting or removing costs
// O(log n + CHUNK) however long the list grows (a plain array pays O(n) to shift), and
// reading a page from a position costs the page, not the list.

const CHUNK = 512;

/** A position in the list: chunk index and index within it. */
export interface Position {
  chunk: number;
  index: number;
}

export class SortedList<T> {
  private chunks: T[][] = [];
  private count = 0;

  /** `before(a, b)`: a comes strictly before b. */
  constructor(private readonly before: (a: T, b: T) => boolean) {}

  get size(): number {
    return this.count;
  }

  /** Replaces the contents with `items`, which must already be in order. */
  fill(items: readonly T[]): void {
    this.chunks = [];
    for (let i = 0; i < items.length; i += CHUNK) this.chunks.push(items.slice(i, i + CHUNK));
    this.count = items.length;
  }

  /** The first position whose item does not come before `key` (where `key` would go). */
  lowerBound(key: T): Position {
    const chunks = this.chunks;
    // the first chunk whose last item does not come before key
    let lo = 0;
    let hi = chunks.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const c = chunks[mid] as T[];
      if (this.before(c[c.length - 1] as T, key)) lo = mid + 1;
      else hi = mid;
    }
    if (lo === chunks.length) return { chunk: lo, index: 0 };
    const c = chunks[lo] as T[];
    let a = 0;
    let b = c.length;
    while (a < b) {
      const mid = (a + b) >>> 1;
      if (this.before(c[mid] as T, key)) a = mid + 1;
      else b = mid;
    }
    return { chunk: lo, index: a };
  }

  at(p: Position): T | undefined {
    return this.chunks[p.chunk]?.[p.index];
  }

  insert(item: T): void {
    this.count++;
    const first = this.chunks[0];
    if (first === undefined) {
      this.chunks.push([item]);
      return;
    }
    // the common case in session lists: a new or changed session goes first
    if (first.length < CHUNK && this.before(item, first[0] as T)) {
      first.unshift(item);
      return;
    }
    let { chunk, index } = this.lowerBound(item);
    if (chunk === this.chunks.length) {
      // after everything: append to the last chunk
      chunk--;
      index = (this.chunks[chunk] as T[]).length;
    }
    const c = this.chunks[chunk] as T[];
    if (index === 0) c.unshift(item);
    else c.splice(index, 0, item);
    if (c.length > CHUNK) this.chunks.splice(chunk + 1, 0, c.splice(CHUNK >> 1));
  }

  /** Removes the item equal to `item` under the order (its key must not have changed). */
  remove(item: T, same: (a: T, b: T) => boolean): boolean {
    const p = this.lowerBound(item);
    const c = this.chunks[p.chunk];
    if (c === undefined || !same(c[p.index] as T, item)) return false;
    c.splice(p.index, 1);
    this.count--;
    if (c.length === 0) this.chunks.splice(p.chunk, 1);
    return true;
  }

  /** Calls `each` on items from position `p` on, until it returns false. */
  forEachFrom(p: Position, each: (item: T) => boolean): void {
    for (let ci = p.chunk; ci < this.chunks.length; ci++) {
      const c = this.chunks[ci] as T[];
      for (let i = ci === p.chunk ? p.index : 0; i < c.length; i++) if (!each(c[i] as T)) return;
    }
  }
}
