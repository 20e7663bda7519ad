// OpenAI's stateful API under /v1 (Responses and Conversations) over sessions and turns: the
// requests become ResponsesService's use cases, the turns become OpenAI's objects and events
// (./items.ts, ./response-events.ts). Same auth, errors and model ids as the rest of the door.
import type { Principal } from '../../auth/authenticate.js';
import { ID_MAX, METADATA_KEY_MAX, METADATA_KEYS, METADATA_VALUE_MAX } from '../../domain/limits.js';
import type { JsonObject, JsonValue, Turn } from '../../domain/records.js';
import { hasLoneSurrogate, ValidationError, type BodySchema, type QuerySchema } from '../../domain/schema.js';
import type { ReplyOptions } from '../../providers/wire.js';
import type { DoorMessage } from '../../domain/door-match.js';
import { ConversationNotFound, ItemNotFound, ResponseNotFound, type ResponsesService, type ResponseStarted } from '../../services/responses.js';
import { turnOf } from '../../services/reply-recorder.js';
import { EVENT_STREAM_TYPE, route, type Answer, type Context, type RouteDef } from '../route.js';
import { itemPage, itemsOf, namedBy, responseObject, turnsOfInput } from './items.js';
import { PieceQueue, relay } from './pieces.js';
import { ResponseEvents } from './response-events.js';
import { actingUser, header, named } from './routes.js';
import { toolChoiceOf, toolsOf } from './wire.js';

export interface ResponsesDeps {
  readonly responses: ResponsesService;
  /** A `: ping` comment after this long without an event (EVENTS_HEARTBEAT). */
  readonly pingMs: number;
}

const metadataField = { kind: 'json', maxDepth: 2, description: `Up to ${METADATA_KEYS} string values by key (keys at most ${METADATA_KEY_MAX} characters, values at most ${METADATA_VALUE_MAX}).` } as const;

export const responseBody = {
  name: 'CreateResponse',
  nullIsAbsent: true,
  example: { model: 'local-ollama/llama3.1:8b', input: 'Say hello in five words.' },
  fields: {
    model: { kind: 'string', required: true, maxLength: 2 * ID_MAX, wellFormed: true, description: 'A model id of GET /v1/models, or a model name exactly one provider lists.' },
    input: { kind: 'json', required: true, maxDepth: 12, description: 'A string, or items: messages (input_text, input_image), function_call_output, function_call, item_reference.' },
    instructions: { kind: 'string', maxLength: 32 * 1024, description: 'The system message of this response only.' },
    previous_response_id: { kind: 'string', maxLength: ID_MAX, description: 'Continue under that response (a branch when it is not the newest).' },
    conversation: { kind: 'json', maxDepth: 2, description: 'Continue at the head of that conversation: its id, or {id}.' },
    store: { kind: 'boolean', description: 'false: answered and counted, not recorded.' },
    stream: { kind: 'boolean', description: 'true: the response as a stream of events.' },
    background: { kind: 'boolean', description: 'true: answered at once, in_progress; GET follows it, cancel stops it. With store: false, 400 (it could not be followed).' },
    tools: { kind: 'json', maxDepth: 72, description: 'Functions the model may call: {type: "function", name, description?, parameters?}.' },
    tool_choice: { kind: 'json', maxDepth: 4, description: '"auto", "none", "required" or {type: "function", name}.' },
    max_output_tokens: { kind: 'number', integer: true, min: 1, max: 1_000_000, description: 'The most tokens the response may have (past it: incomplete).' },
    temperature: { kind: 'number', integer: false, min: 0, max: 2, description: 'Sampling temperature.' },
    top_p: { kind: 'number', integer: false, min: 0, max: 1, description: 'Nucleus sampling.' },
    metadata: metadataField,
    user: { kind: 'json', maxDepth: 4, description: 'With the users:act scope, a string names the end user.' },
  },
} as const satisfies BodySchema;

export const conversationBody = {
  name: 'CreateConversation',
  nullIsAbsent: true,
  example: { metadata: { topic: 'demo' } },
  fields: {
    items: { kind: 'json', maxDepth: 12, description: 'Items to begin it with.' },
    metadata: metadataField,
  },
} as const satisfies BodySchema;

export const conversationUpdateBody = {
  name: 'UpdateConversation',
  nullIsAbsent: true,
  example: { metadata: { topic: 'renamed' } },
  fields: { metadata: { ...metadataField, required: true } },
} as const satisfies BodySchema;

export const itemsBody = {
  name: 'AddConversationItems',
  nullIsAbsent: true,
  example: { items: [{ type: 'message', role: 'user', content: 'Hello again.' }] },
  fields: { items: { kind: 'json', required: true, maxDepth: 12, description: 'Items to add at the head, in order.' } },
} as const satisfies BodySchema;

