// Who may see and change which session (ACCESS), and the If-Match check of a write: the rules
// every use case applies, with plain inputs (the caller's id, the If-Match header's value).
import type { AccessMode } from '../config.js';
import type { ChatSession } from '../domain/records.js';
import { isLive, livenessAt, type Liveness } from '../domain/retention.js';
import { PreconditionFailed, SessionNotFound, type SessionRecord, type SessionState } from '../store/store.js';

/** Who is asking: the token's subject. */
export interface Caller {
  readonly user: string;
}

/** The ETag of a session: its version tag, which any change to it (a field, a turn) moves. */
export function etagOf(version: string): string {
  return `"${version}"`;
}

/** What the checks of a write read of a session: its record and its version. */
export type CheckedSession = Pick<SessionState, 'session' | 'version'>;

/** RFC 9110 If-Match with strong comparison (`ifMatch`: the header's value): `*` matches any current session. */
export function checkIfMatch(ifMatch: string | undefined, current: CheckedSession): void {
  if (ifMatch === undefined) return;
  if (ifMatch.trim() === '*') return;
  const tag = etagOf(current.version());
  for (const part of ifMatch.split(',')) if (part.trim() === tag) return;
  throw new PreconditionFailed();
}

/** A session's state for a record read outside the writer (answers that change nothing). */
export const stateOf = (r: SessionRecord): CheckedSession => ({ session: r.session, version: () => r.version });

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

  /** The check of a write at the serial point: the session is the caller's to see, and If-Match holds. */
  mine(who: string, ifMatch: string | undefined): (current: CheckedSession) => void {
    return (current) => {
      if (!this.visible(current.session, who)) throw new SessionNotFound();
      checkIfMatch(ifMatch, current);
    };
  }

  /** Lists read the caller's own sessions, of a project or all of them, unless a project's under ACCESS=shared. */
  ownOnly(projectId: string | undefined): boolean {
    return projectId === undefined || this.mode === 'owner';
  }
}
