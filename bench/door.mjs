// The OpenAI door under load (issue 40, "Measured"; `npm run bench -- door door-lookup`), on
// sqlite and on PostgreSQL, against the local provider of test/provider/server.mjs in a process
// of its own (bench/replies.mjs's pieces: the provider, the servers, the raw-socket streams):
//   door: two hundred replies at once from two hundred users, 100 tokens each at 50 a second,
//     the same reply by five paths in the same rounds, the order rotating: through the door
//     (POST /v1/chat/completions, stream, include_usage: a new conversation, as an SDK sends
//     it), through the door into a session named by X-Session-Id (the native path's work plus
//     the door's translation), through the native API (POST .../messages, Accept:
//     text/event-stream), through the peer relay ../shared/peers/replies/relay-fastify.mjs
//     (Fastify + the openai SDK + node:sqlite), and from the provider directly (the floor).
//     Each token carries the time the provider wrote it (`stamp`); CPU per token of the process
//     that relays (all threads) and time to first token, and their ratios round by round.
//   door-lookup: a conversation continued with no header (rule 3 of docs/openai.md: the
//     caller's session holding the path of the messages before the last, found through the
//     turns' path_key index), by a user with 10 sessions and by one with 100,000, and the same
//     request naming its session (X-Session-Id: no lookup), round by round.
import { spawnSync } from 'node:child_process';
import { closeSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, openSync, symlinkSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { api, cpuSecondsOf, median, NODE_24, nodeVersion, ROOT, SECRET, sleep, startListening, token } from './common.mjs';
import { clusterCpu } from './engines.mjs';
import { percentile } from './loadgen.mjs';
import { checkRecorded, directRequest, enginesToRun, KEY, ms, namedEngines, now, perToken, pooled, PROVIDER_ID, QUIET_MS, RATE, runStreams, Samples, seedSessions, serviceRequest, startProviderProcess, startServer, Stream, us } from './replies.mjs';

/** Replies at once (the peers' README: 200 users, one reply each). */
const N = Number(process.env.BENCH_DOOR_N ?? 200);
/** Tokens per reply (BENCH_DOOR_TOKENS=2: what a request costs apart from its tokens shows). */
const TOKENS = Number(process.env.BENCH_DOOR_TOKENS ?? 100);
/** The door's id of the local provider, named "Local" in the providers.json of startServer. */
const SLUG = 'local';
/** The peer relay, run unchanged (BENCH_RELAY names another copy). */
const RELAY = process.env.BENCH_RELAY ?? join(ROOT, '..', 'shared', 'peers', 'replies', 'relay-fastify.mjs');
const RELAY_PACKAGES = ['fastify', '@fastify/jwt', 'openai'];

export const DOOR_GROUPS = { door: ['door-replies', 'door-lookup'] };

export function doorScenarios(ctx) {
  return [
    { name: 'door-replies', run: () => doorReplies(ctx) },
    { name: 'door-lookup', run: () => doorLookup(ctx) },
  ];
}

const rotated = (list, round) => [...list.slice(round % list.length), ...list.slice(0, round % list.length)];

// ---- the peer relay ----

const hasPackages = (dir) => RELAY_PACKAGES.every((p) => existsSync(join(dir, 'node_modules', p, 'package.json')));

/**
 * The relay's script: its own file when its packages are installed beside it (`npm ci` in
 * ../shared/peers), else a copy in the run's directory beside $BENCH_PEERS's node_modules (an
 * `npm ci --prefix DIR` of ../shared/peers/package-lock.json); {why} when neither.
 */
function relayScript(ctx) {
  if (!existsSync(RELAY)) return { why: `there is no peer relay at ${RELAY}` };
  if (hasPackages(dirname(RELAY)) || hasPackages(dirname(dirname(RELAY)))) return { script: RELAY };
  const dir = process.env.BENCH_PEERS;
  if (dir !== undefined && dir !== '' && hasPackages(dir)) {
    const here = join(ctx.runDir(), 'relay');
    mkdirSync(here);
    copyFileSync(RELAY, join(here, 'relay-fastify.mjs'));
    symlinkSync(join(dir, 'node_modules'), join(here, 'node_modules'));
    return { script: join(here, 'relay-fastify.mjs') };
  }
  return { why: `the relay's packages (${RELAY_PACKAGES.join(', ')}) are neither in ${dirname(dirname(RELAY))}/node_modules nor in BENCH_PEERS (${dir || 'unset'}): npm ci there, or cp its package.json and package-lock.json to DIR, npm ci --prefix DIR and set BENCH_PEERS=DIR` };
}

/**
 * The relay's sessions, written into its file before it starts (it preloads its own with the
 * model "m" and one owner, INSERT OR IGNORE): `blocks` blocks of N, session i of a block owned by
 * replier-i with the model of `modelOf(block)`, so the relay asks the local provider for the
 * same reply as the other paths, for the same users.
 */
function preloadRelay(dir, blocks, modelOf) {
  const rows = [];
  for (let b = 0; b < blocks; b++) for (let i = 0; i < N; i++) rows.push([(b * N + i).toString(16).padStart(24, '0'), `replier-${i}`, modelOf(b)]);
  const code = `const { DatabaseSync } = require('node:sqlite');
    const db = new DatabaseSync(process.argv[1]);
    db.exec('CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, user_id TEXT NOT NULL, model TEXT NOT NULL) WITHOUT ROWID');
    const put = db.prepare('INSERT INTO sessions VALUES (?, ?, ?)');
    db.exec('BEGIN');
    for (const r of JSON.parse(require('node:fs').readFileSync(0, 'utf8'))) put.run(...r);
    db.exec('COMMIT');
    db.close();`;
  mkdirSync(dir, { recursive: true });
  const r = spawnSync(NODE_24, ['-e', code, join(dir, 'relay.db')], { input: JSON.stringify(rows), encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`preloading the relay's sessions failed: ${r.stderr}`);
}

/** The relay on Node 24 (node:sqlite), its sessions preloaded: {port, pid, take(): the next block's sessions, stop}. */
async function startRelay(ctx, script, provider, blocks, modelOf) {
  const dir = mkdtempSync(join(ctx.runDir(), 'relay-data-'));
  preloadRelay(dir, blocks, modelOf);
  const fd = openSync(join(ctx.runDir(), 'door-relay.log'), 'a');
  let started;
  try {
    started = await startListening({ node: NODE_24, script, env: { AUTH_SECRET: SECRET, PROVIDER_URL: `${provider.url}/v1`, PROVIDER_KEY: KEY, DATA_DIR: dir }, stderr: fd });
  } finally {
    closeSync(fd);
  }
  let block = 0;
  const relay = {
    ...started,
    take() {
      const b = block++;
      if (b >= blocks) throw new Error('the relay has no preloaded sessions left');
      return Array.from({ length: N }, (_, i) => ({ id: (b * N + i).toString(16).padStart(24, '0'), auth: token(`replier-${i}`) }));
    },
  };
  ctx.track(relay);
  ctx.progress(`door-replies: the peer relay (${script}) listens on ${relay.port} (Node ${nodeVersion(NODE_24)})`);
  return relay;
}

// ---- door-replies ----

/** A streamed completion as the openai SDK asks it: a new conversation, or (sessionId) one of the caller's sessions. */
const doorRequest = (i, auth, model, sessionId) => {
  const body = JSON.stringify({ model: `${SLUG}/${model}`, messages: [{ role: 'user', content: `hello ${i}` }], stream: true, stream_options: { include_usage: true } });
  const named = sessionId === undefined ? '' : `x-session-id: ${sessionId}\r\n`;
  return Buffer.from(`POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${auth}\r\ncontent-type: application/json\r\naccept: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${named}\r\n${body}`, 'latin1');
};

/** A session's create as a client of the native API sends it before its first message (the door's new session: project default, named after the message). */
const createRequest = (auth, model, i) => {
  const body = JSON.stringify({ projectId: 'default', providerId: PROVIDER_ID, selectedModel: model, name: `hello ${i}` });
  return Buffer.from(`POST /api/v1/chat-sessions HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${auth}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`, 'latin1');
};

/**
 * What runs at once: the paths of a burst side by side (their connections opened, then their
 * requests written interleaved), the bursts one after another. The machine is shared and noisy:
 * paths measured over the same seconds meet the same noise, so their ratio holds where figures
 * taken apart do not. The door and the native API run on two servers of the same build whose
 * roles swap every round (of two servers, the first started measures some percent cheaper:
 * bench/README.md, "Which server comes first"). A new conversation through the door is one
 * request; through the native API it is two (the session's create, then the message), on the
 * same connection: `native-new`, beside the door's. The door with X-Session-Id and `native` each
 * add a message to an empty session made before the round.
 */
const BURSTS = [['door', 'native-new', 'relay'], ['door-session', 'native'], ['direct']];
/** BENCH_DOOR_PATHS=door,native: only those (a profile of one path, --profile, runs it alone). */
const PATHS_NAMED = process.env.BENCH_DOOR_PATHS?.split(',').filter((p) => p !== '');
/** BENCH_DOOR_SWAP=off: the servers keep their roles (a profiled with the door's paths only, b with the native API's). */
const SWAP = process.env.BENCH_DOOR_SWAP !== 'off';
const LABEL = {
  door: 'door, a new conversation',
  'native-new': 'native, a new conversation (create, then message)',
  'door-session': 'door, X-Session-Id of an empty session',
  native: 'native, POST .../messages to an empty session',
  relay: 'relay (Fastify + openai + node:sqlite)',
  direct: 'direct (the provider)',
};

async function doorReplies(ctx) {
  const model = `tokens:${TOKENS}@${RATE}+stamp`;
  const warm = `tokens:5@${RATE}+stamp`;
  const engines = namedEngines(ctx);
  const provider = await startProviderProcess(ctx);
  const results = [];
  const notes = [];
  let relay;
  try {
    // unless BENCH_DOOR_PATHS leaves it out
    const found = PATHS_NAMED === undefined || PATHS_NAMED.includes('relay') ? relayScript(ctx) : undefined;
    if (found?.why !== undefined) {
      process.stderr.write(`\n*** door-replies: the relay is SKIPPED: ${found.why} ***\n\n`);
      notes.push(`**The relay is skipped**: ${found.why}.`);
    } else if (found !== undefined) {
      // a warm-up block and one per round, for each engine's pass
      relay = await startRelay(ctx, found.script, provider, engines.length * (ctx.opts.rounds + 1), (b) => (b % (ctx.opts.rounds + 1) === 0 ? warm : model));
    }
    for await (const { engine, cluster } of enginesToRun(ctx, notes)) results.push({ engine, ...(await doorRounds(ctx, engine, cluster, provider, relay, model, warm)) });
  } finally {
    await relay?.stop();
    await provider.stop();
  }
  ctx.sections.push(renderReplies(ctx, results, notes));
}

async function doorRounds(ctx, engine, cluster, provider, relay, model, warm) {
  // the server's defaults hold 500 streams; more replies at once need more
  const env = N > 200 ? { MAX_CONNECTIONS: String(N * 3), MAX_STREAMS: String(N * 2) } : {};
  const servers = [await startServer(ctx, engine, cluster, provider, 'door-a', env), await startServer(ctx, engine, cluster, provider, 'door-b', env)];
  const users = Array.from({ length: N }, (_, i) => token(`replier-${i}`));
  const recordedBy = (server, streams, where) => checkRecorded(server.port, streams.map((s, i) => ({ ...where(s, i), tokens: s.tokens })));
  const native = async (m, server) => {
    const sessions = await seedSessions(server.port, N, m);
    return { pid: server.pid, streams: (d) => sessions.map((s, i) => new Stream(server.port, serviceRequest(s, i), 'service', d)), check: (streams) => recordedBy(server, streams, (s, i) => ({ session: sessions[i].id, reply: s.replyId, auth: sessions[i].auth })) };
  };
  /** Each path's streams for one round on `server`: its sessions made first where it needs them (not measured), the process it measures, how its replies are checked. */
  const prepare = {
    direct: async (m) => ({ streams: (d) => users.map((_, i) => new Stream(provider.port, directRequest(m, i), 'direct', d)) }),
    native,
    'native-new': async (m, server) => {
      const ids = new Array(N);
      const then = (auth, i) => (body) => {
        ids[i] = body.data._id;
        return serviceRequest({ id: ids[i], auth }, i);
      };
      return { pid: server.pid, streams: (d) => users.map((auth, i) => new Stream(server.port, undefined, 'service', d, { request: createRequest(auth, m, i), then: then(auth, i) })), check: (streams) => recordedBy(server, streams, (s, i) => ({ session: ids[i], reply: s.replyId, auth: users[i] })) };
    },
    door: async (m, server) => ({ pid: server.pid, streams: (d) => users.map((auth, i) => new Stream(server.port, doorRequest(i, auth, m), 'door', d)), check: (streams) => recordedBy(server, streams, (s, i) => ({ session: s.sessionId, reply: s.replyId, auth: users[i] })) }),
    'door-session': async (m, server) => {
      const sessions = await seedSessions(server.port, N, m);
      return { pid: server.pid, streams: (d) => sessions.map((s, i) => new Stream(server.port, doorRequest(i, s.auth, m, s.id), 'door', d)), check: (streams) => recordedBy(server, streams, (s, i) => ({ session: s.sessionId, reply: s.replyId, auth: users[i] })) };
    },
    relay: async () => {
      const sessions = relay.take();
      return { pid: relay.pid, streams: (d) => sessions.map((s, i) => new Stream(relay.port, serviceRequest(s, i), 'service', d)), check: async (streams) => relayRecorded(streams) };
    },
  };
  // the door's paths on one server, the native API's on the other, swapped every round (BENCH_DOOR_SWAP=off: the door's always on a, so that --profile profiles each alone)
  const serverOf = (path, round) => servers[((path.startsWith('door') ? 0 : 1) + (SWAP ? round : 0)) % 2];
  const bursts = BURSTS.map((b) => b.filter((p) => (p !== 'relay' || relay !== undefined) && (PATHS_NAMED === undefined || PATHS_NAMED.includes(p)))).filter((b) => b.length > 0);
  const runs = Object.fromEntries(bursts.flat().map((p) => [p, []]));
  const rounds = ctx.opts.rounds;
  try {
    // a warm-up of each path on each server with short replies (the code compiled, the caches filled), not measured
    for (const burst of bursts) for (const round of [0, 1]) for (const path of burst) if (path !== 'relay' || round === 0) await runStreams((await prepare[path](warm, serverOf(path, round))).streams(new Samples()));
    for (let round = 0; round < rounds; round++) {
      for (const burst of rotated(bursts, round)) {
        const prepared = [];
        for (const path of burst) prepared.push({ path, delays: new Samples(), ...(await prepare[path](model, serverOf(path, round))) });
        // after a quiet spell longer than the server keeps idle connections to the provider (4 s): each burst opens its own; and the servers idle
        await sleep(QUIET_MS);
        for (const s of servers) await quiet(s.pid);
        for (const p of prepared) p.list = p.streams(p.delays);
        // the requests written interleaved: none of the paths is served first
        const all = [];
        for (let i = 0; i < N; i++) for (const p of prepared) all.push(p.list[i]);
        const before = prepared.map((p) => (p.pid === undefined ? undefined : { cpu: cpuSecondsOf(p.pid), main: cpuSecondsOf(p.pid, { mainThread: true }) }));
        const prov0 = cpuSecondsOf(provider.pid);
        const db0 = cluster === undefined ? NaN : clusterCpu(cluster);
        await runStreams(all);
        const provUs = ((cpuSecondsOf(provider.pid) - prov0) / all.reduce((n, s) => n + s.tokens.length, 0)) * 1e6;
        const ours = prepared.filter((p) => servers.some((s) => s.pid === p.pid));
        const dbUs = cluster === undefined || ours.length === 0 ? NaN : ((clusterCpu(cluster) - db0) / ours.reduce((n, p) => n + p.list.reduce((k, s) => k + s.tokens.length, 0), 0)) * 1e6;
        for (const [k, p] of prepared.entries()) {
          const streams = p.list;
          const run = {
            path: p.path,
            seconds: (Math.max(...streams.map((s) => s.endedAt)) - Math.min(...streams.map((s) => s.sentAt))) / 1000,
            serverCpu: p.pid === undefined ? NaN : cpuSecondsOf(p.pid) - before[k].cpu,
            serverMain: p.pid === undefined ? NaN : cpuSecondsOf(p.pid, { mainThread: true }) - before[k].main,
            providerUs: provUs,
            dbUs: ours.includes(p) ? dbUs : NaN,
            tokens: streams.reduce((n, s) => n + s.tokens.length, 0),
            complete: streams.filter((s) => s.error === undefined && s.tokens.length === TOKENS).length,
            errors: streams.filter((s) => s.error !== undefined).map((s) => s.error),
            delays: p.delays.sorted(),
            ttft: Float64Array.from(streams.filter((s) => s.firstAt > 0).map((s) => s.firstAt - s.sentAt)).sort(),
          };
          if (p.check !== undefined) run.recorded = await p.check(streams);
          runs[p.path].push(run);
          ctx.progress(
            `door-replies ${engine} round ${round + 1}/${rounds} ${p.path}${p.pid === undefined ? '' : ` (${p.pid === relay?.pid ? 'relay' : p.pid === servers[0].pid ? 'server a' : 'server b'})`}: ${run.complete}/${N} complete${run.recorded === undefined ? '' : `, ${run.recorded.ok} recorded whole`} in ${run.seconds.toFixed(2)} s; token delay p50 ${ms(percentile(run.delays, 0.5))} p99 ${ms(percentile(run.delays, 0.99))} ms; first token p50 ${ms(percentile(run.ttft, 0.5))} p99 ${ms(percentile(run.ttft, 0.99))} ms; ${us((run.serverCpu / run.tokens) * 1e6)} µs CPU per token${run.errors.length > 0 ? `; first error: ${run.errors[0]}` : ''}${run.recorded?.first === undefined ? '' : `; not recorded whole: ${run.recorded.first}`}`,
          );
        }
      }
    }
    return { rounds, runs };
  } finally {
    for (const s of servers) await s.stop();
  }
}

/** The relay records a reply at its end, then sends it whole in its last turn.updated: complete, the text the stream told, and usage. */
function relayRecorded(streams) {
  let ok = 0;
  let first;
  for (const s of streams) {
    const f = s.final;
    const why = f === undefined ? 'no last turn.updated' : f.status !== 'complete' ? `ended ${f.status}` : f.content !== s.tokens.join('') ? 'its text is not the stream\'s' : f.usage?.outputTokens !== TOKENS ? `usage ${JSON.stringify(f.usage)}` : undefined;
    if (why === undefined) ok++;
    else first ??= why;
  }
  return { ok, first };
}

/** A's over B's figure, round by round (the rounds of a path are in the same order): {median, min, max}. */
function ratios(a, b, of) {
  const r = a.map((x, i) => of(x) / of(b[i])).filter((x) => Number.isFinite(x)).sort((p, q) => p - q);
  return r.length === 0 ? undefined : { median: median(r), min: r[0], max: r.at(-1) };
}
const x2 = (r) => (r === undefined ? '–' : `${r.median.toFixed(2)} (${r.min.toFixed(2)}–${r.max.toFixed(2)})`);
const cpuPerToken = (r) => r.serverCpu / r.tokens;
const ttft50 = (r) => percentile(r.ttft, 0.5);
const ttft99 = (r) => percentile(r.ttft, 0.99);

function renderReplies(ctx, results, notes) {
  const L = ['## The OpenAI door: replies (`door-replies`)', ''];
  L.push(
    `${N} replies at once from ${N} users by each path, ${TOKENS} tokens each at ${RATE} a second, from the local provider (test/provider/server.mjs, its \`stamp\` directive, in a process of its own), in ${results[0]?.rounds ?? '?'} round(s). The paths: **door, a new conversation**, POST /v1/chat/completions (stream, include_usage) as an SDK sends it; **native, a new conversation**, what a client of the native API sends for the same: POST /api/v1/chat-sessions, then on the same connection POST .../messages with \`Accept: text/event-stream\` (its first token timed from the create's write); **door, X-Session-Id** and **native, POST .../messages**: a message into an empty session made before the round; **relay**, the peer relay (../shared/peers/replies/relay-fastify.mjs: Fastify + the openai SDK + node:sqlite, Node 24) on a session it holds already (it has no create); **direct**, the provider itself. Side by side, each round: the two new conversations and the relay at once (${N} streams each, their requests written interleaved), then the two messages to empty sessions at once, then direct alone, the three bursts in rotating order; the door's paths on one of two servers and the native API's on the other, the two swapping roles every round. **First token**: from the request's write to the first token's read; **token delay**: from the provider's write of a token (its stamp) to the read that brought it, all rounds pooled. CPU: /proc utime + stime of the process that relays (all threads; its main thread in brackets) over its burst, per token received, the median over the rounds; PostgreSQL's and the provider's are shared by the burst, per token of the burst.`,
    '',
    '| engine | path | complete (recorded) | wall s | first token p50 / p99 ms | token delay p50 / p99 ms | CPU µs per token (main) | PostgreSQL CPU µs per token of the burst | provider CPU µs per token of the burst |',
    '|---|---|---|---|---|---|---|---:|---:|',
  );
  for (const r of results) {
    for (const [path, runs] of Object.entries(r.runs)) {
      const d = pooled(runs, 'delays');
      const f = pooled(runs, 'ttft');
      const complete = runs.map((x) => `${x.complete}${x.recorded === undefined ? '' : ` (${x.recorded.ok})`}`).join(', ');
      const cpu = path === 'direct' ? '–' : `${us(perToken(runs, 'serverCpu'))} (${us(perToken(runs, 'serverMain'))})`;
      const db = r.engine === 'postgres' && runs.every((x) => !Number.isNaN(x.dbUs)) ? us(median(runs.map((x) => x.dbUs))) : '–';
      L.push(`| ${r.engine} | ${LABEL[path]} | ${complete} of ${N} | ${runs.map((x) => x.seconds.toFixed(1)).join(', ')} | ${ms(percentile(f, 0.5))} / ${ms(percentile(f, 0.99))} | ${ms(percentile(d, 0.5))} / ${ms(percentile(d, 0.99))} | ${cpu} | ${db} | ${us(median(runs.map((x) => x.providerUs)))} |`);
    }
  }
  L.push('', 'Ratios of paths side by side, round by round: the median over the rounds, lowest–highest in brackets. Target (issue 40): the door within 10% of the native API (≤ 1.10) in CPU per token and first token, and below the relay (< 1).', '');
  L.push('| engine | ratio | CPU per token | first token p50 | first token p99 | target |', '|---|---|---|---|---|---|');
  for (const r of results) {
    const rows = [
      ['door', 'native-new', 1.1],
      ['door-session', 'native', 1.1],
      ['door', 'relay', 1],
      ['native-new', 'relay', undefined],
    ];
    for (const [a, b, limit] of rows) {
      if (r.runs[a] === undefined || r.runs[b] === undefined) continue;
      const c = ratios(r.runs[a], r.runs[b], cpuPerToken);
      const p50 = ratios(r.runs[a], r.runs[b], ttft50);
      const p99 = ratios(r.runs[a], r.runs[b], ttft99);
      const met = limit === undefined ? '–' : [c, p50, p99].every((x) => x !== undefined && (limit === 1 ? x.median < 1 : x.median <= limit)) ? 'met' : '**not met**';
      L.push(`| ${r.engine} | ${LABEL[a]} ÷ ${LABEL[b]} | ${x2(c)} | ${x2(p50)} | ${x2(p99)} | ${limit === undefined ? '–' : `${limit === 1 ? '< 1' : '≤ 1.10'}: ${met}`} |`);
    }
  }
  const failures = results.flatMap((r) => Object.values(r.runs).flat().filter((x) => x.errors.length > 0 || x.recorded?.first !== undefined).map((x) => `${r.engine} ${x.path}: ${x.errors.length} stream(s) failed${x.errors[0] === undefined ? '' : ` (first: ${x.errors[0]})`}${x.recorded?.first === undefined ? '' : `; not recorded whole: ${N - x.recorded.ok} (first: ${x.recorded.first})`}`));
  for (const f of failures) L.push('', `- **${f}**`);
  for (const n of notes) L.push('', `- ${n}`);
  return L.join('\n');
}

// ---- door-lookup ----

/** The user's sessions on the big server (BENCH_LOOKUP_SESSIONS; 10,000 with --quick) and on the small one. */
const BIG = () => Number(process.env.BENCH_LOOKUP_SESSIONS ?? 0) || undefined;
const SMALL = 10;
/** Seeding: requests in flight (below MAX_REQUESTS_PER_USER's 64). */
const SEED_WIDTH = 32;
const LOOKER = 'looker';

const question = (i) => `question ${i}`;
/** The conversation a request continues: session i's first exchange (the local provider's `echo` answered it with the question), then a new message. */
const continuation = (i) => [
  { role: 'user', content: question(i) },
  { role: 'assistant', content: question(i) },
  { role: 'user', content: 'and then?' },
];

/** `n` conversations of one user, each its own session, made through the door (each reply's end records its path key): their session ids. */
async function seedConversations(ctx, port, auth, n, label) {
  const ids = new Array(n);
  let next = 0;
  let done = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: SEED_WIDTH }, async () => {
      while (next < n) {
        const i = next++;
        const r = await api(port, 'POST', '/v1/chat/completions', { auth, body: { model: `${SLUG}/echo`, messages: [{ role: 'user', content: question(i) }] } });
        if (r.status !== 200 || r.body?.choices?.[0]?.message?.content !== question(i)) throw new Error(`door-lookup: seeding answered ${r.status} ${r.text.slice(0, 300)}`);
        ids[i] = r.headers['x-session-id'];
        if (++done % 10_000 === 0) ctx.progress(`door-lookup ${label}: ${done}/${n} conversations (${((performance.now() - t0) / 1000).toFixed(0)} s)`);
      }
    }),
  );
  return { ids, seconds: (performance.now() - t0) / 1000 };
}

