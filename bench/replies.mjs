// Replies from the model under load (issue 30, "Measured"; `npm run bench -- replies`), on
// sqlite and on PostgreSQL, against the local provider of test/provider/server.mjs run in a
// process of its own:
//   thousand: a thousand replies at once, 100 tokens each at 50 a second, each streamed to its
//     client (POST .../messages, Accept: text/event-stream, each on its own session and user),
//     against the same thousand streams asked of the provider directly (OpenAI Chat
//     Completions), round by round. The provider's tokens carry the time they were written
//     (its `stamp` directive), so a client tells each token's delay from the provider's write to
//     its own read; time to first token from the request's write. Every reply is checked by GET
//     afterwards; the server's CPU (/proc utime + stime, all threads) per token, its peak RSS.
// What a 32,000-token reply costs per token against 100-token ones is bench/deltas.mjs's to
// measure (a delta's cost as its turn grows), not this file's.
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, renameSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { api, cpuSecondsOf, memoryOf, median, NODE_24, NODE_OLDEST, nodeVersion, ROOT, SECRET, SERVER, sleep, startProcess, token } from './common.mjs';
import { buildOf, commitOf } from './builds.mjs';
import { clusterCpu, postgres } from './engines.mjs';
import { percentile } from './loadgen.mjs';
import { profileDir } from './measure.mjs';
import { alternatePart, historyPart, peersPart, renderAlternate, renderHistory, renderWorst, repliesParts, worstPart } from './replies-hostile.mjs';

const B = '/api/v1/chat-sessions';
export const PROVIDER_ID = '6f00000000000000000000b1';
export const KEY = 'sk-bench-0123456789abcdef';
const REPLIES = Number(process.env.BENCH_REPLIES_N ?? 1000);
export const TOKENS = 100;
export const RATE = 50;
/** Connections opened at once before a round (past the listen backlog a connect waits a second for its SYN to be sent again). */
const CONNECT_WIDTH = 100;
/** The quiet before each round: past the 4 s the server keeps an idle connection to a provider. */
export const QUIET_MS = 5000;

/** The scenario, given the run's pieces: opts, progress, runDir(), track(process), sections. */
export function replyScenarios(ctx) {
  return [{ name: 'replies', run: () => replies(ctx) }];
}

async function replies(ctx) {
  const parts = repliesParts();
  const provider = await startProviderProcess(ctx);
  const results = [];
  const notes = [];
  const worst = [];
  const alternate = [];
  const history = [];
  const services = [];
  try {
    for await (const { engine, cluster } of enginesToRun(ctx, notes)) {
      if (parts.has('thousand')) {
        const r = { engine };
        r.thousand = await thousand(ctx, engine, cluster, provider);
        results.push(r);
      }
      const serving = async (name, env, run) => {
        const server = seeding(await startServer(ctx, engine, cluster, provider, name, env));
        try {
          return await run(server);
        } finally {
          await server.stop();
        }
      };
      if (parts.has('worst')) worst.push({ engine, rows: await serving('worst', { MAX_CONNECTIONS: '4000', MAX_STREAMS: '2000' }, (server) => worstPart(ctx, engine, server)) });
      if (parts.has('alternate')) alternate.push(await serving('alternate', {}, (server) => alternatePart(ctx, engine, server)));
      if (parts.has('history')) history.push(...(await serving('history', {}, (server) => historyPart(ctx, engine, server))));
      services.push({ engine, cluster, start: async (peerProvider) => seeding(await startServer(ctx, engine, cluster, peerProvider, 'peers')) });
    }
  } finally {
    await provider.stop();
  }
  const sections = [];
  if (results.length > 0) sections.push(render(ctx, results, notes));
  if (worst.length > 0) sections.push(renderWorst(worst));
  if (alternate.length > 0) sections.push(renderAlternate(alternate));
  if (history.length > 0) sections.push(renderHistory(history));
  if (parts.has('peers')) sections.push(await peersPart(ctx, services));
  ctx.sections.push(sections.join('\n\n'));
}

/** The server with `seed(n, model)`: n sessions, one per user, on the provider asking `model`. */
function seeding(server) {
  server.seed = (n, model) => seedSessions(server.port, n, model);
  return server;
}

/** The engines the run names (--engines; both by default). */
export const namedEngines = (ctx) => ['sqlite', 'postgres'].filter((e) => ctx.opts.enginesNamed === undefined || ctx.opts.enginesNamed.includes(e));

