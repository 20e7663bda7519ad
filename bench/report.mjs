// The report: every measurement of the run as Markdown tables, and the targets they are held to.
import { availableParallelism, cpus, loadavg, totalmem } from 'node:os';
import { NODE_OLDEST, nodeVersion } from './common.mjs';
import { renderConversations } from './conversations.mjs';
import { engineTargets, renderEngines } from './engines.mjs';
import { peerTargets, renderPeers } from './peers.mjs';
import { report, sections } from './measure.mjs';
import { loadAtStart, opts } from './options.mjs';
import { READ_CONNS } from './scenarios.mjs';

const ms = (v) => (Number.isNaN(v) ? '–' : v < 10 ? v.toFixed(2) : v.toFixed(1));
const int = (v) => (Number.isNaN(v) ? '–' : Math.round(v).toLocaleString('en-US'));
const pct = (v) => (Number.isNaN(v) ? '–' : `${Math.round(v * 100)}`);

function errorText(r) {
  if (r.errors === 0) return '0';
  const parts = [...r.statuses].map(([s, n]) => `${n}×${s}`);
  if (r.socketErrors > 0) parts.push(`${r.socketErrors}×socket`);
  return `${r.errors} (${parts.join(', ')})`;
}

function targets() {
  const row = (scenario, label) => report.load.find((r) => r.scenario === scenario && (label === undefined || r.label === label));
  const out = [];
  const add = (what, measured, met) => out.push(`| ${what} | ${measured} | ${met === undefined ? '–' : met ? 'yes' : '**no**'} |`);
  const get = row('get');
  if (get) add('GET by id ≥ 0.85 of baseline', get.ratio.toFixed(2), get.ratio >= 0.85);
  const durable = row('create-64', 'durable');
  const off = row('create-64', 'FSYNC=off');
  if (durable) add('durable create, 64 clients ≥ 0.6 of baseline', durable.ratio.toFixed(2), durable.ratio >= 0.6);
  if (durable && off) add('create 64: durable within 20% of FSYNC=off', `${(durable.rps / off.rps).toFixed(2)} of FSYNC=off`, durable.rps >= 0.8 * off.rps);
  const floor = report.load.find((r) => r.scenario === 'create-64' && r.label.startsWith('floor'));
  if (durable && floor) {
    add('(for reference) the floor of a create, 64 clients: bare node:http reading and answering the body', `${floor.ratio.toFixed(2)} of baseline; durable create is ${(durable.rps / floor.rps).toFixed(2)} of it`);
  }
  for (const name of ['list-user', 'list-project']) {
    const l = row(name);
    if (l) add(`${name}: list of 50 ≥ 0.4 of baseline`, l.ratio.toFixed(2), l.ratio >= 0.4);
  }
  const scaleRows = report.load.filter((r) => r.scenario === 'list-scale');
  if (scaleRows.length === 2) {
    const [a, b] = scaleRows;
    const flat = b.rps / a.rps;
    add(`list of 50 flat from ${a.label} to ${b.label} (req/s within 20%)`, `${flat.toFixed(2)}× req/s, p50 ${ms(a.p50)} → ${ms(b.p50)} ms, p99 ${ms(a.p99)} → ${ms(b.p99)} ms`, flat >= 0.8);
  }
  const big = report.startup.find((s) => s.turns > 0);
  if (big) add(`(for information) the first start on a journal of ${big.label}: its migration into sqlite`, `${(big.startMs / 1000).toFixed(1)} s to /healthz (migration ${(big.migrateMs / 1000).toFixed(1)} s), peak RSS ${(big.peakMiB / 1024).toFixed(2)} GiB`);
  const cold = report.cold[0];
  if (cold) add('cold start < 150 ms', `${ms(cold.median)} ms (median of ${cold.runs})`, cold.median < 150);
  const at50 = report.load.filter((r) => r.conns === READ_CONNS && r.scenario !== 'calibrate');
  if (at50.length > 0) {
    const worst = at50.reduce((a, b) => (b.p99 > a.p99 ? b : a));
    add('p99 < 10 ms in every scenario at 50 connections', `worst ${ms(worst.p99)} ms (${worst.scenario}${worst.label === 'server' ? '' : `, ${worst.label}`})`, worst.p99 < 10);
  }
  const over = report.load.filter((r) => r.conns !== READ_CONNS && r.p99 >= 10);
  if (over.length > 0) add('(for information) p99 ≥ 10 ms at other client counts', over.map((r) => `${r.scenario}${r.label === 'server' ? '' : ` ${r.label}`} ${ms(r.p99)} ms`).join('; '));
  return out;
}