/**
 * Session i as it was before a continuation: deleted, and made again through the door (its
 * first exchange, the same path key) under a new id. Not by deleting the continuation's turns:
 * on sqlite a turn's delete reads every turn of the file (the subtree query's plan), which at
 * 100,000 sessions takes some 100 ms and empties the page cache the next request reads through.
 */
async function undo(port, auth, ids, i) {
  const del = await api(port, 'DELETE', `/api/v1/chat-sessions/${ids[i]}`, { auth });
  if (del.status !== 200 && del.status !== 204) throw new Error(`door-lookup: deleting session ${ids[i]} answered ${del.status} ${del.text.slice(0, 300)}`);
  const r = await api(port, 'POST', '/v1/chat/completions', { auth, body: { model: `${SLUG}/echo`, messages: [{ role: 'user', content: question(i) }] } });
  if (r.status !== 200) throw new Error(`door-lookup: making session ${i} again answered ${r.status} ${r.text.slice(0, 300)}`);
  ids[i] = r.headers['x-session-id'];
}

/** Waits for the server to be idle (under 3% of a core over a second: the search index of what was seeded written and merged), 5 minutes at most: the seconds waited. */
async function quiet(pid) {
  const t0 = now();
  while (now() - t0 < 300_000) {
    const a = cpuSecondsOf(pid);
    await sleep(1000);
    if (cpuSecondsOf(pid) - a < 0.03) break;
  }
  return (now() - t0) / 1000;
}

