// Search over a million turns (issue #14, "Measured"): one user's 10,000 sessions of 100 turns
// of about 1 KiB each, written through the API (so every engine indexes them as it would in
// use), the text drawn from a 5,000-word vocabulary with Zipf frequencies (the k-th word about
// 1/k as frequent as the first, as words are in real text). Then GET /api/v1/search by that user,
// a page of 20, for a rare word (in one turn), a common one (in nearly every turn) and two in
// between, each for a few seconds on a few connections; p50 and p99 per word. Every engine
// (sqlite, and PostgreSQL on a private cluster when installed, both on the oldest supported
// Node.js at hand), each on a fresh store, the same turns in the same order.
import { join } from 'node:path';
import { copyFileSync, mkdtempSync } from 'node:fs';
import { api, EXAMPLE_PROVIDERS, memoryOf, NODE_OLDEST, SECRET, SERVER, startProcess, token } from './common.mjs';
import { buildRequest, percentile, runLoad } from './loadgen.mjs';
import { findPostgresBin, startCluster } from '../test/pg/cluster.mjs';

const SESSIONS = 10_000;
const VOCABULARY = 5000;
const WRITERS = 64;
const READERS = 4;
const USER = 'searcher';
/** The words searched: how many turns hold each is counted from the texts written. */
const WORDS = [
  { q: 'needle', what: 'rare' },
  { q: 'w2000z', what: 'uncommon' },
  { q: 'w300z', what: 'frequent' },
  { q: 'w1z', what: 'common' },
];

export function searchScaleScenarios(ctx) {
  return [{ name: 'search-scale', run: () => searchScale(ctx) }];
}

/**
 * The engines a search scenario runs, each on the Node.js it needs (--engines names some), and
 * a note for each one this machine cannot run.
 */
export function lineup(ctx) {
  const all = [
    { engine: 'sqlite', node: NODE_OLDEST },
    { engine: 'postgres', node: NODE_OLDEST, missing: findPostgresBin() === undefined ? 'PostgreSQL is not installed' : undefined },
  ].filter((e) => ctx.opts.enginesNamed === undefined || ctx.opts.enginesNamed.includes(e.engine));
  return { engines: all.filter((e) => e.missing === undefined), notes: all.filter((e) => e.missing !== undefined).map((e) => `${e.engine}: skipped, ${e.missing}`) };
}

/** A deterministic text maker: ~1 KiB of Zipf-drawn words per call, the same sequence every run. */
export function texts(needleAt) {
  const cumulative = new Float64Array(VOCABULARY);
  let sum = 0;
  for (let k = 0; k < VOCABULARY; k++) cumulative[k] = sum += 1 / (k + 1);
  let seed = 7;
  const random = () => (seed = (seed * 48271) % 2147483647) / 2147483647;
  const word = () => {
    const r = random() * sum;
    let lo = 0;
    let hi = VOCABULARY - 1;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (cumulative[mid] < r) lo = mid + 1;
      else hi = mid;
    }
    return `w${lo + 1}z`;
  };
  return (n) => {
    const words = [];
    let length = -1;
    while (length < 1024) {
      const w = word();
      words.push(w);
      length += w.length + 1;
    }
    if (n === needleAt) words[words.length >> 1] = 'needle';
    return words.join(' ');
  };
}

async function searchScale(ctx) {
  const turns = ctx.opts.quick ? 100_000 : 1_000_000;
  const { engines, notes } = lineup(ctx);
  const rows = [];
  let cluster;
  try {
    for (const e of engines) {
      const dir = mkdtempSync(join(ctx.runDir(), `search-scale-${e.engine}-`));
      copyFileSync(EXAMPLE_PROVIDERS, join(dir, 'providers.json'));
      const env = { DATA_DIR: dir, AUTH_SECRET: SECRET, LOG_LEVEL: ctx.opts.logLevel, HOST: '127.0.0.1', STORE: e.engine, MEMORY_LIMIT: 'off' };
      if (e.engine === 'postgres') {
        cluster ??= await startCluster({ settings: { shared_buffers: '512MB', max_connections: 100 } });
        Object.assign(env, { DATABASE_URL: cluster.url('postgres'), DATABASE_SCHEMA: 'search_scale' });
      }
      const p = await startProcess({ script: SERVER, cwd: dir, env, node: e.node, logFile: join(ctx.runDir(), `search-scale-${e.engine}.log`), timeoutMs: 600_000 });
      ctx.track(p);
      try {
        ctx.progress(`search-scale ${e.engine}: writing ${SESSIONS} sessions and ${turns} turns through the API...`);
        const seeded = await seed(p.port, turns);
        const memory = memoryOf(p.pid);
        ctx.progress(`search-scale ${e.engine}: ${seeded.turns} turns in ${seeded.seconds.toFixed(0)} s (${(seeded.turns / seeded.seconds).toFixed(0)}/s), RSS ${memory.rssMiB.toFixed(0)} MiB`);
        for (const w of WORDS) {
          const req = buildRequest('GET', `/api/v1/search?q=${w.q}`, { headers: { authorization: `Bearer ${token(USER)}` } });
          const check = await api(p.port, 'GET', `/api/v1/search?q=${w.q}`, { auth: token(USER) });
          if (check.status !== 200) throw new Error(`search-scale: search for ${w.q} answered ${check.status} ${check.text}`);
          const r = await runLoad({ port: p.port, connections: READERS, warmupMs: ctx.opts.warmupMs, durationMs: ctx.opts.durationMs, request: req });
          const sorted = Float64Array.from(r.latencies).sort();
          const row = { engine: e.engine, q: w.q, what: w.what, holding: seeded.holding.get(w.q) ?? 0, hits: check.body.data.length, requests: r.requests, rps: r.rps, errors: r.errors, p50: percentile(sorted, 0.5), p99: percentile(sorted, 0.99), rssMiB: memory.rssMiB, rate: seeded.turns / seeded.seconds, turns: seeded.turns };
          rows.push(row);
          ctx.progress(`search-scale ${e.engine} ${w.q} (${row.holding} turns hold it): p50 ${row.p50.toFixed(2)} ms, p99 ${row.p99.toFixed(2)} ms, ${r.requests} requests`);
        }
      } finally {
        await p.stop();
      }
    }
  } finally {
    await cluster?.destroy();
  }
  ctx.sections.push(render(rows, notes));
}

