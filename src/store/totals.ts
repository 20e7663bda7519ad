// How the usage deltas of a group of changes settle on a stored total of tokens (a user's, the
// store's), which saturates at COUNT_MAX (../domain/numbers.ts), written once for both engines:
// each engine adds up a group's deltas here and writes what `settled` answers as SQL.
//
// A total below the top is exact; at the top it says "at least that many". So adding to a total
// is adding and saturating, but taking from a total at the top leaves a figure nobody knows: the
// total is then counted again from its parts (a user's from their sessions, the store's from the
// users). A delta is exact unless its size is the top (a session's or a subtree's tokens that
// saturated, ./writer.ts), so a group's deltas are summed exactly while they stay below it.
import { COUNT_MAX } from '../domain/numbers.js';
import type { Tokens } from '../domain/records.js';
import type { Logger } from '../log.js';
import type { Change, Usage } from './changes.js';

export const TOKEN_FIGURES = ['inputTokens', 'outputTokens', 'cachedTokens'] as const satisfies readonly (keyof Tokens)[];
export type TokenFigure = (typeof TOKEN_FIGURES)[number];

/** What a group does to one token figure of a total: add `delta` (saturating at 0 and at the top), or count the total again. */
export interface Settled {
  /** The deltas' sum, within -COUNT_MAX..COUNT_MAX (a sum past the top adds the top: the total is at the top after it). */
  readonly delta: number;
  /**
   * The total must be counted again from its parts, whatever it is now: something was taken in a
   * group whose sum is not exact. Also counted again (decided by the engine, which holds the
   * total): a negative delta on a total at the top.
   */
  readonly recount: boolean;
}

class FigureSum {
  private sum = 0;
  private taken = false;
  private inexact = false;

  add(d: number): void {
    if (d === 0) return;
    if (d < 0) this.taken = true;
    if (Math.abs(d) >= COUNT_MAX) this.inexact = true;
    this.sum += d;
    if (Math.abs(this.sum) > COUNT_MAX) this.inexact = true;
  }

  settled(): Settled {
    return { delta: Math.max(-COUNT_MAX, Math.min(COUNT_MAX, this.sum)), recount: this.taken && this.inexact };
  }
}

/** The deltas of one group for one total: sessions, turns and bytes added as they are, each token figure as Settled says. */
export class TotalDelta {
  sessions = 0;
  turns = 0;
  bytes = 0;
  private readonly tokens = { inputTokens: new FigureSum(), outputTokens: new FigureSum(), cachedTokens: new FigureSum() };

  add(u: Usage): this {
    this.sessions += u.sessions;
    this.turns += u.turns;
    this.bytes += u.bytes;
    for (const k of TOKEN_FIGURES) this.tokens[k].add(u[k]);
    return this;
  }

  token(k: TokenFigure): Settled {
    return this.tokens[k].settled();
  }
}

/**
 * What changes add to each owner's usage, summed here once for every reader: the serial writer's
 * quota check (a write's, and its group's so far) and both engines' commits. `keyOf` names an
 * owner as the engine keeps it (PostgreSQL's text escapes); `into` accumulates across calls.
 */
export function usageByOwner(changes: readonly Change[], keyOf: (owner: string) => string = (o) => o, into = new Map<string, TotalDelta>()): Map<string, TotalDelta> {
  for (const c of changes) {
    const owner = keyOf(c.usage.owner);
    let d = into.get(owner);
    if (d === undefined) into.set(owner, (d = new TotalDelta()));
    d.add(c.usage);
  }
  return into;
}

/** What a start put back in range: numbers an earlier release stored out of it (each engine's repairNumbers). */
export interface NumbersRepaired {
  /** Turns whose usage (its JSON and its columns) was taken into range. */
  readonly turns: number;
  /** Sessions whose sizes and tokens were counted again from their turns. */
  readonly sessions: number;
  /** Users whose usage was counted again from their sessions. */
  readonly users: number;
}

/** The one line a start logs when it repaired numbers (`where`: the file or the schema). */
export function logRepaired(log: Logger, where: string, r: NumbersRepaired): void {
  log.warn("numbers out of range were repaired: turns' usage taken into 0..2^53-1, the totals that hold them counted again; no turn was lost", { store: where, ...r });
}
