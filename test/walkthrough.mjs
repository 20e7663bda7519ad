// Runs the documents' walkthroughs as a reader would: every ```console block of a document, in
// order, its `$ ` commands typed into one bash session (so $TOKEN and $H carry over) in a fresh
// folder that has `dist/` and what `npm start` makes (the example providers, a generated
// secret), against a real server of its own; each command's output must be what the document
// prints under it. The documents are the README and every Markdown file under docs/ that has a
// console block (walkthroughDocuments), each walked on its own: a reader may open any of them
// first.
//
// What differs from run to run is matched, not compared: record ids, cursors and ETags are
// bound the first time the document shows them (the document's value stands for this run's
// value from then on, in later outputs and in later commands), timestamps match any timestamp,
// and `...` in a printed output stands for any text within the line. A document's outputs are
// one run's all the same: a record's createdAt is the same wherever a document shows it
// (readme-walkthrough.test.mjs checks it), and --write keeps it so, writing each instant of this
// run as the document first showed it. `localhost:3000` is this
// run's server. A comment `<!-- walkthrough: restart NAME=value ... -->` right before a block
// restarts the server on the same data with those settings, as the document tells the reader to.
// A comment `<!-- walkthrough: file NAME -->` right before a code block (```js, say) saves that
// block as NAME in the reader's folder before the next command, as the document tells the reader
// to save it (its `localhost:3000` this run's server, as in commands).
// A document holding `<!-- walkthrough: local provider -->` is walked with the tests' local
// provider (test/provider/server.mjs) in place of the example's Ollama at 127.0.0.1:11434: it
// answers every model the way a real one streams, with the question's own words.
//
//   node_modules/.bin/node test/walkthrough.mjs --write [FILE...]
//     rewrites the outputs that no longer match with this run's (ids and instants mapped back
//     to the document's), and the timestamps of those that match but show an instant otherwise
//     than the document did before, for review; every document, or those named
//   node_modules/.bin/node test/walkthrough.mjs --write --fresh FILE...
//     the same, every timestamp this run's: the document's outputs made one run's again
import { spawn, spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ROOT, STORE, removeDir, startServer, storeEnv, tempDir } from './helpers.mjs';
import { startProvider } from './provider/server.mjs';

/**
 * The documents that hold console blocks, as paths relative to the root: README.md first, then
 * the Markdown files under docs/ in name order.
 */
export function walkthroughDocuments() {
  const out = ['README.md'];
  const walk = (dir) => {
    for (const name of readdirSync(join(ROOT, dir)).sort()) {
      const rel = `${dir}/${name}`;
      if (statSync(join(ROOT, rel)).isDirectory()) walk(rel);
      else if (name.endsWith('.md')) out.push(rel);
    }
  };
  walk('docs');
  return out.filter((doc) => readFileSync(join(ROOT, doc), 'utf8').split('\n').includes('```console'));
}

/**
 * The steps of every console block: {line, command, expected: {from, to, text}, restart?,
 * files?}; `files` are the code blocks to save before the step runs, [{name, content}].
 */
export function parseWalkthrough(text, name = 'README.md') {
  const lines = text.split('\n');
  const steps = [];
  let files = [];
  for (let i = 0; i < lines.length; i++) {
    const save = /^<!-- walkthrough: file (\S+) -->$/.exec(lines[i - 1] ?? '');
    if (save && lines[i].startsWith('```')) {
      let j = i + 1;
      while (j < lines.length && lines[j] !== '```') j++;
      files.push({ name: save[1], content: `${lines.slice(i + 1, j).join('\n')}\n` });
      i = j;
      continue;
    }
    if (lines[i] !== '```console') continue;
    const directive = /^<!-- walkthrough: restart(.*)-->$/.exec(lines[i - 1] ?? '');
    let restart = directive ? Object.fromEntries(directive[1].trim().split(/\s+/).filter((w) => w !== '').map((w) => w.split('='))) : undefined;
    let j = i + 1;
    while (j < lines.length && lines[j] !== '```') {
      if (!lines[j].startsWith('$ ')) throw new Error(`${name} line ${j + 1}: a console block must start each command with "$ "`);
      const line = j + 1;
      const command = [lines[j].slice(2)];
      while (command.at(-1).endsWith('\\')) command.push(lines[++j]);
      j++;
      const from = j;
      while (j < lines.length && lines[j] !== '```' && !lines[j].startsWith('$ ')) j++;
      let to = j;
      while (to > from && lines[to - 1] === '') to--;
      steps.push({ line, command: command.join('\n'), expected: { from, to, text: lines.slice(from, to).join('\n') }, restart, ...(files.length > 0 ? { files } : {}) });
      restart = undefined;
      files = [];
    }
    i = j;
  }
  if (files.length > 0) throw new Error(`${name}: ${files.map((f) => f.name).join(', ')} saved by no command after it`);
  return steps;
}

