// The command line: serve (the default), token, export, import, --help, --version.
// Errors a person can fix end the process with one plain line on stderr.
import { closeSync, existsSync, fsyncSync, openSync, renameSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { ExportFailed, exportData, importData, ImportRejected } from './backup.js';
import { signToken } from './auth/jwt.js';
import { SCOPES } from './auth/authenticate.js';
import { loadSecrets, SECRET_FILE } from './auth/secret.js';
import { ConfigError, loadConfig, parseFlags, settingsHelp, type Config } from './config.js';
import { Logger } from './log.js';
import { ProvidersFileError } from './providers.js';
import { serve } from './server.js';
import { JournalDamaged } from './store/journal-format.js';
import { COMMITTED_FILE, COMPACT_SUFFIX, fsyncDir, IMPORT_SUFFIX, JOURNAL_FILE, writeFullySync } from './store/journal.js';
import { DataDirLocked, guardDataDir, LOCK_FILE } from './data-dir-lock.js';

declare const __VERSION__: string;
const VERSION = typeof __VERSION__ === 'string' ? __VERSION__ : '0.0.0-dev';
const NAME = 'chat-session-api';

const HELP = `${NAME} ${VERSION}: chat sessions and AI providers over a JSON HTTP API.

Usage:
  node dist/server.js [options]                      serve (the default)
  node dist/server.js token --sub <user> [--ttl 1h] [--scope "<scopes>"] [options]
                                                     print a token signed with the server's secret
  node dist/server.js export [--out FILE] [options]  write all sessions and turns as NDJSON
                                                     (stdout by default; safe while the server runs)
  node dist/server.js import FILE [options]          load an export into a stopped data directory
  node dist/server.js --help | --version

Token options: --sub is the user id; --ttl like 30s, 15m, 1h, 7d or "never" (default 1h);
--scope is space-separated from: ${SCOPES.join(', ')} (default: no scope claim, so everything).

Settings (environment variable / flag; the flag wins):
${settingsHelp()}
`;

/** Takes `--name value` / `--name=value` out of argv for a subcommand's own options. */
function takeOption(argv: string[], name: string): string | undefined {
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] as string;
    if (a === name) {
      const v = argv[i + 1];
      if (v === undefined) throw new ConfigError(`${name} needs a value`);
      argv.splice(i, 2);
      return v;
    }
    if (a.startsWith(`${name}=`)) {
      argv.splice(i, 1);
      return a.slice(name.length + 1);
    }
  }
  return undefined;
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
  if (sub === undefined || sub.trim() === '') throw new ConfigError('token needs --sub <user id>');
  if (scope !== undefined) {
    const unknown = scope.split(/\s+/).filter((w) => w !== '' && !(SCOPES as readonly string[]).includes(w));
    if (unknown.length > 0) throw new ConfigError(`--scope has unknown scope(s) ${unknown.join(', ')}; known: ${SCOPES.join(', ')}`);
  }
  const config = loadConfig(process.env, parseFlags(argv));
  const secrets = loadSecrets(config);
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

/** Writes all of `data` to `fd`, waiting out a full pipe (stdout may be non-blocking). */
function writeAllSync(fd: number, data: Buffer): void {
  let at = 0;
  while (at < data.length) {
    try {
      at += writeSync(fd, data, at, data.length - at);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EAGAIN') throw e;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 2);
    }
  }
}

/** Files of the data directory an export must never be written over. */
function protectedFiles(config: Config): Set<string> {
  const dir = config.dataDir;
  const names = [JOURNAL_FILE, JOURNAL_FILE + COMPACT_SUFFIX, JOURNAL_FILE + IMPORT_SUFFIX, COMMITTED_FILE, LOCK_FILE, SECRET_FILE, 'providers.json'];
  const files = new Set(names.map((n) => resolve(dir, n)));
  files.add(resolve(config.providersFile));
  if (config.authSecretFile !== undefined) files.add(resolve(config.authSecretFile));
  return files;
}

