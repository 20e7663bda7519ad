// Finding sessions, the same on every engine. Names in lists: the text searched and the text
// searched for are folded alike, and a match is a plain substring of the folded name. Search
// (GET /api/v1/search): texts are cut into words (runs of letters and digits), each folded;
// a query matches a text when every query word is a prefix of one of the text's words.
import { randomBytes } from 'node:crypto';
import type { ChatSession, JsonValue } from './records.js';

/** The folded form of a name or of a search text (the list's `q`). */
export function foldForSearch(text: string): string {
  return text.toLowerCase();
}

/** A session's tags, folded as lists match them (each once). */
export function foldedTags(s: ChatSession): readonly string[] {
  if (s.tags === undefined) return [];
  return [...new Set(s.tags.map(foldForSearch))];
}

const WORD = /[\p{L}\p{N}]+/gu;

/** One word folded: NFKC, then upper and lower case (so ß is ss, final sigma is sigma). */
export function foldWord(word: string): string {
  return word.normalize('NFKC').toUpperCase().toLowerCase().replace(/ς/g, 'σ');
}

/**
 * Words longer than this (in UTF-16 code units) are not indexed, on any engine: PostgreSQL refuses
 * a lexeme of 2 KiB, and no one searches for such a word. A query word as long matches nothing.
 */
export const WORD_MAX = 64;

export const NOT_ASCII = /[^\x00-\x7f]/;

/** The distinct folded words of a text, in order of first appearance. */
export function wordsOf(text: string): string[] {
  const seen = new Set<string>();
  if (!NOT_ASCII.test(text)) {
    // ASCII (most text): NFKC leaves it as it is and lower case is the whole fold, in one call
    for (const m of text.toLowerCase().matchAll(WORD)) seen.add(m[0]);
    return [...seen];
  }
  for (const m of text.matchAll(WORD)) {
    // a fold may introduce a separator (NFKC of a ligature or a fraction): cut again
    for (const w of foldWord(m[0]).match(WORD) ?? []) seen.add(w);
  }
  return [...seen];
}

/** The words an index keeps for a text: its distinct folded words of at most WORD_MAX. */
export function indexedWordList(text: string): string[] {
  if (!NOT_ASCII.test(text)) {
    const seen = new Set<string>();
    eachIndexedWord(text, (w) => seen.add(w));
    return [...seen];
  }
  return wordsOf(text).filter((w) => w.length <= WORD_MAX);
}

/**
 * Calls `each` with every word of `text` an index keeps: indexedWordList's words, in order, a
 * word as often as the text has it (eachIndexedWordAt, each word made a string).
 */
export function eachIndexedWord(text: string, each: (word: string) => void): void {
  eachIndexedWordAt(text, (s, start, end) => each(s.slice(start, end)));
}

/**
 * The hash eachIndexedWordAt gives a word, for a word in hand: FNV-1a over its UTF-16 code
 * units from a starting value drawn at random for each process, so words that collide cannot be
 * worked out ahead of time (with a fixed start, a client could fill the journal's table of
 * words with thousands of words of one hash, each found after comparing all of them).
 */
export function wordHash(word: string): number {
  let h = FNV_OFFSET;
  for (let i = 0; i < word.length; i++) h = Math.imul(h ^ word.charCodeAt(i), FNV_PRIME);
  return h;
}

/** wordHash's starting value (random per process) and its multiplier, for a cutter of words of its own (the journal's index cuts in its own loop). */
export const FNV_OFFSET = randomBytes(4).readInt32LE(0);
export const FNV_PRIME = 0x01000193;

/**
 * eachIndexedWord without making the words: `each` is given a string, where in it the word
 * starts and ends, and the word's hash (wordHash), so an index that has seen the word can find
 * it without a new string (ASCII text: the word is a slice of the text lowered; other text: each
 * word is its own string, from 0 to its length).
 */
export function eachIndexedWordAt(text: string, each: (s: string, start: number, end: number, hash: number) => void): void {
  if (NOT_ASCII.test(text)) {
    for (const w of indexedWordList(text)) each(w, 0, w.length, wordHash(w));
    return;
  }
  const lower = text.toLowerCase();
  const n = lower.length;
  let i = 0;
  while (i < n) {
    let c = lower.charCodeAt(i);
    while (!((c >= 97 && c <= 122) || (c >= 48 && c <= 57))) {
      if (++i === n) return;
      c = lower.charCodeAt(i);
    }
    const start = i;
    let h = FNV_OFFSET;
    do {
      h = Math.imul(h ^ c, FNV_PRIME);
      if (++i === n) break;
      c = lower.charCodeAt(i);
    } while ((c >= 97 && c <= 122) || (c >= 48 && c <= 57));
    if (i - start <= WORD_MAX) each(lower, start, i, h);
  }
}

