// The journal's search index, in memory: for each folded word the documents (a session's name,
// a turn) that hold it, and the words of each document so a change can take them out again. A
// query word matches the words it starts, found in the sorted vocabulary by binary search.

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

  /** The documents in which every query word starts a word. */
  find(query: readonly string[]): Set<string> {
    this.sort();
    let result: Set<string> | undefined;
    // the rarest word first: the intersection never grows
    const sets = query.map((q) => this.withPrefix(q)).sort((a, b) => a.size - b.size);
    for (const s of sets) {
      if (result === undefined) result = s;
      else {
        const next = new Set<string>();
        for (const d of result) if (s.has(d)) next.add(d);
        result = next;
      }
      if (result.size === 0) break;
    }
    return result ?? new Set();
  }

  private withPrefix(prefix: string): Set<string> {
    const v = this.vocab;
    let lo = 0;
    let hi = v.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((v[mid] as string) < prefix) lo = mid + 1;
      else hi = mid;
    }
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
