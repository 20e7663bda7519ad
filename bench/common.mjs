// Shared by the bench scripts: starting and stopping the processes under test (the real
// dist/server.js and the baseline), tokens, a small JSON client for seeding data, and reading
// a process's CPU time and memory from /proc.
import { spawn, spawnSync } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { closeSync, existsSync, openSync, readFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
export const SERVER = join(ROOT, 'dist', 'server.js');
export const BASELINE = join(ROOT, 'bench', 'baseline.mjs');
export const EXAMPLE_PROVIDERS = join(ROOT, 'examples', 'providers.json');
export const SECRET = 'bench-secret-0123456789abcdef0123456789abcdef';
/** The pinned Node.js 24 of node_modules (the `node` dev dependency). */
export const NODE_24 = join(ROOT, 'node_modules', 'node', 'bin', 'node');

const versions = new Map();
/** `v20.20.2` for a node binary (asked once). */
export function nodeVersion(bin) {
  let v = versions.get(bin);
  if (v === undefined) {
    v = bin === process.execPath ? process.version : spawnSync(bin, ['--version'], { encoding: 'utf8' }).stdout?.trim() || 'unknown';
    versions.set(bin, v);
  }
  return v;
}

/** The first Node.js this release runs on (src/main.ts, NODE_MIN): node:sqlite without a flag. */
const NODE_MIN = [22, 13];

/**
 * The Node.js the servers run on unless a scenario names another: the oldest supported one at
 * hand. That is the one running npm (or this script) when it is new enough; else the pinned
 * Node 24, since npm may run on a system Node older than this release accepts (inside npm
 * scripts `node` is the pinned one, while npm_node_execpath is npm's own).
 */
export const NODE_OLDEST = (() => {
  const candidate = process.env.npm_node_execpath ?? process.execPath;
  const [major = 0, minor = 0] = nodeVersion(candidate).replace(/^v/, '').split('.').map(Number);
  const supported = major > NODE_MIN[0] || (major === NODE_MIN[0] && minor >= NODE_MIN[1]);
  return supported || !existsSync(NODE_24) ? candidate : NODE_24;
})();

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** An HS256 token for `sub`, valid for a day (the same signing as test/helpers.mjs). */
export function token(sub) {
  const b64 = (o) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const input = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64({ sub, exp: Math.floor(Date.now() / 1000) + 86400 })}`;
  return `${input}.${createHmac('sha256', SECRET).update(input).digest('base64url')}`;
}

/** A port nobody listens on right now (chosen up front so start-up can be timed by polling). */
export function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

const agent = new Agent({ keepAlive: true, maxSockets: 32 });

/** One JSON request for seeding and checks (node:http is fine off the hot path); `headers`: more of them. */
export function api(port, method, path, { auth, body, keepAlive = true, headers: more = {} } = {}) {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const headers = { ...more };
    if (auth !== undefined) headers.authorization = `Bearer ${auth}`;
    if (payload !== undefined) {
      headers['content-type'] = 'application/json';
      headers['content-length'] = Buffer.byteLength(payload);
    }
    const req = request({ host: '127.0.0.1', port, method, path, headers, agent: keepAlive ? agent : false }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let json;
        try {
          json = JSON.parse(text);
        } catch {
          json = undefined;
        }
        resolve({ status: res.statusCode, headers: res.headers, body: json, text });
      });
    });
    req.on('error', reject);
    req.end(payload);
  });
}

/**
 * Spawns `node [nodeArgs] script [args]` (`node`: that binary, else this process's) with PORT set to a free port and its stdout/stderr
 * going to `logFile` (a file, not a pipe: draining a pipe would cost the load generator's CPU,
 * and a file never blocks the server). Resolves once GET /healthz answers 200, with
 * `startMs` = spawn to that first 200, polled every 2 ms.
 */
export async function startProcess({ script, args = [], env = {}, node = process.execPath, nodeArgs = [], cwd, logFile, timeoutMs = 180_000 }) {
  const port = await freePort();
  const fd = openSync(logFile, 'a');
  const started = performance.now();
  const child = spawn(node, [...nodeArgs, script, ...args], {
    cwd,
    env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env, PORT: String(port) },
    stdio: ['ignore', fd, fd],
  });
  closeSync(fd);
  let exited;
  const exit = new Promise((resolve) => child.on('exit', (code, signal) => resolve((exited = { code, signal }))));
  for (;;) {
    if (exited !== undefined) throw new Error(`${script} exited (${exited.code ?? exited.signal}) before /healthz answered; see ${logFile}`);
    const status = await api(port, 'GET', '/healthz', { keepAlive: false }).then((r) => r.status, () => 0);
    if (status === 200) break;
    if (performance.now() - started > timeoutMs) {
      child.kill('SIGKILL');
      throw new Error(`${script} did not answer /healthz within ${timeoutMs} ms; see ${logFile}`);
    }
    await sleep(2);
  }
  const startMs = performance.now() - started;
  return {
    pid: child.pid,
    port,
    startMs,
    logFile,
    /** SIGTERM and wait (the server drains, flushes the store and exits 0); SIGKILL after 60 s. */
    async stop() {
      if (exited !== undefined) return exited;
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), 60_000);
      const r = await exit;
      clearTimeout(t);
      return r;
    },
  };
}

/**
 * A process that prints `listening <port>` once it listens (the peers of ../shared/peers):
 * `node script` with PORT=0 and HOST, its stderr to `stderr` (inherited by default). Resolves
 * with {port, url, pid, stop}.
 */
export async function startListening({ node, script, cwd, env = {}, stderr = 'inherit' }) {
  const child = spawn(node, [script], { cwd, env: { PATH: process.env.PATH, HOME: process.env.HOME, PORT: '0', HOST: '127.0.0.1', ...env }, stdio: ['ignore', 'pipe', stderr] });
  let out = '';
  child.stdout.setEncoding('utf8');
  const port = await new Promise((resolve, reject) => {
    child.stdout.on('data', (d) => {
      out += d;
      const m = /listening (\d+)/.exec(out);
      if (m !== null) resolve(Number(m[1]));
    });
    child.once('exit', (code) => reject(new Error(`${script} exited (${code}) before it listened`)));
  });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    pid: child.pid,
    async stop() {
      child.kill('SIGTERM');
      await exited;
    },
  };
}

/** Resident and peak resident memory of a process in MiB (Linux). */
export function memoryOf(pid) {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (name) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN);
  return { rssMiB: kb('VmRSS') / 1024, peakMiB: kb('VmHWM') / 1024 };
}

/**
 * User + system CPU seconds a process has used, all threads (Linux, 100 ticks/s); with
 * `mainThread`, only its main thread's (the one that runs JavaScript and the event loop).
 */
export function cpuSecondsOf(pid, { mainThread = false } = {}) {
  try {
    const stat = readFileSync(mainThread ? `/proc/${pid}/task/${pid}/stat` : `/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) / 100; // utime, stime (fields 14 and 15)
  } catch {
    return NaN;
  }
}

/** The JSON log lines of a log file that parse, optionally only those with `msg`. */
export function logLines(file, msg) {
  const out = [];
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    if (!line.startsWith('{')) continue;
    try {
      const v = JSON.parse(line);
      if (msg === undefined || v.msg === msg) out.push(v);
    } catch {
      // a line cut short at the end of the file
    }
  }
  return out;
}

export function median(values) {
  const v = values.filter((x) => !Number.isNaN(x)).sort((a, b) => a - b);
  if (v.length === 0) return NaN;
  const m = v.length >> 1;
  return v.length % 2 === 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}