const pageQuery = {
  fields: {
    limit: { kind: 'integer', min: 1, max: 100, description: 'Items per page (default 20).' },
    order: { kind: 'string', oneOf: ['asc', 'desc'], description: 'asc (oldest first) or desc (newest first, the default).' },
    after: { kind: 'string', maxLength: 2 * ID_MAX, description: 'The id of the item the page follows.' },
  },
} as const satisfies QuerySchema;

/** OpenAI's metadata: at most 16 string values, keys of at most 64 characters, values of at most 512. */
function metadataOf(v: JsonValue | undefined): JsonObject | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'object' || Array.isArray(v)) throw new ValidationError('metadata must be an object of string values');
  const entries = Object.entries(v as JsonObject);
  if (entries.length > METADATA_KEYS) throw new ValidationError(`metadata must have at most ${METADATA_KEYS} keys`);
  for (const [k, val] of entries) {
    if (k === '' || [...k].length > METADATA_KEY_MAX) throw new ValidationError(`metadata keys must be 1-${METADATA_KEY_MAX} characters`);
    if (typeof val !== 'string' || [...val].length > METADATA_VALUE_MAX) throw new ValidationError(`metadata.${k} must be a string of at most ${METADATA_VALUE_MAX} characters`);
    if (hasLoneSurrogate(k) || hasLoneSurrogate(val)) throw new ValidationError('metadata must be well-formed Unicode (no half of a surrogate pair alone)');
  }
  return v as JsonObject;
}

/** Responses' tools (`{type: "function", name, ...}`, flat) as Chat Completions' (under `function`), for the checks they share. */
function responsesTools(v: JsonValue | undefined): JsonValue | undefined {
  if (!Array.isArray(v)) return v;
  return v.map((t) => (t !== null && typeof t === 'object' && !Array.isArray(t) && t['type'] === 'function' && t['function'] === undefined ? { type: 'function', function: { ...t } } : t));
}

function responsesToolChoice(v: JsonValue | undefined): JsonValue | undefined {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return v;
  const o = v as JsonObject;
  return o['type'] === 'function' && typeof o['name'] === 'string' ? { type: 'function', function: { name: o['name'] } } : v;
}

const json = (value: JsonValue): Answer => ({ status: 200, body: JSON.stringify(value) });

