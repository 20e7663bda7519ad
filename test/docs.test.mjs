// The repository carries its own documents: the contract (docs/spec/api-v1.md), the team's
// decisions (docs/TEAM-DECISIONS.md) and the project's (docs/DECISIONS.md). A user who clones
// it can follow every link of the README and the docs, and what a test name quotes is there.
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative, resolve, sep } from 'node:path';
import { describe, test } from 'node:test';
import { ROOT } from './helpers.mjs';

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
  'scopes.test.mjs',
  'providers-redaction.test.mjs',
  'openapi.test.mjs',
]);

const normalize = (s) => s.replace(/`|\*\*/g, '').replace(/\s+/g, ' ').trim();

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
    const missing = [];
    let checked = 0;
    for (const file of readdirSync(join(ROOT, 'test')).filter((f) => f.endsWith('.test.mjs') && !QUOTE_THE_FEATURES_ISSUE.has(f))) {
      const src = readFileSync(join(ROOT, 'test', file), 'utf8');
      for (const m of src.matchAll(/\b(?:test|describe)\(\s*(['`])((?:\\.|(?!\1).)*)\1/g)) {
        const name = m[2].replace(/\\(['`\\])/g, '$1');
        for (const q of name.matchAll(/"((?:[^"\\]|\\.)*)"/g)) {
          // "..." in a quote leaves words out; each piece must be there as written
          for (const piece of q[1].replace(/\\"/g, '"').split(/\s*\.\.\.\s*/)) {
            if (piece.split(' ').length < 3) continue;
            checked++;
            if (!corpus.includes(normalize(piece))) missing.push(`${file}: "${piece}"`);
          }
        }
      }
    }
    assert.ok(checked > 20, `only ${checked} quotes found: the scan is broken`);
    assert.deepEqual(missing, []);
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
