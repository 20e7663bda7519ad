// What the caller's own sessions hold (GET /api/v1/usage): the owner's usage the store keeps up
// to date with every write, so the answer costs one lookup whatever the caller holds.
import type { Store, Usage } from '../store/store.js';
import type { Caller } from './access.js';

export class UsageService {
  constructor(private readonly store: Store) {}

  of(caller: Caller): Promise<Usage> {
    return this.store.usage(caller.user);
  }
}