// what varies between runs; the bound kinds stand for one value each
const VARIABLE = /(\.\.\.)|(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)|(?<![0-9a-f])([0-9a-f]{24})(?![0-9a-f])|([A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{8,})|((?<=etag: ")[A-Za-z0-9_+/=-]+(?="))/g;
const KIND_PATTERN = { 3: '[0-9a-f]{24}', 4: '[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+', 5: '[A-Za-z0-9_+/=-]+' };
const escape = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** The bound values (by kind) of a text, in order of appearance, each once. */
function variablesOf(text) {
  const out = [];
  for (const m of text.matchAll(VARIABLE)) {
    for (const kind of [3, 4, 5]) if (m[kind] !== undefined && !out.some((v) => v.value === m[kind])) out.push({ kind, value: m[kind] });
  }
  return out;
}

/** The timestamps of a text, in order. */
const timestampsOf = (text) => [...text.matchAll(VARIABLE)].filter((m) => m[2] !== undefined).map((m) => m[2]);

/**
 * Matches an actual output against the document's text. Returns, on success, the new bindings
 * (document's value -> actual value) and the actual timestamps where the document shows its
 * own, in order; undefined when it does not match.
 */
export function matchOutput(expected, actual, bindings) {
  let source = '';
  let at = 0;
  const groups = [];
  let times = 0;
  for (const m of expected.matchAll(VARIABLE)) {
    source += escape(expected.slice(at, m.index));
    at = m.index + m[0].length;
    if (m[1] !== undefined) source += '[^\\n]*?';
    else if (m[2] !== undefined) source += `(?<t${times++}>\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z)`;
    else {
      const kind = [3, 4, 5].find((k) => m[k] !== undefined);
      const value = m[kind];
      if (bindings.has(value)) source += escape(bindings.get(value));
      else {
        const seen = groups.indexOf(value);
        if (seen !== -1) source += `\\k<g${seen}>`;
        else {
          source += `(?<g${groups.length}>${KIND_PATTERN[kind]})`;
          groups.push(value);
        }
      }
    }
  }
  source += escape(expected.slice(at));
  const m = new RegExp(`^${source}$`).exec(actual);
  if (m === null) return undefined;
  const found = new Map(groups.map((value, i) => [value, m.groups[`g${i}`]]));
  const taken = new Set(bindings.values());
  for (const v of found.values()) if (taken.has(v)) return undefined; // two of the document's values for one real one
  return { found, times: Array.from({ length: times }, (_, i) => m.groups[`t${i}`]) };
}

/**
 * The records a document's outputs show more than once with different `createdAt`s (which
 * never changes): [{id, line, was, now}]. Outputs of one run never have one.
 */
export function driftedTimes(steps) {
  const seen = new Map();
  const out = [];
  for (const s of steps) {
    for (const m of s.expected.text.matchAll(/"_id":"([0-9a-f]{24})"(?:(?!"_id")[^\n])*?"createdAt":"([^"]+)"/g)) {
      const was = seen.get(m[1]);
      if (was === undefined) seen.set(m[1], { at: m[2], line: s.line });
      else if (was.at !== m[2]) out.push({ id: m[1], line: s.line, was: `${was.at} (line ${was.line})`, now: m[2] });
    }
  }
  return out;
}

