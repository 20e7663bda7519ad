// The command line: serve (the default), token, export, import, migrate, purge, erase-user, reindex, --help, --version.
// Errors a person can fix end the process with one plain line on stderr.
import { existsSync, mkdirSync, statSync, writeSync } from 'node:fs';
import { resolve } from 'node:path';
import { ExportFailed, exportFrom, ImportRejected, parseBackup } from './services/backup.js';
import { MAX_SUB, signToken } from './auth/jwt.js';
import { SCOPES } from './auth/authenticate.js';
import { KeySetUnavailable } from './auth/jwks-source.js';
import { loadSecrets, SECRET_FILE } from './auth/secret.js';
import { ConfigError, loadConfig, parseFlags, settingsHelp, type Config } from './config.js';
import { Logger } from './log.js';
import { ProvidersFileError } from './providers/catalog.js';
import { serve } from './server.js';
import { eraseUser, purgeExpired } from './services/retention.js';
import { expiryOf, livenessAt } from './domain/retention.js';
import { acquireLock, DataDirLocked, guardDataDir, LOCK_FILE } from './data-dir-lock.js';
import { writeFileAtomically } from './files.js';
import { announce } from './live/changes.js';
import { JournalDamaged, JournalHasCrlf, migrateJournal, openStore, openStoreSnapshot, runEngineThreadIfWorker, snapshotSource, storeFiles } from './store/open.js';
import { ImportConflict } from './store/import-plan.js';
import { StoreOpenFailed, type Store, type StoreSnapshot } from './store/store.js';

declare const __VERSION__: string;
const VERSION = typeof __VERSION__ === 'string' ? __VERSION__ : '0.0.0-dev';
const NAME = 'chat-session-api';

const HELP = `${NAME} ${VERSION}: chat sessions and AI providers over a JSON HTTP API.

Usage:
  node dist/server.js [options]                      serve (the default)
  node dist/server.js token --sub <user> [--ttl 1h] [--scope "<scopes>"] [options]
                                                     print a token signed with the server's secret
                                                     (it never creates one: start the server first)
  node dist/server.js export [--out FILE] [options]  write all sessions and turns as NDJSON
                                                     (stdout by default; safe while the server runs)
  node dist/server.js import FILE [options]          load an export into a stopped data directory
  node dist/server.js migrate [options]              move the data an earlier release kept in DATA_DIR
                                                     (sessions.journal) into the configured store
                                                     (a start on sqlite does it too)
  node dist/server.js purge [--dry-run] [options]    delete the storage of expired sessions now; with
                                                     --dry-run only list them (safe while the server runs)
  node dist/server.js erase-user --user ID [options] delete every session of one user with all its turns
  node dist/server.js reindex [options]              build the search index again
  node dist/server.js --help | --version

Token options: --sub is the user id; --ttl like 30s, 15m, 1h, 7d or "never" (default 1h);
--scope is space-separated from: ${SCOPES.join(', ')} (default: no scope claim, so everything).

Settings (environment variable / flag; the flag wins):
${settingsHelp()}
`;

/** Takes `--name value` / `--name=value` out of argv for a subcommand's own options; given twice is an error. */
function takeOption(argv: string[], name: string): string | undefined {
  let value: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] as string;
    if (a !== name && !a.startsWith(`${name}=`)) continue;
    if (value !== undefined) throw new ConfigError(`repeated option ${name}: give it once`);
    if (a === name) {
      const v = argv[i + 1];
      if (v === undefined) throw new ConfigError(`${name} needs a value`);
      argv.splice(i, 2);
      value = v;
    } else {
      argv.splice(i, 1);
      value = a.slice(name.length + 1);
    }
    i--;
  }
  return value;
}

/** The settings from the environment and argv, with DATA_DIR checked to be a directory if it exists. */
function loadCheckedConfig(argv: readonly string[]): Config {
  const config = loadConfig(process.env, parseFlags(argv));
  let isDir = true;
  try {
    isDir = statSync(config.dataDir).isDirectory();
  } catch {
    // missing: created by whoever needs it
  }
  if (!isDir) throw new ConfigError(`DATA_DIR ${config.dataDir} is not a directory`);
  return config;
}

/** A start-up failure of the system (the address, the disk) as one line naming what to fix. */
class StartFailed extends Error {
  override readonly name = 'StartFailed';
}

