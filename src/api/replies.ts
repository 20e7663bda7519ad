// Talking to a model (POST /api/v1/chat-sessions/:id/messages and .../replies), and stopping a
// reply (POST .../turns/:turnId/cancel). The reply is src/services/replies.ts's; here is how it
// is answered: an event stream (Accept: text/event-stream), 202 at once (background), or 201
// once it is recorded.
import { DomainError } from '../domain/errors.js';
import { messageBody, replyBody } from '../domain/inputs.js';
import type { TurnContent } from '../domain/records.js';
import type { ReplyOptions, ToolChoice, ToolSpec } from '../providers/wire.js';
import type { JsonObject, JsonValue } from '../domain/records.js';
import type { Caller } from '../services/access.js';
import type { ReplyService } from '../services/replies.js';
import type { ReplyRequest } from '../services/reply-request.js';
import type { TurnRecord } from '../store/store.js';
import type { FeedService } from '../services/feed.js';
import { BASE, caller, idParam, ifMatchOf, modified, notFound, turnIdParams, turnNotFound } from './common.js';
import { DATA_CLOSE, DATA_OPEN } from './envelope.js';
import { route, type Answer, type RouteDef } from './route.js';

export interface ReplyDeps {
  readonly replies: ReplyService;
  /** The live feed, for event-stream answers; undefined with EVENTS=off. */
  readonly feed: FeedService | undefined;
}

const cannotReply = { status: 409, description: "The session's provider is not configured or cannot reply (its type), or the model is not one of its `models`; or A reply is already in progress (one at a time per session). Nothing was recorded." } as const;
const tooMany = { status: 503, description: 'Too many replies in progress (REPLIES_MAX), with Retry-After; Server is low on memory (MEMORY_LIMIT, or what the replies in progress hold unfinished), with Retry-After; or Server is busy (MAX_STREAMS, for an event stream)' } as const;
const noStreams = { status: 406, description: 'An event stream was asked for (Accept: text/event-stream) and EVENTS=off' } as const;

const DATA_HEAD = Buffer.from(DATA_OPEN);
const TURN_KEY = Buffer.from('{"turn":');
const REPLY_KEY = Buffer.from(',"reply":');
const CLOSE = Buffer.from(`}${DATA_CLOSE}`);

/** `{"success":true,"data":{"turn":...,"reply":...}}` around the turns' JSON as the store keeps it. */
function startedBody(turn: TurnRecord | undefined, reply: TurnRecord): Buffer {
  return Buffer.concat([DATA_HEAD, TURN_KEY, turn === undefined ? Buffer.from('null') : turn.json, REPLY_KEY, reply.json, CLOSE]);
}

/** What a message or reply request brings beside its body: who asks, how it wants the answer. */
interface Asked {
  readonly who: Caller;
  readonly session: string;
  readonly ifMatch: string | undefined;
  /** Accept: text/event-stream. */
  readonly stream: boolean;
  readonly background: boolean;
  /** When the caller's token stops being accepted (an event stream ends then). */
  readonly untilMs: number | undefined;
  readonly reqId: string;
}

function askedOf(ctx: { req: { headers: { accept?: string | undefined; 'if-match'?: string | undefined } }; principal: Parameters<typeof caller>[0]['principal']; params: Readonly<Record<string, string>>; requestId: string }, background: boolean | undefined): Asked {
  return {
    who: caller(ctx),
    session: ctx.params['id'] as string,
    ifMatch: ifMatchOf(ctx),
    stream: /\btext\/event-stream\b/i.test(ctx.req.headers.accept ?? ''),
    background: background === true,
    untilMs: ctx.principal?.expiresAtMs,
    reqId: ctx.requestId,
  };
}

function optionsOf(o: { temperature?: number; maxTokens?: number; topP?: number; stop?: unknown } | undefined): ReplyOptions | undefined {
  if (o === undefined) return undefined;
  const stop = o.stop === undefined ? undefined : Array.isArray(o.stop) ? (o.stop as string[]) : [o.stop as string];
  return {
    ...(o.temperature !== undefined ? { temperature: o.temperature } : {}),
    ...(o.maxTokens !== undefined ? { maxTokens: o.maxTokens } : {}),
    ...(o.topP !== undefined ? { topP: o.topP } : {}),
    ...(stop !== undefined ? { stop } : {}),
  };
}

/** The tools and tool choice of a request body (as its schema checked them), as the reply takes them. */
function toolsOf(b: { readonly tools?: readonly JsonValue[] | undefined; readonly toolChoice?: JsonValue | undefined }): { tools?: ToolSpec[]; toolChoice?: ToolChoice } {
  const tools = b.tools?.map((v): ToolSpec => {
    const t = v as JsonObject;
    return { name: t['name'] as string, ...(t['description'] !== undefined ? { description: t['description'] as string } : {}), ...(t['parameters'] !== undefined ? { parameters: t['parameters'] as JsonObject } : {}) };
  });
  return { ...(tools !== undefined ? { tools } : {}), ...(b.toolChoice !== undefined ? { toolChoice: b.toolChoice as ToolChoice } : {}) };
}

