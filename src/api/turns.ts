// The turns of a chat session (/api/v1/chat-sessions/:id/turns): the spec's list (all turns,
// or one branch with `branch`), one turn, recording a turn under a parent, editing or deleting
// one turn (with its descendants), and the text deltas of a streaming turn. Each route calls one
// use case of src/services/turns.ts.
import { deltaBody, turnBody, turnUpdateBody } from '../domain/inputs.js';
import { ID_MAX } from '../domain/limits.js';
import type { DeltaPlace } from '../domain/deltas.js';
import type { JsonObject, TurnContent, TurnRole, TurnStatus, TurnUsage } from '../domain/records.js';
import type { QuerySchema } from '../domain/schema.js';
import type { Branch, TurnEdit, TurnRecord } from '../store/store.js';
import { BASE, caller, etagOf, idParam, ifMatchOf, modified, notFound, pages, paging, turnIdParams, turnNotFound, type SessionDeps } from './common.js';
import { wholeListReply } from './lists.js';
import { DATA_CLOSE, DATA_OPEN, dataBody, doneBody } from './envelope.js';
import { route, type RouteDef } from './route.js';

const DATA_HEAD = Buffer.from(DATA_OPEN);
const DATA_TAIL = Buffer.from(DATA_CLOSE);

const turnsQuery = {
  fields: {
    branch: {
      kind: 'string',
      maxLength: ID_MAX,
      description: 'Only one branch: `head` (the path from the root to the session\'s head) or a turn id (the path from the root to that turn), oldest first.',
    },
    ...paging,
  },
} as const satisfies QuerySchema;

const turnBody_ = (t: TurnRecord): Buffer => Buffer.concat([DATA_HEAD, t.json, DATA_TAIL]);

const notStreaming = { status: 409, description: 'Turn is not streaming' } as const;
const stillStreaming = { status: 409, description: 'Turn is still streaming: the parent (parentId, or the head) is a turn being written; nothing was recorded' } as const;
const turnTooLarge = { status: 413, description: 'Turn too large (its JSON would pass BODY_LIMIT)' } as const;

