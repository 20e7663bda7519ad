// The PostgreSQL client against the npm `pg` driver: point SELECT by primary key and
// single-row INSERT at 1, 16 and 64 concurrent callers, through each driver's pool, on a
// throwaway cluster (test/pg/cluster.mjs). Rounds are interleaved and the ratio is taken per
// round, so the machine's drift hits both sides alike; the median ratio is reported.
//
//   node build.mjs && PG_MODULE=/tmp/pgcmp/node_modules/pg node bench/pg-client.mjs [--rounds=5] [--seconds=2] [--only=select,insert]
//
// `pg` is never a dependency of this project: install it outside the repository
// (mkdir /tmp/pgcmp && cd /tmp/pgcmp && npm install pg) and name it in PG_MODULE; without it
// only this client's column is measured. The report (Markdown) goes to stdout.
import { createRequire } from 'node:module';
import { performance } from 'node:perf_hooks';
import { USERS, startCluster } from '../test/pg/cluster.mjs';

const require = createRequire(import.meta.url);
const { Pool } = require('../dist/testkit.cjs');

const args = Object.fromEntries(process.argv.slice(2).map((a) => a.replace(/^--/, '').split('=')));
const ROUNDS = Number(args.rounds ?? 3);
const SECONDS = Number(args.seconds ?? 1.5);
const ONLY = args.only ? args.only.split(',') : ['select', 'insert'];
const POOL_SIZE = Number(args.pool ?? 10);
const CONCURRENCY = [1, 16, 64];
const ROWS = 10_000;

const SELECT = 'SELECT id, v FROM kv WHERE id = $1';
const INSERT = 'INSERT INTO ins (v) VALUES ($1)';

const pg = process.env.PG_MODULE ? require(process.env.PG_MODULE) : undefined;
if (pg === undefined) console.error('PG_MODULE not set: measuring this client only');

const cluster = await startCluster();
try {
  await cluster.psql(`
    CREATE TABLE kv (id int PRIMARY KEY, v text NOT NULL);
    INSERT INTO kv SELECT g, md5(g::text) FROM generate_series(1, ${ROWS}) g;
    CREATE TABLE ins (id bigserial PRIMARY KEY, v text NOT NULL);
    GRANT ALL ON ALL TABLES IN SCHEMA public TO scram_user;
    GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO scram_user;
    ANALYZE kv;
  `);
  const url = cluster.url(USERS.scram.user);

  const ours = new Pool(url, { max: POOL_SIZE });
  const clients = { ours: { select: (id) => ours.query(SELECT, [id]), insert: (v) => ours.query(INSERT, [v]), end: () => ours.end() } };
  if (pg !== undefined) {
    const theirs = new pg.Pool({ connectionString: url, max: POOL_SIZE });
    // pg's default: an unnamed statement, parsed at every call
    clients.pg = { select: (id) => theirs.query(SELECT, [id]), insert: (v) => theirs.query(INSERT, [v]), end: () => theirs.end() };
    // pg's fastest: a named statement, prepared once per connection
    clients['pg-named'] = {
      select: (id) => theirs.query({ name: 'sel', text: SELECT, values: [id] }),
      insert: (v) => theirs.query({ name: 'ins', text: INSERT, values: [v] }),
      end: () => undefined,
    };
  }
  const names = Object.keys(clients);

  /** Closed loop: `concurrency` callers, each awaiting its call before the next, for `ms`. */
  async function measure(call, concurrency, ms) {
    let done = 0;
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    const end = t0 + ms;
    await Promise.all(
      Array.from({ length: concurrency }, async (_, w) => {
        for (let i = w; performance.now() < end; i += concurrency) {
          await call(i);
          done++;
        }
      }),
    );
    const elapsed = performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    return { rate: (done * 1000) / elapsed, cpuUs: (cpu.user + cpu.system) / done };
  }

  const scenarios = [];
  for (const kind of ONLY) {
    for (const c of CONCURRENCY) {
      scenarios.push({
        name: `${kind}-${c}`,
        concurrency: c,
        call: (client) =>
          kind === 'select'
            ? async (i) => {
                const r = await client.select(String(1 + ((i * 7919) % ROWS)));
                if (r.rows.length !== 1) throw new Error('no row');
              }
            : (i) => client.insert(`value ${i}`),
      });
    }
  }

  // warm-up: every pool opens its connections and prepares its statements
  for (const s of scenarios) for (const n of names) await measure(s.call(clients[n]), s.concurrency, 300);

  const results = new Map(scenarios.map((s) => [s.name, Object.fromEntries(names.map((n) => [n, []]))]));
  for (let round = 0; round < ROUNDS; round++) {
    for (const s of scenarios) {
      const order = round % 2 === 0 ? names : [...names].reverse();
      for (const n of order) results.get(s.name)[n].push(await measure(s.call(clients[n]), s.concurrency, SECONDS * 1000));
    }
    console.error(`round ${round + 1}/${ROUNDS} done`);
  }
  for (const n of names) await clients[n].end();

  const median = (xs) => {
    const s = [...xs].sort((a, b) => a - b);
    const m = s.length >> 1;
    return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
  };
  const fmt = (x) => Math.round(x).toLocaleString('en-US');
  const others = names.filter((n) => n !== 'ours');
  const header = ['scenario', ...names.map((n) => `${n} ops/s`), ...others.map((n) => `ours / ${n}`), ...names.map((n) => `${n} client CPU µs/op`)];
  const lines = [`| ${header.join(' | ')} |`, `|${header.map(() => '---').join('|')}|`];
  for (const s of scenarios) {
    const r = results.get(s.name);
    const rates = names.map((n) => fmt(median(r[n].map((x) => x.rate))));
    // the ratio of each round, then their median: drift between rounds cancels out
    const ratios = others.map((n) => median(r.ours.map((x, i) => x.rate / r[n][i].rate)).toFixed(2));
    const cpu = names.map((n) => median(r[n].map((x) => x.cpuUs)).toFixed(1));
    lines.push(`| ${[s.name, ...rates, ...ratios, ...cpu].join(' | ')} |`);
  }
  console.log(`PostgreSQL ${await cluster.psql('SHOW server_version')}, pool of ${POOL_SIZE} per driver, ${ROUNDS} rounds of ${SECONDS} s, Node.js ${process.version}${pg ? `, pg ${require(`${process.env.PG_MODULE}/package.json`).version}` : ''}\n`);
  console.log(lines.join('\n'));
} finally {
  await cluster.destroy();
}
