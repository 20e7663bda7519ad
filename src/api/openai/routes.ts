// The OpenAI door (/v1): the models every provider that can reply serves, and Chat Completions,
// whose every conversation is recorded as a session (src/services/door.ts decides which, and
// where in it). A translator at the edge: a request becomes the door's use case, the reply's
// pieces become OpenAI's chunks. Errors under /v1 are answered in OpenAI's shape by the pipeline.
import type { IncomingHttpHeaders } from 'node:http';
import { hasScope, type Principal } from '../../auth/authenticate.js';
import { STOP_SEQUENCES } from '../../domain/inputs.js';
import { ID_MAX } from '../../domain/limits.js';
import type { JsonValue } from '../../domain/records.js';
import { hasLoneSurrogate, ValidationError, type BodySchema } from '../../domain/schema.js';
import type { ReplyOptions } from '../../providers/wire.js';
import { bodyKey, type CompletionStarted, type DoorService } from '../../services/door.js';
import { turnOf } from '../../services/reply-recorder.js';
import { HttpError } from '../errors.js';
import { EVENT_STREAM_TYPE, route, type Answer, type Context, type RouteDef } from '../route.js';
import { PieceQueue, relay, type Frames } from './pieces.js';
import { ChunkWriter, completionObject, messagesOf, sessionIdOf, toolChoiceOf, toolsOf, type ReplyView } from './wire.js';


export interface OpenAIDeps {
  readonly door: DoorService;
  /** A `: ping` comment after this long without a frame, so proxies keep the stream (EVENTS_HEARTBEAT, 15 s by default). */
  readonly pingMs: number;
}

const messageShape = {
  kind: 'shape',
  description: 'A message: system, developer, user, assistant or tool.',
  fields: {
    role: { kind: 'string', required: true, oneOf: ['system', 'developer', 'user', 'assistant', 'tool'], description: 'Who speaks.' },
    content: { kind: 'json', maxDepth: 8, description: 'A string, or parts (text, image_url; an assistant\'s text or refusal); null for an assistant that only calls tools.' },
    name: { kind: 'string', maxLength: ID_MAX, description: 'Ignored.' },
    tool_calls: { kind: 'json', maxDepth: 8, description: "An assistant's tool calls: {id, type: \"function\", function: {name, arguments}}." },
    tool_call_id: { kind: 'string', maxLength: ID_MAX, description: "A tool message's call." },
  },
} as const;

export const chatCompletionBody = {
  name: 'ChatCompletionRequest',
  nullIsAbsent: true,
  example: { model: 'local-ollama/llama3.1:8b', messages: [{ role: 'user', content: 'Say hello in five words.' }] },
  fields: {
    model: { kind: 'string', required: true, maxLength: 2 * ID_MAX, wellFormed: true, description: 'A model id of GET /v1/models (`<provider slug>/<model>`), or a model name exactly one provider lists.' },
    messages: { kind: 'list', required: true, minItems: 1, maxItems: 100_000, items: messageShape, description: 'The conversation, oldest first.' },
    stream: { kind: 'boolean', description: 'true: an event stream of chat.completion.chunk objects, then [DONE].' },
    stream_options: { kind: 'shape', description: 'Stream options.', fields: { include_usage: { kind: 'boolean', description: 'A last chunk with the usage and no choices.' } } },
    tools: { kind: 'json', maxDepth: 72, description: 'Functions the model may call: {type: "function", function: {name, description?, parameters?}}.' },
    tool_choice: { kind: 'json', maxDepth: 4, description: '"auto", "none", "required" or {type: "function", function: {name}}.' },
    temperature: { kind: 'number', integer: false, min: 0, max: 2, description: 'Sampling temperature.' },
    top_p: { kind: 'number', integer: false, min: 0, max: 1, description: 'Nucleus sampling.' },
    stop: STOP_SEQUENCES,
    seed: { kind: 'number', integer: true, min: Number.MIN_SAFE_INTEGER, max: Number.MAX_SAFE_INTEGER, description: 'For a repeatable answer, where the provider takes one.' },
    max_tokens: { kind: 'number', integer: true, min: 1, max: 1_000_000, description: 'The most tokens the reply may have.' },
    max_completion_tokens: { kind: 'number', integer: true, min: 1, max: 1_000_000, description: 'The same, under its newer name (it wins).' },
    user: { kind: 'json', maxDepth: 4, description: 'With the users:act scope, a string names the end user the conversation is recorded for.' },
    metadata: { kind: 'json', maxDepth: 4, description: 'session_id and conversation_key choose the session, as the X-Session-Id and X-Conversation-Key headers do.' },
    n: { kind: 'json', maxDepth: 1, description: 'Only 1.' },
  },
} as const satisfies BodySchema;

