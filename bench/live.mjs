// The live feed's benchmark (issue #15, "Measured"), against the built dist/server.js:
//   fan-out: 10,000 open event streams on one instance: the server's RSS, and the time from an
//     acknowledged write to its event at the last of them (p50, p99);
//   throughput: 64 clients renaming sessions, with 1,000 streams open (one per writing user, so
//     each write's event goes to one of them) against none, interleaved round by round;
//   postgres (when PostgreSQL is installed): two instances on one database, fsync on, the same
//     renames through both, with EVENTS=on against EVENTS=off: what ordering events by commit
//     costs the write rate of several instances.
// Run alone (node bench/live.mjs [--subscribers=N] [--writes=N] [--rounds=N] [--quick]
// [--no-postgres] [--only=fanout,throughput,postgres,deltas]) or as the scenario `live` of npm run bench. Prints Markdown to stdout,
// progress to stderr. The subscribers of the throughput rounds live in a child process of
// their own (this file with --sink), so the load generator's process does not read them.
import { spawn } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { api, cpuSecondsOf, EXAMPLE_PROVIDERS, median, memoryOf, NODE_OLDEST, SECRET, SERVER, sleep, startProcess, token } from './common.mjs';
import { buildRequest, percentile, runLoad } from './loadgen.mjs';

const HERE = fileURLToPath(import.meta.url);
const PROVIDER = '665f1c2a9b1e8a0012ab34c1';

/**
 * Event streams on raw sockets, counting the events each has received (an event ends with a
 * blank line: "\n\n" occurs once per event in the stream's bytes). One read buffer serves them
 * all: each read is handled before the next.
 */
class Streams {
  constructor() {
    this.sockets = [];
    this.counts = [];
    this.ready = 0;
    this.target = 0;
    this.arrived = 0;
    this.onAll = undefined;
    this.firstAt = 0;
    this.lastAt = 0;
    this.buffer = Buffer.allocUnsafe(64 * 1024);
    this.total = 0;
  }

  /** Opens one stream per entry of `heads` (request bytes), `parallel` connects at a time; resolves when every one said `ready`. */
  async open(port, heads, parallel = 200) {
    let next = 0;
    const one = (i) =>
      new Promise((resolve, reject) => {
        const index = this.sockets.length;
        this.counts.push(0);
        let tail = 0; // a "\n" ending the previous read
        let first = true;
        const s = connect({
          port,
          host: '127.0.0.1',
          noDelay: true,
          onread: {
            buffer: this.buffer,
            callback: (n, buf) => {
              const b = buf.subarray(0, n);
              if (first) {
                first = false;
                if (!b.toString('latin1', 0, 12).startsWith('HTTP/1.1 200')) {
                  reject(new Error(`a stream was refused: ${b.toString('utf8').slice(0, 300)}`));
                  return;
                }
              }
              let events = 0;
              if (tail === 10 && n > 0 && b[0] === 10) events++;
              for (let at = b.indexOf('\n\n'); at !== -1; at = b.indexOf('\n\n', at + 2)) events++;
              tail = b[n - 1];
              if (events > 0) this.got(index, events, resolve);
            },
          },
        });
        s.on('error', reject);
        s.on('connect', () => s.write(heads[i]));
        this.sockets.push(s);
      });
    const workers = Array.from({ length: parallel }, async () => {
      while (next < heads.length) await one(next++);
    });
    await Promise.all(workers);
  }

  got(index, events, opened) {
    const before = this.counts[index];
    this.counts[index] = before + events;
    this.total += events;
    if (before === 0) {
      this.ready++;
      opened();
    }
    if (this.target > 0 && before < this.target && before + events >= this.target) {
      const now = performance.now();
      if (this.arrived === 0) this.firstAt = now;
      if (++this.arrived === this.sockets.length) {
        this.lastAt = now;
        this.onAll?.();
      }
    }
  }