export function render(wallSeconds) {
  const cpu = cpus()[0]?.model ?? 'unknown CPU';
  const L = [];
  L.push('# chat-session-api benchmark', '');
  L.push(`- ${new Date().toISOString()}; ${availableParallelism()} cores (${cpu}), ${(totalmem() / 2 ** 30).toFixed(0)} GiB RAM; servers and baseline on Node ${nodeVersion(NODE_OLDEST)} unless a row names another, load generator on Node ${process.version}; load generator and server share the cores`);
  L.push(`- ${opts.rounds} round(s) × ${opts.durationMs / 1000} s measured after ${opts.warmupMs / 1000} s warm-up, baseline and server interleaved; server LOG_LEVEL=${opts.logLevel} (stdout to a file)${opts.profile ? '; **servers under --cpu-prof (slower)**' : ''}`);
  const load = (l) => l.map((x) => x.toFixed(1)).join(' / ');
  L.push(`- whole run: ${wallSeconds.toFixed(0)} s; load average (1 / 5 / 15 min) ${load(loadAtStart)} at the start, ${load(loadavg())} at the end (other work on the machine shows here)`, '');
  if (report.load.length > 0) {
    L.push('## Throughput and latency', '');
    L.push('req/s: median of the rounds; latency percentiles: all rounds\' samples pooled (closed loop, one request in flight per connection). Baseline: bench/baseline.mjs, raw node:http answering the GET-by-id bytes, driven with the same requests. CPU: share of one core used by the process under load and by the load generator over the measured window (100 = one core; the machine has ' + availableParallelism() + '). Main thread: the server\'s CPU time per request on its main thread (JavaScript, the event loop, the socket system calls), and how busy that thread was; at 100% it is what limits req/s.', '');
    L.push('| scenario | conns | req/s | p50 ms | p99 ms | p99.9 ms | errors | baseline req/s | ratio | CPU % server/gen | CPU % baseline/gen | main thread µs/req (busy %) |');
    L.push('|---|---:|---:|---:|---:|---:|---|---:|---:|---|---|---:|');
    for (const r of report.load) {
      const name = r.label === 'server' ? r.title : `${r.title}: ${r.label}`;
      L.push(`| ${name} | ${r.conns} | ${int(r.rps)} | ${ms(r.p50)} | ${ms(r.p99)} | ${ms(r.p999)} | ${errorText(r)} | ${int(r.base.rps)} | ${r.ratio.toFixed(2)} | ${pct(r.targetCpu)}/${pct(r.loadgenCpu)} | ${pct(r.base.targetCpu)}/${pct(r.base.loadgenCpu)} | ${r.mainUs.toFixed(1)} (${pct(r.mainBusy)}) |`);
    }
    L.push('');
  }
  const writes = report.load.filter((r) => r.fsyncRate > 0 || r.label === 'FSYNC=off');
  if (writes.length > 0) {
    L.push('## Durable writes', '');
    L.push("Commits from the server's /metrics (`chat_session_api_commit_duration_seconds_count`) over the measured windows: concurrent writes share one commit (group commit).", '');
    L.push('| scenario | req/s | commits/s | writes per commit |', '|---|---:|---:|---:|');
    for (const r of writes) {
      const name = r.label === 'server' ? r.title : `${r.title}: ${r.label}`;
      L.push(`| ${name} | ${int(r.rps)} | ${int(r.fsyncRate)} | ${r.fsyncRate > 0 ? (r.rps / r.fsyncRate).toFixed(1) : '–'} |`);
    }
    L.push('');
  }
  if (report.disk.length > 0) {
    L.push('## Disk', '');
    L.push('| raw durable append | ops/s | p50 ms | p99 ms | p99.9 ms |', '|---|---:|---:|---:|---:|');
    for (const d of report.disk) L.push(`| ${d.title} | ${int(d.rps)} | ${ms(d.p50)} | ${ms(d.p99)} | ${ms(d.p999)} |`);
    L.push('');
  }
  if (report.startup.length > 0) {
    L.push('## The first start on a journal (`migrate`)', '');
    L.push('Data directories an earlier release would have written, generated by bench/datagen.mjs in the journal format (page cache warm), each start on a fresh copy. Start: spawn of `node dist/server.js` to its first /healthz 200, the journal migrated into sqlite before it; migration: the `ms` of its "journal migrated into sqlite" log line; RSS (VmRSS) once serving, peak = VmHWM (the journal is read whole to migrate).', '');
    L.push('| data set | journal MiB | generated in s | runs | start → /healthz s | migration s | RSS MiB | peak RSS MiB |', '|---|---:|---:|---:|---:|---:|---:|---:|');
    for (const s of report.startup) {
      L.push(`| ${s.label} | ${int(s.bytes / 2 ** 20)} | ${(s.genMs / 1000).toFixed(1)} | ${s.runs} | ${(s.startMs / 1000).toFixed(2)} | ${(s.migrateMs / 1000).toFixed(2)} | ${int(s.rssMiB)} | ${int(s.peakMiB)} |`);
    }
    L.push('');
  }
  if (report.cold.length > 0) {
    const c = report.cold[0];
    L.push('## Cold start', '', '| empty data directory, spawn → first /healthz 200 | median ms | min ms | max ms |', '|---|---:|---:|---:|');
    L.push(`| ${c.runs} runs | ${ms(c.median)} | ${ms(c.min)} | ${ms(c.max)} |`, '');
  }
  if (report.soak.length > 0) {
    L.push('## Soak: hostile clients beside a normal load', '');
    L.push(`Each row: a fresh server on a copy of one seeded data set (64 users with 10 sessions of 5 turns, a user with 30,000 sessions, a project of 30,000 sessions, a session of 64 turns of 1000 KiB), the normal load alone (32 connections: each a user reading its sessions, its list and a page of turns of each, and writing a 1 KiB turn every fourth request), then the same load beside the hostile client. p99 of the normal load; peak RSS = the server's VmHWM over both runs. Servers run with \`MEMORY_LIMIT=1gb\`, as in a 1 GiB container, and otherwise the defaults (\`MAX_CONNECTIONS\` 1000, \`MAX_REQUESTS_PER_USER\` 64). Ratios are the figures to compare across runs; the machine is shared.`, '');
    L.push('| engine | hostile client (issue.item) | normal p99 alone ms | normal p99 beside it ms | ratio | normal req/s alone → beside | normal errors | the hostile client got | server peak RSS MiB |', '|---|---|---:|---:|---:|---|---:|---|---:|');
    for (const r of report.soak) {
      L.push(`| ${r.store} | ${r.kind} (${r.item}): ${r.what} | ${ms(r.p99Alone)} | ${ms(r.p99Under)} | ${(r.p99Under / r.p99Alone).toFixed(1)} | ${int(r.rpsAlone)} → ${int(r.rpsUnder)} | ${r.errorsUnder} | ${r.hostile} | ${int(r.peakMiB)} |`);
    }
    L.push('');
  }
  L.push(...renderEngines());
  L.push(...renderPeers());
  L.push(...renderConversations(report));
  const t = [...targets(), ...engineTargets(), ...peerTargets()];
  if (t.length > 0) L.push('## Targets', '', '| target | measured | met |', '|---|---|---|', ...t, '');
  for (const section of sections) L.push(section, '');
  for (const p of report.profiles) L.push(`## CPU profile: ${p.name}`, '', p.table, '');
  if (report.notes.length > 0) L.push('## Notes', '', ...report.notes.map((n) => `- ${n}`), '');
  return L.join('\n');
}