/** A header's value, once (a repeated one is the first). */
export function header(h: IncomingHttpHeaders, name: string): string | undefined {
  const v = h[name];
  return Array.isArray(v) ? v[0] : v;
}

/** A header or metadata value that names something: at most ID_MAX characters, else a 400 naming it. */
export function named(value: unknown, what: string): string | undefined {
  if (value === undefined || value === null || value === '') return undefined;
  if (typeof value !== 'string' || value.length > ID_MAX) throw new ValidationError(`${what} must be a string of at most ${ID_MAX} characters`);
  // what names a session, its owner or its key is kept in the session's JSON (PostgreSQL reads it back)
  if (hasLoneSurrogate(value)) throw new ValidationError(`${what} must be well-formed Unicode (no half of a surrogate pair alone)`);
  return value;
}

/**
 * The user a request is recorded for: the end user a token with `users:act` names (X-User-Id,
 * X-OpenWebUI-User-Id, or a string `user`), else the token's own.
 */
export function actingUser(p: Principal, h: IncomingHttpHeaders, user: JsonValue | undefined): string {
  const given = named(header(h, 'x-user-id') ?? header(h, 'x-openwebui-user-id'), 'X-User-Id');
  const acts = hasScope(p, 'users:act');
  if (given !== undefined) {
    if (!acts) throw new HttpError(403, 'X-User-Id needs a token with the users:act scope');
    return given;
  }
  // a string `user` is OpenAI's end-user tag: only a token that acts for users records it as one
  if (acts && typeof user === 'string' && user.trim() !== '') return named(user, 'user') as string;
  return p.user;
}

/** A reply as the door answers it, from its record. */
/**
 * A provider's refusals of the request as made (malformed, no such model, too large, not
 * processable: a context too long, a max_tokens too high): a waiting request gets 400, as from
 * OpenAI, which no SDK tries again. Its other answers that are no stream and not passing (its
 * key refused, 401 and 403; JSON or HTML for a stream) are 502 that says not to try again.
 */
const REQUEST_REFUSALS: ReadonlySet<number> = new Set([400, 404, 413, 422]);

function viewOf(t: ReturnType<typeof turnOf>): ReplyView {
  return { status: t.status, content: t.content, usage: t.usage, stopReason: t.stopReason, error: t.error };
}

/** The frames of a Chat Completions stream: the role chunk, each piece, then the end (or an error frame and no [DONE]). */
function chunkFrames(w: ChunkWriter): Frames<ReplyView> {
  return {
    first: () => w.role(),
    piece: (p) => (p.kind === 'text' ? w.content(p.text) : w.reasoning(p.text)),
    last: (v) => (v.status === 'complete' ? w.end(v) : ChunkWriter.error(v.error?.message ?? 'The reply was interrupted', v.status === 'error' ? 'provider_error' : 'reply_interrupted')),
    failed: () => ChunkWriter.error('The reply could not be recorded', 'server_error'),
  };
}