export function turnRoutes({ turns, cursors, maxTurnBytes }: SessionDeps): RouteDef[] {

  return [
    route<typeof turnsQuery.fields>({
      method: 'GET',
      path: `${BASE}/:id/turns`,
      operationId: 'listTurns',
      summary: "A session's turns, oldest first, all of them or one branch ([] for a session that does not exist)",
      tag: 'Chat sessions',
      auth: true,
      scope: 'sessions:read',
      params: idParam,
      query: turnsQuery,
      wholeList: (q) => q.limit === undefined && q.cursor === undefined,
      responses: [{ status: 200, description: 'The turns', schema: 'TurnList' }],
      errors: [turnNotFound],
      async handle(ctx) {
        const who = caller(ctx);
        const id = ctx.params['id'] as string;
        const { limit, cursor, branch: named } = ctx.query;
        const branch: Branch | undefined = named === undefined ? undefined : named === 'head' ? 'head' : { turnId: named as string };
        // a branch is a list of its own: its cursors do not page another
        const listName = named === undefined ? `turns\n${id}` : `turns\n${id}\n${named as string}`;
        let after;
        if (cursor !== undefined) {
          const [createdAt, _id] = cursors.decode(listName, cursor);
          after = { createdAt, _id };
        }
        if (limit === undefined && cursor === undefined) return wholeListReply(turns.scan(who, id, branch), jsonOfTurn);
        return pages(limit, after, (from, size) => turns.list(who, id, branch, from, size), jsonOfTurn, (next) => cursors.encode(listName, next.createdAt, next._id));
      },
    }),

    route({
      method: 'GET',
      path: `${BASE}/:id/turns/:turnId`,
      operationId: 'getTurn',
      summary: 'Read one turn of a session',
      tag: 'Chat sessions',
      auth: true,
      scope: 'sessions:read',
      params: turnIdParams,
      responses: [{ status: 200, description: 'The turn', schema: 'Turn' }],
      errors: [notFound, turnNotFound],
      async handle(ctx) {
        return { status: 200, body: turnBody_(await turns.get(caller(ctx), ctx.params['id'] as string, ctx.params['turnId'] as string)) };
      },
    }),

    route<Record<string, never>, typeof turnBody.fields>({
      method: 'POST',
      path: `${BASE}/:id/turns`,
      operationId: 'createTurn',
      summary: "Record a turn under a parent (default: the head); it becomes the head and moves the session's updatedAt",
      tag: 'Chat sessions',
      auth: true,
      scope: 'sessions:write',
      params: idParam,
      body: turnBody,
      ifMatch: true,
      responses: [{ status: 201, description: 'The new turn', schema: 'Turn' }],
      errors: [notFound, stillStreaming, modified],
      async handle(ctx) {
        const { role, content, parentId, model, metadata, usage, status } = ctx.body;
        const turn = await turns.append(
          caller(ctx),
          ctx.params['id'] as string,
          {
            role: role as TurnRole,
            content: content as TurnContent,
            parentId: parentId as string | null | undefined,
            model,
            metadata: metadata as JsonObject | undefined,
            usage: usage as unknown as TurnUsage | undefined,
            status: status as TurnStatus | undefined,
          },
          ifMatchOf(ctx),
        );
        return { status: 201, body: turnBody_(turn) };
      },
    }),

    route<Record<string, never>, typeof turnUpdateBody.fields>({
      method: 'PUT',
      path: `${BASE}/:id/turns/:turnId`,
      operationId: 'updateTurn',
      summary: "Change a turn's content, metadata, usage or status (other fields are ignored); it moves the session's updatedAt and ETag",
      tag: 'Chat sessions',
      auth: true,
      scope: 'sessions:write',
      params: turnIdParams,
      body: turnUpdateBody,
      ifMatch: true,
      responses: [{ status: 200, description: "The turn; the ETag header is the session's", schema: 'Turn', etag: true }],
      errors: [notFound, turnNotFound, modified],
      async handle(ctx) {
        const { content, metadata, usage, status } = ctx.body;
        const edit: TurnEdit = {
          ...(content !== undefined ? { content: content as TurnContent } : {}),
          ...(metadata !== undefined ? { metadata } : {}),
          ...(usage !== undefined ? { usage: usage as unknown as TurnUsage } : {}),
          ...(status !== undefined ? { status: status as TurnStatus } : {}),
        };
        const r = await turns.edit(caller(ctx), ctx.params['id'] as string, ctx.params['turnId'] as string, edit, ifMatchOf(ctx));
        return { status: 200, body: turnBody_(r.turn), etag: etagOf(r.session.version) };
      },
    }),

    route<Record<string, never>, typeof deltaBody.fields>({
      method: 'POST',
      path: `${BASE}/:id/turns/:turnId/deltas`,
      operationId: 'appendTurnDelta',
      summary: "Append text to a streaming turn (status streaming), durably; the session's stream gets a turn.delta. The session's updatedAt and ETag do not move",
      tag: 'Chat sessions',
      auth: true,
      scope: 'sessions:write',
      params: turnIdParams,
      body: deltaBody,
      ifMatch: true,
      responses: [{ status: 200, description: 'Appended: where the text went', schema: 'DeltaAppended' }],
      errors: [notFound, turnNotFound, notStreaming, turnTooLarge, modified],
      async handle(ctx) {
        const { text } = ctx.body;
        const d = await turns.delta(caller(ctx), ctx.params['id'] as string, ctx.params['turnId'] as string, text, maxTurnBytes, ifMatchOf(ctx));
        const p = d.places[0] as DeltaPlace;
        const data = { _id: d._id, session: ctx.params['id'] as string, at: p.at, ...(p.part !== undefined ? { part: p.part } : {}) };
        return { status: 200, body: dataBody(JSON.stringify(data)) };
      },
    }),

    route({
      method: 'DELETE',
      path: `${BASE}/:id/turns/:turnId`,
      operationId: 'deleteTurn',
      summary: 'Delete a turn and its descendants; the head moves to its parent when it was among them',
      tag: 'Chat sessions',
      auth: true,
      scope: 'sessions:write',
      params: turnIdParams,
      ifMatch: true,
      responses: [{ status: 200, description: 'Deleted: {success: true, message: "Turn deleted"}; the ETag header is the session\'s', schema: 'TurnDeleted', etag: true }],
      errors: [notFound, turnNotFound, modified],
      async handle(ctx) {
        const s = await turns.delete(caller(ctx), ctx.params['id'] as string, ctx.params['turnId'] as string, ifMatchOf(ctx));
        return { status: 200, body: doneBody('Turn deleted'), etag: etagOf(s.version) };
      },
    }),
  ];
}

const jsonOfTurn = (t: TurnRecord): Buffer => t.json;
