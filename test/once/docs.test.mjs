// The repository carries its own documents: the contract (docs/spec/api-v1.md), the team's
// decisions (docs/TEAM-DECISIONS.md) and the project's (docs/DECISIONS.md). A user who clones
// it can follow every link of the README and the docs, what a test name quotes is there, and
// every decision of docs/DECISIONS.md is quoted by the name of the test that pins it.
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative, resolve, sep } from 'node:path';
import { describe, test } from 'node:test';
import { ROOT } from '../helpers.mjs';

/** README.md and every Markdown file under docs/, as paths relative to the root. */
function documents() {
  const out = ['README.md'];
  const walk = (dir) => {
    for (const name of readdirSync(join(ROOT, dir))) {
      const rel = `${dir}/${name}`;
      if (statSync(join(ROOT, rel)).isDirectory()) walk(rel);
      else if (name.endsWith('.md')) out.push(rel);
    }
  };
  walk('docs');
  return out;
}

/** `[text](target)` links of a Markdown text, outside code blocks. */
function links(text) {
  const out = [];
  let inCode = false;
  for (const line of text.split('\n')) {
    if (line.startsWith('```')) inCode = !inCode;
    if (inCode) continue;
    for (const m of line.matchAll(/\]\(([^)\s]+)\)/g)) out.push(m[1]);
  }
  return out;
}

/**
 * The tests of the features beyond the spec's rows: their names quote the features issue's
 * list, which is not a document of the repository, so the scan leaves them out.
 */
const QUOTE_THE_FEATURES_ISSUE = new Set([
  'turns.test.mjs',
  'paging.test.mjs',
  'name-search.test.mjs',
  'archive.test.mjs',
  'etags.test.mjs',
  'owner-access.test.mjs',
  'once/scopes.test.mjs',
  'once/providers-redaction.test.mjs',
  'once/openapi.test.mjs',
]);

/**
 * Text as a quote is compared: code marks and emphasis dropped (`**bold**`, `*word*`), case
 * folded, runs of whitespace one space.
 */
const normalize = (s) =>
  s
    .replace(/`|\*\*/g, '')
    .replace(/(^|[\s(])\*(\w(?:[^*\n]*\w)?)\*(?=$|[\s.,;:!?)])/gm, '$1$2')
    .replace(/\s+/g, ' ')
    .trim()
    .toLowerCase();

/** Every file under test/ that may name tests (the test files and the contract's case files), relative to test/. */
function testSources(dir = 'test') {
  const out = [];
  for (const name of readdirSync(join(ROOT, dir))) {
    const rel = `${dir}/${name}`;
    if (statSync(join(ROOT, rel)).isDirectory()) out.push(...testSources(rel));
    else if (name.endsWith('.mjs')) out.push(rel);
  }
  return out;
}

/**
 * The quotes of the test names: each phrase in double quotes of a `test(...)` or `describe(...)`
 * name, cut at `...` (words left out), as {file, piece}; pieces under three words are no quote.
 */
function testNameQuotes() {
  const out = [];
  for (const rel of testSources()) {
    const src = readFileSync(join(ROOT, rel), 'utf8');
    for (const m of src.matchAll(/(?<![.\w$])(?:test|describe)\(\s*(['`"])((?:\\.|(?!\1)[^\\])*)\1/g)) {
      const name = m[2].replace(/\\(['`"\\])/g, '$1');
      for (const q of name.matchAll(/"((?:[^"\\]|\\.)*)"/g)) {
        for (const piece of q[1].replace(/\\"/g, '"').split(/\s*\.\.\.\s*/)) {
          if (piece.split(' ').length >= 3) out.push({ file: rel.slice('test/'.length), piece });
        }
      }
    }
  }
  return out;
}

/**
 * The bullets of docs/DECISIONS.md after its table of contents (which comes before the first
 * heading of a section): each from its `- ` to the next bullet, heading, blank line or prose.
 */
function decisionBullets() {
  const lines = readFileSync(join(ROOT, 'docs', 'DECISIONS.md'), 'utf8').split('\n');
  const out = [];
  let current;
  let started = false;
  lines.forEach((line, i) => {
    if (line.startsWith('## ')) started = true;
    if (!started) return;
    if (line.startsWith('- ')) {
      current = { line: i + 1, text: line.slice(2) };
      out.push(current);
    } else if (current !== undefined && /^\s+\S/.test(line)) current.text += ` ${line.trim()}`;
    else current = undefined;
  });
  return out;
}

/**
 * Bullets of docs/DECISIONS.md no test can pin, by their bold lead phrase, each with why. A
 * bullet that is not a decision (a pointer, an aside) is prose, not a bullet, rather than here.
 */
const NO_TEST_CAN_PIN = new Map([
  [
    'One serialization per event.',
    'how an event\'s bytes are made (once) and written (one system call per stream and delivery, before the write is answered) is a cost no client can see but in time: bench/live.mjs measures it (bench/README.md, "The live feed")',
  ],
  [
    "The event log's transactions keep `synchronous_commit`.",
    'a setting left as PostgreSQL has it: only a crash of the database\'s machine between a commit and its WAL flush could show the difference, which a test cannot cause on purpose',
  ],
]);

