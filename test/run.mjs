// `npm test`'s runner: the engine suites once per engine, sqlite then postgres, on the Node.js 24
// LTS of the `node` dev dependency. Where a file lives says where it runs: test/*.test.mjs and
// test/store/ on every engine; test/sqlite/ and test/postgres/ on their engine only; test/once/
// (auth, CORS, OpenAPI, the docs, the router, the CLI's limits: nothing an engine changes),
// test/pg/ (the PostgreSQL client against its own cluster) and test/providers/ (the model clients)
// once, in the sqlite pass. It ends with one summary line per engine and one overall. (The oldest
// supported Node, 22.13, is for users; the CI box's own `node` may be older.) postgres runs against a private cluster started here (initdb in a
// temporary directory) and stopped after. No engine is skipped silently: a missing runtime fails
// the run, and missing PostgreSQL is one loud line (a failure in CI, where REQUIRE_POSTGRES=1).
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { ROOT } from './helpers.mjs';
import { postgresMissing, startCluster } from './pg/cluster.mjs';

const node24 = join(ROOT, 'node_modules', 'node', 'bin', 'node');
const COUNTER = join(ROOT, 'test', 'counter.mjs');

const files = (dir) =>
  readdirSync(join(ROOT, dir))
    .filter((f) => f.endsWith('.test.mjs'))
    .sort()
    .map((f) => join(dir, f));
const suite = [...files('test'), ...files('test/store')];
const once = [...files('test/once'), ...files('test/pg'), ...files('test/providers')];

const passes = [
  { store: 'sqlite', node: node24, files: [...suite, ...files('test/sqlite'), ...once] },
  { store: 'postgres', node: node24, files: [...suite, ...files('test/postgres')], cluster: true },
];

const only = process.env.CSA_TEST_ONLY?.split(',');
// `npm test -- test/search.test.mjs`: the files named, on every engine whose pass holds them;
// any other argument (`--test-name-pattern=...`) goes to node --test as it is
const isFile = (a) => !a.startsWith('-') && a.endsWith('.test.mjs');
const named = process.argv.slice(2).filter(isFile);
const flags = process.argv.slice(2).filter((a) => !isFile(a));
for (const f of named) {
  if (!passes.some((p) => p.files.some((x) => resolve(ROOT, x) === resolve(f)))) {
    console.error(`✖ ${f}: not a test file of the suite (test/*.test.mjs, test/{store,once,sqlite,postgres,pg,providers}/*.test.mjs)`);
    process.exit(1);
  }
}
for (const pass of passes) if (named.length > 0) pass.files = pass.files.filter((x) => named.some((f) => resolve(ROOT, x) === resolve(f)));
let failed = false;
let ran = 0;
const summaries = [];

/** One pass's line from the counting reporter's file (absent when the run died before it wrote). */
function summary(name, file, seconds, ok) {
  let c = { pass: 0, fail: 0, skip: 0, files: 0 };
  try {
    c = JSON.parse(readFileSync(file, 'utf8'));
  } catch {
    ok = false;
  }
  rmSync(dirname(file), { recursive: true, force: true });
  // a name over the limit fails the pass, each counted as a failed test (test/counter.mjs)
  for (const n of c.long ?? []) console.error(`✖ ${name}: a test's name is over 120 characters (docs/development.md, "Tests"): ${n}`);
  c.fail += c.long?.length ?? 0;
  return { ...c, seconds, text: `${ok && c.fail === 0 ? '✔' : '✖'} ${name}: ${c.pass} passed, ${c.fail} failed, ${c.skip} skipped, in ${c.files} files, ${Math.round(seconds)} s` };
}
for (const pass of passes) {
  if ((only !== undefined && !only.includes(pass.store)) || pass.files.length === 0) continue;
  if (!existsSync(pass.node)) {
    console.error(`\n✖ STORE=${pass.store}: no Node.js at ${pass.node}; run npm ci (the node dev dependency brings Node 24)`);
    failed = true;
    continue;
  }
  const version = spawnSync(pass.node, ['--version'], { encoding: 'utf8' }).stdout.trim();
  let cluster;
  if (pass.cluster) {
    let missing;
    try {
      missing = postgresMissing();
    } catch (e) {
      console.error(`\n✖ STORE=${pass.store}: ${e.message}`);
      failed = true;
      continue;
    }
    if (missing !== undefined) {
      console.error(`\n*** STORE=postgres: the whole suite SKIPPED: ${missing} ***\n`);
      continue;
    }
    // many servers at once, each with a pool of its own: room for their connections
    cluster = await startCluster({ settings: { max_connections: 300 } });
  }
  console.log(`\n▶ the suite on STORE=${pass.store}, Node.js ${version}\n`);
  ran++;
  const counts = join(mkdtempSync(join(tmpdir(), 'csa-counts-')), 'counts.json');
  const started = performance.now();
  const r = spawnSync(pass.node, ['--test', '--test-reporter=spec', '--test-reporter-destination=stdout', `--test-reporter=${COUNTER}`, `--test-reporter-destination=${counts}`, '--test-concurrency=2', ...flags, ...pass.files], {
    cwd: ROOT,
    stdio: 'inherit',
    env: { ...process.env, CSA_TEST_STORE: pass.store, ...(cluster !== undefined ? { CSA_TEST_DATABASE_URL: cluster.url('postgres') } : {}) },
  });
  await cluster?.destroy();
  const line = summary(`STORE=${pass.store}`, counts, (performance.now() - started) / 1000, r.status === 0);
  summaries.push(line);
  if (r.status !== 0 || line.fail > 0) {
    console.error(`\n✖ the suite failed on STORE=${pass.store} (Node.js ${version})`);
    failed = true;
  }
}
if (named.length > 0 && ran === 0 && !failed) {
  console.error('✖ nothing ran: no engine of CSA_TEST_ONLY runs the files named');
  failed = true;
}
if (summaries.length > 0) {
  console.log('');
  for (const line of summaries) console.log(line.text);
  const all = summaries.reduce((a, b) => ({ pass: a.pass + b.pass, fail: a.fail + b.fail, skip: a.skip + b.skip, files: a.files + b.files, seconds: a.seconds + b.seconds }), { pass: 0, fail: 0, skip: 0, files: 0, seconds: 0 });
  console.log(`${failed ? '✖' : '✔'} overall: ${all.pass} passed, ${all.fail} failed, ${all.skip} skipped, in ${all.files} files, ${Math.round(all.seconds)} s`);
}
process.exit(failed ? 1 : 0);
