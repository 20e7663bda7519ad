// `npm test`'s runner: the whole suite once per engine, sqlite then postgres, on the Node.js 24
// LTS of the `node` dev dependency (the oldest supported Node, 22.13, is for users; the CI box's
// own `node` may be older). postgres runs against a private cluster started here (initdb in a
// temporary directory) and stopped after. No engine is skipped silently: a missing runtime fails
// the run, and missing PostgreSQL is one loud line (a failure in CI, where REQUIRE_POSTGRES=1).
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { ROOT } from './helpers.mjs';
import { postgresMissing, startCluster } from './pg/cluster.mjs';

const node24 = join(ROOT, 'node_modules', 'node', 'bin', 'node');

const files = (dir) =>
  readdirSync(join(ROOT, dir))
    .filter((f) => f.endsWith('.test.mjs'))
    .sort()
    .map((f) => join(dir, f));
const suite = [...files('test'), ...files('test/store')];

const passes = [
  // the PostgreSQL client's own tests do not depend on the engine: they run once
  // and the provider clients' (against the local provider in test/provider/)
  { store: 'sqlite', node: node24, files: [...suite, ...files('test/pg'), ...files('test/providers')] },
  { store: 'postgres', node: node24, files: suite, cluster: true },
];

const only = process.env.CSA_TEST_ONLY?.split(',');
// `npm test -- test/search.test.mjs`: the files named, on every engine whose pass holds them;
// any other argument (`--test-name-pattern=...`) goes to node --test as it is
const isFile = (a) => !a.startsWith('-') && a.endsWith('.test.mjs');
const named = process.argv.slice(2).filter(isFile);
const flags = process.argv.slice(2).filter((a) => !isFile(a));
for (const f of named) {
  if (!passes.some((p) => p.files.some((x) => resolve(ROOT, x) === resolve(f)))) {
    console.error(`✖ ${f}: not a test file of the suite (test/*.test.mjs, test/store/*.test.mjs, test/pg/*.test.mjs, test/providers/*.test.mjs)`);
    process.exit(1);
  }
}
for (const pass of passes) if (named.length > 0) pass.files = pass.files.filter((x) => named.some((f) => resolve(ROOT, x) === resolve(f)));
let failed = false;
let ran = 0;
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
  const r = spawnSync(pass.node, ['--test', '--test-reporter=spec', '--test-concurrency=2', ...flags, ...pass.files], {
    cwd: ROOT,
    stdio: 'inherit',
    env: { ...process.env, CSA_TEST_STORE: pass.store, ...(cluster !== undefined ? { CSA_TEST_DATABASE_URL: cluster.url('postgres') } : {}) },
  });
  await cluster?.destroy();
  if (r.status !== 0) {
    console.error(`\n✖ the suite failed on STORE=${pass.store} (Node.js ${version})`);
    failed = true;
  }
}
if (named.length > 0 && ran === 0 && !failed) {
  console.error('✖ nothing ran: no engine of CSA_TEST_ONLY runs the files named');
  failed = true;
}
process.exit(failed ? 1 : 0);
