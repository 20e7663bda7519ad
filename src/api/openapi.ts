// The OpenAPI 3.1 document, generated from the route table: paths, parameters, bodies and
// answers all come from the declarations the server validates with, so they cannot drift.
import { SCOPES } from '../auth/authenticate.js';
import { contentField, USAGE } from '../domain/inputs.js';
import { COUNT_MAX } from '../domain/numbers.js';
import { CHAT_SESSION_MODES, STOP_REASONS, TURN_ROLES, TURN_STATUSES } from '../domain/records.js';
import { bodyJsonSchema, fieldJsonSchema, NOT_BLANK, queryParameters } from '../domain/json-schema.js';
import { mustBeGiven, type BodySchema } from '../domain/schema.js';
import type { ResponseDoc, RouteDef, SchemaName } from './route.js';

type Json = { [key: string]: unknown };

const ref = (name: string): Json => ({ $ref: `#/components/schemas/${name}` });
const envelope = (data: Json, besideData: Json = {}): Json => ({
  type: 'object',
  required: ['success', 'data'],
  properties: { success: { const: true }, data, ...besideData },
});
const nextCursor = { nextCursor: { type: ['string', 'null'], description: 'Present when `limit` was given; null on the last page.' } };

const ID = { type: 'string', pattern: '^[0-9a-f]{24}$' };

const RECORDS: Record<string, Json> = {
  ChatSession: {
    type: 'object',
    required: ['_id', 'name', 'provider', 'selectedModel', 'mode', 'user', 'project', 'createdAt', 'updatedAt', 'archived', 'headTurnId'],
    properties: {
      _id: { type: 'string', pattern: '^[0-9a-f]{24}$' },
      name: { type: 'string' },
      provider: { type: 'string' },
      selectedModel: { type: 'string' },
      mode: { type: 'string', enum: [...CHAT_SESSION_MODES] },
      user: { type: 'string' },
      project: { type: 'string' },
      createdAt: { type: 'string', format: 'date-time' },
      updatedAt: { type: 'string', format: 'date-time', description: 'Moves forward with every change of the session or of its turns.' },
      archived: { type: 'boolean' },
      headTurnId: { type: ['string', 'null'], pattern: ID.pattern, description: 'The newest turn of the active branch; null while the session has no turns.' },
      forkedFrom: {
        type: 'object',
        description: 'Only on a session made by a fork: the source session and the turn its copy ends at.',
        required: ['session', 'turn'],
        properties: { session: ID, turn: { type: ['string', 'null'], pattern: ID.pattern } },
      },
      tags: { type: 'array', items: { type: 'string' }, description: 'Only when it has some.' },
      metadata: { type: 'object', additionalProperties: { type: 'string' }, description: 'Only when it has some.' },
      expiresAt: { type: ['string', 'null'], format: 'date-time', description: 'Only when set: when it is gone; null: never.' },
      instructions: { type: 'string', description: 'Only when set: the system message of the replies the server asks the model for.' },
    },
  },
  Turn: {
    type: 'object',
    required: ['_id', 'session', 'parentId', 'user', 'role', 'content', 'status', 'createdAt'],
    properties: {
      _id: ID,
      session: { type: 'string' },
      parentId: { type: ['string', 'null'], pattern: ID.pattern, description: 'The turn this one follows (a turn of the same session); null for a root.' },
      user: { type: 'string' },
      role: { type: 'string', enum: [...TURN_ROLES] },
      content: fieldJsonSchema(contentField(true)),
      model: { type: 'string' },
      metadata: { type: 'object', additionalProperties: true },
      usage: fieldJsonSchema(USAGE),
      error: {
        type: 'object',
        required: ['message'],
        properties: { message: { type: 'string' } },
        description: "Only on a turn that ended with `error` (a reply the provider refused or failed): what happened, in words that name the provider, never its key.",
      },
      stopReason: { type: 'string', enum: [...STOP_REASONS], description: "Only on a reply whose provider said why it ended: `stop`, `length` (its token limit), `tool_calls` (it asks for the client's tools: answer with a `tool` message) or `content_filter` (refused)." },
      status: { type: 'string', enum: [...TURN_STATUSES], description: '`streaming` while a reply (or a client) is still writing it; `interrupted` when it was cancelled or cut by a crash.' },
      createdAt: { type: 'string', format: 'date-time' },
    },
  },
  Provider: {
    type: 'object',
    required: ['_id', 'name', 'hasApiKey'],
    properties: {
      _id: { type: 'string', pattern: '^[0-9a-f]{24}$' },
      name: { type: 'string' },
      hasApiKey: { type: 'boolean', description: 'Whether a key is configured; the key itself is never returned.' },
    },
    additionalProperties: true,
  },
  Error: {
    type: 'object',
    required: ['success', 'message'],
    properties: { success: { const: false }, message: { type: 'string' } },
  },
  OpenAIError: {
    type: 'object',
    required: ['error'],
    properties: {
      error: {
        type: 'object',
        required: ['message', 'type', 'param', 'code'],
        properties: { message: { type: 'string' }, type: { type: 'string' }, param: { type: ['string', 'null'] }, code: { type: ['string', 'null'] } },
      },
    },
  },
  Model: {
    type: 'object',
    required: ['id', 'object', 'created', 'owned_by'],
    properties: { id: { type: 'string', description: '`<provider slug>/<model>`' }, object: { const: 'model' }, created: { type: 'integer' }, owned_by: { type: 'string', description: "The provider's name." } },
  },
};

