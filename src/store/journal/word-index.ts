// The journal's search index, in memory: for each folded word the documents (a session's name,
// a turn) that hold it, and the words of each document so a change can take them out again. A
// query word matches the words it starts, found in the sorted vocabulary by binary search.
//
// Documents are numbered as they come, and both lists are of numbers: a word's postings are the
// numbers of its documents, a document's words are word numbers in one typed-array slab.
// A document that changes or goes gets a new number (or none) and its old number is dead: its
// postings stay where they are, skipped when read, until the word's list is more dead than live
// and is compacted; the slab is rebuilt when half of it is dead. (Sets of document keys cost
// about 0.5 µs a word of every turn appended and 7 GiB at 1M turns of 1 KiB.)
import { eachIndexedWordAt } from '../../domain/search.js';

/** The key of a session's name as a document. */
export function nameDoc(sessionId: string): string {
  return sessionId;
}

/** The key of a turn as a document. */
export function turnDoc(sessionId: string, turnId: string): string {
  return `${sessionId}\n${turnId}`;
}

/** A document's session id and turn id (undefined for a name). */
export function docParts(doc: string): [string, string | undefined] {
  const nl = doc.indexOf('\n');
  return nl < 0 ? [doc, undefined] : [doc.slice(0, nl), doc.slice(nl + 1)];
}

/** A growable list of 32-bit integers. */
class Ints {
  a: Int32Array;
  n = 0;

  constructor(capacity = 4) {
    this.a = new Int32Array(capacity);
  }

  push(v: number): void {
    if (this.n === this.a.length) {
      const bigger = new Int32Array(this.a.length * 2);
      bigger.set(this.a);
      this.a = bigger;
    }
    this.a[this.n++] = v;
  }
}

/** A word's list moves from a plain array to a typed one at this length. */
const TYPED_FROM = 64;

/**
 * One word: its documents (some maybe dead), how many of them live, the last document that took
 * it. A short list is a plain array of small integers, which costs a word seen a few times far
 * less than a typed array would; a long one is typed: cheaper to append to, and never read by
 * the garbage collector's marking (a common word's list holds most documents).
 */
class Posting {
  /** Its documents: none (-1), the one (most words of a vocabulary are seen once), or a list. */
  docs: number | number[] | Ints = -1;
  live = 0;
  lastDoc = -1;

  constructor(
    readonly word: string,
    readonly id: number,
    readonly hash: number,
  ) {}

  push(id: number): void {
    const d = this.docs;
    if (d instanceof Ints) d.push(id);
    else if (typeof d === 'number') this.docs = d === -1 ? id : [d, id];
    else if (d.length < TYPED_FROM) d.push(id);
    else {
      const typed = new Ints(TYPED_FROM * 2);
      for (const x of d) typed.push(x);
      typed.push(id);
      this.docs = typed;
    }
  }

  /** How many documents its list holds, dead ones too. */
  get length(): number {
    const d = this.docs;
    return d instanceof Ints ? d.n : typeof d === 'number' ? (d === -1 ? 0 : 1) : d.length;
  }

  /** Its documents as a list (a query's read). */
  list(): ArrayLike<number> {
    const d = this.docs;
    return d instanceof Ints ? d.a.subarray(0, d.n) : typeof d === 'number' ? (d === -1 ? [] : [d]) : d;
  }
}

export class WordIndex {
  /**
   * The words seen, by word number; `table` finds a word's number by its hash (open addressing,
   * -1 for an empty slot, never more than half full), so a word already seen is found from where
   * it lies in the text, without a string made for it.
   */
  private byId: Posting[] = [];
  private table = new Int32Array(1024).fill(-1);
  /** Every word seen, sorted by word once a query needs it; words seen since wait in `unsorted`. */
  private vocab: Posting[] = [];
  private unsorted: Posting[] = [];
  /** Document key -> its number, for the live ones. */
  private readonly numbers = new Map<string, number>();
  /** Document number -> its key (undefined once dead), where its words start in the slab, how many. */
  private keys: (string | undefined)[] = [];
  private starts = new Ints(1024);
  private counts = new Ints(1024);
  private slab = new Ints(1024);
  private deadSlab = 0;

  get size(): number {
    return this.numbers.size;
  }

