// Following the live feed as a use case: which events a stream may carry (what the caller may
// list: its own sessions, or a project's under ACCESS; or one session it may see), then the
// hub opens it.
import { FollowKey, type Hub, type OpenedStream } from '../live/hub.js';
import type { LoggedEvent, Store } from '../store/store.js';
import type { Access, Caller } from './access.js';

/** How a stream starts, as its request says. */
export interface StreamStart {
  /** Last-Event-ID (or `lastEventId`), as the client sent it. */
  readonly lastEventId: string | undefined;
  /** When the credential that opened it stops being accepted. */
  readonly untilMs: number | undefined;
  /** The single-use ticket it was opened with, claimed by the hub. */
  readonly ticket: { readonly id: string; readonly expiresAtMs: number } | undefined;
  readonly reqId: string | undefined;
}

export class FeedService {
  constructor(
    private readonly hub: Hub,
    private readonly store: Store,
    private readonly access: Access,
  ) {}

  /** Changes to what the caller may list: its own sessions, or a project's (under ACCESS=owner, its own of it). */
  followList(caller: Caller, projectId: string | undefined, start: StreamStart): Promise<OpenedStream> {
    const key = projectId === undefined ? FollowKey.user(caller.user) : this.access.mode === 'owner' ? FollowKey.ownProject(projectId, caller.user) : FollowKey.project(projectId);
    return this.hub.open({ user: caller.user, key, session: undefined, ...start });
  }

  /** Changes to one session the caller may see (SessionNotFound otherwise), turn deltas included. */
  async followSession(caller: Caller, id: string, start: StreamStart): Promise<OpenedStream> {
    // an expired session is gone here too; one that expires while followed ends its stream (deleted) when the purge takes it
    this.access.seen(await this.store.getSession(id), caller.user);
    return this.hub.open({ user: caller.user, key: FollowKey.session(id), session: id, ...start });
  }

  /**
   * The stream that answers a message or reply request, opened before anything is recorded (its
   * place is reserved, and it starts from the newest event, so it replays the turn.created the
   * record makes). It carries nothing until `follow` names the turns the request recorded; then
   * their events, and it closes after the reply's end (its turn.updated that is no longer
   * streaming) or the deletion that takes it.
   */
  async followReply(caller: Caller, session: string, start: Omit<StreamStart, 'lastEventId' | 'ticket'>): Promise<ReplyFollow> {
    const ids = new Set<string>();
    let reply: string | undefined;
    const opened = await this.hub.open({
      user: caller.user,
      key: FollowKey.session(session),
      session,
      lastEventId: String(this.hub.head),
      ticket: undefined,
      ...start,
      only: (e) => e.turnId !== undefined && (ids.has(e.turnId) || (reply !== undefined && takes(e, reply))),
      last: (e) => reply !== undefined && ((e.type === 'turn.updated' && e.turnId === reply && e.status !== 'streaming') || takes(e, reply)),
    });
    return {
      opened,
      follow(turn, replyId) {
        if (turn !== undefined) ids.add(turn);
        ids.add(replyId);
        reply = replyId;
      },
    };
  }
}

/** A reply's stream (followReply): opened, then told which turns it follows. */
export interface ReplyFollow {
  readonly opened: OpenedStream;
  /** The user turn a message recorded (undefined for a reply) and the reply. */
  follow(turn: string | undefined, reply: string): void;
}

/**
 * Whether a `turn.deleted` took turn `id` with it (its data names, in `ids`, every turn that went):
 * a reply deleted under way has no end to tell, so its stream ends there.
 */
function takes(e: LoggedEvent, id: string): boolean {
  if (e.type !== 'turn.deleted') return false;
  if (e.turnId === id) return true;
  const ids = (JSON.parse(typeof e.data === 'string' ? e.data : e.data.toString('utf8')) as { ids?: unknown }).ids;
  return Array.isArray(ids) && ids.includes(id);
}
