// Chat sessions as use cases: list, create, read, change, delete, archive, fork. Inputs are
// plain values (the caller, the request's fields as validated, the If-Match header's value);
// answers are the store's records. Checks that must not race (ownership, If-Match, a head that
// is one of the session's turns) run at the store's serial point.
import { newObjectId } from '../domain/ids.js';
import { expiryOf, tagsOf } from '../domain/inputs.js';
import { INSTRUCTIONS_MAX_BYTES } from '../domain/limits.js';
import { DEFAULT_MODE, chatSession, type ChatSessionMode, type SessionMetadata } from '../domain/records.js';
import { ValidationError } from '../domain/schema.js';
import { foldForSearch } from '../domain/search.js';
import type { ArchivedFilter, Page, SessionFilter, SessionKey, SessionRecord, Store } from '../store/store.js';
import type { Access, Caller } from './access.js';

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
    this.access.check(caller.user, ifMatch, current);
    return current;
  }

  async update(caller: Caller, id: string, u: UpdateInput, ifMatch: string | undefined): Promise<SessionRecord> {
    const tags = u.tags === undefined ? undefined : tagsOf(u.tags);
    const expiresAt = u.expiresAt === undefined ? undefined : expiryOf(u.expiresAt);
    const instructions = u.instructions === undefined ? undefined : instructionsOf(u.instructions);
    if ([u.name, u.provider, u.selectedModel, u.mode, u.headTurnId, tags, u.metadata, expiresAt, instructions].every((v) => v === undefined)) return this.unchanged(caller, id, ifMatch);
    return this.store.updateSession(
      id,
      {
        ...(u.name !== undefined ? { name: u.name } : {}),
        ...(u.provider !== undefined ? { provider: u.provider } : {}),
        ...(u.selectedModel !== undefined ? { selectedModel: u.selectedModel } : {}),
        ...(u.mode !== undefined ? { mode: u.mode as ChatSessionMode } : {}),
        ...(u.headTurnId !== undefined ? { headTurnId: u.headTurnId } : {}),
        ...(tags !== undefined ? { tags } : {}),
        ...(u.metadata !== undefined ? { metadata: u.metadata } : {}),
        ...(expiresAt !== undefined ? { expiresAt } : {}),
        ...(instructions !== undefined ? { instructions } : {}),
      },
      { guard: this.access.guard(caller.user, ifMatch) },
    );
  }

  delete(caller: Caller, id: string, ifMatch: string | undefined): Promise<void> {
    return this.store.deleteSession(id, { guard: this.access.guard(caller.user, ifMatch) });
  }

  /** Archives (or brings back) a session; one already so is answered as it is, with no write. */
  async setArchived(caller: Caller, id: string, archived: boolean, ifMatch: string | undefined): Promise<SessionRecord> {
    const current = await this.store.getSession(id);
    if (this.access.found(current, caller.user) && current.session.archived === archived) {
      this.access.check(caller.user, ifMatch, current);
      return current;
    }
    return this.store.updateSession(id, { archived }, { guard: this.access.guard(caller.user, ifMatch), unlessSame: true });
  }

  /** A new session of the caller's holding copies of the path from the root to `turnId` (default: the head). */
  fork(caller: Caller, id: string, f: { readonly turnId?: string | undefined; readonly name?: string | undefined }, ifMatch: string | undefined): Promise<SessionRecord> {
    const now = Date.now();
    return this.store.forkSession(id, f.turnId, { _id: newObjectId(now), owner: caller.user, name: f.name, at: new Date(now).toISOString() }, { guard: this.access.guard(caller.user, ifMatch) });
  }
}
