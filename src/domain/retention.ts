// When a session is gone, the same on every engine: at its own `expiresAt` when it has one,
// never when that is null, else (with RETENTION_DAYS) that many days after its last activity.
// A session past it is gone for the API at once; its storage stays until it is purged.
import type { ChatSession } from './records.js';

const DAY_MS = 86_400_000;

/** What "live" means at one moment: an own expiry after `now`, or (none given) activity after `cutoff`. */
export interface Liveness {
  readonly now: string;
  /** undefined when RETENTION_DAYS is off: a session without an own expiry never expires. */
  readonly cutoff: string | undefined;
}

export function livenessAt(nowMs: number, retentionDays: number | undefined): Liveness {
  return { now: new Date(nowMs).toISOString(), cutoff: retentionDays === undefined ? undefined : new Date(nowMs - retentionDays * DAY_MS).toISOString() };
}

/** True while the session is not gone. Times are ISO 8601 UTC with milliseconds, so text order is time order. */
export function isLive(s: ChatSession, l: Liveness): boolean {
  if (typeof s.expiresAt === 'string') return s.expiresAt > l.now;
  if (s.expiresAt === null) return true;
  return l.cutoff === undefined || s.updatedAt > l.cutoff;
}

/** When the session is (or was) gone: its own expiry, or its last activity + RETENTION_DAYS; undefined: never. */
export function expiryOf(s: ChatSession, retentionDays: number | undefined): string | undefined {
  if (typeof s.expiresAt === 'string') return s.expiresAt;
  if (s.expiresAt === null || retentionDays === undefined) return undefined;
  return new Date(Date.parse(s.updatedAt) + retentionDays * DAY_MS).toISOString();
}
