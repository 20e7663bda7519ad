// The soak of `npm run bench -- soak` (#16, and #31's connection hoarder): one hostile client of
// each kind the issues name, each against a normal load on a fresh server, per engine (sqlite
// and PostgreSQL). For each, the normal load runs alone, then beside the hostile client;
// reported: the normal load's p99 both times (and their ratio: the figure to read on a shared
// machine), its throughput, what the hostile client got done or was refused, and the server's
// peak resident memory (VmHWM) over both runs.
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { connect } from 'node:net';
import { join } from 'node:path';
import { EXAMPLE_PROVIDERS, NODE_24, SECRET, SERVER, memoryOf, sleep, token } from './common.mjs';
import { buildRequest, percentile, runLoad } from './loadgen.mjs';

const PROVIDER = '665f1c2a9b1e8a0012ab34c1';
/** Users of the normal load, each with a few sessions of a few small turns. */
const NORMAL_USERS = 64;
const NORMAL_SESSIONS = 10;
const NORMAL_TURNS = 5;
/** The hoarder's sessions (items 3, 5, 7) and the victim's project (item 8). */
const HOARDED = 30_000;
const VICTIM = 30_000;
/** The big session's turns (item 2): 64 of 1000 KiB. */
const BIG_TURNS = 64;
const BIG_TURN_BYTES = 1000 * 1024;

/** The engines the soak knows; the journal is retired (a server refuses STORE=journal). */
export const SOAK_ENGINES = ['sqlite', 'postgres'];

/** Why `store` cannot run here, or undefined: every server runs on the Node.js 24 of node_modules. */
export function engineMissing(store) {
  if (!SOAK_ENGINES.includes(store)) return `STORE=${store} is not served by this release (engines: ${SOAK_ENGINES.join(', ')})`;
  if (!existsSync(NODE_24)) return 'no Node.js 24 in node_modules (npm ci)';
  return undefined;
}

const oid = (seconds, tag, n) => seconds.toString(16).padStart(8, '0') + tag + n.toString(16).padStart(12, '0');

/** The soak's data set as an export file, imported into a data directory with `storeEnv` (STORE and its settings; once per engine). */
export function seedDataDir(dir, storeEnv) {
  const store = storeEnv.STORE;
  mkdirSync(dir, { recursive: true });
  cpSync(EXAMPLE_PROVIDERS, join(dir, 'providers.json'));
  const base = Math.floor(Date.UTC(2025, 0, 1) / 1000);
  const lines = [];
  const ids = { normal: [], hoarded: [], big: undefined };
  let n = 0;
  let turns = 0;
  const session = (user, project, name) => {
    const _id = oid(base + n, '0000', n);
    const at = new Date((base + n) * 1000).toISOString();
    n++;
    lines.push(JSON.stringify({ session: { _id, name, provider: PROVIDER, selectedModel: 'gpt-4o', mode: 'Build', user, project, createdAt: at, updatedAt: at, archived: false } }));
    return { _id, at };
  };
  const turn = (s, user, k, content) => {
    const at = new Date(Date.parse(s.at) + k + 1).toISOString();
    lines.push(JSON.stringify({ turn: { _id: oid(Math.floor(Date.parse(at) / 1000), '1111', turns++), session: s._id, user, role: 'user', content, createdAt: at } }));
  };
  for (let u = 0; u < NORMAL_USERS; u++) {
    const mine = [];
    for (let i = 0; i < NORMAL_SESSIONS; i++) {
      const s = session(`normal-${u}`, `normal-project-${u}`, `Session ${i}`);
      for (let k = 0; k < NORMAL_TURNS; k++) turn(s, `normal-${u}`, k, `turn ${k} of an ordinary conversation`);
      mine.push(s._id);
    }
    ids.normal.push(mine);
  }
  for (let i = 0; i < HOARDED; i++) ids.hoarded.push(session('hoarder', `hoard-${i % 100}`, `hoard ${i} ${'h'.repeat(200)}`)._id);
  for (let i = 0; i < VICTIM; i++) session('victim', 'victim-project', `victim ${i}`);
  const big = session('bigreader', 'big-project', 'the big one');
  const content = 'b'.repeat(BIG_TURN_BYTES);
  for (let k = 0; k < BIG_TURNS; k++) turn(big, 'bigreader', k, content);
  ids.big = big._id;
  const file = join(dir, '..', `soak-seed-${store}.ndjson`);
  const header = JSON.stringify({ format: 'chat-session-api/export', version: 1, exportedAt: new Date().toISOString(), sessions: n, turns });
  writeFileSync(file, `${header}\n${lines.join('\n')}\n`);
  const r = spawnSync(NODE_24, [SERVER, 'import', file], { env: { PATH: process.env.PATH, DATA_DIR: dir, ...storeEnv }, encoding: 'utf8', maxBuffer: 1 << 20 });
  if (r.status !== 0) throw new Error(`soak: import into ${store} failed: ${r.stderr}`);
  return ids;
}

