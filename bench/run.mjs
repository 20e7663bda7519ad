// The benchmark suite (`npm run bench`): starts the built dist/server.js on fresh temporary
// data directories, drives it with bench/loadgen.mjs, and prints a Markdown report. Every
// load scenario also drives bench/baseline.mjs (plain node:http answering fixed bytes) in the
// same run, interleaved round by round, so results are ratios that survive a noisy, shared,
// 2-core machine. Progress goes to stderr, the report to stdout (and bench/results/latest.md
// with --out or BENCH_OUT=1).
import { closeSync, copyFileSync, fdatasyncSync, mkdirSync, mkdtempSync, openSync, readdirSync, rmSync, statSync, writeFileSync, writeSync } from 'node:fs';
import { availableParallelism, cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { api, BASELINE, cpuSecondsOf, EXAMPLE_PROVIDERS, logLines, median, memoryOf, NODE_OLDEST, nodeVersion, ROOT, SECRET, SERVER, sleep, startProcess, token } from './common.mjs';
import { generateDataDir, PER_LIST } from './datagen.mjs';
import { ENGINE_GROUPS, engineScenarios, engineTargets, renderEngines, stopEngines } from './engines.mjs';
import { buildRequest, percentile, runLoad } from './loadgen.mjs';
import { profileTable } from './profile.mjs';
import { engineAvailable, seedDataDir, soakEngine } from './soak.mjs';
import { conversationGroups, conversationScenarios, renderConversations } from './conversations.mjs';

const HELP = `Usage: node bench/run.mjs [SCENARIO|GROUP ...] [options]   (npm run bench -- [...])

Scenarios: %SCENARIOS%
Groups:    %GROUPS%
With no scenario named, all run but the opt-in ones (%OPTIN%), which run when named.

Options (each also an environment variable):
  --quick              short run: 1 round of 1 s, smaller scale data   BENCH_QUICK=1
  --only=a,b           scenarios or groups to run (same as naming them)
  --rounds=N           interleaved baseline/server rounds (default 3)  BENCH_ROUNDS
  --duration=S         measured seconds per round (default 3)          BENCH_DURATION
  --warmup=S           unmeasured seconds before each (default 1)      BENCH_WARMUP
  --scale=N            sessions (and 1 KiB turns) of the big data set  BENCH_SCALE (default 1000000)
  --replay-runs=N      start-ups of the big data set (default 1)       BENCH_REPLAY_RUNS
  --cold-runs=N        cold starts (default 10)                        BENCH_COLD_RUNS
  --out                also write bench/results/latest.md              BENCH_OUT=1
  --profile            run the API servers of load scenarios under node --cpu-prof and add the
                       top self-time functions to the report (profiles in bench/results/profiles)
  --keep               keep the temporary directory (data, server logs)
  --engines=a,b        engines the soak runs (default: journal, and sqlite  BENCH_ENGINES
                       when this Node.js has node:sqlite; npm run bench runs on Node 24)
  --seam-base=REF      journal-seam: the build to compare with (default: the parent of the
                       commit "Store seam: ..."), built once in $TMPDIR    BENCH_SEAM_BASE
The server runs with LOG_LEVEL from the environment (default info), its stdout to a log file.`;

// ---- options ----

const argv = process.argv.slice(2);
const flag = (name) => argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
const has = (name) => argv.includes(`--${name}`);
const quick = has('quick') || process.env.BENCH_QUICK === '1';
const num = (name, env, def) => {
  const v = flag(name) ?? process.env[env];
  if (v === undefined) return def;
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) fail(`--${name} / ${env} must be a positive number (got "${v}")`);
  return n;
};
const opts = {
  rounds: Math.round(num('rounds', 'BENCH_ROUNDS', quick ? 1 : 3)),
  durationMs: num('duration', 'BENCH_DURATION', quick ? 1 : 3) * 1000,
  warmupMs: num('warmup', 'BENCH_WARMUP', quick ? 0.5 : 1) * 1000,
  scale: Math.round(num('scale', 'BENCH_SCALE', quick ? 100_000 : 1_000_000)),
  replayRuns: Math.round(num('replay-runs', 'BENCH_REPLAY_RUNS', 1)),
  coldRuns: Math.round(num('cold-runs', 'BENCH_COLD_RUNS', quick ? 3 : 10)),
  out: has('out') || process.env.BENCH_OUT === '1',
  profile: has('profile'),
  keep: has('keep'),
  logLevel: process.env.LOG_LEVEL ?? 'info',
  engines: (flag('engines') ?? process.env.BENCH_ENGINES ?? 'journal,sqlite').split(',').filter((e) => e !== ''),
  seamBase: flag('seam-base') ?? process.env.BENCH_SEAM_BASE,
  quick,
};