/** Each engine to run, with PostgreSQL's cluster (started on first need); one that cannot run is said in `notes` and left out. */
export async function* enginesToRun(ctx, notes) {
  for (const engine of namedEngines(ctx)) {
    let cluster;
    if (engine === 'postgres') {
      cluster = await postgres();
      if (cluster === undefined) {
        notes.push('postgres: skipped, PostgreSQL is not installed (see the run\'s notes)');
        continue;
      }
    }
    yield { engine, cluster };
  }
}

// ---- the processes ----

/** test/provider/server.mjs in a process of its own (its timers are not held up by the clients' reads): {url, port, pid, stop}. */
export async function startProviderProcess(ctx) {
  const child = spawn(NODE_24, [join(ROOT, 'test', 'provider', 'server.mjs'), '--port', '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.setEncoding('utf8');
  const url = await new Promise((resolve, reject) => {
    child.stdout.on('data', (d) => {
      out += d;
      const m = /listening on (http:\/\/[\d.]+:\d+)/.exec(out);
      if (m !== null) resolve(m[1]);
    });
    child.once('exit', (code) => reject(new Error(`the local provider exited (${code}) before it listened`)));
  });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  const p = {
    url,
    port: Number(new URL(url).port),
    pid: child.pid,
    async stop() {
      child.kill('SIGTERM');
      await exited;
    },
  };
  ctx.track(p);
  ctx.progress(`replies: the local provider listens on ${url} (Node ${nodeVersion(NODE_24)})`);
  return p;
}

let servers = 0;
/** The built server on `engine` with providers.json naming the local provider; under --cpu-prof with --profile. */
export async function startServer(ctx, engine, cluster, provider, name, env = {}, script = SERVER) {
  const dir = mkdtempSync(join(ctx.runDir(), `replies-${engine}-`));
  writeFileSync(join(dir, 'providers.json'), JSON.stringify([{ _id: PROVIDER_ID, name: 'Local', type: 'openai', baseUrl: `${provider.url}/v1`, apiKey: KEY }]));
  const e = { DATA_DIR: dir, AUTH_SECRET: SECRET, LOG_LEVEL: ctx.opts.logLevel, HOST: '127.0.0.1', STORE: engine, ...env };
  if (engine === 'postgres') Object.assign(e, { DATABASE_URL: cluster.url('postgres'), DATABASE_SCHEMA: `bench_replies_${process.pid}_${++servers}` });
  const profiles = join(dir, 'profiles');
  const nodeArgs = ctx.opts.profile ? ['--cpu-prof', `--cpu-prof-dir=${profiles}`] : [];
  const p = await startProcess({ script, cwd: dir, env: e, node: NODE_OLDEST, nodeArgs, logFile: join(ctx.runDir(), `replies-${name}-${engine}.log`) });
  ctx.track(p);
  const stop = p.stop;
  p.stop = async () => {
    const r = await stop();
    // a profile per thread (sqlite's writer is one), named after the server once it has exited
    if (ctx.opts.profile) {
      mkdirSync(profileDir, { recursive: true });
      for (const f of readdirSync(profiles)) renameSync(join(profiles, f), join(profileDir, `replies-${name}-${engine}-thread${f.split('.')[4]}.cpuprofile`));
    }
    return r;
  };
  return p;
}

/** `n` sessions on the local provider, one per user (no user's rate or stream limit is what is measured). */
export async function seedSessions(port, n, model) {
  const out = new Array(n);
  let next = 0;
  await Promise.all(
    Array.from({ length: 32 }, async () => {
      while (next < n) {
        const i = next++;
        const user = `replier-${i}`;
        const r = await api(port, 'POST', B, { auth: token(user), body: { projectId: 'replies', providerId: PROVIDER_ID, selectedModel: model, name: `reply ${i}` } });
        if (r.status !== 201) throw new Error(`replies: creating a session answered ${r.status} ${r.text}`);
        out[i] = { id: r.body.data._id, user, auth: token(user) };
      }
    }),
  );
  return out;
}

// ---- the clients: streamed answers on raw sockets ----

export const now = () => performance.timeOrigin + performance.now();
const CRLF2 = Buffer.from('\r\n\r\n');
/** A token's text as the provider stamps it: `t` and the microseconds since the epoch it was written. */
const STAMPED = {
  service: /^event: turn\.delta\ndata: \{.*"text":"( ?t(\d{16}))"/m,
  direct: /^data: \{.*"content":"( ?t(\d{16}))"/m,
};
// the OpenAI door's chunks are the provider's shape
STAMPED.door = STAMPED.direct;

/**
 * One streamed answer read off a raw socket (a thousand of them cost the client less than
 * node:http would, and the client shares the cores with what it measures): the head, the
 * chunks, then the events, each token's delay taken from its stamp when the read that brought
 * it came. `kind`: direct (the provider's chunks), service (POST .../messages' events, or the
 * peer relay's, which sends the same), door (the OpenAI door's chunks: its head says where the
 * reply is recorded, and it must end with the usage chunk and [DONE]).
 */
export class Stream {
  /**
   * `before`: {request, then}: a request sent first on the same connection (a session's
   * create), whose JSON answer `then` makes the streamed request of (the times run from the first).
   */
  constructor(port, request, kind, delays, before = undefined) {
    this.port = port;
    this.request = request;
    this.before = before;
    this.kind = kind;
    this.delays = delays;
    this.head = Buffer.alloc(0);
    this.status = 0;
    this.chunkLeft = -1; // bytes of the current chunk still to come; -1 while a size line is read, -2 for the CRLF after a chunk
    this.sizeLine = '';
    this.text = '';
    this.tokens = [];
    this.sentAt = 0;
    this.firstAt = 0;
    this.createdAt = 0;
    this.endedAt = 0;
    this.replyId = undefined;
    this.final = undefined;
    /** door: X-Session-Id and X-Turn-Id of the head, the usage chunk, [DONE] */
    this.sessionId = undefined;
    this.usage = undefined;
    this.doneSeen = false;
    this.error = undefined;
    this.done = new Promise((resolve) => (this.resolve = resolve));
  }

  connect(buffer) {
    return new Promise((resolve, reject) => {
      this.socket = connect({ port: this.port, host: '127.0.0.1', noDelay: true, onread: { buffer, callback: (n, buf) => this.onRead(buf.subarray(0, n)) } });
      this.socket.once('connect', resolve);
      this.socket.on('error', (e) => {
        this.end(`socket: ${e.code ?? e.message}`);
        reject(e);
      });
      this.socket.once('close', () => this.end('the connection closed before the answer ended'));
    });
  }

  send() {
    this.sentAt = now();
    this.socket.write(this.before?.request ?? this.request);
  }

  /** The answer to the request before (a JSON body by Content-Length): the streamed request is made of it and sent. */
  onBefore(b) {
    this.head = Buffer.concat([this.head, b]);
    const i = this.head.indexOf(CRLF2);
    if (i === -1) return;
    const head = this.head.toString('latin1', 0, i);
    const length = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? NaN);
    if (this.head.length < i + 4 + length) return;
    const body = this.head.toString('utf8', i + 4, i + 4 + length);
    const status = Number(head.slice(9, 12));
    this.head = Buffer.alloc(0);
    const { then } = this.before;
    this.before = undefined;
    if (status < 200 || status > 299 || Number.isNaN(length)) {
      this.end(`the request before answered ${head.split('\r\n')[0]}: ${body.slice(0, 300)}`);
      return;
    }
    this.request = then(JSON.parse(body));
    this.socket.write(this.request);
  }

  end(error) {
    if (this.endedAt !== 0) return;
    this.endedAt = now();
    if (error !== undefined && this.error === undefined) this.error = error;
    this.socket.destroy();
    this.resolve();
  }

  onRead(b) {
    if (this.before !== undefined) {
      this.onBefore(b);
      return;
    }
    const at = now();
    let from = 0;
    if (this.status === 0) {
      this.head = Buffer.concat([this.head, b]);
      const i = this.head.indexOf(CRLF2);
      if (i === -1) return;
      const head = this.head.toString('latin1', 0, i);
      this.status = Number(head.slice(9, 12));
      if (this.status !== 200 || !/\r\ntransfer-encoding: chunked/i.test(head)) {
        this.end(`answered ${head.split('\r\n')[0]}: ${this.head.toString('utf8', i + 4, i + 300)}`);
        return;
      }
      if (this.kind === 'door') {
        this.sessionId = /\r\nx-session-id: *([^\r]*)/i.exec(head)?.[1];
        this.replyId = /\r\nx-turn-id: *([^\r]*)/i.exec(head)?.[1];
      }
      b = this.head.subarray(i + 4);
      this.head = Buffer.alloc(0);
    }
    while (from < b.length) {
      if (this.chunkLeft === -1) {
        const nl = b.indexOf(10, from);
        if (nl === -1) {
          this.sizeLine += b.toString('latin1', from);
          return;
        }
        this.sizeLine += b.toString('latin1', from, nl);
        from = nl + 1;
        const size = parseInt(this.sizeLine, 16);
        this.sizeLine = '';
        if (size === 0) {
          this.events(at);
          this.end(this.final === undefined && this.kind === 'service' ? 'the stream ended without the reply\'s last turn.updated' : this.kind === 'door' && !this.doneSeen ? 'the stream ended without [DONE]' : undefined);
          return;
        }
        this.chunkLeft = size;
      } else if (this.chunkLeft === -2) {
        // the chunk's CRLF, perhaps cut between reads
        const nl = b.indexOf(10, from);
        if (nl === -1) return;
        from = nl + 1;
        this.chunkLeft = -1;
      } else {
        const to = Math.min(b.length, from + this.chunkLeft);
        this.text += b.toString('latin1', from, to);
        this.chunkLeft -= to - from;
        from = to;
        if (this.chunkLeft === 0) this.chunkLeft = -2;
      }
    }
    this.events(at);
  }

  events(at) {
    for (let i = this.text.indexOf('\n\n'); i !== -1; i = this.text.indexOf('\n\n')) {
      const e = this.text.slice(0, i);
      this.text = this.text.slice(i + 2);
      const m = STAMPED[this.kind].exec(e);
      if (m !== null) {
        if (this.firstAt === 0) this.firstAt = at;
        this.tokens.push(m[1]);
        this.delays.push(at - Number(m[2]) / 1000);
      } else if (this.kind === 'service' && e.includes('event: turn.created')) {
        // the user turn's, then the reply's: the reply is recorded (streaming) and its provider about to be asked
        this.createdAt = at;
      } else if (this.kind === 'service' && e.includes('event: turn.updated')) {
        const data = e.slice(e.indexOf('data: ') + 6);
        if (!data.includes('"status":"streaming"')) {
          this.final = JSON.parse(data);
          this.replyId = this.final._id;
        }
      } else if (this.kind === 'service' && (e.includes('event: end') || e.startsWith('event: error'))) this.error ??= `the stream ended early: ${e}`;
      else if (this.kind === 'door') {
        if (e === 'data: [DONE]') this.doneSeen = true;
        else if (e.startsWith('data: {"error"')) this.error ??= `an error frame: ${e}`;
        else if (e.includes('"choices":[]')) this.usage = JSON.parse(e.slice(6)).usage;
      }
    }
  }
}

/** Samples (ms) in a growable Float64Array. */
export class Samples {
  constructor() {
    this.a = new Float64Array(1 << 17);
    this.n = 0;
  }
  push(v) {
    if (this.n === this.a.length) {
      const b = new Float64Array(this.a.length * 2);
      b.set(this.a);
      this.a = b;
    }
    this.a[this.n++] = v;
  }
  sorted() {
    return this.a.slice(0, this.n).sort();
  }
}

/** Opens every stream (CONNECT_WIDTH at a time), then sends every request at once; resolves when all have ended. */
export async function runStreams(streams) {
  const buffer = Buffer.allocUnsafe(256 * 1024);
  let next = 0;
  await Promise.all(
    Array.from({ length: CONNECT_WIDTH }, async () => {
      while (next < streams.length) await streams[next++].connect(buffer);
    }),
  );
  const started = now();
  for (const s of streams) s.send();
  await Promise.all(streams.map((s) => s.done));
  return { started, ended: Math.max(...streams.map((s) => s.endedAt)) };
}

// ---- a thousand at once ----

export const directRequest = (model, i) => {
  const body = JSON.stringify({ model, stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: `hello ${i}` }] });
  return Buffer.from(`POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${KEY}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\naccept: text/event-stream\r\n\r\n${body}`, 'latin1');
};
export const serviceRequest = (s, i, model) => {
  const body = JSON.stringify({ content: `hello ${i}`, ...(model === undefined ? {} : { model }) });
  return Buffer.from(`POST ${B}/${s.id}/messages HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${s.auth}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\naccept: text/event-stream\r\n\r\n${body}`, 'latin1');
};

async function thousand(ctx, engine, cluster, provider) {
  const model = `tokens:${TOKENS}@${RATE}+stamp`;
  // a thousand event streams need MAX_STREAMS past its default (half of MAX_CONNECTIONS, 500) and connections for them
  const server = await startServer(ctx, engine, cluster, provider, 'thousand', { MAX_CONNECTIONS: String(REPLIES * 4), MAX_STREAMS: String(REPLIES * 2) });
  const rounds = ctx.opts.rounds;
  const runs = { direct: [], service: [] };
  // --before=REF: the same service as REF built it, a path of its own in the same rounds
  const before = ctx.opts.before === undefined ? undefined : await startServer(ctx, engine, cluster, provider, 'thousand-before', { MAX_CONNECTIONS: String(REPLIES * 4), MAX_STREAMS: String(REPLIES * 2) }, buildOf(commitOf(ctx.opts.before), ctx.progress));
  if (before !== undefined) runs.before = [];
  try {
    const sessions = await seedSessions(server.port, REPLIES, model);
    const targets = { service: { server, sessions } };
    if (before !== undefined) targets.before = { server: before, sessions: await seedSessions(before.port, REPLIES, model) };
    // a warm-up of each path with short replies (the server's code compiled, its caches filled), not measured
    const warm = `tokens:5@${RATE}+stamp`;
    const ignored = new Samples();
    await runStreams(sessions.map((s, i) => new Stream(provider.port, directRequest(warm, i), 'direct', ignored)));
    for (const t of Object.values(targets)) await runStreams(t.sessions.map((s, i) => new Stream(t.server.port, serviceRequest(s, i, warm), 'service', ignored)));
    const rssBefore = memoryOf(server.pid).rssMiB;
    for (let round = 0; round < rounds; round++) {
      const kinds = Object.keys(runs);
      // each path first in turn
      for (const kind of [...kinds.slice(round % kinds.length), ...kinds.slice(0, round % kinds.length)]) {
        const target = targets[kind] ?? targets.service;
        // after a quiet spell longer than the server keeps idle connections to the provider (4 s): each round is a burst that opens its own
        await sleep(QUIET_MS);
        const delays = new Samples();
        const streams = (kind === 'direct' ? sessions : target.sessions).map((s, i) => (kind === 'direct' ? new Stream(provider.port, directRequest(model, i), 'direct', delays) : new Stream(target.server.port, serviceRequest(s, i), 'service', delays)));
        const cpu0 = cpuSecondsOf(target.server.pid);
        const main0 = cpuSecondsOf(target.server.pid, { mainThread: true });
        const prov0 = cpuSecondsOf(provider.pid);
        const pg0 = cluster === undefined || kind === 'direct' ? undefined : await pgBefore(cluster);
        const db0 = cluster === undefined ? NaN : clusterCpu(cluster);
        const { started, ended } = await runStreams(streams);
        const run = {
          kind,
          seconds: (ended - started) / 1000,
          serverCpu: cpuSecondsOf(target.server.pid) - cpu0,
          serverMain: cpuSecondsOf(target.server.pid, { mainThread: true }) - main0,
          providerCpu: cpuSecondsOf(provider.pid) - prov0,
          dbCpu: cluster === undefined ? NaN : clusterCpu(cluster) - db0,
          tokens: streams.reduce((n, s) => n + s.tokens.length, 0),
          complete: streams.filter((s) => s.error === undefined && s.tokens.length === TOKENS).length,
          errors: streams.filter((s) => s.error !== undefined).map((s) => s.error),
          delays: delays.sorted(),
          ttft: Float64Array.from(streams.filter((s) => s.firstAt > 0).map((s) => s.firstAt - s.sentAt)).sort(),
          recordedAfter: Float64Array.from(streams.filter((s) => s.createdAt > 0).map((s) => s.createdAt - s.sentAt)).sort(),
        };
        if (pg0 !== undefined) Object.assign(run, await pgAfter(cluster, pg0, run.tokens));
        if (kind !== 'direct') run.recorded = await checkRecorded(target.server.port, streams.map((s, i) => ({ session: target.sessions[i].id, reply: s.replyId, auth: target.sessions[i].auth, tokens: s.tokens })));
        runs[kind].push(run);
        if (run.statements !== undefined) ctx.progress(`replies ${engine} round ${round + 1} ${kind}: PostgreSQL's statements per 1,000 tokens (calls, ms of execution, rows):\n${run.statements}`);
        ctx.progress(
          `replies ${engine} round ${round + 1}/${rounds} ${kind}: ${run.complete}/${REPLIES} complete${run.recorded === undefined ? '' : `, ${run.recorded.ok} recorded whole`} in ${run.seconds.toFixed(2)} s; token delay p50 ${ms(percentile(run.delays, 0.5))} p99 ${ms(percentile(run.delays, 0.99))} ms; first token p50 ${ms(percentile(run.ttft, 0.5))} ms${kind === 'service' ? ` (the reply's turn.created p50 ${ms(percentile(run.recordedAfter, 0.5))} ms)` : ''}; server ${us((run.serverCpu / run.tokens) * 1e6)} µs CPU per token${run.errors.length > 0 ? `; first error: ${run.errors[0]}` : ''}`,
        );
      }
    }
    const mem = memoryOf(server.pid);
    return { rounds, runs, rssBefore, rssAfter: mem.rssMiB, peakMiB: mem.peakMiB };
  } finally {
    await server.stop();
    await before?.stop();
  }
}

/** Where PostgreSQL's counters stand before a round: its WAL position (and, with BENCH_PG_STATEMENTS=1, pg_stat_statements reset). */
async function pgBefore(cluster) {
  if (process.env.BENCH_PG_STATEMENTS === '1') await cluster.psql('SELECT pg_stat_statements_reset()');
  return { lsn: await cluster.psql('SELECT pg_current_wal_lsn()') };
}

/** The WAL a round wrote per token, and with BENCH_PG_STATEMENTS=1 its most frequent statements per 1,000 tokens. */
async function pgAfter(cluster, before, tokens) {
  const out = { walBytes: Number(await cluster.psql(`SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '${before.lsn}')`)) };
  if (process.env.BENCH_PG_STATEMENTS === '1') {
    const rows = await cluster.psql(
      `SELECT round(calls * 1000.0 / ${tokens}, 1) || ' | ' || round(total_exec_time::numeric * 1000 / ${tokens}, 1) || ' | ' || round(rows * 1000.0 / ${tokens}, 1) || ' | ' || left(regexp_replace(query, '\\s+', ' ', 'g'), 110)
       FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = 'postgres') ORDER BY calls DESC LIMIT 16`,
    );
    out.statements = rows;
  }
  return out;
}

/**
 * GET of every reply the streams saw end: complete, with the text the stream told, and usage of as many tokens.
 * `replies[i]`: {session, reply (its turn id, undefined when the stream told none), auth, tokens (the stream's)}.
 */
export async function checkRecorded(port, replies) {
  let ok = 0;
  let first;
  let next = 0;
  await Promise.all(
    Array.from({ length: 32 }, async () => {
      while (next < replies.length) {
        const x = replies[next++];
        const why = await (async () => {
          if (x.reply === undefined || x.session === undefined) return 'the stream told no end of the reply';
          const r = await api(port, 'GET', `${B}/${x.session}/turns/${x.reply}`, { auth: x.auth });
          const t = r.body?.data;
          if (r.status !== 200) return `GET answered ${r.status}`;
          if (t.status !== 'complete') return `recorded ${t.status}`;
          const text = typeof t.content === 'string' ? t.content : t.content.map((p) => p.text ?? '').join('');
          if (text !== x.tokens.join('')) return `recorded ${text.length} characters, the stream told ${x.tokens.join('').length}`;
          if (t.usage?.outputTokens !== x.tokens.length) return `usage ${JSON.stringify(t.usage)}, the stream told ${x.tokens.length} tokens`;
          return undefined;
        })();
        if (why === undefined) ok++;
        else first ??= why;
      }
    }),
  );
  return { ok, first };
}

// ---- the report ----

export const ms = (v) => (v === undefined || Number.isNaN(v) ? '–' : Math.abs(v) < 10 ? v.toFixed(2) : v.toFixed(1));
export const us = (v) => (Number.isNaN(v) ? '–' : v.toFixed(1));
export const pooled = (runs, field) => Float64Array.from(runs.flatMap((r) => [...r[field]])).sort();
export const perToken = (runs, field) => median(runs.map((r) => (r[field] / r.tokens) * 1e6));

function render(ctx, results, notes) {
  const L = ['## Replies (`replies`)', ''];
  L.push(
    `A thousand replies at once, ${TOKENS} tokens each at ${RATE} a second, from the local provider (test/provider/server.mjs, OpenAI Chat Completions, in a process of its own): **direct**, the thousand streams asked of the provider by the client; **service**, a thousand POST .../messages with \`Accept: text/event-stream\`, each on its own session and user (the server with MAX_CONNECTIONS=${REPLIES * 4}, MAX_STREAMS=${REPLIES * 2}, as an operator expecting them sets: the defaults hold 500 streams), in ${results[0]?.thousand.rounds ?? '?'} round(s), the order alternating. Connections are opened first (${CONNECT_WIDTH} at a time), then every request written at once. **Token delay**: from the provider's write of a token (its stamp) to the read that brought it to the client, all tokens of all rounds pooled; **first token**: from the request's write to the first token's read. CPU: /proc utime + stime over the rounds of the kind (the server: all its threads; main: its main thread), per token received.`,
    '',
    '| engine | path | complete (recorded) | wall s | token delay p50 / p99 / max ms | first token p50 / p99 ms | server CPU µs per token (main) | PostgreSQL CPU µs per token (WAL bytes) | provider CPU µs per token |',
    '|---|---|---|---:|---|---|---|---:|---:|',
  );
  for (const r of results) {
    for (const kind of Object.keys(r.thousand.runs)) {
      const runs = r.thousand.runs[kind];
      const d = pooled(runs, 'delays');
      const f = pooled(runs, 'ttft');
      const complete = runs.map((x) => `${x.complete}${x.recorded === undefined ? '' : ` (${x.recorded.ok})`}`).join(', ');
      const server = kind === 'direct' ? '–' : `${us(perToken(runs, 'serverCpu'))} (${us(perToken(runs, 'serverMain'))})`;
      const wal = runs.every((x) => x.walBytes !== undefined) ? ` (WAL ${median(runs.map((x) => x.walBytes / x.tokens)).toFixed(0)} B)` : '';
      const db = kind === 'direct' || r.engine !== 'postgres' ? '–' : `${us(perToken(runs, 'dbCpu'))}${wal}`;
      L.push(`| ${r.engine} | ${kind === 'before' ? `service as ${commitOf(ctx.opts.before).slice(0, 7)} built it` : kind} | ${complete} of ${REPLIES} | ${runs.map((x) => x.seconds.toFixed(2)).join(', ')} | ${ms(percentile(d, 0.5))} / ${ms(percentile(d, 0.99))} / ${ms(d.at(-1))} | ${ms(percentile(f, 0.5))} / ${ms(percentile(f, 0.99))} | ${server} | ${db} | ${us(perToken(runs, 'providerCpu'))} |`);
    }
  }
  L.push('', '| engine | service − direct: token delay p50 / p99 ms (target p99 ≤ +10) | first token p50 ms (target ≤ +25) | server peak RSS MiB (target < 300; RSS before the rounds) |', '|---|---|---|---|');
  for (const r of results) {
    const d = { direct: pooled(r.thousand.runs.direct, 'delays'), service: pooled(r.thousand.runs.service, 'delays') };
    const f = { direct: pooled(r.thousand.runs.direct, 'ttft'), service: pooled(r.thousand.runs.service, 'ttft') };
    const dp99 = percentile(d.service, 0.99) - percentile(d.direct, 0.99);
    const fp50 = percentile(f.service, 0.5) - percentile(f.direct, 0.5);
    const met = (x) => (x ? 'met' : '**not met**');
    L.push(`| ${r.engine} | +${ms(percentile(d.service, 0.5) - percentile(d.direct, 0.5))} / +${ms(dp99)} (${met(dp99 <= 10)}) | +${ms(fp50)} (${met(fp50 <= 25)}) | ${ms(r.thousand.peakMiB)} (${met(r.thousand.peakMiB < 300)}; ${ms(r.thousand.rssBefore)}) |`);
  }
  const failures = results.flatMap((r) => Object.values(r.thousand.runs).flat().filter((x) => x.errors.length > 0 || (x.recorded !== undefined && x.recorded.first !== undefined)).map((x) => `${r.engine} ${x.kind}: ${x.errors.length} stream(s) failed${x.errors[0] === undefined ? '' : ` (first: ${x.errors[0]})`}${x.recorded?.first === undefined ? '' : `; not recorded whole: ${REPLIES - x.recorded.ok} (first: ${x.recorded.first})`}`));
  for (const f of failures) L.push('', `- **${f}**`);
  for (const n of notes) L.push('', `- ${n}`);
  return L.join('\n');
}