/**
 * Whether `text` is ASCII with no word longer than WORD_MAX: cut at every character but a-z, A-Z
 * and 0-9, and folded to lower case, it is then cut into exactly the words an index keeps (what
 * FTS5's ascii tokenizer does, so sqlite's index is given such text as it is). One pass by hand:
 * a regular expression for the long word cost 10 µs a KiB.
 */
export function plainAscii(text: string): boolean {
  let run = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c > 0x7f) return false;
    const folded = c | 0x20; // A-Z to a-z, and no other character to a letter
    if ((folded >= 97 && folded <= 122) || (c >= 48 && c <= 57)) {
      if (++run > WORD_MAX) return false;
    } else run = 0;
  }
  return true;
}

/** indexedWordList joined by spaces (what PostgreSQL's index is given, and sqlite's for text that is not plainAscii). */
export function indexedWords(text: string): string {
  return indexedWordList(text).join(' ');
}

/** The text of a turn that search reads: string content, or its `text` and `reasoning` parts, one per line. */
export function turnText(content: JsonValue | undefined): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  const out: string[] = [];
  for (const p of content as readonly JsonValue[]) {
    if (p !== null && typeof p === 'object' && !Array.isArray(p)) {
      const part = p as { readonly [k: string]: JsonValue };
      if ((part['type'] === 'text' || part['type'] === 'reasoning') && typeof part['text'] === 'string') out.push(part['text']);
    }
  }
  return out.join('\n');
}

/** The searchable text of a turn's JSON. */
export function turnTextOfJson(json: string | Uint8Array): string {
  const turn = JSON.parse(typeof json === 'string' ? json : Buffer.from(json).toString('utf8')) as { content?: JsonValue };
  return turnText(turn.content);
}

/** The words of a turn's JSON as an index keeps them. */
export function indexedTurnWords(json: string | Uint8Array): string {
  return indexedWords(turnTextOfJson(json));
}

const WORD_CHAR = /[a-z0-9]/;

/**
 * Whether every query word starts a word of `text` that an index keeps (what matchesAll over
 * indexedWordList says), without making the word list: for ASCII text, each query word is looked
 * for in the lowered text where a word starts, and that word must be at most WORD_MAX long.
 */
export function textHolds(text: string, query: readonly string[]): boolean {
  if (NOT_ASCII.test(text)) return matchesAll(indexedWordList(text), query);
  const lower = text.toLowerCase();
  return query.every((q) => {
    for (let at = lower.indexOf(q); at >= 0; at = lower.indexOf(q, at + 1)) {
      if (at > 0 && WORD_CHAR.test(lower[at - 1] as string)) continue;
      let end = at + q.length;
      while (end < lower.length && WORD_CHAR.test(lower[end] as string)) end++;
      if (end - at <= WORD_MAX) return true;
    }
    return false;
  });
}

/** True when every query word is a prefix of (or equal to) one of `words`. */
export function matchesAll(words: readonly string[], query: readonly string[]): boolean {
  return query.every((q) => words.some((w) => w.startsWith(q)));
}

export const SNIPPET_CHARS = 160;

/**
 * Up to SNIPPET_CHARS characters of `text` around its first word that a query word starts,
 * on word boundaries where it can, with … where it was cut.
 */
export function snippetOf(text: string, query: readonly string[]): string {
  let at = 0;
  // ASCII text (most): lower case is the whole fold (see wordsOf)
  const fold = NOT_ASCII.test(text) ? foldWord : (w: string): string => w.toLowerCase();
  for (const m of text.matchAll(WORD)) {
    const folded = fold(m[0]);
    if (query.some((q) => folded.startsWith(q))) {
      at = m.index;
      break;
    }
  }
  const chars = Array.from(text.replace(/\s+/g, ' '));
  // the position of `at` among code points after whitespace is collapsed
  const before = Array.from(text.slice(0, at).replace(/\s+/g, ' ')).length;
  let start = Math.max(0, before - 40);
  if (start > 0) {
    const space = chars.lastIndexOf(' ', before - 1);
    if (space >= start - 20 && space < before) start = space + 1;
  }
  const end = Math.min(chars.length, start + SNIPPET_CHARS);
  return `${start > 0 ? '…' : ''}${chars.slice(start, end).join('').trim()}${end < chars.length ? '…' : ''}`;
}
