// The journal's search index, in memory: for each folded word the documents (a session's name,
// a turn) that hold it, and the words of each document so a change can take them out again. A
// query word matches the words it starts, found in the sorted vocabulary by binary search.
//
// Documents are numbered as they come, and every list is of numbers. A document's words are word
// numbers in one typed-array slab, there at once. A word's documents are in segments, like a
// log-structured tree's: the documents added since the last segment are cut into one every
// MERGE_DOCS documents (and before a query reads them): their words counted, sorted, and each
// word's documents laid one after another, a few sequential writes. A level of FANOUT segments
// is merged into one of the next level, up to segments of 32,768 documents, so a query looks a
// word up in a few dozen segments at 1M documents. (A list per word, appended to for each document, cost ~50 ns a word of every turn: each
// list's end is a different place in memory; one turn of 1 KiB has ~120 distinct words.)
// A document that changes or goes gets a new number (or none) and its old number is dead: it is
// skipped where a segment holds it, and left out when segments are merged; the slab is rebuilt
// when half of it is dead. (Sets of document keys cost about 0.5 µs a word of every turn
// appended and 7 GiB at 1M turns of 1 KiB.)
import { eachIndexedWordAt, FNV_OFFSET, FNV_PRIME, NOT_ASCII, WORD_MAX } from '../../domain/search.js';

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
    if (this.n === this.a.length) this.grow(this.n + 1);
    this.a[this.n++] = v;
  }

  grow(least: number): void {
    let size = this.a.length * 2;
    while (size < least) size *= 2;
    const bigger = new Int32Array(size);
    bigger.set(this.a.subarray(0, this.n));
    this.a = bigger;
  }
}

/** Documents whose words wait in the slab, at most, before they are cut into a segment. */
const MERGE_DOCS = 512;
/** Segments of a level merged into one of the next... */
const FANOUT = 8;
/**
 * ...up to this level, whose segments (of MERGE_DOCS * FANOUT ** TOP_LEVEL documents, 32,768)
 * are never merged: a merge holds the segments it reads and the one it makes at once, and one of
 * the whole index would double its memory for a moment (~0.5 GB at 1M turns of 1 KiB). A query
 * looks a word up in each segment: ~45 of them at 1M documents.
 */
const TOP_LEVEL = 2;

/**
 * Some documents' words: the words that have any of them, ascending, and for each its documents,
 * ascending, in `docs` from where the previous word's end up to `ends[k]`.
 */
interface Segment {
  readonly words: Int32Array;
  readonly ends: Int32Array;
  readonly docs: Int32Array;
}

/** One word: its number, how many live documents hold it, the last document that took it. */
class Posting {
  live = 0;
  lastDoc = -1;

