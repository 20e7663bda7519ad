// What keeping the search index costs the writes (issue #14, "Measured": durable create and turn
// append with search indexing on, against off, at most 20% slower). Each engine runs servers
// with SEARCH=on and SEARCH=off on fresh stores, in alternating order round by round: 64
// connections create sessions for a window, then append turns of about 1 KiB of Zipf-drawn words
// (search-scale's texts) to 1,024 sessions for a window, and again by 4 connections (a light
// load: what one write waits for). Durable (FSYNC on) on every engine.
// sqlite indexes after the commit: a window ends with names and turns not indexed yet, so after
// it the server is left until they are, and that time is counted in its rate
// (`chat_session_api_sqlite_search_unindexed`), so work moved after the window is not work saved.
import { copyFileSync, mkdtempSync, readdirSync, renameSync } from 'node:fs';
import { join } from 'node:path';
import { api, cpuSecondsOf, EXAMPLE_PROVIDERS, median, SECRET, SERVER, sleep, startProcess, token } from './common.mjs';
import { buildRequest, percentile, runLoad } from './loadgen.mjs';
import { profileDir } from './measure.mjs';
import { lineup, texts } from './search-scale.mjs';
import { startCluster } from '../test/pg/cluster.mjs';

const CONNS = 64;
/** A light load: few clients, each waiting for its answer (what one write's latency is when the server is not saturated). */
const LIGHT_CONNS = 4;
const SESSIONS = 1024;
const PROVIDER = '665f1c2a9b1e8a0012ab34c1';

export function indexCostScenarios(ctx) {
  return [{ name: 'index-cost', run: () => indexCost(ctx) }];
}

async function indexCost(ctx) {
  const { engines, notes } = lineup(ctx);
  const rows = [];
  let cluster;
  let schemas = 0;
  try {
    for (const e of engines) {
      const runs = { on: [], off: [] };
      for (let round = 0; round < ctx.opts.rounds; round++) {
        for (const search of round % 2 === 0 ? ['on', 'off'] : ['off', 'on']) {
          const dir = mkdtempSync(join(ctx.runDir(), `index-cost-${e.engine}-`));
          copyFileSync(EXAMPLE_PROVIDERS, join(dir, 'providers.json'));
          const env = { DATA_DIR: dir, AUTH_SECRET: SECRET, LOG_LEVEL: ctx.opts.logLevel, HOST: '127.0.0.1', STORE: e.engine, SEARCH: search, MEMORY_LIMIT: 'off' };
          if (e.engine === 'postgres') {
            cluster ??= await startCluster({ settings: { max_connections: 100 } });
            Object.assign(env, { DATABASE_URL: cluster.url('postgres'), DATABASE_SCHEMA: `index_cost_${++schemas}` });
          }
          const name = `index-cost-${e.engine}-${search}-${round}`;
          // --profile: a profile per thread (sqlite's writer is one), in a directory of the run's own, named after the run once the server has exited
          const profiles = join(ctx.runDir(), `${name}-profiles`);
          const nodeArgs = ctx.opts.profile ? ['--cpu-prof', `--cpu-prof-dir=${profiles}`] : [];
          const p = await startProcess({ script: SERVER, cwd: dir, env, node: e.node, nodeArgs, logFile: join(ctx.runDir(), `${name}.log`) });
          ctx.track(p);
          try {
            const run = await measure(ctx, p, search === 'on' ? e.engine : 'none');
            runs[search].push(run);
            ctx.progress(`index-cost ${e.engine} SEARCH=${search} round ${round + 1}: creates ${run.creates.rate.toFixed(0)}/s (p99 ${run.creates.p99.toFixed(1)} ms), appends ${run.appends.rate.toFixed(0)}/s (p99 ${run.appends.p99.toFixed(1)} ms, ${run.appends.drainMs.toFixed(0)} ms to empty the queue), at ${LIGHT_CONNS} connections ${run.light.rate.toFixed(0)}/s (p50 ${run.light.p50.toFixed(2)}, p99 ${run.light.p99.toFixed(2)} ms)`);
          } finally {
            await p.stop();
            if (ctx.opts.profile) for (const f of readdirSync(profiles)) renameSync(join(profiles, f), join(profileDir, `${name}-thread${f.split('.')[4]}.cpuprofile`));
          }
        }
      }
      rows.push({ engine: e.engine, on: summary(runs.on), off: summary(runs.off) });
    }
  } finally {
    await cluster?.destroy();
  }
  ctx.sections.push(render(rows, notes, ctx.opts.rounds));
}

