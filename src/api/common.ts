// What the routes of sessions and of their turns share: who the caller is, which sessions they
// may see (ACCESS), If-Match and ETags, the paths' parameters, and lists answered a page at a
// time or whole.
import type { IncomingMessage } from 'node:http';
import type { AccessMode } from '../config.js';
import type { Principal } from '../auth/authenticate.js';
import type { ChatSession } from '../domain/records.js';
import { isLive, livenessAt, type Liveness } from '../domain/retention.js';
import { PreconditionFailed, SessionNotFound, type Page, type SessionRecord, type SessionState, type Store } from '../store/store.js';
import type { CursorCodec } from './cursor.js';
import { pageReply, wholeListReply } from './lists.js';
import { dataBody } from '../http/envelope.js';
import type { Answer, Reply } from '../http/route.js';

export interface SessionDeps {
  readonly store: Store;
  readonly access: AccessMode;
  readonly cursors: CursorCodec;
  readonly retentionDays: number | undefined;
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

/** The ETag of a session: its version tag, which any change to it (a field, a turn) moves. */
export function etagOf(version: string): string {
  return `"${version}"`;
}

/** RFC 9110 If-Match with strong comparison: `*` matches any current session. */
export function checkIfMatch(req: IncomingMessage, current: SessionState): void {
  const header = req.headers['if-match'];
  if (header === undefined) return;
  if (header.trim() === '*') return;
  const tag = etagOf(current.version());
  for (const part of header.split(',')) if (part.trim() === tag) return;
  throw new PreconditionFailed();
}

export function user(ctx: { principal: Principal | undefined }): string {
  if (ctx.principal === undefined) throw new Error('route declared without auth reached a handler that needs a user');
  return ctx.principal.user;
}

/** Who may see what under the configured ACCESS: under `owner` another user's session does not exist. */
export class Access {
  constructor(
    private readonly mode: AccessMode,
    private readonly retentionDays: number | undefined,
  ) {}

  private lastMs = NaN;
  private last: Liveness | undefined;

  /** A session the caller may see: one that is not gone (expired), under the ACCESS rule. */
  visible(s: ChatSession, who: string): boolean {
    if (this.mode !== 'shared' && s.user !== who) return false;
    // without RETENTION_DAYS only a session's own expiry ends it: most sessions need no clock
    if (this.retentionDays === undefined && typeof s.expiresAt !== 'string') return true;
    return isLive(s, this.now());
  }

  /** What is live now, for the lists; made once per millisecond (two ISO strings each time were measurable on a GET). */
  now(): Liveness {
    const ms = Date.now();
    if (ms !== this.lastMs || this.last === undefined) {
      this.last = livenessAt(ms, this.retentionDays);
      this.lastMs = ms;
    }
    return this.last;
  }

  found(r: SessionRecord | undefined, who: string): r is SessionRecord {
    return r !== undefined && this.visible(r.session, who);
  }

  /** The check of a write at the serial point: the session is the caller's to see, and If-Match holds. */
  mine(who: string, req: IncomingMessage): (current: SessionState) => void {
    return (current) => {
      if (!this.visible(current.session, who)) throw new SessionNotFound();
      checkIfMatch(req, current);
    };
  }
}

/** A session's state for a record read outside the writer (answers that change nothing). */
export const stateOf = (r: SessionRecord): SessionState => ({ session: r.session, lastTurn: undefined, version: () => r.version });

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
  return wholeListReply(rest(), jsonOf);
}
