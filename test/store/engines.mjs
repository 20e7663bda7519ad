// The engines the store contract runs against, what each can do beyond the contract
// (capability flags, like abstract-level's `supports`), and how a test opens one in-process.
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';

const kit = createRequire(import.meta.url)('../../dist/testkit.cjs');
export { kit };

export const ENGINES = {
  sqlite: {
    /** The fault kind that fails the k-th commit (CHAT_SESSION_API_FAULTS). */
    fault: 'commit',
  },
  postgres: {
    fault: 'commit',
    /** Several stores (instances) may share one store's data. */
    instances: true,
  },
};

/** The settings a test store runs with: its engine, its directory (postgres: a schema named after it), and `extra` on top. */
export function configFor(engine, dir, extra = {}) {
  const pg = engine === 'postgres' ? { DATABASE_URL: process.env.CSA_TEST_DATABASE_URL, DATABASE_SCHEMA: `c_${createHash('sha256').update(dir).digest('hex').slice(0, 16)}` } : {};
  return kit.loadConfig({ STORE: engine, DATA_DIR: dir, ...pg, ...extra });
}

/** Opens the engine's store on `dir` in this process (the data-directory lock is a server's job, not taken here). */
export function openOn(engine, dir, extra = {}) {
  return kit.openStore(configFor(engine, dir, extra), new kit.Logger('silent'));
}

/** Opens a read-only snapshot of the store on `dir`, as `export` does beside a running server. */
export function openSnapshotOn(engine, dir) {
  return kit.openStoreSnapshot(configFor(engine, dir), new kit.Logger('silent'));
}
