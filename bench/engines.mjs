// The storage engines against each other (issues #11 and #12), registered by scenarios.mjs;
// measure.mjs owns the load runner and the report: the same requests against the journal, sqlite and
// PostgreSQL servers, interleaved round by round with the baseline in one run; sqlite and the
// journal holding a million sessions; PostgreSQL with group commit switched off, and two instances
// on one database (builds of other commits against each other: bench/builds.mjs). Each engine
// runs on the Node.js it needs: the journal and postgres on the oldest
// supported (NODE_OLDEST), sqlite on the pinned Node 24; the journal also runs on Node 24 as a
// reference row, so what belongs to the runtime and what to the engine can be told apart.
// PostgreSQL is a private cluster (test/pg/cluster.mjs) with durable settings, started on the
// first scenario that needs it; without PostgreSQL those scenarios are skipped with one loud line.
import { execFileSync, spawnSync } from 'node:child_process';
import { closeSync, existsSync, fdatasyncSync, mkdirSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findPostgresBin, startCluster } from '../test/pg/cluster.mjs';
import { api, cpuSecondsOf, logLines, median, memoryOf, NODE_24, NODE_OLDEST, nodeVersion, ROOT, token } from './common.mjs';
import { PER_LIST, sessionOf, usersOf } from './datagen.mjs';
import { buildRequest, runLoad } from './loadgen.mjs';

const READ_CONNS = 50;
const WRITE_CONNS = 64;

// what this file adds to the report, rendered by renderEngines() and engineTargets()
const rows = []; // load rows, as measure.mjs's runLoadScenario makes them
const scale = []; // start-up and memory at scale
const references = new Map(); // scenario -> the label its other rows are compared with
let ctx; // the runner, report and options of measure.mjs and options.mjs (engineScenarios)

const v = (bin) => nodeVersion(bin).replace(/^v/, '');
const JOURNAL = () => `journal, Node ${v(NODE_OLDEST)}`;
const JOURNAL_24 = () => `journal, Node ${v(NODE_24)}`;
const SQLITE = () => `sqlite, Node ${v(NODE_24)}`;
const POSTGRES = () => `postgres, Node ${v(NODE_OLDEST)}`;
const PG_NO_GROUP = () => `postgres, GROUP_COMMIT=off (one INSERT and COMMIT per request), Node ${v(NODE_OLDEST)}`;
const PG_ONE = () => `one instance, Node ${v(NODE_OLDEST)}`;
const PG_TWO = () => `two instances on one database, Node ${v(NODE_OLDEST)}`;

export const ENGINE_GROUPS = {
  engines: ['engine-get', 'engine-list-user', 'engine-list-project', 'engine-list-page', 'engine-create-64', 'sqlite-scale', 'pg-group-commit', 'pg-instances'],
  sqlite: ['engine-get', 'engine-list-user', 'engine-list-project', 'engine-list-page', 'engine-create-64', 'sqlite-scale', 'peer-sqlite'],
  postgres: ['engine-get', 'engine-list-user', 'engine-list-project', 'engine-list-page', 'engine-create-64', 'pg-group-commit', 'pg-instances', 'peer-pg'],
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
  const engines = (name) => () => load(like(name, { name: `engine-${name}`, targets: lineup() }), JOURNAL());
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
          JOURNAL(),
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
  ];
}