/**
 * The soak's data set for `store`, seeded once (into `workDir`), and `fresh(name)`, which resolves
 * a data directory and the settings of a server on a copy of it: sqlite copies the directory,
 * PostgreSQL makes a database of `cluster` from the seeded one as a template.
 */
export async function seededStore(store, { workDir, cluster }) {
  const seedDir = join(workDir, `soak-seed-${store}`);
  if (store === 'sqlite') {
    const ids = seedDataDir(seedDir, { STORE: 'sqlite' });
    return {
      ids,
      fresh: async (name) => {
        const dir = join(workDir, name);
        cpSync(seedDir, dir, { recursive: true });
        return { dir, env: { STORE: 'sqlite' } };
      },
    };
  }
  const url = (database) => cluster.url(undefined, { database });
  await cluster.psql('CREATE DATABASE soak_seed OWNER trust_user');
  const ids = seedDataDir(seedDir, { STORE: 'postgres', DATABASE_URL: url('soak_seed') });
  let n = 0;
  return {
    ids,
    fresh: async (name) => {
      const database = `soak_${++n}`;
      await cluster.psql(`CREATE DATABASE ${database} TEMPLATE soak_seed OWNER trust_user STRATEGY FILE_COPY`);
      const dir = join(workDir, name);
      cpSync(seedDir, dir, { recursive: true });
      return { dir, env: { STORE: 'postgres', DATABASE_URL: url(database) } };
    },
  };
}

const agent = new Agent({ keepAlive: true, maxSockets: 64 });

/** One request, the answer read whole (or only counted, for huge ones): {status, bytes}. */
function call(port, method, path, { user, body } = {}) {
  return new Promise((resolve) => {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const headers = { authorization: `Bearer ${token(user)}` };
    if (payload !== undefined) Object.assign(headers, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) });
    const req = request({ host: '127.0.0.1', port, method, path, headers, agent }, (res) => {
      let bytes = 0;
      const chunks = [];
      res.on('data', (d) => {
        bytes += d.length;
        if (bytes < 1 << 16) chunks.push(d);
      });
      res.on('end', () => resolve({ status: res.statusCode, bytes, text: Buffer.concat(chunks).toString() }));
      res.on('error', () => resolve({ status: 0, bytes }));
    });
    req.on('error', () => resolve({ status: 0, bytes: 0 }));
    req.end(payload);
  });
}

/** Runs `step(i)` on `width` loops until `stop.now`; counts answers by status. */
async function loops(width, stop, step) {
  const statuses = new Map();
  let i = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (!stop.now) {
        const r = await step(i++);
        statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
      }
    }),
  );
  return statuses;
}

/** The server's defaults the hoarder runs into: MAX_CONNECTIONS and its headroom, and the share. */
const MAX_CONNECTIONS = 1000;
const HEADROOM = 8;
const SHARE = 64;
/** The hoarder opens a connection the server closed again once this has passed: a refusal's Retry-After. */
const REOPEN_MS = 1000;

/**
 * One of the hoarder's connections, kept open for as long as the server lets it and opened again
 * REOPEN_MS after it closes: `kind` 'body' (a create whose body never finishes) or 'list' (a
 * 64 MiB turn list it reads the head of, then nothing). Counts how each ended.
 */
