// One HTTP exchange with a provider on node:http / node:https: the POST, its response read
// chunk by chunk with backpressure, a watch on how long the provider makes no progress, and a
// close that the provider sees at once (the socket is destroyed, never handed back to the pool).
import { Agent as HttpAgent, request as httpRequest, type ClientRequest, type IncomingMessage } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import type { Readable } from 'node:stream';
import { createBrotliDecompress, createGunzip, createInflate } from 'node:zlib';
import { StreamDecodeError } from './stream-decoder.js';

// Keep-alive pools shared by every call: a thousand replies to one provider reuse their
// connections. Free sockets close after 4 s, before a typical server's 5 s keep-alive ends,
// so a request rarely meets a socket the server is closing (and a reset then is retried).
const POOL = { keepAlive: true, scheduling: 'lifo', timeout: 4000, maxFreeSockets: 1024 } as const;
const httpAgent = new HttpAgent(POOL);
const httpsAgent = new HttpsAgent(POOL);

/**
 * Past this many unread chunks, or bytes, the response is paused until the reader catches up:
 * a fast provider's data waits in the kernel's buffers, not here (counted in bytes: chunks of a
 * decompressed or coalesced body may be large).
 */
const HIGH_WATER_CHUNKS = 64;
const HIGH_WATER_BYTES = 64 * 1024;

/** The provider made no progress for the idle time: it sent nothing, or only bytes that were none (`sentBytes`). */
export class IdleTimeout extends Error {
  override readonly name = 'IdleTimeout';
  constructor(readonly sentBytes: boolean) {
    super(sentBytes ? 'the provider sent no progress' : 'the provider sent nothing');
  }
}

/** The exchange was closed by its caller. */
export class ExchangeClosed extends Error {
  override readonly name = 'ExchangeClosed';
}

/** The response ended without its last chunk: the connection was cut. */
export class ConnectionCut extends Error {
  override readonly name = 'ConnectionCut';
  readonly code = 'ECONNRESET';
}

/** A POST to `url` and its response, read with `read()` until it gives null. */
export class Exchange {
  private readonly req: ClientRequest;
  private res: IncomingMessage | undefined;
  /** The body as sent, or decompressed (a gzip- or br-encoded answer: some proxies compress what they pass on). */
  private body: Readable | undefined;
  private readonly timer: NodeJS.Timeout;
  /** The reader holds the data (a caller busy with what it got): silence then is not the provider's. */
  private suspended = false;
  private failure: Error | undefined;
  private readonly chunks: Buffer[] = [];
  /** The bytes of `chunks`. */
  private queuedBytes = 0;
  private ended = false;
  private discarding = false;
  /** Bytes received since the last progress (keep-alives, an unfinished line): they do not hold the idle time off. */
  private quietBytes = 0;
  private wake: (() => void) | undefined;

  constructor(url: URL, headers: Record<string, string>, body: Buffer, idleTimeoutMs: number) {
    const https = url.protocol === 'https:';
    // credentials in the URL (https://user:pass@host) go as Basic authentication: node:http does that
    this.req = (https ? httpsRequest : httpRequest)(url, { method: 'POST', agent: https ? httpsAgent : httpAgent, headers });
    this.req.on('response', (res) => this.onResponse(res));
    this.req.on('error', (e) => this.fail(e));
    this.timer = setTimeout(() => this.onIdle(), idleTimeoutMs);
    this.req.end(body);
  }

  /** The response's head: resolves when it comes, rejects with what went wrong before it. */
  async response(): Promise<IncomingMessage> {
    for (;;) {
      if (this.failure !== undefined) throw this.failure;
      if (this.res !== undefined) return this.res;
      await this.next();
    }
  }

  /** Whether a chunk is read and waiting: the next read() then takes it without waiting for the network. */
  get hasQueued(): boolean {
    return this.chunks.length > 0;
  }

  /** The body's next chunk, or null at its end; throws when the exchange failed. */
  async read(): Promise<Buffer | null> {
    for (;;) {
      const chunk = this.chunks.shift();
      if (chunk !== undefined) {
        this.queuedBytes -= chunk.length;
        if (this.chunks.length === 0 && this.body?.isPaused() === true) this.body.resume();
        return chunk;
      }
      if (this.failure !== undefined) throw this.failure;
      if (this.ended) return null;
      await this.next();
    }
  }

