// Chat sessions (/api/v1/chat-sessions): the spec's five session endpoints, plus archive,
// unarchive, switching branch (PUT headTurnId) and fork. The turns of a session are in
// ./turns.ts. Each route takes what it declares (validated by the pipeline), calls one use case
// of src/services/sessions.ts and answers.
import { createBody, forkBody, updateBody } from '../domain/inputs.js';
import { NAME_MAX, TAG_MAX, TAGS_MAX } from '../domain/limits.js';
import type { SessionMetadata } from '../domain/records.js';
import type { QuerySchema } from '../domain/schema.js';
import type { ArchivedFilter, SessionRecord } from '../store/store.js';
import type { ListQuery } from '../services/sessions.js';
import { BASE, caller, idParam, ifMatchOf, modified, notFound, pages, paging, sessionReply, turnNotFound, type SessionDeps } from './common.js';
import { doneBody } from './envelope.js';
import { wholeListReply } from './lists.js';
import { route, type RouteDef } from './route.js';

const listQuery = {
  fields: {
    projectId: { kind: 'string', description: 'When present and non-empty: the sessions of this project; otherwise the caller\'s own sessions.' },
    q: { kind: 'string', maxLength: NAME_MAX, description: 'Only sessions whose name contains this text, ignoring case.' },
    archived: { kind: 'string', oneOf: ['false', 'true', 'all'], description: 'false (default): active sessions; true: only archived ones; all: both.' },
    tag: {
      kind: 'repeated',
      maxItems: TAGS_MAX,
      item: { kind: 'string', maxLength: TAG_MAX, description: 'A tag.' },
      description: 'Only sessions with this tag, ignoring case; repeat it (tag=a&tag=b) for sessions with all of them.',
    },
    ...paging,
  },
} as const satisfies QuerySchema;