function exportCommand(argv: string[]): void {
  const out = takeOption(argv, '--out');
  const config = loadConfig(process.env, parseFlags(argv));
  if (out === undefined) {
    const summary = exportData(config.dataDir)((chunk) => writeAllSync(1, chunk));
    process.stderr.write(`exported ${summary.sessions} sessions and ${summary.turns} turns\n`);
    return;
  }
  const target = resolve(out);
  const protectedSet = protectedFiles(config);
  if (protectedSet.has(target) || protectedSet.has(`${target}.partial`)) {
    throw new ExportFailed(`--out ${out} is a file of the data directory; write the backup somewhere else`);
  }
  if (existsSync(target) && statSync(target).isDirectory()) throw new ExportFailed(`--out ${out} is a directory; give a file name`);
  const write = exportData(config.dataDir); // a journal that cannot be read fails before anything is created
  // written beside the target and renamed when complete, so a failed export never looks whole
  const tmp = `${target}.partial`;
  let fd: number;
  try {
    fd = openSync(tmp, 'w', 0o600);
  } catch (e) {
    throw new ExportFailed(`cannot write ${tmp} (${(e as NodeJS.ErrnoException).code ?? 'error'})`);
  }
  try {
    const summary = write((chunk) => writeFullySync(fd, chunk));
    fsyncSync(fd);
    closeSync(fd);
    fd = -1;
    renameSync(tmp, target);
    fsyncDir(dirname(target));
    process.stderr.write(`exported ${summary.sessions} sessions and ${summary.turns} turns to ${out}\n`);
  } catch (e) {
    if (fd >= 0) closeSync(fd);
    try {
      unlinkSync(tmp);
    } catch {
      // already gone
    }
    if (e instanceof ExportFailed) throw e;
    throw new ExportFailed(`cannot write ${target} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
  }
}

async function importCommand(argv: string[]): Promise<void> {
  const file = argv.shift();
  if (file === undefined || file.startsWith('--')) throw new ConfigError('import needs the backup FILE to read');
  const config = loadConfig(process.env, parseFlags(argv));
  await guardDataDir(config.dataDir);
  const r = importData(config.dataDir, file);
  if (r.sessions + r.turns === 0) process.stdout.write(`nothing to import: all ${r.unchanged} records are already stored as in ${file}\n`);
  else process.stdout.write(`imported ${r.sessions} sessions and ${r.turns} turns (${r.unchanged} already stored)\n`);
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
  const command = argv[0] !== undefined && !argv[0].startsWith('--') ? argv.shift() : 'serve';
  switch (command) {
    case 'serve': {
      const config = loadConfig(process.env, parseFlags(argv));
      const log = new Logger(config.logLevel);
      process.on('uncaughtException', (err) => {
        log.error('uncaught exception; exiting', { err });
        log.flush();
        process.exit(1);
      });
      await serve(config, log, VERSION);
      return;
    }
    case 'token':
      return tokenCommand(argv);
    case 'export':
      return exportCommand(argv);
    case 'import':
      return importCommand(argv);
    default:
      throw new ConfigError(`unknown command "${command}" (see --help)`);
  }
}

const KNOWN: readonly (new (...args: never[]) => Error)[] = [ProvidersFileError, DataDirLocked, JournalDamaged, ImportRejected, ExportFailed];

main(process.argv.slice(2)).catch((e: unknown) => {
  if (e instanceof ConfigError) {
    process.stderr.write(`${NAME}: ${e.message}\n`);
    process.exit(2);
  }
  if (KNOWN.some((k) => e instanceof k)) {
    process.stderr.write(`${NAME}: ${(e as Error).message}\n`);
    process.exit(1);
  }
  const err = e as NodeJS.ErrnoException;
  if (err.code === 'EADDRINUSE') process.stderr.write(`${NAME}: the address is already in use (PORT/HOST): ${err.message}\n`);
  else if (err.code === 'EACCES' || err.code === 'EPERM') process.stderr.write(`${NAME}: permission denied: ${err.message}\n`);
  else process.stderr.write(`${NAME}: ${err.stack ?? String(e)}\n`);
  process.exit(1);
});
