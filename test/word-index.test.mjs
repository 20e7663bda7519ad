// The journal engine's word index (src/store/journal/word-index.ts) against a plain map of each
// document's word list: random adds, edits and removals of documents, enough of them that word
// lists are compacted and the documents numbered again, with every query answered the same. A
// pure data structure, called directly from the test kit like the sorted list; the store
// contract (test/store/search-cases.mjs) searches through it on the journal.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { test } from 'node:test';
import { rng } from './helpers.mjs';

const { WordIndex, eachIndexedWord, indexedWordList } = createRequire(import.meta.url)('../dist/testkit.cjs');

const WORDS = ['apple', 'apricot', 'Banana', 'band', 'CHERRY', 'Straße', 'été', 'x1', 'deep-learning', 'zoo', `long${'g'.repeat(70)}`, 'a', 'ab', 'abc', 'Supercalifragilistic', 'm'.repeat(64)];
/** A vocabulary large enough that the index's table of words grows several times over. */
const MANY = Array.from({ length: 3000 }, (_, k) => `v${k}Q`);

test('the word index answers what each document\'s word list would, through edits and removals that compact its lists and number its documents again', () => {
  const random = rng(42);
  const pick = (xs) => xs[Math.floor(random() * xs.length)];
  const text = () => Array.from({ length: 1 + Math.floor(random() * 12) }, () => pick(random() < 0.3 ? MANY : WORDS)).join(pick([' ', ', ', '\n', '.']));
  const index = new WordIndex();
  const model = new Map();
  const queries = [['a'], ['ap'], ['apple'], ['band', 'ch'], ['strasse'], ['ete'], ['x1'], ['deep', 'learning'], ['zoo'], ['long'], ['abc', 'zoo'], ['nothing'], ['super'], ['supercalifragilistic'], ['m'.repeat(64)], ['v1'], ['v1234q'], ['v29', 'band']];
  const seen = new Set();
  const check = (when) => {
    assert.equal(index.size, model.size, when);
    assert.equal(index.vocabulary, seen.size, `${when}: every word seen is in the vocabulary once`);
    for (const q of queries) {
      const want = [...model].filter(([, words]) => q.every((w) => words.some((x) => x.startsWith(w)))).map(([doc]) => doc).sort();
      assert.deepEqual(index.find(q).sort(), want, `${when}: ${q.join(' ')}`);
      assert.ok(index.estimate(q) >= want.length, `${when}: the estimate of ${q.join(' ')} is at least its documents`);
      for (const doc of want.slice(0, 5)) assert.ok(index.holds(doc, q), `${when}: ${doc} holds ${q.join(' ')}`);
    }
  };
  const docs = Array.from({ length: 400 }, (_, i) => (i % 4 === 0 ? `s${i}` : `s${i >> 2}\nt${i}`));
  for (let round = 0; round < 60; round++) {
    for (let k = 0; k < 500; k++) {
      const doc = pick(docs);
      const r = random();
      if (r < 0.15) {
        index.remove(doc);
        model.delete(doc);
      } else {
        const t = text();
        if (model.has(doc)) index.set(doc, t);
        else index.add(doc, t);
        model.set(doc, indexedWordList(t));
        for (const w of indexedWordList(t)) seen.add(w);
      }
    }
    check(`round ${round}`);
  }
  index.clear();
  model.clear();
  seen.clear();
  check('cleared');
});

test('each word an index keeps is cut from ASCII text by hand as indexedWordList cuts it, and from other text by it', () => {
  const random = rng(7);
  const alphabet = 'abcXYZ019 .,-_\n\t\'"(é)ßﬁ';
  for (let i = 0; i < 2000; i++) {
    const ascii = random() < 0.7;
    const chars = ascii ? alphabet.slice(0, 19) : alphabet;
    let text = '';
    for (let k = Math.floor(random() * 80); k > 0; k--) text += chars[Math.floor(random() * chars.length)];
    if (random() < 0.1) text += ` ${'q'.repeat(60 + Math.floor(random() * 10))}`;
    const seen = [];
    eachIndexedWord(text, (w) => {
      if (!seen.includes(w)) seen.push(w);
    });
    assert.deepEqual(seen, indexedWordList(text), JSON.stringify(text));
  }
});

test('"The word hash is seeded per process": two processes hash a word differently, and the index finds every word it was given however they hash', () => {
  const testkit = new URL('../dist/testkit.cjs', import.meta.url).pathname;
  const hashOf = () => execFileSync(process.execPath, ['-e', `process.stdout.write(String(require(${JSON.stringify(testkit)}).wordHash('apple')))`], { encoding: 'utf8' });
  const a = hashOf();
  const b = hashOf();
  assert.match(a, /^-?\d+$/);
  assert.notEqual(a, b, 'a fixed seed lets a client work out words of one hash ahead of time');
  const index = new WordIndex();
  const words = Array.from({ length: 5000 }, (_, k) => `w${k}q`);
  words.forEach((w, k) => index.add(`d${k}`, w));
  assert.equal(index.vocabulary, words.length);
  for (const [k, w] of words.entries()) assert.deepEqual(index.find([w]), [`d${k}`], w);
});
