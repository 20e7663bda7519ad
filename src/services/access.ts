// Who may see and change which session (ACCESS), and the If-Match check of a write: the rules
// every use case applies, with plain inputs (the caller's id, the If-Match header's value). A
// write carries them as its Guard, checked at the serial point (src/store/decide.ts checkGuard).
import type { AccessMode } from '../config.js';
import type { ChatSession } from '../domain/records.js';
import { isLive, livenessAt, type Liveness } from '../domain/retention.js';
import { etagOf } from '../domain/version.js';
import { checkGuard } from '../store/decide.js';
import { SessionMoved, SessionNotFound, type SessionRecord } from '../store/store.js';
import type { Guard } from '../store/writes.js';

export { etagOf };

/** Who is asking: the token's subject. */
export interface Caller {
  readonly user: string;
}

/** A session's state for a record read outside the writer (answers that change nothing, a write decided from a read). */
export const stateOf = (r: SessionRecord): { readonly session: ChatSession; version(): string } => ({ session: r.session, version: () => r.version });

/** Times a write decided from a read is decided again when the fields it read moved meanwhile (Guard.same). */
const DECIDED_AGAIN = 8;

/**
 * Runs `attempt` (a read, a decision from it, and a write guarded by the fields it read) again
 * while the write finds them moved since the read, a few times at most.
 */
export async function decidedOnRead<T>(attempt: () => Promise<T>): Promise<T> {
  for (let n = 1; ; n++) {
    try {
      return await attempt();
    } catch (e) {
      if (!(e instanceof SessionMoved) || n >= DECIDED_AGAIN) throw e;
    }
  }
}

/** Who may see what under the configured ACCESS: under `owner` another user's session does not exist. */
export class Access {
  constructor(
    readonly mode: AccessMode,
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

  /** The session `r` as the caller may see it, or SessionNotFound. */
  seen(r: SessionRecord | undefined, who: string): SessionRecord {
    if (!this.found(r, who)) throw new SessionNotFound();
    return r;
  }

  /** What a write of the caller requires of its session: the caller may see it, and If-Match holds. */
  guard(who: string, ifMatch: string | undefined): Guard {
    return { caller: { user: who, anyOwner: this.mode === 'shared', live: this.now() }, ifMatch };
  }

  /** The same check on a session as read, for a request that changes nothing (SessionNotFound, PreconditionFailed). */
  check(who: string, ifMatch: string | undefined, r: SessionRecord): void {
    checkGuard(this.guard(who, ifMatch), stateOf(r));
  }

  /** Lists read the caller's own sessions, of a project or all of them, unless a project's under ACCESS=shared. */
  ownOnly(projectId: string | undefined): boolean {
    return projectId === undefined || this.mode === 'owner';
  }
}
