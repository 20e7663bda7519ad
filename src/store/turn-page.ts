// A page of turns cut from rows read in order, the same on every engine that reads rows: at
// most `limit` turns, ending early once it holds `budget` bytes of JSON (always at least one
// turn), so a page of huge turns cannot grow without bound. The row after a full page only says
// that there is more.
import type { TurnKey } from '../domain/order.js';
import type { Page, TurnRecord } from './store.js';

/**
 * `turnOf` makes a row's turn, or undefined for a row that only says there is more (PostgreSQL
 * leaves the JSON out of the rows past the budget).
 */
export function budgetedTurnPage<R>(rows: Iterable<R>, limit: number, budget: number, turnOf: (row: R) => TurnRecord | undefined): Page<TurnRecord, TurnKey> {
  const items: TurnRecord[] = [];
  let bytes = 0;
  let more = false;
  for (const row of rows) {
    const t = items.length === limit || (items.length > 0 && bytes >= budget) ? undefined : turnOf(row);
    if (t === undefined) {
      more = true;
      break;
    }
    items.push(t);
    bytes += t.json.length;
  }
  const last = items[items.length - 1];
  return { items, next: more && last !== undefined ? { createdAt: last.createdAt, _id: last._id } : undefined };
}
