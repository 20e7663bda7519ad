// The benchmark's command line, read once: the scenarios named and the options (each also an
// environment variable); the run's start and its progress lines on stderr.
import { loadavg } from 'node:os';

export const HELP = `Usage: node bench/run.mjs [SCENARIO|GROUP ...] [options]   (npm run bench -- [...])

Scenarios: %SCENARIOS%
Groups:    %GROUPS%
With no scenario named, all run but the opt-in ones (%OPTIN%), which run when named.

Options (each also an environment variable):
  --quick              short run: 1 round of 1 s, smaller scale data   BENCH_QUICK=1
  --only=a,b           scenarios or groups to run (same as naming them)
  --rounds=N           interleaved baseline/server rounds (default 3)  BENCH_ROUNDS
  --duration=S         measured seconds per round (default 3)          BENCH_DURATION
  --warmup=S           unmeasured seconds before each (default 1)      BENCH_WARMUP
  --scale=N            sessions (and 1 KiB turns) of the big data set  BENCH_SCALE (default 1000000)
  --migrate-runs=N     migrate: first starts on the big journal (default 1) BENCH_MIGRATE_RUNS
  --cold-runs=N        cold starts (default 10)                        BENCH_COLD_RUNS
  --out                also write bench/results/latest.md              BENCH_OUT=1
  --profile            run the API servers of load scenarios under node --cpu-prof and add the
                       top self-time functions to the report (profiles in bench/results/profiles)
  --keep               keep the temporary directory (data, server logs)
  --engines=a,b        engines the soak runs (default: sqlite,postgres;    BENCH_ENGINES
                       PostgreSQL on the run's private cluster); search-scale,
                       index-cost, replies, door-replies and door-lookup run these
                       only (default: both)
  --soak-kinds=a,b     the soak's hostile clients to run (default: all)     BENCH_SOAK_KINDS
  --quota-base=REF     pg-quota: also run the build of REF with the quota  BENCH_QUOTA_BASE
                       set (what a change to the quota's check costs), built once in $TMPDIR
  --before=REF         the engine-* scenarios also run sqlite as REF built it, replies its service   BENCH_BEFORE
                       (built once in $TMPDIR), in the same rounds; a run naming
                       --engines=sqlite leaves PostgreSQL out of them
  --builds=REF,REF     builds: the commits to compare, each built once in $TMPDIR; one named
                       twice runs against a copy of itself (default: the house of issue 29:
                       the last commit before it that builds, it, HEAD)    BENCH_BUILDS
  --engine=NAME        builds: sqlite (default) or postgres                BENCH_ENGINE
  --build-loads=a,b    builds: of get, create-64, reply (default: all)     BENCH_BUILD_LOADS
The server runs with LOG_LEVEL from the environment (default info), its stdout to a log file.
The peer scenarios (peer-pg, peer-sqlite) need Fastify and pg installed outside this repository:
  npm install --prefix /work/peers fastify pg; BENCH_PEERS=/work/peers npm run bench -- peers
door-replies runs the peer relay ../shared/peers/replies/relay-fastify.mjs beside the door when its
packages are installed there (npm ci in ../shared/peers) or in BENCH_PEERS (fastify, @fastify/jwt,
openai: an npm ci --prefix DIR of ../shared/peers/package-lock.json); else without it, said loudly.
  BENCH_DOOR_N=200           door-replies: replies at once (default 200)
  BENCH_DOOR_TOKENS=100      door-replies: tokens per reply (default 100)
  BENCH_LOOKUP_SESSIONS=N    door-lookup: the big user's sessions (default 100000; --quick 10000)`;

export const argv = process.argv.slice(2);
export const flag = (name) => argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
export const has = (name) => argv.includes(`--${name}`);
const quick = has('quick') || process.env.BENCH_QUICK === '1';
const num = (name, env, def) => {
  const v = flag(name) ?? process.env[env];
  if (v === undefined) return def;
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) fail(`--${name} / ${env} must be a positive number (got "${v}")`);
  return n;
};
export const opts = {
  rounds: Math.round(num('rounds', 'BENCH_ROUNDS', quick ? 1 : 3)),
  durationMs: num('duration', 'BENCH_DURATION', quick ? 1 : 3) * 1000,
  warmupMs: num('warmup', 'BENCH_WARMUP', quick ? 0.5 : 1) * 1000,
  scale: Math.round(num('scale', 'BENCH_SCALE', quick ? 100_000 : 1_000_000)),
  migrateRuns: Math.round(num('migrate-runs', 'BENCH_MIGRATE_RUNS', 1)),
  coldRuns: Math.round(num('cold-runs', 'BENCH_COLD_RUNS', quick ? 3 : 10)),
  out: has('out') || process.env.BENCH_OUT === '1',
  profile: has('profile'),
  keep: has('keep'),
  logLevel: process.env.LOG_LEVEL ?? 'info',
  engines: (flag('engines') ?? process.env.BENCH_ENGINES ?? 'sqlite,postgres').split(',').filter((e) => e !== ''),
  /** The soak's hostile clients by name (bench/soak.mjs HOSTILE); undefined: all. */
  soakKinds: (flag('soak-kinds') ?? process.env.BENCH_SOAK_KINDS)?.split(',').filter((e) => e !== ''),
  /** The engines named with --engines / BENCH_ENGINES; undefined when none were. */
  enginesNamed: (flag('engines') ?? process.env.BENCH_ENGINES)?.split(',').filter((e) => e !== ''),
  quotaBase: flag('quota-base') ?? process.env.BENCH_QUOTA_BASE,
  /** A commit whose sqlite server the engine scenarios also run (bench/builds.mjs); undefined: none. */
  before: flag('before') ?? process.env.BENCH_BEFORE,
  quick,
};

export function fail(message) {
  process.stderr.write(`bench: ${message}\n`);
  process.exit(2);
}
export const progress = (text) => process.stderr.write(`[${((performance.now() - wallStart) / 1000).toFixed(0).padStart(4)} s] ${text}\n`);

export const wallStart = performance.now();
export const loadAtStart = loadavg();
