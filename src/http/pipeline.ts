// One request, start to end: route, authenticate, rate-limit, check scope, validate params,
// query and body, run the handler, and hand its answer to the one answer writer (./answer.ts),
// which logs one line. Whatever is thrown on the way is turned into the error envelope here and
// nowhere else; HTTP that never becomes a request (parse errors, CONNECT, a connection past the
// cap) is answered here too.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { isIP, type Socket } from 'node:net';
import { hasScope, TokenError, type Authenticator, type Principal } from '../auth/authenticate.js';
import type { Answer, RouteDef } from '../api/route.js';
import type { TicketCodec } from '../auth/tickets.js';
import { parseQuery, validateBody, validateQuery } from '../domain/schema.js';
import { Sparing, type Logger } from '../log.js';
import type { Metrics } from '../metrics.js';
import { AnswerWriter } from './answer.js';
import { readJsonObject, type BodyRules } from './body.js';
import { Call, nextRequestId, requestIdOf, type RuntimeRoute } from './call.js';
import type { ConnectionGuard } from './connections.js';
import { OverShare, type InFlight } from './in-flight.js';
import type { Cors } from './cors.js';
import { errorBody } from '../api/envelope.js';
import type { MemoryGuard } from './memory-guard.js';
import { chosen, HttpError, httpErrorOf, storeAway } from '../api/errors.js';
import { parseErrorMessage } from './parse-error.js';
import { openaiError } from '../api/openai/errors.js';
import type { RateLimiter } from './rate-limit.js';
import type { Router } from './router.js';

export type { RuntimeRoute } from './call.js';

export interface PipelineOptions {
  readonly router: Router<RuntimeRoute>;
  readonly auth: Authenticator;
  readonly log: Logger;
  readonly body: BodyRules;
  /** An answer the client takes no byte of for this long is cut off. */
  readonly writeTimeoutMs: number;
  readonly connections: ConnectionGuard | undefined;
  /** Each user's (or address's) requests in flight, bounded by MAX_REQUESTS_PER_USER; undefined: unbounded. */
  readonly inFlight: InFlight | undefined;
  /** Each user's whole lists being sent (WHOLE_LISTS_PER_USER); undefined: unbounded. */
  readonly wholeLists: InFlight | undefined;
  readonly cors: Cors | undefined;
  readonly limiter: RateLimiter | undefined;
  readonly trustProxy: boolean;
  readonly metrics: Metrics | undefined;
  /** Opens `?ticket=` on event-stream routes (undefined with EVENTS=off: no route takes one). */
  readonly tickets: TicketCodec | undefined;
  /** Refuses writes (503) before the process runs out of memory; undefined: never. */
  readonly memory?: MemoryGuard | undefined;
}

const NO_VALUES = {};
/** A request meeting the store away is logged at most this often (with a count of the others). */
const STORE_AWAY_LOG_MS = 10_000;

/** The path and query of an absolute-form request target (`http://host/path?q`), which RFC 9112 says servers accept. */
function originForm(url: string): string {
  const m = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#]*/.exec(url);
  if (m === null) return url;
  const rest = url.slice(m[0].length);
  return rest === '' || rest.charCodeAt(0) === 63 /* ? */ ? `/${rest}` : rest;
}

export class Pipeline {
  private readonly overShares = new Sparing(60_000);
  private readonly storeAwayLines = new Sparing(STORE_AWAY_LOG_MS);

  /** The one writer of every answer (./answer.ts). */
  private readonly answers: AnswerWriter;

  constructor(private readonly options: PipelineOptions) {
    this.answers = new AnswerWriter(options);
  }

  /** The node:http request listener. */
  readonly handle = (req: IncomingMessage, res: ServerResponse): void => {
    const call = new Call(req, res);
    if (!this.begin(call)) return;
    try {
      this.dispatch(call);
    } catch (e) {
      this.fail(call, e);
    }
  };

