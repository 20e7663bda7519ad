// Our engines against what an ordinary app does with the same database (issue #28): `peer-pg`
// runs the `get` and `create-64` scenarios against our PostgreSQL server and a Fastify + `pg`
// app on the same cluster, `peer-sqlite` against our sqlite server and a Fastify + node:sqlite
// app on the same disk, each pair in the same interleaved rounds, reported as our req/s over the
// peer's. The peers (bench/peers/) import Fastify and pg from $BENCH_PEERS, never from this
// repository; without them the scenarios are skipped with one loud line.
import { existsSync, mkdtempSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { api, median, NODE_24, NODE_OLDEST, nodeVersion, ROOT, SECRET, token } from './common.mjs';
import { clusterCpu, pgTarget, postgres } from './engines.mjs';

const PEER_PG = join(ROOT, 'bench', 'peers', 'fastify-pg.mjs');
const PEER_SQLITE = join(ROOT, 'bench', 'peers', 'fastify-sqlite.mjs');
const PROVIDER = '665f1c2a9b1e8a0012ab34c1';

export const PEER_GROUPS = { peers: ['peer-pg', 'peer-sqlite'] };

const rows = [];
/** scenario -> { ours, peer } labels */
const pairs = new Map();
let ctx;

const v = (bin) => nodeVersion(bin).replace(/^v/, '');
const OURS_PG = () => `postgres (ours), Node ${v(NODE_OLDEST)}`;
const PEER_PG_LABEL = () => `Fastify + pg, pool of 16, Node ${v(NODE_OLDEST)}`;
const OURS_SQLITE = () => `sqlite (ours), Node ${v(NODE_24)}`;
const PEER_SQLITE_LABEL = () => `Fastify + node:sqlite, Node ${v(NODE_24)}`;

let missing; // why the peers cannot run, once asked
/** undefined when $BENCH_PEERS holds `packages`; else why not, said once on stderr and in the report. */
function peersMissing(packages) {
  const dir = process.env.BENCH_PEERS;
  let why;
  if (dir === undefined || dir === '') why = 'BENCH_PEERS is not set';
  else {
    const req = createRequire(join(dir, 'package.json'));
    const absent = packages.filter((p) => {
      try {
        req.resolve(p);
        return false;
      } catch {
        return true;
      }
    });
    if (absent.length > 0) why = `BENCH_PEERS=${dir} lacks ${absent.join(' and ')}`;
  }
  if (why !== undefined && missing !== why) {
    missing = why;
    process.stderr.write(`\n*** ${why}: the peer scenarios are SKIPPED (npm install --prefix /work/peers fastify pg; BENCH_PEERS=/work/peers npm run bench -- peers) ***\n\n`);
    ctx.report.notes.push(`**Peers skipped**: ${why} (bench/README.md, "Against an ordinary app").`);
  }
  return why;
}

/** A peer process: `script` on `node`, its CPU and the cluster's (when given) measured over each window. */
function peerTarget(label, script, node, env, cluster) {
  return {
    label,
    peer: true,
    start: async () => {
      const p = await ctx.start({ name: label.replace(/[^\w.-]+/g, '_'), script, node, env: { BENCH_PEERS: process.env.BENCH_PEERS, AUTH_SECRET: SECRET, HOST: '127.0.0.1', ...env } });
      if (cluster !== undefined) {
        p.window = () => {
          const a = clusterCpu(cluster);
          return () => {
            const b = clusterCpu(cluster);
            return (seconds) => ({ dbCpu: (b - a) / seconds });
          };
        };
      }
      return p;
    },
  };
}

/** The peer's 50 sessions to read: made through its create route, each read back once. */
async function seedPeer(p) {
  const auth = token('bench-user-0');
  const ids = [];
  for (let i = 0; i < 50; i++) {
    const r = await api(p.port, 'POST', '/api/v1/chat-sessions', { auth, body: { projectId: 'bench-project', providerId: PROVIDER, selectedModel: 'gpt-4o', name: `Session ${i}` } });
    if (r.status !== 201) throw new Error(`seeding the peer: create answered ${r.status} ${r.text}`);
    ids.push(r.body.data._id);
  }
  for (const id of ids) {
    const r = await api(p.port, 'GET', `/api/v1/chat-sessions/${id}`, { auth: token('reader-0') });
    if (r.status !== 200 || r.body?.data?._id !== id) throw new Error(`seeding the peer: GET ${id} answered ${r.status} ${r.text.slice(0, 200)}`);
  }
  return ids;
}

/**
 * `get` and `create-64` against our server and the peer, the rounds interleaved; each pass
 * starts both again with the other first (bothOrders: the first server of a scenario measures
 * some percent cheaper, bench/README.md "Which server comes first").
 */
async function pair(prefix, ours, peer) {
  for (const name of ['get', 'create-64']) {
    const base = ctx.scenario(name);
    const targets = [ours(), peer()];
    pairs.set(`${prefix}-${name}`, { ours: targets[0].label, peer: targets[1].label });
    await ctx.runLoadScenario(
      {
        ...base,
        name: `${prefix}-${name}`,
        targets,
        alternate: true,
        bothOrders: true,
        prepare: base.prepare === undefined ? undefined : (proc, t) => (t.peer ? seedPeer(proc) : base.prepare(proc, t)),
        request: base.request ?? (() => ctx.createRequest(base.conns)),
      },
      rows,
    );
  }
}

/** The scenarios, given scenarios.mjs's context (the same as engineScenarios'). */
export function peerScenarios(context) {
  ctx = context;
  let schemas = 0;
  return [
    {
      name: 'peer-pg',
      run: async () => {
        if (peersMissing(['fastify', 'pg']) !== undefined) return;
        const cluster = await postgres();
        if (cluster === undefined) return; // said once by engines.mjs
        await pair(
          'peer-pg',
          () => pgTarget(OURS_PG()),
          () => peerTarget(PEER_PG_LABEL(), PEER_PG, NODE_OLDEST, { DATABASE_URL: cluster.url('postgres'), DATABASE_SCHEMA: `peer_${++schemas}` }, cluster),
        );
      },
    },
    {
      name: 'peer-sqlite',
      run: async () => {
        if (peersMissing(['fastify']) !== undefined) return;
        if (!existsSync(NODE_24)) {
          ctx.report.notes.push(`peer-sqlite skipped: no Node.js 24 at ${NODE_24} (npm install)`);
          return;
        }
        await pair(
          'peer-sqlite',
          () => ({ label: OURS_SQLITE(), node: NODE_24, env: { STORE: 'sqlite' } }),
          () => peerTarget(PEER_SQLITE_LABEL(), PEER_SQLITE, NODE_24, { SQLITE_FILE: join(mkdtempSync(join(ctx.runDir(), 'peer-sqlite-')), 'peer.db') }),
        );
      },
    },
  ];
}

/** Our req/s over the peer's, round by round: the median, lowest and highest. */
function paired(scenario) {
  const labels = pairs.get(scenario);
  const a = rows.find((r) => r.scenario === scenario && r.label === labels?.ours);
  const b = rows.find((r) => r.scenario === scenario && r.label === labels?.peer);
  if (a === undefined || b === undefined) return undefined;
  const ratios = a.rounds.map((x, i) => x / b.rounds[i]).sort((p, q) => p - q);
  return { median: median(ratios), min: ratios[0], max: ratios.at(-1), ours: a, peer: b };
}

const num = (x) => (x === undefined || Number.isNaN(x) ? '–' : Math.round(x).toLocaleString('en-US'));
const ms = (x) => (x === undefined || Number.isNaN(x) ? '–' : x < 10 ? x.toFixed(2) : x.toFixed(1));
const pct = (x) => (x === undefined || Number.isNaN(x) ? '–' : String(Math.round(x * 100)));

/** The report's section (Markdown lines). */
export function renderPeers() {
  if (rows.length === 0) return [];
  const L = ['## Against an ordinary app (peers)', ''];
  L.push(
    "Our server and a Fastify app doing the same requests (bench/peers/), the same database or disk, in the same rounds (the servers started again for each pass, the other first). **× peer**: our req/s over the peer's, round by round: the median, and the lowest and highest. CPU: share of one core of the server / the PostgreSQL cluster / the load generator. Writes per commit: ours, from /metrics.",
    '',
  );
  L.push('| scenario | target | req/s | × peer | p50 ms | p99 ms | errors | CPU % server/db/gen | main thread µs/req (busy %) | writes per commit |');
  L.push('|---|---|---:|---:|---:|---:|---|---|---:|---:|');
  for (const r of rows) {
    const p = pairs.get(r.scenario)?.ours === r.label ? paired(r.scenario) : undefined;
    const x = p === undefined ? '–' : `${p.median.toFixed(2)} (${p.min.toFixed(2)}–${p.max.toFixed(2)})`;
    const errors = r.errors === 0 ? '0' : `${r.errors} (${r.firstError ?? ''})`;
    L.push(`| \`${r.scenario}\` ${r.title} | ${r.label} | ${num(r.rps)} | ${x} | ${ms(r.p50)} | ${ms(r.p99)} | ${errors} | ${pct(r.targetCpu)}/${pct(r.dbCpu)}/${pct(r.loadgenCpu)} | ${r.mainUs.toFixed(1)} (${pct(r.mainBusy)}) | ${r.fsyncRate > 0 ? (r.rps / r.fsyncRate).toFixed(1) : '–'} |`);
  }
  L.push('');
  return L;
}

/** Rows of the report's targets table. */
export function peerTargets() {
  const out = [];
  const add = (what, scenario, min) => {
    const p = paired(scenario);
    if (p === undefined) return;
    const measured = `${p.median.toFixed(2)} (${p.min.toFixed(2)}–${p.max.toFixed(2)}): ${num(p.ours.rps)} against ${num(p.peer.rps)} req/s`;
    out.push(`| ${what} | ${measured} | ${min === undefined ? '–' : p.median >= min ? 'yes' : '**no**'} |`);
  };
  add('#28 postgres ÷ Fastify + pg, durable create, 64 clients ≥ 1.5', 'peer-pg-create-64', 1.5);
  add('#28 postgres ÷ Fastify + pg, GET by id ≥ 2', 'peer-pg-get', 2);
  add('#28 sqlite ÷ Fastify + node:sqlite, durable create, 64 clients ≥ 3', 'peer-sqlite-create-64', 3);
  add('#28 sqlite ÷ Fastify + node:sqlite, GET by id (no target)', 'peer-sqlite-get');
  return out;
}