const RESPONSES: Record<SchemaName, Json> = {
  ChatSession: envelope(ref('ChatSession')),
  ChatSessionList: envelope({ type: 'array', items: ref('ChatSession') }, nextCursor),
  SearchHitList: envelope(
    {
      type: 'array',
      items: {
        type: 'object',
        required: ['session', 'turnId', 'snippet'],
        properties: {
          session: ref('ChatSession'),
          turnId: { type: ['string', 'null'], description: 'The turn whose text matched; null when the session\'s name matched.' },
          snippet: { type: 'string', description: 'Up to 160 characters of the matched text around the first matching word; … where it was cut.' },
        },
      },
    },
    nextCursor,
  ),
  Turn: envelope(ref('Turn')),
  TurnList: envelope({ type: 'array', items: ref('Turn') }, nextCursor),
  Provider: envelope(ref('Provider')),
  ProviderList: envelope({ type: 'array', items: ref('Provider') }),
  Deleted: { type: 'object', required: ['success', 'message'], properties: { success: { const: true }, message: { const: 'Chat session deleted' } } },
  TurnDeleted: { type: 'object', required: ['success', 'message'], properties: { success: { const: true }, message: { const: 'Turn deleted' } } },
  DeltaAppended: envelope({
    type: 'object',
    required: ['_id', 'session', 'at'],
    properties: {
      _id: { type: 'string', description: 'The turn.' },
      session: { type: 'string' },
      at: { type: 'integer', description: "Length of the text before the delta, in UTF-16 code units (JavaScript's length): where the delta's text begins." },
      part: { type: 'integer', description: 'For content of parts: the index of the text part the delta went to.' },
    },
  }),
  Health: envelope({
    type: 'object',
    required: ['status'],
    properties: {
      status: { const: 'ok' },
      version: { type: 'string' },
      store: { type: 'string', enum: ['sqlite', 'postgres'], description: 'The storage engine (STORE).' },
      providers: { type: 'object', properties: { count: { type: 'integer' }, loadedAt: { type: 'string', format: 'date-time' } } },
    },
  }),
  Usage: envelope({
    type: 'object',
    required: ['sessions', 'turns', 'bytes', 'inputTokens', 'outputTokens', 'cachedTokens'],
    properties: {
      sessions: { type: 'integer', minimum: 0, description: 'Sessions the caller owns, archived ones included.' },
      turns: { type: 'integer', minimum: 0, description: 'The turns of those sessions, whoever wrote them.' },
      bytes: { type: 'integer', minimum: 0, description: 'UTF-8 bytes of the JSON of those sessions and turns (the same figure on every engine).' },
      inputTokens: { type: 'integer', minimum: 0, maximum: COUNT_MAX, description: "The `inputTokens` of those turns' usage, summed (a reply's as the provider reported it, a client's as given); a sum past 2^53 - 1 is 2^53 - 1." },
      outputTokens: { type: 'integer', minimum: 0, maximum: COUNT_MAX, description: "The `outputTokens` of those turns' usage, summed; a sum past 2^53 - 1 is 2^53 - 1." },
      cachedTokens: { type: 'integer', minimum: 0, maximum: COUNT_MAX, description: "The `cachedTokens` of those turns' usage, summed (0 where a turn gives none); a sum past 2^53 - 1 is 2^53 - 1." },
    },
  }),
  OpenApi: { type: 'object', description: 'This document.' },
  Metrics: { type: 'string', description: 'Prometheus text exposition format.' },
  DocsPage: { type: 'string', description: 'An HTML page that renders this document, with a try-it form per operation.' },
  EventStream: {
    type: 'string',
    description: [
      'Server-sent events (text/event-stream). Each event has an `id` (an integer; ids increase), an `event` (its type) and `data` (JSON on one line):',
      '`session.created`, `session.updated`: the ChatSession as GET /api/v1/chat-sessions/:id answers it (a fork is a `session.created`, a switch of head a `session.updated`);',
      '`session.deleted`: `{"_id"}`;',
      '`turn.created`, `turn.updated`: the Turn as the turns list answers it (a new turn, an edit), each followed by the `session.updated` of its session;',
      '`turn.deleted`: `{"_id", "session", "ids"}`, the turn a DELETE named and every turn that went with it, then the `session.updated`;',
      '`turn.delta` (only on a session\'s own stream): `{"_id", "session", "text", "at", "part"?, "type"?}`, text appended to a streaming turn at `at` (its text\'s length before it, in UTF-16 code units) of its content, or of its part `part`; `type` is `reasoning` for the model\'s reasoning (a `reasoning` part), absent for the answer;',
      '`ready`: `{}`, once, when the stream is live (after what Last-Event-ID replayed); its id is where to resume from;',
      '`reset`: `{"reason"}`: what followed Last-Event-ID cannot be replayed (older than the retained window, or unknown to this server): read the lists again;',
      '`end`: `{"reason"}`, the final event before the server closes the stream: `slow` (the client fell EVENTS_BUFFER behind), `expired` (the token expired), `deleted` (the session was deleted), `shutdown`.',
      'Every EVENTS_HEARTBEAT a comment `: heartbeat` with the `id` of the newest event, so a reconnect does not replay what the stream passed over.',
    ].join(' '),
  },
  ReplyStarted: envelope({
    type: 'object',
    required: ['turn', 'reply'],
    properties: {
      turn: { oneOf: [ref('Turn'), { type: 'null' }], description: 'The user turn a message recorded; null for a reply.' },
      reply: ref('Turn'),
    },
  }),
  Response: { type: 'object', required: ['id', 'object', 'created_at', 'status', 'model', 'output'], description: "OpenAI's response object (its stream: response.* events, each with a sequence_number).", properties: { id: { type: 'string', description: '`resp_` and the reply turn\'s _id' }, object: { const: 'response' }, created_at: { type: 'integer' }, status: { type: 'string' }, model: { type: 'string' }, output: { type: 'array', items: { type: 'object', additionalProperties: true } } } },
  ItemList: { type: 'object', required: ['object', 'data', 'first_id', 'last_id', 'has_more'], properties: { object: { const: 'list' }, data: { type: 'array', items: { type: 'object', additionalProperties: true } }, first_id: { type: ['string', 'null'] }, last_id: { type: ['string', 'null'] }, has_more: { type: 'boolean' } } },
  Item: { type: 'object', required: ['id', 'type'], properties: { id: { type: 'string' }, type: { type: 'string' } }, additionalProperties: true },
  Conversation: { type: 'object', required: ['id', 'object', 'created_at', 'metadata'], properties: { id: { type: 'string', description: '`conv_` and the session\'s _id' }, object: { const: 'conversation' }, created_at: { type: 'integer' }, metadata: { type: 'object', additionalProperties: { type: 'string' } } } },
  OpenAIDeleted: { type: 'object', required: ['id', 'object', 'deleted'], properties: { id: { type: 'string' }, object: { type: 'string' }, deleted: { const: true } } },
  ModelList: { type: 'object', required: ['object', 'data'], properties: { object: { const: 'list' }, data: { type: 'array', items: ref('Model') } } },
  Model: ref('Model'),
  ChatCompletion: {
    type: 'object',
    required: ['id', 'object', 'created', 'model', 'choices'],
    description: "OpenAI's chat.completion object (its stream: chat.completion.chunk objects, then data: [DONE]).",
    properties: {
      id: { type: 'string', description: '`chatcmpl-` and the reply turn\'s _id' },
      object: { const: 'chat.completion' },
      created: { type: 'integer' },
      model: { type: 'string' },
      choices: { type: 'array', items: { type: 'object', additionalProperties: true } },
      usage: { type: 'object', additionalProperties: true },
    },
  },
  EventTicket: envelope({
    type: 'object',
    required: ['ticket', 'expiresAt'],
    properties: {
      ticket: { type: 'string', description: 'Give it as ?ticket= to GET /api/v1/events or GET /api/v1/chat-sessions/:id/events; it opens one stream.' },
      expiresAt: { type: 'string', format: 'date-time', description: 'At most 60 s from now (sooner when the token expires sooner).' },
    },
  }),
};

