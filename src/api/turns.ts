// The turns of a chat session (/api/v1/chat-sessions/:id/turns): the spec's list (all turns,
// or one branch with `branch`), recording a turn under a parent, and editing or deleting one
// turn (with its descendants), and the text deltas of a streaming turn.
import { newObjectId } from '../domain/ids.js';
import { deltaBody, turnBody, turnUpdateBody } from '../domain/inputs.js';
import { ID_MAX } from '../domain/limits.js';
import { DEFAULT_TURN_STATUS, nextTimestamp, type TurnContent, type TurnRole, type TurnStatus, type TurnUsage } from '../domain/records.js';
import { ValidationError, type QuerySchema } from '../domain/schema.js';
import { SessionNotFound, TurnNotFound, type Branch, type SessionAtWrite, type TurnEdit, type TurnRecord } from '../store/store.js';
import { Access, BASE, etagOf, idParam, modified, notFound, pages, paging, stateOf, turnIdParams, turnNotFound, user, type SessionDeps } from './access.js';
import { pageReply, wholeListReply } from './lists.js';
import { DATA_CLOSE, DATA_OPEN, dataBody, doneBody } from '../http/envelope.js';
import { route, type RouteDef } from '../http/route.js';

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

/**
 * The createdAt and _id of a new turn: now, never before the session's updatedAt or its newest
 * turn. Turns recorded within one millisecond share it, their ids in the order they were made
 * (a burst of turns is never stamped ahead of the clock); on a tie with the newest turn whose id
 * does not sort before the new one (ids sort in creation order within one process, not across a
 * restart with the clock set back) it is a millisecond later. The version still moves with every
 * turn: the newest turn is part of it.
 */
function turnStamp(current: SessionAtWrite, nowMs: number = Date.now()): { createdAt: string; _id: string } {
  const now = new Date(nowMs).toISOString();
  let at = current.session.updatedAt > now ? current.session.updatedAt : now;
  const last = current.lastTurn;
  if (last !== undefined && last.createdAt > at) at = last.createdAt;
  let _id = newObjectId(Date.parse(at));
  if (last !== undefined && last.createdAt === at && _id <= last._id) {
    at = nextTimestamp(at, nowMs);
    _id = newObjectId(Date.parse(at));
  }
  return { createdAt: at, _id };
}

const turnBody_ = (t: TurnRecord): Buffer => Buffer.concat([DATA_HEAD, t.json, DATA_TAIL]);

const notStreaming = { status: 409, description: 'Turn is not streaming' } as const;
const turnTooLarge = { status: 413, description: 'Turn too large (its JSON would pass BODY_LIMIT)' } as const;

export function turnRoutes({ store, access: mode, cursors, maxTurnBytes, retentionDays }: SessionDeps): RouteDef[] {
  const access = new Access(mode, retentionDays);

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
      responses: [{ status: 200, description: 'The turns', schema: 'TurnList' }],
      errors: [turnNotFound],
      async handle(ctx) {
        const id = ctx.params['id'] as string;
        const { limit, cursor, branch: named } = ctx.query;
        const branch: Branch | undefined = named === undefined ? undefined : named === 'head' ? 'head' : { turnId: named };
        // a branch is a list of its own: its cursors do not page another
        const listName = named === undefined ? `turns\n${id}` : `turns\n${id}\n${named}`;
        let after;
        if (cursor !== undefined) {
          const [createdAt, _id] = cursors.decode(listName, cursor);
          after = { createdAt, _id };
        }
        const visibleHere = access.found(await store.getSession(id), user(ctx));
        if (limit === undefined && cursor === undefined) return wholeListReply(visibleHere ? store.scanTurns(id, branch) : noTurns(), jsonOfTurn);
        if (!visibleHere) return limit === undefined ? wholeListReply(noTurns(), jsonOfTurn) : pageReply([], undefined);
        return pages(limit, after, (from, size) => store.listTurns(id, from, size, branch), jsonOfTurn, (next) => cursors.encode(listName, next.createdAt, next._id));
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
      errors: [notFound, modified],
      async handle(ctx) {
        const who = user(ctx);
        const check = access.mine(who, ctx.req);
        const { role, content, parentId, model, metadata, usage, status } = ctx.body;
        const turn = await store.appendTurn(
          ctx.params['id'] as string,
          (cur) => {
            check(cur);
            if (typeof parentId === 'string' && cur.turn(parentId) === undefined) throw new ValidationError('parentId must be a turn of this session');
            const { createdAt, _id } = turnStamp(cur);
            return {
              _id,
              session: cur.session._id,
              parentId: parentId === undefined ? cur.session.headTurnId : parentId,
              user: who,
              role: role as TurnRole,
              content: content as TurnContent,
              ...(model !== undefined ? { model } : {}),
              ...(metadata !== undefined ? { metadata } : {}),
              ...(usage !== undefined ? { usage: usage as unknown as TurnUsage } : {}),
              status: (status as TurnStatus | undefined) ?? DEFAULT_TURN_STATUS,
              createdAt,
            };
          },
          parentId === undefined ? undefined : { parentId },
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
        const who = user(ctx);
        const id = ctx.params['id'] as string;
        const turnId = ctx.params['turnId'] as string;
        const check = access.mine(who, ctx.req);
        const { content, metadata, usage, status } = ctx.body;
        const edit: TurnEdit = {
          ...(content !== undefined ? { content: content as TurnContent } : {}),
          ...(metadata !== undefined ? { metadata } : {}),
          ...(usage !== undefined ? { usage: usage as unknown as TurnUsage } : {}),
          ...(status !== undefined ? { status: status as TurnStatus } : {}),
        };
        if (Object.keys(edit).length === 0) {
          // nothing to change: the turn as it is, and no write
          const current = await store.getSession(id);
          if (!access.found(current, who)) throw new SessionNotFound();
          check(stateOf(current));
          const turn = await store.getTurn(id, turnId);
          if (turn === undefined) throw new TurnNotFound();
          return { status: 200, body: turnBody_(turn), etag: etagOf(current.version) };
        }
        const r = await store.updateTurn(id, turnId, check, () => edit);
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
        const d = await store.appendDelta(ctx.params['id'] as string, ctx.params['turnId'] as string, access.mine(user(ctx), ctx.req), text, maxTurnBytes);
        const p = d.place;
        const data = { _id: d.turn._id, session: ctx.params['id'] as string, at: p.at, ...(p.part !== undefined ? { part: p.part } : {}) };
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
        const s = await store.deleteTurn(ctx.params['id'] as string, ctx.params['turnId'] as string, access.mine(user(ctx), ctx.req));
        return { status: 200, body: doneBody('Turn deleted'), etag: etagOf(s.version) };
      },
    }),
  ];
}

const jsonOfTurn = (t: TurnRecord): Buffer => t.json;

async function* noTurns(): AsyncIterable<readonly TurnRecord[]> {
  // a session that does not exist (or is not the caller's) has no turns
}