export function openaiRoutes({ door, pingMs }: OpenAIDeps): RouteDef[] {
  const modelObject = (e: { id: string; ownedBy: string }, created: number) => ({ id: e.id, object: 'model', created, owned_by: e.ownedBy });

  async function complete(ctx: Context<Record<string, never>, typeof chatCompletionBody.fields>): Promise<Answer> {
    const b = ctx.body;
    const h = ctx.req.headers;
    const p = ctx.principal as Principal;
    if (b.n !== undefined && b.n !== 1) throw new ValidationError('n must be 1: one choice per request');
    const messages = messagesOf(b.messages as JsonValue[]);
    const tools = toolsOf(b.tools);
    const toolChoice = toolChoiceOf(b.tool_choice, tools);
    const stop = b.stop === undefined ? undefined : Array.isArray(b.stop) ? (b.stop as string[]) : [b.stop as string];
    const maxTokens = (b.max_completion_tokens ?? b.max_tokens) as number | undefined;
    const options: ReplyOptions = {
      ...(b.temperature !== undefined ? { temperature: b.temperature as number } : {}),
      ...(b.top_p !== undefined ? { topP: b.top_p as number } : {}),
      ...(maxTokens !== undefined ? { maxTokens } : {}),
      ...(stop !== undefined ? { stop } : {}),
      ...(b.seed !== undefined ? { seed: b.seed as number } : {}),
    };
    const user = actingUser(p, h, b.user);
    const meta: { readonly [k: string]: JsonValue } = b.metadata !== null && typeof b.metadata === 'object' && !Array.isArray(b.metadata) ? (b.metadata as { readonly [k: string]: JsonValue }) : {};
    const sessionId = sessionIdOf(named(header(h, 'x-session-id') ?? meta['session_id'], 'X-Session-Id'));
    const conversationKey = named(header(h, 'x-conversation-key') ?? header(h, 'x-openwebui-chat-id') ?? meta['conversation_key'], 'X-Conversation-Key');
    const projectId = named(header(h, 'x-project-id'), 'X-Project-Id') ?? 'default';
    const task = header(h, 'x-openwebui-task');
    const record = !((task !== undefined && task.trim() !== '') || /^\s*off\s*$/i.test(header(h, 'x-record') ?? ''));
    const idem = named(header(h, 'idempotency-key'), 'Idempotency-Key');
    const retries = Number(header(h, 'x-stainless-retry-count') ?? '0');
    const byBody = bodyKey(user, b);
    const retry = {
      // a key names one logical request (the SDKs send the same on each try); without one, a body
      // the client says it tries again is looked up by its hash
      lookup: idem !== undefined ? `i:${user}:${idem}` : Number.isFinite(retries) && retries > 0 ? byBody : undefined,
      remember: idem !== undefined ? [`i:${user}:${idem}`, byBody] : [byBody],
    };
    const stream = b.stream === true;
    const includeUsage = stream && (b.stream_options as { include_usage?: boolean } | undefined)?.include_usage === true;
    const created = Math.floor(Date.now() / 1000);
    const queue = new PieceQueue(pingMs);
    const abort = new AbortController();
    const socket = ctx.req.socket;
    const onClose = (): void => abort.abort();
    socket.once('close', onClose);
    let started: CompletionStarted;
    try {
      started = await door.complete({ user, model: b.model as string, messages, options, tools, toolChoice, sessionId, conversationKey, projectId, record, retry, onPiece: stream ? queue.push : () => undefined, signal: abort.signal });
    } catch (e) {
      socket.off('close', onClose);
      queue.stop();
      throw e;
    }
    const end: Promise<ReplyView> =
      started.kind === 'recorded'
        ? started.done.then((t) => viewOf(turnOf(t)))
        : started.done.then((u) => ({ status: u.status, content: u.content, usage: u.usage, stopReason: u.stopReason, error: u.error === undefined ? undefined : { message: u.error } }));
    void end.then(
      () => socket.off('close', onClose),
      () => socket.off('close', onClose),
    );
    const id = started.kind === 'recorded' ? `chatcmpl-${started.reply._id}` : `chatcmpl-${created.toString(16)}${Math.random().toString(16).slice(2, 18)}`;
    const recorded = started.kind === 'recorded' ? ['x-session-id', started.session, 'x-turn-id', started.reply._id] : [];
    if (stream) {
      const w = new ChunkWriter(id, created, b.model as string, includeUsage);
      // a retry of a reply already recorded streams it whole at once
      if (started.kind === 'recorded' && started.replayed) {
        void end.then((v) => {
          const { content } = v;
          if (typeof content === 'string') queue.push({ kind: 'text', text: content });
          else for (const part of content) if (part.type === 'text' || part.type === 'reasoning') queue.push({ kind: part.type, text: part.text });
        }, () => undefined);
      }
      return { status: 200, contentType: EVENT_STREAM_TYPE, headers: recorded, stream: relay(queue, end, chunkFrames(w), () => abort.abort()) };
    }
    queue.stop();
    const v = await end;
    // a provider's failure is the answer's (the SDKs try a 5xx again: a retry asks again under the
    // same turn); a refusal the same request would meet again is not to be tried again
    if (v.status !== 'complete') {
      const failure = started.kind === 'recorded' ? started.failure() : (await started.done).failure;
      const ids: [string, string][] = started.kind === 'recorded' ? [['x-session-id', started.session], ['x-turn-id', started.reply._id]] : [];
      const message = v.error?.message ?? 'The reply was interrupted';
      const refused = failure !== undefined && !failure.transient ? failure.status : undefined;
      if (refused !== undefined && REQUEST_REFUSALS.has(refused)) throw new HttpError(400, message, ids);
      throw new HttpError(502, message, refused !== undefined ? [...ids, ['x-should-retry', 'false']] : ids);
    }
    return { status: 200, body: JSON.stringify(completionObject(id, created, b.model as string, v)), headers: recorded };
  }

  return [
    route({
      method: 'GET',
      path: '/v1/models',
      operationId: 'listModels',
      summary: "OpenAI's model list: every model of every provider that can reply, as `<provider slug>/<model>`",
      tag: 'OpenAI',
      auth: true,
      scope: 'providers:read',
      responses: [{ status: 200, description: '{object: "list", data: [{id, object: "model", created, owned_by}]}', schema: 'ModelList' }],
      handle() {
        const ids = door.modelIds();
        return { status: 200, body: JSON.stringify({ object: 'list', data: ids.entries.map((e) => modelObject(e, ids.created)) }) };
      },
    }),
    route({
      method: 'GET',
      path: '/v1/models/*model',
      operationId: 'getModel',
      summary: 'One model of the list (its id with `/`, or `%2F` as the SDKs send it)',
      tag: 'OpenAI',
      auth: true,
      scope: 'providers:read',
      params: { model: { description: 'A model id of GET /v1/models.' } },
      responses: [{ status: 200, description: '{id, object: "model", created, owned_by}', schema: 'Model' }],
      errors: [{ status: 404, description: 'No such model (code model_not_found)' }],
      handle(ctx) {
        const ids = door.modelIds();
        const e = ids.entry(ctx.params['model'] as string);
        if (e === undefined) throw new HttpError(404, `The model ${JSON.stringify(ctx.params['model'])} does not exist`);
        return { status: 200, body: JSON.stringify(modelObject(e, ids.created)) };
      },
    }),
    route<Record<string, never>, typeof chatCompletionBody.fields>({
      method: 'POST',
      path: '/v1/chat/completions',
      operationId: 'createChatCompletion',
      summary: "OpenAI's Chat Completions, waiting or streamed: the conversation is recorded as a session of the caller's (X-Session-Id and X-Turn-Id say which, and the reply's turn)",
      tag: 'OpenAI',
      auth: true,
      scope: 'sessions:write',
      body: chatCompletionBody,
      responses: [
        { status: 200, description: 'The chat.completion object, or (stream: true) an event stream of chat.completion.chunk objects ending with [DONE]', schema: 'ChatCompletion' },
      ],
      errors: [
        { status: 404, description: 'No such model (model_not_found), or X-Session-Id names none of your sessions' },
        { status: 409, description: 'A reply of the session is already in progress' },
        { status: 429, description: 'A quota is exceeded (insufficient_quota, x-should-retry: false)' },
        { status: 502, description: 'The provider failed or refused, or the reply was interrupted (api_error)' },
      ],
      handle: complete,
    }),
  ];
}
