// Following the live feed as a use case: which events a stream may carry (what the caller may
// list: its own sessions, or a project's under ACCESS; or one session it may see), then the
// hub opens it.
import { FollowKey, type Hub, type OpenedStream } from '../live/hub.js';
import type { Store } from '../store/store.js';
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
}
