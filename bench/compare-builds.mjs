// The `builds` scenario (opt-in): the same loads against builds of several commits in one run,
// each built once into $TMPDIR, so a refactor is measured against the commit before it (issue 29's
// house: `npm run bench -- builds --builds=941dba9,0fe455d,HEAD,HEAD`; a ref named twice runs
// against a copy of its own build, the noise floor). Registered by scenarios.mjs.
import { execFileSync, spawn } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { buildOf } from './builds.mjs';
import { api, EXAMPLE_PROVIDERS, median, NODE_24, nodeVersion, ROOT, token } from './common.mjs';
import { postgresCluster } from './engines.mjs';
import { buildRequest } from './loadgen.mjs';
import { flag } from './options.mjs';

const WRITE_CONNS = 64;
const LOCAL_PROVIDER = '665f1c2a9b1e8a0012ab34d0';
/** The local provider's directive: 50 tokens, as fast as the socket takes them (test/provider/server.mjs). */
const REPLY_MODEL = 'tokens:50';
const LOADS = ['get', 'create-64', 'reply'];

/**
 * The scenarios, given scenarios.mjs's context: {opts, progress, runDir(), startApi,
 * runLoadScenario, scenario(name), createRequest, sections}.
 */
export function buildsScenarios(ctx) {
  return [{ name: 'builds', optIn: true, run: () => builds(ctx) }];
}

const git = (...args) => execFileSync('git', ['-C', ROOT, ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();

/**
 * The refs of --builds (BENCH_BUILDS); without it, the house of issue 29: the commit before "the
 * house: use cases in src/services/ ..." that builds, that commit, and HEAD. Its parent (378e390)
 * holds the house's file moves without the edits of the files that import them, so it does not
 * build; the grandparent (941dba9) has the same sources under their old names.
 */
function refsAsked() {
  const given = flag('builds') ?? process.env.BENCH_BUILDS;
  if (given !== undefined) return given.split(',').filter((r) => r !== '');
  const house = git('log', '--format=%H', '-1', '--grep=^the house: use cases in src/services/', 'HEAD');
  if (house === '') throw new Error('builds: no commit "the house: ..." in this history; name the builds with --builds=REF,REF');
  return [`${house.slice(0, 7)}~2`, house.slice(0, 7), 'HEAD'];
}

/** dist/server.js of a commit (bench/builds.mjs builds it once); `copy` > 0: a copy of that build in a directory of its own (byte-identical files, other inodes). */
function buildCopy(ctx, commit, copy) {
  const server = buildOf(commit, (line) => ctx.progress(`builds: ${line}`));
  if (copy === 0) return server;
  const dir = dirname(dirname(server));
  const copyDir = `${dir}-copy${copy}`;
  rmSync(copyDir, { recursive: true, force: true });
  cpSync(join(dir, 'dist'), join(copyDir, 'dist'), { recursive: true });
  return join(copyDir, 'dist', 'server.js');
}

/** test/provider/server.mjs in a process of its own, on Node 24: {url, pid, stop}. */
async function startProvider(ctx) {
  const child = spawn(NODE_24, [join(ROOT, 'test', 'provider', 'server.mjs'), '--port', '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const url = await new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (c) => {
      out += c;
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m !== null) resolve(m[1]);
    });
    child.once('exit', (code) => reject(new Error(`the local provider exited (${code}) before it listened`)));
  });
  child.stdout.resume();
  ctx.progress(`builds: the local provider listens on ${url}`);
  return {
    url,
    pid: child.pid,
    stop: () => new Promise((resolve) => (child.exitCode !== null ? resolve() : (child.once('exit', resolve), child.kill('SIGTERM')))),
  };
}