/**
 * One client continuing conversations at random until `until`: a waiting completion of
 * continuation(i) (rule 3, or with X-Session-Id rule 1), timed, which must land in session i,
 * the server's CPU (and PostgreSQL's) read around it; then the undo (timed apart), so that every
 * request finds a session holding the first exchange only. One client: the undo never runs
 * beside a continuation.
 */
async function continueLoop({ port, pid, cluster }, auth, ids, named, until, out) {
  while (now() < until) {
    const i = Math.floor(Math.random() * ids.length);
    const cpu0 = cpuSecondsOf(pid);
    const main0 = cpuSecondsOf(pid, { mainThread: true });
    const db0 = cluster === undefined ? NaN : clusterCpu(cluster);
    const t0 = now();
    const r = await api(port, 'POST', '/v1/chat/completions', { auth, body: { model: `${SLUG}/echo`, messages: continuation(i) }, headers: named ? { 'x-session-id': ids[i] } : {} });
    const took = now() - t0;
    out.cpu += cpuSecondsOf(pid) - cpu0;
    out.main += cpuSecondsOf(pid, { mainThread: true }) - main0;
    out.db += cluster === undefined ? NaN : clusterCpu(cluster) - db0;
    if (r.status !== 200) throw new Error(`door-lookup: a continuation answered ${r.status} ${r.text.slice(0, 300)}`);
    if (r.headers['x-session-id'] !== ids[i]) throw new Error(`door-lookup: a continuation of session ${ids[i]} was recorded in ${r.headers['x-session-id']}`);
    out.latencies.push(took);
    const u0 = now();
    await undo(port, auth, ids, i);
    out.undo.push(now() - u0);
  }
}