describe('Documents', () => {
  test('"Every document is in the repository." ... "every link of the README and of docs/ resolves to a file of the repository"', () => {
    const docs = documents();
    assert.ok(docs.includes('docs/spec/api-v1.md') && docs.includes('docs/TEAM-DECISIONS.md') && docs.includes('docs/DECISIONS.md'));
    for (const doc of docs) {
      const text = readFileSync(join(ROOT, doc), 'utf8');
      for (const target of links(text)) {
        if (/^[a-z]+:/i.test(target) || target.startsWith('#')) continue;
        const file = resolve(ROOT, doc, '..', decodeURIComponent(target.split('#')[0]));
        const inside = relative(ROOT, file);
        assert.ok(!inside.startsWith('..') && !inside.startsWith(sep), `${doc} links outside the repository: ${target}`);
        assert.ok(existsSync(file), `${doc} links to a missing file: ${target}`);
      }
      assert.doesNotMatch(text, /\.\.\/shared\//, `${doc} still points at ../shared/`);
    }
  });

  test('"Test names quote the documents. A phrase quoted in a test\'s name is found as written in the README or in docs/" (phrases of three words or more)', () => {
    const corpus = normalize(documents().map((d) => readFileSync(join(ROOT, d), 'utf8')).join('\n'));
    // the test files at the top of test/ (those of test/store/, test/pg/ and test/providers/ are not held to it yet)
    const quotes = testNameQuotes().filter((q) => /^[^/]+\.test\.mjs$/.test(q.file) && !QUOTE_THE_FEATURES_ISSUE.has(q.file));
    // "..." in a quote leaves words out; each piece must be there as written
    const missing = quotes.filter((q) => !corpus.includes(normalize(q.piece))).map((q) => `${q.file}: "${q.piece}"`);
    assert.ok(quotes.length > 20, `only ${quotes.length} quotes found: the scan is broken`);
    assert.deepEqual(missing, []);
  });

  test('"One document per job. The README is a front page" ... "the API, live events, replies, operating, engines, security and development each have a file under docs/, so a reader opens the one for the task at hand. Measurements live in bench/README.md, not beside the decisions."', () => {
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
    const jobs = ['api.md', 'live-events.md', 'replies.md', 'openai.md', 'operating.md', 'engines.md', 'security.md', 'development.md'];
    const tasks = readdirSync(join(ROOT, 'docs')).filter((f) => f.endsWith('.md') && !['DECISIONS.md', 'TEAM-DECISIONS.md'].includes(f));
    assert.deepEqual(tasks.sort(), [...jobs].sort(), 'one file under docs/ per job, no more');
    const next = readme.slice(readme.indexOf('## Where to go next'));
    for (const f of jobs) assert.ok(next.includes(`](docs/${f})`), `the README's "Where to go next" points to docs/${f}`);
    assert.ok(next.includes('](bench/README.md)'), 'and to the measurements');
    const decisions = readFileSync(join(ROOT, 'docs', 'DECISIONS.md'), 'utf8');
    assert.ok(decisions.includes('What was measured to decide is in `bench/README.md`'), 'the decisions point to the measurements');
    assert.doesNotMatch(decisions, /×|\b\d[\d,.]*\s*(req|requests|writes|ops|queries|creates)\/s\b/, 'no measured figure beside the decisions');
  });

  test('"Each entry is pinned by a test whose name quotes it" ("Every decision is quoted by a test\'s name."): every bullet of docs/DECISIONS.md (its table of contents aside) holds a quote of three words or more from some test\'s name, unless it is one of the few no test can pin', () => {
    const quotes = [...new Set(testNameQuotes().map((q) => normalize(q.piece)))];
    const bullets = decisionBullets();
    assert.ok(bullets.length > 150, `only ${bullets.length} bullets found: the scan is broken`);
    const lead = (b) => /^\*\*(.+?)\*\*/.exec(b.text)?.[1] ?? b.text.slice(0, 60);
    const leads = new Set(bullets.map(lead));
    for (const exempt of NO_TEST_CAN_PIN.keys()) assert.ok(leads.has(exempt), `the exemption "${exempt}" names no bullet of docs/DECISIONS.md`);
    const unquoted = bullets
      .filter((b) => !NO_TEST_CAN_PIN.has(lead(b)))
      .filter((b) => {
        const text = normalize(b.text);
        return !quotes.some((q) => text.includes(q));
      })
      .map((b) => `docs/DECISIONS.md:${b.line} ${lead(b)}`);
    assert.deepEqual(unquoted, []);
  });

  test('the table of schema versions in docs/operating.md ends at the versions this release writes (sqlite and PostgreSQL)', () => {
    const doc = readFileSync(join(ROOT, 'docs', 'operating.md'), 'utf8');
    const start = doc.indexOf('| step | sqlite | PostgreSQL |');
    assert.ok(start > 0, 'docs/operating.md has the table');
    const rows = doc.slice(start).split('\n').filter((l, i, all) => l.startsWith('|') && all.slice(0, i).every((p) => p.startsWith('|')));
    const last = rows.at(-1).split('|').map((c) => c.trim());
    const version = (engine) => Number(/export const SCHEMA_VERSION = (\d+);/.exec(readFileSync(join(ROOT, 'src', 'store', engine, 'schema.ts'), 'utf8'))[1]);
    assert.equal(Number(last[2]), version('sqlite'), `sqlite in ${rows.at(-1)}`);
    assert.equal(Number(last[3]), version('postgres'), `PostgreSQL in ${rows.at(-1)}`);
  });
});