async function hoard(port, kind, bigSession, stop, ended, live) {
  const auth = `Authorization: Bearer ${token('hog')}\r\n`;
  while (!stop.now) {
    const s = connect(port, '127.0.0.1');
    live.add(s);
    s.on('error', () => {});
    let status;
    s.once('data', (d) => {
      status = d.toString('latin1', 9, 12);
      s.pause(); // the rest of the answer is never read
    });
    s.once('connect', () => {
      if (kind === 'body') s.write(`POST /api/v1/chat-sessions HTTP/1.1\r\nHost: x\r\n${auth}Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"projectId":`);
      else s.write(`GET /api/v1/chat-sessions/${bigSession}/turns HTTP/1.1\r\nHost: x\r\n${auth}\r\n`);
    });
    await new Promise((resolve) => s.once('close', resolve));
    live.delete(s);
    if (stop.now) break;
    const why = status === undefined ? `${kind} closed` : status === '200' ? `${kind} 200, then cut` : `${kind} ${status}`;
    ended.set(why, (ended.get(why) ?? 0) + 1);
    await sleep(REOPEN_MS);
  }
}

/**
 * A new user on a new connection every 100 ms, asking for its session list: what a newcomer
 * meets. Its time to connect is kept apart: a SYN the kernel drops from a full accept queue is
 * sent again only after a second.
 */
async function newcomers(port, stop) {
  const latencies = [];
  const connects = [];
  const statuses = new Map();
  for (let i = 0; !stop.now; i++) {
    const started = performance.now();
    const r = await new Promise((resolve) => {
      const req = request({ host: '127.0.0.1', port, path: '/api/v1/chat-sessions?limit=10', headers: { authorization: `Bearer ${token(`newcomer-${i}`)}` }, agent: false }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode));
        res.on('error', () => resolve(0));
      });
      req.on('socket', (s) => s.once('connect', () => connects.push(performance.now() - started)));
      req.on('error', () => resolve(0));
      req.end();
    });
    latencies.push(performance.now() - started);
    statuses.set(r, (statuses.get(r) ?? 0) + 1);
    await sleep(100);
  }
  latencies.sort((a, b) => a - b);
  connects.sort((a, b) => a - b);
  return { latencies, connects, statuses };
}

/**
 * What /metrics says now, by series name: asked again while it does not answer (a keep-alive
 * connection may close as it is reused), for 5 s at most ({} then).
 */
async function serverMetrics(port) {
  for (let i = 0; i < 250; i++) {
    const r = await call(port, 'GET', '/metrics', { user: 'probe' });
    if (r.status === 200 && r.text !== undefined) {
      const out = {};
      for (const m of r.text.matchAll(/^(chat_session_api_[a-z_]+) (\d+)$/gm)) out[m[1]] = Number(m[2]);
      return out;
    }
    await sleep(20);
  }
  return {};
}