/** The media type of each success schema that is not JSON. */
const MEDIA_TYPES: Partial<Record<SchemaName, string>> = { Metrics: 'text/plain', DocsPage: 'text/html', EventStream: 'text/event-stream' };

function errorResponse(description: string, openai: boolean): Json {
  return { description, content: { 'application/json': { schema: ref(openai ? 'OpenAIError' : 'Error') } } };
}

function successResponse(r: ResponseDoc): Json {
  if (r.schema === undefined) return { description: r.description };
  const type = MEDIA_TYPES[r.schema] ?? 'application/json';
  const headers =
    r.schema === 'ChatSession' || r.etag === true ? { headers: { ETag: { description: "The session's version: give it back in If-Match to change only this version.", schema: { type: 'string' } } } } : {};
  return { description: r.description, ...headers, content: { [type]: { schema: RESPONSES[r.schema] } } };
}

/** The errors every route of this shape can answer, beside those it declares. */
function commonErrors(r: RouteDef): [number, string][] {
  const out: [number, string][] = [];
  const bad: string[] = [];
  for (const p of Object.values(r.params ?? {})) if (p.blankMessage !== undefined) bad.push(p.blankMessage);
  if (r.query !== undefined) bad.push('invalid query parameter (limit, cursor, archived, ...)');
  if (r.body !== undefined) bad.push('Invalid JSON body, Request body must be a JSON object, or a field error such as "projectId is required"');
  if (bad.length > 0) out.push([400, bad.join('; ')]);
  if (r.auth) out.push([401, r.eventStream === true ? 'Unauthorized: no, expired or invalid Bearer token or ticket (a ticket opens one stream)' : 'Unauthorized: no, expired or invalid Bearer token']);
  if (r.scope !== undefined) out.push([403, `Forbidden: the token's scope lacks ${r.scope}`]);
  if (r.body !== undefined) {
    out.push([413, 'Request body too large']);
    out.push([415, 'Content-Type must be application/json']);
  }
  out.push([429, `${r.unlimited === true ? '' : 'Too many requests (when RATE_LIMIT is set), or '}Too many requests in flight (the caller's share: MAX_REQUESTS_PER_USER; the connection is closed); a reply: Too many replies in progress for one user (as many, background ones included)`]);
  out.push([500, 'A failure inside, e.g. Storage write failed']);
  return out;
}