export function replyRoutes({ replies, feed }: ReplyDeps): RouteDef[] {
  /** Starts the reply and answers as the request asked. */
  async function answer(a: Asked, req: ReplyRequest): Promise<Answer> {
    if (!a.stream) {
      const started = await replies.begin(a.who, a.session, req, a.ifMatch);
      if (a.background) return { status: 202, body: startedBody(started.turn, started.reply) };
      return { status: 201, body: startedBody(started.turn, await started.done) };
    }
    if (feed === undefined) throw new DomainError('not_acceptable', 'Event streams are off (EVENTS=off): ask without Accept: text/event-stream');
    const stream = await feed.followReply(a.who, a.session, { untilMs: a.untilMs, reqId: a.reqId });
    try {
      const started = await replies.begin(a.who, a.session, req, a.ifMatch);
      stream.follow(started.turn?._id, started.reply._id);
    } catch (e) {
      stream.opened.eventStream.cancel();
      throw e;
    }
    return stream.opened;
  }

  return [
    route<Record<string, never>, typeof messageBody.fields>({
      method: 'POST',
      path: `${BASE}/:id/messages`,
      operationId: 'sendMessage',
      summary: "Record a user turn and ask the session's model for a reply under it: an event stream (Accept: text/event-stream), 202 at once (background), or 201 once the reply is recorded",
      tag: 'Chat sessions',
      auth: true,
      scope: 'sessions:write',
      params: idParam,
      body: messageBody,
      ifMatch: true,
      responses: [
        { status: 201, description: 'The user turn and the reply as recorded at its end (complete, error or interrupted)', schema: 'ReplyStarted' },
        { status: 202, description: 'background: the user turn and the reply as it began (streaming)', schema: 'ReplyStarted' },
        { status: 200, description: 'Accept: text/event-stream: turn.created (the user turn), turn.created (the reply), turn.delta for each piece, turn.updated (the reply as recorded at its end); then the stream closes', schema: 'EventStream' },
      ],
      errors: [notFound, modified, cannotReply, noStreams, tooMany],
      handle(ctx) {
        const b = ctx.body;
        return answer(askedOf(ctx, b.background), { content: b.content as TurnContent, role: b.role as 'user' | 'tool' | undefined, parentId: b.parentId, model: b.model, options: optionsOf(b.options as Parameters<typeof optionsOf>[0]), ...toolsOf(b) });
      },
    }),

    route<Record<string, never>, typeof replyBody.fields>({
      method: 'POST',
      path: `${BASE}/:id/replies`,
      operationId: 'askReply',
      summary: "Ask the session's model for a reply to a turn already there (default: the head): a new reply to a user turn is a sibling of its earlier ones (regenerate)",
      tag: 'Chat sessions',
      auth: true,
      scope: 'sessions:write',
      params: idParam,
      body: replyBody,
      ifMatch: true,
      responses: [
        { status: 201, description: 'The reply as recorded at its end (`turn` is null)', schema: 'ReplyStarted' },
        { status: 202, description: 'background: the reply as it began (streaming)', schema: 'ReplyStarted' },
        { status: 200, description: 'Accept: text/event-stream: turn.created (the reply), turn.delta for each piece, turn.updated (the reply as recorded at its end)', schema: 'EventStream' },
      ],
      errors: [notFound, modified, cannotReply, noStreams, tooMany],
      handle(ctx) {
        const b = ctx.body;
        return answer(askedOf(ctx, b.background), { parentId: b.parentId, model: b.model, options: optionsOf(b.options as Parameters<typeof optionsOf>[0]), ...toolsOf(b) });
      },
    }),

    route({
      method: 'POST',
      path: `${BASE}/:id/turns/:turnId/cancel`,
      operationId: 'cancelReply',
      summary: "Stop a streaming turn: the provider's request is closed, the text so far recorded with status interrupted, then the turn is answered",
      tag: 'Chat sessions',
      auth: true,
      scope: 'sessions:write',
      params: turnIdParams,
      responses: [{ status: 200, description: 'The turn as recorded', schema: 'Turn' }],
      errors: [notFound, turnNotFound, { status: 409, description: 'Turn is not streaming' }],
      async handle(ctx) {
        const t = await replies.cancel(caller(ctx), ctx.params['id'] as string, ctx.params['turnId'] as string);
        return { status: 200, body: Buffer.concat([DATA_HEAD, t.json, Buffer.from(DATA_CLOSE)]) };
      },
    }),
  ];
}

