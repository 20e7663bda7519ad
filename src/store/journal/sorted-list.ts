// A sorted list kept in chunks of at most CHUNK items, so inserting or removing costs
// O(log n + CHUNK) however long the list grows (a plain array pays O(n) to shift), and
// reading a page from a position costs the page, not the list.
//
// Items are kept in the reverse of the order they are read in: the list's first item is
// stored last. Session lists are read newest first, and a new or changed session is the newest,
// so it is appended to the last chunk (an array push) instead of being put in front of every
// other item (an unshift that moves the whole chunk, with a write barrier for each slot moved).

const CHUNK = 512;

/** Where an item is or would go: a chunk, and an index in it (as stored, last item read first). */
interface Slot {
  chunk: number;
  index: number;
}

export class SortedList<T> {
  /** Stored in reverse reading order: for stored neighbours a, b, `before(b, a)`. */
  private chunks: T[][] = [];
  private count = 0;

  /** `before(a, b)`: a is read strictly before b. */
  constructor(private readonly before: (a: T, b: T) => boolean) {}

  get size(): number {
    return this.count;
  }

  /** Replaces the contents with `items`, which must already be in reading order. */
  fill(items: readonly T[]): void {
    const stored = items.slice().reverse();
    this.chunks = [];
    for (let i = 0; i < stored.length; i += CHUNK) this.chunks.push(stored.slice(i, i + CHUNK));
    this.count = items.length;
  }

  insert(item: T): void {
    this.count++;
    const chunks = this.chunks;
    const last = chunks[chunks.length - 1];
    if (last === undefined) {
      chunks.push([item]);
      return;
    }
    // the common case: the item is read first (a new or changed session), so it is stored last
    if (last.length < CHUNK && this.before(item, last[last.length - 1] as T)) {
      last.push(item);
      return;
    }
    let { chunk, index } = this.storedAt(item);
    if (chunk === chunks.length) {
      chunk--;
      index = (chunks[chunk] as T[]).length;
    }
    const c = chunks[chunk] as T[];
    if (index === c.length) c.push(item);
    else c.splice(index, 0, item);
    if (c.length > CHUNK) chunks.splice(chunk + 1, 0, c.splice(CHUNK >> 1));
  }

  /** Removes the item equal to `item` under the order (its key must not have changed). */
  remove(item: T, same: (a: T, b: T) => boolean): boolean {
    const p = this.storedAt(item);
    const c = this.chunks[p.chunk];
    if (c === undefined || !same(c[p.index] as T, item)) return false;
    c.splice(p.index, 1);
    this.count--;
    if (c.length === 0) this.chunks.splice(p.chunk, 1);
    return true;
  }

  /**
   * Calls `each` on the items in reading order, from the first read strictly after `key` (from
   * the first item when `key` is undefined), until it returns false.
   */
  forEachAfter(key: T | undefined, each: (item: T) => boolean): void {
    // the items read after key are stored before where key is (or would be)
    let ci: number;
    let i: number;
    if (key === undefined) {
      ci = this.chunks.length - 1;
      i = (this.chunks[ci]?.length ?? 0) - 1;
    } else {
      const p = this.storedAt(key);
      ci = p.chunk;
      i = p.index - 1;
    }
    for (; ci >= 0; ci--) {
      const c = this.chunks[ci];
      if (c === undefined) {
        i = (this.chunks[ci - 1]?.length ?? 0) - 1;
        continue;
      }
      for (; i >= 0; i--) if (!each(c[i] as T)) return;
      i = (this.chunks[ci - 1]?.length ?? 0) - 1;
    }
  }

  /** The first stored slot whose item is not read after `key`: where `key` is, or would be stored. */
  private storedAt(key: T): Slot {
    const chunks = this.chunks;
    // the first chunk whose last stored item is not read after key
    let lo = 0;
    let hi = chunks.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const c = chunks[mid] as T[];
      if (this.before(key, c[c.length - 1] as T)) lo = mid + 1;
      else hi = mid;
    }
    if (lo === chunks.length) return { chunk: lo, index: 0 };
    const c = chunks[lo] as T[];
    let a = 0;
    let b = c.length;
    while (a < b) {
      const mid = (a + b) >>> 1;
      if (this.before(key, c[mid] as T)) a = mid + 1;
      else b = mid;
    }
    return { chunk: lo, index: a };
  }
}