/** A body with a required field cannot be left out; one without (an update) may be empty. */
function bodyRequired(body: BodySchema): boolean {
  return Object.values(body.fields).some(mustBeGiven);
}

function operation(r: RouteDef): Json {
  const parameters: Json[] = [];
  for (const [name, p] of Object.entries(r.params ?? {})) {
    const schema = p.blankMessage !== undefined ? { type: 'string', ...NOT_BLANK } : { type: 'string' };
    parameters.push({ name, in: 'path', required: true, description: p.description, schema });
  }
  if (r.query !== undefined) parameters.push(...queryParameters(r.query));
  if (r.ifMatch === true) {
    parameters.push({ name: 'If-Match', in: 'header', required: false, description: 'An ETag from this session, or *; a stale one gets 412.', schema: { type: 'string' } });
  }
  if (r.eventStream === true) {
    parameters.push({
      name: 'Last-Event-ID',
      in: 'header',
      required: false,
      description: 'The id of the last event seen, an integer (EventSource sends it when it reconnects): what followed is replayed, or `reset` is sent when it is no longer kept. Anything but one integer is 400.',
      schema: { type: 'string' },
    });
  }
  const responses: Record<string, Json> = {};
  for (const s of r.responses) responses[String(s.status)] = successResponse(s);
  const errors = new Map<number, string>(commonErrors(r));
  for (const e of r.errors ?? []) errors.set(e.status, errors.has(e.status) ? `${errors.get(e.status) as string}; ${e.description}` : e.description);
  for (const [status, description] of [...errors].sort((a, b) => a[0] - b[0])) responses[String(status)] = errorResponse(description, r.path.startsWith('/v1/'));
  return {
    operationId: r.operationId,
    summary: r.summary,
    tags: [r.tag],
    security: r.auth ? [{ bearerAuth: r.scope !== undefined ? [r.scope] : [] }, ...(r.eventStream === true ? [{ eventTicket: [] }] : [])] : [],
    ...(parameters.length > 0 ? { parameters } : {}),
    ...(r.body !== undefined
      ? { requestBody: { required: bodyRequired(r.body), content: { 'application/json': { schema: ref(r.body.name) } } } }
      : {}),
    responses,
  };
}

