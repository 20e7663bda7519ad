// Replies under hostile providers and at scale (issue 42): the parts of `npm run bench -- replies`
// beside its thousand replies (bench/replies.mjs), each chosen with --replies=a,b (default: all):
//   peers: 200 replies at once from 200 users, 100 tokens at 50 a second, side by side in the same
//     rounds with the peers of ../shared/peers (BENCH_REPLY_PEERS: a copy with its node_modules):
//     their provider (each token's text its send time), a raw byte pipe in front of it (the floor),
//     and a Fastify + openai SDK + node:sqlite relay; driven by their load.mjs, so every target is
//     measured by the same client: CPU per token, time to first token, token delay percentiles;
//   worst: 300 replies at once from the worst providers of item 1 (an event of 120 lines of
//     65,536 "€", 23 MB never dispatched; a line held just under 8 MiB, then a byte a second),
//     the server's peak RSS, how each reply ended, whether it still serves;
//   alternate: one reply of 30,000 one-character pieces, reasoning and text in turn, recorded and
//     read back while a client asks GET /healthz one request after another: its longest wait is
//     the event loop's longest block;
//   history: replies to sessions of 100 turns of 1 MB each (REPLY_CONTEXT_MAX 4 MB): what each
//     reply adds to the server's resident memory.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { api, median, memoryOf, ROOT, SECRET, sleep, startListening, token } from './common.mjs';
import { clusterCpu } from './engines.mjs';
import { flag } from './options.mjs';

const B = '/api/v1/chat-sessions';
export const HOSTILE_PARTS = ['peers', 'worst', 'alternate', 'history'];

/** The parts of `replies` asked for (--replies=a,b or BENCH_REPLIES_PARTS); all by default. */
export function repliesParts() {
  const asked = (flag('replies') ?? process.env.BENCH_REPLIES_PARTS)?.split(',').filter((p) => p !== '');
  return new Set(asked ?? ['thousand', ...HOSTILE_PARTS]);
}

const f1 = (v) => (v === undefined || Number.isNaN(v) ? '–' : v.toFixed(1));
const f2 = (v) => (v === undefined || Number.isNaN(v) ? '–' : v.toFixed(2));

/** A peer of ../shared/peers on its own Node: resolves once it prints `listening <port>`. */
async function startPeer(ctx, dir, script, env) {
  const p = await startListening({ node: join(dir, 'node_modules', '.bin', 'node'), script: join(dir, script), cwd: dir, env });
  ctx.track(p);
  return p;
}

