// What each committed change tells the live feed: the one place where a store Change becomes
// events. An event names its session, and the session's owner and project (which subscribers
// may see it); its `data` is the record as the API answers it (or, for a delete, its id), so a
// client applies it without asking again.
import type { ChangeEvent } from '../store/store.js';
import type { Change } from '../store/writer.js';

/** The types of the events changes make, in the order the feed's documentation lists them. */
export const CHANGE_EVENT_TYPES = ['session.created', 'session.updated', 'session.deleted', 'turn.created'] as const;
export type ChangeEventType = (typeof CHANGE_EVENT_TYPES)[number];

/**
 * Types only a session's own stream carries (not the lists' feed): none yet. A streaming turn's
 * `turn.delta` will be one, so a list view is not woken by every token.
 */
export const SESSION_ONLY_TYPES: ReadonlySet<string> = new Set<string>();

function event(type: ChangeEventType, session: { readonly _id: string; readonly user: string; readonly project: string }, data: string | Buffer): ChangeEvent {
  return { type, session: session._id, owner: session.user, project: session.project, data };
}

/** The events one change makes, in the order a client should apply them. */
export function eventsOf(c: Change): ChangeEvent[] {
  switch (c.kind) {
    case 'create':
      return [event('session.created', c.session, c.json)];
    case 'update':
      return [event('session.updated', c.session, c.json)];
    case 'turn': {
      const turn = event('turn.created', c.session, c.json);
      // the turn raised the session's updatedAt: list views move it to the top
      return c.raised ? [turn, event('session.updated', c.session, JSON.stringify(c.session))] : [turn];
    }
    case 'delete':
      return [event('session.deleted', c.session, JSON.stringify({ _id: c.id }))];
  }
}

/** The events of a group's changes, in commit order (what the store's Announce is). */
export function announce(changes: readonly Change[]): ChangeEvent[] {
  const out: ChangeEvent[] = [];
  for (const c of changes) for (const e of eventsOf(c)) out.push(e);
  return out;
}
