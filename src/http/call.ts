// One request and its answer as the HTTP floor carries it, from its arrival to its settlement:
// its id (the client's X-Request-Id when sane, else ours), its route and who asks, and what it holds.
import { randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { OpenedTicket } from '../auth/tickets.js';
import type { BodyHold } from './body.js';
import type { Connection } from './connections.js';
import type { RouteDef } from '../api/route.js';
import type { RouteStats } from '../metrics.js';

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

const SANE_REQUEST_ID = /^[A-Za-z0-9._:@/+=-]{1,128}$/;
const bootId = randomBytes(4).toString('hex');
let requestCounter = 0;
/** An id for a request that brought none we accept: this process's boot id and a counter. */
export const nextRequestId = (): string => `${bootId}-${(++requestCounter).toString(36)}`;

/** The request id: the client's when it is sane, else ours. */
const saneIdOr = (given: unknown): string => (typeof given === 'string' && SANE_REQUEST_ID.test(given) ? given : nextRequestId());
export const requestIdOf = (req: IncomingMessage): string => saneIdOr(req.headers['x-request-id']);

/** One request and its answer, from arrival to settlement: one object so the hot path allocates little. */
export class Call implements BodyHold {
  readonly started = performance.now();
  readonly id: string;
  route: RuntimeRoute | undefined;
  /** The pattern of a known path answered without a route (405, preflight). */
  pattern: string | undefined;
  /** The request's path when it is under /v1 (the OpenAI door): its errors are answered in OpenAI's shape. */
  openaiPath: string | undefined;
  user: string | undefined;
  /** `user:<sub>` once authenticated: the key of its user's rate limit and share. */
  userKey: string | undefined;
  /** Whose share of the server the request counts against (`user:<sub>` or `addr:<ip>`), once counted (hold). */
  owner: string | undefined;
  /** The owner a whole list being sent counts against, once counted (stream). */
  listOwner: string | undefined;
  /** CORS headers for this request's origin, as name/value pairs. */
  corsHeaders: string[] | undefined;
  /** Bytes of the body budget this request holds until its answer is sent. */
  heldBytes = 0;
  /** The connection's count of requests in flight, given back once (settle). */
  conn: Connection | undefined;
  /** The ticket an event stream was opened with. */
  ticket: OpenedTicket | undefined;
  settled = false;

  /** The Authorization header as `req.headers` would give it: its first line (node:http drops repeats). */
  readonly authorization: string | undefined;

  /**
   * Reads the two headers every request is asked for from the raw lines: `req.headers` is an
   * object node:http builds on first use, a cost a GET by id need not pay. X-Request-Id, when
   * repeated, is what node:http would make of it, a comma-joined list: never a sane id.
   */
  constructor(
    readonly req: IncomingMessage,
    readonly res: ServerResponse,
  ) {
    const raw = req.rawHeaders;
    let authorization: string | undefined;
    let given: string | undefined;
    let repeated = false;
    for (let i = 0; i < raw.length; i += 2) {
      const name = raw[i] as string;
      if (name.length === 13) {
        if (authorization === undefined && name.toLowerCase() === 'authorization') authorization = raw[i + 1] as string;
      } else if (name.length === 12 && name.toLowerCase() === 'x-request-id') {
        if (given !== undefined) repeated = true;
        given = raw[i + 1] as string;
      }
    }
    this.authorization = authorization;
    this.id = saneIdOr(repeated ? undefined : given);
  }
}

