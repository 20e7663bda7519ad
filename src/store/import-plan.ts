// What an import writes, decided the same way on every engine: a record whose `_id` is stored
// is replaced by the backup's version unless it is stored exactly so (then it counts as
// unchanged), so importing the same file twice changes nothing the second time.
import { raisedByTurn, type ChatSession, type Turn } from '../domain/records.js';
import type { ImportSummary } from './store.js';

/** What an engine tells the plan about a stored session and a stored turn. */
export interface StoredLookup {
  session(id: string): { readonly json: string; readonly lastTurnAt: string | undefined } | undefined;
  turn(id: string): { readonly session: string; readonly json: Buffer } | undefined;
}

export interface PlannedTurn {
  readonly turn: Turn;
  readonly json: Buffer;
  /** The session a stored turn with this `_id` sits under (its own), which the backup's version replaces. */
  readonly replaces: string | undefined;
}

/** A backup that cannot be imported over what is stored; nothing was written. */
export class ImportConflict extends Error {
  override readonly name = 'ImportConflict';
}

export interface ImportPlan {
  /** Sessions to write, each raised to its newest turn (stored or imported), as a turn raises it. */
  readonly sessions: readonly ChatSession[];
  readonly turns: readonly PlannedTurn[];
  readonly summary: ImportSummary;
}

export function planImport(sessions: readonly ChatSession[], turns: readonly Turn[], stored: StoredLookup): ImportPlan {
  // a session's updatedAt is never before its newest turn (a turn raises it): compare like with like
  const newestTurn = new Map<string, string>();
  for (const t of turns) if (t.createdAt > (newestTurn.get(t.session) ?? '')) newestTurn.set(t.session, t.createdAt);
  const outSessions: ChatSession[] = [];
  const outTurns: PlannedTurn[] = [];
  let unchanged = 0;
  for (const given of sessions) {
    const old = stored.session(given._id);
    let s = given;
    for (const at of [newestTurn.get(given._id), old?.lastTurnAt]) if (at !== undefined) s = raisedByTurn(s, at);
    if (old !== undefined && old.json === JSON.stringify(s)) unchanged++;
    else outSessions.push(s);
  }
  for (const t of turns) {
    const json = Buffer.from(JSON.stringify(t));
    const have = stored.turn(t._id);
    // a turn has its place in its session's tree: it cannot move to another session
    if (have !== undefined && have.session !== t.session) throw new ImportConflict(`turn ${t._id} is stored in session ${have.session}, the backup puts it in session ${t.session}; nothing was imported`);
    if (have !== undefined && have.json.equals(json)) unchanged++;
    else outTurns.push({ turn: t, json, replaces: have?.session });
  }
  return { sessions: outSessions, turns: outTurns, summary: { sessions: outSessions.length, turns: outTurns.length, unchanged } };
}