/** The hostile clients, one per kind of the issues (#16's item numbers; the hoarder is #31's item 1). */
export const HOSTILE = [
  {
    name: 'big-turns',
    item: '16.1',
    what: 'one client appending 1000 KiB turns to its own session, back to back',
    async run(port, stop) {
      const id = JSON.parse((await call(port, 'POST', '/api/v1/chat-sessions', { user: 'flooder', body: { projectId: 'p', providerId: PROVIDER, selectedModel: 'm' } })).text).data._id;
      const content = 'f'.repeat(BIG_TURN_BYTES);
      return loops(1, stop, () => call(port, 'POST', `/api/v1/chat-sessions/${id}/turns`, { user: 'flooder', body: { role: 'user', content } }));
    },
  },
  {
    name: 'unread-lists',
    item: '16.2',
    what: 'ten clients of one user asking for the whole turn list of a 64 MiB session and never reading it',
    async run(port, stop, ids) {
      const sockets = [];
      const answered = new Map();
      for (let i = 0; i < 10; i++) {
        const s = connect(port, '127.0.0.1');
        s.on('error', () => {});
        // the head of the answer, then nothing: one user is sent two whole lists at once, the rest are refused
        s.once('data', (d) => {
          s.pause();
          const status = d.toString('latin1', 9, 12);
          answered.set(status, (answered.get(status) ?? 0) + 1);
        });
        s.write(`GET /api/v1/chat-sessions/${ids.big}/turns HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token('bigreader')}\r\n\r\n`);
        sockets.push(s);
      }
      while (!stop.now) await sleep(50);
      for (const s of sockets) s.destroy();
      return new Map([...answered].map(([k, v]) => [k === '200' ? '200, held unread' : k, v]));
    },
  },
  {
    name: 'big-session-list',
    item: '16.3',
    what: 'one client reading the unpaginated list of its 30,000 sessions, again and again',
    run: (port, stop) => loops(1, stop, () => call(port, 'GET', '/api/v1/chat-sessions', { user: 'hoarder' })),
  },
  {
    name: 'reader',
    item: '16.5',
    what: 'four clients reading each of 30,000 sessions by id in turn',
    run: (port, stop, ids) => loops(4, stop, (i) => call(port, 'GET', `/api/v1/chat-sessions/${ids.hoarded[(i * 7919) % ids.hoarded.length]}`, { user: 'hoarder' })),
  },
  {
    name: 'search',
    item: '16.7',
    what: 'eight clients searching 30,000 sessions for a name none has (pages and whole lists)',
    run: (port, stop) => loops(8, stop, (i) => call(port, 'GET', `/api/v1/chat-sessions?q=zzz-nothing${i % 2 === 0 ? '&limit=50' : ''}`, { user: 'hoarder' })),
  },
  {
    name: 'owner-probe',
    item: '16.8',
    what: "four clients listing another user's project of 30,000 sessions (ACCESS=owner)",
    env: { ACCESS: 'owner' },
    run: (port, stop) => loops(4, stop, () => call(port, 'GET', '/api/v1/chat-sessions?projectId=victim-project&limit=1000', { user: 'prober' })),
  },
  {
    name: 'churn',
    item: '16.13',
    what: 'one client creating sessions of twenty 16 KiB turns and deleting them',
    async run(port, stop) {
      const content = 'c'.repeat(16 * 1024);
      return loops(1, stop, async () => {
        const r = await call(port, 'POST', '/api/v1/chat-sessions', { user: 'churner', body: { projectId: 'p', providerId: PROVIDER, selectedModel: 'm' } });
        if (r.status !== 201) return r;
        const id = JSON.parse(r.text).data._id;
        for (let k = 0; k < 20; k++) await call(port, 'POST', `/api/v1/chat-sessions/${id}/turns`, { user: 'churner', body: { role: 'user', content } });
        return call(port, 'DELETE', `/api/v1/chat-sessions/${id}`, { user: 'churner' });
      });
    },
  },
  {
    name: 'hoard-connections',
    item: '31.1',
    what: `one user holding every connection it can: ${MAX_CONNECTIONS + HEADROOM} connections (MAX_CONNECTIONS and its headroom), each with a body that never finishes or a 64 MiB turn list it never reads, each opened again ${REOPEN_MS / 1000} s (a refusal's Retry-After) after the server closes it; beside it a newcomer every 100 ms (a new user on a new connection)`,
    signalsReady: true,
    async run(port, stop, ids, ready) {
      const ended = new Map();
      const live = new Set();
      const loops = [];
      for (let i = 0; i < MAX_CONNECTIONS + HEADROOM; i++) loops.push(hoard(port, i % 2 === 0 ? 'body' : 'list', ids.big, stop, ended, live));
      // the newcomers start once the hoarder holds its share (on a server without one: every connection), and the server's figures are read as they end
      const holding = (m) => m.chat_session_api_requests_in_flight_busiest >= SHARE || (m.chat_session_api_requests_in_flight_busiest === undefined && m.chat_session_api_connections >= MAX_CONNECTIONS);
      while (!holding(await serverMetrics(port)) && !stop.now) await sleep(20);
      ready();
      const probe = newcomers(port, stop);
      while (!stop.now) await sleep(20);
      const seen = await serverMetrics(port);
      const met = await probe;
      for (const s of live) s.destroy();
      await Promise.all(loops);
      const out = new Map([...ended].sort());
      out.set('share held at the end', seen.chat_session_api_requests_in_flight_busiest);
      out.set('refused 429 (requests_over_share_total)', seen.chat_session_api_requests_over_share_total);
      out.set('evicted idle', seen.chat_session_api_connections_evicted_total);
      out.set('refused 503 at the cap', seen.chat_session_api_connections_refused_total);
      out.set('newcomers', `${[...met.statuses].map(([k, v]) => `${v} × ${k}`).join(', ')}, median ${percentile(met.latencies, 0.5).toFixed(1)} ms, max ${(met.latencies.at(-1) ?? NaN).toFixed(1)} ms (of which connecting: median ${percentile(met.connects, 0.5).toFixed(1)}, max ${(met.connects.at(-1) ?? NaN).toFixed(1)})`);
      return out;
    },
  },
];