/** One round of the peers' load.mjs against a target: its JSON line. */
function load(dir, args) {
  return new Promise((resolve, reject) => {
    const child = spawn(join(dir, 'node_modules', '.bin', 'node'), [join(dir, 'replies', 'load.mjs'), ...args], { cwd: dir, stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (d) => (out += d));
    child.once('exit', (code) => {
      try {
        resolve(JSON.parse(out.trim().split('\n').at(-1)));
      } catch {
        reject(new Error(`load.mjs exited ${code} without its line: ${out.slice(0, 300)}`));
      }
    });
  });
}

// ---- peers ----

const PEER_REPLIES = Number(process.env.BENCH_PEER_REPLIES ?? 200);

/**
 * 200 replies side by side with the peers: `services` are [{engine, start(providerUrl)}] (our
 * server on each engine, started on the peers' provider), `cluster` PostgreSQL's for its CPU.
 */
export async function peersPart(ctx, services) {
  const dir = process.env.BENCH_REPLY_PEERS ?? join(ROOT, '..', 'shared', 'peers');
  if (!existsSync(join(dir, 'node_modules', 'fastify')) || !existsSync(join(dir, 'node_modules', '.bin', 'node'))) {
    const why = `the peers of ${dir} are not installed (npm ci there, or BENCH_REPLY_PEERS=a copy where it was run)`;
    ctx.progress(`replies peers: SKIPPED, ${why}`);
    return `### Side by side with the peers\n\nSkipped: ${why}.`;
  }
  const provider = await startPeer(ctx, dir, 'replies/provider.mjs', { TOKENS: '100', INTERVAL_MS: '20' });
  const pipe = await startPeer(ctx, dir, 'replies/pipe.mjs', { PROVIDER_URL: provider.url });
  const relay = await startPeer(ctx, dir, 'replies/relay-fastify.mjs', { PROVIDER_URL: `${provider.url}/v1`, AUTH_SECRET: SECRET, PEER_USER: 'peer-user', DATA_DIR: mkdtempSync(join(ctx.runDir(), 'relay-')) });
  const files = mkdtempSync(join(ctx.runDir(), 'peers-load-'));
  const relaySessions = Array.from({ length: PEER_REPLIES }, (_, i) => i.toString(16).padStart(24, '0')).join(',');
  const targets = [
    { name: 'pipe (floor)', pid: pipe.pid, args: ['--target', 'direct', '--url', pipe.url] },
    { name: 'relay (Fastify + openai + node:sqlite)', pid: relay.pid, args: ['--target', 'main', '--url', relay.url, '--token', token('peer-user'), '--sessions', relaySessions] },
  ];
  const started = [];
  try {
    for (const s of services) {
      const server = await s.start(provider);
      started.push(server);
      const sessions = await server.seed(PEER_REPLIES, 'm');
      const jwts = join(files, `${s.engine}.jwts`);
      writeFileSync(jwts, sessions.map((x) => x.auth).join('\n'));
      targets.push({ name: `service (${s.engine})`, engine: s.engine, cluster: s.cluster, pid: server.pid, args: ['--target', 'main', '--url', `http://127.0.0.1:${server.port}`, '--jwts-file', jwts, '--sessions', sessions.map((x) => x.id).join(',')] });
    }
    const common = ['--concurrency', String(PEER_REPLIES), '--rounds', '1', '--tokens', '100'];
    // a warm-up round of each (code compiled, pools filled), not measured
    for (const t of targets) await load(dir, [...t.args, ...common]);
    const runs = new Map(targets.map((t) => [t.name, []]));
    const rounds = ctx.opts.rounds;
    for (let round = 0; round < rounds; round++) {
      for (const t of [...targets.slice(round % targets.length), ...targets.slice(0, round % targets.length)]) {
        await sleep(3000);
        const db0 = t.cluster === undefined ? NaN : clusterCpu(t.cluster);
        const r = await load(dir, [...t.args, ...common, '--pid', String(t.pid)]);
        r.dbUsPerToken = t.cluster === undefined ? NaN : ((clusterCpu(t.cluster) - db0) * 1e6) / r.tokens;
        runs.get(t.name).push(r);
        ctx.progress(`replies peers round ${round + 1}/${rounds} ${t.name}: ${r.ok}/${PEER_REPLIES} ok, first token p50 ${r.ttftMs.p50} ms, token delay p99 ${r.tokenDelayMs.p99} ms, ${r.cpuUsPerToken} µs CPU a token${Number.isNaN(r.dbUsPerToken) ? '' : ` (+ PostgreSQL ${f1(r.dbUsPerToken)})`}`);
      }
    }
    const m = (name, get) => median(runs.get(name).map(get));
    const L = [
      '### Side by side with the peers',
      '',
      `${PEER_REPLIES} replies at once from ${PEER_REPLIES} users (the relay: one user, its preloaded sessions), 100 tokens each at 50 a second from the peers' provider (each token's text its send time), driven by the peers' load.mjs, ${rounds} round(s), the order rotated; medians of the rounds. CPU: the target's process (all threads) per token received; for the service on PostgreSQL, PostgreSQL's own beside it.`,
      '',
      '| target | ok | first token p50 / p99 ms | token delay p50 / p99 ms | CPU µs a token |',
      '|---|---|---|---|---|',
    ];
    for (const t of targets) {
      const rs = runs.get(t.name);
      L.push(`| ${t.name} | ${rs.map((r) => r.ok).join(', ')} | ${f1(m(t.name, (r) => r.ttftMs.p50))} / ${f1(m(t.name, (r) => r.ttftMs.p99))} | ${f2(m(t.name, (r) => r.tokenDelayMs.p50))} / ${f1(m(t.name, (r) => r.tokenDelayMs.p99))} | ${t.name.startsWith('pipe') ? f1(m(t.name, (r) => r.cpuUsPerToken)) : f1(m(t.name, (r) => r.cpuUsPerToken))}${t.cluster === undefined ? '' : ` + ${f1(m(t.name, (r) => r.dbUsPerToken))} PostgreSQL`} |`);
    }
    const relayName = targets[1].name;
    const pipeName = targets[0].name;
    L.push('', '| service | CPU a token ÷ relay (goal ≤ 0.8) | first token p50 ÷ relay (goal ≤ 0.6) | token p99 − pipe ms (goal ≤ +20) |', '|---|---|---|---|');
    for (const t of targets.filter((x) => x.engine !== undefined)) {
      const cpu = m(t.name, (r) => r.cpuUsPerToken) / m(relayName, (r) => r.cpuUsPerToken);
      const ttft = m(t.name, (r) => r.ttftMs.p50) / m(relayName, (r) => r.ttftMs.p50);
      const p99 = m(t.name, (r) => r.tokenDelayMs.p99) - m(pipeName, (r) => r.tokenDelayMs.p99);
      const met = (x) => (x ? 'met' : '**not met**');
      L.push(`| ${t.engine} | ${f2(cpu)} (${met(cpu <= 0.8)}) | ${f2(ttft)} (${met(ttft <= 0.6)}) | +${f1(p99)} (${met(p99 <= 20)}) |`);
    }
    return L.join('\n');
  } finally {
    for (const s of started) await s.stop();
    for (const p of [relay, pipe, provider]) await p.stop();
  }
}

// ---- the worst providers of item 1 ----

const WORST = Number(process.env.BENCH_WORST_N ?? 300);
const WORST_PROVIDERS = [
  { name: 'an event of 120 lines of 65,536 "€" (23 MB, never dispatched)', model: 'data-lines:120:65536' },
  { name: 'a line held just under 8 MiB, then a byte a second', model: 'long-line:8380000:1000' },
];

/** Samples a process's RSS every 50 ms until stopped: the largest seen. */
function rssSampler(pid) {
  let peak = 0;
  let on = true;
  const done = (async () => {
    while (on) {
      peak = Math.max(peak, memoryOf(pid).rssMiB);
      await sleep(50);
    }
  })();
  return async () => {
    on = false;
    await done;
    return peak;
  };
}

/** 300 replies at once from each worst provider, on `server` (started with the thousand's settings). */
export async function worstPart(ctx, engine, server) {
  const rows = [];
  for (const w of WORST_PROVIDERS) {
    const sessions = await server.seed(WORST, w.model);
    await sleep(2000);
    const before = memoryOf(server.pid).rssMiB;
    const stop = rssSampler(server.pid);
    const t0 = performance.now();
    // (a connection each: the shared agent would queue them 32 at a time)
    const answers = await Promise.all(sessions.map((s, i) => api(server.port, 'POST', `${B}/${s.id}/messages`, { auth: s.auth, body: { content: `worst ${i}` }, keepAlive: false }).catch((e) => ({ status: 0, text: String(e) }))));
    const seconds = (performance.now() - t0) / 1000;
    const peak = await stop();
    const ended = new Map();
    for (const a of answers) {
      const key = a.status === 201 ? `${a.body.data.reply.status}: ${a.body.data.reply.error?.message.replace(/^Provider "[^"]+" /, '').replace(/\d+ MiB/, 'N MiB') ?? ''}` : `${a.status} ${a.body?.message ?? a.text?.slice(0, 80)}`;
      ended.set(key, (ended.get(key) ?? 0) + 1);
    }
    const healthy = (await api(server.port, 'GET', '/healthz')).status === 200;
    const held = /^chat_session_api_replies_held_limit_bytes (\d+)$/m.exec((await api(server.port, 'GET', '/metrics')).text ?? '')?.[1];
    rows.push({ name: w.name, seconds, before, peak, ended, healthy, held: held === undefined ? NaN : Number(held) / 2 ** 20 });
    ctx.progress(`replies worst ${engine} ${w.name}: ${seconds.toFixed(1)} s, RSS ${before.toFixed(0)} -> peak ${peak.toFixed(0)} MiB, ${[...ended].map(([k, n]) => `${n} × ${k}`).join('; ')}; healthz ${healthy ? 'ok' : 'NOT ok'}`);
  }
  return rows;
}

export function renderWorst(results) {
  const L = [
    '### The worst providers of item 1',
    '',
    `${WORST} replies at once from each provider, one after the other, on a server started as for the thousand (MAX_CONNECTIONS=4000, MAX_STREAMS=2000, MEMORY_LIMIT as found: the machine's), each its own session and user; the server's RSS sampled every 50 ms.`,
    '',
    '| engine | provider | wall s | RSS before → peak MiB (goal < 300) | what all replies may hold unfinished (MiB) | how the replies ended | /healthz after |',
    '|---|---|---:|---|---:|---|---|',
  ];
  for (const { engine, rows } of results) {
    for (const r of rows) L.push(`| ${engine} | ${r.name} | ${r.seconds.toFixed(1)} | ${r.before.toFixed(0)} → ${r.peak.toFixed(0)} (${r.peak < 300 ? 'met' : '**not met**'}) | ${r.held.toFixed(0)} | ${[...r.ended].map(([k, n]) => `${n} × ${k}`).join('; ')} | ${r.healthy ? 'ok' : '**not ok**'} |`);
  }
  return L.join('\n');
}

// ---- a reply of 30,000 pieces alternating ----

/** GET /healthz one after another until stopped: the longest answer (ms), and how many. */
function pinger(port) {
  let longest = 0;
  let n = 0;
  let on = true;
  const done = (async () => {
    while (on) {
      const t = performance.now();
      await api(port, 'GET', '/healthz');
      longest = Math.max(longest, performance.now() - t);
      n++;
      await sleep(2);
    }
  })();
  return async () => {
    on = false;
    await done;
    return { longest, n };
  };
}

export async function alternatePart(ctx, engine, server) {
  const [s] = await server.seed(1, 'alternate:30000');
  let stop = pinger(server.port);
  const t0 = performance.now();
  const r = await api(server.port, 'POST', `${B}/${s.id}/messages`, { auth: s.auth, body: { content: 'think aloud' } });
  const recordMs = performance.now() - t0;
  const recording = await stop();
  const reply = r.body?.data?.reply;
  const parts = Array.isArray(reply?.content) ? reply.content.length : 0;
  stop = pinger(server.port);
  const gets = [];
  for (let i = 0; i < 5; i++) {
    const g0 = performance.now();
    const g = await api(server.port, 'GET', `${B}/${s.id}/turns/${reply?._id}`, { auth: s.auth });
    gets.push(performance.now() - g0);
    if (g.status !== 200 || g.body.data.content.length !== parts) throw new Error(`alternate: GET answered ${g.status} with ${g.body?.data?.content?.length} parts`);
  }
  const reading = await stop();
  const row = { engine, status: reply?.status, parts, recordMs, recording, gets, reading };
  ctx.progress(`replies alternate ${engine}: ${reply?.status} with ${parts} parts in ${recordMs.toFixed(0)} ms (longest /healthz ${recording.longest.toFixed(1)} ms of ${recording.n}); GET ${gets.map((x) => x.toFixed(0)).join(', ')} ms (longest /healthz ${reading.longest.toFixed(1)} ms)`);
  return row;
}

export function renderAlternate(rows) {
  const L = [
    '### A reply of 30,000 pieces alternating reasoning and text',
    '',
    "One reply of 30,000 one-character pieces, reasoning and text in turn, as fast as the local provider writes them (30,000 parts recorded), the waiting POST; then five GETs of the turn. Meanwhile a client asks GET /healthz one request after another: the longest of those answers bounds the event loop's longest block (goal < 50 ms).",
    '',
    '| engine | recorded | POST ms | GET ms (5) | longest /healthz while recording / reading ms (goal < 50) |',
    '|---|---|---:|---|---|',
  ];
  for (const r of rows) {
    const longest = Math.max(r.recording.longest, r.reading.longest);
    L.push(`| ${r.engine} | ${r.status}, ${r.parts} parts | ${r.recordMs.toFixed(0)} | ${r.gets.map((x) => x.toFixed(0)).join(', ')} | ${r.recording.longest.toFixed(1)} (of ${r.recording.n}) / ${r.reading.longest.toFixed(1)} (of ${r.reading.n}): ${longest < 50 ? 'met' : '**not met**'} |`);
  }
  return L.join('\n');
}

// ---- a 100 x 1 MB history ----

const HISTORY_SESSIONS = Number(process.env.BENCH_HISTORY_N ?? 4);
const HISTORY_TURNS = 100;

export async function historyPart(ctx, engine, server) {
  const sessions = await server.seed(HISTORY_SESSIONS, 'say:ok');
  const big = 'h'.repeat(1_000_000);
  const t0 = performance.now();
  for (const s of sessions) {
    for (let i = 0; i < HISTORY_TURNS; i++) {
      const r = await api(server.port, 'POST', `${B}/${s.id}/turns`, { auth: s.auth, body: { role: i % 2 === 0 ? 'user' : 'assistant', content: `${i} ${big}` } });
      if (r.status !== 201) throw new Error(`history: a turn answered ${r.status} ${r.text?.slice(0, 200)}`);
    }
  }
  ctx.progress(`replies history ${engine}: ${HISTORY_SESSIONS} sessions of ${HISTORY_TURNS} turns of 1 MB written in ${((performance.now() - t0) / 1000).toFixed(0)} s`);
  await sleep(3000);
  const rows = [];
  for (const n of [1, HISTORY_SESSIONS]) {
    const before = memoryOf(server.pid).rssMiB;
    const stop = rssSampler(server.pid);
    const r0 = performance.now();
    const answers = await Promise.all(sessions.slice(0, n).map((s) => api(server.port, 'POST', `${B}/${s.id}/messages`, { auth: s.auth, body: { content: 'and now?' }, keepAlive: false })));
    const seconds = (performance.now() - r0) / 1000;
    const peak = await stop();
    const ok = answers.filter((a) => a.status === 201 && a.body.data.reply.status === 'complete').length;
    rows.push({ engine, n, before, peak, perReply: (peak - before) / n, seconds, ok });
    ctx.progress(`replies history ${engine}: ${n} at once, ${ok} complete in ${seconds.toFixed(1)} s, RSS ${before.toFixed(0)} -> peak ${peak.toFixed(0)} MiB`);
    await sleep(3000);
  }
  return rows;
}

export function renderHistory(rows) {
  const L = [
    '### Replies to a 100 × 1 MB history',
    '',
    `Sessions of ${HISTORY_TURNS} turns of 1 MB each (BODY_LIMIT 1mb, REPLY_CONTEXT_MAX 4mb: the last 4 of them are sent); replies asked on 1 of them, then ${HISTORY_SESSIONS} at once; the server's RSS sampled every 50 ms. Goal: a reply adds under the context bound + 10 MiB (14 MiB).`,
    '',
    '| engine | replies at once | complete | s | RSS before → peak MiB | added a reply MiB |',
    '|---|---:|---:|---:|---|---:|',
  ];
  for (const r of rows) L.push(`| ${r.engine} | ${r.n} | ${r.ok} | ${r.seconds.toFixed(1)} | ${r.before.toFixed(0)} → ${r.peak.toFixed(0)} | ${r.perReply.toFixed(1)} (${r.perReply < 14 ? 'met' : '**not met**'}) |`);
  return L.join('\n');
}
