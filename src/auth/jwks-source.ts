// AUTH_JWKS, kept current: the key set is read at start (the start fails when it cannot be),
// read again every AUTH_JWKS_REFRESH and, at most once a minute, for a token naming a kid the
// set lacks. A failing read keeps the last good set. Every read is bounded in time and size, and
// no failure of it reaches further than a log line (once a minute).
import { open } from 'node:fs/promises';
import { get as httpGet, type IncomingMessage } from 'node:http';
import { get as httpsGet } from 'node:https';
import type { JwksLocation } from '../config.js';
import { Sparing, type Logger } from '../log.js';
import { KeySet, NotAKeySet, parseKeySet } from './jwks.js';

/** A read of the set gives up after this long... */
const READ_TIMEOUT_MS = 5_000;
/** ...or past this many bytes (a provider's set is a few kilobytes). */
const MAX_BYTES = 1024 * 1024;
/** Reads for an unknown kid happen at most this often. */
export const UNKNOWN_KID_EVERY_MS = 60_000;

/** The key set could not be had at start: one line saying why. */
export class KeySetUnavailable extends Error {
  override readonly name = 'KeySetUnavailable';
}

/** The location as a log line may show it: a URL without credentials or query, or the file's path. */
function shown(location: JwksLocation): string {
  if (location.kind === 'file') return location.path;
  const u = location.url;
  return `${u.protocol}//${u.host}${u.pathname}`;
}

export class JwksSource {
  private inFlight: Promise<void> | undefined;
  private lastKidReadMs = -Infinity;
  private timer: NodeJS.Timeout | undefined;
  private readonly failures = new Sparing(60_000);
  private failing = false;

  private constructor(
    private readonly location: JwksLocation,
    private set: KeySet,
    private readonly log: Logger,
  ) {}

  /** Reads the set for the start; throws KeySetUnavailable. `refreshMs` starts the timed reads. */
  static async open(location: JwksLocation, refreshMs: number, log: Logger): Promise<JwksSource> {
    let set: KeySet;
    try {
      set = parseKeySet(await readText(location));
    } catch (e) {
      const what = location.kind === 'url' ? 'cannot fetch' : 'cannot read';
      throw new KeySetUnavailable(`AUTH_JWKS: ${e instanceof NotAKeySet ? `${shown(location)} is not a JSON Web Key Set: ${e.message}` : `${what} ${shown(location)} (${reasonOf(e)})`}`);
    }
    if (set.keys.length === 0) {
      throw new KeySetUnavailable(`AUTH_JWKS: ${shown(location)} holds no key this server can use (RSA of 2048 bits or more, EC P-256 or P-384, Ed25519; use "sig")${skippedText(set)}`);
    }
    const source = new JwksSource(location, set, log);
    source.describe('signing keys of AUTH_JWKS loaded');
    source.timer = setInterval(() => void source.read(), refreshMs).unref();
    return source;
  }

  /** The set in use: the last good one. */
  get current(): KeySet {
    return this.set;
  }

  /**
   * For a token naming a kid the set does not hold: reads the set again and resolves once that
   * read is over (a read under way is joined). Undefined when one was started for this within
   * the last minute: the token is judged by the set in use.
   */
  readForUnknownKid(now = performance.now()): Promise<void> | undefined {
    if (this.inFlight !== undefined) return this.inFlight;
    if (now - this.lastKidReadMs < UNKNOWN_KID_EVERY_MS) return undefined;
    this.lastKidReadMs = now;
    return this.read();
  }

  close(): void {
    clearInterval(this.timer);
  }

