// Headless Chromium for the tests, driven over the DevTools protocol on a pipe
// (--remote-debugging-pipe: JSON messages ended by NUL, written to the browser's fd 3 and read
// from its fd 4), so no WebSocket client and no npm package is needed. Debian's `chromium`
// package provides the browser; where it is missing, the tests that need it skip loudly
// unless REQUIRE_CHROMIUM=1.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findExecutable } from './helpers.mjs';

/** The Chromium binary (CHROMIUM, or chromium / chromium-browser / google-chrome on PATH), or undefined. */
export function findChromium() {
  const candidates = process.env.CHROMIUM ? [process.env.CHROMIUM] : ['chromium', 'chromium-browser', 'google-chrome'];
  for (const name of candidates) {
    const found = findExecutable(name);
    if (found !== undefined) return found;
  }
  return undefined;
}

/**
 * Whether a browser test can run: true, or false after printing one loud line (the test
 * then skips). With REQUIRE_CHROMIUM=1 a missing browser is an error instead.
 */
export function chromiumOrSkip(t, untried = 'the /docs page was not tried in a browser') {
  if (findChromium() !== undefined) return true;
  if (process.env.REQUIRE_CHROMIUM === '1') throw new Error('REQUIRE_CHROMIUM=1 but no Chromium was found (apt-get install chromium)');
  console.log(`# SKIPPED: no Chromium on this machine (apt-get install chromium); ${untried}`);
  t.skip('no Chromium');
  return false;
}

/** How long a wait for an event may last before it fails (a browser that went silent, not a slow one). */
const WAIT_BOUND_MS = 180_000;

/** A headless browser with one page; `close()` ends it and removes its profile. */
export class Browser {
  static async launch() {
    const bin = findChromium();
    if (bin === undefined) throw new Error('no Chromium');
    const profile = mkdtempSync(join(tmpdir(), 'csa-chromium-'));
    const args = [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--disable-dev-shm-usage',
      `--user-data-dir=${profile}`,
      '--remote-debugging-pipe',
      'about:blank',
    ];
    const child = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'] });
    const b = new Browser(child, profile);
    const { targetId } = await b.send('Target.createTarget', { url: 'about:blank' });
    const { sessionId } = await b.send('Target.attachToTarget', { targetId, flatten: true });
    b.sessionId = sessionId;
    return b;
  }

  constructor(child, profile) {
    this.child = child;
    this.profile = profile;
    this.nextId = 1;
    this.pending = new Map();
    this.listeners = [];
    this.stderr = '';
    this.exited = new Promise((resolve) => child.on('exit', resolve));
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (d) => {
      if (this.stderr.length < 20_000) this.stderr += d;
    });
    let buf = '';
    child.stdio[4].setEncoding('utf8');
    child.stdio[4].on('data', (d) => {
      buf += d;
      for (let i = buf.indexOf('\0'); i !== -1; i = buf.indexOf('\0')) {
        this.receive(JSON.parse(buf.slice(0, i)));
        buf = buf.slice(i + 1);
      }
    });
    this.waiting = new Set();
    child.on('exit', () => {
      for (const { reject } of this.pending.values()) reject(this.gone());
      for (const reject of this.waiting) reject(this.gone());
      this.pending.clear();
      this.waiting.clear();
    });
  }

  receive(msg) {
    if (msg.id !== undefined) {
      const p = this.pending.get(msg.id);
      this.pending.delete(msg.id);
      if (p === undefined) return;
      if (msg.error) p.reject(new Error(`${p.method}: ${msg.error.message}`));
      else p.resolve(msg.result);
      return;
    }
    for (const l of this.listeners) l(msg.method, msg.params ?? {});
  }

  /** A DevTools command; on the page unless `browserLevel`. */
  send(method, params = {}, browserLevel = false) {
    const id = this.nextId++;
    const msg = { id, method, params };
    if (!browserLevel && this.sessionId !== undefined) msg.sessionId = this.sessionId;
    return new Promise((resolve, reject) => {
      if (this.gone()) return reject(this.gone());
      this.pending.set(id, { resolve, reject, method });
      this.child.stdio[3].write(JSON.stringify(msg) + '\0');
    });
  }

  /** Calls `fn(method, params)` for every event. */
  on(fn) {
    this.listeners.push(fn);
  }

  /** Resolves the first event named `name` for which `test(params)` holds. */
  waitFor(name, test = () => true) {
    return new Promise((resolve, reject) => {
      if (this.gone()) return reject(this.gone());
      // not a timing assertion: a bound that turns a browser that went silent into a failure
      // naming what it waited for, where the test would otherwise hang until CI's limit
      const silent = setTimeout(() => fail(new Error(`Chromium sent no ${name} in ${WAIT_BOUND_MS / 1000} s`)), WAIT_BOUND_MS);
      const fail = (e) => {
        clearTimeout(silent);
        this.listeners.splice(this.listeners.indexOf(l), 1);
        this.waiting.delete(fail);
        reject(e);
      };
      const l = (method, params) => {
        if (method === name && test(params)) {
          clearTimeout(silent);
          this.listeners.splice(this.listeners.indexOf(l), 1);
          this.waiting.delete(fail);
          resolve(params);
        }
      };
      this.listeners.push(l);
      this.waiting.add(fail);
    });
  }

  /** The error of a browser that exited (every wait on it fails with it instead of hanging), else undefined. */
  gone() {
    return this.child.exitCode !== null || this.child.signalCode !== null ? new Error(`Chromium exited (${this.child.signalCode ?? this.child.exitCode}): ${this.stderr.slice(-2000)}`) : undefined;
  }

  /** Evaluates an expression in the page (awaiting a promise it gives) and returns its value. */
  async evaluate(expression) {
    const r = await this.send('Runtime.evaluate', { expression, awaitPromise: true, returnByValue: true });
    if (r.exceptionDetails) throw new Error(`in the page: ${r.exceptionDetails.exception?.description ?? r.exceptionDetails.text}`);
    return r.result.value;
  }

  async close() {
    try {
      await Promise.race([this.send('Browser.close', {}, true), this.exited]);
    } catch {
      // already gone
    }
    const killer = setTimeout(() => this.child.kill('SIGKILL'), 10_000);
    await this.exited;
    clearTimeout(killer);
    rmSync(this.profile, { recursive: true, force: true });
  }
}
