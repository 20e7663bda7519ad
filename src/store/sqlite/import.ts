// What an import writes into a sqlite store, planned on the main thread from what the reading
// connection holds (../import-plan.ts), as the rows the writer thread writes in one transaction
// (./apply.ts ImportRows); the store pauses its serial writer meanwhile.
import type { TurnKey } from '../../domain/order.js';
import type { ChatSession, Turn } from '../../domain/records.js';
import { versionOfSession } from '../../domain/version.js';
import { planImport } from '../import-plan.js';
import { withDeltas } from '../pieces.js';
import type { ImportSummary } from '../store.js';
import type { ImportRows } from './apply.js';
import { bytesOf, text, textOrUndefined } from './binding.js';
import type { Connection } from './connection.js';
import { deltasSql } from './turns.js';

/** The rows an import writes (undefined: nothing to write), and what it says it did. */
export function importRowsOf(reader: Connection, sessions: readonly ChatSession[], turns: readonly Turn[]): { readonly rows: ImportRows | undefined; readonly summary: ImportSummary } {
  const sessionRow = reader.prepare('SELECT json, last_turn_at, last_turn_id FROM sessions WHERE id = ?');
  const turnRow = reader.prepare(`SELECT session, json, ${deltasSql('turns')} AS deltas FROM turns WHERE id = ?`);
  const ownerOf = reader.prepare('SELECT user FROM sessions WHERE id = ?');
  const lastTurns = new Map<string, TurnKey | undefined>();
  const plan = planImport(sessions, turns, {
    session: (id) => {
      const row = sessionRow.get(id);
      if (row === undefined) return undefined;
      const createdAt = textOrUndefined(row['last_turn_at']);
      const _id = textOrUndefined(row['last_turn_id']);
      lastTurns.set(id, createdAt === undefined || _id === undefined ? undefined : { createdAt, _id });
      return { json: text(row['json']), lastTurnAt: createdAt };
    },
    turn: (id) => {
      const row = turnRow.get(id);
      return row === undefined ? undefined : { session: text(row['session']), json: Buffer.from(withDeltas(bytesOf(row['json']), textOrUndefined(row['deltas']))) };
    },
  });
  if (plan.sessions.length === 0 && plan.turns.length === 0) return { rows: undefined, summary: plan.summary };
  // what the sessions it wrote hold is counted from their rows, then their owners' usage (before and after: an import may move a session)
  const touched = new Set([...plan.sessions.map((s) => s._id), ...plan.turns.flatMap((t) => [t.turn.session, ...(t.replaces !== undefined ? [t.replaces] : [])])]);
  const users = new Set(plan.sessions.map((s) => s.user));
  for (const id of touched) {
    const row = ownerOf.get(id);
    if (row !== undefined) users.add(text(row['user']));
  }
  const rows: ImportRows = {
    sessions: plan.sessions.map((session) => {
      const json = JSON.stringify(session);
      return { session, json, version: versionOfSession(json, lastTurns.get(session._id)) };
    }),
    turns: plan.turns.map((t) => ({ turn: t.turn, json: t.json, replaces: t.replaces })),
    recount: { sessions: [...touched], users: [...users] },
  };
  return { rows, summary: plan.summary };
}
