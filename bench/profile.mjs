// Summarizes a V8 .cpuprofile (from `node --cpu-prof`, as `npm run bench -- --profile` runs
// the server) as the functions with the most self time, idle time left out.
// Usage: node bench/profile.mjs FILE.cpuprofile [TOP], or with --by-floor [BUNDLE] self time by src/ floor
import { readFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** [{name, where, ms, share}] by self time, highest first; share is of the non-idle time. */
export function topSelfTime(file, top = 15) {
  const prof = JSON.parse(readFileSync(file, 'utf8'));
  const byId = new Map(prof.nodes.map((n) => [n.id, n]));
  const selfMs = new Map(); // node id -> ms
  // sample i was taken timeDeltas[i] µs after the previous one; charge that interval to it
  for (let i = 0; i < prof.samples.length; i++) {
    const id = prof.samples[i];
    selfMs.set(id, (selfMs.get(id) ?? 0) + (prof.timeDeltas[i] ?? 0) / 1000);
  }
  const byFunction = new Map();
  let busy = 0;
  for (const [id, ms] of selfMs) {
    const { functionName, url, lineNumber } = byId.get(id).callFrame;
    if (functionName === '(idle)') continue;
    busy += ms;
    const name = functionName === '' ? '(anonymous)' : functionName;
    const where = url === '' ? '' : `${basename(url)}:${lineNumber + 1}`;
    const key = `${name} ${where}`;
    const e = byFunction.get(key) ?? { name, where, ms: 0 };
    e.ms += ms;
    byFunction.set(key, e);
  }
  const rows = [...byFunction.values()].sort((a, b) => b.ms - a.ms).slice(0, top);
  for (const r of rows) r.share = r.ms / busy;
  return { rows, busyMs: busy };
}

/**
 * Self time by floor of src/ (`src/store`, `src/services`...), the bundle's lines told apart by
 * the `// src/...` comment esbuild writes before each module's code; functions V8 inlined are
 * charged to their caller. [{floor, ms, share}], highest first, and the busy ms.
 */
export function selfTimeByFloor(file, bundle) {
  const prof = JSON.parse(readFileSync(file, 'utf8'));
  const starts = [];
  readFileSync(bundle, 'utf8')
    .split('\n')
    .forEach((line, i) => {
      const m = /^\/\/ (src\/[^/\s]+)/.exec(line);
      if (m !== null) starts.push([i, m[1].replace(/\.ts$/, '')]);
    });
  const floorAt = (line) => {
    let floor = '(the bundle outside src/)';
    for (const [i, f] of starts) {
      if (i > line) break;
      floor = f;
    }
    return floor;
  };
  const byId = new Map(prof.nodes.map((n) => [n.id, n.callFrame]));
  const byFloor = new Map();
  let busy = 0;
  for (let i = 0; i < prof.samples.length; i++) {
    const { functionName, url, lineNumber } = byId.get(prof.samples[i]);
    if (functionName === '(idle)') continue;
    const ms = (prof.timeDeltas[i] ?? 0) / 1000;
    busy += ms;
    const floor = url.endsWith(basename(bundle)) ? floorAt(lineNumber) : functionName.startsWith('(') ? functionName : 'Node.js and native code';
    byFloor.set(floor, (byFloor.get(floor) ?? 0) + ms);
  }
  return { rows: [...byFloor].map(([floor, ms]) => ({ floor, ms, share: ms / busy })).sort((a, b) => b.ms - a.ms), busyMs: busy };
}

/** The summary as a Markdown table. */
export function profileTable(file, top = 15) {
  const { rows, busyMs } = topSelfTime(file, top);
  const lines = [`Busy (non-idle) CPU time in the profile: ${(busyMs / 1000).toFixed(1)} s`, '', '| self % | self ms | function | where |', '|---:|---:|---|---|'];
  for (const r of rows) lines.push(`| ${(r.share * 100).toFixed(1)} | ${r.ms.toFixed(0)} | \`${r.name}\` | ${r.where} |`);
  return lines.join('\n');
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const [file, top, bundle] = process.argv.slice(2);
  if (file === undefined) {
    process.stderr.write('usage: node bench/profile.mjs FILE.cpuprofile [TOP]\n       node bench/profile.mjs FILE.cpuprofile --by-floor [dist/server.js of the build profiled]\n');
    process.exit(2);
  }
  if (top === '--by-floor') {
    const { rows, busyMs } = selfTimeByFloor(file, bundle ?? join(dirname(fileURLToPath(import.meta.url)), '..', 'dist', 'server.js'));
    process.stdout.write(`busy ${busyMs.toFixed(0)} ms\n${rows.map((r) => `${(r.share * 100).toFixed(1).padStart(5)}%  ${r.floor}`).join('\n')}\n`);
  } else process.stdout.write(`${profileTable(file, Number(top ?? 15))}\n`);
}
