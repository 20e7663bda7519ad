// The benchmark suite (`npm run bench`): starts the built dist/server.js on fresh temporary
// data directories, drives it with bench/loadgen.mjs, and prints a Markdown report. Every
// load scenario also drives bench/baseline.mjs (plain node:http answering fixed bytes) in the
// same run, interleaved round by round, so results are ratios that survive a noisy, shared,
// 2-core machine. Progress goes to stderr, the report to stdout (and bench/results/latest.md
// with --out or BENCH_OUT=1).
import { mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT, SERVER } from './common.mjs';
import { stopEngines } from './engines.mjs';
import { live, makeRunDir, profileDir, report, runDir } from './measure.mjs';
import { argv, fail, flag, has, HELP, opts, progress, wallStart } from './options.mjs';
import { profileTable } from './profile.mjs';
import { render } from './report.mjs';
import { groups, scenarios } from './scenarios.mjs';

if (has('help') || has('h')) {
  process.stdout.write(`${HELP.replace('%SCENARIOS%', scenarios.map((s) => s.name).join(' ')).replace('%OPTIN%', scenarios.filter((s) => s.optIn).map((s) => s.name).join(' ') || 'none now').replace('%GROUPS%', Object.entries(groups).map(([g, l]) => `${g} (${l.join(' ')})`).join(', '))}\n`);
  process.exit(0);
}
const named = [...argv.filter((a) => !a.startsWith('--')), ...(flag('only')?.split(',').filter((s) => s !== '') ?? [])];
const wanted = new Set();
for (const n of named) {
  if (groups[n] !== undefined) for (const s of groups[n]) wanted.add(s);
  else if (scenarios.some((s) => s.name === n)) wanted.add(n);
  else fail(`unknown scenario "${n}"; scenarios: ${scenarios.map((s) => s.name).join(', ')}; groups: ${Object.keys(groups).join(', ')}`);
}
const selected = scenarios.filter((s) => (wanted.size === 0 ? s.optIn !== true : wanted.has(s.name)));

// ---- main ----

async function stopAll() {
  await Promise.all([...live].map((p) => p.stop().catch(() => undefined)));
}

process.on('SIGINT', () => {
  progress('interrupted: stopping the processes this run started');
  stopAll().finally(() => {
    if (!opts.keep && runDir !== undefined) rmSync(runDir, { recursive: true, force: true });
    process.exit(130);
  });
});

try {
  statSync(SERVER);
} catch {
  fail('dist/server.js is missing: run `node build.mjs` first (npm run bench does)');
}
if (opts.profile) {
  mkdirSync(profileDir, { recursive: true });
  for (const f of readdirSync(profileDir)) if (f.endsWith('.cpuprofile')) rmSync(join(profileDir, f));
}
makeRunDir();
progress(`running ${selected.map((s) => s.name).join(', ')} in ${runDir}`);
let failed = false;
try {
  for (const s of selected) {
    try {
      await s.run();
    } catch (e) {
      failed = true;
      report.notes.push(`${s.name} failed: ${e.message}`);
      progress(`${s.name} FAILED: ${e.stack}`);
    }
  }
} finally {
  await stopAll();
  await stopEngines();
  if (opts.keep) progress(`kept ${runDir}`);
  else rmSync(runDir, { recursive: true, force: true });
}
if (opts.profile) {
  for (const f of readdirSync(profileDir).filter((x) => x.endsWith('.cpuprofile')).sort()) {
    report.profiles.push({ name: f, table: profileTable(join(profileDir, f)) });
  }
}
const text = render((performance.now() - wallStart) / 1000);
process.stdout.write(`${text}\n`);
if (opts.out) {
  mkdirSync(join(ROOT, 'bench', 'results'), { recursive: true });
  writeFileSync(join(ROOT, 'bench', 'results', 'latest.md'), `${text}\n`);
  progress('wrote bench/results/latest.md');
}
process.exitCode = failed ? 1 : 0;
