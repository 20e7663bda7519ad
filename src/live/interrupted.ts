// Streaming turns left by a crash: the store names the turns no server streams any more
// (Store.leftStreaming), and each becomes `interrupted`, an edit through the serial writer like
// any other (its session's updatedAt moves; the feed gets turn.updated).
import type { Logger } from '../log.js';
import { SessionNotFound, TurnNotFound, TurnNotStreaming, type Store } from '../store/store.js';

/** How often a server looks again, unless its store says (PostgreSQL: a tenth of INSTANCE_TIMEOUT, for the replies of instances that went away). */
export const INTERRUPT_SWEEP_MS = 60_000;

/** Marks `interrupted` the turns the store says were left streaming (`generating`: the replies this server generates); resolves with how many. */
export async function interruptLeftStreaming(store: Store, atStart: boolean, log: Logger, generating?: ReadonlySet<string>): Promise<number> {
  const left = await store.leftStreaming(atStart, generating);
  let done = 0;
  for (const { session, turnId } of left) {
    try {
      // a delta or a PUT may have come since the store was asked: only a turn still streaming ends so
      await store.updateTurn(session, turnId, { status: 'interrupted' }, { onlyStreaming: true });
      done++;
    } catch (e) {
      if (!(e instanceof TurnNotStreaming || e instanceof TurnNotFound || e instanceof SessionNotFound)) throw e;
    }
  }
  if (done > 0) log.warn('streaming turns left by a crash are now interrupted', { turns: done });
  return done;
}