  /** Resolves when every stream has received `target` events in all (counting `ready`). */
  expect(target) {
    this.target = target;
    this.arrived = this.counts.filter((c) => c >= target).length;
    return new Promise((resolve) => {
      this.onAll = resolve;
      if (this.arrived === this.sockets.length) resolve();
    });
  }

  close() {
    for (const s of this.sockets) s.destroy();
  }
}

const streamHead = (path, user) => buildRequest('GET', path, { headers: { authorization: `Bearer ${token(user)}`, accept: 'text/event-stream' } });

async function startServer(dir, env, name) {
  mkdirSync(dir, { recursive: true });
  copyFileSync(EXAMPLE_PROVIDERS, join(dir, 'providers.json'));
  return startProcess({
    script: SERVER,
    cwd: dir,
    node: NODE_OLDEST,
    logFile: join(dir, `${name}.log`),
    env: { DATA_DIR: dir, AUTH_SECRET: SECRET, LOG_LEVEL: 'warn', HOST: '127.0.0.1', EVENTS_HEARTBEAT: '10m', STORE: 'sqlite', ...env },
  });
}

/** One session per user, made through the API (`parallel` at a time); their ids in user order. */
async function seed(port, users, parallel = 32) {
  const ids = new Array(users.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: parallel }, async () => {
      while (next < users.length) {
        const i = next++;
        const r = await api(port, 'POST', '/api/v1/chat-sessions', { auth: token(users[i]), body: { projectId: `p-${i}`, providerId: PROVIDER, selectedModel: 'gpt-4o', name: 'seeded' } });
        if (r.status !== 201) throw new Error(`seeding: ${r.status} ${r.text}`);
        ids[i] = r.body.data._id;
      }
    }),
  );
  return ids;
}

/** Renames of the users' sessions, spread over the connections: each request a different user. */
function renames(users, ids, conns) {
  const headers = users.map((u) => ({ authorization: `Bearer ${token(u)}` }));
  return (c, seq) => {
    const u = (seq * conns + c) % users.length;
    return buildRequest('PUT', `/api/v1/chat-sessions/${ids[u]}`, { headers: headers[u], body: { name: `renamed ${c}-${seq}` } });
  };
}

// ---- fan-out ----

async function fanOut(dir, { subscribers, writes }, progress) {
  const server = await startServer(join(dir, 'fanout'), {
    MAX_CONNECTIONS: String(subscribers + 1000),
    MAX_STREAMS: String(subscribers + 500),
    MAX_STREAMS_PER_USER: String(subscribers + 500),
    // one user holds every stream: its share of requests in flight must hold them too
    MAX_REQUESTS_PER_USER: String(subscribers + 600),
  }, 'fanout');
  const streams = new Streams();
  try {
    const [id] = await seed(server.port, ['watcher']);
    const before = memoryOf(server.pid);
    progress(`fan-out: opening ${subscribers} streams`);
    const t0 = performance.now();
    await streams.open(server.port, Array.from({ length: subscribers }, () => streamHead('/api/v1/events', 'watcher')));
    const openSeconds = (performance.now() - t0) / 1000;
    await sleep(500);
    const open = memoryOf(server.pid);
    progress(`fan-out: ${subscribers} open in ${openSeconds.toFixed(1)} s; RSS ${before.rssMiB.toFixed(0)} -> ${open.rssMiB.toFixed(0)} MiB; ${writes} writes`);
    const afterAck = [];
    const afterSend = [];
    const firstAfterAck = [];
    for (let k = 1; k <= writes; k++) {
      const all = streams.expect(1 + k);
      const sent = performance.now();
      const r = await api(server.port, 'PUT', `/api/v1/chat-sessions/${id}`, { auth: token('watcher'), body: { name: `write ${k}` } });
      const acked = performance.now();
      if (r.status !== 200) throw new Error(`write ${k}: ${r.status} ${r.text}`);
      await all;
      afterAck.push(streams.lastAt - acked);
      afterSend.push(streams.lastAt - sent);
      firstAfterAck.push(streams.firstAt - acked);
      await sleep(10);
    }
    const sorted = (a) => [...a].sort((x, y) => x - y);
    const after = memoryOf(server.pid);
    return {
      subscribers,
      writes,
      openSeconds,
      rssBefore: before.rssMiB,
      rssOpen: open.rssMiB,
      rssAfter: after.rssMiB,
      peak: after.peakMiB,
      ack: { p50: percentile(sorted(afterAck), 0.5), p99: percentile(sorted(afterAck), 0.99), max: Math.max(...afterAck) },
      send: { p50: percentile(sorted(afterSend), 0.5), p99: percentile(sorted(afterSend), 0.99) },
      first: { p50: percentile(sorted(firstAfterAck), 0.5) },
    };
  } finally {
    streams.close();
    await server.stop();
  }
}

