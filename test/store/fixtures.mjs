// Fixtures the store contract's case files share: fixed instants, sessions as the API would
// create them, turn builders for appendTurn.
import { kit } from './engines.mjs';

const { chatSession, newObjectId } = kit;
const BASE = Date.UTC(2026, 0, 1);

/** A timestamp `ms` milliseconds after a fixed instant (ISO 8601 UTC with milliseconds, as stored). */
export const at = (ms) => new Date(BASE + ms).toISOString();

/** The clock `ms` milliseconds after the fixed instant, as a write's `now` (its times come from it). */
export const clock = (ms) => BASE + ms;

/** A guard no session meets (an If-Match naming no version): the write is refused with PreconditionFailed at the serial point. */
export const REFUSED = Object.freeze({ ifMatch: '"no-such-version"' });

let idClock = 0;
/** A session as the API would create it; ids made in order, so their order is creation order. */
export function session(over = {}) {
  const t = at(over.ms ?? 0);
  return chatSession({
    _id: newObjectId(BASE + idClock++ * 1000),
    name: '',
    provider: 'prov',
    selectedModel: 'model',
    mode: 'Build',
    user: 'alice',
    project: 'proj',
    createdAt: t,
    updatedAt: t,
    archived: false,
    ...over,
  });
}

/** A user's usage when they hold nothing. */
export const NO_USAGE = Object.freeze({ sessions: 0, turns: 0, bytes: 0, inputTokens: 0, outputTokens: 0, cachedTokens: 0 });

/**
 * Usage worked out from what an export holds (`items`: each `{session, turns}` as JSON texts): the
 * sessions, their turns, the UTF-8 bytes of all their JSON and the tokens of the turns' usage.
 */
export function usageOfItems(items) {
  const u = { ...NO_USAGE };
  for (const i of items) {
    u.sessions++;
    u.bytes += Buffer.byteLength(i.session);
    for (const t of i.turns) {
      u.turns++;
      u.bytes += Buffer.byteLength(t);
      const usage = JSON.parse(t).usage;
      if (usage !== undefined) {
        u.inputTokens += usage.inputTokens;
        u.outputTokens += usage.outputTokens;
        u.cachedTokens += usage.cachedTokens ?? 0;
      }
    }
  }
  return u;
}
