// Opening the engine the configuration names (STORE). The only place above the engines that
// knows which ones exist; everything else sees a Store.
import type { Config } from '../config.js';
import type { Logger } from '../log.js';
import { announce } from '../live/changes.js';
import { JournalStore } from './journal/engine.js';
import { openPostgresStore } from './postgres/engine.js';
import { openSqliteSnapshot, openSqliteStore } from './sqlite/engine.js';
import { StoreOpenFailed, type Store, type StoreObserver } from './store.js';

/**
 * Opens the configured store for a server (`serving`: with its background work, the sqlite full
 * check) or a command (an import). The data directory's lock is the caller's.
 */
export async function openStore(config: Config, log: Logger, observer?: StoreObserver, serving = false): Promise<Store> {
  switch (config.store) {
    case 'journal':
      if (!config.fsync) log.warn('FSYNC=off: writes are acknowledged before they are durable; a crash can lose them');
      return JournalStore.open({ dir: config.dataDir, log, fsync: config.fsync, compactMinBytes: config.compactMinBytes, observer, groupCommit: config.groupCommit, quotas: config.limits.quotas, searchWalkFrom: config.searchWalkFrom, search: config.search });
    case 'sqlite':
      return openSqliteStore({ file: config.sqliteFile, log, cacheBytes: config.sqliteCacheBytes, fsync: config.fsync, observer, groupCommit: config.groupCommit, quotas: config.limits.quotas, searchWalkFrom: config.searchWalkFrom, search: config.search, fullCheck: serving });
    case 'postgres':
      return openPostgres(config, log, observer);
  }
}

function openPostgres(config: Config, log: Logger, observer?: StoreObserver, readOnly = false): Promise<Store> {
  if (config.databaseUrl === undefined) throw new StoreOpenFailed('STORE=postgres needs DATABASE_URL');
  return openPostgresStore({
    url: config.databaseUrl,
    schema: config.databaseSchema,
    poolSize: config.databasePoolSize,
    streamingIdleMs: config.streamingIdleMs,
    log,
    groupCommit: config.groupCommit,
    observer,
    readOnly,
    quotas: config.limits.quotas,
    searchWalkFrom: config.searchWalkFrom,
    search: config.search,
    // every instance logs its changes' events with them, so the others' subscribers see them too
    announce: config.events === undefined ? undefined : announce,
  });
}

/**
 * Opens the configured store read-only, as of one moment, beside a server that may be running
 * on it (what `export` reads).
 */
export async function openStoreSnapshot(config: Config, log: Logger): Promise<Store> {
  switch (config.store) {
    case 'journal':
      return JournalStore.openSnapshot(config.dataDir, log);
    case 'sqlite':
      return openSqliteSnapshot({ file: config.sqliteFile, log, cacheBytes: config.sqliteCacheBytes });
    case 'postgres':
      // an export reads one snapshot of the database, beside any number of instances
      return openPostgres(config, log, undefined, true);
  }
}
