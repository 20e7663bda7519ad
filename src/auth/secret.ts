// The HS256 key: AUTH_SECRET, or the file AUTH_SECRET_FILE names, or `$DATA_DIR/auth-secret`,
// generated on first use (32 random bytes written as 64 hex characters, mode 0600). The key
// is the text itself, so any tool given the same text signs tokens this server accepts.
import { randomBytes } from 'node:crypto';
import { closeSync, existsSync, fsyncSync, mkdirSync, openSync, readFileSync, statSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { ConfigError, type Config } from '../config.js';

export const SECRET_FILE = 'auth-secret';
const MIN_BYTES = 32;

export interface Secrets {
  /** Signs tokens and verifies them. */
  readonly current: Buffer;
  /** Verify only (rotation). */
  readonly previous: readonly Buffer[];
  readonly source: 'AUTH_SECRET' | 'AUTH_SECRET_FILE' | 'generated' | 'data directory';
  /** Where the key lives when it is a file. */
  readonly file: string | undefined;
  /** Warnings for the log (e.g. a secret file others can read). */
  readonly warnings: readonly string[];
}

function checked(name: string, text: string): Buffer {
  const key = Buffer.from(text, 'utf8');
  if (key.length < MIN_BYTES) throw new ConfigError(`${name} must be at least ${MIN_BYTES} bytes (got ${key.length})`);
  return key;
}

function readSecretFile(name: string, file: string): string {
  try {
    return readFileSync(file, 'utf8').replace(/[\r\n]+$/, '');
  } catch (e) {
    throw new ConfigError(`${name}: cannot read ${file} (${(e as NodeJS.ErrnoException).code ?? 'error'})`);
  }
}

function looseModeWarning(file: string): string[] {
  try {
    const mode = statSync(file).mode & 0o777;
    if ((mode & 0o077) !== 0) return [`${file} is readable by others (mode ${mode.toString(8)}); chmod 600 it`];
  } catch {
    // already read it; a stat failure here is not worth stopping for
  }
  return [];
}

/** The keys still accepted for verification: AUTH_PREVIOUS_SECRETS, or the lines of AUTH_PREVIOUS_SECRETS_FILE. */
function previousKeys(config: Config): { keys: Buffer[]; warnings: string[] } {
  const f = config.authPreviousSecretsFile;
  if (f === undefined) return { keys: config.authPreviousSecrets.map((s, i) => checked(`AUTH_PREVIOUS_SECRETS entry ${i + 1}`, s)), warnings: [] };
  const lines = readSecretFile('AUTH_PREVIOUS_SECRETS_FILE', f).split(/\r?\n/).map((l) => l.trim());
  const keys: Buffer[] = [];
  lines.forEach((l, i) => {
    if (l !== '') keys.push(checked(`AUTH_PREVIOUS_SECRETS_FILE line ${i + 1}`, l));
  });
  return { keys, warnings: looseModeWarning(f) };
}

/**
 * Checks the configured keys as loadSecrets does, creating nothing: the server calls it before it
 * tries its address, so a bad key is reported whatever holds the port. A missing
 * `$DATA_DIR/auth-secret` is no error here (the server makes it once it has its address).
 */
export function checkSecrets(config: Config): void {
  if (config.authSecret === undefined && config.authSecretFile === undefined && !existsSync(join(config.dataDir, SECRET_FILE))) previousKeys(config);
  else loadSecrets(config, false);
}

/**
 * Finds the key the server signs and verifies with. With no key configured it is
 * `$DATA_DIR/auth-secret`, created when missing if `create` (the server); without `create`
 * (the token command) a missing file is an error: a token signed with a key no server has
 * would be refused everywhere.
 */
export function loadSecrets(config: Config, create = true): Secrets {
  const prev = previousKeys(config);
  const previous = prev.keys;
  if (config.authSecret !== undefined) {
    return { current: checked('AUTH_SECRET', config.authSecret), previous, source: 'AUTH_SECRET', file: undefined, warnings: prev.warnings };
  }
  if (config.authSecretFile !== undefined) {
    const f = config.authSecretFile;
    return { current: checked('AUTH_SECRET_FILE', readSecretFile('AUTH_SECRET_FILE', f)), previous, source: 'AUTH_SECRET_FILE', file: f, warnings: [...looseModeWarning(f), ...prev.warnings] };
  }
  const file = join(config.dataDir, SECRET_FILE);
  let source: Secrets['source'] = 'data directory';
  if (!existsSync(file) && !create) {
    throw new ConfigError(
      `no signing secret: ${file} does not exist and neither AUTH_SECRET nor AUTH_SECRET_FILE is set; start the server once (it creates the secret), or give this command the server's DATA_DIR or AUTH_SECRET_FILE`,
    );
  }
  if (!existsSync(file)) {
    mkdirSync(config.dataDir, { recursive: true });
    try {
      const fd = openSync(file, 'wx', 0o600);
      try {
        writeSync(fd, randomBytes(32).toString('hex') + '\n');
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
      source = 'generated';
    } catch (e) {
      // another process (a `token` command, say) created it first: use theirs
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') {
        throw new ConfigError(`cannot create ${file} (${(e as NodeJS.ErrnoException).code ?? 'error'}); set AUTH_SECRET_FILE or make DATA_DIR writable`);
      }
    }
  }
  const key = checked(file, readSecretFile('AUTH_SECRET_FILE', file));
  return { current: key, previous, source, file, warnings: [...looseModeWarning(file), ...prev.warnings] };
}