/** The whole document for a route table. */
export function openApiDocument(routes: readonly RouteDef[], version: string): Json {
  const paths: Record<string, Json> = {};
  const schemas: Record<string, Json> = { ...RECORDS };
  for (const r of routes) {
    const path = r.path.replace(/[:*]([A-Za-z]+)/g, '{$1}');
    paths[path] = { ...(paths[path] ?? {}), [r.method.toLowerCase()]: operation(r) };
    if (r.body !== undefined) schemas[r.body.name] = bodyJsonSchema(r.body);
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'chat-session-api',
      version,
      description: 'Chat sessions bound to a project, an AI provider and a model, and the configured AI providers (never their keys).',
    },
    servers: [{ url: '/' }],
    tags: [{ name: 'Chat sessions' }, { name: 'Live events' }, { name: 'Providers' }, { name: 'Service' }, { name: 'OpenAI', description: 'The OpenAI door: point an OpenAI client at /v1; errors here are OpenAI\'s {"error": {message, type, param, code}}.' }],
    paths,
    components: {
      schemas,
      securitySchemes: {
        bearerAuth: {
          type: 'http',
          scheme: 'bearer',
          bearerFormat: 'JWT',
          description: `A JWT: HS256 with the server's secret (sub = user id), or, with AUTH_JWKS, signed by a key of the identity provider's set (the user id from AUTH_USER_CLAIM). An optional scope (or scp) claim limits it to: ${SCOPES.join(', ')}; a provider's token whose scope holds none of them may do everything.`,
        },
        ...(routes.some((r) => r.eventStream === true)
          ? {
              eventTicket: {
                type: 'apiKey',
                in: 'query',
                name: 'ticket',
                description: 'On the event streams only: a ticket from POST /api/v1/events/tickets (single use, 60 s), for EventSource, which cannot send headers. A Bearer token is never accepted in a URL.',
              },
            }
          : {}),
      },
    },
  };
}
