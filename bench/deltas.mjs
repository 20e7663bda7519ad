// What a delta costs as its turn grows (issue 30, point 4: "the cost of a delta must not grow
// with the turn's length"): one streaming turn takes LONG pieces (a 32,000-token reply) against
// LONG / SHORT turns taking SHORT pieces each (replies of 100 tokens): the same number of pieces,
// through POST .../deltas, one after another, each a token-sized word. Per piece: the server's
// CPU (and the database's, on PostgreSQL), the wall time, and the bytes the engine wrote (sqlite:
// what the server process wrote, from /proc; PostgreSQL: the WAL, from its insert position); for
// the long turn also its first and last thousand pieces apart. With --before=PATH the same runs
// against another build's dist/server.js (the release before), for a before/after table.
//   node_modules/.bin/node bench/deltas.mjs [--long=32000] [--short=100] [--engines=sqlite,postgres] [--before=/tmp/before/dist/server.js]
// Prints Markdown to stdout, progress to stderr.
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { api, cpuSecondsOf, EXAMPLE_PROVIDERS, NODE_24, SECRET, SERVER, startProcess, token } from './common.mjs';
import { clusterCpu } from './engines.mjs';
import { postgresMissing, startCluster, USERS } from '../test/pg/cluster.mjs';

const argv = process.argv.slice(2);
const option = (name, def) => argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? def;
const LONG = Number(option('long', '32000'));
const SHORT = Number(option('short', '100'));
const ENGINES = option('engines', 'sqlite,postgres').split(',');
const BEFORE = option('before', undefined);
const WINDOW = Math.min(1000, Math.floor(LONG / 4));
const PROVIDER = '665f1c2a9b1e8a0012ab34c1';
const WORDS = ' the quick brown fox jumps over a lazy dog while seven bright stars hum softly above quiet hills'.split(' ').map((w) => ` ${w}`);
const progress = (t) => process.stderr.write(`${t}\n`);

let cluster;
let pool;
/** The cluster's WAL insert position, in bytes. */
async function walBytes() {
  return Number((await pool.query("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')")).rows[0][0]);
}

/** What a run of pieces cost: server and database CPU seconds, wall seconds, bytes written. */
function meter(server, engine) {
  const read = async () => ({
    cpu: cpuSecondsOf(server.pid),
    db: engine === 'postgres' ? clusterCpu(cluster) : 0,
    wall: performance.now() / 1000,
    bytes: engine === 'postgres' ? await walBytes() : Number(/^wchar: (\d+)$/m.exec(readFileSync(`/proc/${server.pid}/io`, 'utf8'))[1]),
  });
  return async (run) => {
    const a = await read();
    const n = await run();
    const b = await read();
    return { n, cpu: b.cpu - a.cpu, db: b.db - a.db, wall: b.wall - a.wall, bytes: b.bytes - a.bytes };
  };
}