/** The engines side by side: the journal on its Node (the reference), on Node 24, sqlite, and postgres when installed. */
function lineup() {
  const t = [{ label: JOURNAL(), node: NODE_OLDEST }];
  if (v(NODE_24) !== v(NODE_OLDEST)) t.push({ label: JOURNAL_24(), node: NODE_24 });
  t.push({ label: SQLITE(), node: NODE_24, env: { STORE: 'sqlite' } });
  if (postgresInstalled()) t.push(pgTarget(POSTGRES()));
  return t;
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
      },
    });
    const version = await cluster.psql('SHOW server_version');
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
export function pgTarget(label, { instances = 1, env = {} } = {}) {
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

// ---- an older commit's build ----

const git = (...args) => execFileSync('git', ['-C', ROOT, ...args], { encoding: 'utf8' }).trim();

/**
 * dist/server.js of an older commit, built once into $TMPDIR from `git archive` (no worktree is
 * registered in the repository) with its own `npm ci`, and kept there for the next run
 * (rm -rf $TMPDIR/csa-bench-build-* to drop it).
 */
function oldBuild(commit) {
  const dir = join(tmpdir(), `csa-bench-build-${commit.slice(0, 12)}`);
  const server = join(dir, 'dist', 'server.js');
  if (existsSync(server)) {
    ctx.progress(`journal-seam: reusing the build of ${commit.slice(0, 7)} in ${dir}`);
    return server;
  }
  ctx.progress(`journal-seam: building ${commit.slice(0, 7)} in ${dir} (git archive, npm ci, node build.mjs)...`);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  try {
    const tar = execFileSync('git', ['-C', ROOT, 'archive', '--format=tar', commit], { maxBuffer: 1 << 30 });
    execFileSync('tar', ['-x', '-C', dir], { input: tar });
    execFileSync('npm', ['ci', '--no-audit', '--no-fund', '--loglevel=error'], { cwd: dir, stdio: ['ignore', 2, 2] });
    execFileSync(NODE_OLDEST, ['build.mjs'], { cwd: dir, stdio: ['ignore', 2, 2] });
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`journal-seam: building ${commit.slice(0, 7)} failed: ${e.message.split('\n')[0]}`);
  }
  return server;
}

// ---- sqlite and the journal at scale ----