/** The normal load: each connection a user reading its sessions, its list and a page of turns of each, and writing a small turn every fourth request. */
export function normalRequests(ids, conns) {
  const perConn = Array.from({ length: conns }, (_, c) => {
    const u = c % NORMAL_USERS;
    const auth = { authorization: `Bearer ${token(`normal-${u}`)}` };
    const mine = ids.normal[u];
    return [
      ...mine.map((id) => buildRequest('GET', `/api/v1/chat-sessions/${id}`, { headers: auth })),
      buildRequest('GET', '/api/v1/chat-sessions', { headers: auth }),
      // a page of turns: the session written to grows past what is answered whole (streamed answers are chunked)
      ...mine.map((id) => buildRequest('GET', `/api/v1/chat-sessions/${id}/turns?limit=50`, { headers: auth })),
      buildRequest('POST', `/api/v1/chat-sessions/${mine[0]}/turns`, { headers: auth, body: { role: 'assistant', content: 'a'.repeat(1024) } }),
    ];
  });
  return (c, seq) => {
    const list = perConn[c];
    // a write every fourth request, reads in between
    return seq % 4 === 3 ? list[list.length - 1] : list[seq % (list.length - 1)];
  };
}

/**
 * Runs the soak for one engine: for each hostile kind a fresh copy of the seeded store
 * (`seeded`, from seededStore), a server on it, the normal load alone, then beside the hostile
 * client. `start(name, target, env)` starts a server on `target` ({dir, env}) and resolves
 * {port, pid, stop}.
 */
export async function soakEngine({ store, seeded, start, conns, warmupMs, durationMs, progress, kinds }) {
  const rows = [];
  const { ids } = seeded;
  const request = normalRequests(ids, conns);
  for (const h of HOSTILE.filter((k) => kinds === undefined || kinds.includes(k.name))) {
    const name = `soak-${store}-${h.name}`;
    const p = await start(name, await seeded.fresh(name), h.env ?? {});
    try {
      const alone = await runLoad({ port: p.port, connections: conns, warmupMs, durationMs, request });
      const stop = { now: false };
      let hostile;
      let ready;
      const isReady = new Promise((resolve) => (ready = resolve));
      const attack = h.run(p.port, stop, ids, ready).then((s) => (hostile = s));
      // the hostile client gets going first (the hoarder: until it holds its share)
      await (h.signalsReady === true ? Promise.race([isReady, sleep(60_000)]) : sleep(500));
      const under = await runLoad({ port: p.port, connections: conns, warmupMs: 0, durationMs, request });
      stop.now = true;
      await attack;
      const mem = memoryOf(p.pid);
      const row = {
        store,
        kind: h.name,
        item: h.item,
        what: h.what,
        p99Alone: percentile(alone.latencies, 0.99),
        p99Under: percentile(under.latencies, 0.99),
        rpsAlone: alone.rps,
        rpsUnder: under.rps,
        errorsUnder: under.errors,
        firstError: under.firstError,
        statusesUnder: [...under.statuses].map(([k, v]) => `${k}: ${v}`).join(', '),
        hostile: [...(hostile ?? new Map())].map(([k, v]) => `${k}: ${v}`).join(', '),
        peakMiB: mem.peakMiB,
        rssMiB: mem.rssMiB,
      };
      rows.push(row);
      progress(`soak ${store} ${h.name}: normal p99 ${row.p99Alone.toFixed(2)} -> ${row.p99Under.toFixed(2)} ms, ${row.rpsAlone.toFixed(0)} -> ${row.rpsUnder.toFixed(0)} req/s, ${row.errorsUnder} errors (${row.statusesUnder}; ${row.firstError ?? ''}); hostile ${row.hostile}; peak RSS ${row.peakMiB.toFixed(0)} MiB`);
    } finally {
      await p.stop();
    }
  }
  return rows;
}

export { SECRET };