function startFailure(e: unknown, config: Config): unknown {
  const err = e as NodeJS.ErrnoException;
  if (typeof err.code !== 'string' || !(e instanceof Error)) return e;
  const why = `${err.code}${err.syscall !== undefined ? `, ${err.syscall}` : ''}`;
  switch (err.code) {
    case 'EADDRINUSE':
      return new StartFailed(`the address is already in use (PORT/HOST): ${err.message}`);
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
    case 'EAI_FAIL':
    case 'EAI_NONAME':
      return new StartFailed(`HOST ${config.host} does not resolve to an address (${why})`);
    case 'EADDRNOTAVAIL':
      return new StartFailed(`HOST ${config.host} is not an address of this machine (${why})`);
    case 'EACCES':
    case 'EPERM':
      return new StartFailed(`permission denied: ${err.message}`);
    case 'ENOSPC':
    case 'EDQUOT':
      return new StartFailed(`no space left for the data directory ${config.dataDir} (${why}); free some and start again`);
    case 'EROFS':
      return new StartFailed(`the data directory ${config.dataDir} is on a read-only file system (${why})`);
    default:
      return new StartFailed(`cannot start on ${config.dataDir}: ${err.message}`);
  }
}

function parseTtl(text: string): number | undefined {
  if (text === 'never') return undefined;
  const m = /^(\d+)\s*(s|m|h|d)$/.exec(text.trim());
  if (m === null || Number(m[1]) === 0) throw new ConfigError(`--ttl must look like 30s, 15m, 1h, 7d or never (got "${text}")`);
  return Number(m[1]) * { s: 1, m: 60, h: 3600, d: 86400 }[m[2] as 's' | 'm' | 'h' | 'd'];
}

function tokenCommand(argv: string[]): void {
  const sub = takeOption(argv, '--sub');
  const ttl = parseTtl(takeOption(argv, '--ttl') ?? '1h');
  const scope = takeOption(argv, '--scope');
  // what the server would refuse is refused here, rather than printed as a token that never works
  if (sub === undefined || sub.trim() === '') throw new ConfigError('token needs --sub <user id>');
  if (sub.length > MAX_SUB) throw new ConfigError(`--sub must be at most ${MAX_SUB} characters (got ${sub.length})`);
  if (scope !== undefined) {
    const words = scope.split(/\s+/).filter((w) => w !== '');
    const unknown = words.filter((w) => !(SCOPES as readonly string[]).includes(w));
    if (unknown.length > 0) throw new ConfigError(`--scope has unknown scope(s) ${unknown.join(', ')}; known: ${SCOPES.join(', ')}`);
    if (words.length === 0) throw new ConfigError(`--scope needs at least one of: ${SCOPES.join(', ')} (an empty scope allows nothing)`);
  }
  const config = loadCheckedConfig(argv);
  if (!config.authHs256) throw new ConfigError('AUTH_HS256=off: the server refuses the tokens this command signs; sign in through the identity provider of AUTH_JWKS');
  const secrets = loadSecrets(config, false);
  const now = Math.floor(Date.now() / 1000);
  const claims: Record<string, unknown> = {
    sub,
    iat: now,
    ...(ttl !== undefined ? { exp: now + ttl } : {}),
    ...(scope !== undefined ? { scope: scope.trim() } : {}),
    ...(config.authIssuer !== undefined ? { iss: config.authIssuer } : {}),
    ...(config.authAudience !== undefined ? { aud: config.authAudience } : {}),
  };
  process.stdout.write(signToken(claims, secrets.current) + '\n');
}

/** The reader of stdout went away (`export | head`): not a failure to report. */
class OutputClosed extends Error {
  override readonly name = 'OutputClosed';
}

/** Writes all of `data` to `fd`, waiting out a full pipe (stdout may be non-blocking). */
function writeAllSync(fd: number, data: Buffer): void {
  let at = 0;
  while (at < data.length) {
    try {
      at += writeSync(fd, data, at, data.length - at);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'EPIPE') throw new OutputClosed('stdout was closed');
      if ((e as NodeJS.ErrnoException).code !== 'EAGAIN') throw e;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 2);
    }
  }
}

/** Files of the data directory an export must never be written over. */
function protectedFiles(config: Config): Set<string> {
  const dir = config.dataDir;
  const files = new Set([LOCK_FILE, SECRET_FILE, 'providers.json'].map((n) => resolve(dir, n)));
  for (const f of storeFiles(config)) files.add(f);
  files.add(resolve(config.providersFile));
  if (config.authSecretFile !== undefined) files.add(resolve(config.authSecretFile));
  if (config.authPreviousSecretsFile !== undefined) files.add(resolve(config.authPreviousSecretsFile));
  return files;
}

/** Runs `use` on an open store and closes it whatever happens. */
async function withStore<S extends StoreSnapshot, T>(store: S, use: (store: S) => Promise<T>): Promise<T> {
  try {
    return await use(store);
  } finally {
    await store.close();
  }
}

