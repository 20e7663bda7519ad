// The scenarios a run can name: load scenarios (a request per connection and how the server is
// seeded), the disk, start-up and scale measurements, the engines' and the conversations', and the
// groups that name several at once.
import { spawnSync } from 'node:child_process';
import { closeSync, cpSync, fdatasyncSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { api, logLines, median, memoryOf, NODE_24, ROOT, sleep, token } from './common.mjs';
import { conversationGroups, conversationScenarios } from './conversations.mjs';
import { purgeScenarios } from './purge.mjs';
import { replyScenarios } from './replies.mjs';
import { DOOR_GROUPS, doorScenarios } from './door.mjs';
import { searchScaleScenarios } from './search-scale.mjs';
import { indexCostScenarios } from './index-cost.mjs';
import { generateDataDir, PER_LIST } from './datagen.mjs';
import { buildsScenarios } from './compare-builds.mjs';
import { ENGINE_GROUPS, engineScenarios, postgresCluster } from './engines.mjs';
import { PEER_GROUPS, peerScenarios } from './peers.mjs';
import { buildRequest, percentile } from './loadgen.mjs';
import { engineMissing, seededStore, soakEngine } from './soak.mjs';
import { live, report, runDir, runLoadScenario, sections, start, startApi, startBaseline } from './measure.mjs';
import { opts, progress } from './options.mjs';
import { JWKS_ALGS, tokenOf, verifyCostSection, writeKeySet } from './jwks.mjs';

const PROVIDER = '665f1c2a9b1e8a0012ab34c1';
export const READ_CONNS = 50;
const WRITE_CONNS = 64;
const bearer = (user) => ({ authorization: `Bearer ${token(user)}` });

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
    // each request carries another token than the one before it on its connection (four per
    // connection, taken in turn), so every request goes past the connection's remembered header
    // to the token cache: the per-request cost of a token by its algorithm, once verified
    name: 'get-jwks',
    title: 'GET /chat-sessions/:id, a token by algorithm (AUTH_JWKS; 4 tokens per connection in turn)',
    conns: READ_CONNS,
    bothOrders: true,
    // the run's directory exists only once the run starts
    get targets() {
      const file = writeKeySet(runDir);
      return JWKS_ALGS.map((alg) => ({ label: alg, env: { AUTH_JWKS: file }, alg }));
    },
    prepare: async (p) => {
      if (!sections.some((s) => s.startsWith('### One signature check'))) sections.push(verifyCostSection());
      return seedLists(p);
    },
    request: (ids, t) => {
      const TOKENS = 4;
      const bufs = Array.from({ length: READ_CONNS }, (_, c) => {
        const headers = Array.from({ length: TOKENS }, (_, k) => ({ authorization: `Bearer ${tokenOf(t.alg, `reader-${c}-${k}`)}` }));
        return Array.from({ length: TOKENS * ids.length }, (_, i) => buildRequest('GET', `/api/v1/chat-sessions/${ids[i % ids.length]}`, { headers: headers[i % TOKENS] }));
      });
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

const dataSets = new Map(); // cache of generated data directories, by kind and size

/**
 * A generated data directory, made once per run: a sqlite file (bench/datagen-sqlite.mjs, on
 * Node 24 for node:sqlite), or with `journal` the same data as the journal an earlier release
 * wrote (bench/datagen.mjs), which the first start migrates.
 */
function dataSet(sessions, turns, { journal = false } = {}) {
  const key = `${journal ? 'journal' : 'sqlite'}-${sessions}-${turns}`;
  let d = dataSets.get(key);
  if (d === undefined) {
    const dir = join(runDir, `scale-${key}`);
    const label = `${fmtCount(sessions)} sessions${turns > 0 ? ` + ${fmtCount(turns)} turns of 1 KiB` : ''}`;
    progress(`generating ${label}${journal ? ' as a journal' : ' as a sqlite file'}...`);
    if (journal) {
      const g = generateDataDir(dir, { sessions, turns });
      d = { dir, sessions, turns, bytes: g.bytes, genMs: g.ms, label };
    } else {
      const r = spawnSync(NODE_24, [join(ROOT, 'bench', 'datagen-sqlite.mjs'), dir, String(sessions), String(turns)], { encoding: 'utf8', maxBuffer: 1 << 24 });
      if (r.status !== 0) throw new Error(`bench/datagen-sqlite.mjs failed (${r.status ?? r.signal}): ${r.stderr.trim().split('\n').slice(-5).join(' | ')}`);
      const g = JSON.parse(r.stdout.trim().split('\n').at(-1));
      d = { dir, sessions, turns, bytes: g.fileBytes, genMs: g.ms, storeBytes: g.storeBytes, label };
    }
    dataSets.set(key, d);
    progress(`generated ${d.label}: ${(d.bytes / 2 ** 20).toFixed(0)} MiB in ${(d.genMs / 1000).toFixed(1)} s`);
  }
  return d;
}

/**
 * The first start of this release on a journal an earlier release wrote: spawn to the first
 * /healthz 200 (the migration into sqlite happens before it), the migration's own `ms` from its
 * log line, and memory once serving. Each start gets a fresh copy (a start migrates the journal).
 */
async function measureMigration(d, runs) {
  const samples = [];
  for (let i = 0; i < runs; i++) {
    const dir = mkdtempSync(join(runDir, 'migrate-'));
    cpSync(d.dir, dir, { recursive: true });
    const p = await startApi({ name: `migrate-${fmtCount(d.sessions)}`, dataDir: dir, timeoutMs: 1_800_000 });
    const mem = memoryOf(p.pid);
    await p.stop();
    rmSync(dir, { recursive: true, force: true });
    const migrated = logLines(p.logFile, 'journal migrated into sqlite; the journal is kept, renamed, and no longer read').at(-1);
    if (migrated === undefined) throw new Error(`migrate: the server did not log a migration of ${d.label}; see ${p.logFile}`);
    samples.push({ startMs: p.startMs, migrateMs: migrated.ms, ...mem });
    progress(`first start on a journal of ${d.label}: ${p.startMs.toFixed(0)} ms to /healthz, migration ${migrated.ms} ms, RSS ${mem.rssMiB.toFixed(0)} MiB, peak ${mem.peakMiB.toFixed(0)} MiB`);
  }
  report.startup.push({
    label: d.label,
    sessions: d.sessions,
    turns: d.turns,
    bytes: d.bytes,
    genMs: d.genMs,
    runs,
    startMs: median(samples.map((s) => s.startMs)),
    migrateMs: median(samples.map((s) => s.migrateMs)),
    rssMiB: median(samples.map((s) => s.rssMiB)),
    peakMiB: median(samples.map((s) => s.peakMiB)),
  });
}

/**
 * 10k sessions, and 100k sessions with a turn of 1 KiB each (10k + 10k with --quick): not
 * --scale's million, since a migration writes through the engine's own import, indexes and all,
 * at a few thousand sessions a second at best (bench/README.md, "The first start on a journal").
 */
async function migrate() {
  await measureMigration(dataSet(10_000, 0, { journal: true }), 3);
  const big = opts.quick ? 10_000 : 100_000;
  await measureMigration(dataSet(big, big, { journal: true }), opts.migrateRuns);
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
    const missing = engineMissing(store);
    if (missing !== undefined) {
      report.notes.push(`soak: STORE=${store} skipped: ${missing}`);
      continue;
    }
    // PostgreSQL: the run's private cluster (bench/engines.mjs), durable as a production one
    const cluster = store === 'postgres' ? await postgresCluster() : undefined;
    if (store === 'postgres' && cluster === undefined) continue;
    progress(`soak ${store}: seeding...`);
    const seeded = await seededStore(store, { workDir: runDir, cluster });
    // as in a 1 GiB container, where the issue saw the process killed; every engine on the Node.js 24 of node_modules
    const start = (name, target, env) => startApi({ name, dataDir: target.dir, node: NODE_24, env: { MEMORY_LIMIT: '1gb', ...target.env, ...env } });
    report.soak.push(...(await soakEngine({ store, seeded, start, conns, warmupMs: opts.warmupMs, durationMs: opts.durationMs * 2, progress, kinds: opts.soakKinds })));
  }
}

// ---- what a run can name ----

export const scenarios = [
  ...loadScenarios.map((sc) => ({ name: sc.name, run: () => runLoadScenario(sc) })),
  { name: 'fsync', run: rawFsync },
  { name: 'cold-start', run: coldStart },
  { name: 'migrate', run: migrate },
  { name: 'list-scale', run: listScale },
  { name: 'soak', run: soak },
  // the engines against each other (bench/engines.mjs)
  ...engineScenarios({ opts, progress, report, runDir: () => runDir, start, startApi, runLoadScenario, dataSet, scenario: (name) => loadScenarios.find((sc) => sc.name === name), seedLists, createRequest }),
  // builds of several commits against each other (bench/compare-builds.mjs; opt-in: it builds them)
  ...buildsScenarios({ opts, progress, runDir: () => runDir, startApi, runLoadScenario, scenario: (name) => loadScenarios.find((sc) => sc.name === name), createRequest, sections }),
  // our engines against a Fastify app on the same database (bench/peers.mjs)
  ...peerScenarios({ opts, progress, report, runDir: () => runDir, start, runLoadScenario, scenario: (name) => loadScenarios.find((sc) => sc.name === name), createRequest }),
  ...conversationScenarios({ opts, report, progress, runDir: () => runDir, track: (p) => live.add(p) }),
  // the background purge beside a read load (bench/purge.mjs), reported in a section of its own
  ...purgeScenarios({ opts, progress, runDir: () => runDir, track: (p) => live.add(p), sections }),
  // search over a million turns on every engine (bench/search-scale.mjs), a section of its own
  ...searchScaleScenarios({ opts, progress, runDir: () => runDir, track: (p) => live.add(p), sections }),
  ...indexCostScenarios({ opts, progress, runDir: () => runDir, track: (p) => live.add(p), sections }),
  // the live feed's measurements (bench/live.mjs), reported in a section of their own
  { name: 'live', run: async () => sections.push(await (await import('./live.mjs')).liveReport({ subscribers: opts.quick ? 2000 : 10_000, throughputSubscribers: 1000, writes: opts.quick ? 50 : 200, ...opts, postgres: true }, progress)) },
  // replies from the model: a thousand streamed at once, and a long reply against short ones (bench/replies.mjs)
  ...replyScenarios({ opts, progress, runDir: () => runDir, track: (p) => live.add(p), sections }),
  // the OpenAI door: its replies against the native API's and a relay's, and the lookup of a conversation at 10 and 100,000 sessions (bench/door.mjs)
  ...doorScenarios({ opts, progress, runDir: () => runDir, track: (p) => live.add(p), sections }),
];
export const groups = {
  reads: ['get', 'list-user', 'list-project', 'providers'],
  auth: ['get', 'get-jwks'],
  list: ['list-user', 'list-project'],
  search: ['search-rare', 'search-common', 'search-prefix', 'search-scale', 'index-cost'],
  create: ['create-1', 'create-16', 'create-64', 'fsync'],
  writes: ['create-1', 'create-16', 'create-64', 'fsync', 'update', 'turn'],
  scale: ['migrate', 'list-scale'],
  startup: ['cold-start', 'migrate'],
  hostile: ['soak'],
  retention: ['purge-load'],
  ...ENGINE_GROUPS,
  ...PEER_GROUPS,
  ...conversationGroups,
  ...DOOR_GROUPS,
};
