// What each committed change tells the live feed: the one place where a store Change becomes
// events. An event names its session, and the session's owner and project (which subscribers
// may see it); its `data` is the record as the API answers it (or, for a delete, its id), so a
// client applies it without asking again.
import type { DeltaPlace, Piece } from '../domain/deltas.js';
import type { TurnStatus } from '../domain/records.js';
import type { ChangeEvent } from '../store/store.js';
import type { Change } from '../store/changes.js';

/** The types of the events changes make, in the order the feed's documentation lists them. */
export const CHANGE_EVENT_TYPES = ['session.created', 'session.updated', 'session.deleted', 'turn.created', 'turn.updated', 'turn.deleted', 'turn.delta'] as const;
export type ChangeEventType = (typeof CHANGE_EVENT_TYPES)[number];

/**
 * Types only a session's own stream carries (not the lists' feed): a streaming turn's
 * `turn.delta`, so a list view is not woken by every token.
 */
export const SESSION_ONLY_TYPES: ReadonlySet<string> = new Set<string>(['turn.delta']);

type Owned = { readonly _id: string; readonly user: string; readonly project: string };

function event(type: ChangeEventType, session: Owned, data: string | Buffer): ChangeEvent {
  return { type, session: session._id, owner: session.user, project: session.project, data };
}

/** A turn's event: it names the turn, and (but for a delta or a deletion) the turn's status, so no reader parses its data for them. */
function turnEvent(type: ChangeEventType, session: Owned, data: string | Buffer, turnId: string, status?: TurnStatus): ChangeEvent {
  return { type, session: session._id, owner: session.user, project: session.project, data, turnId, ...(status !== undefined ? { status } : {}) };
}

/** The events one change makes, in the order a client should apply them. */
export function eventsOf(c: Change): ChangeEvent[] {
  switch (c.kind) {
    case 'create':
    case 'fork':
      // a fork's copies are not sent one by one: its session.created says forkedFrom, and its turns are one read away
      return [event('session.created', c.session, c.json)];
    case 'update':
      return [event('session.updated', c.session, c.json)];
    case 'turn':
      // the turn became the session's head (and raised its updatedAt): list views move it to the top
      return [turnEvent('turn.created', c.session, c.json, c.turn._id, c.turn.status), event('session.updated', c.session, c.sessionJson)];
    case 'editTurn':
      return [turnEvent('turn.updated', c.session, c.json, c.turn._id, c.turn.status), event('session.updated', c.session, c.sessionJson)];
    case 'deleteTurns':
      // one event for the subtree: the turn the DELETE named, and every turn that went with it
      return [
        turnEvent('turn.deleted', c.session, JSON.stringify({ _id: c.turnId, session: c.sessionId, ids: c.ids }), c.turnId),
        event('session.updated', c.session, c.sessionJson),
      ];
    case 'delta':
      return silent(c) ? [] : deltaEvents(c.session, c.turnId, c.pieces, c.places);
    case 'delete':
      return [event('session.deleted', c.session, JSON.stringify({ _id: c.id }))];
  }
}

/**
 * The `turn.delta` events of pieces appended to a streaming turn: `{_id, session, text, at,
 * part?}`, and `type: "reasoning"` for the model's reasoning (answer text has no `type`).
 */
export function deltaEvents(session: Owned, turnId: string, pieces: readonly Piece[], places: readonly DeltaPlace[]): ChangeEvent[] {
  return pieces.map((piece, i) => {
    const p = places[i] as DeltaPlace;
    const data = { _id: turnId, session: session._id, text: piece.text, at: p.at, ...(p.part !== undefined ? { part: p.part } : {}), ...(piece.kind === 'reasoning' ? { type: 'reasoning' } : {}) };
    return turnEvent('turn.delta', session, JSON.stringify(data), turnId);
  });
}

/** A change that makes no event: a reply's quiet delta, whose pieces were told as they came (deltaEvents); its commit only makes them durable. */
function silent(c: Change): boolean {
  return c.kind === 'delta' && (c.quiet || c.pieces.length === 0);
}

/** Whether a group's changes make any event, without making them (what announce would find). */
export function makesEvents(changes: readonly Change[]): boolean {
  return changes.some((c) => !silent(c));
}

/** The events of a group's changes, in commit order (what the store's Announce is). */
export function announce(changes: readonly Change[]): ChangeEvent[] {
  const out: ChangeEvent[] = [];
  for (const c of changes) for (const e of eventsOf(c)) out.push(e);
  return out;
}
