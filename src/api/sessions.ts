// Chat sessions (/api/v1/chat-sessions): the spec's five session endpoints, plus archive,
// unarchive, switching branch (PUT headTurnId) and fork. The turns of a session are in
// ./turns.ts. Handlers validate nothing by hand that the route declares; they decide, and the
// store makes it durable.
import { newObjectId } from '../domain/ids.js';
import { createBody, expiryOf, forkBody, tagsOf, updateBody } from '../domain/inputs.js';
import { NAME_MAX, TAG_MAX, TAGS_MAX } from '../domain/limits.js';
import { DEFAULT_MODE, chatSession, nextTimestamp, type ChatSessionMode } from '../domain/records.js';
import { ValidationError, type QuerySchema } from '../domain/schema.js';
import { foldForSearch } from '../domain/search.js';
import { SessionNotFound, type ArchivedFilter, type SessionFilter, type SessionRecord } from '../store/store.js';
import { Access, BASE, idParam, modified, notFound, pages, paging, sessionReply, stateOf, turnNotFound, user, type SessionDeps } from './access.js';
import { doneBody } from '../http/envelope.js';
import { wholeListReply } from './lists.js';
import { route, type RouteDef } from '../http/route.js';

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

export function sessionRoutes({ store, access: mode, cursors, retentionDays }: SessionDeps): RouteDef[] {
  const access = new Access(mode, retentionDays);

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
        const who = user(ctx);
        const id = ctx.params['id'] as string;
        const check = access.mine(who, ctx.req);
        const current = await store.getSession(id);
        if (access.found(current, who) && current.session.archived === archived) {
          check(stateOf(current));
          return sessionReply(current);
        }
        const s = await store.updateSession(id, (cur) => {
          check(cur);
          const { session } = cur;
          return session.archived === archived ? session : chatSession({ ...session, archived, updatedAt: nextTimestamp(session.updatedAt) });
        });
        return sessionReply(s);
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
      responses: [{ status: 200, description: 'The sessions', schema: 'ChatSessionList' }],
      handle(ctx) {
        const who = user(ctx);
        const { projectId, q, limit, cursor } = ctx.query;
        const tags = ctx.query.tag === undefined ? undefined : [...new Set(ctx.query.tag.map(foldForSearch))];
        const archived = (ctx.query.archived ?? 'false') as ArchivedFilter;
        const ownOnly = projectId === undefined || mode === 'owner';
        const filter: SessionFilter = {
          ...(projectId !== undefined ? { project: projectId } : {}),
          ...(ownOnly ? { user: who } : {}),
          archived,
          ...(q !== undefined ? { nameContains: foldForSearch(q) } : {}),
          ...(tags !== undefined ? { tags } : {}),
          live: access.now(),
        };
        if (limit === undefined && cursor === undefined) return wholeListReply(store.scanSessions(filter), jsonOfSession);
        const listName = `sessions\n${projectId ?? ''}\n${ownOnly ? who : ''}\n${archived}\n${q ?? ''}${tags === undefined ? '' : `\n${JSON.stringify([...tags].sort())}`}`;
        let after;
        if (cursor !== undefined) {
          const [updatedAt, _id] = cursors.decode(listName, cursor);
          after = { updatedAt, _id };
        }
        return pages(limit, after, (from, size) => store.listSessions(filter, from, size), jsonOfSession, (next) => cursors.encode(listName, next.updatedAt, next._id));
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
        const now = Date.now();
        const at = new Date(now).toISOString();
        const s = await store.createSession(
          chatSession({
            _id: newObjectId(now),
            name: b.name ?? '',
            provider: b.providerId as string,
            selectedModel: b.selectedModel as string,
            mode: (b.mode as ChatSessionMode | undefined) ?? DEFAULT_MODE,
            user: user(ctx),
            project: b.projectId as string,
            createdAt: at,
            updatedAt: at,
            archived: false,
            headTurnId: null,
            ...(b.tags !== undefined ? { tags: tagsOf(b.tags as string[]) } : {}),
            ...(b.metadata !== undefined ? { metadata: b.metadata } : {}),
            ...(b.expiresAt !== undefined ? { expiresAt: expiryOf(b.expiresAt) } : {}),
          }),
        );
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
        const who = user(ctx);
        return store.getSession(ctx.params['id'] as string).then((r) => {
          if (!access.found(r, who)) throw new SessionNotFound();
          return sessionReply(r);
        });
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
        const who = user(ctx);
        const id = ctx.params['id'] as string;
        const check = access.mine(who, ctx.req);
        const { name, provider, selectedModel, mode: newMode, headTurnId, metadata } = ctx.body;
        const tags = ctx.body.tags === undefined ? undefined : tagsOf(ctx.body.tags as string[]);
        const expiresAt = ctx.body.expiresAt === undefined ? undefined : expiryOf(ctx.body.expiresAt);
        const unchanged = [name, provider, selectedModel, newMode, headTurnId, tags, metadata, expiresAt].every((v) => v === undefined);
        if (unchanged) {
          const current = await store.getSession(id);
          if (!access.found(current, who)) throw new SessionNotFound();
          check(stateOf(current));
          return sessionReply(current);
        }
        const s = await store.updateSession(
          id,
          (cur) => {
            check(cur);
            if (headTurnId !== undefined && cur.turn(headTurnId) === undefined) throw new ValidationError('headTurnId must be a turn of this session');
            const was = cur.session;
            return chatSession({
              ...was,
              name: name ?? was.name,
              provider: provider ?? was.provider,
              selectedModel: selectedModel ?? was.selectedModel,
              mode: (newMode as ChatSessionMode | undefined) ?? was.mode,
              headTurnId: headTurnId ?? was.headTurnId,
              updatedAt: nextTimestamp(was.updatedAt),
              ...(tags !== undefined ? { tags } : {}),
              ...(metadata !== undefined ? { metadata } : {}),
              ...(expiresAt !== undefined ? { expiresAt } : {}),
            });
          },
          headTurnId === undefined ? undefined : { headTurnId },
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
        await store.deleteSession(ctx.params['id'] as string, access.mine(user(ctx), ctx.req));
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
        const who = user(ctx);
        const check = access.mine(who, ctx.req);
        const { turnId, name } = ctx.body;
        const now = Date.now();
        const at = new Date(now).toISOString();
        const s = await store.forkSession(ctx.params['id'] as string, turnId, who, (source) => {
          check(source);
          const from = source.session;
          return chatSession({
            _id: newObjectId(now),
            name: name ?? from.name,
            provider: from.provider,
            selectedModel: from.selectedModel,
            mode: from.mode,
            user: who,
            project: from.project,
            createdAt: at,
            updatedAt: at,
            archived: false,
            headTurnId: null,
            ...(from.tags !== undefined ? { tags: from.tags } : {}),
            ...(from.metadata !== undefined ? { metadata: from.metadata } : {}),
          });
        });
        return sessionReply(s, 201);
      },
    }),
  ];
}

const jsonOfSession = (r: SessionRecord): string => r.json;