export function sessionRoutes({ sessions, cursors }: SessionDeps): RouteDef[] {
  const setArchived = (archived: boolean) =>
    route({
      method: 'POST',
      path: `${BASE}/:id/${archived ? 'archive' : 'unarchive'}`,
      operationId: archived ? 'archiveChatSession' : 'unarchiveChatSession',
      summary: archived ? 'Archive a session (lists leave it out unless archived=true|all)' : 'Bring an archived session back into lists',
      tag: 'Chat sessions',
      auth: true,
      scope: 'sessions:write',
      params: idParam,
      ifMatch: true,
      responses: [{ status: 200, description: 'The session', schema: 'ChatSession' }],
      errors: [notFound, modified],
      async handle(ctx) {
        return sessionReply(await sessions.setArchived(caller(ctx), ctx.params['id'] as string, archived, ifMatchOf(ctx)));
      },
    });

  return [
    route<typeof listQuery.fields>({
      method: 'GET',
      path: BASE,
      operationId: 'listChatSessions',
      summary: "List a project's sessions (projectId) or the caller's own, newest first",
      tag: 'Chat sessions',
      auth: true,
      scope: 'sessions:read',
      query: listQuery,
      wholeList: (q) => q.limit === undefined && q.cursor === undefined,
      responses: [{ status: 200, description: 'The sessions', schema: 'ChatSessionList' }],
      handle(ctx) {
        const who = caller(ctx);
        const { projectId, q, limit, cursor } = ctx.query;
        const query: ListQuery = { projectId, q, archived: (ctx.query.archived ?? 'false') as ArchivedFilter, tags: ctx.query.tag };
        if (limit === undefined && cursor === undefined) return wholeListReply(sessions.scan(who, query), jsonOfSession);
        // a cursor pages the list it came from only: its name holds the list's filter
        const f = sessions.filterOf(who, query);
        const listName = `sessions\n${projectId ?? ''}\n${f.user ?? ''}\n${query.archived}\n${q ?? ''}${f.tags === undefined ? '' : `\n${JSON.stringify([...f.tags].sort())}`}`;
        let after;
        if (cursor !== undefined) {
          const [updatedAt, _id] = cursors.decode(listName, cursor);
          after = { updatedAt, _id };
        }
        return pages(limit, after, (from, size) => sessions.list(who, query, from, size), jsonOfSession, (next) => cursors.encode(listName, next.updatedAt, next._id));
      },
    }),

    route<Record<string, never>, typeof createBody.fields>({
      method: 'POST',
      path: BASE,
      operationId: 'createChatSession',
      summary: 'Create a session bound to a project, a provider and a model',
      tag: 'Chat sessions',
      auth: true,
      scope: 'sessions:write',
      body: createBody,
      responses: [{ status: 201, description: 'The new session', schema: 'ChatSession' }],
      async handle(ctx) {
        const b = ctx.body;
        const s = await sessions.create(caller(ctx), {
          projectId: b.projectId as string,
          providerId: b.providerId as string,
          selectedModel: b.selectedModel as string,
          mode: b.mode,
          name: b.name,
          tags: b.tags as string[] | undefined,
          metadata: b.metadata as SessionMetadata | undefined,
          expiresAt: b.expiresAt,
          instructions: b.instructions as string | undefined,
        });
        return sessionReply(s, 201);
      },
    }),

    route({
      method: 'GET',
      path: `${BASE}/:id`,
      operationId: 'getChatSession',
      summary: 'Read one session',
      tag: 'Chat sessions',
      auth: true,
      scope: 'sessions:read',
      params: idParam,
      responses: [{ status: 200, description: 'The session', schema: 'ChatSession' }],
      errors: [notFound],
      handle(ctx) {
        const s = sessions.getNow(caller(ctx), ctx.params['id'] as string);
        return s instanceof Promise ? s.then((r) => sessionReply(r)) : sessionReply(s);
      },
    }),

    route<Record<string, never>, typeof updateBody.fields>({
      method: 'PUT',
      path: `${BASE}/:id`,
      operationId: 'updateChatSession',
      summary: 'Change name, provider, selectedModel or mode, or switch branch with headTurnId (other fields are ignored)',
      tag: 'Chat sessions',
      auth: true,
      scope: 'sessions:write',
      params: idParam,
      body: updateBody,
      ifMatch: true,
      responses: [{ status: 200, description: 'The updated session', schema: 'ChatSession' }],
      errors: [notFound, modified],
      async handle(ctx) {
        const b = ctx.body;
        const s = await sessions.update(
          caller(ctx),
          ctx.params['id'] as string,
          { name: b.name, provider: b.provider, selectedModel: b.selectedModel, mode: b.mode, headTurnId: b.headTurnId, tags: b.tags as string[] | undefined, metadata: b.metadata as SessionMetadata | undefined, expiresAt: b.expiresAt, instructions: b.instructions },
          ifMatchOf(ctx),
        );
        return sessionReply(s);
      },
    }),

    route({
      method: 'DELETE',
      path: `${BASE}/:id`,
      operationId: 'deleteChatSession',
      summary: 'Delete a session and its turns',
      tag: 'Chat sessions',
      auth: true,
      scope: 'sessions:write',
      params: idParam,
      ifMatch: true,
      responses: [{ status: 200, description: 'Deleted: {success: true, message: "Chat session deleted"}', schema: 'Deleted' }],
      errors: [notFound, modified],
      async handle(ctx) {
        await sessions.delete(caller(ctx), ctx.params['id'] as string, ifMatchOf(ctx));
        return { status: 200, body: doneBody('Chat session deleted') };
      },
    }),

    setArchived(true),
    setArchived(false),

    route<Record<string, never>, typeof forkBody.fields>({
      method: 'POST',
      path: `${BASE}/:id/fork`,
      operationId: 'forkChatSession',
      summary: "A new session of the caller's holding copies of the path from the root to a turn (default: the head)",
      tag: 'Chat sessions',
      auth: true,
      scope: 'sessions:write',
      params: idParam,
      body: forkBody,
      ifMatch: true,
      responses: [{ status: 201, description: 'The new session, with forkedFrom', schema: 'ChatSession' }],
      errors: [notFound, turnNotFound, modified],
      async handle(ctx) {
        const { turnId, name } = ctx.body;
        return sessionReply(await sessions.fork(caller(ctx), ctx.params['id'] as string, { turnId, name }, ifMatchOf(ctx)), 201);
      },
    }),
  ];
}

const jsonOfSession = (r: SessionRecord): string => r.json;