function fail(message) {
  process.stderr.write(`bench: ${message}\n`);
  process.exit(2);
}
const progress = (text) => process.stderr.write(`[${((performance.now() - wallStart) / 1000).toFixed(0).padStart(4)} s] ${text}\n`);

// ---- the run's shared state ----

const wallStart = performance.now();
const loadAtStart = loadavg();
let runDir; // the run's temporary directory, made once the command line is accepted
const profileDir = join(ROOT, 'bench', 'results', 'profiles');
const live = new Set(); // processes to stop if the run is interrupted
const report = { load: [], disk: [], startup: [], cold: [], soak: [], profiles: [], notes: [] };
const dataSets = new Map(); // cache of generated data directories, by size
let logSeq = 0;

const PROVIDER = '665f1c2a9b1e8a0012ab34c1';
const READ_CONNS = 50;
const WRITE_CONNS = 64;
const bearer = (user) => ({ authorization: `Bearer ${token(user)}` });

/** Starts a process (on the oldest supported Node unless `spec.node`) and remembers it so an interrupted run still stops it. */
async function start(spec) {
  const p = await startProcess({ node: NODE_OLDEST, ...spec, logFile: join(runDir, `${String(++logSeq).padStart(2, '0')}-${spec.name}.log`) });
  live.add(p);
  const stop = p.stop;
  p.stop = async () => {
    const r = await stop();
    live.delete(p);
    return r;
  };
  return p;
}

function startBaseline(args = []) {
  return start({ name: args.length > 0 ? 'raw' : 'baseline', script: BASELINE, args });
}