  constructor(
    readonly word: string,
    readonly id: number,
    readonly hash: number,
  ) {}
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
  private deadDocs = 0;
  /** The first document not in a segment yet (those from it on wait in the slab). */
  private cut = 0;
  /** The segments, by level (level 0 cut from the slab), oldest first in each. */
  private levels: Segment[][] = [];
  /** A cut's scratch: for each word its count, then where its documents go; the words it met. */
  private perWord = new Int32Array(1024);
  private met = new Ints(1024);

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
    if (NOT_ASCII.test(text)) eachIndexedWordAt(text, (s, from, to, hash) => this.give(id, s, from, to, hash));
    else {
      // eachIndexedWordAt's loop for ASCII text, here so that each word is given without a call through a closure (a third of cutting the words)
      const lower = text.toLowerCase();
      const n = lower.length;
      let i = 0;
      while (i < n) {
        let c = lower.charCodeAt(i);
        while (!((c >= 97 && c <= 122) || (c >= 48 && c <= 57))) {
          if (++i === n) break;
          c = lower.charCodeAt(i);
        }
        if (i === n) break;
        const from = i;
        let h = FNV_OFFSET;
        do {
          h = Math.imul(h ^ c, FNV_PRIME);
          if (++i === n) break;
          c = lower.charCodeAt(i);
        } while ((c >= 97 && c <= 122) || (c >= 48 && c <= 57));
        if (i - from <= WORD_MAX) this.give(id, lower, from, i, h);
      }
    }
    this.starts.push(start);
    this.counts.push(this.slab.n - start);
    if (this.keys.length - this.cut >= MERGE_DOCS) this.cutAll();
  }

  /** Gives document `id` the word `s` holds from `from` to `to` (once: the first time it has it). */
  private give(id: number, s: string, from: number, to: number, hash: number): void {
    const p = this.posting(s, from, to, hash);
    if (p.lastDoc === id) return;
    p.lastDoc = id;
    p.live++;
    this.slab.push(p.id);
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

  /** Cuts every document waiting in the slab into segments, MERGE_DOCS at a time. */
  private cutAll(): void {
    while (this.cut < this.keys.length) {
      const to = Math.min(this.keys.length, this.cut + MERGE_DOCS);
      const segment = this.cutRange(this.cut, to);
      this.cut = to;
      if (segment !== undefined) this.place(segment, 0);
    }
  }

  /** A segment of documents `from` to `to` (the live ones; undefined if none is): their words counted and sorted, each word's documents laid in order. */
  private cutRange(from: number, to: number): Segment | undefined {
    if (this.perWord.length < this.byId.length) {
      let size = this.perWord.length;
      while (size < this.byId.length) size *= 2;
      this.perWord = new Int32Array(size);
    }
    const perWord = this.perWord;
    const met = this.met;
    met.n = 0;
    const slab = this.slab.a;
    const starts = this.starts.a;
    const counts = this.counts.a;
    let pairs = 0;
    for (let d = from; d < to; d++) {
      // one taken out (or changed) before its cut is in no segment: its words' live counts were taken down already
      if (this.keys[d] === undefined) continue;
      const end = (starts[d] as number) + (counts[d] as number);
      for (let i = starts[d] as number; i < end; i++) {
        const w = slab[i] as number;
        if ((perWord[w] as number) === 0) met.push(w);
        perWord[w] = (perWord[w] as number) + 1;
      }
      pairs += counts[d] as number;
    }
    if (met.n === 0) return undefined;
    const words = met.a.slice(0, met.n).sort();
    const ends = new Int32Array(words.length);
    let at = 0;
    for (let k = 0; k < words.length; k++) {
      const w = words[k] as number;
      const n = perWord[w] as number;
      perWord[w] = at;
      at += n;
      ends[k] = at;
    }
    const docs = new Int32Array(pairs);
    for (let d = from; d < to; d++) {
      if (this.keys[d] === undefined) continue;
      const end = (starts[d] as number) + (counts[d] as number);
      for (let i = starts[d] as number; i < end; i++) {
        const w = slab[i] as number;
        docs[perWord[w] as number] = d;
        perWord[w] = (perWord[w] as number) + 1;
      }
    }
    for (let k = 0; k < words.length; k++) perWord[words[k] as number] = 0;
    return { words, ends, docs };
  }

  /** Puts a segment at a level; a level that has FANOUT is merged into one segment of the next. */
  private place(segment: Segment, level: number): void {
    const at = (this.levels[level] ??= []);
    at.push(segment);
    if (at.length < FANOUT || level === TOP_LEVEL) return;
    this.levels[level] = [];
    const merged = this.mergeSegments(at);
    if (merged !== undefined) this.place(merged, level + 1);
  }

  /** One segment of what `segments` (in document order) hold, dead documents left out (undefined if none is live). */
  private mergeSegments(segments: readonly Segment[]): Segment | undefined {
    const keys = this.keys;
    // words: the union, ascending (each segment's cursor moved past the smallest word left)
    const at = new Int32Array(segments.length);
    const words = new Ints(1024);
    const ends = new Ints(1024);
    let total = 0;
    for (const s of segments) total += s.docs.length;
    const docs = new Int32Array(total);
    let n = 0;
    for (;;) {
      let w = -1;
      for (let i = 0; i < segments.length; i++) {
        const s = segments[i] as Segment;
        const k = at[i] as number;
        if (k < s.words.length && (w < 0 || (s.words[k] as number) < w)) w = s.words[k] as number;
      }
      if (w < 0) break;
      const from = n;
      for (let i = 0; i < segments.length; i++) {
        const s = segments[i] as Segment;
        const k = at[i] as number;
        if (k >= s.words.length || s.words[k] !== w) continue;
        at[i] = k + 1;
        const end = s.ends[k] as number;
        for (let j = k === 0 ? 0 : (s.ends[k - 1] as number); j < end; j++) {
          const d = s.docs[j] as number;
          if (keys[d] !== undefined) docs[n++] = d;
        }
      }
      if (n > from) {
        words.push(w);
        ends.push(n);
      }
    }
    if (words.n === 0) return undefined;
    // copied to its length only when dead documents were left out
    return { words: words.a.slice(0, words.n), ends: ends.a.slice(0, ends.n), docs: n === total ? docs : docs.slice(0, n) };
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
    // documents with no words count too: a turn whose text is empty, edited again and again, leaves dead numbers and no dead words
    this.deadDocs++;
    if ((this.deadSlab > 1 << 16 && this.deadSlab * 2 > this.slab.n) || (this.deadDocs > 1 << 16 && this.deadDocs * 2 > this.keys.length)) this.renumber();
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
    this.deadDocs = 0;
    this.cut = 0;
    this.levels = [];
    this.perWord = new Int32Array(1024);
  }

  /**
   * The documents in which every query word starts a word: those of the rarest query word,
   * checked against their own words for the others (a common word's documents are never united).
   */
  find(query: readonly string[]): string[] {
    this.cutAll();
    const rarest = this.rarest(query);
    const rest = query.filter((q) => q !== rarest);
    const wanted = this.withPrefix(rarest)
      .map((p) => p.id)
      .sort((a, b) => a - b);
    const out: string[] = [];
    const seen = wanted.length > 1 ? new Set<number>() : undefined;
    const take = (s: Segment, k: number): void => {
      const end = s.ends[k] as number;
      for (let j = k === 0 ? 0 : (s.ends[k - 1] as number); j < end; j++) {
        const id = s.docs[j] as number;
        const key = this.keys[id];
        if (key === undefined || (seen !== undefined && seen.has(id))) continue;
        seen?.add(id);
        if (rest.length === 0 || this.holdsNumber(id, rest)) out.push(key);
      }
    };
    for (const level of this.levels) {
      for (const s of level) {
        // few words: each looked up; many (a short prefix): the segment's words read once, alongside
        if (wanted.length * 16 < s.words.length) {
          for (const w of wanted) {
            const k = lowerBound(s.words, w);
            if (k < s.words.length && s.words[k] === w) take(s, k);
          }
        } else {
          let i = 0;
          for (let k = 0; k < s.words.length && i < wanted.length; k++) {
            const w = s.words[k] as number;
            while (i < wanted.length && (wanted[i] as number) < w) i++;
            if (wanted[i] === w) take(s, k);
          }
        }
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

  /** Numbers the live documents again from 0 and makes the slab and the segments again from their words. */
  private renumber(): void {
    const keys: string[] = [];
    const starts = new Ints(Math.max(1024, this.numbers.size));
    const counts = new Ints(Math.max(1024, this.numbers.size));
    const slab = new Ints(Math.max(1024, this.slab.n - this.deadSlab));
    for (const p of this.byId) p.lastDoc = -1;
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
      for (let i = start; i < start + count; i++) slab.push(this.slab.a[i] as number);
    }
    this.keys = keys;
    this.starts = starts;
    this.counts = counts;
    this.slab = slab;
    this.deadSlab = 0;
    this.deadDocs = 0;
    this.levels = [];
    this.cut = 0;
    this.cutAll();
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

  /** The words `prefix` starts that live documents hold (the vocabulary sorted first). */
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

/** The first index of `a` (ascending) whose value is not below `v`. */
function lowerBound(a: Int32Array, v: number): number {
  let lo = 0;
  let hi = a.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if ((a[mid] as number) < v) lo = mid + 1;
    else hi = mid;
  }
  return lo;
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
