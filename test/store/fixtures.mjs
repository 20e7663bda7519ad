// Fixtures the store contract's case files share: fixed instants, sessions as the API would
// create them, turn builders for appendTurn.
import { kit } from './engines.mjs';

const { chatSession, newObjectId } = kit;
const BASE = Date.UTC(2026, 0, 1);

/** A timestamp `ms` milliseconds after a fixed instant (ISO 8601 UTC with milliseconds, as stored). */
export const at = (ms) => new Date(BASE + ms).toISOString();

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
