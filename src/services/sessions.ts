// Chat sessions as use cases: list, create, read, change, delete, archive, fork. Inputs are
// plain values (the caller, the request's fields as validated, the If-Match header's value);
// answers are the store's records. Checks that must not race (ownership, If-Match, a head that
// is one of the session's turns) run at the store's serial point.
import { newObjectId } from '../domain/ids.js';
import { expiryOf, tagsOf } from '../domain/inputs.js';
import { INSTRUCTIONS_MAX_BYTES } from '../domain/limits.js';
import { DEFAULT_MODE, chatSession, nextTimestamp, type ChatSessionMode, type SessionMetadata } from '../domain/records.js';
import { ValidationError } from '../domain/schema.js';
import { foldForSearch } from '../domain/search.js';
import type { ArchivedFilter, Page, SessionFilter, SessionKey, SessionRecord, Store } from '../store/store.js';
import { stateOf, type Access, type Caller } from './access.js';

/** Which sessions a list holds: the spec's `projectId`, and the filters beyond it. */
export interface ListQuery {
  readonly projectId?: string | undefined;
  /** A substring of the name, any case. */
  readonly q?: string | undefined;
  readonly archived: ArchivedFilter;
  /** Tags the sessions must all have (any case). */
  readonly tags?: readonly string[] | undefined;
}

export interface CreateInput {
  readonly projectId: string;
  readonly providerId: string;
  readonly selectedModel: string;
  readonly mode?: string | undefined;
  readonly name?: string | undefined;
  readonly tags?: readonly string[] | undefined;
  readonly metadata?: SessionMetadata | undefined;
  readonly expiresAt?: string | null | undefined;
  readonly instructions?: string | undefined;
}

/** What an update may change; absent fields stay as they are. */
export interface UpdateInput {
  readonly name?: string | undefined;
  readonly provider?: string | undefined;
  readonly selectedModel?: string | undefined;
  readonly mode?: string | undefined;
  readonly headTurnId?: string | undefined;
  readonly tags?: readonly string[] | undefined;
  readonly metadata?: SessionMetadata | undefined;
  readonly expiresAt?: string | null | undefined;
  /** "" or null removes them. */
  readonly instructions?: string | null | undefined;
}

/** Instructions as a session keeps them ("" for none), held to their size in bytes. */
function instructionsOf(text: string | null): string {
  if (text !== null && Buffer.byteLength(text) > INSTRUCTIONS_MAX_BYTES) throw new ValidationError(`instructions must be at most ${INSTRUCTIONS_MAX_BYTES} bytes of UTF-8`);
  return text ?? '';
}

export class SessionService {
  constructor(
    private readonly store: Store,
    readonly access: Access,
  ) {}

  /** The store's filter for a list of the caller's (the spec's rule 1, under ACCESS). */
  filterOf(caller: Caller, q: ListQuery): SessionFilter {
    const tags = q.tags === undefined ? undefined : [...new Set(q.tags.map(foldForSearch))];
    return {
      ...(q.projectId !== undefined ? { project: q.projectId } : {}),
      ...(this.access.ownOnly(q.projectId) ? { user: caller.user } : {}),
      archived: q.archived,
      ...(q.q !== undefined ? { nameContains: foldForSearch(q.q) } : {}),
      ...(tags !== undefined ? { tags } : {}),
      live: this.access.now(),
    };
  }

  /** A page of a list, strictly after `after`. */
  list(caller: Caller, q: ListQuery, after: SessionKey | undefined, limit: number): Promise<Page<SessionRecord, SessionKey>> {
    return this.store.listSessions(this.filterOf(caller, q), after, limit);
  }

  /** A whole list as of one moment, in chunks (the spec's list without `limit`). */
  scan(caller: Caller, q: ListQuery): AsyncIterable<readonly SessionRecord[]> {
    return this.store.scanSessions(this.filterOf(caller, q));
  }

  create(caller: Caller, b: CreateInput): Promise<SessionRecord> {
    const now = Date.now();
    const at = new Date(now).toISOString();
    return this.store.createSession(
      chatSession({
        _id: newObjectId(now),
        name: b.name ?? '',
        provider: b.providerId,
        selectedModel: b.selectedModel,
        mode: (b.mode as ChatSessionMode | undefined) ?? DEFAULT_MODE,
        user: caller.user,
        project: b.projectId,
        createdAt: at,
        updatedAt: at,
        archived: false,
        headTurnId: null,
        ...(b.tags !== undefined ? { tags: tagsOf(b.tags) } : {}),
        ...(b.metadata !== undefined ? { metadata: b.metadata } : {}),
        ...(b.expiresAt !== undefined ? { expiresAt: expiryOf(b.expiresAt) } : {}),
        ...(b.instructions !== undefined ? { instructions: instructionsOf(b.instructions) } : {}),
      }),
    );
  }

