// Measurement: the processes a run starts (remembered, so an interrupted run stops them), a load
// scenario's rounds against the baseline, interleaved, with CPU and the server's own counters,
// and \`report\`, where every measurement lands for bench/report.mjs.
import { copyFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { api, BASELINE, cpuSecondsOf, EXAMPLE_PROVIDERS, logLines, median, NODE_OLDEST, ROOT, SECRET, SERVER, sleep, startProcess } from './common.mjs';
import { percentile, runLoad } from './loadgen.mjs';
import { opts, progress } from './options.mjs';

export let runDir; // the run's temporary directory, made by makeRunDir once the command line is accepted
export const profileDir = join(ROOT, 'bench', 'results', 'profiles');
export const live = new Set(); // processes to stop if the run is interrupted
export const report = { load: [], disk: [], startup: [], cold: [], soak: [], profiles: [], notes: [] };
let logSeq = 0;
/** Report sections written whole by a scenario (the live feed's). */
export const sections = [];

/** Makes the run's temporary directory; everything a run writes goes below it. */
export function makeRunDir() {
  runDir = mkdtempSync(join(tmpdir(), 'csa-bench-'));
  return runDir;
}

/** Starts a process (on the oldest supported Node unless `spec.node`) and remembers it so an interrupted run still stops it. */
export async function start(spec) {
  const p = await startProcess({ ...spec, node: spec.node ?? NODE_OLDEST, logFile: join(runDir, `${String(++logSeq).padStart(2, '0')}-${spec.name}.log`) });
  live.add(p);
  const stop = p.stop;
  p.stop = async () => {
    const r = await stop();
    live.delete(p);
    return r;
  };
  return p;
}

export function startBaseline(args = []) {
  return start({ name: args.length > 0 ? 'raw' : 'baseline', script: BASELINE, args });
}

/** `server` (dist/server.js) on `node` and `dataDir` (a fresh one with the example providers when not given). */
export async function startApi({ name, env = {}, dataDir, profileName, node, server = SERVER, timeoutMs }) {
  let dir = dataDir;
  if (dir === undefined) {
    dir = mkdtempSync(join(runDir, 'data-'));
    copyFileSync(EXAMPLE_PROVIDERS, join(dir, 'providers.json'));
  }
  const nodeArgs =
    opts.profile && profileName !== undefined ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`, `--cpu-prof-name=${profileName}.cpuprofile`] : [];
  const p = await start({ name, script: server, node, cwd: dir, nodeArgs, timeoutMs, env: { DATA_DIR: dir, AUTH_SECRET: SECRET, LOG_LEVEL: opts.logLevel, HOST: '127.0.0.1', ...env } });
  p.api = true; // has /metrics
  return p;
}

/**
 * Commits (one per group commit; builds before the store seam called them fsyncs), compactions
 * and the event-loop delay histogram's buckets ([le seconds, count]) so far, from /metrics.
 */
async function storeCounters(port) {
  // a kept-alive connection the server closes as idle just as it is reused resets: ask again on a new one
  const r = await api(port, 'GET', '/metrics').catch((e) => (e.code === 'ECONNRESET' || e.code === 'EPIPE' ? api(port, 'GET', '/metrics', { keepAlive: false }) : Promise.reject(e)));
  const value = (name) => Number(new RegExp(`^${name} (\\d+)`, 'm').exec(r.text)?.[1] ?? NaN);
  const commits = value('chat_session_api_commit_duration_seconds_count');
  const eld = [...r.text.matchAll(/^nodejs_eventloop_delay_seconds_bucket\{le="([^"]+)"\} (\d+)$/gm)].map((m) => [m[1] === '+Inf' ? Infinity : Number(m[1]), Number(m[2])]);
  return { fsyncs: Number.isNaN(commits) ? value('chat_session_api_fsync_duration_seconds_count') : commits, compactions: value('chat_session_api_compactions_total') || 0, eld };
}

/** The bucket counts of b minus a (a histogram over a window); empty when the server has none. */
const bucketDelta = (a, b) => (a.length === 0 || a.length !== b.length ? [] : b.map(([le, n], i) => [le, n - a[i][1]]));
/** Two histograms' buckets added (an empty one adds nothing). */
const bucketSum = (a, b) => (a.length === 0 ? b : b.length === 0 ? a : a.map(([le, n], i) => [le, n + b[i][1]]));

/** The q-quantile of cumulative buckets, interpolated within its bucket as Prometheus' histogram_quantile does. */
function bucketQuantile(buckets, q) {
  const total = buckets.at(-1)?.[1] ?? 0;
  if (total === 0) return NaN;
  const rank = q * total;
  let prevLe = 0;
  let prevN = 0;
  for (const [le, n] of buckets) {
    if (n >= rank) return le === Infinity ? prevLe : prevLe + ((le - prevLe) * (rank - prevN)) / Math.max(1, n - prevN);
    prevLe = le;
    prevN = n;
  }
  return NaN;
}

/** Error lines a server logged: a benchmark that made the server fail must say so. */
function noteServerErrors(p, scenario) {
  const errors = logLines(p.logFile).filter((l) => l.level === 'error');
  if (errors.length > 0) report.notes.push(`${scenario}: the server logged ${errors.length} error line(s), first: ${JSON.stringify(errors[0]).slice(0, 300)}`);
}

/**
 * One measured run (warm-up, then the window) with the target's CPU use over the window. A
 * target of several servers (`proc.members`) shares the connections; their CPU and counters add
 * up. `proc.window()`, when given, starts a measure of its own and returns what ends it.
 */
export async function measure(proc, request, conns) {
  const members = proc.members ?? [proc];
  const cpu = (mainThread) => members.reduce((sum, m) => sum + cpuSecondsOf(m.pid, { mainThread }), 0);
  const counters = () => Promise.all(members.map((m) => storeCounters(m.port)));
  let cpu0 = 0;
  let cpu1 = 0;
  let main0 = 0;
  let main1 = 0;
  let store0;
  let store1;
  let endWindow;
  let extra;
  const r = await runLoad({
    ports: members.map((m) => m.port),
    connections: conns,
    warmupMs: opts.warmupMs,
    durationMs: opts.durationMs,
    request,
    onWindowStart: () => {
      cpu0 = cpu(false);
      main0 = cpu(true);
      // awaited only once the window ends: handled from now, so a failure meanwhile is not an unhandled rejection that ends the run
      if (proc.api) (store0 = counters()).catch(() => undefined);
      endWindow = proc.window?.();
    },
    onWindowEnd: () => {
      cpu1 = cpu(false);
      main1 = cpu(true);
      if (proc.api) (store1 = counters()).catch(() => undefined);
      extra = endWindow?.();
    },
  });
  r.targetCpu = (cpu1 - cpu0) / r.seconds;
  // the main thread is where a Node.js server runs out first: its CPU per request is the cost to cut
  r.mainBusy = (main1 - main0) / r.seconds;
  r.mainUs = ((main1 - main0) / r.requests) * 1e6;
  if (proc.api) {
    const [a, b] = await Promise.all([store0, store1]);
    r.fsyncRate = b.reduce((n, x, i) => n + x.fsyncs - a[i].fsyncs, 0) / r.seconds;
    r.compactions = b.reduce((n, x, i) => n + x.compactions - a[i].compactions, 0);
    r.eld = b.map((x, i) => bucketDelta(a[i].eld, x.eld)).reduce(bucketSum, []);
  }
  if (extra !== undefined) Object.assign(r, extra(r.seconds));
  await sleep(200); // let closed connections and in-flight work settle before the next run
  return r;
}

/** Folds a target's rounds: median req/s, percentiles of all rounds' samples pooled. */
function summarize(runs) {
  const all = new Float64Array(runs.reduce((n, r) => n + r.latencies.length, 0));
  let at = 0;
  for (const r of runs) {
    all.set(r.latencies, at);
    at += r.latencies.length;
  }
  all.sort();
  const statuses = new Map();
  for (const r of runs) for (const [s, n] of r.statuses) statuses.set(s, (statuses.get(s) ?? 0) + n);
  return {
    rps: median(runs.map((r) => r.rps)),
    rounds: runs.map((r) => r.rps),
    p50: percentile(all, 0.5),
    p99: percentile(all, 0.99),
    p999: percentile(all, 0.999),
    errors: runs.reduce((n, r) => n + r.errors, 0),
    socketErrors: runs.reduce((n, r) => n + r.socketErrors, 0),
    warmupErrors: runs.reduce((n, r) => n + r.warmupErrors, 0),
    firstError: runs.find((r) => r.firstError !== undefined)?.firstError,
    statuses,
    targetCpu: median(runs.map((r) => r.targetCpu)),
    mainBusy: median(runs.map((r) => r.mainBusy)),
    mainUs: median(runs.map((r) => r.mainUs)),
    mainUsRounds: runs.map((r) => r.mainUs),
    fsyncRate: median(runs.map((r) => r.fsyncRate ?? NaN)),
    compactions: runs.reduce((n, r) => n + (r.compactions ?? 0), 0),
    loadgenCpu: median(runs.map((r) => r.cpu)),
    // the event loop's delay over all rounds' windows pooled, and what a target's window() measured
    eldP99: bucketQuantile(runs.map((r) => r.eld ?? []).reduce(bucketSum, []), 0.99),
    eldSamples: runs.reduce((n, r) => n + (r.eld?.at(-1)?.[1] ?? 0), 0),
    dbCpu: median(runs.map((r) => r.dbCpu ?? NaN)),
  };
}

/**
 * Starts the baseline and one server per target, prepares each, then runs rounds of
 * baseline, target 1, target 2... and adds one report row per target. With `sc.bothOrders`,
 * the rounds are split into one pass per target, the servers restarted for each in the
 * targets' order rotated by one more: the first server of a scenario measured up to 20% less
 * CPU per GET than a byte-identical build beside it (bench/README.md, "Which server comes
 * first"), so a comparison of builds must give each the first place equally.
 */
export async function runLoadScenario(sc, rows = report.load) {
  const targets = sc.targets ?? [{ label: 'server' }];
  const baseline = await startBaseline();
  const runs = targets.map(() => []);
  const baseRuns = [];
  let procs = [];
  const stopAll = async () => {
    for (const p of procs) {
      for (const m of p.proc.members ?? (p.t.start === undefined ? [p.proc] : [])) noteServerErrors(m, `${sc.name} (${p.t.label})`);
      await p.proc.stop();
    }
    procs = [];
  };
  const asked = sc.rounds ?? opts.rounds;
  // with sc.bothOrders: one pass per target, each listing the targets rotated by one more, so
  // every target is first (and second...) in as many rounds as every other
  const passCount = sc.bothOrders && asked > 1 ? targets.length : 1;
  const perPass = Math.ceil(asked / passCount);
  const rounds = perPass * passCount;
  const passes = Array.from({ length: passCount }, () => perPass);
  try {
    let round = 0;
    for (const [pass, passRounds] of passes.entries()) {
      const order = targets.map((t, i) => (i + pass) % targets.length);
      for (const i of order) {
        const t = targets[i];
        const profileName = `${sc.name}-${t.label}${pass > 0 ? `-pass${pass + 1}` : ''}`.replace(/[^\w.-]+/g, '_');
        const proc = t.start !== undefined ? await t.start() : await startApi({ name: profileName, env: t.env, dataDir: t.dataDir, node: t.node, server: t.server, profileName });
        procs.push({ i, t, proc });
        const state = sc.prepare === undefined ? undefined : await sc.prepare(proc, t);
        procs.at(-1).state = state;
        procs.at(-1).request = sc.request(state, t);
      }
      procs.sort((a, b) => order.indexOf(a.i) - order.indexOf(b.i));
      // the baseline's requests are made for it alone, not shared with one of the targets
      const baselineRequest = sc.request(procs[0].state, procs[0].t);
      for (let k = 0; k < passRounds; k++) {
        round++;
        const b = await measure(baseline, baselineRequest, sc.conns);
        baseRuns.push(b);
        let line = `${sc.name} round ${round}/${rounds}${passes.length > 1 ? ` (${procs[0].t.label} first)` : ''}: baseline ${b.rps.toFixed(0)}/s`;
        // with sc.alternate the targets' order flips every round, so neither always runs right after the baseline
        for (const p of sc.alternate && round % 2 === 0 ? [...procs].reverse() : procs) {
          const r = await measure(p.proc, p.request, sc.conns);
          runs[p.i].push(r);
          line += `, ${p.t.label} ${r.rps.toFixed(0)}/s (p99 ${percentile(r.latencies, 0.99).toFixed(2)} ms, ${r.errors} errors)`;
        }
        progress(line);
      }
      await stopAll();
    }
    const base = summarize(baseRuns);
    for (const [i, t] of targets.entries()) {
      const s = summarize(runs[i]);
      rows.push({ scenario: sc.name, title: sc.title, label: t.label, conns: sc.conns, ...s, base, ratio: s.rps / base.rps });
      if (s.warmupErrors > 0 || base.warmupErrors > 0) report.notes.push(`${sc.name} (${t.label}): ${s.warmupErrors} error(s) during warm-ups`);
    }
  } finally {
    await stopAll();
    await baseline.stop();
  }
}