/** The scale data set as a sqlite data directory, made once per run by bench/datagen-sqlite.mjs on Node 24. */
const sqliteSets = new Map();
function sqliteDataSet(sessions, turns) {
  const key = `${sessions}-${turns}`;
  let d = sqliteSets.get(key);
  if (d === undefined) {
    const dir = join(ctx.runDir(), `sqlite-${key}`);
    ctx.progress(`generating the same data set as a sqlite file (bench/datagen-sqlite.mjs, Node ${v(NODE_24)})...`);
    const r = spawnSync(NODE_24, [join(ROOT, 'bench', 'datagen-sqlite.mjs'), dir, String(sessions), String(turns)], { encoding: 'utf8', maxBuffer: 1 << 24 });
    if (r.status !== 0) throw new Error(`bench/datagen-sqlite.mjs failed (${r.status ?? r.signal}): ${r.stderr.trim().split('\n').slice(-5).join(' | ')}`);
    d = { dir, ...JSON.parse(r.stdout.trim().split('\n').at(-1)) };
    sqliteSets.set(key, d);
    ctx.progress(`generated ${sessions} sessions + ${turns} turns as sqlite: ${(d.fileBytes / 2 ** 20).toFixed(0)} MiB in ${(d.ms / 1000).toFixed(1)} s (checked through the engine)`);
  }
  return d;
}

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
  const journal = ctx.dataSet(sessions, turns);
  const sqlite = sqliteDataSet(sessions, turns);
  const j = await startAndServe({ engine: 'journal', label: JOURNAL(), node: NODE_OLDEST, dir: journal.dir, sessions, turns, runs: ctx.opts.replayRuns, openLine: 'journal replayed', fileBytes: journal.bytes, genMs: journal.genMs });
  const s = await startAndServe({ engine: 'sqlite', label: SQLITE(), node: NODE_24, env: { STORE: 'sqlite' }, dir: sqlite.dir, sessions, turns, runs: 3, openLine: 'sqlite store opened', fileBytes: sqlite.fileBytes, genMs: sqlite.ms });
  // the same data through both servers: same counts, the same answers byte for byte (ETags included)
  const want = { sessions, turns, storeBytes: sqlite.storeBytes };
  for (const [name, got] of [['journal', j], ['sqlite', s]]) {
    for (const k of Object.keys(want)) if (got[k] !== want[k]) throw new Error(`the ${name} server reports ${k} = ${got[k]}, the data set has ${want[k]}`);
  }
  const differ = j.answers.findIndex((a, i) => a !== s.answers[i]);
  if (differ !== -1) throw new Error(`the journal and sqlite servers answer differently:\n  journal: ${j.answers[differ].slice(0, 300)}\n  sqlite:  ${s.answers[differ]?.slice(0, 300)}`);
  ctx.report.notes.push(
    `sqlite-scale: the sqlite file was checked through the engine (counters, usage rows, versions) and then through both servers: /metrics counts ${sessions} sessions, ${turns} turns and ${want.storeBytes} JSON bytes on each, and ${j.answers.length} answers (sessions by id with their ETags, a user's and a project's list, a session's turns) are the same bytes from the journal and from sqlite.`,
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
      "Same requests, same rounds: the baseline, then each target, round after round. **× first row**: req/s over the req/s of the scenario's first row (the journal on its Node, one PostgreSQL instance, group commit on), round by round: the median of the rounds' ratios, and in brackets the lowest and highest. CPU: share of one core of the server(s) / the PostgreSQL cluster / the load generator. Writes per commit: from the servers' commit counters. Event-loop delay: p99 over the measured windows of the servers' `nodejs_eventloop_delay_seconds` (a 10 ms timer's lateness; interpolated within its bucket, as Prometheus does).",
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
    L.push('## sqlite and the journal at scale', '');
    L.push(
      'The same data set in each engine\'s format (bench/datagen.mjs, bench/datagen-sqlite.mjs), page cache warm. Start: spawn to the first /healthz 200 (median of the runs); open: the engine\'s own log line (journal replayed / sqlite store opened). RSS after reads: once the last start has served a read load (50 connections: sessions by id, users\' lists and sessions\' turns, at random over the whole set); peak = VmHWM.',
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
  const sq = [
    ['engine-get', 'GET by id', 0.7],
    ['engine-list-user', "list of 50 (a user's)", 0.5],
    ['engine-list-project', "list of 50 (a project's)", 0.5],
    ['engine-list-page', "list of 50 (a user's) as a page, `limit=50` (for reference)", 0.5],
    ['engine-create-64', 'durable create, 64 clients', 0.25],
  ];
  for (const [scenario, what, min] of sq) {
    const x = versus(scenario, SQLITE(), JOURNAL());
    const x24 = versus(scenario, SQLITE(), JOURNAL_24());
    if (x !== undefined) add(`#11 sqlite ÷ journal, ${what} ≥ ${min}`, `${x2(x)}; ÷ the journal on Node 24: ${x24 === undefined ? '–' : x2(x24)}`, x.median >= min);
  }
  const creates = row('engine-create-64', SQLITE());
  if (creates !== undefined) {
    add('#11 sqlite: event-loop delay p99 < 10 ms while creates run (64 clients)', creates.eldSamples > 0 ? `${ms(creates.eldP99 * 1000)} ms over ${creates.eldSamples} samples` : 'not measured', creates.eldSamples > 0 ? creates.eldP99 < 0.01 : undefined);
  }
  const sqs = scale.find((s) => s.engine === 'sqlite');
  const js = scale.find((s) => s.engine === 'journal');
  if (sqs !== undefined) {
    const exact = sqs.sessions === 1_000_000;
    const note = exact ? '' : ' (target is for 1M + 2M; a smaller set measured)';
    add(`#11 sqlite with ${sqs.dataLabel}: start < 1 s${note}`, `${(sqs.startMs / 1000).toFixed(2)} s to /healthz (journal: ${js === undefined ? '–' : `${(js.startMs / 1000).toFixed(1)} s`})`, exact ? sqs.startMs < 1000 : undefined);
    add(`#11 sqlite with ${sqs.dataLabel}: RSS < 300 MiB serving reads${note}`, `${num(sqs.rssMiB)} MiB after ${sqs.seconds} s of reads, peak ${num(sqs.peakMiB)} (journal: ${js === undefined ? '–' : `${num(js.rssMiB)} MiB`})`, exact ? sqs.rssMiB < 300 : undefined);
  }
  for (const [scenario, what] of [
    ['engine-create-64', 'durable create, 64 clients'],
    ['engine-get', 'GET by id'],
    ['engine-list-user', "list of 50 (a user's)"],
    ['engine-list-project', "list of 50 (a project's)"],
    ['engine-list-page', "list of 50 (a user's) as a page"],
  ]) {
    const x = versus(scenario, POSTGRES(), JOURNAL());
    if (x !== undefined) add(`#12 postgres ÷ journal, ${what} (no target)`, `${x2(x)}: ${num(row(scenario, POSTGRES()).rps)} against ${num(row(scenario, JOURNAL()).rps)} req/s`);
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