// ---- throughput with subscribers ----

/** The child process holding the subscribers of a throughput round (this file with --sink). */
async function startSink(port, users) {
  const child = spawn(process.execPath, [HERE, '--sink', String(port), users.join(',')], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.setEncoding('utf8');
  await new Promise((resolve, reject) => {
    child.stdout.on('data', (d) => {
      out += d;
      if (out.includes('ready\n')) resolve();
    });
    child.on('exit', (code) => reject(new Error(`the sink exited (${code})`)));
  });
  return {
    async stop() {
      const done = new Promise((resolve) => child.on('exit', resolve));
      child.kill('SIGTERM');
      await done;
      return Number(/events (\d+)/.exec(out)?.[1] ?? NaN);
    },
  };
}

async function sinkMain(port, users) {
  const streams = new Streams();
  await streams.open(port, users.map((u) => streamHead('/api/v1/events', u)), 100);
  process.stdout.write('ready\n');
  process.on('SIGTERM', () => {
    process.stdout.write(`events ${streams.total - users.length}\n`);
    streams.close();
    process.exit(0);
  });
}

async function throughput(dir, { subscribers, rounds, warmupMs, durationMs }, progress) {
  const users = Array.from({ length: subscribers }, (_, i) => `writer-${i}`);
  const server = await startServer(join(dir, 'throughput'), { MAX_CONNECTIONS: String(subscribers + 1000), MAX_STREAMS: String(subscribers + 500), MAX_STREAMS_PER_USER: '4' }, 'throughput');
  try {
    const ids = await seed(server.port, users);
    const request = renames(users, ids, 64);
    const rows = { none: [], idle: [], with: [] };
    const mainUs = { none: [], idle: [], with: [] };
    const watchers = users.map((u) => `watcher-of-nothing-${u}`);
    for (let r = 0; r < rounds; r++) {
      for (const label of ['none', 'idle', 'with']) {
        // with: each writer's own feed is open, so every write's event is written to one stream;
        // idle: as many streams open, of users who do not write, so no event is written to any
        const sink = label === 'none' ? undefined : await startSink(server.port, label === 'with' ? users : watchers);
        let cpu0 = 0;
        let cpu1 = 0;
        const run = await runLoad({
          port: server.port,
          connections: 64,
          warmupMs,
          durationMs,
          request,
          onWindowStart: () => (cpu0 = cpuSecondsOf(server.pid, { mainThread: true })),
          onWindowEnd: () => (cpu1 = cpuSecondsOf(server.pid, { mainThread: true })),
        });
        if (run.errors > 0) throw new Error(`throughput ${label}: ${run.errors} errors (${run.firstError})`);
        rows[label].push(run.rps);
        mainUs[label].push(((cpu1 - cpu0) / run.requests) * 1e6);
        if (sink !== undefined) {
          await sleep(200);
          // with: every write of the round (its warm-up too) made one event for one of the streams
          const got = await sink.stop();
          if (label === 'with' && !(got >= run.requests)) throw new Error(`the streams got ${got} events for ${run.requests} measured writes`);
          if (label === 'idle' && got !== 0) throw new Error(`streams of users who do not write got ${got} events`);
        }
        progress(`throughput round ${r + 1} ${label === 'none' ? 'without streams' : `with ${subscribers} streams (${label})`}: ${Math.round(run.rps)} renames/s, ${mainUs[label].at(-1).toFixed(1)} µs of the server's main thread each`);
      }
    }
    const med = (o) => ({ none: median(o.none), idle: median(o.idle), with: median(o.with) });
    return { subscribers, rps: med(rows), rows, mainUs: med(mainUs) };
  } finally {
    await server.stop();
  }
}

// ---- several PostgreSQL instances: events on and off ----

async function postgresCost(dir, { rounds, warmupMs, durationMs }, progress) {
  const { postgresMissing, startCluster } = await import('../test/pg/cluster.mjs');
  const missing = postgresMissing();
  if (missing !== undefined) return { skipped: missing };
  // durable commits, as in production: the cost of ordering commits shows only when they wait for the disk
  const cluster = await startCluster({ settings: { fsync: 'on', synchronous_commit: 'on', full_page_writes: 'on', max_connections: 200 } });
  const pairs = {};
  try {
    const users = Array.from({ length: 1000 }, (_, i) => `pg-writer-${i}`);
    for (const events of ['off', 'on']) {
      const env = { STORE: 'postgres', DATABASE_URL: cluster.url('postgres'), DATABASE_SCHEMA: `bench_events_${events}`, EVENTS: events, DATABASE_POOL_SIZE: '10' };
      const a = await startServer(join(dir, `pg-${events}-a`), env, `pg-${events}-a`);
      const b = await startServer(join(dir, `pg-${events}-b`), env, `pg-${events}-b`);
      pairs[events] = { servers: [a, b], ids: await seed(a.port, users), rps: [] };
    }
    for (let r = 0; r < rounds; r++) {
      for (const events of ['off', 'on']) {
        const p = pairs[events];
        const request = renames(users, p.ids, 64);
        // 32 clients on each instance, the two halves of one set of 64
        const runs = await Promise.all(p.servers.map((s, half) => runLoad({ port: s.port, connections: 32, warmupMs, durationMs, request: (c, seq) => request(c * 2 + half, seq) })));
        const errors = runs.reduce((n, x) => n + x.errors, 0);
        if (errors > 0) throw new Error(`postgres EVENTS=${events}: ${errors} errors (${runs.find((x) => x.errors > 0).firstError})`);
        const rps = runs.reduce((n, x) => n + x.rps, 0);
        p.rps.push(rps);
        progress(`postgres round ${r + 1} EVENTS=${events}: ${Math.round(rps)} renames/s through two instances`);
      }
    }
    return { off: median(pairs.off.rps), on: median(pairs.on.rps), rows: { off: pairs.off.rps, on: pairs.on.rps } };
  } finally {
    for (const p of Object.values(pairs)) for (const s of p.servers) await s.stop();
    await cluster.destroy();
  }
}

// ---- the report ----

const int = (v) => Math.round(v).toLocaleString('en-US');
const ms = (v) => (Math.abs(v) < 10 ? v.toFixed(2) : v.toFixed(1));

// ---- deltas of streaming turns ----

/**
 * Deltas of 20 characters to streaming turns, 8 clients each on a turn of its own, one delta
 * after another: to small turns, then to turns of 400 KB (what a delta costs an engine that
 * rewrites the whole turn), on sqlite and on PostgreSQL (when installed, fsync on).
 */
async function deltas(dir, { durationMs }, progress) {
  const out = [];
  const { postgresMissing, startCluster } = await import('../test/pg/cluster.mjs');
  const missing = postgresMissing();
  const cluster = missing === undefined ? await startCluster({ settings: { fsync: 'on', synchronous_commit: 'on', full_page_writes: 'on' } }) : undefined;
  try {
    for (const engine of ['sqlite', 'postgres']) {
      if (engine === 'postgres' && cluster === undefined) {
        out.push({ engine, skipped: missing });
        continue;
      }
      const at = join(dir, `deltas-${engine}`);
      const env = { STORE: engine, BODY_LIMIT: '2mb', ...(engine === 'postgres' ? { DATABASE_URL: cluster.url('postgres'), DATABASE_SCHEMA: 'bench_deltas' } : {}) };
      const server = await startServer(at, env, 'deltas');
      try {
        const row = { engine };
        for (const [size, start] of [['small', 'x'.repeat(100)], ['400 KB', 'x'.repeat(400_000)]]) {
          const auth = token('delta-writer');
          const s = await api(server.port, 'POST', '/api/v1/chat-sessions', { auth, body: { projectId: 'p', providerId: PROVIDER, selectedModel: 'm' } });
          const turns = [];
          for (let i = 0; i < 8; i++) turns.push((await api(server.port, 'POST', `/api/v1/chat-sessions/${s.body.data._id}/turns`, { auth, body: { role: 'assistant', content: start, status: 'streaming' } })).body.data._id);
          let done = 0;
          const until = Date.now() + durationMs;
          await Promise.all(
            turns.map(async (id) => {
              while (Date.now() < until) {
                const r = await api(server.port, 'POST', `/api/v1/chat-sessions/${s.body.data._id}/turns/${id}/deltas`, { auth, body: { text: 'twenty characters!!!' } });
                if (r.status !== 200) throw new Error(`delta: ${r.status} ${r.text}`);
                done++;
              }
            }),
          );
          row[size] = done / (durationMs / 1000);
          progress(`deltas ${engine} ${size}: ${Math.round(row[size])}/s`);
        }
        out.push(row);
      } finally {
        await server.stop();
      }
    }
  } finally {
    await cluster?.destroy();
  }
  return out;
}

function render({ fan, thr, pg, dl }) {
  const L = ['## Live feed', ''];
  if (fan !== undefined) {
    L.push(
      `Fan-out: ${int(fan.subscribers)} event streams of one user on one instance (sqlite), opened in ${fan.openSeconds.toFixed(1)} s; ${fan.writes} renames one after another, each event awaited at every stream. Time from the write's acknowledgement (its 200 at the client) to its event at the last stream. The server writes an event to the streams before it answers the write (p50 of the first stream's event: ${ms(Math.abs(fan.first.p50))} ms ${fan.first.p50 < 0 ? 'before' : 'after'} the acknowledgement); what follows is mostly the client reading ${int(fan.subscribers)} sockets.`,
      '',
      '| measure | value |',
      '|---|---:|',
      `| acknowledgement → event at the last stream, p50 / p99 / max | ${ms(fan.ack.p50)} / ${ms(fan.ack.p99)} / ${ms(fan.ack.max)} ms |`,
      `| write sent → event at the last stream, p50 / p99 | ${ms(fan.send.p50)} / ${ms(fan.send.p99)} ms |`,
      `| server RSS: before the streams / with them open / after the writes (peak) | ${int(fan.rssBefore)} / ${int(fan.rssOpen)} / ${int(fan.rssAfter)} (${int(fan.peak)}) MiB |`,
      `| per stream | ${((fan.rssOpen - fan.rssBefore) * 1024 / fan.subscribers).toFixed(1)} KiB |`,
      '',
    );
  }
  if (thr !== undefined) {
    const change = (x) => `${((x / thr.rps.none - 1) * 100).toFixed(1)}%`;
    const rounds = (k) => thr.rows[k].map(int).join(', ');
    L.push(
      `Throughput: 64 clients renaming the sessions of ${int(thr.subscribers)} users (sqlite), without event streams; with ${int(thr.subscribers)} streams of other users (open, but no event is for them); and with each writing user's own feed open (every write's event is written to one of ${int(thr.subscribers)} streams). Rounds interleaved, median of each; the main thread's CPU time per rename is the server's own cost, steadier than req/s on a shared machine.`,
      '',
      '| streams | renames/s | change | main thread µs per rename | rounds (renames/s) |',
      '|---|---:|---:|---:|---|',
      `| none | ${int(thr.rps.none)} | | ${thr.mainUs.none.toFixed(1)} | ${rounds('none')} |`,
      `| ${int(thr.subscribers)}, no event for them | ${int(thr.rps.idle)} | ${change(thr.rps.idle)} | ${thr.mainUs.idle.toFixed(1)} | ${rounds('idle')} |`,
      `| ${int(thr.subscribers)}, each write's event to one | ${int(thr.rps.with)} | ${change(thr.rps.with)} | ${thr.mainUs.with.toFixed(1)} | ${rounds('with')} |`,
      '',
    );
  }
  if (pg !== undefined) {
    if (pg.skipped !== undefined) L.push(`PostgreSQL: not measured (${pg.skipped}).`, '');
    else {
      L.push(
        'Several instances: two instances on one PostgreSQL 15 database (fsync and synchronous_commit on), 32 clients on each renaming the sessions of 1,000 users; EVENTS=off against EVENTS=on (each group of writes also takes ids under event_head\'s lock and NOTIFYs); rounds interleaved, median of each.',
        '',
        '| renames/s, EVENTS=off | EVENTS=on | change | rounds (off; on) |',
        '|---:|---:|---:|---|',
        `| ${int(pg.off)} | ${int(pg.on)} | ${((pg.on / pg.off - 1) * 100).toFixed(1)}% | ${pg.rows.off.map(int).join(', ')}; ${pg.rows.on.map(int).join(', ')} |`,
        '',
      );
    }
  }
  if (dl !== undefined) {
    L.push(
      'Deltas of streaming turns: 8 clients, each appending 20 characters at a time to a streaming turn of its own, one delta after another (each committed before the next); to small turns, then to turns of 400 KB, which an engine that rewrites the turn writes whole each time.',
      '',
      '| engine | deltas/s, small turns | deltas/s, 400 KB turns |',
      '|---|---:|---:|',
      ...dl.map((r) => (r.skipped !== undefined ? `| ${r.engine} | not measured: ${r.skipped} | |` : `| ${r.engine} | ${int(r.small)} | ${int(r['400 KB'])} |`)),
      '',
    );
  }
  return L.join('\n');
}

/** Runs the measurements; `o`: subscribers, throughputSubscribers, writes, rounds, warmupMs, durationMs, postgres. */
export async function liveReport(o, progress = (t) => process.stderr.write(`${t}\n`)) {
  const dir = mkdtempSync(join(tmpdir(), 'csa-bench-live-'));
  try {
    const only = (part) => o.only === undefined || o.only.includes(part);
    const fan = only('fanout') ? await fanOut(dir, o, progress) : undefined;
    const thr = only('throughput') ? await throughput(dir, { ...o, subscribers: o.throughputSubscribers }, progress) : undefined;
    const pg = o.postgres && only('postgres') ? await postgresCost(dir, o, progress) : undefined;
    const dl = only('deltas') ? await deltas(dir, o, progress) : undefined;
    return render({ fan, thr, pg, dl });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] === HERE) {
  const argv = process.argv.slice(2);
  if (argv[0] === '--sink') await sinkMain(Number(argv[1]), argv[2].split(','));
  else {
    const flag = (name, def) => Number(argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? def);
    const quick = argv.includes('--quick');
    const text = await liveReport({
      subscribers: flag('subscribers', quick ? 2000 : 10_000),
      throughputSubscribers: flag('throughput-subscribers', 1000),
      writes: flag('writes', quick ? 50 : 200),
      rounds: flag('rounds', quick ? 1 : 3),
      warmupMs: flag('warmup', quick ? 0.5 : 1) * 1000,
      durationMs: flag('duration', quick ? 1 : 3) * 1000,
      postgres: !argv.includes('--no-postgres'),
      only: argv.find((a) => a.startsWith('--only='))?.slice(7).split(','),
    });
    process.stdout.write(`${text}\n`);
  }
}