/** One server's creates, then its appends; each window's rate counts the time its queue took to empty after it. */
async function measure(ctx, p, engine) {
  const auth = `Bearer ${token('writer')}`;
  const headers = { authorization: auth };
  const create = buildRequest('POST', '/api/v1/chat-sessions', { headers, body: { projectId: 'index-cost', providerId: PROVIDER, selectedModel: 'm', name: 'Planning the quarterly roadmap review' } });
  const creates = await window(ctx, p, engine, () => create);
  const ids = [];
  for (let i = 0; i < SESSIONS; i++) {
    const r = await api(p.port, 'POST', '/api/v1/chat-sessions', { auth: token('writer'), body: { projectId: 'index-cost', providerId: PROVIDER, selectedModel: 'm', name: `Session ${i}` } });
    if (r.status !== 201) throw new Error(`index-cost: creating a session answered ${r.status} ${r.text}`);
    ids.push(r.body.data._id);
  }
  await drained(p.port, engine);
  // every server of a round writes the same texts in the same order
  const make = texts(-1);
  let n = 0;
  const append = () => buildRequest('POST', `/api/v1/chat-sessions/${ids[n % SESSIONS]}/turns`, { headers, body: { role: 'user', content: make(n++) } });
  const appends = await window(ctx, p, engine, append);
  const light = await window(ctx, p, engine, append, LIGHT_CONNS);
  return { creates, appends, light };
}

async function window(ctx, p, engine, request, connections = CONNS) {
  let cpu0 = NaN;
  const r = await runLoad({ port: p.port, connections, warmupMs: ctx.opts.warmupMs, durationMs: ctx.opts.durationMs, request, onWindowStart: () => (cpu0 = cpuSecondsOf(p.pid)) });
  if (r.errors + r.warmupErrors > 0) throw new Error(`index-cost: ${r.errors} writes failed (${r.firstError ?? [...r.statuses].join(', ')})`);
  const started = performance.now();
  await drained(p.port, engine);
  const drainMs = performance.now() - started;
  const cpu = cpuSecondsOf(p.pid) - cpu0;
  const sorted = Float64Array.from(r.latencies).sort();
  // CPU from the window's start to the empty queue, per write of the window (writes of the warm-up still queued are counted in it)
  return { rate: r.requests / (r.seconds + drainMs / 1000), p50: percentile(sorted, 0.5), p99: percentile(sorted, 0.99), drainMs, cpuMs: (cpu * 1000) / r.requests };
}

/** Waits until what sqlite queued for the index is taken (PostgreSQL indexes in the commit; with SEARCH=off there is nothing to take). */
async function drained(port, engine) {
  if (engine === 'postgres') return;
  for (;;) {
    const r = await api(port, 'GET', '/metrics');
    const left = Number(new RegExp(`^chat_session_api_${engine}_search_unindexed (\\d+)`, 'm').exec(r.text)?.[1] ?? NaN);
    if (!(left > 0)) return;
    await sleep(20);
  }
}

function summary(runs) {
  const pick = (phase, field) => median(runs.map((r) => r[phase][field]));
  return Object.fromEntries(['creates', 'appends', 'light'].map((phase) => [phase, { rate: pick(phase, 'rate'), p50: pick(phase, 'p50'), p99: pick(phase, 'p99'), drainMs: pick(phase, 'drainMs'), cpuMs: pick(phase, 'cpuMs') }]));
}

function render(rows, notes, rounds) {
  const L = ['## What the search index costs the writes (`index-cost`)', ''];
  L.push(
    `Durable writes by ${CONNS} connections with \`SEARCH=on\` against \`SEARCH=off\`, fresh stores, medians of ${rounds} round(s) in alternating order: creates (a name of five words), then appends of about 1 KiB of Zipf-drawn words to ${SESSIONS.toLocaleString('en')} sessions by ${CONNS} connections (the server saturated: what it can take) and by ${LIGHT_CONNS} (what one write waits for when it is not). A rate counts the time sqlite's queue took to empty after its window. Target: on at most 20% slower than off.`,
    '',
    '| engine | write | off /s | on /s | on ÷ off | p50 off ms | p50 on ms | p99 off ms | p99 on ms | CPU µs/write off | CPU µs/write on | met? |',
    '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|',
  );
  for (const r of rows) {
    for (const phase of ['creates', 'appends', 'light']) {
      const on = r.on[phase];
      const off = r.off[phase];
      const ratio = on.rate / off.rate;
      L.push(`| ${r.engine} | ${{ creates: `create, ${CONNS} connections`, appends: `turn append, ${CONNS} connections`, light: `turn append, ${LIGHT_CONNS} connections` }[phase]} | ${off.rate.toFixed(0)} | ${on.rate.toFixed(0)} | ${ratio.toFixed(2)} | ${off.p50.toFixed(2)} | ${on.p50.toFixed(2)} | ${off.p99.toFixed(1)} | ${on.p99.toFixed(1)} | ${(off.cpuMs * 1000).toFixed(0)} | ${(on.cpuMs * 1000).toFixed(0)} | ${ratio >= 0.8 ? 'yes' : '**no**'} |`);
    }
  }
  for (const n of notes) L.push('', `- ${n}`);
  return L.join('\n');
}
