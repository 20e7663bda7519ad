// The refusals and failures of the store, named: a session or turn that is not there, a write
// refused (a condition, a quota, a reply in the way) or one that could not be committed, an engine
// away or damaged. Each carries its code (../domain/errors.ts); only src/api/ gives it a status.
import { DomainError } from '../domain/errors.js';
import type { Usage } from './changes.js';

export class SessionNotFound extends DomainError {
  override readonly name = 'SessionNotFound';
  constructor() {
    super('session_not_found', 'Chat session not found');
  }
}

export class TurnNotFound extends DomainError {
  override readonly name = 'TurnNotFound';
  constructor() {
    super('turn_not_found', 'Turn not found');
  }
}

/** A delta to a turn whose status is not `streaming`. */
export class TurnNotStreaming extends DomainError {
  override readonly name = 'TurnNotStreaming';
  constructor() {
    super('turn_not_streaming', 'Turn is not streaming');
  }
}

/** A turn posted under a turn that is still `streaming`: it would go under a reply that is not written yet. */
export class TurnStillStreaming extends DomainError {
  override readonly name = 'TurnStillStreaming';
  constructor() {
    super('turn_still_streaming', 'Turn is still streaming');
  }
}

/** A delta that would make its turn larger than a turn may be. */
export class TurnTooLarge extends DomainError {
  override readonly name = 'TurnTooLarge';
  constructor() {
    super('turn_too_large', 'Turn too large');
  }
}

/**
 * A write's guard found the session not its caller's to see (./writes.ts Guard): to the caller it
 * does not exist (a SessionNotFound like any other); a use case that names it otherwise (the
 * OpenAI door's conversations) can tell it from a session that is not there.
 */
export class SessionNotVisible extends SessionNotFound {}

/** A write decided from a read found the fields it read moved since (Guard.same): the use case decides it again. */
export class SessionMoved extends Error {
  override readonly name = 'SessionMoved';
}

/** The purge's delete of a session that is live again (touched since it was found expired). */
export class SessionStillLive extends Error {
  override readonly name = 'SessionStillLive';
}

export class PreconditionFailed extends DomainError {
  override readonly name = 'PreconditionFailed';
  constructor() {
    super('precondition_failed', 'Chat session was modified');
  }
}

/** A quota of the session's owner (QUOTA_SESSIONS, QUOTA_TURNS, QUOTA_BYTES) would be passed; nothing changed. */
export class QuotaExceeded extends DomainError {
  override readonly name = 'QuotaExceeded';
  constructor(
    readonly quota: keyof Usage,
    readonly limit: number,
  ) {
    super('quota_exceeded', `Quota exceeded: ${quota} (at most ${limit} per user)`);
  }
}

/** A write that could not be committed; nothing changed. The message leaks no path. */
export class StorageWriteFailed extends DomainError {
  override readonly name = 'StorageWriteFailed';
  constructor(cause?: unknown) {
    super('storage_write_failed', 'Storage write failed', { cause });
  }
}

/** The engine cannot be reached (a database that is down); the request may be retried later. */
export class StorageUnavailable extends DomainError {
  override readonly name = 'StorageUnavailable';
  constructor(cause?: unknown) {
    super('storage_unavailable', 'Storage unavailable', { cause });
  }
}

/**
 * The engine found its files damaged while serving (a full check, or a read or commit SQLite
 * reported malformed): writes are refused from then on and health is not ok; reads go on where
 * they can. The engine logged the file once, when it found it.
 */
export class StorageDamaged extends DomainError {
  override readonly name = 'StorageDamaged';
  constructor(cause?: unknown) {
    super('storage_damaged', 'Storage damaged', { cause });
  }
}

/** What the engine found on opening stops the start: one line naming the file or database and what to do. */
export class StoreOpenFailed extends Error {
  override readonly name = 'StoreOpenFailed';
}
