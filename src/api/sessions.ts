// Chat sessions (/api/v1/chat-sessions): the spec's six endpoints, plus recording a turn,
// archive and unarchive. Handlers validate nothing by hand that the route declares; they
// decide, and the store makes it durable.
import type { IncomingMessage } from 'node:http';
import type { AccessMode } from '../config.js';
import type { Principal } from '../auth/authenticate.js';
import { newObjectId } from '../domain/ids.js';
import { createBody, NAME_MAX, turnBody, updateBody } from '../domain/inputs.js';
import { DEFAULT_MODE, chatSession, nextTimestamp, type ChatSession, type ChatSessionMode, type TurnRole } from '../domain/records.js';
import type { QuerySchema } from '../domain/schema.js';
import { foldForSearch } from '../domain/search.js';
import { PreconditionFailed, SessionNotFound, type ArchivedFilter, type Current, type Page, type SessionFilter, type SessionRecord, type Store, type TurnRecord } from '../store/store.js';
import type { CursorCodec } from './cursor.js';
import { pageReply, wholeListReply } from './lists.js';
import { DATA_OPEN, dataBody, route, type Answer, type Reply, type RouteDef } from './route.js';

export interface SessionDeps {
  readonly store: Store;
  readonly access: AccessMode;
  readonly cursors: CursorCodec;
}

const DATA_HEAD = Buffer.from(DATA_OPEN);
const DATA_TAIL = Buffer.from('}');

const paging = {
  limit: { kind: 'integer', min: 1, max: 1000, description: 'Page size. When given, the answer carries `nextCursor` (null on the last page).' },
  cursor: { kind: 'string', description: 'The `nextCursor` of the previous page of the same list.' },
} as const;

const listQuery = {
  fields: {
    projectId: { kind: 'string', description: 'When present and non-empty: the sessions of this project; otherwise the caller\'s own sessions.' },
    q: { kind: 'string', maxLength: NAME_MAX, description: 'Only sessions whose name contains this text, ignoring case.' },
    archived: { kind: 'string', oneOf: ['false', 'true', 'all'], description: 'false (default): active sessions; true: only archived ones; all: both.' },
    ...paging,
  },
} as const satisfies QuerySchema;

const turnsQuery = { fields: { ...paging } } as const satisfies QuerySchema;

const idParam = { id: { description: 'Chat session id.', blankMessage: 'Session ID is required' } } as const;

/** The ETag of a session: its version tag, which any change to it (a field, a turn) moves. */
export function etagOf(version: string): string {
  return `"${version}"`;
}

/** RFC 9110 If-Match with strong comparison: `*` matches any current session. */
function checkIfMatch(req: IncomingMessage, current: Current): void {
  const header = req.headers['if-match'];
  if (header === undefined) return;
  if (header.trim() === '*') return;
  const tag = etagOf(current.version());
  for (const part of header.split(',')) if (part.trim() === tag) return;
  throw new PreconditionFailed();
}

/**
 * The createdAt and _id of a new turn: now, never before the session's updatedAt or the
 * newest turn; on a tie with the newest turn, the new id must sort after it (ids sort in
 * creation order within one process, but not across a restart with the clock set back).
 */
function turnStamp(current: Current, nowMs: number = Date.now()): { createdAt: string; _id: string } {
  let at = nextTimestamp(current.session.updatedAt, nowMs);
  const last = current.lastTurn;
  if (last !== undefined && last.createdAt > at) at = last.createdAt;
  let _id = newObjectId(Date.parse(at));
  if (last !== undefined && last.createdAt === at && _id <= last._id) {
    at = new Date(Date.parse(at) + 1).toISOString();
    _id = newObjectId(Date.parse(at));
  }
  return { createdAt: at, _id };
}

function user(ctx: { principal: Principal | undefined }): string {
  if (ctx.principal === undefined) throw new Error('route declared without auth reached a handler that needs a user');
  return ctx.principal.user;
}