export function responsesRoutes({ responses, pingMs }: ResponsesDeps): RouteDef[] {
  /** The turn an item_reference names, among the caller's. */
  const lookup = (user: string) => async (id: string): Promise<DoorMessage | undefined> => {
    const named = namedBy(id, 'item');
    const kind = /^([a-z]+)_/.exec(id)?.[1] ?? '';
    if (named === undefined || named.kind !== 'turn') throw new ItemNotFound();
    return responses.referenced(user, named.turn, named.index, kind);
  };
  const responseId = (id: string): string => {
    const n = namedBy(id, 'resp');
    if (n?.kind !== 'turn') throw new ResponseNotFound();
    return n.turn;
  };
  const conversationId = (id: string): string => {
    const n = namedBy(id, 'conv');
    if (n?.kind !== 'session') throw new ConversationNotFound();
    return n.session;
  };
  const conversationObject = (s: { _id: string; createdAt: string; metadata?: { readonly [k: string]: string } }): JsonObject => ({
    id: `conv_${s._id}`,
    object: 'conversation',
    created_at: Math.floor(Date.parse(s.createdAt) / 1000),
    metadata: Object.fromEntries(Object.entries(s.metadata ?? {}).filter(([k]) => k !== 'conversationKey')),
  });
  const userOf = (ctx: { principal: Principal | undefined; req: { headers: import('node:http').IncomingHttpHeaders } }, user?: JsonValue): string => actingUser(ctx.principal as Principal, ctx.req.headers, user);
  const pageOf = (q: { limit?: number; order?: string; after?: string }) => ({ limit: q.limit ?? 20, order: (q.order ?? 'desc') as 'asc' | 'desc', after: q.after });

  async function create(ctx: Context<Record<string, never>, typeof responseBody.fields>): Promise<Answer> {
    const b = ctx.body;
    const user = userOf(ctx, b.user);
    const tools = toolsOf(responsesTools(b.tools));
    const toolChoice = toolChoiceOf(responsesToolChoice(b.tool_choice), tools);
    const conv = b.conversation;
    const convObject = conv !== null && typeof conv === 'object' && !Array.isArray(conv) ? (conv as JsonObject) : undefined;
    const convId = typeof conv === 'string' ? conv : typeof convObject?.['id'] === 'string' ? (convObject['id'] as string) : conv === undefined ? undefined : '';
    if (convId === '') throw new ValidationError('conversation must be a conversation id or {id}');
    if (b.previous_response_id !== undefined && convId !== undefined) throw new ValidationError('previous_response_id and conversation cannot both be given');
    // one not stored could never be read back nor cancelled, and would run on unseen for REPLY_MAX_DURATION
    if (b.background === true && b.store === false) throw new ValidationError('background needs store: a response not stored cannot be followed nor cancelled');
    const previousResponse = b.previous_response_id === undefined ? undefined : namedBy(b.previous_response_id, 'resp');
    if (b.previous_response_id !== undefined && previousResponse?.kind !== 'turn') throw new ValidationError('previous_response_id must name one of your responses');
    const options: ReplyOptions = {
      ...(b.temperature !== undefined ? { temperature: b.temperature } : {}),
      ...(b.top_p !== undefined ? { topP: b.top_p } : {}),
    };
    const input = await turnsOfInput(b.input as JsonValue, lookup(user));
    const stream = b.stream === true;
    const background = b.background === true;
    const queue = new PieceQueue(pingMs);
    const abort = new AbortController();
    const socket = ctx.req.socket;
    const onClose = (): void => abort.abort();
    if (!background) socket.once('close', onClose);
    let started: ResponseStarted;
    try {
      started = await responses.create({
        user,
        model: b.model,
        input,
        instructions: b.instructions,
        previousResponse: previousResponse?.kind === 'turn' ? previousResponse.turn : undefined,
        conversation: convId === undefined ? undefined : conversationId(convId),
        store: b.store !== false,
        background,
        options,
        maxOutputTokens: b.max_output_tokens,
        tools,
        toolChoice,
        metadata: metadataOf(b.metadata),
        projectId: named(header(ctx.req.headers, 'x-project-id'), 'X-Project-Id') ?? 'default',
        onPiece: stream ? queue.push : () => undefined,
        signal: abort.signal,
      });
    } catch (e) {
      socket.off('close', onClose);
      queue.stop();
      throw e;
    }
    const begun: Turn = started.kind === 'recorded' ? turnOf(started.reply) : started.reply;
    const end: Promise<Turn> =
      started.kind === 'recorded'
        ? started.done.then(turnOf)
        : started.done.then((u): Turn => ({ ...begun, content: u.content, status: u.status, ...(u.usage !== undefined ? { usage: u.usage } : {}), ...(u.stopReason !== undefined ? { stopReason: u.stopReason } : {}), ...(u.error !== undefined ? { error: { message: u.error } } : {}) }));
    void end.then(
      () => socket.off('close', onClose),
      () => socket.off('close', onClose),
    );
    const headers = started.kind === 'recorded' ? ['x-session-id', started.session, 'x-turn-id', started.reply._id] : [];
    if (stream) {
      const events = new ResponseEvents(begun._id);
      const failed = (): string => events.end({ ...begun, status: 'error', error: { message: 'The response could not be recorded' } });
      return { status: 200, contentType: EVENT_STREAM_TYPE, headers, stream: relay(queue, end, { first: () => events.start(begun), piece: (p) => events.piece(p), last: (t) => events.end(t), failed }, () => abort.abort()) };
    }
    queue.stop();
    if (background) return { status: 200, body: JSON.stringify(responseObject(begun)), headers };
    return { status: 200, body: JSON.stringify(responseObject(await end)), headers };
  }

  const idParam = { id: { description: 'resp_ and the reply turn\'s _id.' } };
  const convParam = { id: { description: 'conv_ and the session\'s _id.' } };
  const itemParams = { ...convParam, item: { description: 'An item id of the conversation (msg_, rs_, fc_, fco_ and a turn\'s _id).' } };
  const common = { tag: 'OpenAI', auth: true } as const;

  return [
    route<Record<string, never>, typeof responseBody.fields>({
      ...common,
      method: 'POST',
      path: '/v1/responses',
      operationId: 'createResponse',
      summary: "OpenAI's Responses: a reply recorded as a turn (previous_response_id: its parent; conversation: at that session's head; neither: a new session)",
      scope: 'sessions:write',
      body: responseBody,
      responses: [{ status: 200, description: 'The response object, or (stream: true) its events', schema: 'Response' }],
      errors: [{ status: 404, description: 'No such model, response or conversation' }, { status: 409, description: 'A reply of the session is already in progress' }],
      handle: create,
    }),
    route({
      ...common,
      method: 'GET',
      path: '/v1/responses/:id',
      operationId: 'getResponse',
      summary: 'One of your responses, as it is now (in_progress while it is generated)',
      scope: 'sessions:read',
      params: idParam,
      responses: [{ status: 200, description: 'The response object', schema: 'Response' }],
      errors: [{ status: 404, description: 'Response not found' }],
      async handle(ctx) {
        const r = await responses.response(userOf(ctx), responseId(ctx.params['id'] as string));
        return json(responseObject(r.turn, r.turn.status === 'streaming' ? { output: itemsOf(r.turn) } : {}));
      },
    }),
    route({
      ...common,
      method: 'DELETE',
      path: '/v1/responses/:id',
      operationId: 'deleteResponse',
      summary: 'Deletes a response: its turn and what grew under it',
      scope: 'sessions:write',
      params: idParam,
      responses: [{ status: 200, description: '{id, object: "response.deleted", deleted: true}', schema: 'OpenAIDeleted' }],
      errors: [{ status: 404, description: 'Response not found' }],
      async handle(ctx) {
        const id = ctx.params['id'] as string;
        await responses.deleteResponse(userOf(ctx), responseId(id));
        return json({ id, object: 'response.deleted', deleted: true });
      },
    }),
    route({
      ...common,
      method: 'POST',
      path: '/v1/responses/:id/cancel',
      operationId: 'cancelResponse',
      summary: 'Stops a response in progress (a background one, or one streaming): recorded cancelled with what it said',
      scope: 'sessions:write',
      params: idParam,
      responses: [{ status: 200, description: 'The response object', schema: 'Response' }],
      errors: [{ status: 404, description: 'Response not found' }, { status: 409, description: 'Turn is not streaming' }],
      async handle(ctx) {
        return json(responseObject(await responses.cancel(userOf(ctx), responseId(ctx.params['id'] as string))));
      },
    }),
    route<typeof pageQuery.fields>({
      ...common,
      method: 'GET',
      path: '/v1/responses/:id/input_items',
      operationId: 'listResponseInputItems',
      summary: 'The items a response was asked with (the turns between the response before it and it), a page at a time',
      scope: 'sessions:read',
      params: idParam,
      query: pageQuery,
      responses: [{ status: 200, description: '{object: "list", data, first_id, last_id, has_more}', schema: 'ItemList' }],
      errors: [{ status: 404, description: 'Response not found' }],
      async handle(ctx) {
        const turns = await responses.inputOf(userOf(ctx), responseId(ctx.params['id'] as string));
        return json(itemPage(turns.flatMap(itemsOf), pageOf(ctx.query)));
      },
    }),
    route<Record<string, never>, typeof conversationBody.fields>({
      ...common,
      method: 'POST',
      path: '/v1/conversations',
      operationId: 'createConversation',
      summary: 'A conversation: a new session of yours, with its first items and metadata',
      scope: 'sessions:write',
      body: conversationBody,
      responses: [{ status: 200, description: 'The conversation object', schema: 'Conversation' }],
      async handle(ctx) {
        const user = userOf(ctx);
        const given = ctx.body.items;
        // a conversation's items are a list (a string is a response's input, not an item); none is none
        if (given !== undefined && !Array.isArray(given)) throw new ValidationError('items must be an array of items');
        const items = given === undefined || given.length === 0 ? [] : await turnsOfInput(given, lookup(user), 'items');
        const metadata = metadataOf(ctx.body.metadata);
        const id = await responses.newSession(user, named(header(ctx.req.headers, 'x-project-id'), 'X-Project-Id') ?? 'default', '', '', items, metadata);
        // its items refused (a quota, a full disk), the conversation is not made: no empty session left behind
        if (items.length > 0) await responses.addItems(user, id, items).catch(async (e: unknown) => {
          await responses.deleteConversation(user, id).catch(() => undefined);
          throw e;
        });
        return json(conversationObject((await responses.session(user, id)).session));
      },
    }),
    route({
      ...common,
      method: 'GET',
      path: '/v1/conversations/:id',
      operationId: 'getConversation',
      summary: 'One of your conversations',
      scope: 'sessions:read',
      params: convParam,
      responses: [{ status: 200, description: 'The conversation object', schema: 'Conversation' }],
      errors: [{ status: 404, description: 'Conversation not found' }],
      async handle(ctx) {
        return json(conversationObject((await responses.session(userOf(ctx), conversationId(ctx.params['id'] as string))).session));
      },
    }),
    route<Record<string, never>, typeof conversationUpdateBody.fields>({
      ...common,
      method: 'POST',
      path: '/v1/conversations/:id',
      operationId: 'updateConversation',
      summary: "Replaces a conversation's metadata",
      scope: 'sessions:write',
      params: convParam,
      body: conversationUpdateBody,
      responses: [{ status: 200, description: 'The conversation object', schema: 'Conversation' }],
      errors: [{ status: 404, description: 'Conversation not found' }],
      async handle(ctx) {
        const user = userOf(ctx);
        const s = await responses.updateMetadata(user, conversationId(ctx.params['id'] as string), metadataOf(ctx.body.metadata) ?? {});
        return json(conversationObject(s));
      },
    }),
    route({
      ...common,
      method: 'DELETE',
      path: '/v1/conversations/:id',
      operationId: 'deleteConversation',
      summary: 'Deletes a conversation: its session and its turns',
      scope: 'sessions:write',
      params: convParam,
      responses: [{ status: 200, description: '{id, object: "conversation.deleted", deleted: true}', schema: 'OpenAIDeleted' }],
      errors: [{ status: 404, description: 'Conversation not found' }],
      async handle(ctx) {
        const id = ctx.params['id'] as string;
        await responses.deleteConversation(userOf(ctx), conversationId(id));
        return json({ id, object: 'conversation.deleted', deleted: true });
      },
    }),
    route<typeof pageQuery.fields>({
      ...common,
      method: 'GET',
      path: '/v1/conversations/:id/items',
      operationId: 'listConversationItems',
      summary: "A conversation's items: the turns of its current path, a page at a time",
      scope: 'sessions:read',
      params: convParam,
      query: pageQuery,
      responses: [{ status: 200, description: '{object: "list", data, first_id, last_id, has_more}', schema: 'ItemList' }],
      errors: [{ status: 404, description: 'Conversation not found' }],
      async handle(ctx) {
        const { turns } = await responses.pathOf(userOf(ctx), conversationId(ctx.params['id'] as string));
        return json(itemPage(turns.flatMap(itemsOf), pageOf(ctx.query)));
      },
    }),
    route<Record<string, never>, typeof itemsBody.fields>({
      ...common,
      method: 'POST',
      path: '/v1/conversations/:id/items',
      operationId: 'addConversationItems',
      summary: "Adds items at a conversation's head, in order",
      scope: 'sessions:write',
      params: convParam,
      body: itemsBody,
      responses: [{ status: 200, description: '{object: "list", data: the items added, first_id, last_id, has_more: false}', schema: 'ItemList' }],
      errors: [{ status: 404, description: 'Conversation not found' }],
      async handle(ctx) {
        const user = userOf(ctx);
        if (!Array.isArray(ctx.body.items)) throw new ValidationError('items must be an array of items');
        const items = await turnsOfInput(ctx.body.items, lookup(user), 'items');
        const made = await responses.addItems(user, conversationId(ctx.params['id'] as string), items);
        const data = made.flatMap(itemsOf);
        return json({ object: 'list', data, first_id: (data[0]?.['id'] as string | undefined) ?? null, last_id: (data[data.length - 1]?.['id'] as string | undefined) ?? null, has_more: false });
      },
    }),
    route({
      ...common,
      method: 'GET',
      path: '/v1/conversations/:id/items/:item',
      operationId: 'getConversationItem',
      summary: 'One item of a conversation',
      scope: 'sessions:read',
      params: itemParams,
      responses: [{ status: 200, description: 'The item', schema: 'Item' }],
      errors: [{ status: 404, description: 'Conversation or item not found' }],
      async handle(ctx) {
        const item = ctx.params['item'] as string;
        const { turns } = await responses.pathOf(userOf(ctx), conversationId(ctx.params['id'] as string));
        const found = turns.flatMap(itemsOf).find((i) => i['id'] === item);
        if (found === undefined) throw new ItemNotFound();
        return json(found);
      },
    }),
    route({
      ...common,
      method: 'DELETE',
      path: '/v1/conversations/:id/items/:item',
      operationId: 'deleteConversationItem',
      summary: 'Deletes an item: its turn and what grew under it (the one difference from OpenAI, whose items are a flat list)',
      scope: 'sessions:write',
      params: itemParams,
      responses: [{ status: 200, description: 'The conversation object', schema: 'Conversation' }],
      errors: [{ status: 404, description: 'Conversation or item not found' }],
      async handle(ctx) {
        const user = userOf(ctx);
        const session = conversationId(ctx.params['id'] as string);
        const n = namedBy(ctx.params['item'] as string, 'item');
        if (n?.kind !== 'turn') throw new ItemNotFound();
        await responses.deleteItem(user, session, n.turn);
        return json(conversationObject((await responses.session(user, session)).session));
      },
    }),
  ];
}
