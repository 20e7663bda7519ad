// The live feed's routes (/api/v1/events...): a ticket for browsers' EventSource, the feed of
// what the caller may list, and one session's feed. Who may follow what is
// src/services/feed.ts's; the streams themselves are src/live/'s.
import type { Principal } from '../auth/authenticate.js';
import type { TicketCodec } from '../auth/tickets.js';
import type { QuerySchema } from '../domain/schema.js';
import type { FeedService, StreamStart } from '../services/feed.js';
import { dataBody } from './envelope.js';
import { HttpError } from './errors.js';
import { route, type Context, type RouteDef } from './route.js';

export interface EventDeps {
  readonly feed: FeedService;
  readonly tickets: TicketCodec;
}

/** What Last-Event-ID (or lastEventId) must be: the integer of an event's `id:` line. One this server never gave still opens the stream, with `reset`. */
const EVENT_ID = { regex: '^\\s*[0-9]+\\s*$', means: 'one event id (an integer)' } as const;

const streamFields = {
  lastEventId: {
    kind: 'string',
    maxLength: 32,
    pattern: EVENT_ID,
    description: 'The id of the last event seen, for a client that cannot send the Last-Event-ID header (a new EventSource); the header wins when both are given.',
  },
  ticket: {
    kind: 'string',
    description: 'A ticket from POST /api/v1/events/tickets, in place of the Authorization header (EventSource cannot send headers). Single use, 60 s.',
  },
} as const;

const listQuery = {
  fields: {
    projectId: { kind: 'string', description: "When present and non-empty: changes to the sessions of this project (under ACCESS=owner, the caller's own of it); otherwise to the caller's own sessions." },
    ...streamFields,
  },
} as const satisfies QuerySchema;

const sessionQuery = { fields: { ...streamFields } } as const satisfies QuerySchema;

const STREAM_ERRORS = [
  { status: 400, description: `Last-Event-ID must be ${EVENT_ID.means} (so must lastEventId)` },
  { status: 429, description: 'Too many event streams: the caller already has MAX_STREAMS_PER_USER open' },
  { status: 503, description: 'Server is busy: MAX_STREAMS streams are open' },
] as const;

function principalOf(ctx: { principal: Principal | undefined }): Principal {
  if (ctx.principal === undefined) throw new Error('route declared without auth reached a handler that needs a user');
  return ctx.principal;
}

type StreamContext = Context<typeof streamFields, Record<string, never>>;

/**
 * Where the client says it stands: Last-Event-ID (what EventSource sends), else `lastEventId`
 * (checked with the query). Anything but an integer is a 400 naming the header, rather than a
 * `reset` that would hide a client's mistake (two ids captured into one variable, say).
 */
function lastEventIdOf(ctx: StreamContext): string | undefined {
  const header = ctx.req.headers['last-event-id'];
  if (typeof header !== 'string' || header.trim() === '') return ctx.query.lastEventId;
  if (!new RegExp(EVENT_ID.regex).test(header)) throw new HttpError(400, `Last-Event-ID must be ${EVENT_ID.means}`);
  return header;
}

/** How a stream starts: until when its credential holds, with what ticket, from where. */
function startOf(ctx: StreamContext, lastEventId: string | undefined): StreamStart {
  return {
    lastEventId,
    untilMs: principalOf(ctx).expiresAtMs,
    ticket: ctx.ticket === undefined ? undefined : { id: ctx.ticket.id, expiresAtMs: ctx.ticket.expiresAtMs },
    reqId: ctx.requestId,
  };
}

export function eventRoutes({ feed, tickets }: EventDeps): RouteDef[] {
  return [
    route({
      method: 'POST',
      path: '/api/v1/events/tickets',
      operationId: 'createEventTicket',
      summary: 'A single-use ticket (60 s) that opens one event stream as the caller, for EventSource, which cannot send headers',
      tag: 'Live events',
      auth: true,
      scope: 'sessions:read',
      responses: [{ status: 201, description: 'The ticket: give it as ?ticket= to an event route', schema: 'EventTicket' }],
      handle(ctx) {
        const { ticket, expiresAtMs } = tickets.mint(principalOf(ctx), Date.now());
        return { status: 201, body: dataBody(JSON.stringify({ ticket, expiresAt: new Date(expiresAtMs).toISOString() })) };
      },
    }),

    route<typeof listQuery.fields>({
      method: 'GET',
      path: '/api/v1/events',
      operationId: 'followChatSessions',
      summary: "Changes to the sessions the caller may list (its own, or a project's), as they are committed (text/event-stream)",
      tag: 'Live events',
      auth: true,
      scope: 'sessions:read',
      eventStream: true,
      query: listQuery,
      responses: [{ status: 200, description: 'The event stream', schema: 'EventStream' }],
      errors: STREAM_ERRORS,
      handle(ctx) {
        const lastEventId = lastEventIdOf(ctx);
        return feed.followList(principalOf(ctx), ctx.query.projectId, startOf(ctx, lastEventId));
      },
    }),

    route<typeof sessionQuery.fields>({
      method: 'GET',
      path: '/api/v1/chat-sessions/:id/events',
      operationId: 'followChatSession',
      summary: 'Changes to one session and its turns, as they are committed (text/event-stream); it ends when the session is deleted',
      tag: 'Live events',
      auth: true,
      scope: 'sessions:read',
      eventStream: true,
      params: { id: { description: 'Chat session id.', blankMessage: 'Session ID is required' } },
      query: sessionQuery,
      responses: [{ status: 200, description: 'The event stream', schema: 'EventStream' }],
      errors: [{ status: 404, description: 'Chat session not found' }, ...STREAM_ERRORS],
      handle(ctx) {
        const lastEventId = lastEventIdOf(ctx); // a bad request is a 400 before the session is looked up
        return feed.followSession(principalOf(ctx), ctx.params['id'] as string, startOf(ctx, lastEventId));
      },
    }),
  ];
}