async function doorLookup(ctx) {
  const big = BIG() ?? (ctx.opts.quick ? 10_000 : 100_000);
  const provider = await startProviderProcess(ctx);
  const results = [];
  const notes = [];
  try {
    for await (const { engine, cluster } of enginesToRun(ctx, notes)) results.push({ engine, ...(await lookupRounds(ctx, engine, cluster, provider, big)) });
  } finally {
    await provider.stop();
  }
  ctx.sections.push(renderLookup(ctx, results, notes, big));
}

async function lookupRounds(ctx, engine, cluster, provider, big) {
  const auth = token(LOOKER);
  const servers = { small: await startServer(ctx, engine, cluster, provider, `lookup-${SMALL}`), big: await startServer(ctx, engine, cluster, provider, `lookup-${big}`) };
  const sizes = { small: SMALL, big };
  try {
    const seeded = {};
    for (const [k, s] of Object.entries(servers)) seeded[k] = await seedConversations(ctx, s.port, auth, sizes[k], `${engine} ${sizes[k]}`);
    const waited = await quiet(servers.big.pid);
    ctx.progress(`door-lookup ${engine}: ${big} conversations made through the door in ${seeded.big.seconds.toFixed(0)} s; the server quiet ${waited.toFixed(0)} s later`);
    // rule 3 (the lookup) and rule 1 (X-Session-Id) on each server
    const kinds = ['small:lookup', 'big:lookup', 'small:named', 'big:named'];
    const runs = Object.fromEntries(kinds.map((k) => [k, []]));
    const once = async (kind, ms) => {
      const [size, how] = kind.split(':');
      const out = { latencies: [], undo: [], cpu: 0, main: 0, db: 0 };
      await continueLoop({ ...servers[size], cluster }, auth, seeded[size].ids, how === 'named', now() + ms, out);
      return out;
    };
    for (const kind of kinds) await once(kind, ctx.opts.warmupMs);
    for (let round = 0; round < ctx.opts.rounds; round++) {
      for (const kind of rotated(kinds, round)) {
        const t0 = now();
        const out = await once(kind, ctx.opts.durationMs);
        const seconds = (now() - t0) / 1000;
        const n = out.latencies.length;
        const run = {
          requests: n,
          seconds,
          cpu: out.cpu / n,
          main: out.main / n,
          db: out.db / n,
          latencies: Float64Array.from(out.latencies).sort(),
          undo: Float64Array.from(out.undo).sort(),
        };
        runs[kind].push(run);
        ctx.progress(`door-lookup ${engine} round ${round + 1}/${ctx.opts.rounds} ${kind}: ${n} continuations in ${seconds.toFixed(1)} s, p50 ${ms(percentile(run.latencies, 0.5))} p99 ${ms(percentile(run.latencies, 0.99))} ms, ${us(run.cpu * 1e6)} µs server CPU each; the undo p50 ${ms(percentile(run.undo, 0.5))} ms`);
      }
    }
    return { runs, seedSeconds: seeded.big.seconds };
  } finally {
    await servers.small.stop();
    await servers.big.stop();
  }
}

