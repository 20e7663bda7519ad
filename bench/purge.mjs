// The background purge under a read load (issue #14, "Measured"): a store holding 100,000
// expired sessions, each with two turns of 1 KiB (bench/datagen.mjs's layout, dated 2024, so
// RETENTION_DAYS=30 has them all gone), beside 50 live sessions that 32 connections read (GET by
// id on half of them, the owner's list on the other half). The server runs twice from copies of
// the same data: with PURGE_INTERVAL=off (the reads alone), and with the purge on, which starts
// with the server and deletes the expired sessions in batches of 100 while the reads run. The
// reads are measured in windows of one second until the purge is done (the same number of
// windows without it); the target is a read p99 under twice its value without the purge.
//
// Engine: sqlite, its store written by bench/datagen-sqlite.mjs (on the Node.js 24 of
// node_modules, for node:sqlite). PostgreSQL is not run here (its purge deletes through the
// same batches; see bench/README.md). The journal's row went with the journal.
import { cpSync, copyFileSync, existsSync, mkdtempSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { api, EXAMPLE_PROVIDERS, NODE_24, NODE_OLDEST, ROOT, SECRET, SERVER, startProcess, token } from './common.mjs';
import { buildRequest, percentile, runLoad } from './loadgen.mjs';

const CONNS = 32;
const LIVE = 50;
const WINDOW_MS = 1000;
const MAX_WINDOWS = 120;

/** The scenario, given the run's shared pieces (opts, progress, runDir(), track(process), sections). */
export function purgeScenarios(ctx) {
  return [{ name: 'purge-load', run: () => purgeLoad(ctx) }];
}

async function purgeLoad(ctx) {
  const expired = ctx.opts.quick ? 10_000 : 100_000;
  const rows = [];
  const notes = [];
  for (const engine of ['sqlite']) {
    const node = NODE_OLDEST;
    if (!existsSync(NODE_24)) {
      notes.push('sqlite: skipped, node_modules has no Node.js 24 to write its store with (npm ci)');
      continue;
    }
    const seed = join(ctx.runDir(), `purge-seed-${engine}`);
    ctx.progress(`purge-load ${engine}: writing ${expired} expired sessions with ${2 * expired} turns...`);
    execFileSync(NODE_24, [join(ROOT, 'bench', 'datagen-sqlite.mjs'), seed, String(expired), String(2 * expired)], { stdio: ['ignore', 'ignore', 2] });
    copyFileSync(EXAMPLE_PROVIDERS, join(seed, 'providers.json'));
    // the live sessions, written once by a server that does not purge, so both runs start from the same files
    const ids = await withServer(ctx, engine, node, seed, 'off', async (p) => {
      const made = [];
      for (let i = 0; i < LIVE; i++) {
        const r = await api(p.port, 'POST', '/api/v1/chat-sessions', { auth: token('reader'), body: { projectId: 'live', providerId: '665f1c2a9b1e8a0012ab34c1', selectedModel: 'm', name: `live ${i}` } });
        if (r.status !== 201) throw new Error(`purge-load: creating a live session answered ${r.status} ${r.text}`);
        made.push(r.body.data._id);
      }
      return made;
    });
    const auth = `Bearer ${token('reader')}`;
    const reqs = Array.from({ length: CONNS }, (_, c) =>
      c % 2 === 0 ? buildRequest('GET', `/api/v1/chat-sessions/${ids[c % ids.length]}`, { headers: { authorization: auth } }) : buildRequest('GET', '/api/v1/chat-sessions', { headers: { authorization: auth } }),
    );
    const measured = {};
    let windows;
    for (const purge of ['1m', 'off']) {
      const dir = mkdtempSync(join(ctx.runDir(), `purge-${engine}-`));
      cpSync(seed, dir, { recursive: true });
      measured[purge] = await withServer(ctx, engine, node, dir, purge, async (p) => {
        const latencies = [];
        let requests = 0;
        let purged = 0;
        let n = 0;
        const started = performance.now();
        for (; n < MAX_WINDOWS; n++) {
          const r = await runLoad({ port: p.port, connections: CONNS, warmupMs: 0, durationMs: WINDOW_MS, request: (c) => reqs[c] });
          requests += r.requests;
          for (const l of r.latencies) latencies.push(l);
          if (purge === 'off') {
            if (n + 1 >= windows) break;
            continue;
          }
          purged = await purgedSoFar(p.port);
          if (purged >= expired) break;
        }
        const sorted = Float64Array.from(latencies).sort();
        return { windows: n + 1, seconds: (performance.now() - started) / 1000, requests, purged, p50: percentile(sorted, 0.5), p99: percentile(sorted, 0.99), max: sorted.at(-1) };
      });
      if (purge === '1m') windows = measured[purge].windows;
      ctx.progress(`purge-load ${engine}, purge ${purge === 'off' ? 'off' : 'on'}: ${measured[purge].windows} windows, ${measured[purge].requests} reads, p99 ${measured[purge].p99.toFixed(2)} ms, purged ${measured[purge].purged}`);
    }
    rows.push({ engine, expired, on: measured['1m'], off: measured.off });
  }
  ctx.sections.push(render(rows, notes));
}

async function purgedSoFar(port) {
  const r = await api(port, 'GET', '/metrics');
  return Number(/^chat_session_api_purged_sessions_total (\d+)/m.exec(r.text)?.[1] ?? 0);
}

let seq = 0;
async function withServer(ctx, engine, node, dir, purgeInterval, fn) {
  const env = { DATA_DIR: dir, AUTH_SECRET: SECRET, LOG_LEVEL: ctx.opts.logLevel, HOST: '127.0.0.1', STORE: engine, RETENTION_DAYS: '30', PURGE_INTERVAL: purgeInterval };
  const p = await startProcess({ script: SERVER, cwd: dir, env, node, logFile: join(ctx.runDir(), `purge-${engine}-${++seq}.log`), timeoutMs: 600_000 });
  ctx.track(p);
  try {
    return await fn(p);
  } finally {
    await p.stop();
  }
}

function render(rows, notes) {
  const L = ['## The purge under a read load (`purge-load`)', ''];
  L.push(
    `The store holds ${rows[0]?.expired.toLocaleString('en') ?? '?'} sessions gone by RETENTION_DAYS=30 (two 1 KiB turns each) and ${LIVE} live ones that ${CONNS} connections read (GET by id, and the owner's list). Purge on: the background purge starts with the server and deletes in batches of 100 while the reads run, measured in ${WINDOW_MS / 1000} s windows until it is done; off: the same number of windows on a copy of the same files with PURGE_INTERVAL=off. Target: read p99 with the purge < 2 × without.`,
    '',
    '| engine | purge | windows (s) | reads | read p50 ms | read p99 ms | max ms | purged | p99 on ÷ off (< 2) |',
    '|---|---|---:|---:|---:|---:|---:|---:|---|',
  );
  for (const r of rows) {
    const x = r.on.p99 / r.off.p99;
    L.push(`| ${r.engine} | on | ${r.on.windows} (${r.on.seconds.toFixed(1)}) | ${r.on.requests.toLocaleString('en')} | ${r.on.p50.toFixed(2)} | ${r.on.p99.toFixed(2)} | ${r.on.max.toFixed(1)} | ${r.on.purged.toLocaleString('en')} | ${x.toFixed(2)} ${x < 2 ? '(met)' : '(**not met**)'} |`);
    L.push(`| ${r.engine} | off | ${r.off.windows} (${r.off.seconds.toFixed(1)}) | ${r.off.requests.toLocaleString('en')} | ${r.off.p50.toFixed(2)} | ${r.off.p99.toFixed(2)} | ${r.off.max.toFixed(1)} | – | |`);
  }
  for (const n of notes) L.push('', `- ${n}`);
  return L.join('\n');
}
