// Conversations on every engine (issue #13): how a branch reads as trees grow, and what a fork
// costs. Registered in bench/scenarios.mjs as `conv-head` and `conv-fork` (group `conversations`).
//
// conv-head: the head path of a session of 10,000 turns in 20 branches against the head path
//   of a session of 100 turns: by the same request (`?branch=head&limit=100`: the first 100
//   turns of the path, an answer the same size), whole (`?branch=head`, per turn), and a path of
//   100 turns of the big session whole (`?branch=<turnId>`: the same answer size, so what the
//   other turns of the session cost shows alone).
// conv-fork: forks of a 1,000-turn path, one after another: their latency, and what they cost
//   the appends running beside them (64 clients, each on a session of its own), against the
//   same appends alone.
//
// Engines: sqlite; postgres on BENCH_DATABASE_URL, or on a private cluster started here when
// PostgreSQL is installed (test/pg/cluster.mjs); both on the oldest supported Node.js at hand.
import { copyFileSync, mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import { api, EXAMPLE_PROVIDERS, median, NODE_OLDEST, SECRET, SERVER, sleep, startProcess, token } from './common.mjs';
import { buildRequest, percentile, runLoad } from './loadgen.mjs';

const PROVIDER = '665f1c2a9b1e8a0012ab34c1';
const TURN_TEXT = 'x'.repeat(400);
const BIG_TURNS = 10_000;
const BRANCHES = 20;
const SMALL_TURNS = 100;
const FORK_PATH = 1000;
const READ_CONNS = 16;
const WRITE_CONNS = 64;

/**
 * The scenarios, given the run's shared pieces: `opts` (rounds, durations), `runDir`, a
 * `progress` line writer, `track` (a started process to stop if the run is interrupted) and
 * `report` (rows are added to report.conversations).
 */
export function conversationScenarios(ctx) {
  ctx.report.conversations ??= { head: [], fork: [], notes: [] };
  return [
    { name: 'conv-head', run: () => eachEngine(ctx, headPath) },
    { name: 'conv-fork', run: () => eachEngine(ctx, fork) },
  ];
}

export const conversationGroups = { conversations: ['conv-head', 'conv-fork'] };

let seq = 0;
/** A server of `engine` on a fresh data directory (postgres: a fresh schema). */
async function server(ctx, engine, pg) {
  const dir = mkdtempSync(join(ctx.runDir(), `conv-${engine}-`));
  copyFileSync(EXAMPLE_PROVIDERS, join(dir, 'providers.json'));
  const env = { DATA_DIR: dir, AUTH_SECRET: SECRET, LOG_LEVEL: ctx.opts.logLevel, HOST: '127.0.0.1', STORE: engine };
  if (engine === 'postgres') Object.assign(env, { DATABASE_URL: pg, DATABASE_SCHEMA: `bench_conv_${process.pid}_${++seq}` });
  const p = await startProcess({ script: SERVER, cwd: dir, env, node: NODE_OLDEST, logFile: join(ctx.runDir(), `conv-${engine}-${seq}.log`) });
  ctx.track(p);
  return p;
}

/** Runs `measure(ctx, engine, start)` for each engine at hand; an engine that cannot run is noted, not failed. */
async function eachEngine(ctx, measure) {
  let cluster;
  try {
    for (const engine of ['sqlite', 'postgres']) {
      let pg;
      if (engine === 'postgres') {
        pg = process.env.BENCH_DATABASE_URL;
        if (pg === undefined) {
          const { postgresMissing, startCluster } = await import('../test/pg/cluster.mjs');
          const missing = postgresMissing();
          if (missing !== undefined) {
            ctx.report.conversations.notes.push(`postgres skipped: ${missing} (or set BENCH_DATABASE_URL)`);
            continue;
          }
          cluster ??= await startCluster({ settings: { max_connections: 100 } });
          pg = cluster.url('postgres');
        }
      }
      await measure(ctx, engine, () => server(ctx, engine, pg));
    }
  } finally {
    await cluster?.destroy();
  }
}

/** POST a turn; resolves its id. */
async function say(port, auth, session, parentId) {
  const r = await api(port, 'POST', `/api/v1/chat-sessions/${session}/turns`, { auth, body: { role: 'user', content: TURN_TEXT, ...(parentId !== undefined ? { parentId } : {}) } });
  if (r.status !== 201) throw new Error(`seeding a turn: ${r.status} ${r.text.slice(0, 200)}`);
  return r.body.data._id;
}

async function newSession(port, auth, name) {
  const r = await api(port, 'POST', '/api/v1/chat-sessions', { auth, body: { projectId: 'bench-conv', providerId: PROVIDER, selectedModel: 'gpt-4o', name } });
  if (r.status !== 201) throw new Error(`seeding a session: ${r.status} ${r.text}`);
  return r.body.data._id;
}

/** A linear conversation of `n` turns. */
async function linear(port, auth, n) {
  const id = await newSession(port, auth, `linear ${n}`);
  for (let i = 0; i < n; i++) await say(port, auth, id);
  return id;
}

/**
 * 10,000 turns in 20 branches of 500: the first from the root, each other forking from the
 * first branch at a different depth (25, 50, ... 475), grown side by side; the head is then
 * set to the end of the deepest one (a path of 976 turns).
 */
async function branched(port, auth) {
  const id = await newSession(port, auth, 'branched');
  const per = BIG_TURNS / BRANCHES;
  const trunk = [];
  for (let i = 0; i < per; i++) trunk.push(await say(port, auth, id));
  const ends = await Promise.all(
    Array.from({ length: BRANCHES - 1 }, async (_, b) => {
      let parent = trunk[(b + 1) * 25 - 1];
      for (let i = 0; i < per; i++) parent = await say(port, auth, id, parent);
      return parent;
    }),
  );
  const r = await api(port, 'PUT', `/api/v1/chat-sessions/${id}`, { auth, body: { headTurnId: ends.at(-1) } });
  if (r.status !== 200) throw new Error(`switching the head: ${r.status}`);
  return { id, head: (await api(port, 'GET', `/api/v1/chat-sessions/${id}/turns?branch=head`, { auth })).body.data.length, hundredth: trunk[SMALL_TURNS - 1] };
}

/** `ctx.opts.rounds` runs of the load: median req/s, percentiles of all samples. */
async function rounds(ctx, p, request, conns) {
  const runs = [];
  for (let i = 0; i < ctx.opts.rounds; i++) {
    runs.push(await runLoad({ port: p.port, connections: conns, warmupMs: ctx.opts.warmupMs, durationMs: ctx.opts.durationMs, request }));
    await sleep(200);
  }
  const lat = runs.flatMap((r) => [...r.latencies]).sort((a, b) => a - b);
  return { rps: median(runs.map((r) => r.rps)), p50: percentile(lat, 0.5), p99: percentile(lat, 0.99), errors: runs.reduce((n, r) => n + r.errors, 0) };
}

async function headPath(ctx, engine, start) {
  const p = await start();
  try {
    const auth = token('conv-reader');
    ctx.progress(`conv-head ${engine}: seeding a ${SMALL_TURNS}-turn session and a ${BIG_TURNS}-turn one in ${BRANCHES} branches`);
    const small = await linear(p.port, auth, SMALL_TURNS);
    const big = await branched(p.port, auth);
    const get = (id, q) => buildRequest('GET', `/api/v1/chat-sessions/${id}/turns?${q}`, { headers: { authorization: `Bearer ${auth}` } });
    const cases = [
      { what: `100-turn session: its head path, a page of 100`, request: get(small, 'branch=head&limit=100'), turns: SMALL_TURNS },
      { what: `10,000 turns in 20 branches: the first 100 of its head path (${big.head} turns), a page of 100`, request: get(big.id, 'branch=head&limit=100'), turns: 100 },
      { what: '100-turn session: its whole head path', request: get(small, 'branch=head'), turns: SMALL_TURNS },
      { what: `10,000 turns in 20 branches: its whole head path (${big.head} turns)`, request: get(big.id, 'branch=head'), turns: big.head },
      { what: '10,000 turns in 20 branches: a whole path of 100 turns in it (`?branch=<turnId>`)', request: get(big.id, `branch=${big.hundredth}`), turns: SMALL_TURNS },
    ];
    // round by round, every case in each: what the other work on the machine does falls on all of them
    const runs = cases.map(() => []);
    for (let round = 0; round < ctx.opts.rounds; round++) {
      for (const [i, c] of cases.entries()) {
        runs[i].push(await runLoad({ port: p.port, connections: READ_CONNS, warmupMs: ctx.opts.warmupMs, durationMs: ctx.opts.durationMs, request: () => c.request }));
        await sleep(200);
      }
    }
    for (const [i, c] of cases.entries()) {
      const lat = runs[i].flatMap((r) => [...r.latencies]).sort((a, b) => a - b);
      const m = { rps: median(runs[i].map((r) => r.rps)), p50: percentile(lat, 0.5), p99: percentile(lat, 0.99), errors: runs[i].reduce((n, r) => n + r.errors, 0) };
      ctx.report.conversations.head.push({ engine, what: c.what, turns: c.turns, ...m });
      ctx.progress(`conv-head ${engine}: ${c.what}: ${m.rps.toFixed(0)}/s, p50 ${m.p50.toFixed(2)} ms, p99 ${m.p99.toFixed(2)} ms`);
    }
  } finally {
    await p.stop();
  }
}

async function fork(ctx, engine, start) {
  const p = await start();
  try {
    const auth = token('conv-forker');
    ctx.progress(`conv-fork ${engine}: seeding a ${FORK_PATH}-turn session and ${WRITE_CONNS} writers`);
    const source = await linear(p.port, auth, FORK_PATH);
    const writers = await Promise.all(Array.from({ length: WRITE_CONNS }, (_, c) => newSession(p.port, token(`conv-writer-${c}`), `writer ${c}`)));
    const appends = writers.map((id, c) => buildRequest('POST', `/api/v1/chat-sessions/${id}/turns`, { headers: { authorization: `Bearer ${token(`conv-writer-${c}`)}` }, body: { role: 'user', content: TURN_TEXT } }));
    const append = (c) => appends[c];
    const forkOnce = async () => {
      const t0 = performance.now();
      const r = await api(p.port, 'POST', `/api/v1/chat-sessions/${source}/fork`, { auth, body: {} });
      if (r.status !== 201) throw new Error(`fork: ${r.status} ${r.text.slice(0, 200)}`);
      return performance.now() - t0;
    };
    const alone = [];
    for (let i = 0; i < 10; i++) alone.push(await forkOnce());
    const quiet = await rounds(ctx, p, append, WRITE_CONNS);
    // the same appends with forks one after another beside them
    let forking = true;
    const beside = [];
    const forker = (async () => {
      while (forking) beside.push(await forkOnce());
    })();
    const busy = await rounds(ctx, p, append, WRITE_CONNS);
    forking = false;
    await forker;
    alone.sort((a, b) => a - b);
    beside.sort((a, b) => a - b);
    const row = {
      engine,
      forkAlone: { p50: percentile(alone, 0.5), max: alone.at(-1) },
      forkBeside: { n: beside.length, p50: percentile(beside, 0.5), p99: percentile(beside, 0.99) },
      appendsAlone: quiet,
      appendsBeside: busy,
    };
    ctx.report.conversations.fork.push(row);
    ctx.progress(`conv-fork ${engine}: fork of ${FORK_PATH} turns ${row.forkAlone.p50.toFixed(1)} ms alone, ${row.forkBeside.p50.toFixed(1)} ms beside appends; appends ${quiet.rps.toFixed(0)}/s p99 ${quiet.p99.toFixed(1)} ms alone, ${busy.rps.toFixed(0)}/s p99 ${busy.p99.toFixed(1)} ms beside forks`);
  } finally {
    await p.stop();
  }
}

const ms = (v) => (Number.isNaN(v) ? '–' : v < 10 ? v.toFixed(2) : v.toFixed(1));
const int = (v) => (Number.isNaN(v) ? '–' : Math.round(v).toLocaleString('en-US'));

/** The report's section (Markdown lines), or none when nothing ran. */
export function renderConversations(report) {
  const c = report.conversations;
  if (c === undefined || (c.head.length === 0 && c.fork.length === 0 && c.notes.length === 0)) return [];
  const L = ['## Conversations', ''];
  if (c.head.length > 0) {
    L.push(`Reads of a branch, ${READ_CONNS} connections, turns of ${TURN_TEXT.length} characters. µs/turn: the time of one answer per turn it holds (1 / req/s / turns × connections).`, '');
    L.push('| engine | request | req/s | p50 ms | p99 ms | µs/turn | errors |', '|---|---|---:|---:|---:|---:|---:|');
    for (const r of c.head) L.push(`| ${r.engine} | ${r.what} | ${int(r.rps)} | ${ms(r.p50)} | ${ms(r.p99)} | ${((1e6 * READ_CONNS) / r.rps / r.turns).toFixed(1)} | ${r.errors} |`);
    L.push('', '| engine | target: the head path of 10,000 turns in 20 branches within 2x of a 100-turn session | measured | met |', '|---|---|---|---|');
    for (const engine of [...new Set(c.head.map((r) => r.engine))]) {
      const rows = c.head.filter((r) => r.engine === engine);
      const [small, page, smallWhole, whole, same] = rows;
      const pageRatio = small.rps / page.rps;
      const perTurn = (smallWhole.rps * smallWhole.turns) / (whole.rps * whole.turns);
      const sameRatio = smallWhole.rps / same.rps;
      L.push(`| ${engine} | a path of 100 turns, whole | ${sameRatio.toFixed(2)}× the time | ${sameRatio <= 2 ? 'yes' : '**no**'} |`);
      L.push(`| ${engine} | a page of 100 turns of the head path | ${pageRatio.toFixed(2)}× the time | ${pageRatio <= 2 ? 'yes' : '**no**'} |`);
      L.push(`| ${engine} | the whole head path, per turn | ${perTurn.toFixed(2)}× the time per turn | ${perTurn <= 2 ? 'yes' : '**no**'} |`);
    }
    L.push('');
  }
  if (c.fork.length > 0) {
    L.push(`Forks of a ${FORK_PATH}-turn path (each a new session with ${FORK_PATH} copied turns, one commit), and ${WRITE_CONNS} clients appending turns beside them.`, '');
    L.push('| engine | fork alone p50 / max ms | forks beside the appends: n, p50 / p99 ms | appends alone req/s, p99 ms | appends beside forks req/s, p99 ms |', '|---|---:|---:|---:|---:|');
    for (const r of c.fork) {
      L.push(`| ${r.engine} | ${ms(r.forkAlone.p50)} / ${ms(r.forkAlone.max)} | ${r.forkBeside.n}, ${ms(r.forkBeside.p50)} / ${ms(r.forkBeside.p99)} | ${int(r.appendsAlone.rps)}, ${ms(r.appendsAlone.p99)} | ${int(r.appendsBeside.rps)}, ${ms(r.appendsBeside.p99)} |`);
    }
    L.push('');
  }
  for (const n of c.notes) L.push(`- ${n}`);
  if (c.notes.length > 0) L.push('');
  return L;
}
