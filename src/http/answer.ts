// Writing an answer, whatever it is: one whole body, a body in pieces as the client reads them, an
// event stream handed to the live feed, or (HTTP node:http never made a request of) a raw answer
// on the socket. Each carries the same headers, is logged in one request line and counted, and
// settles its request once the kernel has it; one the client takes nothing of is cut off.
import { STATUS_CODES, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { EVENT_STREAM_TYPE, type Answer, type EventStreamReply, type Reply, type StreamReply } from '../api/route.js';
import { errorBody } from '../api/envelope.js';
import { requestLineMiddle, type Logger } from '../log.js';
import type { Metrics } from '../metrics.js';
import { hasBody, releaseBody, type BodyRules } from './body.js';
import type { Call } from './call.js';
import type { ConnectionGuard } from './connections.js';
import type { InFlight } from './in-flight.js';
import { closeLingering, lingerAfterAnswer } from './linger.js';

export const JSON_TYPE = 'application/json; charset=utf-8';
/** Answers larger than this are written in slices of it, so the write timeout sees progress. */
const WRITE_SLICE = 64 * 1024;
const NOTHING_LEFT = (): number => 0;

export interface AnswerOptions {
  readonly log: Logger;
  readonly metrics: Metrics | undefined;
  readonly body: BodyRules;
  /** An answer the client takes no byte of for this long is cut off. */
  readonly writeTimeoutMs: number;
  readonly connections: ConnectionGuard | undefined;
  readonly inFlight: InFlight | undefined;
  readonly wholeLists: InFlight | undefined;
}

export class AnswerWriter {
  /** Sockets answered outside HTTP's flow (raw), closing lingering: what they still read is dropped. */
  private readonly lingering = new WeakSet<Socket>();

  constructor(private readonly options: AnswerOptions) {}

  /** Whether a socket was answered raw and is closing: the parser's complaints about what follows are no news. */
  answeredRaw(socket: Socket): boolean {
    return this.lingering.has(socket);
  }

  /** Writes a request's answer: its head with every answer's headers, then its body whole, in pieces, or as events. */
  answer(call: Call, a: Answer): void {
    const { res } = call;
    if (call.heldBytes > 0) releaseBody(this.options.body.budget, call);
    if (res.headersSent || res.destroyed) {
      // (a connection gone before its answer: what the answer holds is given back)
      if ('eventStream' in a) a.eventStream.cancel();
      else if ('stream' in a) this.cancel(call, a);
      this.logRequest(call, a.status);
      this.settle(call);
      return;
    }
    if ('eventStream' in a) this.events(call, a);
    else if ('stream' in a) this.pieces(call, a);
    else this.whole(call, a);
  }

  private whole(call: Call, r: Reply): void {
    const { res } = call;
    const body = r.body;
    const length = typeof body === 'string' ? Buffer.byteLength(body) : body.length;
    const headers = this.headers(call, r.contentType ?? JSON_TYPE);
    headers.push('content-length', String(length));
    if (r.etag !== undefined) headers.push('etag', r.etag);
    if (r.headers !== undefined) for (let i = 0; i < r.headers.length; i++) headers.push(r.headers[i] as string);
    // answered before its body came (401, 404, 413...): the connection closes, lingering, rather
    // than read a body of any size to keep it; the client still sending is not reset
    if (!call.req.complete && hasBody(call.req)) {
      if (!headers.includes('connection')) headers.push('connection', 'close');
      lingerAfterAnswer(call.req);
    }
    res.writeHead(r.status, headers);
    let notHandedOver = NOTHING_LEFT;
    if (length <= WRITE_SLICE) res.end(body);
    else notHandedOver = writeInSlices(res, typeof body === 'string' ? Buffer.from(body) : body);
    this.logRequest(call, r.status);
    // the kernel took the whole answer as it was written (the usual case: nothing to time out)
    if (res.writableFinished || (notHandedOver === NOTHING_LEFT && res.socket?.writableLength === 0)) this.settle(call);
    else this.watchWrite(call, notHandedOver);
  }

  /**
   * Writes a streamed answer piece by piece, waiting for the client to read each (backpressure).
   * Once its head is sent, a failure can only cut the answer short: the connection is destroyed,
   * so the client sees a broken answer, never a complete-looking one.
   */
  private pieces(call: Call, r: StreamReply): void {
    const { res } = call;
    const headers = this.headers(call, r.contentType ?? JSON_TYPE);
    if (r.headers !== undefined) for (const h of r.headers) headers.push(h);
    // nginx passes each event on as it comes instead of buffering the answer
    if (r.contentType === EVENT_STREAM_TYPE) headers.push('x-accel-buffering', 'no');
    res.writeHead(r.status, headers);
    if (r.contentType === EVENT_STREAM_TYPE) res.flushHeaders();
    // every piece the client takes (or that goes out without waiting) restarts the write timeout
    const progress = this.watchWrite(call, () => 0);
    const pieces = r.stream[Symbol.asyncIterator]();
    let gone = false;
    res.once('close', () => {
      gone = true;
    });
    const pump = async (): Promise<void> => {
      try {
        for (;;) {
          const next = await pieces.next();
          if (next.done === true) break;
          if (gone) return;
          if (!res.write(next.value)) await drained(res);
          if (gone) return;
          progress();
        }
        res.end();
      } catch (e) {
        this.options.log.error('answer failed while it was being sent; the connection was cut', { reqId: call.id, route: call.route?.def.path ?? null, err: e });
        res.destroy();
      } finally {
        if (gone) await pieces.return?.();
        this.logRequest(call, r.status);
      }
    };
    void pump();
  }

  /** A streamed answer that will not be sent gives back what it holds (a whole list: its snapshot reader). */
  cancel(call: Call, r: StreamReply): void {
    r.cancel?.().catch((e: unknown) => this.options.log.error('an answer not sent failed to give back what it held', { reqId: call.id, route: call.route?.def.path ?? null, err: e }));
  }

  /**
   * Writes an event stream's head and hands the response to the live feed, which writes to it
   * until it or the client ends it. The request stays in flight all that time, so MAX_CONNECTIONS
   * never closes the connection as idle; the feed bounds what it holds and when it gives up.
   */
  private events(call: Call, r: EventStreamReply): void {
    const { res } = call;
    const headers = this.headers(call, EVENT_STREAM_TYPE);
    // nginx passes each event on as it comes instead of buffering the answer
    headers.push('x-accel-buffering', 'no');
    res.writeHead(r.status, headers);
    this.logRequest(call, r.status);
    if (call.req.method === 'HEAD') {
      r.eventStream.cancel();
      res.end();
      this.settle(call);
      return;
    }
    res.flushHeaders();
    const settle = (): void => this.settle(call);
    res.once('finish', settle);
    res.once('close', settle);
    r.eventStream.attach(res);
  }

  /**
   * Writes a whole error answer on a socket outside node:http's request flow, logs and counts it
   * (`fields`: what the request line says of why), and closes the connection lingering: what the
   * client still sends is read and dropped, so the answer is not lost to a reset (closeLingering).
   */
  raw(socket: Socket, status: number, message: string, id: string, method: string | null, fields: Readonly<Record<string, string>>, headers: readonly (readonly [string, string])[] = []): void {
    const body = errorBody(message);
    socket.on('error', () => socket.destroy());
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\ncontent-type: ${JSON_TYPE}\r\ncache-control: no-store\r\nx-content-type-options: nosniff\r\n` +
        `x-request-id: ${id}\r\n${headers.map(([k, v]) => `${k}: ${v}\r\n`).join('')}content-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`,
    );
    this.lingering.add(socket);
    closeLingering(socket, socket);
    this.options.metrics?.forUnrouted(method ?? 'other', undefined).observe(status, 0);
    this.options.log.request(id, requestLineMiddle(method, 'null'), status, 0, undefined, fields);
  }

  /** The answer is with the kernel, or the connection is gone: the connection may be idle again. */
  settle(call: Call): void {
    if (call.settled) return;
    call.settled = true;
    if (call.conn !== undefined) this.options.connections?.idle(call.conn);
    if (call.owner !== undefined) this.options.inFlight?.give(call.owner);
    if (call.listOwner !== undefined) this.options.wholeLists?.give(call.listOwner);
  }

  /**
   * An answer the kernel has not taken whole: each slice it takes restarts the write timeout;
   * when none is taken for WRITE_TIMEOUT the connection is destroyed, and with it the unsent rest.
   */
  private watchWrite(call: Call, notHandedOver: () => number): () => void {
    const { res } = call;
    const timer = setTimeout(() => {
      this.options.log.warn('the client took no byte of its answer for WRITE_TIMEOUT; connection closed', {
        reqId: call.id,
        route: call.route?.def.path ?? null,
        unsentBytes: notHandedOver() + (res.socket?.writableLength ?? 0),
        timeoutMs: this.options.writeTimeoutMs,
      });
      if (this.options.metrics !== undefined) this.options.metrics.writeTimeouts++;
      res.destroy();
    }, this.options.writeTimeoutMs);
    const progress = (): void => {
      timer.refresh();
    };
    const done = (): void => {
      clearTimeout(timer);
      res.off('drain', progress);
      res.off('finish', done);
      res.off('close', done);
      this.settle(call);
    };
    res.on('drain', progress);
    res.on('finish', done);
    res.on('close', done);
    return progress;
  }

  /** The headers every answer carries, and CORS's when it applies. */
  private headers(call: Call, contentType: string): string[] {
    const headers = ['content-type', contentType, 'cache-control', 'no-store', 'x-content-type-options', 'nosniff', 'x-request-id', call.id];
    if (call.corsHeaders !== undefined) for (let i = 0; i < call.corsHeaders.length; i++) headers.push(call.corsHeaders[i] as string);
    if (call.conn?.overflow === true) headers.push('connection', 'close');
    return headers;
  }

  /**
   * One line per request (Logger.request): the request id matches SANE_REQUEST_ID or is ours,
   * so it needs no escaping.
   */
  private logRequest(call: Call, status: number): void {
    const seconds = (performance.now() - call.started) / 1000;
    if (call.route !== undefined) call.route.stats?.observe(status, seconds);
    else this.options.metrics?.forUnrouted(call.req.method ?? '', call.pattern).observe(status, seconds);
    const log = this.options.log;
    if (!log.enabled('info')) return;
    const method = call.req.method ?? '';
    const r = call.route;
    const middle =
      r !== undefined && method === r.def.method
        ? r.logMiddle
        : requestLineMiddle(method, r?.routeJson ?? (call.pattern !== undefined ? JSON.stringify(call.pattern) : 'null'));
    log.request(call.id, middle, status, seconds, call.user);
  }
}

/** Resolves when the response can take more (drain) or will take nothing more (close). */
function drained(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}

/**
 * Writes `buf` a slice at a time, each after the previous one drained, then ends the answer.
 * Returns how many bytes are not yet handed to the socket.
 */
function writeInSlices(res: ServerResponse, buf: Buffer): () => number {
  let at = 0;
  const writeWhileRoom = (): void => {
    while (at < buf.length) {
      const end = Math.min(at + WRITE_SLICE, buf.length);
      const ok = res.write(buf.subarray(at, end));
      at = end;
      if (!ok) return;
    }
    res.off('drain', writeWhileRoom);
    res.end();
  };
  res.on('drain', writeWhileRoom);
  writeWhileRoom();
  return () => buf.length - at;
}