/** One bash session: `run(command)` types it and resolves its output (stdout and stderr, as a terminal shows them). */
function shell(cwd, env) {
  const bash = spawn('bash', ['--noprofile', '--norc'], { cwd, env, stdio: ['pipe', 'pipe', 'pipe'] });
  let buf = '';
  let waiting;
  bash.stdout.setEncoding('utf8');
  bash.stdout.on('data', (d) => {
    buf += d;
    const end = buf.indexOf('\n\x1fend\x1f\n');
    if (end !== -1 && waiting) {
      const out = buf.slice(0, end);
      buf = buf.slice(end + 7);
      const w = waiting;
      waiting = undefined;
      w(out);
    }
  });
  bash.stdin.write('exec 2>&1\n');
  return {
    run(command, timeoutMs = 60_000) {
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms to: ${command}`)), timeoutMs);
        waiting = (out) => {
          clearTimeout(timer);
          resolve(out);
        };
        bash.stdin.write(`${command}\nprintf '\\n\\037end\\037\\n'\n`);
      });
    },
    close() {
      bash.stdin.end();
      return new Promise((resolve) => (bash.exitCode !== null ? resolve() : bash.on('exit', resolve)));
    },
  };
}

/**
 * Runs the walkthrough of `text` (a document). Returns {steps, failures: [{step, actual}], bindings}.
 * With `write`, every failed step also gets `replacement`: this run's output in the document's
 * ids and instants; and `refreshed` lists the steps that matched but show an instant of this run
 * otherwise than the document showed it before, each with its `replacement`: its text with the
 * instants as first shown.
 */
export async function runWalkthrough(text, { write = false, fresh = false, name = 'README.md' } = {}) {
  const steps = parseWalkthrough(text, name);
  const dir = tempDir('csa-walkthrough-');
  symlinkSync(join(ROOT, 'dist'), join(dir, 'dist'));
  // what `npm start` does before it serves: the example providers into ./data
  const seeded = spawnSync(process.execPath, [join(ROOT, 'scripts', 'example-providers.mjs')], { cwd: dir, env: { PATH: process.env.PATH }, encoding: 'utf8' });
  if (seeded.status !== 0) throw new Error(`example-providers.mjs: ${seeded.stderr}`);
  const provider = text.includes('<!-- walkthrough: local provider -->') ? await startProvider({ log: false }) : undefined;
  if (provider !== undefined) {
    const file = join(dir, 'data', 'providers.json');
    writeFileSync(file, readFileSync(file, 'utf8').replace('http://127.0.0.1:11434', provider.url));
  }
  const startOpts = (env) => ({ dataDir: join(dir, 'data'), cwd: dir, providers: null, env: { AUTH_SECRET: undefined, DATA_DIR: undefined, ...env } });
  let server = await startServer(startOpts({}));
  // the reader's shell has the server's engine in its environment, as the documents' commands need (export reads the store)
  const sh = shell(dir, { PATH: `${dirname(process.execPath)}:${process.env.PATH}`, HOME: dir, LANG: 'C.UTF-8', ...storeEnv(join(dir, 'data')) });
  const bindings = new Map();
  const failures = [];
  const refreshed = [];
  // each instant of this run, as the document first showed it (fresh: as it is)
  const instants = new Map();
  const shownAs = (real, shown = real) => {
    if (!instants.has(real)) instants.set(real, fresh ? real : shown);
    return instants.get(real);
  };
  try {
    for (const step of steps) {
      if (step.restart !== undefined) {
        await server.stop();
        server = await startServer(startOpts(step.restart));
      }
      for (const f of step.files ?? []) writeFileSync(join(dir, f.name), f.content.replace(/localhost:3000/g, `localhost:${server.port}`));
      let command = step.command.replace(/localhost:3000/g, `localhost:${server.port}`);
      for (const [shown, real] of [...bindings].sort((a, b) => b[0].length - a[0].length)) command = command.split(shown).join(real);
      let actual = (await sh.run(command)).replace(/\r/g, '');
      // a document's block cannot show trailing blank lines (an event stream's output ends with one)
      actual = actual.replace(/\n+$/, '');
      actual = actual.split(`localhost:${server.port}`).join('localhost:3000');
      // the reader's providers.json names Ollama's address, not the local provider's
      if (provider !== undefined) actual = actual.split(provider.url).join('http://127.0.0.1:11434');
      const matched = matchOutput(step.expected.text, actual, bindings);
      if (matched !== undefined) {
        for (const [k, v] of matched.found) bindings.set(k, v);
        const shown = timestampsOf(step.expected.text);
        const consistent = matched.times.map((real, i) => shownAs(real, shown[i]));
        if (write && consistent.some((t, i) => t !== shown[i])) {
          let i = 0;
          refreshed.push({ step, replacement: step.expected.text.replace(VARIABLE, (all, _dots, time) => (time !== undefined ? consistent[i++] : all)) });
        }
        continue;
      }
      const failure = { step, actual };
      failures.push(failure);
      if (!write) continue;
      // bind what the document shows to what came, in order, so later steps can go on
      const mine = variablesOf(step.expected.text).filter((v) => !bindings.has(v.value));
      const real = variablesOf(actual).filter((v) => ![...bindings.values()].includes(v.value));
      for (const kind of [3, 4, 5]) {
        const a = mine.filter((v) => v.kind === kind);
        const b = real.filter((v) => v.kind === kind);
        b.forEach((v, i) => bindings.set(a[i]?.value ?? v.value, v.value));
      }
      let replacement = actual;
      for (const [shown, value] of bindings) replacement = replacement.split(value).join(shown);
      replacement = replacement.replace(/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z/g, (real) => shownAs(real));
      failure.replacement = replacement;
    }
  } finally {
    await sh.close();
    await server.stop();
    await provider?.close();
    removeDir(dir);
  }
  return { steps, failures, refreshed, bindings };
}

/** The document with the outputs of `failures` replaced. */
export function rewrite(text, failures) {
  const lines = text.split('\n');
  for (const f of [...failures].sort((a, b) => b.step.expected.from - a.step.expected.from)) {
    const { from, to } = f.step.expected;
    lines.splice(from, to - from, ...(f.replacement === '' ? [] : f.replacement.split('\n')));
  }
  return lines.join('\n');
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href && process.argv[2] === '--write') {
  const fresh = process.argv[3] === '--fresh';
  const named = process.argv.slice(fresh ? 4 : 3).map((f) => relative(ROOT, resolve(f)));
  for (const doc of named.length > 0 ? named : walkthroughDocuments()) {
    const file = join(ROOT, doc);
    const text = readFileSync(file, 'utf8');
    const { steps, failures, refreshed } = await runWalkthrough(text, { write: true, fresh, name: doc });
    writeFileSync(file, rewrite(text, [...failures, ...refreshed]));
    console.log(`${doc}: ${steps.length} steps, ${failures.length} outputs rewritten, the timestamps of ${refreshed.length} more${failures.length > 0 ? `: review them (git diff ${doc})` : ''}`);
    for (const f of failures) console.log(`  ${doc} line ${f.step.line}: ${f.step.command.split('\n')[0]}`);
  }
}