  /** One session the caller may see, or SessionNotFound. */
  async get(caller: Caller, id: string): Promise<SessionRecord> {
    return this.access.seen(await this.store.getSession(id), caller.user);
  }

  /**
   * The same, without a promise when the engine reads on this thread (sqlite): the hottest read
   * of all answers in the tick its request arrived.
   */
  getNow(caller: Caller, id: string): SessionRecord | Promise<SessionRecord> {
    const read = this.store.getSessionNow;
    if (read === undefined) return this.get(caller, id);
    return this.access.seen(read(id), caller.user);
  }

  /** One session as it is, after the checks a write would make (a request that changes nothing). */
  private async unchanged(caller: Caller, id: string, ifMatch: string | undefined): Promise<SessionRecord> {
    const current = await this.get(caller, id);
    this.access.mine(caller.user, ifMatch)(stateOf(current));
    return current;
  }

  async update(caller: Caller, id: string, u: UpdateInput, ifMatch: string | undefined): Promise<SessionRecord> {
    const check = this.access.mine(caller.user, ifMatch);
    const tags = u.tags === undefined ? undefined : tagsOf(u.tags);
    const expiresAt = u.expiresAt === undefined ? undefined : expiryOf(u.expiresAt);
    const instructions = u.instructions === undefined ? undefined : instructionsOf(u.instructions);
    if ([u.name, u.provider, u.selectedModel, u.mode, u.headTurnId, tags, u.metadata, expiresAt, instructions].every((v) => v === undefined)) return this.unchanged(caller, id, ifMatch);
    const head = u.headTurnId;
    return this.store.updateSession(
      id,
      (cur) => {
        check(cur);
        if (head !== undefined && cur.turn(head) === undefined) throw new ValidationError('headTurnId must be a turn of this session');
        const was = cur.session;
        return chatSession({
          ...was,
          name: u.name ?? was.name,
          provider: u.provider ?? was.provider,
          selectedModel: u.selectedModel ?? was.selectedModel,
          mode: (u.mode as ChatSessionMode | undefined) ?? was.mode,
          headTurnId: head ?? was.headTurnId,
          updatedAt: nextTimestamp(was.updatedAt),
          ...(tags !== undefined ? { tags } : {}),
          ...(u.metadata !== undefined ? { metadata: u.metadata } : {}),
          ...(expiresAt !== undefined ? { expiresAt } : {}),
          ...(instructions !== undefined ? { instructions } : {}),
        });
      },
      head === undefined ? undefined : { headTurnId: head },
    );
  }

  delete(caller: Caller, id: string, ifMatch: string | undefined): Promise<void> {
    return this.store.deleteSession(id, this.access.mine(caller.user, ifMatch));
  }

  /** Archives (or brings back) a session; one already so is answered as it is, with no write. */
  async setArchived(caller: Caller, id: string, archived: boolean, ifMatch: string | undefined): Promise<SessionRecord> {
    const check = this.access.mine(caller.user, ifMatch);
    const current = await this.store.getSession(id);
    if (this.access.found(current, caller.user) && current.session.archived === archived) {
      check(stateOf(current));
      return current;
    }
    return this.store.updateSession(id, (cur) => {
      check(cur);
      const { session } = cur;
      return session.archived === archived ? session : chatSession({ ...session, archived, updatedAt: nextTimestamp(session.updatedAt) });
    });
  }

  /** A new session of the caller's holding copies of the path from the root to `turnId` (default: the head). */
  fork(caller: Caller, id: string, f: { readonly turnId?: string | undefined; readonly name?: string | undefined }, ifMatch: string | undefined): Promise<SessionRecord> {
    const check = this.access.mine(caller.user, ifMatch);
    const now = Date.now();
    const at = new Date(now).toISOString();
    return this.store.forkSession(id, f.turnId, caller.user, (source) => {
      check(source);
      const from = source.session;
      return chatSession({
        _id: newObjectId(now),
        name: f.name ?? from.name,
        provider: from.provider,
        selectedModel: from.selectedModel,
        mode: from.mode,
        user: caller.user,
        project: from.project,
        createdAt: at,
        updatedAt: at,
        archived: false,
        headTurnId: null,
        ...(from.tags !== undefined ? { tags: from.tags } : {}),
        ...(from.metadata !== undefined ? { metadata: from.metadata } : {}),
      });
    });
  }
}
