// Opening the engine the configuration names (STORE): the one place that names the engines
// (scripts/check-imports.mjs holds every other module to it); everything else sees a Store. A
// data directory that still holds the retired journal is settled first (./journal/migrate.ts):
// migrated into sqlite, or refused.
import { resolve } from 'node:path';
import type { Config } from '../config.js';
import type { Logger } from '../log.js';
import { COMMITTED_FILE, JOURNAL_FILE, JournalImage, journalFiles, NEXT_FILE } from './journal/reader.js';
import { MIGRATING_SUFFIX, migrateCommand, refuseUnserved, settleJournal, type Migrated } from './journal/migrate.js';
import { openPostgresStore } from './postgres/engine.js';
import { openSqliteSnapshot, openSqliteStore } from './sqlite/engine.js';
import { runSqliteWriterIfWorker } from './sqlite/worker.js';
import { StoreOpenFailed, type Announce, type Store, type StoreObserver, type StoreSnapshot } from './store.js';

/** What a caller adds to the configuration when it opens a store. */
export interface OpenOptions {
  /** Watches commits (the metrics). */
  readonly observer?: StoreObserver | undefined;
  /** A server: with its background work (the sqlite full check). */
  readonly serving?: boolean;
  /**
   * The live feed's events of a group of changes (src/live/changes.ts): PostgreSQL logs them in
   * the group's transaction, so every instance's subscribers see them (with EVENTS=on).
   */
  readonly announce?: Announce | undefined;
}

/** Opens the configured store for a server or a command that writes. The data directory's lock is the caller's. */
export async function openStore(config: Config, log: Logger, opts: OpenOptions = {}): Promise<Store> {
  const { observer, serving = false } = opts;
  await settleJournal(config, log, (file) => openSqliteBuild(config, log, file));
  if (!config.fsync) log.warn('FSYNC=off: writes are acknowledged before they are durable; a crash can lose them');
  switch (config.store) {
    case 'sqlite':
      return openSqliteStore({ file: config.sqliteFile, log, cacheBytes: config.sqliteCacheBytes, fsync: config.fsync, observer, groupCommit: config.groupCommit, quotas: config.limits.quotas, searchWalkFrom: config.searchWalkFrom, search: config.search, fullCheck: serving });
    case 'postgres':
      return openPostgres(config, log, opts);
  }
}

/** A sqlite database a migration builds: written without fsyncs (the migration makes the whole file durable before it is put in place). */
function openSqliteBuild(config: Config, log: Logger, file: string): Promise<Store> {
  return openSqliteStore({ file, log, cacheBytes: config.sqliteCacheBytes, fsync: false, search: config.search });
}

/** The `migrate` command: the journal of the data directory into the configured store; undefined when there is none. */
export function migrateJournal(config: Config, log: Logger, opts: OpenOptions = {}): Promise<Migrated | undefined> {
  return migrateCommand(config, log, (file) => openSqliteBuild(config, log, file), () => openPostgres(config, log, opts));
}

function openPostgres(config: Config, log: Logger, opts: OpenOptions, readOnly = false): Promise<Store> {
  if (config.databaseUrl === undefined) throw new StoreOpenFailed('STORE=postgres needs DATABASE_URL');
  return openPostgresStore({
    url: config.databaseUrl,
    schema: config.databaseSchema,
    poolSize: config.databasePoolSize,
    streamingIdleMs: config.streamingIdleMs,
    // a server proves it is alive, for the others to know which replies are left; a command does not
    instanceTimeoutMs: opts.serving === true && !readOnly ? config.instanceTimeoutMs : undefined,
    log,
    groupCommit: config.groupCommit,
    observer: opts.observer,
    readOnly,
    quotas: config.limits.quotas,
    searchWalkFrom: config.searchWalkFrom,
    search: config.search,
    // every instance logs its changes' events with them, so the others' subscribers see them too
    announce: config.events === undefined ? undefined : opts.announce,
  });
}

/** What openStoreSnapshot reads for `config`, in words for a command's last line (the trap of a forgotten STORE shows there). */
export function snapshotSource(config: Config): string {
  if (journalFiles(config.dataDir) !== undefined) return `the journal of ${config.dataDir}, not migrated yet`;
  return config.store === 'sqlite' ? `sqlite ${config.sqliteFile}` : `postgres schema ${config.databaseSchema}`;
}

/**
 * Opens the configured store read-only, as of one moment, beside a server that may be running
 * on it (what `export` reads). A data directory whose journal was never migrated is read from
 * the journal itself; one that holds a journal beside a database is refused as a start refuses it.
 */
export async function openStoreSnapshot(config: Config, log: Logger): Promise<StoreSnapshot> {
  const files = journalFiles(config.dataDir);
  if (files !== undefined) {
    refuseUnserved(config);
    return JournalImage.read(files, log);
  }
  switch (config.store) {
    case 'sqlite':
      return openSqliteSnapshot({ file: config.sqliteFile, log, cacheBytes: config.sqliteCacheBytes });
    case 'postgres':
      // an export reads one snapshot of the database, beside any number of instances
      return openPostgres(config, log, {}, true);
  }
}

/**
 * The files the stores of `config` keep (the journal's in the data directory, the sqlite file
 * with its log and the database a migration builds), whichever engine is configured: what a
 * command writing a file of its own (export's --out) must never write over.
 */
export function storeFiles(config: Config): string[] {
  const files = [JOURNAL_FILE, NEXT_FILE, COMMITTED_FILE].map((n) => resolve(config.dataDir, n));
  for (const base of [config.sqliteFile, config.sqliteFile + MIGRATING_SUFFIX]) for (const suffix of ['', '-wal', '-shm', '-journal']) files.push(resolve(base + suffix));
  return files;
}

/**
 * Runs the engine's own thread or process when this one was started as one (the sqlite writer
 * thread, its full check), and answers true; false in the process a command started.
 */
export function runEngineThreadIfWorker(): boolean {
  return runSqliteWriterIfWorker();
}

/** What a start or a command may meet in the retired journal: a plain line tells the operator what to do. */
export { JournalDamaged, JournalHasCrlf } from './journal/reader.js';

// What the in-process tests drive of the engines' insides (src/testkit.ts alone imports these;
// the server never does): sqlite's search index, file checks and query plans, the journal's checksum.
export { Indexer } from './sqlite/indexer.js';
export { prepareSchema, QUEUED_WORDS_SQL, queuedTurnWords, registerSearchFunctions, turnWordsSql } from './sqlite/schema.js';
export { checkFiles } from './sqlite/file-check.js';
export { SUBTREE_SQL } from './sqlite/group.js';
export { branchKeysSql, branchPageSql } from './sqlite/turns.js';
export { crc32, crc32Portable } from './journal/crc32.js';