  /** The body up to `limit` bytes (an error body: more is not worth holding). */
  async readAll(limit: number): Promise<Buffer> {
    const parts: Buffer[] = [];
    let size = 0;
    for (;;) {
      const chunk = await this.read();
      if (chunk === null) break;
      parts.push(chunk);
      size += chunk.length;
      if (size >= limit) {
        this.close();
        break;
      }
    }
    return Buffer.concat(parts).subarray(0, limit);
  }

  /**
   * The provider made progress (the reader found text, reasoning, a tool call or usage in what
   * was read): the idle time starts again. Bytes alone do not restart it: a provider that sends
   * keep-alives or a line that never ends makes no progress.
   */
  progress(): void {
    this.quietBytes = 0;
    this.timer.refresh();
  }

  /** Ends the exchange with `e` (a bound of the call passed): the provider sees its connection closed. */
  cut(e: Error): void {
    if (this.ended) return;
    this.fail(e);
    this.req.destroy();
  }

  /** Silence while the caller holds what it read is not counted (its own slowness is not the provider's). */
  suspend(): void {
    this.suspended = true;
  }

  resume(): void {
    this.suspended = false;
    this.timer.refresh();
  }

  /**
   * The reply is complete: what follows is read and dropped in the background so the socket
   * can go back to the pool; a body not ended within the idle time from now is cut.
   */
  finish(): void {
    if (this.ended) return;
    if (this.failure !== undefined) {
      this.close();
      return;
    }
    this.discarding = true;
    this.suspended = false;
    this.chunks.length = 0;
    this.queuedBytes = 0;
    this.timer.refresh();
    this.body?.resume();
  }

  /** Closes the request at once: the socket is destroyed, and the provider sees it closed. */
  close(): void {
    clearTimeout(this.timer);
    // a response read to its end has handed its socket back to the pool: nothing to close
    if (this.ended) return;
    this.fail(new ExchangeClosed('closed by the caller'));
    this.req.destroy();
  }

  private next(): Promise<void> {
    return new Promise((resolve) => {
      this.wake = resolve;
    });
  }

  private notify(): void {
    const w = this.wake;
    if (w !== undefined) {
      this.wake = undefined;
      w();
    }
  }

  private fail(e: Error): void {
    if (this.failure !== undefined || this.ended) return;
    this.failure = e;
    clearTimeout(this.timer);
    this.notify();
  }

  private onIdle(): void {
    if (this.suspended) {
      this.timer.refresh();
      return;
    }
    if (this.discarding) {
      this.req.destroy();
      return;
    }
    this.fail(new IdleTimeout(this.quietBytes > 0));
    this.req.destroy();
  }

  private onResponse(res: IncomingMessage): void {
    this.res = res;
    this.timer.refresh();
    const encoding = String(res.headers['content-encoding'] ?? '').trim().toLowerCase();
    const decoder = encoding === 'gzip' || encoding === 'x-gzip' ? createGunzip() : encoding === 'br' ? createBrotliDecompress() : encoding === 'deflate' ? createInflate() : undefined;
    const body: Readable = decoder === undefined ? res : res.pipe(decoder);
    this.body = body;
    if (decoder !== undefined) decoder.on('error', () => this.fail(new StreamDecodeError(`a body that cannot be decompressed (${encoding})`)));
    body.on('data', (chunk: Buffer) => {
      // what follows the reply's end gets one idle time from finish(), however often it comes:
      // a body that never ends must not hold its socket for ever
      if (this.discarding) return;
      this.quietBytes += chunk.length;
      this.chunks.push(chunk);
      this.queuedBytes += chunk.length;
      if (this.chunks.length >= HIGH_WATER_CHUNKS || this.queuedBytes >= HIGH_WATER_BYTES) body.pause();
      this.notify();
    });
    body.on('end', () => {
      if (this.failure !== undefined) return;
      this.ended = true;
      clearTimeout(this.timer);
      this.notify();
    });
    res.on('error', (e) => this.fail(e));
    res.on('close', () => {
      // (a decompressed body may still be ending: what was received whole is read to its end)
      if (!this.ended && !res.complete) this.fail(new ConnectionCut('the connection closed before the response ended'));
    });
    this.notify();
  }
}
