// The repository carries its own documents: the contract (docs/spec/api-v1.md), the team's
// decisions (docs/TEAM-DECISIONS.md), the project's (docs/DECISIONS.md) and their history
// (CHANGELOG.md). A user who clones it can follow every link of the README and the docs, what a
// test name quotes is there, every decision of docs/DECISIONS.md is a short record whose id the
// name of the test that pins it gives, no test name is over 120 characters, and the layout map
// of docs/development.md names what is in the tree.
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative, resolve, sep } from 'node:path';
import { describe, test } from 'node:test';
import { ROOT } from '../helpers.mjs';

/** README.md, CHANGELOG.md and every Markdown file under docs/, as paths relative to the root. */
function documents() {
  const out = ['README.md', 'CHANGELOG.md'];
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

/** Every file under test/ that may name tests (the test files and the contract's case files), relative to the root. */
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
 * The string literal that starts at `at` in `src` (quotes or a template), as {value, end}, or
 * undefined when none starts there. A template's `${...}` is kept as its source text.
 */
function literalAt(src, at) {
  const open = src[at];
  if (!`'"\``.includes(open)) return undefined;
  let depth = 0;
  for (let i = at + 1; i < src.length; i++) {
    const c = src[i];
    if (c === '\\') i++;
    else if (open === '`' && c === '$' && src[i + 1] === '{' && depth === 0) {
      depth = 1;
      i++;
    }
    else if (depth > 0) depth += c === '{' ? 1 : c === '}' ? -1 : 0;
    else if (c === open) return { value: src.slice(at + 1, i).replace(/\\(['`"\\])/g, '$1'), end: i + 1 };
  }
  return undefined;
}

/**
 * Every test and suite name under test/: the name given to each test and describe call of a
 * file that imports node:test, as {file, line, name}. A name is one literal, so that it can be
 * read here (a template's `${...}` counting as its source); any other name (a variable, pieces
 * joined with +) has `name` undefined. (A subtest's `t.test(` is not read here: the runner's
 * reporter, test/counter.mjs, holds every name as it ran to the same length.)
 */
function testNames() {
  const out = [];
  for (const file of testSources()) {
    const src = readFileSync(join(ROOT, file), 'utf8');
    if (!/from 'node:test'/.test(src)) continue;
    for (const m of src.matchAll(/(?<![.\w$])(?:test|describe)\(\s*/g)) {
      const lit = literalAt(src, m.index + m[0].length);
      const whole = lit !== undefined && /^\s*[,)]/.test(src.slice(lit.end));
      out.push({ file, line: src.slice(0, m.index).split('\n').length, name: whole ? lit.value : undefined });
    }
  }
  return out;
}

/** The longest a test's name may be. */
const LONGEST_NAME = 120;

/**
 * The quotes of the test names: each phrase in double quotes of a name, cut at `...` (words
 * left out), as {file, piece}; pieces under three words are no quote.
 */
function testNameQuotes() {
  const out = [];
  for (const { file, name } of testNames()) {
    for (const q of (name ?? '').matchAll(/"((?:[^"\\]|\\.)*)"/g)) {
      for (const piece of q[1].replace(/\\"/g, '"').split(/\s*\.\.\.\s*/)) {
        if (piece.split(' ').length >= 3) out.push({ file: file.slice('test/'.length), piece });
      }
    }
  }
  return out;
}

/** A decision's id: `D-`, the area (a lowercase word), `-`, a number from 1. */
const ID = /^D-[a-z][a-z0-9]*-[1-9][0-9]*$/;

/** The ids a test's name gives: each `[D-...]` in it, well-formed or not. */
const idsIn = (name) => [...name.matchAll(/\[(D-[^\]\s]*)\]/g)].map((m) => m[1]);

/**
 * The records of docs/DECISIONS.md after its table of contents (which comes before the first
 * heading of a section): each bullet from its `- ` through its indented lines, as {line, lines,
 * id, text}, `id` undefined when the bullet does not open with `**[D-<area>-<n>]**`.
 */
function decisionRecords() {
  const lines = readFileSync(join(ROOT, 'docs', 'DECISIONS.md'), 'utf8').split('\n');
  const out = [];
  let current;
  let started = false;
  lines.forEach((line, i) => {
    if (line.startsWith('## ')) started = true;
    if (!started) return;
    if (line.startsWith('- ')) {
      current = { line: i + 1, lines: 1, id: /^- \*\*\[([^\]]*)\]\*\* \S/.exec(line)?.[1], text: line.slice(2) };
      out.push(current);
    } else if (current !== undefined && /^\s+\S/.test(line)) {
      current.lines++;
      current.text += ` ${line.trim()}`;
    } else current = undefined;
  });
  return out;
}

/** The longest docs/DECISIONS.md may be, in lines. */
const DECISIONS_LINES = 600;

/**
 * Decisions no test can pin, by id, each with why. A bullet that is not a decision (a pointer,
 * an aside) is prose between the records, not a record, rather than here.
 */
const NO_TEST_CAN_PIN = new Map([
  [
    'D-live-14',
    'how an event\'s bytes are made (once) and written (one system call per stream and delivery, before the write is answered) is a cost no client can see but in time: bench/live.mjs measures it (bench/README.md, "The live feed")',
  ],
  [
    'D-postgres-8',
    'a setting left as PostgreSQL has it: only a crash of the database\'s machine between a commit and its WAL flush could show the difference, which a test cannot cause on purpose',
  ],
]);

describe('Documents', () => {
  test('[D-docs-1] every link of the README, the CHANGELOG and docs/ resolves to a file of the repository', () => {
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
    assert.match(readFileSync(join(ROOT, 'README.md'), 'utf8'), /\]\(CHANGELOG\.md\)/, 'README.md links the CHANGELOG');
    // a document under docs/ names it at the root, as it names bench/README.md: a link up out of docs/ is one a clone's reader may not follow
    assert.match(readFileSync(join(ROOT, 'docs', 'DECISIONS.md'), 'utf8'), /`CHANGELOG\.md` \(at the root\)/, 'docs/DECISIONS.md names the CHANGELOG');
    for (const doc of documents()) if (doc.startsWith('docs/')) assert.doesNotMatch(readFileSync(join(ROOT, doc), 'utf8'), /\]\(\.\.\//, `${doc} links up out of docs/`);
  });

  test('[D-docs-3] a phrase quoted in a test\'s name is found as written in the README, the CHANGELOG or docs/', () => {
    const corpus = normalize(documents().map((d) => readFileSync(join(ROOT, d), 'utf8')).join('\n'));
    // the test files at the top of test/ (those of test/store/, test/pg/ and test/providers/ are not held to it yet)
    const quotes = testNameQuotes().filter((q) => /^[^/]+\.test\.mjs$/.test(q.file) && !QUOTE_THE_FEATURES_ISSUE.has(q.file));
    // "..." in a quote leaves words out; each piece must be there as written
    const missing = quotes.filter((q) => !corpus.includes(normalize(q.piece))).map((q) => `${q.file}: "${q.piece}"`);
    assert.ok(quotes.length > 20, `only ${quotes.length} quotes found: the scan is broken`);
    assert.deepEqual(missing, []);
  });

  test('[D-docs-2] one document per job under docs/, each in the README\'s "Where to go next"; no figures by the decisions', () => {
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
    const jobs = ['api.md', 'live-events.md', 'replies.md', 'openai.md', 'operating.md', 'engines.md', 'security.md', 'ARCHITECTURE.md', 'development.md'];
    const tasks = readdirSync(join(ROOT, 'docs')).filter((f) => f.endsWith('.md') && !['DECISIONS.md', 'TEAM-DECISIONS.md'].includes(f));
    assert.deepEqual(tasks.sort(), [...jobs].sort(), 'one file under docs/ per job, no more');
    const next = readme.slice(readme.indexOf('## Where to go next'));
    for (const f of jobs) assert.ok(next.includes(`](docs/${f})`), `the README's "Where to go next" points to docs/${f}`);
    assert.ok(next.includes('](bench/README.md)'), 'and to the measurements');
    const decisions = readFileSync(join(ROOT, 'docs', 'DECISIONS.md'), 'utf8');
    assert.ok(decisions.includes('What was measured to decide is in `bench/README.md`'), 'the decisions point to the measurements');
    assert.doesNotMatch(decisions, /×|\b\d[\d,.]*\s*(req|requests|writes|ops|queries|creates)\/s\b/, 'no measured figure beside the decisions');
  });

  test('[D-docs-4] every record of docs/DECISIONS.md has a well-formed id of its own and is one to three lines', () => {
    const records = decisionRecords();
    assert.ok(records.length > 150, `only ${records.length} records found: the scan is broken`);
    const where = (r) => `docs/DECISIONS.md:${r.line}`;
    assert.deepEqual(records.filter((r) => r.id === undefined || !ID.test(r.id)).map((r) => `${where(r)} ${r.text.slice(0, 40)}`), [], 'each opens with **[D-<area>-<n>]**');
    const seen = new Map();
    for (const r of records) {
      assert.ok(!seen.has(r.id), `${r.id} at ${where(r)} and at docs/DECISIONS.md:${seen.get(r.id)}`);
      seen.set(r.id, r.line);
    }
    assert.deepEqual(records.filter((r) => r.lines > 3).map((r) => `${where(r)} ${r.id}: ${r.lines} lines`), []);
  });

  test('[D-docs-4] every record is named by a test (or cannot be pinned, saying why), and every id named is a record', () => {
    const records = new Set(decisionRecords().map((r) => r.id));
    const named = new Map();
    for (const { file, line, name } of testNames()) {
      for (const id of idsIn(name ?? '')) named.set(id, [...(named.get(id) ?? []), `${file}:${line}`]);
    }
    assert.ok(named.size > 150, `only ${named.size} ids named: the scan is broken`);
    const unknown = [...named].filter(([id]) => !ID.test(id) || !records.has(id)).map(([id, at]) => `[${id}] in ${at.join(', ')}`);
    assert.deepEqual(unknown, [], 'an id a test names is a record of docs/DECISIONS.md');
    for (const [id, why] of NO_TEST_CAN_PIN) {
      assert.ok(records.has(id), `the exemption ${id} names no record of docs/DECISIONS.md`);
      assert.ok(!named.has(id), `${id} is pinned by ${named.get(id)}: drop its exemption`);
      assert.ok(why.length > 40, `${id}: say why no test can pin it`);
    }
    assert.deepEqual([...records].filter((id) => !named.has(id) && !NO_TEST_CAN_PIN.has(id)), [], 'records no test names');
  });

  test(`[D-docs-5] every test and suite name under test/ is one literal of at most ${LONGEST_NAME} characters`, () => {
    const names = testNames();
    assert.ok(names.length > 800, `only ${names.length} names found: the scan is broken`);
    assert.deepEqual(names.filter((n) => n.name === undefined).map((n) => `${n.file}:${n.line}`), [], 'a name the scan cannot read');
    const long = names.filter((n) => n.name !== undefined && n.name.length > LONGEST_NAME);
    assert.deepEqual(long.map((n) => `${n.file}:${n.line} (${n.name.length}) ${n.name.slice(0, 60)}...`), []);
  });

  test(`[D-docs-5] docs/DECISIONS.md is at most ${DECISIONS_LINES} lines`, () => {
    const lines = readFileSync(join(ROOT, 'docs', 'DECISIONS.md'), 'utf8').replace(/\n$/, '').split('\n').length;
    assert.ok(lines <= DECISIONS_LINES, `docs/DECISIONS.md has ${lines} lines: shorten records, their history goes to CHANGELOG.md`);
  });

  test('[D-docs-6] every path the layout map of docs/development.md names exists, and it names every entry of src/', () => {
    const doc = readFileSync(join(ROOT, 'docs', 'development.md'), 'utf8');
    const from = doc.indexOf('```', doc.indexOf('## Layout'));
    const map = doc.slice(from + 3, doc.indexOf('```', from + 3));
    const paths = [...map.matchAll(/(?<![\w./-])((?:src|test|docs|bench|examples|scripts)\/[\w./-]*\w\/?)/g)].map((m) => m[1]);
    assert.ok(paths.length > 30, `only ${paths.length} paths found in the map: the scan is broken`);
    assert.deepEqual(paths.filter((p) => !existsSync(join(ROOT, p)) || p.endsWith('/') !== statSync(join(ROOT, p)).isDirectory()), [], 'paths of the map that are not in the tree (a folder ends with /)');
    const named = new Set(paths.map((p) => p.replace(/\/$/, '')));
    const entries = readdirSync(join(ROOT, 'src')).map((e) => `src/${e}`);
    assert.deepEqual(entries.filter((e) => !named.has(e)), [], 'entries of src/ the map leaves out');
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
