// The journal's search index, in memory: for each folded word the documents (a session's name,
// a turn) that hold it, and the words of each document so a change can take them out again. A
// query word matches the words it starts, found in the sorted vocabulary by binary search.
import { matchesAll } from '../../domain/search.js';

const NONE: readonly string[] = [];

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

export class WordIndex {
  /** word -> documents; a word once seen keeps its (maybe empty) set, so the vocabulary never holds it twice. */
  private readonly postings = new Map<string, Set<string>>();
  /** Every word seen, sorted once a query needs it; words seen since wait in `unsorted`. */
  private vocab: string[] = [];
  private unsorted: string[] = [];
  private readonly docs = new Map<string, readonly string[]>();

  get size(): number {
    return this.docs.size;
  }

  /** Makes `words` (distinct, folded) the words of `doc`. */
  set(doc: string, words: readonly string[]): void {
    this.remove(doc);
    this.add(doc, words);
  }

  /** Gives `words` (distinct, folded) to `doc`, which has none yet (a new session or turn: nothing to take out first). */
  add(doc: string, words: readonly string[]): void {
    if (words.length === 0) return;
    this.docs.set(doc, words);
    for (const w of words) {
      let p = this.postings.get(w);
      if (p === undefined) {
        p = new Set();
        this.postings.set(w, p);
        this.unsorted.push(w);
      }
      p.add(doc);
    }
  }

  remove(doc: string): void {
    const words = this.docs.get(doc);
    if (words === undefined) return;
    this.docs.delete(doc);
    for (const w of words) this.postings.get(w)?.delete(doc);
  }

  clear(): void {
    this.postings.clear();
    this.docs.clear();
    this.vocab = [];
    this.unsorted = [];
  }

  /**
   * The documents in which every query word starts a word: those of the rarest query word,
   * checked against their own words for the others (a common word's documents are never united).
   */
  find(query: readonly string[]): string[] {
    const rarest = this.rarest(query);
    const docs = this.withPrefix(rarest);
    const rest = query.filter((q) => q !== rarest);
    if (rest.length === 0) return [...docs];
    const out: string[] = [];
    for (const d of docs) if (matchesAll(this.docs.get(d) ?? NONE, rest)) out.push(d);
    return out;
  }

  /** At least how many documents a query word starts a word of, for its rarest word (what reading its documents would cost). */
  estimate(query: readonly string[]): number {
    return Math.min(...query.map((q) => this.countWithPrefix(q)));
  }

  /** Whether every query word starts one of the document's words. */
  holds(doc: string, query: readonly string[]): boolean {
    const words = this.docs.get(doc);
    return words !== undefined && matchesAll(words, query);
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

  /** The documents of the words `prefix` starts, counted once per word (an upper bound when a document has several). */
  private countWithPrefix(prefix: string): number {
    let n = 0;
    for (let i = this.firstWithPrefix(prefix); i < this.vocab.length && (this.vocab[i] as string).startsWith(prefix); i++) n += (this.postings.get(this.vocab[i] as string) as Set<string>).size;
    return n;
  }

  /** Where the first word at or after `prefix` is in the vocabulary (sorted first). */
  private firstWithPrefix(prefix: string): number {
    this.sort();
    const v = this.vocab;
    let lo = 0;
    let hi = v.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((v[mid] as string) < prefix) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  private withPrefix(prefix: string): Set<string> {
    const v = this.vocab;
    const lo = this.firstWithPrefix(prefix);
    let out: Set<string> | undefined;
    let copied = false;
    for (let i = lo; i < v.length && (v[i] as string).startsWith(prefix); i++) {
      const p = this.postings.get(v[i] as string) as Set<string>;
      if (p.size === 0) continue;
      if (out === undefined) out = p;
      else {
        if (!copied) {
          out = new Set(out);
          copied = true;
        }
        for (const d of p) out.add(d);
      }
    }
    return out ?? new Set();
  }

  private sort(): void {
    if (this.unsorted.length === 0) return;
    const added = this.unsorted.sort();
    this.unsorted = [];
    const merged: string[] = new Array<string>(this.vocab.length + added.length);
    let i = 0;
    let j = 0;
    let k = 0;
    while (i < this.vocab.length || j < added.length) {
      if (j >= added.length || (i < this.vocab.length && (this.vocab[i] as string) < (added[j] as string))) merged[k++] = this.vocab[i++] as string;
      else merged[k++] = added[j++] as string;
    }
    this.vocab = merged;
  }
}
