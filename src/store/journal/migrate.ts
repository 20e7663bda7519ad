// Moving a data directory off the retired journal engine. A directory that holds a journal and
// no database is migrated into sqlite before the store opens: the journal is read whole
// (./reader.ts, with its checks), written into a new database beside the final one,
// made durable, and only then put in place; the journal is kept, renamed, never deleted. Every
// step leaves the directory in a state the next start recognizes: an interrupted build is
// thrown away and done again, an interrupted swap is finished. A directory that holds a journal
// and a database, or a journal while STORE=postgres, is never served: the start stops with one
// line saying what it found and what to do.
import { closeSync, existsSync, fsyncSync, openSync, renameSync, rmSync, statSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import type { Config } from '../../config.js';
import { fsyncDir } from '../../files.js';
import type { Logger } from '../../log.js';
import { turnRecord, usageInRange, type ChatSession, type Turn } from '../../domain/records.js';
import { COMMITTED_FILE, JOURNAL_FILE, JournalImage, journalFiles, MIGRATED_SUFFIX, NEXT_FILE } from './reader.js';
import { crashpoint } from '../faults.js';
import { sqliteDatabase } from '../sqlite/binding.js';
import { StoreOpenFailed, type Store } from '../store.js';

/** The database a migration builds before it is put in place. */
export const MIGRATING_SUFFIX = '.migrating';
/** Turns (or bytes of their JSON) written per import step: bounded memory for the writer thread's messages. */
const BATCH_TURNS = 5_000;
const BATCH_BYTES = 16 * 1024 * 1024;
/** How often a migration says how far it is. */
const PROGRESS_MS = 3_000;

/** Whether a sqlite database is there: a file with something in it (an empty one is what a start cut short leaves). */
function hasDatabase(file: string): boolean {
  try {
    return statSync(file).size > 0;
  } catch {
    return false;
  }
}

/** The journal's files as they are kept after a migration. */
function keptName(dir: string, name: string): string {
  let to = join(dir, name + MIGRATED_SUFFIX);
  for (let n = 1; existsSync(to); n++) to = join(dir, `${name}${MIGRATED_SUFFIX}.${n}`);
  return to;
}

/**
 * Renames the journal's files still in place (the main file first: once it is gone, the next start
 * knows the migration's database is whole) and fsyncs the directory; answers their new names.
 */
function keepJournal(dir: string): string[] {
  const kept: string[] = [];
  for (const f of [JOURNAL_FILE, NEXT_FILE, COMMITTED_FILE].map((n) => join(dir, n)).filter((f) => existsSync(f))) {
    const to = keptName(dir, basename(f));
    renameSync(f, to);
    kept.push(basename(to));
  }
  fsyncDir(dir);
  return kept;
}

function removeDatabase(file: string): void {
  for (const suffix of ['', '-wal', '-shm', '-journal']) rmSync(file + suffix, { force: true });
}

/** The line that stops a start on a directory holding both, saying what to do. */
function both(dir: string, database: string): StoreOpenFailed {
  return new StoreOpenFailed(
    `${dir} holds a journal of an earlier release (${JOURNAL_FILE}) that was not migrated, and a sqlite database (${database}); the server serves neither. ` +
      `To serve the database, move the journal out of the data directory; to migrate the journal instead, move the database aside; then start again.`,
  );
}

/** What a migration carried over, where to, and the name the journal is kept under. */
export interface Migrated {
  readonly sessions: number;
  readonly turns: number;
  /** The store it went into, in words: the sqlite file, or the PostgreSQL database. */
  readonly into: string;
  readonly kept: string;
}

/**
 * Settles the data directory before its store opens (every command that opens one comes here):
 * migrates a journal into a new sqlite database (answering what it carried over), finishes a
 * migration a crash cut short, or stops with one line when the directory holds what must not be
 * served. `open` opens a sqlite database being built.
 */
export async function settleJournal(config: Config, log: Logger, open: (file: string) => Promise<Store>): Promise<Migrated | undefined> {
  const files = journalFiles(config.dataDir);
  if (files !== undefined) {
    refuseUnserved(config);
    return migrateToSqlite(files, config.sqliteFile + MIGRATING_SUFFIX, config.sqliteFile, log, open);
  }
  if (config.store !== 'sqlite') return undefined;
  const building = config.sqliteFile + MIGRATING_SUFFIX;
  if (existsSync(building) && !hasDatabase(config.sqliteFile) && existsSync(join(config.dataDir, JOURNAL_FILE + MIGRATED_SUFFIX))) {
    // the journal was renamed once the new database was whole: only the swap is left
    finishSwap(config.dataDir, building, config.sqliteFile, log);
  } else if (existsSync(building)) {
    removeDatabase(building);
    log.warn('removed an unfinished database of an interrupted migration; no journal is left to migrate', { file: building });
  }
  return undefined;
}

/**
 * Stops with one line when a data directory holding a journal must not be migrated by a start:
 * beside a sqlite database (which one is right is the operator's to say), or with STORE=postgres
 * (the `migrate` command imports it). A read (export) refuses the same directories.
 */
export function refuseUnserved(config: Config): void {
  const dir = config.dataDir;
  if (config.store === 'postgres') {
    throw new StoreOpenFailed(
      `${dir} holds a journal of an earlier release (${JOURNAL_FILE}) that was not migrated, and STORE=postgres: the server does not serve it. ` +
        'Run `node dist/server.js migrate` with the same settings to import it into the database, or move it out of the data directory if its data is there already.',
    );
  }
  if (hasDatabase(config.sqliteFile)) throw both(dir, config.sqliteFile);
}

/** Reads the journal whole, or stops the start with what the reader found. */
function readJournal(files: readonly string[], log: Logger): JournalImage {
  const started = performance.now();
  log.info('reading the journal of an earlier release to migrate it', { files: files.map((f) => basename(f)) });
  const image = JournalImage.read(files, log);
  log.info('journal read', { sessions: image.sessionCount, turns: image.turnCount, records: image.records, bytes: image.bytes, ms: Math.round(performance.now() - started) });
  return image;
}

/** Writes the image's sessions and turns into `store` in steps, saying how far it is every few seconds. */
async function copyInto(store: Store, image: JournalImage, log: Logger, steps: boolean): Promise<{ sessions: number; turns: number }> {
  const total = { sessions: image.sessionCount, turns: image.turnCount };
  let sessions: ChatSession[] = [];
  let turns: Turn[] = [];
  let bytes = 0;
  const done = { sessions: 0, turns: 0 };
  let said = performance.now();
  const flush = async (): Promise<void> => {
    if (sessions.length === 0) return;
    await store.importAll(sessions, turns);
    crashpoint('migrate-middle');
    done.sessions += sessions.length;
    done.turns += turns.length;
    sessions = [];
    turns = [];
    bytes = 0;
    if (performance.now() - said >= PROGRESS_MS) {
      said = performance.now();
      log.info('migrating the journal', { sessions: done.sessions, ofSessions: total.sessions, turns: done.turns, ofTurns: total.turns });
    }
  };
  let inRange = 0;
  for (const item of image.sessions()) {
    sessions.push(item.session);
    for (const given of item.turns) {
      // a journal's turns were checked as their release checked them: their counts are taken into range here (../domain/numbers.ts)
      const usage = given.usage === undefined ? undefined : usageInRange(given.usage);
      const t = usage === undefined ? given : turnRecord({ ...given, usage });
      if (usage !== undefined) inRange++;
      turns.push(t);
      bytes += typeof t.content === 'string' ? t.content.length : 256;
    }
    if (steps && (turns.length >= BATCH_TURNS || bytes >= BATCH_BYTES)) await flush();
  }
  await flush();
  if (inRange > 0) log.warn("turns of the journal held usage out of range: taken into 0..2^53-1 as they were copied; no turn was lost", { turns: inRange });
  return done;
}

async function migrateToSqlite(files: readonly string[], building: string, database: string, log: Logger, open: (file: string) => Promise<Store>): Promise<Migrated> {
  const started = performance.now();
  const dir = dirname(files[0] as string);
  if (existsSync(building)) log.warn('an earlier migration was interrupted: it starts again from the journal', { file: building });
  removeDatabase(building);
  const image = readJournal(files, log);
  const store = await open(building);
  let copied;
  try {
    copied = await copyInto(store, image, log, true);
  } finally {
    await store.close();
  }
  await image.close();
  makeDurable(building);
  crashpoint('migrate-written');
  // the journal goes first: from then on the next start knows the new database is whole
  const kept = keepJournal(dir);
  crashpoint('migrate-kept');
  renameSync(building, database);
  fsyncDir(dirname(database));
  log.info('journal migrated into sqlite; the journal is kept, renamed, and no longer read', { file: database, sessions: copied.sessions, turns: copied.turns, kept, ms: Math.round(performance.now() - started) });
  return { ...copied, into: database, kept: kept[0] ?? '' };
}

/** Finishes a migration whose journal was renamed before its database was put in place. */
function finishSwap(dir: string, building: string, database: string, log: Logger): void {
  keepJournal(dir);
  renameSync(building, database);
  fsyncDir(dirname(database));
  log.info('finished a migration a crash interrupted after its database was written', { file: database });
}

/** Checkpoints whatever the closed database left in its log, then fsyncs the file, so it can be renamed into place whole. */
function makeDurable(file: string): void {
  if (existsSync(`${file}-wal`) && statSync(`${file}-wal`).size > 0) {
    const db = new (sqliteDatabase())(file);
    try {
      db.exec('PRAGMA wal_checkpoint(TRUNCATE)');
    } finally {
      db.close();
    }
  }
  for (const suffix of ['-wal', '-shm']) rmSync(file + suffix, { force: true });
  const fd = openSync(file, 'r+');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/**
 * The `migrate` command: the journal of the data directory into the configured store (sqlite: a
 * new database, as a start would; postgres: imported into the database in one transaction, its
 * records replacing those with the same ids). Answers what was carried over, or undefined when
 * the directory holds no journal.
 */
export async function migrateCommand(config: Config, log: Logger, openSqlite: (file: string) => Promise<Store>, openConfigured: () => Promise<Store>): Promise<Migrated | undefined> {
  if (config.store === 'sqlite') return settleJournal(config, log, openSqlite);
  const dir = config.dataDir;
  const files = journalFiles(dir);
  if (files === undefined) return undefined;
  const image = readJournal(files, log);
  const store = await openConfigured();
  let copied;
  try {
    // one transaction: all of it or none of it
    copied = await copyInto(store, image, log, false);
  } finally {
    await store.close();
  }
  return { ...copied, into: 'the PostgreSQL database', kept: keepJournal(dir)[0] ?? '' };
}
