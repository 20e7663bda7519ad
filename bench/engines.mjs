// The storage engines against each other (issues #11 and #12), registered by scenarios.mjs;
// measure.mjs owns the load runner and the report: the same requests against the sqlite and
// PostgreSQL servers, interleaved round by round with the baseline in one run, sqlite the
// reference row; sqlite holding a million sessions; PostgreSQL with group commit switched off,
// and two instances on one database. Both engines run on the oldest supported Node.js at hand
// (NODE_OLDEST). PostgreSQL is a private cluster (test/pg/cluster.mjs) with durable settings,
// started on the first scenario that needs it; without PostgreSQL those scenarios are skipped
// with one loud line. (The journal's rows and `journal-seam` went with the journal: see the
// note at the top of bench/README.md.)
import { spawnSync } from 'node:child_process';
import { closeSync, fdatasyncSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { findPostgresBin, startCluster } from '../test/pg/cluster.mjs';
import { api, cpuSecondsOf, logLines, median, memoryOf, NODE_OLDEST, nodeVersion, token } from './common.mjs';
import { PER_LIST, PROVIDER, sessionOf, usersOf } from './datagen.mjs';
import { buildRequest, runLoad } from './loadgen.mjs';
import { buildOf, commitOf } from './builds.mjs';

const READ_CONNS = 50;
const WRITE_CONNS = 64;

// what this file adds to the report, rendered by renderEngines() and engineTargets()
const rows = []; // load rows, as measure.mjs's runLoadScenario makes them
const scale = []; // start-up and memory at scale
const references = new Map(); // scenario -> the label its other rows are compared with
let ctx; // the runner, report and options of measure.mjs and options.mjs (engineScenarios)

const v = (bin) => nodeVersion(bin).replace(/^v/, '');
const SQLITE = () => `sqlite, Node ${v(NODE_OLDEST)}`;
const POSTGRES = () => `postgres, Node ${v(NODE_OLDEST)}`;
const PG_NO_GROUP = () => `postgres, GROUP_COMMIT=off (one INSERT and COMMIT per request), Node ${v(NODE_OLDEST)}`;
const PG_ONE = () => `one instance, Node ${v(NODE_OLDEST)}`;
const PG_TWO = () => `two instances on one database, Node ${v(NODE_OLDEST)}`;
// a quota set far above what a run makes: every write checks it, none is refused
const QUOTA_ON = { QUOTA_SESSIONS: '1000000000' };
const PG_ONE_QUOTA = () => `one instance, QUOTA_SESSIONS set (never reached), Node ${v(NODE_OLDEST)}`;
const PG_TWO_QUOTA = () => `two instances on one database, QUOTA_SESSIONS set (never reached), Node ${v(NODE_OLDEST)}`;

export const ENGINE_GROUPS = {
  engines: ['engine-get', 'engine-list-user', 'engine-list-project', 'engine-list-page', 'engine-create-64', 'sqlite-scale', 'pg-group-commit', 'pg-instances', 'pg-quota'],
  sqlite: ['engine-get', 'engine-list-user', 'engine-list-project', 'engine-list-page', 'engine-create-64', 'sqlite-scale', 'peer-sqlite'],
  postgres: ['engine-get', 'engine-list-user', 'engine-list-project', 'engine-list-page', 'engine-create-64', 'pg-group-commit', 'pg-instances', 'pg-quota', 'peer-pg'],
};

/**
 * The scenarios, given scenarios.mjs's context: {opts, progress, report, runDir(), start, startApi,
 * runLoadScenario, dataSet, scenario(name), seedLists, createRequest}.
 */
export function engineScenarios(context) {
  ctx = context;
  const load = (sc, reference) => {
    references.set(sc.name, reference);
    return ctx.runLoadScenario(sc, rows);
  };
  const like = (name, extra) => {
    const base = ctx.scenario(name);
    return { ...base, request: base.request ?? (() => ctx.createRequest(base.conns)), ...extra };
  };
  const engines = (name) => () => load(like(name, { name: `engine-${name}`, targets: lineup() }), SQLITE());
  return [
    { name: 'engine-get', run: engines('get') },
    { name: 'engine-list-user', run: engines('list-user') },
    { name: 'engine-list-project', run: engines('list-project') },
    {
      // the same list as a page (`limit` given): read on the engine's shared connection, where a whole list takes a snapshot of its own
      name: 'engine-list-page',
      run: () =>
        load(
          like('list-user', {
            name: 'engine-list-page',
            title: "GET /chat-sessions?limit=50 (a user's 50, as a page)",
            targets: lineup(),
            request: () => buildRequest('GET', '/api/v1/chat-sessions?limit=50', { headers: { authorization: `Bearer ${token('bench-user-0')}` } }),
          }),
          SQLITE(),
        ),
    },
    { name: 'engine-create-64', run: withDisk('engine-create-64', engines('create-64')) },
    { name: 'sqlite-scale', run: sqliteScale },
    {
      name: 'pg-group-commit',
      run: async () => {
        if (!(await postgres())) return;
        await withDisk('pg-group-commit', () =>
          load(like('create-64', { name: 'pg-group-commit', targets: [pgTarget(POSTGRES()), pgTarget(PG_NO_GROUP(), { env: { GROUP_COMMIT: 'off' } })] }), POSTGRES()),
        )();
      },
    },
    {
      name: 'pg-instances',
      run: async () => {
        if (!(await postgres())) return;
        const targets = () => [pgTarget(PG_ONE()), pgTarget(PG_TWO(), { instances: 2 })];
        await load(like('get', { name: 'pg-instances-get', targets: targets() }), PG_ONE());
        await load(like('create-64', { name: 'pg-instances-create-64', targets: targets() }), PG_ONE());
      },
    },
    {
      // what a quota costs a create on PostgreSQL (issue 31): the group locks its owners and reads
      // their usage; one client, 64 over 5,000 users, then 64 all one user (whose groups on two
      // instances wait for each other); with --quota-base, the quota set on that build too
      name: 'pg-quota',
      run: async () => {
        if (!(await postgres())) return;
        const base = ctx.opts.quotaBase === undefined ? undefined : commitOf(ctx.opts.quotaBase);
        const server = base === undefined ? undefined : buildOf(base, ctx.progress);
        const at = (label) => (base === undefined ? label : `${label.replace(/, Node .*$/, '')}, build ${base.slice(0, 7)}`);
        const one = () => [pgTarget(PG_ONE()), pgTarget(PG_ONE_QUOTA(), { env: QUOTA_ON }), ...(server === undefined ? [] : [pgTarget(at(PG_ONE_QUOTA()), { env: QUOTA_ON, server })])];
        const targets = () => [
          ...one(),
          pgTarget(PG_TWO(), { instances: 2 }),
          pgTarget(PG_TWO_QUOTA(), { instances: 2, env: QUOTA_ON }),
          ...(server === undefined ? [] : [pgTarget(at(PG_TWO_QUOTA()), { instances: 2, env: QUOTA_ON, server })]),
        ];
        await withDisk('pg-quota-create-1', () => load(like('create-1', { name: 'pg-quota-create-1', targets: one() }), PG_ONE()))();
        await withDisk('pg-quota-create-64', () => load(like('create-64', { name: 'pg-quota-create-64', targets: targets() }), PG_ONE()))();
        const oneUser = () => {
          const headers = { authorization: `Bearer ${token('quota-user')}` };
          return (c, seq) => buildRequest('POST', '/api/v1/chat-sessions', { headers, body: { projectId: 'project-q', providerId: PROVIDER, selectedModel: 'gpt-4o', name: `Session ${c}-${seq}` } });
        };
        await withDisk('pg-quota-create-64-one-user', () =>
          load(like('create-64', { name: 'pg-quota-create-64-one-user', title: 'POST /chat-sessions, 64 clients, all one user', targets: targets(), request: oneUser }), PG_ONE()),
        )();
      },
    },
  ];
}

/**
 * The engines side by side: sqlite (the reference), sqlite as --before built it, and postgres
 * when installed (unless --engines names only others).
 */
function lineup() {
  const t = [{ label: SQLITE(), node: NODE_OLDEST, env: { STORE: 'sqlite' } }];
  const before = beforeLabel();
  if (before !== undefined) t.push({ label: before, node: NODE_OLDEST, env: { STORE: 'sqlite' }, server: buildOf(commitOf(ctx.opts.before), ctx.progress) });
  if ((ctx.opts.enginesNamed?.includes('postgres') ?? true) && postgresInstalled()) t.push(pgTarget(POSTGRES()));
  return t;
}

/** The label of the --before row, or undefined without one. */
function beforeLabel() {
  return ctx.opts.before === undefined ? undefined : `sqlite as ${commitOf(ctx.opts.before).slice(0, 7)} built it, Node ${v(NODE_OLDEST)}`;
}

// ---- the disk ----

/**
 * The disk's rate of small appends + fdatasync right now (one writer, 0.5 s, in the run's
 * directory, the filesystem of the data and of the cluster). What one durable commit costs moves
 * with the rest of the machine's I/O, and the worth of group commit with it.
 */
function diskProbe() {
  const file = join(ctx.runDir(), 'disk-probe');
  const fd = openSync(file, 'w');
  const line = Buffer.alloc(300, 'x');
  const lat = [];
  const t0 = performance.now();
  let now = t0;
  try {
    while (now - t0 < 500) {
      writeSync(fd, line);
      fdatasyncSync(fd);
      const t = performance.now();
      lat.push(t - now);
      now = t;
    }
  } finally {
    closeSync(fd);
    rmSync(file, { force: true });
  }
  lat.sort((a, b) => a - b);
  return `${Math.round(lat.length / ((now - t0) / 1000))}/s (p50 ${ms(lat[lat.length >> 1])} ms, p99 ${ms(lat[Math.floor(lat.length * 0.99)])} ms)`;
}

/** `run` with the disk's fdatasync rate measured just before and just after it, in the report's notes. */
function withDisk(name, run) {
  return async () => {
    const before = diskProbe();
    try {
      await run();
    } finally {
      ctx.report.notes.push(`${name}: the disk's small append + fdatasync, one writer, just before: ${before}; just after: ${diskProbe()}.`);
    }
  };
}

// ---- PostgreSQL ----

let pg; // {cluster} once started, {missing} when it cannot be
let schemas = 0;

function postgresInstalled() {
  if (pg?.missing !== undefined) return false;
  const missing = [];
  if (findPostgresBin() === undefined) missing.push('PostgreSQL (initdb, postgres, psql under /usr/lib/postgresql/*/bin, $PG_BIN or PATH)');
  if (spawnSync('openssl', ['version']).status !== 0) missing.push('openssl (the test cluster makes its certificates with it)');
  if (missing.length === 0) return true;
  pg = { missing: `${missing.join(' and ')} not found` };
  process.stderr.write(`\n*** ${pg.missing}: the postgres scenarios and rows are SKIPPED (apt-get install -y postgresql openssl) ***\n\n`);
  ctx.report.notes.push(`**PostgreSQL skipped**: ${pg.missing}.`);
  return false;
}

/** The private cluster, started on first need; undefined when PostgreSQL is not installed (bench/peers.mjs shares it). */
export async function postgresCluster() {
  return postgres();
}

export async function postgres() {
  if (!postgresInstalled()) return undefined;
  if (pg === undefined) {
    ctx.progress('starting a private PostgreSQL cluster (fsync, synchronous_commit and full_page_writes on)...');
    const cluster = await startCluster({
      settings: {
        // durable, as a production server would be (the harness's defaults are for tests)
        fsync: 'on',
        synchronous_commit: 'on',
        full_page_writes: 'on',
        // PostgreSQL's own default; the harness's 32MB is for tests
        shared_buffers: "'128MB'",
        max_connections: 100,
        // BENCH_PG_STATEMENTS=1: what each statement costs (the replies scenario reports its statements per token)
        ...(process.env.BENCH_PG_STATEMENTS === '1' ? { shared_preload_libraries: "'pg_stat_statements'", 'pg_stat_statements.track_utility': 'on' } : {}),
      },
    });
    const version = await cluster.psql('SHOW server_version');
    if (process.env.BENCH_PG_STATEMENTS === '1') await cluster.psql('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
    pg = { cluster, version };
    ctx.report.notes.push(
      `PostgreSQL ${version}: a private cluster (test/pg/cluster.mjs) on this machine, TCP on 127.0.0.1 without TLS, fsync, synchronous_commit and full_page_writes on, shared_buffers 128MB; each postgres target has a schema of its own (DATABASE_SCHEMA), DATABASE_POOL_SIZE 10 per instance. Its CPU (the postmaster and its backends) is the "db" share of the CPU column.`,
    );
  }
  return pg.cluster;
}

/** Stops the cluster, if one was started (run.mjs calls it at the end of the run). */
export async function stopEngines() {
  const cluster = pg?.cluster;
  pg = undefined;
  await cluster?.destroy();
}

/** CPU seconds of the postmaster and its children (the backends serving the pools). */
export function clusterCpu(cluster) {
  const root = cluster.pid;
  let children = [];
  try {
    children = readFileSync(`/proc/${root}/task/${root}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    // no children file: the postmaster's own time only
  }
  return [root, ...children].reduce((sum, pid) => sum + (cpuSecondsOf(pid) || 0), 0);
}

/** A target of `instances` servers with STORE=postgres on one fresh schema, sharing the load. */
export function pgTarget(label, { instances = 1, env = {}, server } = {}) {
  return {
    label,
    start: async () => {
      const cluster = await postgres();
      const schema = `bench_${++schemas}`;
      const members = [];
      try {
        for (let i = 0; i < instances; i++) {
          // one after the other: the first creates the schema
          members.push(
            await ctx.startApi({
              name: `postgres-${schema}-${i + 1}`,
              node: NODE_OLDEST,
              ...(server === undefined ? {} : { server }),
              env: { STORE: 'postgres', DATABASE_URL: cluster.url('postgres'), DATABASE_SCHEMA: schema, DATABASE_POOL_SIZE: '10', ...env },
            }),
          );
        }
      } catch (e) {
        await Promise.all(members.map((m) => m.stop()));
        throw e;
      }
      return {
        pid: members[0].pid,
        port: members[0].port,
        api: true,
        members,
        window: () => {
          const a = clusterCpu(cluster);
          return () => {
            const b = clusterCpu(cluster);
            return (seconds) => ({ dbCpu: (b - a) / seconds });
          };
        },
        stop: async () => {
          for (const m of members) await m.stop();
        },
      };
    },
  };
}

// ---- sqlite at scale ----

/**
 * What a server answers about the data set, to compare engines: counts from /metrics, a few
 * sessions by id (body and ETag), a user's and a project's list, a session's turns.
 */
async function fingerprint(port, sessions, turns) {
  const shape = { sessions, turns };
  const auth = token('reader-0');
  const metric = (text, name) => Number(new RegExp(`^${name} (\\d+)`, 'm').exec(text)?.[1] ?? NaN);
  const m = (await api(port, 'GET', '/metrics')).text;
  const out = { sessions: metric(m, 'chat_session_api_sessions'), turns: metric(m, 'chat_session_api_turns'), storeBytes: metric(m, 'chat_session_api_store_bytes'), answers: [] };
  const ask = async (path, as = auth) => {
    const r = await api(port, 'GET', path, { auth: as });
    out.answers.push(`${path} ${r.status} ${r.headers.etag ?? ''} ${r.text}`);
    return r;
  };
  for (const i of [0, 1, Math.floor(sessions / 2), sessions - 1]) {
    const r = await ask(`/api/v1/chat-sessions/${sessionOf(i, shape).id}`);
    if (r.status !== 200) throw new Error(`GET session ${i}: ${r.status} ${r.text.slice(0, 200)}`);
  }
  const list = await ask('/api/v1/chat-sessions', token('user-0'));
  if (list.body?.data?.length !== PER_LIST) throw new Error(`user-0's list: ${list.status}, ${list.body?.data?.length} items (expected ${PER_LIST})`);
  await ask('/api/v1/chat-sessions?projectId=project-1');
  const t = await ask(`/api/v1/chat-sessions/${sessionOf(0, shape).id}/turns`);
  if (t.status !== 200) throw new Error(`turns of session 0: ${t.status} ${t.text.slice(0, 200)}`);
  return out;
}

/** A read load over the whole data set: sessions by id, users' lists and sessions' turns, spread at random. */
function readLoad(sessions) {
  const shape = { sessions, turns: 0 }; // ids only
  const users = usersOf(sessions);
  let seed = 12345;
  const rand = (n) => {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
    return seed % n;
  };
  const reader = { authorization: `Bearer ${token('reader-0')}` };
  const pool = [];
  for (let n = 0; n < 3000; n++) {
    const i = rand(sessions);
    if (n % 3 === 0) pool.push(buildRequest('GET', `/api/v1/chat-sessions/${sessionOf(i, shape).id}`, { headers: reader }));
    else if (n % 3 === 1) pool.push(buildRequest('GET', '/api/v1/chat-sessions', { headers: { authorization: `Bearer ${token(`user-${rand(users)}`)}` } }));
    else pool.push(buildRequest('GET', `/api/v1/chat-sessions/${sessionOf(i, shape).id}/turns`, { headers: reader }));
  }
  return (c, seq) => pool[(c * 61 + seq) % pool.length];
}

/**
 * Start-up (spawn to the first /healthz 200, and the engine's own open time from its log) and
 * memory of one engine on a data set; the last start also serves the read load, and its RSS
 * after that is the figure. The first start's answers are returned for the comparison.
 */
async function startAndServe({ engine, label, node, env = {}, dir, sessions, turns, runs, openLine, fileBytes, genMs }) {
  const samples = [];
  let answers;
  let served;
  for (let i = 0; i < runs; i++) {
    const p = await ctx.startApi({ name: `scale-${engine}`, node, dataDir: dir, env });
    let atStart;
    try {
      atStart = memoryOf(p.pid);
      if (i === 0) answers = await fingerprint(p.port, sessions, turns);
      if (i === runs - 1) {
        const seconds = ctx.opts.quick ? 2 : 5;
        const r = await runLoad({ port: p.port, connections: READ_CONNS, warmupMs: 0, durationMs: seconds * 1000, request: readLoad(sessions) });
        served = { rps: r.rps, errors: r.errors, firstError: r.firstError, seconds, ...memoryOf(p.pid) };
      }
    } finally {
      await p.stop();
    }
    // read once the server has stopped: its log is flushed at exit, not line by line
    const opened = logLines(p.logFile, openLine).at(-1);
    samples.push({ startMs: p.startMs, openMs: opened?.ms ?? NaN, rssStartMiB: atStart.rssMiB });
    ctx.progress(`${label}: start ${p.startMs.toFixed(0)} ms to /healthz (open ${opened?.ms} ms), RSS ${atStart.rssMiB.toFixed(0)} MiB${served && i === runs - 1 ? `; after ${served.seconds} s of reads (${served.rps.toFixed(0)}/s) RSS ${served.rssMiB.toFixed(0)} MiB, peak ${served.peakMiB.toFixed(0)}` : ''}`);
  }
  scale.push({
    engine,
    label,
    dataLabel: `${fmt(sessions)} sessions + ${fmt(turns)} turns of 1 KiB`,
    sessions,
    fileBytes,
    genMs,
    runs,
    startMs: median(samples.map((s) => s.startMs)),
    openMs: median(samples.map((s) => s.openMs)),
    rssStartMiB: median(samples.map((s) => s.rssStartMiB)),
    ...served,
  });
  return answers;
}

const fmt = (n) => (n >= 1e6 && n % 1e6 === 0 ? `${n / 1e6}M` : n >= 1e3 && n % 1e3 === 0 ? `${n / 1e3}k` : String(n));

async function sqliteScale() {
  const sessions = ctx.opts.scale;
  const turns = 2 * sessions;
  const sqlite = ctx.dataSet(sessions, turns);
  const s = await startAndServe({ engine: 'sqlite', label: SQLITE(), node: NODE_OLDEST, env: { STORE: 'sqlite' }, dir: sqlite.dir, sessions, turns, runs: 3, openLine: 'sqlite store opened', fileBytes: sqlite.bytes, genMs: sqlite.genMs });
  // the server reports what was generated
  const want = { sessions, turns, storeBytes: sqlite.storeBytes };
  for (const k of Object.keys(want)) if (s[k] !== want[k]) throw new Error(`the sqlite server reports ${k} = ${s[k]}, the data set has ${want[k]}`);
  ctx.report.notes.push(
    `sqlite-scale: the sqlite file was checked through the engine (counters, usage rows, versions) and then through the server: /metrics counts ${sessions} sessions, ${turns} turns and ${want.storeBytes} JSON bytes, and ${s.answers.length} answers (sessions by id, a user's and a project's list, a session's turns) were read.`,
  );
}

// ---- the report ----

const num = (x, d = 0) => (x === undefined || Number.isNaN(x) ? '–' : x.toLocaleString('en-US', { minimumFractionDigits: d, maximumFractionDigits: d }));
const ms = (x) => (x === undefined || Number.isNaN(x) ? '–' : x < 10 ? x.toFixed(2) : x.toFixed(1));
const pct = (x) => (x === undefined || Number.isNaN(x) ? '–' : String(Math.round(x * 100)));
const row = (scenario, label) => rows.find((r) => r.scenario === scenario && r.label === label);
const reference = (r) => row(r.scenario, references.get(r.scenario));

/**
 * a's req/s over b's, round by round (the two ran within seconds of each other, under the same
 * load from the rest of the machine): the median of those ratios, and their lowest and highest.
 */
function paired(a, b, field = 'rounds') {
  if (a === undefined || b === undefined) return undefined;
  const ratios = a[field].map((x, i) => x / b[field][i]).sort((p, q) => p - q);
  return { median: median(ratios), min: ratios[0], max: ratios.at(-1), rounds: ratios.length };
}
const spread = (p) => (p.rounds > 1 ? ` (${p.min.toFixed(2)}–${p.max.toFixed(2)})` : '');

/** The report's sections for these scenarios (Markdown lines). */
export function renderEngines() {
  const L = [];
  if (rows.length > 0) {
    L.push('## Engines', '');
    L.push(
      "Same requests, same rounds: the baseline, then each target, round after round. **× first row**: req/s over the req/s of the scenario's first row (sqlite, one PostgreSQL instance, or group commit on), round by round: the median of the rounds' ratios, and in brackets the lowest and highest. CPU: share of one core of the server(s) / the PostgreSQL cluster / the load generator. Writes per commit: from the servers' commit counters. Event-loop delay: p99 over the measured windows of the servers' `nodejs_eventloop_delay_seconds` (a 10 ms timer's lateness; interpolated within its bucket, as Prometheus does).",
      '',
    );
    L.push('| scenario | target | conns | req/s | × first row | × baseline | p50 ms | p99 ms | errors | CPU % server/db/gen | main thread µs/req (busy %) | writes per commit | event-loop delay p99 ms |');
    L.push('|---|---|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---:|');
    for (const r of rows) {
      const ref = paired(r, reference(r));
      const errors = r.errors === 0 ? '0' : `${r.errors} (${r.firstError ?? ''})`;
      const wpc = r.fsyncRate > 0 ? (r.rps / r.fsyncRate).toFixed(1) : '–';
      const eld = r.eldSamples > 0 ? ms(r.eldP99 * 1000) : '–';
      L.push(
        `| \`${r.scenario}\` ${r.title} | ${r.label} | ${r.conns} | ${num(r.rps)} | ${ref === undefined ? '–' : `${ref.median.toFixed(2)}${spread(ref)}`} | ${r.ratio.toFixed(2)} | ${ms(r.p50)} | ${ms(r.p99)} | ${errors} | ${pct(r.targetCpu)}/${pct(r.dbCpu)}/${pct(r.loadgenCpu)} | ${r.mainUs.toFixed(1)} (${pct(r.mainBusy)}) | ${wpc} | ${eld} |`,
      );
    }
    L.push('');
  }
  if (scale.length > 0) {
    L.push('## sqlite at scale', '');
    L.push(
      'A data set written as a sqlite file (bench/datagen-sqlite.mjs), page cache warm. Start: spawn to the first /healthz 200 (median of the runs); open: the engine\'s own log line (sqlite store opened). RSS after reads: once the last start has served a read load (50 connections: sessions by id, users\' lists and sessions\' turns, at random over the whole set); peak = VmHWM.',
      '',
    );
    L.push('| engine | data set | file MiB | generated in s | runs | start → /healthz s | open s | RSS at start MiB | read load req/s (errors) | RSS after reads MiB | peak RSS MiB |');
    L.push('|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
    for (const s of scale) {
      L.push(
        `| ${s.label} | ${s.dataLabel} | ${num(s.fileBytes / 2 ** 20)} | ${(s.genMs / 1000).toFixed(1)} | ${s.runs} | ${(s.startMs / 1000).toFixed(2)} | ${(s.openMs / 1000).toFixed(2)} | ${num(s.rssStartMiB)} | ${num(s.rps)} (${s.errors}) | ${num(s.rssMiB)} | ${num(s.peakMiB)} |`,
      );
    }
    L.push('');
  }
  return L;
}

/** Rows of the report's targets table: `| target | measured | met |`. */
export function engineTargets() {
  const out = [];
  const add = (what, measured, met) => out.push(`| ${what} | ${measured} | ${met === undefined ? '–' : met ? 'yes' : '**no**'} |`);
  const versus = (scenario, label, refLabel) => paired(row(scenario, label), row(scenario, refLabel));
  const x2 = (p) => `${p.median.toFixed(2)}${spread(p)}`;
  // #11's ratios were to the journal, retired: sqlite's rows are the reference now, their ratio to the baseline the figure to follow
  for (const [scenario, what] of [
    ['engine-get', 'GET by id'],
    ['engine-list-user', "list of 50 (a user's)"],
    ['engine-list-project', "list of 50 (a project's)"],
    ['engine-list-page', "list of 50 (a user's) as a page, `limit=50`"],
    ['engine-create-64', 'durable create, 64 clients'],
  ]) {
    const r = row(scenario, SQLITE());
    if (r !== undefined) add(`#11 sqlite, ${what}: × the baseline (no target since the journal, its reference, was retired)`, `${r.ratio.toFixed(2)}: ${num(r.rps)} req/s, main thread ${r.mainUs.toFixed(1)} µs/req`);
  }
  // #28: sqlite carries the headline
  const before = beforeLabel();
  const get = row('engine-get', SQLITE());
  if (get !== undefined) {
    const x = paired(get, get.base);
    add('#28 sqlite, GET by id ≥ 0.85 × bare node:http (the baseline; the rounds\' paired ratios)', `${x2(x)}: ${num(get.rps)} against ${num(get.base.rps)} req/s; main thread ${get.mainUs.toFixed(1)} µs/req`, x.median >= 0.85);
    const old = before === undefined ? undefined : row('engine-get', before);
    if (old !== undefined) add(`#28 sqlite, GET by id: ${before}`, `${x2(paired(old, old.base))} × the baseline; main thread ${old.mainUs.toFixed(1)} µs/req`);
  }
  const page = before === undefined ? undefined : versus('engine-list-page', SQLITE(), before);
  if (page !== undefined) {
    const mainUs = (label) => row('engine-list-page', label).mainUs.toFixed(1);
    add(`#28 sqlite, a user's page of 50 ≥ 2 × ${before}`, `${x2(page)}; main thread ${mainUs(before)} → ${mainUs(SQLITE())} µs/req`, page.median >= 2);
  }
  const creates = row('engine-create-64', SQLITE());
  if (creates !== undefined) {
    add('#11 sqlite: event-loop delay p99 < 10 ms while creates run (64 clients)', creates.eldSamples > 0 ? `${ms(creates.eldP99 * 1000)} ms over ${creates.eldSamples} samples` : 'not measured', creates.eldSamples > 0 ? creates.eldP99 < 0.01 : undefined);
  }
  const sqs = scale.find((s) => s.engine === 'sqlite');
  if (sqs !== undefined) {
    const exact = sqs.sessions === 1_000_000;
    const note = exact ? '' : ' (target is for 1M + 2M; a smaller set measured)';
    add(`#11 sqlite with ${sqs.dataLabel}: start < 1 s${note}`, `${(sqs.startMs / 1000).toFixed(2)} s to /healthz`, exact ? sqs.startMs < 1000 : undefined);
    add(`#11 sqlite with ${sqs.dataLabel}: RSS < 300 MiB serving reads${note}`, `${num(sqs.rssMiB)} MiB after ${sqs.seconds} s of reads, peak ${num(sqs.peakMiB)}`, exact ? sqs.rssMiB < 300 : undefined);
  }
  for (const [scenario, what] of [
    ['engine-create-64', 'durable create, 64 clients'],
    ['engine-get', 'GET by id'],
    ['engine-list-user', "list of 50 (a user's)"],
    ['engine-list-project', "list of 50 (a project's)"],
    ['engine-list-page', "list of 50 (a user's) as a page"],
  ]) {
    const x = versus(scenario, POSTGRES(), SQLITE());
    if (x !== undefined) add(`#12 postgres ÷ sqlite, ${what} (no target)`, `${x2(x)}: ${num(row(scenario, POSTGRES()).rps)} against ${num(row(scenario, SQLITE()).rps)} req/s`);
  }
  const gc = versus('pg-group-commit', POSTGRES(), PG_NO_GROUP());
  if (gc !== undefined) add('#12 postgres group commit ÷ GROUP_COMMIT=off, durable create at 64 clients ≥ 3', `${x2(gc)}: ${num(row('pg-group-commit', POSTGRES()).rps)} against ${num(row('pg-group-commit', PG_NO_GROUP()).rps)} creates/s`, gc.median >= 3);
  for (const [scenario, what] of [
    ['pg-instances-get', 'GET by id'],
    ['pg-instances-create-64', 'durable create, 64 clients'],
  ]) {
    const x = versus(scenario, PG_TWO(), PG_ONE());
    if (x !== undefined) add(`#12 postgres, two instances on one database ÷ one instance, ${what} (no target)`, x2(x));
  }
  return out;
}
