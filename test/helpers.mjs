// Test harness: starts the real built dist/server.js on port 0 with a temporary data
// directory and talks HTTP to it. Tokens are signed here with an independent HS256
// implementation, so the server's verification is checked against another signer.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { createHmac, randomBytes } from 'node:crypto';
import { accessSync, closeSync, constants, copyFileSync, existsSync, mkdtempSync, openSync, readFileSync, rmdirSync, rmSync, statSync, statfsSync, truncateSync, unlinkSync, writeFileSync, writeSync, mkdirSync } from 'node:fs';
import { request as httpRequest, Agent } from 'node:http';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { delimiter, join, dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
export const SERVER = join(ROOT, 'dist', 'server.js');
/** The providers every test server gets unless it says otherwise: the tests' own file, never a user's. */
export const TEST_PROVIDERS = join(ROOT, 'test', 'fixtures', 'providers.json');
/** The example a fresh clone serves (npm start copies it into data/ when no providers file is there). */
export const EXAMPLE_PROVIDERS = join(ROOT, 'examples', 'providers.json');
export const SECRET = 'test-secret-0123456789abcdef0123456789abcdef';

/**
 * The engine this run of the suite tests (test/run.mjs runs it once per engine): every server
 * the tests start uses it, unless a test names another.
 */
export const STORE = process.env.CSA_TEST_STORE ?? 'sqlite';

/**
 * The fault plan (CHAT_SESSION_API_FAULTS) that fails the k-th write on this run's engine: a
 * transaction rolled back just before COMMIT.
 */
export function failingWrite(...ks) {
  return ks.map((k) => `commit:${k}`).join(',');
}

/** The file this run's engine keeps its data in, inside the data directory (none for postgres). */
export const STORE_FILE = { sqlite: 'chat-sessions.db' }[STORE];

const schemas = new Map();
/**
 * The settings that point a server or a command at the store of `dataDir` on this run's engine.
 * For postgres each data directory gets a schema of its own in the run's database, so every
 * test starts on an empty store as it would with a fresh directory; the same directory keeps
 * its schema (a restart, an export, an import) until forgetStore.
 */
export function storeEnv(dataDir) {
  if (STORE !== 'postgres') return { STORE };
  const url = process.env.CSA_TEST_DATABASE_URL;
  if (url === undefined) throw new Error('STORE=postgres tests need CSA_TEST_DATABASE_URL (test/run.mjs starts a cluster and sets it)');
  const key = dataDir === undefined ? '' : resolve(dataDir);
  let schema = schemas.get(key);
  if (schema === undefined) {
    schema = `t_${randomBytes(8).toString('hex')}`;
    schemas.set(key, schema);
  }
  return { STORE, DATABASE_URL: url, DATABASE_SCHEMA: schema };
}

/**
 * What the store of `dataDir` holds, to prove that nothing was written: its file's bytes, or for
 * postgres its schema's export (the header's time left out).
 */
export function storeFingerprint(dataDir) {
  if (STORE_FILE !== undefined) return readFileSync(join(dataDir, STORE_FILE)).toString('base64');
  const r = runCli(['export'], { env: { DATA_DIR: dataDir } });
  if (r.code !== 0) throw new Error(`export for a fingerprint failed: ${r.stderr}`);
  return r.stdout.replace(/"exportedAt":"[^"]*"/, '');
}

/** Damages the store of `dataDir` so that opening it fails: a file that is not one, or a postgres schema of a future version. */
export async function damageStore(dataDir) {
  if (STORE_FILE !== undefined) {
    writeFileSync(join(dataDir, STORE_FILE), 'not a database\nnor this\n');
    return;
  }
  const { Pool } = createRequire(import.meta.url)('../dist/testkit.cjs');
  const pool = new Pool(process.env.CSA_TEST_DATABASE_URL, { max: 1 });
  const S = `"${storeEnv(dataDir).DATABASE_SCHEMA}"`;
  try {
    await pool.exec(`CREATE SCHEMA IF NOT EXISTS ${S}; CREATE TABLE IF NOT EXISTS ${S}.meta (key text PRIMARY KEY, value text NOT NULL); INSERT INTO ${S}.meta VALUES ('schema_version', '99') ON CONFLICT (key) DO UPDATE SET value = '99'`);
  } finally {
    await pool.end();
  }
}

/** What opening a store damaged by damageStore says. */
export const DAMAGED_STORE = { sqlite: /is not a SQLite database/, postgres: /is at version 99/ }[STORE];

/** The data directory was wiped: its store starts empty too (postgres: a new schema). */
export function forgetStore(dataDir) {
  schemas.delete(resolve(dataDir));
}

/** A fresh temporary directory, removed by the returned cleanup. */
export function tempDir(prefix = 'csa-test-') {
  return mkdtempSync(join(tmpdir(), prefix));
}

function b64url(s) {
  return Buffer.from(s).toString('base64url');
}

/** Signs claims (HS256 by default) with `secret`; `header` overrides the JOSE header. */
export function sign(claims, { secret = SECRET, header = { alg: 'HS256', typ: 'JWT' } } = {}) {
  const input = `${b64url(JSON.stringify(header))}.${b64url(JSON.stringify(claims))}`;
  return `${input}.${createHmac('sha256', secret).update(input).digest('base64url')}`;
}

/** A valid token for `sub`, one hour long unless claims say otherwise. */
export function tokenFor(sub, claims = {}, opts = {}) {
  const now = Math.floor(Date.now() / 1000);
  return sign({ sub, iat: now, exp: now + 3600, ...claims }, opts);
}

const agent = new Agent({ keepAlive: true, maxSockets: 64 });

/**
 * One HTTP request. `json` is sent as application/json; `body` is sent as given with the
 * given headers. Resolves {status, headers, text, body (parsed JSON or undefined)}.
 */
export function request(baseUrl, method, path, { token, json, body, headers = {}, keepAlive = true } = {}) {
  const url = new URL(path, baseUrl);
  const h = { ...headers };
  if (token !== undefined) h.authorization = `Bearer ${token}`;
  let payload = body;
  if (json !== undefined) {
    payload = JSON.stringify(json);
    if (h['content-type'] === undefined) h['content-type'] = 'application/json';
  }
  if (payload !== undefined) h['content-length'] = Buffer.byteLength(payload);
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      { host: url.hostname, port: url.port, method, path: url.pathname + url.search, headers: h, agent: keepAlive ? agent : false },
      (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let parsed;
          try {
            parsed = text === '' ? undefined : JSON.parse(text);
          } catch {
            parsed = undefined;
          }
          resolve({ status: res.statusCode, headers: res.headers, text, body: parsed });
        });
        res.on('error', reject);
      },
    );
    req.on('error', (e) => {
      // a kept-alive socket the server closed as idle just as this request went out on it: the
      // server never read the request, so it is sent again on a new socket (node's documented
      // way; a suite-wide rare ECONNRESET otherwise)
      if (req.reusedSocket && e.code === 'ECONNRESET') resolve(request(baseUrl, method, path, { token, json, body, headers, keepAlive }));
      else reject(e);
    });
    if (payload !== undefined) req.write(payload);
    req.end();
  });
}

