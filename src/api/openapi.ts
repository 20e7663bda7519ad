// The OpenAPI 3.1 document, generated from the route table: paths, parameters, bodies and
// answers all come from the declarations the server validates with, so they cannot drift.
import { SCOPES } from '../auth/authenticate.js';
import { contentField, USAGE } from '../domain/inputs.js';
import { CHAT_SESSION_MODES, TURN_ROLES, TURN_STATUSES } from '../domain/records.js';
import { bodyJsonSchema, fieldJsonSchema, NOT_BLANK, queryParameters, type BodySchema } from '../domain/schema.js';
import type { ResponseDoc, RouteDef, SchemaName } from './route.js';

type Json = { [key: string]: unknown };

const ref = (name: string): Json => ({ $ref: `#/components/schemas/${name}` });
const envelope = (data: Json, extra: Json = {}): Json => ({
  type: 'object',
  required: ['success', 'data'],
  properties: { success: { const: true }, data, ...extra },
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
      status: { type: 'string', enum: [...TURN_STATUSES] },
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
};

const RESPONSES: Record<SchemaName, Json> = {
  ChatSession: envelope(ref('ChatSession')),
  ChatSessionList: envelope({ type: 'array', items: ref('ChatSession') }, nextCursor),
  Turn: envelope(ref('Turn')),
  TurnList: envelope({ type: 'array', items: ref('Turn') }, nextCursor),
  Provider: envelope(ref('Provider')),
  ProviderList: envelope({ type: 'array', items: ref('Provider') }),
  Deleted: { type: 'object', required: ['success', 'message'], properties: { success: { const: true }, message: { const: 'Chat session deleted' } } },
  TurnDeleted: { type: 'object', required: ['success', 'message'], properties: { success: { const: true }, message: { const: 'Turn deleted' } } },
  Health: envelope({
    type: 'object',
    required: ['status'],
    properties: {
      status: { const: 'ok' },
      version: { type: 'string' },
      store: { type: 'string', enum: ['journal', 'sqlite', 'postgres'], description: 'The storage engine (STORE).' },
      providers: { type: 'object', properties: { count: { type: 'integer' }, loadedAt: { type: 'string', format: 'date-time' } } },
    },
  }),
  OpenApi: { type: 'object', description: 'This document.' },
  Metrics: { type: 'string', description: 'Prometheus text exposition format.' },
  DocsPage: { type: 'string', description: 'An HTML page that renders this document, with a try-it form per operation.' },
};

/** The media type of each success schema that is not JSON. */
const MEDIA_TYPES: Partial<Record<SchemaName, string>> = { Metrics: 'text/plain', DocsPage: 'text/html' };

function errorResponse(description: string): Json {
  return { description, content: { 'application/json': { schema: ref('Error') } } };
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
  if (r.auth) out.push([401, 'Unauthorized: no, expired or invalid Bearer token']);
  if (r.scope !== undefined) out.push([403, `Forbidden: the token's scope lacks ${r.scope}`]);
  if (r.body !== undefined) {
    out.push([413, 'Request body too large']);
    out.push([415, 'Content-Type must be application/json']);
  }
  if (r.unlimited !== true) out.push([429, 'Too many requests (when RATE_LIMIT is set)']);
  out.push([500, 'A failure inside, e.g. Storage write failed']);
  return out;
}

/** A body with a required field cannot be left out; one without (an update) may be empty. */
function bodyRequired(body: BodySchema): boolean {
  return Object.values(body.fields).some((f) => f.kind === 'string' && f.required === true);
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
  const responses: Record<string, Json> = {};
  for (const s of r.responses) responses[String(s.status)] = successResponse(s);
  const errors = new Map<number, string>(commonErrors(r));
  for (const e of r.errors ?? []) errors.set(e.status, errors.has(e.status) ? `${errors.get(e.status) as string}; ${e.description}` : e.description);
  for (const [status, description] of [...errors].sort((a, b) => a[0] - b[0])) responses[String(status)] = errorResponse(description);
  return {
    operationId: r.operationId,
    summary: r.summary,
    tags: [r.tag],
    security: r.auth ? [{ bearerAuth: r.scope !== undefined ? [r.scope] : [] }] : [],
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
    const path = r.path.replace(/:([A-Za-z]+)/g, '{$1}');
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
    tags: [{ name: 'Chat sessions' }, { name: 'Providers' }, { name: 'Service' }],
    paths,
    components: {
      schemas,
      securitySchemes: {
        bearerAuth: {
          type: 'http',
          scheme: 'bearer',
          bearerFormat: 'JWT',
          description: `HS256 JWT; sub = user id. An optional scope claim limits it to: ${SCOPES.join(', ')}.`,
        },
      },
    },
  };
}