/** `server` (dist/server.js) on `node` and `dataDir` (a fresh one with the example providers when not given). */
async function startApi({ name, env = {}, dataDir, profileName, node, server = SERVER }) {
  let dir = dataDir;
  if (dir === undefined) {
    dir = mkdtempSync(join(runDir, 'data-'));
    copyFileSync(EXAMPLE_PROVIDERS, join(dir, 'providers.json'));
  }
  const nodeArgs =
    opts.profile && profileName !== undefined ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`, `--cpu-prof-name=${profileName}.cpuprofile`] : [];
  const p = await start({ name, script: server, node, cwd: dir, nodeArgs, env: { DATA_DIR: dir, AUTH_SECRET: SECRET, LOG_LEVEL: opts.logLevel, HOST: '127.0.0.1', ...env } });
  p.api = true; // has /metrics
  return p;
}

/**
 * Commits (one per group commit; builds before the store seam called them fsyncs), compactions
 * and the event-loop delay histogram's buckets ([le seconds, count]) so far, from /metrics.
 */
async function storeCounters(port) {
  const r = await api(port, 'GET', '/metrics');
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

// ---- seeding through the API ----

async function createSessions(port, user, n, project) {
  const auth = token(user);
  return Promise.all(
    Array.from({ length: n }, async (_, i) => {
      const r = await api(port, 'POST', '/api/v1/chat-sessions', {
        auth,
        body: { projectId: project, providerId: PROVIDER, selectedModel: 'gpt-4o', name: `Session ${i}` },
      });
      if (r.status !== 201) throw new Error(`seeding: create answered ${r.status} ${r.text}`);
      return r.body.data._id;
    }),
  );
}

async function expectCount(port, path, user, n) {
  const r = await api(port, 'GET', path, { auth: token(user) });
  if (r.status !== 200 || r.body?.data?.length !== n) throw new Error(`${path} as ${user}: expected ${n} items, got ${r.status} ${r.text.slice(0, 200)}`);
}

/** bench-user-0 owns exactly 50 sessions, all in bench-project; another user owns 50 elsewhere. */
async function seedLists(p) {
  const ids = await createSessions(p.port, 'bench-user-0', PER_LIST, 'bench-project');
  await createSessions(p.port, 'bench-user-1', PER_LIST, 'other-project');
  await expectCount(p.port, '/api/v1/chat-sessions', 'bench-user-0', PER_LIST);
  await expectCount(p.port, '/api/v1/chat-sessions?projectId=bench-project', 'reader-0', PER_LIST);
  return ids;
}

/** `perConn` sessions owned by writer-<c> for each connection c. */
async function seedWriters(p, conns, perConn) {
  const out = [];
  for (let c = 0; c < conns; c++) out.push(createSessions(p.port, `writer-${c}`, perConn, `project-${c % 8}`));
  return Promise.all(out);
}

/**
 * The search scenarios' store: a user's 100 sessions of 20 turns of about 1 KiB, words drawn
 * from a 5,000-word vocabulary with Zipf frequencies (word k about 1/k as often as the first),
 * so `w1z` is in every turn; `needle` is in one turn only. The z ends each word, so no word is
 * a prefix of another (a query word matches the words it starts: `w1` would match 1,111 words).
 */
async function seedSearch(p) {
  const auth = token('searcher');
  const ids = await createSessions(p.port, 'searcher', 100, 'search-project');
  const harmonic = Array.from({ length: 5000 }, (_, k) => 1 / (k + 1));
  const total = harmonic.reduce((a, b) => a + b, 0);
  let seed = 1;
  const random = () => ((seed = (seed * 48271) % 2147483647) / 2147483647);
  const word = () => {
    let r = random() * total;
    for (let k = 0; k < harmonic.length; k++) if ((r -= harmonic[k]) <= 0) return `w${k + 1}z`;
    return 'w5000z';
  };
  for (const [i, id] of ids.entries()) {
    for (let k = 0; k < 20; k++) {
      let text = i === 50 && k === 10 ? 'needle' : 'w1z';
      while (text.length < 1024) text += ` ${word()}`;
      const r = await api(p.port, 'POST', `/api/v1/chat-sessions/${id}/turns`, { auth, body: { role: 'user', content: text } });
      if (r.status !== 201) throw new Error(`seeding: a turn answered ${r.status} ${r.text}`);
    }
  }
  const rare = await api(p.port, 'GET', '/api/v1/search?q=needle', { auth });
  if (rare.body?.data?.length !== 1) throw new Error(`seeding: the rare word is found ${rare.body?.data?.length} times`);
}

const searchScenario = (name, q, what) => ({
  name,
  title: `GET /search?q=${q} (${what}; 2,000 turns of 1 KiB, 20 hits a page)`,
  conns: READ_CONNS,
  prepare: seedSearch,
  request: () => buildRequest('GET', `/api/v1/search?q=${q}`, { headers: bearer('searcher') }),
});

// ---- load scenarios ----

/** One request Buffer per connection, built once (token per connection = one user each). */
const perConn = (conns, make) => {
  const bufs = Array.from({ length: conns }, (_, c) => make(c));
  return (c) => bufs[c];
};

// Creates come from a pool of users, each in their own project, so per-user and per-project
// lists stay short as the store grows by hundreds of thousands of sessions in a run (64 users
// with thousands of sessions each would measure list insertion instead of the write path).
// 5,000 users: fewer than the server's 10,000-entry token cache.
const CREATE_USERS = 5000;
const createRequest = (conns) => {
  const headers = Array.from({ length: CREATE_USERS }, (_, u) => bearer(`creator-${u}`));
  return (c, seq) => {
    const u = (seq * conns + c) % CREATE_USERS;
    return buildRequest('POST', '/api/v1/chat-sessions', {
      headers: headers[u],
      body: { projectId: `project-${u}`, providerId: PROVIDER, selectedModel: 'gpt-4o', name: `Session ${c}-${seq}` },
    });
  };
};

const createScenario = (conns, targets) => ({
  name: `create-${conns}`,
  title: `POST /chat-sessions (create), ${conns} client${conns > 1 ? 's' : ''}`,
  conns,
  targets,
  request: () => createRequest(conns),
});

const loadScenarios = [
  {
    name: 'calibrate',
    title: 'loadgen ceiling: trivial raw node:net server (ratio > 1 = loadgen outruns the baseline)',
    conns: READ_CONNS,
    targets: [{ label: 'raw node:net', start: () => startBaseline(['--raw']) }],
    request: () => buildRequest('GET', `/api/v1/chat-sessions/${'0'.repeat(24)}`, { headers: bearer('reader-0') }),
  },
  {
    name: 'get',
    title: 'GET /chat-sessions/:id (auth)',
    conns: READ_CONNS,
    prepare: seedLists,
    request: (ids) => {
      const bufs = Array.from({ length: READ_CONNS }, (_, c) => ids.map((id) => buildRequest('GET', `/api/v1/chat-sessions/${id}`, { headers: bearer(`reader-${c}`) })));
      return (c, seq) => bufs[c][seq % bufs[c].length];
    },
  },
  {
    name: 'list-user',
    title: "GET /chat-sessions (a user's 50)",
    conns: READ_CONNS,
    prepare: seedLists,
    request: () => buildRequest('GET', '/api/v1/chat-sessions', { headers: bearer('bench-user-0') }),
  },
  {
    name: 'list-project',
    title: "GET /chat-sessions?projectId= (a project's 50)",
    conns: READ_CONNS,
    prepare: seedLists,
    request: () => perConn(READ_CONNS, (c) => buildRequest('GET', '/api/v1/chat-sessions?projectId=bench-project', { headers: bearer(`reader-${c}`) })),
  },
  {
    name: 'providers',
    title: 'GET /providers (3 example providers)',
    conns: READ_CONNS,
    prepare: (p) => expectCount(p.port, '/api/v1/providers', 'reader-0', 3),
    request: () => perConn(READ_CONNS, (c) => buildRequest('GET', '/api/v1/providers', { headers: bearer(`reader-${c}`) })),
  },
  searchScenario('search-rare', 'needle', 'a word in one turn'),
  searchScenario('search-common', 'w1z', 'a word in every turn'),
  searchScenario('search-prefix', 'w1', 'the start of 1,111 words, together in every turn'),
  createScenario(1),
  createScenario(16),
  createScenario(WRITE_CONNS, [
    { label: 'durable' },
    { label: 'FSYNC=off', env: { FSYNC: 'off' } },
    { label: 'floor: bare node:http create (no token, store or log)', start: () => startBaseline(['--create']) },
  ]),
  {
    name: 'update',
    title: `PUT /chat-sessions/:id (rename), ${WRITE_CONNS} clients`,
    conns: WRITE_CONNS,
    prepare: (p) => seedWriters(p, WRITE_CONNS, 4),
    request: (ids) => {
      const headers = Array.from({ length: WRITE_CONNS }, (_, c) => bearer(`writer-${c}`));
      return (c, seq) => buildRequest('PUT', `/api/v1/chat-sessions/${ids[c][seq % ids[c].length]}`, { headers: headers[c], body: { name: `Renamed ${seq}` } });
    },
  },
  {
    name: 'turn',
    title: `POST /chat-sessions/:id/turns (1 KiB), ${WRITE_CONNS} clients`,
    conns: WRITE_CONNS,
    prepare: (p) => seedWriters(p, WRITE_CONNS, 1),
    request: (ids) => {
      const content = 'x'.repeat(1024);
      return perConn(WRITE_CONNS, (c) => buildRequest('POST', `/api/v1/chat-sessions/${ids[c][0]}/turns`, { headers: bearer(`writer-${c}`), body: { role: 'user', content } }));
    },
  },
];

/**
 * One measured run (warm-up, then the window) with the target's CPU use over the window. A
 * target of several servers (`proc.members`) shares the connections; their CPU and counters add
 * up. `proc.window()`, when given, starts a measure of its own and returns what ends it.
 */
async function measure(proc, request, conns) {
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
      if (proc.api) store0 = counters();
      endWindow = proc.window?.();
    },
    onWindowEnd: () => {
      cpu1 = cpu(false);
      main1 = cpu(true);
      if (proc.api) store1 = counters();
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
 * baseline, target 1, target 2... and adds one report row per target.
 */
async function runLoadScenario(sc, rows = report.load) {
  const targets = sc.targets ?? [{ label: 'server' }];
  const baseline = await startBaseline();
  const procs = [];
  try {
    for (const t of targets) {
      const profileName = `${sc.name}-${t.label}`.replace(/[^\w.-]+/g, '_');
      const proc = t.start !== undefined ? await t.start() : await startApi({ name: profileName, env: t.env, dataDir: t.dataDir, node: t.node, server: t.server, profileName });
      const state = sc.prepare === undefined ? undefined : await sc.prepare(proc, t);
      procs.push({ t, proc, request: sc.request(state, t), runs: [] });
    }
    const baseRuns = [];
    const rounds = sc.rounds ?? opts.rounds;
    for (let round = 1; round <= rounds; round++) {
      const b = await measure(baseline, procs[0].request, sc.conns);
      baseRuns.push(b);
      let line = `${sc.name} round ${round}/${rounds}: baseline ${b.rps.toFixed(0)}/s`;
      // with sc.alternate the targets' order flips every round, so neither always runs right after the baseline
      for (const p of sc.alternate && round % 2 === 0 ? [...procs].reverse() : procs) {
        const r = await measure(p.proc, p.request, sc.conns);
        p.runs.push(r);
        line += `, ${p.t.label} ${r.rps.toFixed(0)}/s (p99 ${percentile(r.latencies, 0.99).toFixed(2)} ms, ${r.errors} errors)`;
      }
      progress(line);
    }
    const base = summarize(baseRuns);
    for (const p of procs) {
      const s = summarize(p.runs);
      rows.push({ scenario: sc.name, title: sc.title, label: p.t.label, conns: sc.conns, ...s, base, ratio: s.rps / base.rps });
      if (s.warmupErrors > 0 || base.warmupErrors > 0) report.notes.push(`${sc.name} (${p.t.label}): ${s.warmupErrors} error(s) during warm-ups`);
    }
  } finally {
    for (const p of procs) {
      for (const m of p.proc.members ?? (p.t.start === undefined ? [p.proc] : [])) noteServerErrors(m, `${sc.name} (${p.t.label})`);
      await p.proc.stop();
    }
    await baseline.stop();
  }
}

// ---- disk, start-up and scale ----

/** The disk's own durable-append rate: small append + fdatasync in a loop, one writer. */
async function rawFsync() {
  const file = join(runDir, 'fsync-probe');
  const fd = openSync(file, 'w');
  const line = Buffer.from(`${'x'.repeat(300)}\n`); // about one session record
  const rates = [];
  const lat = [];
  try {
    for (let round = 0; round < opts.rounds; round++) {
      let n = 0;
      const t0 = performance.now();
      let now = t0;
      while (now - t0 < opts.durationMs) {
        writeSync(fd, line);
        fdatasyncSync(fd);
        const t = performance.now();
        lat.push(t - now);
        now = t;
        n++;
      }
      rates.push(n / ((now - t0) / 1000));
      await sleep(100);
    }
  } finally {
    closeSync(fd);
    rmSync(file, { force: true });
  }
  lat.sort((a, b) => a - b);
  const row = { title: 'append 301 B + fdatasync, 1 writer (same filesystem as the data dirs)', rps: median(rates), p50: percentile(lat, 0.5), p99: percentile(lat, 0.99), p999: percentile(lat, 0.999) };
  report.disk.push(row);
  progress(`fsync: ${row.rps.toFixed(0)}/s, p50 ${row.p50.toFixed(3)} ms`);
}

const fmtCount = (n) => (n >= 1e6 && n % 1e6 === 0 ? `${n / 1e6}M` : n >= 1e3 && n % 1e3 === 0 ? `${n / 1e3}k` : String(n));

/** A generated data directory, made once per run. */
function dataSet(sessions, turns) {
  const key = `${sessions}-${turns}`;
  let d = dataSets.get(key);
  if (d === undefined) {
    const dir = join(runDir, `scale-${key}`);
    progress(`generating ${fmtCount(sessions)} sessions + ${fmtCount(turns)} turns...`);
    const g = generateDataDir(dir, { sessions, turns });
    d = { dir, sessions, turns, bytes: g.bytes, genMs: g.ms, label: `${fmtCount(sessions)} sessions${turns > 0 ? ` + ${fmtCount(turns)} turns of 1 KiB` : ''}` };
    dataSets.set(key, d);
    progress(`generated ${d.label}: ${(d.bytes / 2 ** 20).toFixed(0)} MiB in ${(g.ms / 1000).toFixed(1)} s`);
  }
  return d;
}

/** Spawn to first /healthz 200, the server's own replay time, and memory once serving. */
async function measureStart(d, runs) {
  const samples = [];
  for (let i = 0; i < runs; i++) {
    const p = await startApi({ name: `replay-${fmtCount(d.sessions)}`, dataDir: d.dir });
    const mem = memoryOf(p.pid);
    await p.stop();
    const replayed = logLines(p.logFile, 'journal replayed').at(-1);
    samples.push({ startMs: p.startMs, replayMs: replayed?.ms ?? NaN, ...mem });
    progress(`start-up with ${d.label}: ${p.startMs.toFixed(0)} ms to /healthz, replay ${replayed?.ms} ms, RSS ${mem.rssMiB.toFixed(0)} MiB`);
  }
  report.startup.push({
    label: d.label,
    sessions: d.sessions,
    turns: d.turns,
    bytes: d.bytes,
    genMs: d.genMs,
    runs,
    startMs: median(samples.map((s) => s.startMs)),
    replayMs: median(samples.map((s) => s.replayMs)),
    rssMiB: median(samples.map((s) => s.rssMiB)),
    peakMiB: median(samples.map((s) => s.peakMiB)),
  });
}

async function replay() {
  await measureStart(dataSet(opts.scale / 10, 0), 3);
  await measureStart(dataSet(opts.scale, opts.scale), opts.replayRuns);
}

/** A user's 50 sessions with 10k sessions in the store vs the big data set: should be flat. */
async function listScale() {
  const small = dataSet(Math.min(10_000, opts.scale / 10), 0);
  const big = dataSet(opts.scale, opts.scale);
  await runLoadScenario({
    name: 'list-scale',
    title: "GET /chat-sessions (a user's 50) by store size",
    conns: READ_CONNS,
    targets: [
      { label: small.label, dataDir: small.dir },
      { label: big.label, dataDir: big.dir },
    ],
    prepare: (p) => expectCount(p.port, '/api/v1/chat-sessions', 'user-0', PER_LIST),
    request: () => buildRequest('GET', '/api/v1/chat-sessions', { headers: bearer('user-0') }),
  });
}

/** `node dist/server.js` on an empty data directory to its first /healthz 200. */
async function coldStart() {
  const times = [];
  for (let i = 0; i < opts.coldRuns; i++) {
    const p = await startApi({ name: 'cold', dataDir: mkdtempSync(join(runDir, 'cold-')) });
    times.push(p.startMs);
    await p.stop();
  }
  times.sort((a, b) => a - b);
  report.cold.push({ runs: times.length, median: median(times), min: times[0], max: times.at(-1) });
  progress(`cold start: median ${median(times).toFixed(0)} ms over ${times.length} runs`);
}

// ---- the soak: hostile clients beside a normal load ----

async function soak() {
  const conns = 32;
  for (const store of opts.engines) {
    if (!engineAvailable(store)) {
      report.notes.push(`soak: STORE=${store} skipped: Node.js ${process.version} cannot run it (npm run bench runs the pinned Node 24)`);
      continue;
    }
    const seedDir = join(runDir, `soak-seed-${store}`);
    progress(`soak ${store}: seeding...`);
    const ids = seedDataDir(seedDir, store);
    // as in a 1 GiB container, where the issue saw the process killed
    const start = (name, dir, env) => startApi({ name, dataDir: dir, env: { MEMORY_LIMIT: '1gb', ...env } });
    report.soak.push(...(await soakEngine({ store, seedDir, ids, start, conns, warmupMs: opts.warmupMs, durationMs: opts.durationMs * 2, progress, workDir: runDir })));
  }
}

// ---- selection ----

const scenarios = [
  ...loadScenarios.map((sc) => ({ name: sc.name, run: () => runLoadScenario(sc) })),
  { name: 'fsync', run: rawFsync },
  { name: 'cold-start', run: coldStart },
  { name: 'replay', run: replay },
  { name: 'list-scale', run: listScale },
  { name: 'soak', run: soak },
  // the engines against each other (bench/engines.mjs)
  ...engineScenarios({ opts, progress, report, runDir: () => runDir, start, startApi, runLoadScenario, dataSet, scenario: (name) => loadScenarios.find((sc) => sc.name === name), seedLists, createRequest }),
  ...conversationScenarios({ opts, report, progress, runDir: () => runDir, track: (p) => live.add(p) }),
  // the live feed's measurements (bench/live.mjs), reported in a section of their own
  { name: 'live', run: async () => sections.push(await (await import('./live.mjs')).liveReport({ subscribers: quick ? 2000 : 10_000, throughputSubscribers: 1000, writes: quick ? 50 : 200, ...opts, postgres: true }, progress)) },
];
const sections = [];
const groups = {
  reads: ['get', 'list-user', 'list-project', 'providers'],
  list: ['list-user', 'list-project'],
  search: ['search-rare', 'search-common', 'search-prefix'],
  create: ['create-1', 'create-16', 'create-64', 'fsync'],
  writes: ['create-1', 'create-16', 'create-64', 'fsync', 'update', 'turn'],
  scale: ['replay', 'list-scale'],
  startup: ['cold-start', 'replay'],
  hostile: ['soak'],
  ...ENGINE_GROUPS,
  ...conversationGroups,
};

if (has('help') || has('h')) {
  process.stdout.write(`${HELP.replace('%SCENARIOS%', scenarios.map((s) => s.name).join(' ')).replace('%OPTIN%', scenarios.filter((s) => s.optIn).map((s) => s.name).join(' ')).replace('%GROUPS%', Object.entries(groups).map(([g, l]) => `${g} (${l.join(' ')})`).join(', '))}\n`);
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

// ---- the report ----

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
  if (big) {
    const exact = big.sessions === 1_000_000;
    add(`replay of ${big.label} < 10 s${exact ? '' : ' (target is for 1M; smaller set measured)'}`, `${(big.startMs / 1000).toFixed(1)} s to /healthz (replay ${(big.replayMs / 1000).toFixed(1)} s)`, exact ? big.startMs < 10_000 : undefined);
    add(`RSS with ${big.label} < 2.5 GiB`, `${(big.rssMiB / 1024).toFixed(2)} GiB (peak ${(big.peakMiB / 1024).toFixed(2)} GiB)`, exact ? big.rssMiB < 2560 : undefined);
  }
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

function render(wallSeconds) {
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
    L.push("Journal fsyncs from the server's /metrics over the measured windows: concurrent writes share one fsync (group commit).", '');
    L.push('| scenario | req/s | fsync/s | writes per fsync | compactions |', '|---|---:|---:|---:|---:|');
    for (const r of writes) {
      const name = r.label === 'server' ? r.title : `${r.title}: ${r.label}`;
      L.push(`| ${name} | ${int(r.rps)} | ${int(r.fsyncRate)} | ${r.fsyncRate > 0 ? (r.rps / r.fsyncRate).toFixed(1) : '–'} | ${r.compactions} |`);
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
    L.push('## Start-up and scale', '');
    L.push('Data directories generated by bench/datagen.mjs in the journal format (page cache warm). Start: spawn of `node dist/server.js` to its first /healthz 200; replay: the `ms` of its "journal replayed" log line; RSS (VmRSS) once serving, peak = VmHWM.', '');
    L.push('| data set | journal MiB | generated in s | runs | start → /healthz s | replay s | RSS MiB | peak RSS MiB |', '|---|---:|---:|---:|---:|---:|---:|---:|');
    for (const s of report.startup) {
      L.push(`| ${s.label} | ${int(s.bytes / 2 ** 20)} | ${(s.genMs / 1000).toFixed(1)} | ${s.runs} | ${(s.startMs / 1000).toFixed(2)} | ${(s.replayMs / 1000).toFixed(2)} | ${int(s.rssMiB)} | ${int(s.peakMiB)} |`);
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
    L.push(`Each row: a fresh server on a copy of one seeded data set (64 users with 10 sessions of 5 turns, a user with 30,000 sessions, a project of 30,000 sessions, a session of 64 turns of 1000 KiB), the normal load alone (32 connections: each a user reading its sessions, its list and a page of turns of each, and writing a 1 KiB turn every fourth request), then the same load beside the hostile client. p99 of the normal load; peak RSS = the server's VmHWM over both runs. Servers run with \`MEMORY_LIMIT=1gb\`, as in a 1 GiB container. Ratios are the figures to compare across runs; the machine is shared.`, '');
    L.push('| engine | hostile client (#16 item) | normal p99 alone ms | normal p99 beside it ms | ratio | normal req/s alone → beside | normal errors | the hostile client got | server peak RSS MiB |', '|---|---|---:|---:|---:|---|---:|---|---:|');
    for (const r of report.soak) {
      L.push(`| ${r.store} | ${r.kind} (${r.item}): ${r.what} | ${ms(r.p99Alone)} | ${ms(r.p99Under)} | ${(r.p99Under / r.p99Alone).toFixed(1)} | ${int(r.rpsAlone)} → ${int(r.rpsUnder)} | ${r.errorsUnder} | ${r.hostile} | ${int(r.peakMiB)} |`);
    }
    L.push('');
  }
  L.push(...renderEngines());
  L.push(...renderConversations(report));
  const t = [...targets(), ...engineTargets()];
  if (t.length > 0) L.push('## Targets', '', '| target | measured | met |', '|---|---|---|', ...t, '');
  for (const section of sections) L.push(section, '');
  for (const p of report.profiles) L.push(`## CPU profile: ${p.name}`, '', p.table, '');
  if (report.notes.length > 0) L.push('## Notes', '', ...report.notes.map((n) => `- ${n}`), '');
  return L.join('\n');
}

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
runDir = mkdtempSync(join(tmpdir(), 'csa-bench-'));
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