async function builds(ctx) {
  const engine = flag('engine') ?? process.env.BENCH_ENGINE ?? 'sqlite';
  if (engine !== 'sqlite' && engine !== 'postgres') throw new Error(`builds: --engine must be sqlite or postgres (got "${engine}")`);
  const loads = (flag('build-loads') ?? process.env.BENCH_BUILD_LOADS ?? LOADS.join(',')).split(',').filter((l) => l !== '');
  for (const l of loads) if (!LOADS.includes(l)) throw new Error(`builds: unknown load "${l}"; loads: ${LOADS.join(', ')}`);
  const cluster = engine === 'postgres' ? await postgresCluster() : undefined;
  if (engine === 'postgres' && cluster === undefined) throw new Error('builds: --engine=postgres needs PostgreSQL installed');

  const seen = new Map();
  const list = refsAsked().map((ref) => {
    let commit;
    try {
      commit = git('rev-parse', '--verify', `${ref}^{commit}`);
    } catch {
      throw new Error(`builds: "${ref}" names no commit of this repository`);
    }
    const copy = seen.get(commit) ?? 0;
    seen.set(commit, copy + 1);
    const canReply = spawnOk('git', ['-C', ROOT, 'cat-file', '-e', `${commit}:src/api/replies.ts`]);
    return { ref, commit, copy, canReply, label: `${commit.startsWith(ref) ? commit.slice(0, 7) : `${ref} (${commit.slice(0, 7)})`}${copy > 0 ? ` copy ${copy}` : ''}` };
  });
  for (const b of list) b.server = buildCopy(ctx, b.commit, b.copy);

  let schemas = 0;
  let started = 0;
  /** A target starting build `b` on the engine: a fresh data directory (or schema), the example providers and the local one. */
  const target = (load, b, provider) => ({
    label: b.label,
    start: async () => {
      const dir = mkdtempSync(join(ctx.runDir(), 'build-'));
      const providers = JSON.parse(readFileSync(EXAMPLE_PROVIDERS, 'utf8'));
      if (provider !== undefined) providers.push({ _id: LOCAL_PROVIDER, name: 'Local', type: 'openai', baseUrl: `${provider.url}/v1`, apiKey: 'sk-bench-local' });
      writeFileSync(join(dir, 'providers.json'), JSON.stringify(providers));
      const env = engine === 'sqlite' ? { STORE: 'sqlite' } : { STORE: 'postgres', DATABASE_URL: cluster.url('postgres'), DATABASE_SCHEMA: `builds_${++schemas}`, DATABASE_POOL_SIZE: '10' };
      const name = `build-${b.commit.slice(0, 7)}${b.copy > 0 ? `-copy${b.copy}` : ''}`;
      // with --profile, one profile per server started (a pass each), under the load's and the build's name
      return ctx.startApi({ name, profileName: `builds-${load}-${name}-${++started}`, dataDir: dir, node: NODE_24, server: b.server, env });
    },
  });

  const rows = [];
  const when = [];
  const run = async (name, sc, chosen) => {
    if (chosen.length < 2) {
      when.push({ name, skipped: `${chosen.length} build(s) can run it` });
      return;
    }
    // bothOrders: one pass per build, each first in as many rounds (bench/README.md, "Which server comes first")
    const rounds = ctx.opts.quick ? undefined : Math.max(ctx.opts.rounds, 2 * chosen.length);
    const before = loadavg()[0];
    const t0 = performance.now();
    await ctx.runLoadScenario({ ...sc, name: `builds-${name}`, rounds, alternate: true, bothOrders: true }, rows);
    when.push({ name, before, after: loadavg()[0], seconds: (performance.now() - t0) / 1000 });
  };

  const like = (name) => {
    const base = ctx.scenario(name);
    return { ...base, request: base.request ?? (() => ctx.createRequest(base.conns)) };
  };
  if (loads.includes('get')) await run('get', { ...like('get'), targets: list.map((b) => target('get', b)) }, list);
  if (loads.includes('create-64')) await run('create-64', { ...like('create-64'), targets: list.map((b) => target('create-64', b)) }, list);
  if (loads.includes('reply')) {
    const repliers = list.filter((b) => b.canReply);
    const provider = repliers.length >= 2 ? await startProvider(ctx) : undefined;
    try {
      await run('reply', replyScenario(repliers.map((b) => target('reply', b, provider))), repliers);
    } finally {
      await provider?.stop();
    }
  }
  ctx.sections.push(render(rows, when, { engine, list }));
}