const live = new Set();
process.on('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

/**
 * Starts dist/server.js. Options: env (extra variables), args (extra argv), nodeArgs (options for
 * node itself), node (another Node.js binary), dataDir (default a new temp dir), providers (array
 * written to providers.json; default test/fixtures/providers.json; null for none), script
 * (another copy of the server file), cwd, cgroup (a memoryCgroup to run it in).
 */
export async function startServer(opts = {}) {
  const madeDir = opts.dataDir === undefined;
  const dataDir = opts.dataDir ?? tempDir();
  mkdirSync(dataDir, { recursive: true });
  if (opts.providers === undefined) copyFileSync(TEST_PROVIDERS, join(dataDir, 'providers.json'));
  else if (opts.providers !== null) writeFileSync(join(dataDir, 'providers.json'), JSON.stringify(opts.providers));
  const env = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    PORT: '0',
    HOST: '127.0.0.1',
    DATA_DIR: dataDir,
    AUTH_SECRET: SECRET,
    LOG_LEVEL: 'info',
    ...storeEnv(opts.env?.DATA_DIR ?? dataDir),
    ...opts.env,
  };
  for (const [k, v] of Object.entries(env)) if (v === undefined) delete env[k];
  const argv = [...(opts.nodeArgs ?? []), opts.script ?? SERVER, ...(opts.args ?? [])];
  const node = opts.node ?? process.execPath;
  // in a memory cgroup (memoryCgroup): the shell joins it, then becomes the server
  const child = opts.cgroup === undefined
    ? spawn(node, argv, { cwd: opts.cwd ?? dataDir, env, stdio: ['ignore', 'pipe', 'pipe'] })
    : spawn('/bin/sh', ['-c', 'echo $$ > "$CSA_CGROUP_PROCS" && exec "$@"', 'sh', node, ...argv], {
        cwd: opts.cwd ?? dataDir,
        env: { ...env, CSA_CGROUP_PROCS: opts.cgroup.procs },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
  // a failed assertion must not leave a server running that keeps the test process alive
  live.add(child);
  child.on('exit', () => live.delete(child));
  child.unref();
  child.stdout.unref();
  child.stderr.unref();
  const server = new ServerProcess(child, dataDir);
  try {
    await server.listening();
  } catch (e) {
    child.kill('SIGKILL'); // a server that never listened must not keep the test process alive
    if (madeDir) removeDir(dataDir);
    throw e;
  }
  return server;
}

/** How long stop() waits for a signalled server to exit before it kills it and fails. */
const STOP_WAIT_MS = 120_000;

export class ServerProcess {
  constructor(child, dataDir) {
    this.child = child;
    this.dataDir = dataDir;
    this.stdout = '';
    this.stderr = '';
    this.exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
    child.stdout.setEncoding('utf8');
    child.stderr.setEncoding('utf8');
    child.stdout.on('data', (d) => (this.stdout += d));
    child.stderr.on('data', (d) => (this.stderr += d));
  }

  /** Resolves {code, signal} when the process has ended (and keeps the test alive until then). */
  get exit() {
    this.child.ref();
    return this.exited;
  }

  /** Every JSON log line so far. */
  logs() {
    return this.stdout
      .split('\n')
      .filter((l) => l.trim() !== '')
      .map((l) => {
        try {
          return JSON.parse(l);
        } catch {
          return { unparsed: l };
        }
      });
  }

  // a bound on a start that hangs (an exit is seen at once), not a timing assertion: a loaded
  // machine has taken more than 10 s to start a server
  async listening(timeoutMs = 60_000) {
    const started = Date.now();
    for (;;) {
      const line = this.logs().find((l) => l.msg === 'listening');
      if (line !== undefined) {
        this.port = line.port;
        this.url = `http://127.0.0.1:${line.port}`;
        return;
      }
      if (this.child.exitCode !== null || this.child.signalCode !== null) {
        throw new Error(`server exited before listening: ${this.stderr}${this.stdout}`);
      }
      if (Date.now() - started > timeoutMs) throw new Error(`server did not start: ${this.stderr}${this.stdout}`);
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  request(method, path, opts) {
    return request(this.url, method, path, opts);
  }

  /** Shorthand for an authenticated JSON call as `user`. */
  as(user, claims) {
    const token = tokenFor(user, claims);
    return {
      token,
      get: (path, o = {}) => this.request('GET', path, { token, ...o }),
      post: (path, json, o = {}) => this.request('POST', path, { token, json, ...o }),
      put: (path, json, o = {}) => this.request('PUT', path, { token, json, ...o }),
      del: (path, o = {}) => this.request('DELETE', path, { token, ...o }),
    };
  }

  /**
   * SIGTERM (or `signal`) and the exit status. A server that has not exited `waitMs` after the
   * signal (a generous bound, not a timing: a shutdown drains for 10 s at most) is SIGKILLed and
   * the call rejects, so a shutdown that hangs fails the test instead of stalling the run.
   */
  async stop(signal = 'SIGTERM', { waitMs = STOP_WAIT_MS } = {}) {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill(signal);
    let timer;
    const hung = new Promise((_, reject) => {
      timer = setTimeout(() => {
        this.child.kill('SIGKILL');
        reject(new Error(`the server did not exit within ${waitMs / 1000} s after ${signal}; it was killed (SIGKILL)`));
      }, waitMs);
    });
    try {
      return await Promise.race([this.exit, hung]);
    } finally {
      clearTimeout(timer);
    }
  }

  async kill() {
    return this.stop('SIGKILL');
  }
}

/**
 * Runs the server file as a command (token, export, import, --help...) and waits for it. PORT is
 * 0 unless `env` names one: a start that gets that far never takes a port another program has.
 */
/** Each start with `env` (a [env, pattern] case) stops with exit code 2 and one line of stderr matching its pattern. */
export function refusesToStart(cases) {
  for (const [env, re] of cases) {
    const dir = tempDir();
    const r = runCli([], { env: { DATA_DIR: dir, ...env }, cwd: dir });
    assert.equal(r.code, 2, JSON.stringify(env));
    assert.match(r.stderr, re);
    assert.equal(r.stderr.trim().split('\n').length, 1);
    removeDir(dir);
  }
}

export function runCli(args, { env = {}, cwd, input, script = SERVER, node = process.execPath } = {}) {
  const r = spawnSync(node, [script, ...args], {
    cwd,
    env: { PATH: process.env.PATH, HOME: process.env.HOME, PORT: '0', ...storeEnv(env.DATA_DIR ?? (cwd === undefined ? undefined : join(cwd, 'data'))), ...env },
    input,
    encoding: 'utf8',
    // a bound on a command that hangs, not a timing assertion: under a load average of 17 an
    // import of 22,000 sessions took more than a minute
    timeout: 600_000,
  });
  if (r.error !== undefined) return { code: null, stdout: r.stdout, stderr: `${r.stderr ?? ''}\n(runCli: ${r.error.message})` };
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** A seeded generator of numbers in [0, 1) (mulberry32), so a failing random test can be replayed. */
export function rng(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * Resolves once a server's files are at rest after its acknowledged writes: at once on the
 * PostgreSQL; on sqlite, once the queue it indexes after each commit is empty.
 */
export async function indexed(server) {
  if (STORE !== 'sqlite') return;
  for (let i = 0; i < 500; i++) {
    const m = await server.request('GET', '/metrics');
    if (/^chat_session_api_sqlite_search_unindexed 0$/m.test(m.text)) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error('the search index queue did not empty in 5 s');
}

export function removeDir(dir) {
  rmSync(dir, { recursive: true, force: true });
}

/** A create body the spec accepts. */
export function newSession(over = {}) {
  return { projectId: 'proj-1', providerId: '665f1c2a9b1e8a0012ab34c1', selectedModel: 'gpt-4o', ...over };
}

/** The path of an executable from outside npm (a path, or a name looked up on PATH and in `more` directories), or undefined. */
export function findExecutable(name, more = []) {
  const paths = name.includes('/') ? [name] : [...(process.env.PATH ?? '').split(delimiter), ...more].map((d) => join(d, name));
  for (const p of paths) {
    try {
      accessSync(p, constants.X_OK);
      return p;
    } catch {
      // not here
    }
  }
  return undefined;
}

/**
 * A real small file system for disk-full tests: a tmpfs of `size` (e.g. '4m') mounted on a new
 * temporary directory, unmounted by `release()`. Mounting needs root (or CAP_SYS_ADMIN); where
 * it is impossible the test is skipped with one loud line, and fails instead when
 * REQUIRE_MOUNT=1 (.ci/run sets it). Returns undefined when skipped.
 */
export function smallDisk(t, size) {
  const dir = tempDir('csa-disk-');
  const r = spawnSync('mount', ['-t', 'tmpfs', '-o', `size=${size},mode=0700`, 'tmpfs', dir], { encoding: 'utf8' });
  if (r.status !== 0) {
    removeDir(dir);
    const why = (r.error?.message ?? r.stderr ?? '').trim() || `exit ${r.status}`;
    if (process.env.REQUIRE_MOUNT === '1') throw new Error(`REQUIRE_MOUNT=1 but a tmpfs cannot be mounted here (${why}); run as root`);
    console.log(`# SKIPPED: cannot mount a small tmpfs for the disk-full tests (${why}); run as root, or set REQUIRE_MOUNT=1 to make this a failure`);
    t.skip('no small file system can be mounted here');
    return undefined;
  }
  const filler = join(dir, 'filler');
  return {
    dir,
    /** Fills the file system with a file of its own until writing fails (ENOSPC); returns its bytes. */
    fill() {
      const fd = openSync(filler, 'a');
      const block = Buffer.alloc(4096, 0x2e);
      let bytes = 0;
      try {
        for (;;) bytes += writeSync(fd, block);
      } catch (e) {
        if (e.code !== 'ENOSPC') throw e;
        // a partial block may still fit
        for (let n = 2048; n >= 1; n >>= 1) {
          try {
            bytes += writeSync(fd, block, 0, n);
          } catch {
            // full
          }
        }
      } finally {
        closeSync(fd);
      }
      return bytes;
    },
    /** Leaves `bytes` free: the filler shrinks to what it was minus them (or goes). */
    free(bytes = Infinity) {
      let size = 0;
      try {
        size = statSync(filler).size;
      } catch {
        return;
      }
      if (bytes >= size) unlinkSync(filler);
      else truncateSync(filler, size - bytes);
    },
    /** Free bytes as the file system reports them. */
    available() {
      const s = statfsSync(dir);
      return s.bavail * s.bsize;
    },
    release() {
      spawnSync('umount', ['-l', dir]);
      removeDir(dir);
    },
  };
}

/**
 * A real memory ceiling for memory tests: a new memory cgroup (v2, or v1's memory controller)
 * under this process's own, limited to `bytes` with no swap, so the kernel's OOM killer ends a
 * process in it that passes the limit. Pass it as startServer's `cgroup`. Needs root (or a
 * delegated cgroup); where it cannot be made the test is skipped with one loud line, and fails
 * instead when REQUIRE_CGROUP=1 (.ci/run sets it). Returns undefined when skipped.
 */
export function memoryCgroup(t, bytes) {
  const lines = readFileSync('/proc/self/cgroup', 'utf8').split('\n');
  const v1 = lines.find((l) => /^\d+:([^:]*,)?memory(,[^:]*)?:/.test(l));
  const v2 = lines.find((l) => l.startsWith('0::'));
  let dir;
  let why = 'no memory cgroup controller here';
  const name = `csa-test-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
  try {
    if (v1 !== undefined) {
      dir = join('/sys/fs/cgroup/memory', v1.slice(v1.lastIndexOf(':') + 1), name);
      mkdirSync(dir);
      writeFileSync(join(dir, 'memory.limit_in_bytes'), String(bytes));
      try {
        writeFileSync(join(dir, 'memory.memsw.limit_in_bytes'), String(bytes));
      } catch {
        // no swap accounting: no swap to use either
      }
    } else if (v2 !== undefined && existsSync('/sys/fs/cgroup/cgroup.controllers')) {
      dir = join('/sys/fs/cgroup', v2.slice(3), name);
      mkdirSync(dir);
      writeFileSync(join(dir, 'memory.max'), String(bytes));
      try {
        writeFileSync(join(dir, 'memory.swap.max'), '0');
      } catch {
        // no swap controller
      }
    } else dir = undefined;
  } catch (e) {
    why = e.message;
    if (dir !== undefined) rmSync(dir, { recursive: false, force: true });
    dir = undefined;
  }
  if (dir === undefined) {
    if (process.env.REQUIRE_CGROUP === '1') throw new Error(`REQUIRE_CGROUP=1 but a memory cgroup cannot be made here (${why}); run as root`);
    console.log(`# SKIPPED: cannot make a memory cgroup for the memory-ceiling tests (${why}); run as root, or set REQUIRE_CGROUP=1 to make this a failure`);
    t.skip('no memory cgroup can be made here');
    return undefined;
  }
  return {
    dir,
    procs: join(dir, 'cgroup.procs'),
    /** Removes the cgroup (its processes must have ended). */
    release() {
      for (let i = 0; i < 50; i++) {
        try {
          rmdirSync(dir);
          return;
        } catch {
          Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 20);
        }
      }
    },
  };
}
