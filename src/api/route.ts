// What a route is: its method and path, what it takes (parameters, query, body, all declared
// with the schema language), what it answers, and its handler. The server validates from
// these declarations and the OpenAPI document is generated from them.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Principal, Scope } from '../auth/authenticate.js';
import type { OpenedTicket } from '../auth/tickets.js';
import type { BodyField, BodySchema, QueryField, QuerySchema, Values } from '../domain/schema.js';

/** The content type of every event stream's answer. */
export const EVENT_STREAM_TYPE = 'text/event-stream; charset=utf-8';

/** A successful answer: the status and the body, already JSON (text, or bytes). */
export interface Reply {
  readonly status: number;
  readonly body: string | Buffer;
  readonly etag?: string;
  /** Defaults to JSON; /metrics answers in Prometheus text, /docs in HTML. */
  readonly contentType?: string;
  /** Further header name/value pairs, flat (the page's Content-Security-Policy). */
  readonly headers?: readonly string[];
}

/**
 * A successful answer too large to build whole (a whole list): its JSON in pieces, written as the
 * client reads them (chunked), never more than a piece or two held at a time.
 */
export interface StreamReply {
  readonly status: number;
  readonly stream: AsyncIterable<string | Buffer>;
  /**
   * A whole list read from a snapshot of the store as the client takes it, which holds one of
   * the store's few snapshot readers until it ends: one user is sent only a few at once
   * (WHOLE_LISTS_PER_USER).
   */
  readonly wholeList?: true;
  /** Called instead of reading `stream` when the answer is not sent: gives back what it holds. */
  readonly cancel?: () => Promise<void>;
  /** Defaults to JSON; the OpenAI door's streams are text/event-stream. */
  readonly contentType?: string;
  /** Further header name/value pairs, flat. */
  readonly headers?: readonly string[];
}

/**
 * A long-lived answer (text/event-stream): once its head is written, `attach` takes the
 * response over until the live feed or the client ends it; `cancel` is called instead when the
 * client left before the head could be written.
 */
export interface EventStreamReply {
  readonly status: 200;
  readonly eventStream: {
    attach(res: ServerResponse): void;
    cancel(): void;
  };
}

export type Answer = Reply | StreamReply | EventStreamReply;

export interface Context<Q extends Record<string, QueryField>, B extends Record<string, BodyField>> {
  readonly req: IncomingMessage;
  /** Set on every route with `auth: true`. */
  readonly principal: Principal | undefined;
  /** Path parameters, percent-decoded, by name. */
  readonly params: Readonly<Record<string, string>>;
  readonly query: Values<Q>;
  readonly body: Values<B>;
  /** On an event stream opened with `?ticket=`: the ticket, whose single use the handler claims. */
  readonly ticket: OpenedTicket | undefined;
  /** The request's id (X-Request-Id), for log lines the handler's work writes later. */
  readonly requestId: string;
}

export interface ParamDoc {
  readonly description: string;
  /** A blank value is answered 400 with this message before the handler runs. */
  readonly blankMessage?: string;
}

/** Names of the response schemas the OpenAPI document defines. */
export type SchemaName =
  | 'ChatSession'
  | 'ChatSessionList'
  | 'SearchHitList'
  | 'Turn'
  | 'TurnList'
  | 'Provider'
  | 'ProviderList'
  | 'Deleted'
  | 'TurnDeleted'
  | 'DeltaAppended'
  | 'Health'
  | 'OpenApi'
  | 'Metrics'
  | 'DocsPage'
  | 'EventStream'
  | 'EventTicket'
  | 'Usage'
  | 'ReplyStarted'
  | 'ModelList'
  | 'Model'
  | 'ChatCompletion'
  | 'Response'
  | 'ItemList'
  | 'Item'
  | 'Conversation'
  | 'OpenAIDeleted';

export interface ResponseDoc {
  readonly status: number;
  readonly description: string;
  /** Omitted for error answers, which all share the Error schema. */
  readonly schema?: SchemaName;
  /** The answer carries the session's ETag (always so for a ChatSession). */
  readonly etag?: boolean;
}

export interface RouteDef<Q extends Record<string, QueryField> = Record<string, QueryField>, B extends Record<string, BodyField> = Record<string, BodyField>> {
  readonly method: 'GET' | 'POST' | 'PUT' | 'DELETE';
  readonly path: string;
  readonly operationId: string;
  readonly summary: string;
  readonly tag: 'Chat sessions' | 'Live events' | 'Providers' | 'Service' | 'OpenAI';
  /** Requires a Bearer token. */
  readonly auth: boolean;
  /** The token scope the route needs (tokens without a scope claim may do everything). */
  readonly scope?: Scope;
  /** Not counted against per-address rate limits (health checks, metrics scrapes). */
  readonly unlimited?: boolean;
  readonly params?: Readonly<Record<string, ParamDoc>>;
  readonly query?: QuerySchema<Q>;
  readonly body?: BodySchema<B>;
  /** Honours If-Match. */
  readonly ifMatch?: boolean;
  /**
   * Answers an event stream: takes Last-Event-ID, and a ticket (POST /api/v1/events/tickets) as
   * `?ticket=` in place of the Authorization header, which no other route accepts.
   */
  readonly eventStream?: boolean;
  /**
   * Whether a request with this query answers a whole list read from a snapshot of the store (a
   * list without `limit` or `cursor`): one user is sent only a few at once (WHOLE_LISTS_PER_USER),
   * and one past them is refused before the store is asked.
   */
  readonly wholeList?: (query: Values<Q>) => boolean;
  /** Success answers (errors are derived from the rest of the declaration). */
  readonly responses: readonly ResponseDoc[];
  /** Further error answers this route can give beyond the common ones. */
  readonly errors?: readonly ResponseDoc[];
  handle(ctx: Context<Q, B>): Answer | Promise<Answer>;
}

/**
 * Declares a route, keeping its query and body types for the handler. The table holds routes
 * of different types, so the types are erased here; that is sound because the server builds
 * every handler's `query` and `body` with validateQuery/validateBody from the very schemas
 * declared beside the handler.
 */
export function route<Q extends Record<string, QueryField> = Record<string, never>, B extends Record<string, BodyField> = Record<string, never>>(
  def: RouteDef<Q, B>,
): RouteDef {
  return def as unknown as RouteDef;
}
