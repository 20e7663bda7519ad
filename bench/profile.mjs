// Summarizes a V8 .cpuprofile (from `node --cpu-prof`, as `npm run bench -- --profile` runs
// the server) as the functions with the most self time, idle time left out.
// Usage: node bench/profile.mjs FILE.cpuprofile [TOP]
import { readFileSync } from 'node:fs';
import { basename } from 'node:path';

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

/** The summary as a Markdown table. */
export function profileTable(file, top = 15) {
  const { rows, busyMs } = topSelfTime(file, top);
  const lines = [`Busy (non-idle) CPU time in the profile: ${(busyMs / 1000).toFixed(1)} s`, '', '| self % | self ms | function | where |', '|---:|---:|---|---|'];
  for (const r of rows) lines.push(`| ${(r.share * 100).toFixed(1)} | ${r.ms.toFixed(0)} | \`${r.name}\` | ${r.where} |`);
  return lines.join('\n');
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const [file, top] = process.argv.slice(2);
  if (file === undefined) {
    process.stderr.write('usage: node bench/profile.mjs FILE.cpuprofile [TOP]\n');
    process.exit(2);
  }
  process.stdout.write(`${profileTable(file, Number(top ?? 15))}\n`);
}