function spawnOk(cmd, args) {
  try {
    execFileSync(cmd, args, { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/**
 * A message and its reply, waited for (201 once the reply is recorded): 64 clients, each in a
 * session of its own on the local provider, each message a new root (parentId null), so what the
 * model is sent stays one message however many the session holds.
 */
function replyScenario(targets) {
  return {
    title: `POST /chat-sessions/:id/messages (a message and its reply of 50 tokens from the local provider, waited for), ${WRITE_CONNS} clients`,
    conns: WRITE_CONNS,
    targets,
    prepare: async (p) =>
      Promise.all(
        Array.from({ length: WRITE_CONNS }, async (_, c) => {
          // a connection each (keepAlive false): a kept one may be a previous server's, closed since, on a port reused
          const r = await api(p.port, 'POST', '/api/v1/chat-sessions', { keepAlive: false, auth: token(`replier-${c}`), body: { projectId: 'replies', providerId: LOCAL_PROVIDER, selectedModel: REPLY_MODEL, name: `replies ${c}` } });
          if (r.status !== 201) throw new Error(`seeding: create answered ${r.status} ${r.text}`);
          const id = r.body.data._id;
          const first = await api(p.port, 'POST', `/api/v1/chat-sessions/${id}/messages`, { keepAlive: false, auth: token(`replier-${c}`), body: { content: 'hello', parentId: null } });
          if (first.status !== 201 || first.body?.data?.reply?.status !== 'complete') throw new Error(`seeding: a message answered ${first.status} ${first.text.slice(0, 300)}`);
          return id;
        }),
      ),
    request: (ids) => {
      const bufs = ids.map((id, c) => buildRequest('POST', `/api/v1/chat-sessions/${id}/messages`, { headers: { authorization: `Bearer ${token(`replier-${c}`)}` }, body: { content: 'hello', parentId: null } }));
      return (c) => bufs[c];
    },
  };
}

// ---- the report ----

const num = (x, d = 0) => (x === undefined || Number.isNaN(x) ? '–' : x.toLocaleString('en-US', { minimumFractionDigits: d, maximumFractionDigits: d }));
const ms = (x) => (x === undefined || Number.isNaN(x) ? '–' : x < 10 ? x.toFixed(2) : x.toFixed(1));

/** a's figures over b's, round by round (the same round, seconds apart): their median, lowest and highest. */
function paired(a, b, field) {
  const ratios = a[field].map((x, i) => x / b[field][i]).sort((p, q) => p - q);
  return `${median(ratios).toFixed(2)} (${ratios[0].toFixed(2)}–${ratios.at(-1).toFixed(2)})`;
}

function render(rows, when, { engine, list }) {
  const L = ['## Builds', ''];
  L.push(
    `The same loads against builds of several commits (${engine}, every server on Node ${nodeVersion(NODE_24)}; ${list.map((b) => b.label).join(', ')}), in one pass per build with the servers restarted and a different build first in each, the order within a round alternating. × first: each build's median req/s over its rounds against the first build's, and main-thread CPU per request likewise; paired: the rounds' own ratios (median, lowest–highest). A build named twice runs against a copy of itself: its row is the noise floor.`,
    '',
  );
  L.push('| load | build | rounds | req/s | × first | paired × first | main thread µs/req | × first | paired × first | p50 / p99 ms | errors |');
  L.push('|---|---|---:|---:|---:|---|---:|---:|---|---|---|');
  for (const r of rows) {
    const first = rows.find((x) => x.scenario === r.scenario);
    L.push(
      `| ${r.scenario.replace(/^builds-/, '')} | ${r.label} | ${r.rounds.length} | ${num(r.rps)} | ${(r.rps / first.rps).toFixed(2)} | ${paired(r, first, 'rounds')} | ${r.mainUs.toFixed(1)} | ${(r.mainUs / first.mainUs).toFixed(2)} | ${paired(r, first, 'mainUsRounds')} | ${ms(r.p50)} / ${ms(r.p99)} | ${r.errors === 0 ? '0' : `${r.errors} (${r.firstError ?? ''})`} |`,
    );
  }
  L.push('');
  for (const r of rows) {
    const m = / copy \d+$/.exec(r.label);
    const original = m === null ? undefined : rows.find((x) => x.scenario === r.scenario && x.label === r.label.slice(0, m.index));
    if (original !== undefined) L.push(`- noise floor, ${r.scenario.replace(/^builds-/, '')}: ${r.label} ÷ ${original.label}: req/s ${(r.rps / original.rps).toFixed(2)}, paired ${paired(r, original, 'rounds')}; main thread µs/req ${(r.mainUs / original.mainUs).toFixed(2)}, paired ${paired(r, original, 'mainUsRounds')}`);
  }
  for (const w of when) L.push(w.skipped !== undefined ? `- ${w.name}: skipped, ${w.skipped}` : `- ${w.name}: ${w.seconds.toFixed(0)} s, load average (1 min) ${w.before.toFixed(1)} → ${w.after.toFixed(1)}`);
  return L.join('\n');
}