  /** One read of the set; never rejects (a failure is logged and the last good set kept). */
  private read(): Promise<void> {
    if (this.inFlight !== undefined) return this.inFlight;
    const done = readText(this.location)
      .then((text) => {
        const next = parseKeySet(text, this.set);
        if (next.keys.length === 0) throw new NotAKeySet('it holds no key this server can use');
        const changed = next.keys.length !== this.set.keys.length || next.keys.some((k) => !this.set.holds(k));
        this.set = next;
        if (this.failing) this.log.info('signing keys of AUTH_JWKS read again after failures', { source: shown(this.location) });
        this.failing = false;
        if (changed) this.describe('signing keys of AUTH_JWKS changed');
      })
      .catch((e: unknown) => {
        this.failing = true;
        if (this.failures.due()) {
          this.log.warn('reading the signing keys of AUTH_JWKS failed; the last good set stays in use (logged once a minute)', {
            source: shown(this.location),
            reason: e instanceof NotAKeySet ? `not a usable key set: ${e.message}` : reasonOf(e),
            failedQuietly: this.failures.since,
          });
        }
      })
      .finally(() => {
        this.inFlight = undefined;
      });
    this.inFlight = done;
    return done;
  }

  private describe(msg: string): void {
    const s = this.set;
    this.log.info(msg, { source: shown(this.location), keys: s.keys.map((k) => k.kid ?? '(no kid)'), ...(s.skipped.length > 0 ? { skipped: s.skipped } : {}) });
  }
}

function skippedText(set: KeySet): string {
  return set.skipped.length === 0 ? '' : `; skipped: ${set.skipped.map((s) => `${s.kid ?? '(no kid)'}: ${s.why}`).join(', ')}`;
}

/** What went wrong, in a few words: an errno code, or the message of our own checks. */
function reasonOf(e: unknown): string {
  const err = e as NodeJS.ErrnoException;
  if (typeof err?.code === 'string') return err.code;
  return e instanceof Error ? e.message : String(e);
}

/** The set's text from its file or URL, within the time and size bounds. */
async function readText(location: JwksLocation): Promise<string> {
  if (location.kind === 'url') return fetchText(location.url);
  const file = await open(location.path, 'r');
  try {
    const buf = Buffer.alloc(MAX_BYTES + 1);
    let n = 0;
    for (;;) {
      const { bytesRead } = await file.read(buf, n, buf.length - n, null);
      if (bytesRead === 0) break;
      n += bytesRead;
      if (n > MAX_BYTES) throw new Error(`larger than ${MAX_BYTES} bytes`);
    }
    return buf.subarray(0, n).toString('utf8');
  } finally {
    await file.close();
  }
}

/** GET `url`: a 200 of at most MAX_BYTES within READ_TIMEOUT_MS; redirects are not followed. */
function fetchText(url: URL): Promise<string> {
  return new Promise((resolve, reject) => {
    let settled = false;
    let timer: NodeJS.Timeout | undefined;
    const settle = (e: Error | undefined, text?: string): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (e !== undefined) {
        req.destroy();
        reject(e);
      } else resolve(text as string);
    };
    const get = url.protocol === 'https:' ? httpsGet : httpGet;
    const req = get(url, { agent: false, headers: { accept: 'application/jwk-set+json, application/json' } }, (res: IncomingMessage) => {
      const status = res.statusCode ?? 0;
      if (status !== 200) {
        settle(new Error(status >= 300 && status < 400 ? `answered ${status}, a redirect (give the URL it points to)` : `answered ${status}`));
        return;
      }
      if (Number(res.headers['content-length'] ?? 0) > MAX_BYTES) {
        settle(new Error(`larger than ${MAX_BYTES} bytes`));
        return;
      }
      const chunks: Buffer[] = [];
      let bytes = 0;
      res.on('data', (c: Buffer) => {
        bytes += c.length;
        if (bytes > MAX_BYTES) settle(new Error(`larger than ${MAX_BYTES} bytes`));
        else chunks.push(c);
      });
      res.on('end', () => settle(undefined, Buffer.concat(chunks).toString('utf8')));
      res.on('error', (e) => settle(e));
      res.on('close', () => settle(new Error('the connection closed before the end of the answer')));
    });
    req.on('error', (e) => settle(e));
    timer = setTimeout(() => settle(new Error(`no whole answer within ${READ_TIMEOUT_MS / 1000} s`)), READ_TIMEOUT_MS);
  });
}