async function measure(label, script, engine, schema) {
  const dir = mkdtempSync(join(tmpdir(), 'csa-bench-deltas-'));
  copyFileSync(EXAMPLE_PROVIDERS, join(dir, 'providers.json'));
  // STREAMING_IDLE: the short turns are all made first and filled one after another; on a loaded
  // machine the last waited past PostgreSQL's 5 minutes and were swept as interrupted (409)
  const env = { DATA_DIR: dir, AUTH_SECRET: SECRET, LOG_LEVEL: 'warn', HOST: '127.0.0.1', STORE: engine, BODY_LIMIT: '4mb', STREAMING_IDLE: '1440m' };
  if (engine === 'postgres') Object.assign(env, { DATABASE_URL: cluster.url(USERS.admin.user), DATABASE_SCHEMA: schema });
  const server = await startProcess({ script, env, node: NODE_24, cwd: dir, logFile: join(dir, 'server.log') });
  const auth = token('bench-deltas');
  const B = '/api/v1/chat-sessions';
  let w = 0;
  const streamingTurn = async () => {
    const s = await api(server.port, 'POST', B, { auth, body: { projectId: 'p', providerId: PROVIDER, selectedModel: 'm' } });
    const t = await api(server.port, 'POST', `${B}/${s.body.data._id}/turns`, { auth, body: { role: 'assistant', content: '', status: 'streaming' } });
    if (t.status !== 201) throw new Error(`a streaming turn: ${t.status} ${t.text}`);
    return `${B}/${s.body.data._id}/turns/${t.body.data._id}`;
  };
  const pieces = async (path, n) => {
    for (let i = 0; i < n; i++) {
      const r = await api(server.port, 'POST', `${path}/deltas`, { auth, body: { text: WORDS[w++ % WORDS.length] } });
      if (r.status !== 200) throw new Error(`a delta: ${r.status} ${r.text}`);
    }
    return n;
  };
  const m = meter(server, engine);
  try {
    // warm-up: the server's code paths and caches, on a turn of its own
    await pieces(await streamingTurn(), 300);
    progress(`${label} ${engine}: ${LONG / SHORT} turns of ${SHORT} pieces...`);
    const turns = [];
    for (let k = 0; k < LONG / SHORT; k++) turns.push(await streamingTurn());
    const short = await m(async () => {
      let n = 0;
      for (const t of turns) n += await pieces(t, SHORT);
      return n;
    });
    progress(`${label} ${engine}: one turn of ${LONG} pieces...`);
    const long = await streamingTurn();
    const first = await m(() => pieces(long, WINDOW));
    const middle = await m(() => pieces(long, LONG - 2 * WINDOW));
    const last = await m(() => pieces(long, WINDOW));
    const whole = { n: LONG, cpu: first.cpu + middle.cpu + last.cpu, db: first.db + middle.db + last.db, wall: first.wall + middle.wall + last.wall, bytes: first.bytes + middle.bytes + last.bytes };
    const got = await api(server.port, 'GET', long, { auth });
    // what reading costs: the long turn while it streams (its deltas folded in by the read), and a
    // page of 100 complete turns of a session (every read of turns now asks whether one streams)
    progress(`${label} ${engine}: reads...`);
    const gets = async (path, n) => {
      for (let i = 0; i < n; i++) if ((await api(server.port, 'GET', path, { auth })).status !== 200) throw new Error(`GET ${path}`);
      return n;
    };
    const readLong = await m(() => gets(long, 200));
    const s = await api(server.port, 'POST', B, { auth, body: { projectId: 'p', providerId: PROVIDER, selectedModel: 'm' } });
    for (let i = 0; i < 100; i++) await api(server.port, 'POST', `${B}/${s.body.data._id}/turns`, { auth, body: { role: i % 2 === 0 ? 'user' : 'assistant', content: WORDS.join('').repeat(3) } });
    const readList = await m(() => gets(`${B}/${s.body.data._id}/turns?limit=100`, 1000));
    return { label, engine, short, long: whole, first, last, chars: got.body.data.content.length, readLong, readList };
  } finally {
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

const us = (r, k) => (r[k] / r.n) * 1e6;
const fmt = (v) => (v >= 100 ? Math.round(v).toLocaleString('en-US') : v.toFixed(1));

async function main() {
  const servers = [['this branch', SERVER], ...(BEFORE !== undefined ? [['before', BEFORE]] : [])];
  if (ENGINES.includes('postgres')) {
    const missing = postgresMissing();
    if (missing !== undefined) throw new Error(missing);
    // durable, as production would be
    cluster = await startCluster({ settings: { fsync: 'on', synchronous_commit: 'on', full_page_writes: 'on', shared_buffers: "'128MB'", max_connections: 100 } });
    const { Pool } = (await import('node:module')).createRequire(import.meta.url)('../dist/testkit.cjs');
    pool = new Pool(cluster.url(USERS.admin.user), { max: 1 });
  }
  const rows = [];
  try {
    let schemas = 0;
    for (const engine of ENGINES) for (const [label, script] of servers) rows.push(await measure(label, script, engine, `bench_deltas_${++schemas}`));
  } finally {
    await pool?.end();
    await cluster?.destroy();
  }
  const L = [
    `Deltas of one turn of ${LONG.toLocaleString('en-US')} pieces against ${(LONG / SHORT).toLocaleString('en-US')} turns of ${SHORT} (the same ${LONG.toLocaleString('en-US')} pieces, a word each, through \`POST .../deltas\` one after another; fsync on). Per piece: the server's CPU (the database's beside it on PostgreSQL), the wall time, and the bytes written (sqlite: by the server process; PostgreSQL: WAL). "first / last": the long turn's first and last ${WINDOW.toLocaleString('en-US')} pieces.`,
    '',
    '| engine | server | CPU µs/piece: short turns | long turn | long / short | long: first / last | db CPU µs/piece: short / long | ms/piece: short / long | bytes/piece: short / long (first / last) |',
    '|---|---|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const r of rows) {
    L.push(
      `| ${r.engine} | ${r.label} | ${fmt(us(r.short, 'cpu'))} | ${fmt(us(r.long, 'cpu'))} | ${(r.long.cpu / r.short.cpu).toFixed(2)}x | ${fmt(us(r.first, 'cpu'))} / ${fmt(us(r.last, 'cpu'))} | ${r.engine === 'postgres' ? `${fmt(us(r.short, 'db'))} / ${fmt(us(r.long, 'db'))}` : ''} | ${(r.short.wall / r.short.n * 1e3).toFixed(2)} / ${(r.long.wall / r.long.n * 1e3).toFixed(2)} | ${fmt(r.short.bytes / r.short.n)} / ${fmt(r.long.bytes / r.long.n)} (${fmt(r.first.bytes / r.first.n)} / ${fmt(r.last.bytes / r.last.n)}) |`,
    );
  }
  L.push(
    '',
    `The long turn held ${rows[0].chars.toLocaleString('en-US')} characters at the end. Reads, per GET: the long turn while it streams, and a page of 100 complete turns of about ${WORDS.join('').length * 3} characters.`,
    '',
    '| engine | server | GET of the long streaming turn: CPU µs (db µs) | ms | GET of 100 turns: CPU µs (db µs) | ms |',
    '|---|---|---:|---:|---:|---:|',
  );
  const db = (r, k) => (r.engine === 'postgres' ? ` (${fmt(us(r[k], 'db'))})` : '');
  for (const r of rows) L.push(`| ${r.engine} | ${r.label} | ${fmt(us(r.readLong, 'cpu'))}${db(r, 'readLong')} | ${(r.readLong.wall / r.readLong.n * 1e3).toFixed(2)} | ${fmt(us(r.readList, 'cpu'))}${db(r, 'readList')} | ${(r.readList.wall / r.readList.n * 1e3).toFixed(2)} |`);
  process.stdout.write(`${L.join('\n')}\n`);
}

await main();