export function sessionRoutes({ store, access, cursors }: SessionDeps): RouteDef[] {
  /** Whether the caller may see a session: under ACCESS=owner another user's session does not exist. */
  const visible = (s: ChatSession, who: string): boolean => access === 'shared' || s.user === who;
  const found = (r: SessionRecord | undefined, who: string): r is SessionRecord => r !== undefined && visible(r.session, who);
  const mine = (who: string, req: IncomingMessage) => (current: Current): void => {
    if (!visible(current.session, who)) throw new SessionNotFound();
    checkIfMatch(req, current);
  };
  /** A Current for a record read outside the writer (answers that change nothing). */
  const asCurrent = (r: SessionRecord): Current => ({ session: r.session, lastTurn: undefined, version: () => r.version });
  const sessionReply = (r: SessionRecord, status = 200): Reply => ({ status, body: dataBody(r.json), etag: etagOf(r.version) });
  const base = '/api/v1/chat-sessions';
  const notFound = { status: 404, description: 'Chat session not found' } as const;
  const modified = { status: 412, description: 'Chat session was modified (If-Match)' } as const;

  const setArchived = (archived: boolean) =>
    route({
      method: 'POST',
      path: `${base}/:id/${archived ? 'archive' : 'unarchive'}`,
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
        const check = mine(who, ctx.req);
        const current = await store.getSession(id);
        if (found(current, who) && current.session.archived === archived) {
          check(asCurrent(current));
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
      path: base,
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
        const archived = (ctx.query.archived ?? 'false') as ArchivedFilter;
        const ownOnly = projectId === undefined || access === 'owner';
        const filter: SessionFilter = {
          ...(projectId !== undefined ? { project: projectId } : {}),
          ...(ownOnly ? { user: who } : {}),
          archived,
          ...(q !== undefined ? { nameContains: foldForSearch(q) } : {}),
        };
        if (limit === undefined && cursor === undefined) return wholeListReply(store.scanSessions(filter), jsonOfSession);
        const listName = `sessions\n${projectId ?? ''}\n${ownOnly ? who : ''}\n${archived}\n${q ?? ''}`;
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
      path: base,
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
          }),
        );
        return sessionReply(s, 201);
      },
    }),

    route({
      method: 'GET',
      path: `${base}/:id`,
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
          if (!found(r, who)) throw new SessionNotFound();
          return sessionReply(r);
        });
      },
    }),

    route<Record<string, never>, typeof updateBody.fields>({
      method: 'PUT',
      path: `${base}/:id`,
      operationId: 'updateChatSession',
      summary: 'Change name, provider, selectedModel or mode (other fields are ignored)',
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
        const check = mine(who, ctx.req);
        const { name, provider, selectedModel, mode } = ctx.body;
        if (name === undefined && provider === undefined && selectedModel === undefined && mode === undefined) {
          const current = await store.getSession(id);
          if (!found(current, who)) throw new SessionNotFound();
          check(asCurrent(current));
          return sessionReply(current);
        }
        const s = await store.updateSession(id, (cur) => {
          check(cur);
          const was = cur.session;
          return chatSession({
            ...was,
            name: name ?? was.name,
            provider: provider ?? was.provider,
            selectedModel: selectedModel ?? was.selectedModel,
            mode: (mode as ChatSessionMode | undefined) ?? was.mode,
            updatedAt: nextTimestamp(was.updatedAt),
          });
        });
        return sessionReply(s);
      },
    }),

    route({
      method: 'DELETE',
      path: `${base}/:id`,
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
        await store.deleteSession(ctx.params['id'] as string, mine(user(ctx), ctx.req));
        return { status: 200, body: '{"success":true,"message":"Chat session deleted"}' };
      },
    }),

    route<typeof turnsQuery.fields>({
      method: 'GET',
      path: `${base}/:id/turns`,
      operationId: 'listTurns',
      summary: "A session's turns, oldest first ([] for a session that does not exist)",
      tag: 'Chat sessions',
      auth: true,
      scope: 'sessions:read',
      params: idParam,
      query: turnsQuery,
      responses: [{ status: 200, description: 'The turns', schema: 'TurnList' }],
      async handle(ctx) {
        const id = ctx.params['id'] as string;
        const { limit, cursor } = ctx.query;
        const listName = `turns\n${id}`;
        let after;
        if (cursor !== undefined) {
          const [createdAt, _id] = cursors.decode(listName, cursor);
          after = { createdAt, _id };
        }
        const visibleHere = found(await store.getSession(id), user(ctx));
        if (limit === undefined && cursor === undefined) return wholeListReply(visibleHere ? store.scanTurns(id) : noTurns(), jsonOfTurn);
        if (!visibleHere) return limit === undefined ? wholeListReply(noTurns(), jsonOfTurn) : pageReply([], undefined);
        return pages(limit, after, (from, size) => store.listTurns(id, from, size), jsonOfTurn, (next) => cursors.encode(listName, next.createdAt, next._id));
      },
    }),

    route<Record<string, never>, typeof turnBody.fields>({
      method: 'POST',
      path: `${base}/:id/turns`,
      operationId: 'createTurn',
      summary: "Record a turn; it moves the session's updatedAt",
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
        const check = mine(who, ctx.req);
        const { role, content, model, metadata } = ctx.body;
        const turn = await store.appendTurn(ctx.params['id'] as string, (cur) => {
          check(cur);
          const { createdAt, _id } = turnStamp(cur);
          return {
            _id,
            session: cur.session._id,
            user: who,
            role: role as TurnRole,
            content: content as string,
            ...(model !== undefined ? { model } : {}),
            ...(metadata !== undefined ? { metadata } : {}),
            createdAt,
          };
        });
        return { status: 201, body: Buffer.concat([DATA_HEAD, turn.json, DATA_TAIL]) };
      },
    }),

    setArchived(true),
    setArchived(false),
  ];
}

const jsonOfSession = (r: SessionRecord): string => r.json;
const jsonOfTurn = (t: TurnRecord): Buffer => t.json;

async function* noTurns(): AsyncIterable<readonly TurnRecord[]> {
  // a session that does not exist (or is not the caller's) has no turns
}

/** The largest page, and the piece a list continued from a cursor without `limit` is read in. */
const MAX_PAGE = 1000;

/**
 * A page of a list from `after`; or, for a cursor given without `limit`, the rest of the list as
 * one answer without nextCursor, read a page at a time as the client takes it.
 */
async function pages<T, K>(
  limit: number | undefined,
  after: K | undefined,
  read: (after: K | undefined, size: number) => Promise<Page<T, K>>,
  jsonOf: (item: T) => string | Buffer,
  cursorOf: (next: K) => string,
): Promise<Answer> {
  if (limit !== undefined) {
    const page = await read(after, limit);
    return pageReply(page.items.map(jsonOf), page.next === undefined ? undefined : cursorOf(page.next));
  }
  async function* rest(): AsyncIterable<readonly T[]> {
    let from = after;
    do {
      const page = await read(from, MAX_PAGE);
      yield page.items;
      from = page.next;
    } while (from !== undefined);
  }
  return wholeListReply(rest(), jsonOf);
}