  /** Distinct words seen since the index was made or cleared (each once: a word found again is the same word). */
  get vocabulary(): number {
    return this.byId.length;
  }

  /** Makes the words of `text` the words of `doc`. */
  set(doc: string, text: string): void {
    this.remove(doc);
    this.add(doc, text);
  }

  /** Gives the words of `text` to `doc`, which has none yet (a new session or turn: nothing to take out first). */
  add(doc: string, text: string): void {
    const id = this.keys.length;
    this.keys.push(doc);
    this.numbers.set(doc, id);
    const start = this.slab.n;
    eachIndexedWordAt(text, (s, from, to, hash) => {
      const p = this.posting(s, from, to, hash);
      if (p.lastDoc === id) return;
      p.lastDoc = id;
      if (p.live * 2 < p.length && p.length >= 16) this.compact(p);
      p.push(id);
      p.live++;
      this.slab.push(p.id);
    });
    this.starts.push(start);
    this.counts.push(this.slab.n - start);
  }

  /** The word `s` holds from `from` to `to` (whose hash is `hash`), made known if it is not. */
  private posting(s: string, from: number, to: number, hash: number): Posting {
    const mask = this.table.length - 1;
    const length = to - from;
    let slot = slotOf(hash, mask);
    for (let w = this.table[slot] as number; w >= 0; w = this.table[(slot = (slot + 1) & mask)] as number) {
      const p = this.byId[w] as Posting;
      if (p.hash === hash && p.word.length === length && s.startsWith(p.word, from)) return p;
    }
    const p = new Posting(own(s, from, to), this.byId.length, hash);
    this.byId.push(p);
    this.unsorted.push(p);
    this.table[slot] = p.id;
    if (this.byId.length * 2 > this.table.length) this.growTable();
    return p;
  }

  private growTable(): void {
    const table = new Int32Array(this.table.length * 2).fill(-1);
    const mask = table.length - 1;
    for (const p of this.byId) {
      let slot = slotOf(p.hash, mask);
      while ((table[slot] as number) >= 0) slot = (slot + 1) & mask;
      table[slot] = p.id;
    }
    this.table = table;
  }

  remove(doc: string): void {
    const id = this.numbers.get(doc);
    if (id === undefined) return;
    this.numbers.delete(doc);
    this.keys[id] = undefined;
    const start = this.starts.a[id] as number;
    const count = this.counts.a[id] as number;
    for (let i = start; i < start + count; i++) (this.byId[this.slab.a[i] as number] as Posting).live--;
    this.deadSlab += count;
    if (this.deadSlab > 1 << 16 && this.deadSlab * 2 > this.slab.n) this.renumber();
  }

  clear(): void {
    this.byId = [];
    this.table = new Int32Array(1024).fill(-1);
    this.vocab = [];
    this.unsorted = [];
    this.numbers.clear();
    this.keys = [];
    this.starts = new Ints(1024);
    this.counts = new Ints(1024);
    this.slab = new Ints(1024);
    this.deadSlab = 0;
  }

  /**
   * The documents in which every query word starts a word: those of the rarest query word,
   * checked against their own words for the others (a common word's documents are never united).
   */
  find(query: readonly string[]): string[] {
    const rarest = this.rarest(query);
    const rest = query.filter((q) => q !== rarest);
    const postings = this.withPrefix(rarest);
    const out: string[] = [];
    const seen = postings.length > 1 ? new Set<number>() : undefined;
    for (const p of postings) {
      const docs = p.list();
      for (let i = 0; i < docs.length; i++) {
        const id = docs[i] as number;
        const key = this.keys[id];
        if (key === undefined || (seen !== undefined && seen.has(id))) continue;
        seen?.add(id);
        if (rest.length === 0 || this.holdsNumber(id, rest)) out.push(key);
      }
    }
    return out;
  }

  /** At least how many documents a query word starts a word of, for its rarest word (what reading its documents would cost). */
  estimate(query: readonly string[]): number {
    return Math.min(...query.map((q) => this.countWithPrefix(q)));
  }

  /** Whether every query word starts one of the document's words. */
  holds(doc: string, query: readonly string[]): boolean {
    const id = this.numbers.get(doc);
    return id !== undefined && this.holdsNumber(id, query);
  }