  /**
   * A request's steps, in order: find its route (or answer 404, 405, a preflight), authenticate
   * and rate-limit it, check its scope, decode its path parameters and query, then read and
   * validate its body, if it has one, before running the handler. Each step that refuses throws
   * an HttpError, which fail() answers.
   */
  private dispatch(call: Call): void {
    const { req } = call;
    let url = req.url ?? '/';
    if (url.charCodeAt(0) !== 47 /* / */) url = originForm(url);
    const qmark = url.indexOf('?');
    const path = qmark === -1 ? url : url.slice(0, qmark);
    const search = qmark === -1 ? undefined : url.slice(qmark + 1);
    if (path === '/v1' || path.startsWith('/v1/')) call.openaiPath = path;
    const found = this.findRoute(call, path);
    if (found === undefined) return;
    const def = found.route.def;
    const principal = def.auth ? this.authenticate(call, def, search) : undefined;
    if (principal instanceof Promise) {
      // the token named a key the identity provider's set lacked: the set is being read again
      principal.then(
        (p) => {
          try {
            this.admitted(call, found.route, found.values, search, p);
          } catch (e) {
            this.fail(call, e);
          }
        },
        (e: unknown) => this.fail(call, e),
      );
      return;
    }
    if (!def.auth && def.unlimited !== true) this.limit(this.addressOf(req));
    this.admitted(call, found.route, found.values, search, principal);
  }

  /** The steps after authentication: hold the request, decode its parameters and body, run it. */
  private admitted(call: Call, route: RuntimeRoute, values: readonly string[], search: string | undefined, principal: Principal | undefined): void {
    const def = route.def;
    this.hold(call);
    // writes that add data wait for memory; reads and deletes (which free it) go on
    if ((def.method === 'POST' || def.method === 'PUT') && this.options.memory?.low() === true) {
      this.options.memory.refuse();
      throw new HttpError(503, 'Server is low on memory', [['retry-after', '5']], def.body !== undefined);
    }
    const params = pathParams(route, values);
    const query = def.query === undefined ? NO_VALUES : validateQuery(def.query, parseQuery(search ?? ''));
    // a whole list past the owner's few is refused before the store is asked (and again, should
    // the owner's others have started meanwhile, when it turns out to be sent in pieces: stream)
    if (def.wholeList?.(query) === true && call.owner !== undefined && this.options.wholeLists?.full(call.owner) === true) throw new OverShare();
    if (def.body === undefined) {
      this.run(call, def, principal, params, query, NO_VALUES);
      return;
    }
    const schema = def.body;
    readJsonObject(call.req, this.options.body, call).then(
      (raw) => {
        let body;
        try {
          body = validateBody(schema, raw);
        } catch (e) {
          this.fail(call, e);
          return;
        }
        this.run(call, def, principal, params, query, body);
      },
      (e: unknown) => this.fail(call, e),
    );
  }

  /**
   * The route of the request's method and path, with the path's parameter values as matched.
   * Undefined when the request is answered here (a CORS preflight); 404 and 405 are thrown.
   */
  private findRoute(call: Call, path: string): { route: RuntimeRoute; values: readonly string[] } | undefined {
    const method = call.req.method ?? 'GET';
    const { cors } = this.options;
    const origin = cors === undefined ? undefined : call.req.headers.origin;
    if (cors !== undefined && origin !== undefined) call.corsHeaders = cors.headers(origin);
    const m = this.options.router.match(method, path);
    if (m.kind === 'none') throw new HttpError(404, 'Not found');
    if (m.kind === 'method') {
      call.pattern = m.pattern;
      if (method === 'OPTIONS' && cors !== undefined) {
        const asked = call.req.headers['access-control-request-headers'];
        call.corsHeaders = cors.preflight(origin, m.allow, Array.isArray(asked) ? asked.join(',') : asked);
        this.answers.answer(call, { status: 204, body: '', headers: ['allow', m.allow.join(', ')] });
        return undefined;
      }
      throw new HttpError(405, 'Method not allowed', [['allow', m.allow.join(', ')]]);
    }
    call.route = m.value;
    // a connection let in past MAX_CONNECTIONS is for health checks and scrapes only
    if (call.conn?.overflow === true && m.value.def.unlimited !== true) throw new HttpError(503, 'Server is busy', [['retry-after', '1']], true);
    return { route: m.value, values: m.params };
  }

  /**
   * Who is asking, from the Authorization header or, on an event stream, a ticket in the query;
   * a failed attempt counts against the address's rate limit, a principal against its user's.
   */
  private authenticate(call: Call, def: RouteDef, search: string | undefined): Principal | Promise<Principal> {
    let principal: Principal | Promise<Principal>;
    try {
      const ticket = def.eventStream === true && this.options.tickets !== undefined && search !== undefined ? ticketIn(search) : undefined;
      if (ticket !== undefined) {
        // a ticket stands in for the Authorization header, on the event streams only
        call.ticket = (this.options.tickets as TicketCodec).open(ticket, Date.now());
        principal = call.ticket.principal;
      } else principal = this.options.auth.authenticate(call.authorization, call.req.socket);
    } catch (e) {
      this.limit(this.addressOf(call.req));
      throw e;
    }
    if (principal instanceof Promise) {
      return principal.then(
        (p) => this.admit(call, def, p),
        (e: unknown) => {
          this.limit(this.addressOf(call.req));
          throw e;
        },
      );
    }
    return this.admit(call, def, principal);
  }