/** The user's sessions, then `turns` turns spread over them in turn, WRITERS at a time; counts the turns holding each searched word. */
async function seed(port, turns) {
  const auth = token(USER);
  const ids = [];
  for (let i = 0; i < SESSIONS; i++) {
    const r = await api(port, 'POST', '/api/v1/chat-sessions', { auth, body: { projectId: 'search-scale', providerId: '665f1c2a9b1e8a0012ab34c1', selectedModel: 'm', name: `Session ${i}` } });
    if (r.status !== 201) throw new Error(`search-scale: creating a session answered ${r.status} ${r.text}`);
    ids.push(r.body.data._id);
  }
  const make = texts(Math.floor(turns / 2));
  const holding = new Map(WORDS.map((w) => [w.q, 0]));
  const headers = { authorization: `Bearer ${auth}` };
  let n = 0;
  const started = performance.now();
  while (n < turns) {
    let sent = 0;
    const r = await runLoad({
      port,
      connections: WRITERS,
      warmupMs: 0,
      durationMs: 2000,
      request: () => {
        // past the count, a harmless read keeps the connection busy until the window ends
        if (n >= turns) return buildRequest('GET', '/healthz');
        const text = make(n);
        for (const w of WORDS) if (` ${text} `.includes(` ${w.q} `)) holding.set(w.q, (holding.get(w.q) ?? 0) + 1);
        const id = ids[n % SESSIONS];
        n++;
        sent++;
        return buildRequest('POST', `/api/v1/chat-sessions/${id}/turns`, { headers, body: { role: 'user', content: text } });
      },
    });
    if (r.errors > 0 || r.warmupErrors > 0) throw new Error(`search-scale: ${r.errors + r.warmupErrors} turn appends failed (${r.firstError ?? [...r.statuses].join(', ')})`);
    if (sent === 0) break;
  }
  return { turns: n, seconds: (performance.now() - started) / 1000, holding };
}

function render(rows, notes) {
  const L = ['## Search over a million turns (`search-scale`)', ''];
  const first = rows[0];
  L.push(
    `One user's ${SESSIONS.toLocaleString('en')} sessions of ${first === undefined ? '?' : Math.round(first.turns / SESSIONS)} turns of about 1 KiB (${first?.turns.toLocaleString('en') ?? '?'} turns), written through the API, words drawn from a ${VOCABULARY.toLocaleString('en')}-word vocabulary with Zipf frequencies; \`GET /api/v1/search?q=WORD\` by that user (a page of 20), ${READERS} connections. Target: p50 < 20 ms and p99 < 100 ms for a rare and a common word, every engine.`,
    '',
    '| engine | word | turns holding it | req/s | p50 ms | p99 ms | met? | writes/s while seeding | RSS after seeding MiB |',
    '|---|---|---:|---:|---:|---:|---|---:|---:|',
  );
  for (const r of rows) {
    const met = r.p50 < 20 && r.p99 < 100;
    L.push(`| ${r.engine} | ${r.q} (${r.what}) | ${r.holding.toLocaleString('en')} | ${r.rps.toFixed(0)} | ${r.p50.toFixed(2)} | ${r.p99.toFixed(2)} | ${met ? 'yes' : '**no**'} | ${r.rate.toFixed(0)} | ${r.rssMiB.toFixed(0)} |`);
  }
  for (const n of notes) L.push('', `- ${n}`);
  return L.join('\n');
}