function renderLookup(ctx, results, notes, big) {
  const L = ['## The OpenAI door: finding a conversation (`door-lookup`)', ''];
  const size = (k) => (k === 'small' ? SMALL : big).toLocaleString('en-US');
  L.push(
    `One user's conversations, each its own session made through the door (a first message, answered by the local provider's \`echo\`): ${SMALL} on one server, ${big.toLocaleString('en-US')} on another, on each engine. One client continues conversations at random, one after another: a waiting POST /v1/chat/completions of [the first question, its answer, "and then?"], timed, which must be recorded in that session; then (the undo, timed apart) that session is deleted and its first exchange made again through the door, so every request finds a session holding it alone (not by deleting the new turns: on sqlite a turn's DELETE reads every turn of the file, some 100 ms at 100,000 sessions, and empties the page cache the next request reads through). **lookup**: no header, the session found by rule 3 (the path key of the answer, through the turns' path_key index); **X-Session-Id**: the same request naming its session (rule 1, no lookup). ${ctx.opts.rounds} round(s) of ${ctx.opts.durationMs / 1000} s, the four in rotating order. CPU: the server's (all threads; main thread in brackets) and PostgreSQL's, read from /proc around each continuation (the undo left out), per continuation.`,
    '',
    '| engine | sessions | rule | continuations | latency p50 / p99 ms | server CPU µs each (main) | PostgreSQL CPU µs each | the undo (DELETE, new conversation) p50 / p99 ms |',
    '|---|---:|---|---:|---|---|---:|---|',
  );
  for (const r of results) {
    for (const [kind, runs] of Object.entries(r.runs)) {
      const [k, how] = kind.split(':');
      const lat = pooled(runs, 'latencies');
      const undo = pooled(runs, 'undo');
      L.push(`| ${r.engine} | ${size(k)} | ${how === 'lookup' ? 'lookup (rule 3)' : 'X-Session-Id'} | ${runs.reduce((n, x) => n + x.requests, 0)} | ${ms(percentile(lat, 0.5))} / ${ms(percentile(lat, 0.99))} | ${us(median(runs.map((x) => x.cpu * 1e6)))} (${us(median(runs.map((x) => x.main * 1e6)))}) | ${r.engine === 'postgres' ? us(median(runs.map((x) => x.db * 1e6))) : '–'} | ${ms(percentile(undo, 0.5))} / ${ms(percentile(undo, 0.99))} |`);
    }
  }
  L.push('', `${big.toLocaleString('en-US')} sessions ÷ ${SMALL}, round by round (median, lowest–highest):`, '', '| engine | rule | latency p50 | latency p99 | server CPU each | made through the door in |', '|---|---|---|---|---|---|');
  for (const r of results) {
    for (const how of ['lookup', 'named']) {
      const a = r.runs[`big:${how}`];
      const b = r.runs[`small:${how}`];
      L.push(`| ${r.engine} | ${how === 'lookup' ? 'lookup (rule 3)' : 'X-Session-Id'} | ${x2(ratios(a, b, (x) => percentile(x.latencies, 0.5)))} | ${x2(ratios(a, b, (x) => percentile(x.latencies, 0.99)))} | ${x2(ratios(a, b, (x) => x.cpu))} | ${how === 'lookup' ? `${r.seedSeconds.toFixed(0)} s` : ''} |`);
    }
  }
  for (const n of notes) L.push('', `- ${n}`);
  return L.join('\n');
}