  /** A principal found: counted against its user's rate limit, and held to the route's scope. */
  private admit(call: Call, def: RouteDef, principal: Principal): Principal {
    call.user = principal.user;
    call.userKey = `user:${principal.user}`;
    this.limit(call.userKey);
    if (def.scope !== undefined && !hasScope(principal, def.scope)) throw new HttpError(403, 'Forbidden');
    return principal;
  }

  private run(call: Call, def: RouteDef, principal: Principal | undefined, params: Record<string, string>, query: object, body: object): void {
    let out: Answer | Promise<Answer>;
    try {
      out = def.handle({ req: call.req, principal, params, query, body, ticket: call.ticket, requestId: call.id });
    } catch (e) {
      this.fail(call, e);
      return;
    }
    if (out instanceof Promise) out.then((reply) => this.reply(call, reply), (e: unknown) => this.fail(call, e));
    else this.reply(call, out);
  }

  /**
   * Counts a request in flight on its connection (until settle). False for a request on a
   * connection that was refused (answered 503 already) or closed to make room: it is dropped.
   */
  private begin(call: Call): boolean {
    const guard = this.options.connections;
    if (guard === undefined) return true;
    const conn = guard.of(call.req.socket);
    if (conn === undefined) {
      call.res.destroy();
      return false;
    }
    guard.busy(conn);
    call.conn = conn;
    return true;
  }

  /**
   * Counts the request against its owner's share until it settles: its user's, or its client
   * address's when it has none (the rate limiter's keys). From its headers to its answer being
   * with the kernel, whatever it waits on (its body, the store, a model, a client that does not
   * read), so one owner holds at most MAX_REQUESTS_PER_USER connections busy. Past the share:
   * 429 with its connection closed. The connection is counted as the owner's from now on.
   */
  private hold(call: Call): void {
    const owner = call.userKey ?? this.addressOf(call.req);
    if (call.conn !== undefined) this.options.connections?.claim(call.conn, owner);
    const inFlight = this.options.inFlight;
    if (inFlight === undefined) return;
    if (!inFlight.take(owner)) throw new OverShare();
    call.owner = owner;
  }

  /**
   * Answers HTTP that node:http's parser refused (it never becomes a request): in the envelope,
   * with a request id, logged and counted like any other answer.
   */
  readonly rejectRaw = (err: NodeJS.ErrnoException, socket: Socket): void => {
    // answered already, and lingering: the parser refuses each further piece of what it reads and drops
    if (this.answers.answeredRaw(socket)) return;
    if (!socket.writable || err.code === 'ECONNRESET') {
      socket.destroy();
      return;
    }
    const [status, message] =
      err.code === 'HPE_HEADER_OVERFLOW' ? [431, 'Request headers too large'] : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? [408, 'Request timeout'] : [400, parseErrorMessage(err)];
    this.answers.raw(socket, status, message, nextRequestId(), null, { parseError: err.code ?? 'unknown' });
  };

  /**
   * node:http's `checkExpectation` listener: an `Expect` other than 100-continue gets 417 like
   * any other error answer (the body, if one follows, is not read: the connection closes).
   */
  readonly rejectExpectation = (req: IncomingMessage, res: ServerResponse): void => {
    const call = new Call(req, res);
    if (!this.begin(call)) return;
    this.fail(call, new HttpError(417, 'Expectation failed', [], true));
  };

  /** node:http's `connect` listener: this server is no proxy, so CONNECT gets 405 (an empty Allow: no method makes a tunnel). */
  readonly rejectConnect = (req: IncomingMessage, socket: Socket): void => {
    this.answers.raw(socket, 405, 'Method not allowed', requestIdOf(req), 'CONNECT', {}, [['allow', '']]);
  };

  /** A connection past MAX_CONNECTIONS and its headroom, none of them idle: 503 before it sends anything. */
  readonly refuseConnection = (socket: Socket): void => {
    this.answers.raw(socket, 503, 'Server is busy', nextRequestId(), null, { refused: 'MAX_CONNECTIONS' }, [['retry-after', '1']]);
  };