async function exportCommand(argv: string[]): Promise<void> {
  const out = takeOption(argv, '--out');
  const config = loadCheckedConfig(argv);
  const log = new Logger('warn', process.stderr);
  if (out === undefined) {
    // a store that cannot be read fails here, before anything is written
    const summary = await withStore(await openStoreSnapshot(config, log), (store) => exportFrom(store, (chunk) => writeAllSync(1, chunk)));
    process.stderr.write(`exported ${summary.sessions} sessions and ${summary.turns} turns from ${snapshotSource(config)}\n`);
    return;
  }
  const target = resolve(out);
  const protectedSet = protectedFiles(config);
  if (protectedSet.has(target) || protectedSet.has(`${target}.partial`)) {
    throw new ExportFailed(`--out ${out} is a file of the data directory; write the backup somewhere else`);
  }
  if (existsSync(target) && statSync(target).isDirectory()) throw new ExportFailed(`--out ${out} is a directory; give a file name`);
  const store = await openStoreSnapshot(config, log); // a store that cannot be read fails before anything is created
  const summary = await withStore(store, async (s) => {
    let result = { sessions: 0, turns: 0 };
    try {
      // written beside the target and renamed when complete, so a failed export never looks whole
      await writeFileAtomically(target, async (file) => {
        result = await exportFrom(s, async (chunk) => {
          file.add(chunk);
          if (file.full()) await file.flush();
        });
      });
    } catch (e) {
      if (e instanceof ExportFailed || e instanceof StoreOpenFailed) throw e;
      throw new ExportFailed(`cannot write ${target} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
    }
    return result;
  });
  process.stderr.write(`exported ${summary.sessions} sessions and ${summary.turns} turns from ${snapshotSource(config)} to ${out}\n`);
}

async function importCommand(argv: string[]): Promise<void> {
  const file = argv.shift();
  if (file === undefined || file.startsWith('--')) throw new ConfigError('import needs the backup FILE to read');
  const config = loadCheckedConfig(argv);
  const log = new Logger('warn', process.stderr);
  const backup = parseBackup(file); // every line checked before anything is opened or written
  // the data directory's owner, whatever the engine: a server using it must be stopped first
  mkdirSync(config.dataDir, { recursive: true });
  await guardDataDir(config.dataDir);
  const lock = acquireLock(config.dataDir);
  try {
    const r = await withStore(await openStore(config, log, { announce }), (store) => store.importAll(backup.sessions, backup.turns));
    if (r.sessions + r.turns === 0) process.stdout.write(`nothing to import: all ${r.unchanged} records are already stored as in ${file}\n`);
    else process.stdout.write(`imported ${r.sessions} sessions and ${r.turns} turns (${r.unchanged} already stored)\n`);
  } finally {
    lock.release();
  }
}

/**
 * Runs `use` on the store opened for writing, holding the data directory as import does: a
 * server using it must be stopped first (on PostgreSQL, only the one of this DATA_DIR: the
 * others' writes and this command's are transactions that cannot undo each other).
 */
async function withWritableStore<T>(config: Config, use: (store: Store) => Promise<T>): Promise<T> {
  mkdirSync(config.dataDir, { recursive: true });
  await guardDataDir(config.dataDir);
  const lock = acquireLock(config.dataDir);
  try {
    return await withStore(await openStore(config, new Logger('warn', process.stderr), { announce }), use);
  } finally {
    lock.release();
  }
}

async function reindexCommand(argv: string[]): Promise<void> {
  const config = loadCheckedConfig(argv);
  const started = Date.now();
  const n = await withWritableStore(config, (store) => store.reindex());
  process.stdout.write(`reindexed ${n} session names and turns in ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
}

async function purgeCommand(argv: string[]): Promise<void> {
  const at = argv.indexOf('--dry-run');
  const dryRun = at >= 0;
  if (dryRun) argv.splice(at, 1);
  const config = loadCheckedConfig(argv);
  const line = (id: string, session: Parameters<typeof expiryOf>[0]): void => {
    process.stdout.write(`${id}\texpired ${expiryOf(session, config.retentionDays) ?? '(never)'}\n`);
  };
  if (dryRun) {
    // a read of one snapshot, like export: safe beside a running server
    const expired = await withStore(await openStoreSnapshot(config, new Logger('warn', process.stderr)), (store) => store.expiredSessions(livenessAt(Date.now(), config.retentionDays), Number.MAX_SAFE_INTEGER));
    let turns = 0;
    for (const e of expired) {
      line(e.session._id, e.session);
      turns += e.turns;
    }
    process.stdout.write(`${expired.length} expired sessions (${turns} turns) would be purged\n`);
    return;
  }
  const purged = await withWritableStore(config, (store) => purgeExpired(store, config.retentionDays, (e) => line(e.session._id, e.session)));
  process.stdout.write(`purged ${purged.sessions} expired sessions and ${purged.turns} turns\n`);
}

async function migrateCommandLine(argv: string[]): Promise<void> {
  const config = loadCheckedConfig(argv);
  mkdirSync(config.dataDir, { recursive: true });
  await guardDataDir(config.dataDir);
  const lock = acquireLock(config.dataDir);
  try {
    // progress lines (JSON, as the server logs them) while a large journal is read and written
    const log = new Logger('info', process.stderr);
    const done = await migrateJournal(config, log, { announce });
    log.flush();
    if (done === undefined) process.stdout.write(`nothing to migrate: ${config.dataDir} holds no journal of an earlier release\n`);
    else process.stdout.write(`migrated ${done.sessions} sessions and ${done.turns} turns into ${done.into}; the journal is kept as ${done.kept}\n`);
  } finally {
    lock.release();
  }
}

async function eraseUserCommand(argv: string[]): Promise<void> {
  const user = takeOption(argv, '--user');
  if (user === undefined || user.trim() === '') throw new ConfigError('erase-user needs --user <user id>');
  const config = loadCheckedConfig(argv);
  const erased = await withWritableStore(config, (store) => eraseUser(store, user, (id) => process.stdout.write(`${id}\n`)));
  process.stdout.write(
    `erased ${erased.sessions} sessions and ${erased.turns} turns of user ${user} (${erased.bytes} bytes; tokens: ${erased.inputTokens} input, ${erased.outputTokens} output, ${erased.cachedTokens} cached)\n`,
  );
}

/** The oldest Node.js this release runs on: the first 22.x with node:sqlite without a flag. */
const NODE_MIN = [22, 13] as const;

/** A Node.js too old for this release, as one line saying which is needed; undefined when it is new enough. */
function nodeTooOld(version: string = process.versions.node): string | undefined {
  const [major = 0, minor = 0] = version.split('.').map(Number);
  if (major > NODE_MIN[0] || (major === NODE_MIN[0] && minor >= NODE_MIN[1])) return undefined;
  return `Node.js ${NODE_MIN.join('.')} or newer is needed (this is ${version}); \`npm start\` runs the Node.js of the \`node\` dev dependency, or see "Which Node.js" in the README`;
}

async function main(argv: string[]): Promise<void> {
  process.stdout.on('error', () => undefined); // a closed pipe must not crash the server
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(HELP);
    return;
  }
  if (argv.includes('--version') || argv.includes('-v')) {
    process.stdout.write(`${VERSION}\n`);
    return;
  }
  const old = nodeTooOld();
  if (old !== undefined) throw new StartFailed(old);
  const command = argv[0] !== undefined && !argv[0].startsWith('--') ? argv.shift() : 'serve';
  switch (command) {
    case 'serve': {
      const config = loadCheckedConfig(argv);
      const log = new Logger(config.logLevel);
      process.on('uncaughtException', (err) => {
        log.error('uncaught exception; exiting', { err });
        log.flush();
        process.exit(1);
      });
      try {
        await serve(config, log, VERSION);
      } catch (e) {
        log.flush();
        throw startFailure(e, config);
      }
      return;
    }
    case 'token':
      return tokenCommand(argv);
    case 'export':
      return exportCommand(argv);
    case 'import':
      return importCommand(argv);
    case 'purge':
      return purgeCommand(argv);
    case 'reindex':
      return reindexCommand(argv);
    case 'migrate':
      return migrateCommandLine(argv);
    case 'erase-user':
      return eraseUserCommand(argv);
    default:
      throw new ConfigError(`unknown command "${command}" (see --help)`);
  }
}

// Every failure is one line on stderr; LOG_LEVEL=debug adds the stack of an unexpected one.
// The same file is also the engine's own thread when it was started as one (sqlite's writer).
if (!runEngineThreadIfWorker()) main(process.argv.slice(2)).catch((e: unknown) => {
  if (e instanceof OutputClosed) process.exit(141); // as a program killed by SIGPIPE, and as quietly
  const message = (e instanceof Error ? e.message : String(e)).replace(/\s*\n\s*/g, ' ');
  process.stderr.write(`${NAME}: ${message}\n`);
  if (e instanceof ConfigError) process.exit(2);
  const expected = e instanceof StartFailed || e instanceof KeySetUnavailable || e instanceof ProvidersFileError || e instanceof DataDirLocked || e instanceof JournalDamaged || e instanceof JournalHasCrlf || e instanceof ImportRejected || e instanceof ImportConflict || e instanceof ExportFailed || e instanceof StoreOpenFailed;
  if (!expected && process.env['LOG_LEVEL']?.trim().toLowerCase() === 'debug' && e instanceof Error) process.stderr.write(`${e.stack ?? ''}\n`);
  process.exit(1);
});
