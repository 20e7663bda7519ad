// What the routes of sessions, turns and search share: the services they call, the caller and
// the If-Match header of a request, the paths' parameters, and lists answered a page at a time
// or whole.
import type { Principal } from '../auth/authenticate.js';
import type { Page, SessionRecord } from '../store/store.js';
import { etagOf, type Caller } from '../services/access.js';
import type { SearchService } from '../services/search.js';
import type { SessionService } from '../services/sessions.js';
import type { TurnService } from '../services/turns.js';
import type { UsageService } from '../services/usage.js';
import type { CursorCodec } from './cursor.js';
import { dataBody } from './envelope.js';
import { pageReply, wholeListReply } from './lists.js';
import type { Answer, Reply } from './route.js';

export interface SessionDeps {
  readonly sessions: SessionService;
  readonly turns: TurnService;
  readonly search: SearchService;
  readonly usage: UsageService;
  readonly cursors: CursorCodec;
  /** The largest a turn's JSON may grow to by deltas, in bytes (BODY_LIMIT: what one request could record). */
  readonly maxTurnBytes: number;
}

export const BASE = '/api/v1/chat-sessions';

export const paging = {
  limit: { kind: 'integer', min: 1, max: 1000, description: 'Page size. When given, the answer carries `nextCursor` (null on the last page).' },
  cursor: { kind: 'string', description: 'The `nextCursor` of the previous page of the same list.' },
} as const;

export const idParam = { id: { description: 'Chat session id.', blankMessage: 'Session ID is required' } } as const;
export const turnIdParams = { ...idParam, turnId: { description: 'Turn id.', blankMessage: 'Turn ID is required' } } as const;

export const notFound = { status: 404, description: 'Chat session not found' } as const;
export const turnNotFound = { status: 404, description: 'Turn not found' } as const;
export const modified = { status: 412, description: 'Chat session was modified (If-Match)' } as const;

/** The caller of a route declared with `auth`. */
export function caller(ctx: { principal: Principal | undefined }): Caller {
  if (ctx.principal === undefined) throw new Error('route declared without auth reached a handler that needs a user');
  return ctx.principal;
}

/** The request's If-Match header, as the services take it. */
export function ifMatchOf(ctx: { req: { headers: { 'if-match'?: string | undefined } } }): string | undefined {
  return ctx.req.headers['if-match'];
}

export { etagOf };

export const sessionReply = (r: SessionRecord, status = 200): Reply => ({ status, body: dataBody(r.json), etag: etagOf(r.version) });

/** The largest page, and the piece a list continued from a cursor without `limit` is read in. */
const MAX_PAGE = 1000;

/**
 * A page of a list from `after`; or, for a cursor given without `limit`, the rest of the list as
 * one answer without nextCursor, read a page at a time as the client takes it.
 */
export async function pages<T, K>(
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
  return wholeListReply(rest(), jsonOf, false);
}