  private holdsNumber(id: number, query: readonly string[]): boolean {
    const start = this.starts.a[id] as number;
    const end = start + (this.counts.a[id] as number);
    const slab = this.slab.a;
    return query.every((q) => {
      for (let i = start; i < end; i++) if ((this.byId[slab[i] as number] as Posting).word.startsWith(q)) return true;
      return false;
    });
  }

  /** A word's list without its dead documents (a list, not a single number: it is at least 16 long). */
  private compact(p: Posting): void {
    const d = p.docs;
    if (typeof d === 'number') return;
    const docs = d instanceof Ints ? d.a : d;
    const n = d instanceof Ints ? d.n : d.length;
    let k = 0;
    for (let i = 0; i < n; i++) {
      const id = docs[i] as number;
      if (this.keys[id] !== undefined) docs[k++] = id;
    }
    if (d instanceof Ints) d.n = k;
    else d.length = k;
  }

  /** Numbers the live documents again from 0 and rebuilds the slab and every list from their words. */
  private renumber(): void {
    const keys: string[] = [];
    const starts = new Ints(Math.max(1024, this.numbers.size));
    const counts = new Ints(Math.max(1024, this.numbers.size));
    const slab = new Ints(Math.max(1024, this.slab.n - this.deadSlab));
    for (const p of this.byId) {
      p.docs = -1;
      p.lastDoc = -1;
    }
    for (let old = 0; old < this.keys.length; old++) {
      const key = this.keys[old];
      if (key === undefined) continue;
      const id = keys.length;
      keys.push(key);
      this.numbers.set(key, id);
      const start = this.starts.a[old] as number;
      const count = this.counts.a[old] as number;
      starts.push(slab.n);
      counts.push(count);
      for (let i = start; i < start + count; i++) {
        const w = this.slab.a[i] as number;
        slab.push(w);
        (this.byId[w] as Posting).push(id);
      }
    }
    this.keys = keys;
    this.starts = starts;
    this.counts = counts;
    this.slab = slab;
    this.deadSlab = 0;
  }

  private rarest(query: readonly string[]): string {
    let best = query[0] as string;
    let count = Infinity;
    for (const q of query) {
      const n = this.countWithPrefix(q);
      if (n < count) {
        best = q;
        count = n;
      }
    }
    return best;
  }

  /** The live documents of the words `prefix` starts, counted once per word (an upper bound when a document has several). */
  private countWithPrefix(prefix: string): number {
    let n = 0;
    for (const p of this.withPrefix(prefix)) n += p.live;
    return n;
  }

  /** The lists of the words `prefix` starts (the vocabulary sorted first). */
  private withPrefix(prefix: string): Posting[] {
    this.sort();
    const v = this.vocab;
    let lo = 0;
    let hi = v.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((v[mid] as Posting).word < prefix) lo = mid + 1;
      else hi = mid;
    }
    const out: Posting[] = [];
    for (let i = lo; i < v.length && (v[i] as Posting).word.startsWith(prefix); i++) {
      const p = v[i] as Posting;
      if (p.live > 0) out.push(p);
    }
    return out;
  }

  private sort(): void {
    if (this.unsorted.length === 0) return;
    const added = this.unsorted.sort((a, b) => (a.word < b.word ? -1 : 1));
    this.unsorted = [];
    const merged: Posting[] = new Array<Posting>(this.vocab.length + added.length);
    let i = 0;
    let j = 0;
    let k = 0;
    while (i < this.vocab.length || j < added.length) {
      if (j >= added.length || (i < this.vocab.length && (this.vocab[i] as Posting).word < (added[j] as Posting).word)) merged[k++] = this.vocab[i++] as Posting;
      else merged[k++] = added[j++] as Posting;
    }
    this.vocab = merged;
  }
}

/**
 * The word from `from` to `to` of `s` as a string of its own: V8 makes a slice of 13 characters
 * or more a view that keeps the whole text alive, and a word kept by the index would keep the
 * turn's text (long words are the rare ones: names, identifiers, typos, each kept once).
 */
function own(s: string, from: number, to: number): string {
  const w = s.slice(from, to);
  return w.length < 13 ? w : Buffer.from(w, 'utf8').toString('utf8');
}

/** Where a hash starts its probe in a table of mask + 1 slots (FNV-1a's low bits alone mix the least). */
function slotOf(hash: number, mask: number): number {
  return (hash ^ (hash >>> 16)) & mask;
}
