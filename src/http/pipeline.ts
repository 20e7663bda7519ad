// One request, start to end: route, authenticate, rate-limit, check scope, validate params,
// query and body, run the handler, answer with one JSON envelope and log one line. Whatever
// is thrown on the way is turned into the error envelope here and nowhere else.
import { randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { isIP, type Socket } from 'node:net';
import { hasScope, NoCredentials, TokenError, type Authenticator, type Principal } from '../auth/authenticate.js';
import type { Answer, RouteDef, StreamReply } from '../api/route.js';
import { parseQuery, validateBody, validateQuery, ValidationError } from '../domain/schema.js';
import { requestLineMiddle, type Logger } from '../log.js';
import type { Metrics, RouteStats } from '../metrics.js';
import { PreconditionFailed, SessionNotFound, StorageUnavailable, StorageWriteFailed } from '../store/store.js';
import { readJsonObject } from './body.js';
import type { Cors } from './cors.js';
import { HttpError } from './errors.js';
import type { RateLimiter } from './rate-limit.js';
import type { Router } from './router.js';

/** A route as the pipeline runs it: its declaration, its parameter names and its counters. */
export interface RuntimeRoute {
  readonly def: RouteDef;
  readonly paramNames: readonly string[];
  readonly stats: RouteStats | undefined;
  /** The pattern as a JSON string, for log lines. */
  readonly routeJson: string;
  /** The request line's middle for the route's own method (see requestLineMiddle). */
  readonly logMiddle: Buffer;
}

export interface PipelineOptions {
  readonly router: Router<RuntimeRoute>;
  readonly auth: Authenticator;
  readonly log: Logger;
  readonly bodyLimit: number;
  readonly cors: Cors | undefined;
  readonly limiter: RateLimiter | undefined;
  readonly trustProxy: boolean;
  readonly metrics: Metrics | undefined;
}

const JSON_TYPE = 'application/json; charset=utf-8';
const SANE_REQUEST_ID = /^[A-Za-z0-9._:@/+=-]{1,128}$/;
const bootId = randomBytes(4).toString('hex');
let requestCounter = 0;
/** An id for a request that brought none we accept: this process's boot id and a counter. */
const nextRequestId = (): string => `${bootId}-${(++requestCounter).toString(36)}`;
const NO_VALUES = {};

/** The path and query of an absolute-form request target (`http://host/path?q`), which RFC 9112 says servers accept. */
function originForm(url: string): string {
  const m = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#]*/.exec(url);
  if (m === null) return url;
  const rest = url.slice(m[0].length);
  return rest === '' || rest.charCodeAt(0) === 63 /* ? */ ? `/${rest}` : rest;
}

/** What the edge needs to answer a failure; the message is the client's and leaks nothing. */
function toHttp(e: unknown): HttpError | undefined {
  if (e instanceof HttpError) return e;
  if (e instanceof ValidationError) return new HttpError(400, e.message);
  if (e instanceof SessionNotFound) return new HttpError(404, e.message);
  if (e instanceof PreconditionFailed) return new HttpError(412, e.message);
  if (e instanceof NoCredentials) return new HttpError(401, 'Unauthorized', [['www-authenticate', 'Bearer']]);
  if (e instanceof TokenError) {
    return new HttpError(401, 'Unauthorized', [['www-authenticate', `Bearer error="invalid_token", error_description="${e.message}"`]]);
  }
  if (e instanceof StorageWriteFailed) return new HttpError(500, e.message);
  if (e instanceof StorageUnavailable) return new HttpError(503, e.message);
  return undefined;
}

/** Per-request state; one object so the hot path allocates little. */
class Exchange {
  readonly started = performance.now();
  readonly id: string;
  route: RuntimeRoute | undefined;
  /** The pattern of a known path answered without a route (405, preflight). */
  pattern: string | undefined;
  user: string | undefined;
  extra: string[] | undefined;

  constructor(
    readonly req: IncomingMessage,
    readonly res: ServerResponse,
  ) {
    const given = req.headers['x-request-id'];
    this.id = typeof given === 'string' && SANE_REQUEST_ID.test(given) ? given : nextRequestId();
  }
}

export class Pipeline {
  constructor(private readonly o: PipelineOptions) {}

  /** The node:http request listener. */
  readonly handle = (req: IncomingMessage, res: ServerResponse): void => {
    const x = new Exchange(req, res);
    try {
      this.route(x);
    } catch (e) {
      this.fail(x, e);
    }
  };

  private route(x: Exchange): void {
    const { req } = x;
    const method = req.method ?? 'GET';
    let url = req.url ?? '/';
    if (url.charCodeAt(0) !== 47 /* / */) url = originForm(url);
    const qmark = url.indexOf('?');
    const path = qmark === -1 ? url : url.slice(0, qmark);
    const { cors } = this.o;
    const origin = cors === undefined ? undefined : req.headers.origin;
    if (cors !== undefined && origin !== undefined) x.extra = cors.headers(origin);

    const m = this.o.router.match(method, path);
    if (m.kind === 'none') throw new HttpError(404, 'Not found');
    if (m.kind === 'method') {
      x.pattern = m.pattern;
      if (method === 'OPTIONS' && cors !== undefined) {
        x.extra = cors.preflight(origin, m.allow);
        this.send(x, 204, '', undefined, ['allow', m.allow.join(', ')]);
        return;
      }
      throw new HttpError(405, 'Method not allowed', [['allow', m.allow.join(', ')]]);
    }
    const r = m.value;
    x.route = r;
    const def = r.def;

    let principal: Principal | undefined;
    if (def.auth) {
      try {
        principal = this.o.auth.authenticate(req.headers.authorization, req.socket);
      } catch (e) {
        this.limit(this.addressOf(req));
        throw e;
      }
      x.user = principal.user;
      this.limit(`user:${principal.user}`);
      if (def.scope !== undefined && !hasScope(principal, def.scope)) throw new HttpError(403, 'Forbidden');
    } else if (def.unlimited !== true) {
      this.limit(this.addressOf(req));
    }

    const params: Record<string, string> = {};
    const names = r.paramNames;
    for (let i = 0; i < names.length; i++) {
      const name = names[i] as string;
      let v = m.params[i] as string;
      if (v.includes('%')) {
        try {
          v = decodeURIComponent(v);
        } catch {
          throw new HttpError(400, 'Invalid percent-encoding in the path');
        }
      }
      const blank = def.params?.[name]?.blankMessage;
      if (blank !== undefined && v.trim() === '') throw new HttpError(400, blank);
      params[name] = v;
    }
    const query = def.query === undefined ? NO_VALUES : validateQuery(def.query, parseQuery(qmark === -1 ? '' : url.slice(qmark + 1)));

    if (def.body !== undefined) {
      const schema = def.body;
      readJsonObject(req, this.o.bodyLimit).then(
        (raw) => {
          let body;
          try {
            body = validateBody(schema, raw);
          } catch (e) {
            this.fail(x, e);
            return;
          }
          this.run(x, def, principal, params, query, body);
        },
        (e: unknown) => this.fail(x, e),
      );
      return;
    }
    this.run(x, def, principal, params, query, NO_VALUES);
  }

  private run(x: Exchange, def: RouteDef, principal: Principal | undefined, params: Record<string, string>, query: object, body: object): void {
    let out: Answer | Promise<Answer>;
    try {
      out = def.handle({ req: x.req, principal, params, query, body });
    } catch (e) {
      this.fail(x, e);
      return;
    }
    if (out instanceof Promise) out.then((reply) => this.reply(x, reply), (e: unknown) => this.fail(x, e));
    else this.reply(x, out);
  }

  /**
   * Answers HTTP that node:http's parser refused (it never becomes a request): in the envelope,
   * with a request id, logged and counted like any other answer.
   */
  readonly rejectRaw = (err: NodeJS.ErrnoException, socket: Socket): void => {
    if (!socket.writable || err.code === 'ECONNRESET') {
      socket.destroy();
      return;
    }
    const [status, text, message] =
      err.code === 'HPE_HEADER_OVERFLOW'
        ? [431, 'Request Header Fields Too Large', 'Request headers too large']
        : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
          ? [408, 'Request Timeout', 'Request timeout']
          : [400, 'Bad Request', 'Bad request'];
    const id = nextRequestId();
    const body = JSON.stringify({ success: false, message });
    socket.end(
      `HTTP/1.1 ${status} ${text}\r\ncontent-type: ${JSON_TYPE}\r\ncache-control: no-store\r\nx-content-type-options: nosniff\r\n` +
        `x-request-id: ${id}\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`,
    );
    this.o.metrics?.forUnrouted('other', undefined).observe(status, 0);
    if (this.o.log.enabled('info')) {
      this.o.log.raw(`{"time":"${new Date().toISOString()}","level":"info","msg":"request","reqId":"${id}","method":null,"route":null,"status":${status},"ms":0,"user":null,"parseError":${JSON.stringify(err.code ?? 'unknown')}}\n`);
    }
  };

  private addressOf(req: IncomingMessage): string {
    if (this.o.trustProxy) {
      const fwd = req.headers['x-forwarded-for'];
      if (typeof fwd === 'string' && fwd !== '') {
        // the entry our proxy appended; anything but an IP address is not trusted as one
        const last = fwd.slice(fwd.lastIndexOf(',') + 1).trim();
        if (isIP(last) !== 0) return `addr:${last}`;
      }
    }
    return `addr:${req.socket.remoteAddress ?? 'unknown'}`;
  }

  /** 429 when the bucket for `key` is empty. */
  private limit(key: string): void {
    const limiter = this.o.limiter;
    if (limiter === undefined) return;
    const wait = limiter.take(key);
    if (wait > 0) {
      if (this.o.metrics !== undefined) this.o.metrics.rateLimited++;
      throw new HttpError(429, 'Too many requests', [['retry-after', String(wait)]]);
    }
  }

  private reply(x: Exchange, r: Answer): void {
    if ('stream' in r) this.stream(x, r);
    else this.send(x, r.status, r.body, r.contentType, r.etag === undefined ? r.headers : ['etag', r.etag, ...(r.headers ?? [])]);
  }

  /**
   * Writes a streamed answer piece by piece, waiting for the client to read each (backpressure).
   * Once its head is sent, a failure can only cut the answer short: the connection is destroyed,
   * so the client sees a broken answer, never a complete-looking one.
   */
  private stream(x: Exchange, r: StreamReply): void {
    const { res } = x;
    if (res.headersSent || res.destroyed) {
      this.logRequest(x, r.status);
      return;
    }
    const headers = this.headers(x, JSON_TYPE);
    res.writeHead(r.status, headers);
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
        }
        res.end();
      } catch (e) {
        this.o.log.error('answer failed while it was being sent; the connection was cut', { reqId: x.id, route: x.route?.def.path ?? null, err: e });
        res.destroy();
      } finally {
        if (gone) await pieces.return?.();
        this.logRequest(x, r.status);
      }
    };
    void pump();
  }

  private fail(x: Exchange, e: unknown): void {
    const h = toHttp(e);
    if (h === undefined || h.status >= 500) {
      this.o.log.error('request failed', { reqId: x.id, route: x.route?.def.path ?? null, err: e });
    }
    const status = h?.status ?? 500;
    const message = h?.message ?? 'Internal server error';
    const more: string[] = [];
    if (h !== undefined) for (const [k, v] of h.headers) more.push(k, v);
    if (h?.close === true) more.push('connection', 'close');
    this.send(x, status, JSON.stringify({ success: false, message }), undefined, more);
  }

  private send(x: Exchange, status: number, body: string | Buffer, contentType: string | undefined, more: readonly string[] | undefined): void {
    const { res } = x;
    if (res.headersSent || res.destroyed) {
      this.logRequest(x, status);
      return;
    }
    const headers = this.headers(x, contentType ?? JSON_TYPE);
    headers.push('content-length', String(typeof body === 'string' ? Buffer.byteLength(body) : body.length));
    if (more !== undefined) for (let i = 0; i < more.length; i++) headers.push(more[i] as string);
    res.writeHead(status, headers);
    res.end(body);
    this.logRequest(x, status);
  }

  /** The headers every answer carries, and CORS's when it applies. */
  private headers(x: Exchange, contentType: string): string[] {
    const headers = ['content-type', contentType, 'cache-control', 'no-store', 'x-content-type-options', 'nosniff', 'x-request-id', x.id];
    if (x.extra !== undefined) for (let i = 0; i < x.extra.length; i++) headers.push(x.extra[i] as string);
    return headers;
  }

  /**
   * One line per request (Logger.request): the request id matches SANE_REQUEST_ID or is ours,
   * so it needs no escaping.
   */
  private logRequest(x: Exchange, status: number): void {
    const seconds = (performance.now() - x.started) / 1000;
    if (x.route !== undefined) x.route.stats?.observe(status, seconds);
    else this.o.metrics?.forUnrouted(x.req.method ?? '', x.pattern).observe(status, seconds);
    const log = this.o.log;
    if (!log.enabled('info')) return;
    const method = x.req.method ?? '';
    const r = x.route;
    const middle =
      r !== undefined && method === r.def.method
        ? r.logMiddle
        : requestLineMiddle(method, r?.routeJson ?? (x.pattern !== undefined ? JSON.stringify(x.pattern) : 'null'));
    log.request(x.id, middle, status, seconds, x.user);
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