  private addressOf(req: IncomingMessage): string {
    if (this.options.trustProxy) {
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
    const limiter = this.options.limiter;
    if (limiter === undefined) return;
    const wait = limiter.take(key);
    if (wait > 0) {
      if (this.options.metrics !== undefined) this.options.metrics.rateLimited++;
      throw new HttpError(429, 'Too many requests', [['retry-after', String(wait)]]);
    }
  }

  /** A handler's answer, written by the one answer writer; a whole list past its owner's few is refused first. */
  private reply(call: Call, r: Answer): void {
    // a whole list holds a snapshot reader of the store until it is sent: one user holds a few
    const lists = this.options.wholeLists;
    if ('stream' in r && r.wholeList === true && call.owner !== undefined && lists !== undefined && !call.res.headersSent && !call.res.destroyed) {
      if (!lists.take(call.owner)) {
        this.answers.cancel(call, r);
        this.fail(call, new OverShare());
        return;
      }
      call.listOwner = call.owner;
    }
    this.answers.answer(call, r);
  }

  private fail(call: Call, e: unknown): void {
    if (e instanceof OverShare) this.overShare(call);
    const h = httpErrorOf(e);
    // a 503 the server chose (busy, low on memory) is counted and in the request line, not a failure to report;
    // nor is damage, which the store logged once when it found it; a database away is reported sparingly
    if (storeAway(e)) this.reportStoreAway(call, e);
    else if (h === undefined || (h.status >= 500 && !chosen(e))) {
      this.options.log.error('request failed', { reqId: call.id, route: call.route?.def.path ?? null, err: e });
    }
    const headerPairs: string[] = [];
    if (h !== undefined) for (const [k, v] of h.headers) headerPairs.push(k, v);
    if (h?.close === true) headerPairs.push('connection', 'close');
    if (call.openaiPath !== undefined) {
      const o = openaiError(h ?? new HttpError(500, 'Internal server error'), e, call.req.method ?? 'GET', call.openaiPath);
      for (const [k, v] of o.headers) headerPairs.push(k, v);
      this.answers.answer(call, { status: o.status, body: o.body, headers: headerPairs });
      return;
    }
    this.answers.answer(call, { status: h?.status ?? 500, body: errorBody(h?.message ?? 'Internal server error'), headers: headerPairs });
  }

  /** A request refused past its owner's share: counted, and a warning at most once a minute. */
  private overShare(call: Call): void {
    const metrics = this.options.metrics;
    if (metrics !== undefined) metrics.overShare++;
    if (!this.overShares.due()) return;
    this.options.log.warn(
      "a user's requests in flight reached its share (MAX_REQUESTS_PER_USER, a quarter of BODY_MEMORY, or 2 whole lists being sent): its further requests get 429 until some end (logged once a minute)",
      { reqId: call.id, user: call.user ?? null, max: this.options.inFlight?.max ?? null },
    );
  }

  /**
   * A request that met the store away (its database unreachable, restarting or saturated): while
   * that lasts every request that needs it does, so it is logged once every STORE_AWAY_LOG_MS
   * with how many met it in between, not once a request.
   */
  private reportStoreAway(call: Call, e: unknown): void {
    const lines = this.storeAwayLines;
    if (!lines.due()) return;
    const cause = e instanceof Error && e.cause instanceof Error ? e.cause.message : null;
    this.options.log.error('the database cannot be used: requests that need it are answered 503 Storage unavailable until it can (logged at most every 10 s)', {
      reqId: call.id,
      route: call.route?.def.path ?? null,
      cause,
      unloggedRequests: lines.since,
    });
  }


}

/** The path's parameters by name, percent-decoded; a blank one is refused when its route says how. */
function pathParams(route: RuntimeRoute, values: readonly string[]): Record<string, string> {
  const params: Record<string, string> = {};
  const names = route.paramNames;
  for (let i = 0; i < names.length; i++) {
    const name = names[i] as string;
    let v = values[i] as string;
    if (v.includes('%')) {
      try {
        v = decodeURIComponent(v);
      } catch {
        throw new HttpError(400, 'Invalid percent-encoding in the path');
      }
    }
    const blank = route.def.params?.[name]?.blankMessage;
    if (blank !== undefined && v.trim() === '') throw new HttpError(400, blank);
    params[name] = v;
  }
  return params;
}

/**
 * The value of a `ticket` query parameter given once; TokenError when it is given more than
 * once (which ticket would be meant?). Tickets are base64url: nothing to percent-decode.
 */
function ticketIn(query: string): string | undefined {
  let found: string | undefined;
  for (const part of query.split('&')) {
    if (!part.startsWith('ticket=')) continue;
    if (found !== undefined) throw new TokenError('ticket given more than once');
    found = part.slice(7);
  }
  return found === '' ? undefined : found;
}
