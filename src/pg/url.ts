// DATABASE_URL parsing, the libpq way: postgres://user:pass@host:port/db?sslmode=...; a host
// that is a directory (?host=/run/postgresql) means the unix socket in it. The password is
// kept in a Password, which prints as [redacted] everywhere it could be printed.
import { userInfo } from 'node:os';
import { PgError } from './errors.js';

export type SslMode = 'disable' | 'require' | 'verify-full';

const SSL_MODES: readonly SslMode[] = ['disable', 'require', 'verify-full'];
const PARAMS = ['host', 'port', 'user', 'password', 'dbname', 'sslmode', 'sslrootcert', 'application_name', 'connect_timeout'];
const DEFAULT_CONNECT_TIMEOUT_S = 10;

/**
 * A password that stays out of logs and errors: it is a private field, so util.inspect,
 * JSON.stringify and toString all show `[redacted]`; only `reveal()` gives it, to the
 * authentication code.
 */
export class Password {
  readonly #value: string;
  constructor(value: string) {
    this.#value = value;
  }
  reveal(): string {
    return this.#value;
  }
  toString(): string {
    return '[redacted]';
  }
  toJSON(): string {
    return '[redacted]';
  }
  [Symbol.for('nodejs.util.inspect.custom')](): string {
    return 'Password [redacted]';
  }
}

export interface ConnectionConfig {
  /** Host name or IP address; for a unix socket, the socket's directory. */
  readonly host: string;
  readonly port: number;
  /** Set when `host` is a directory: the socket file `<dir>/.s.PGSQL.<port>`. */
  readonly socketPath: string | undefined;
  readonly user: string;
  readonly database: string;
  readonly password: Password | undefined;
  /** Ignored on a unix socket, as libpq does: the kernel already vouches for the peer. */
  readonly sslmode: SslMode;
  /** CA file for verify-full; without it, Node.js's bundled CAs are trusted. */
  readonly sslrootcert: string | undefined;
  readonly applicationName: string | undefined;
  readonly connectTimeoutMs: number;
}

function configError(message: string): PgError {
  return new PgError('config', `DATABASE_URL: ${message}`);
}

function decode(part: string, what: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    throw configError(`bad percent-encoding in the ${what}`);
  }
}

function defaultUser(): string {
  try {
    return userInfo().username;
  } catch {
    return 'postgres';
  }
}

/**
 * new URL(), also taking libpq's empty host after a user (postgres://user@/db?host=/dir),
 * which WHATWG URLs refuse. Its TypeError carries the whole input, so it is not passed on.
 */
function toUrl(text: string): URL | undefined {
  try {
    return new URL(text.replace(/^(postgres(?:ql)?:\/\/[^/?#]*@)(?=[/?#]|$)/, '$1localhost'));
  } catch {
    return undefined;
  }
}

/** Parses a DATABASE_URL. Errors are PgError `config`, and never quote the URL (it may hold the password). */
export function parseDatabaseUrl(text: string): ConnectionConfig {
  const url = toUrl(text);
  if (url === undefined) throw configError('not a valid URL (expected postgres://user:password@host:port/database)');
  if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') {
    throw configError('the scheme must be postgres:// or postgresql://');
  }
  if (url.hash !== '') throw configError('a #fragment is not allowed');
  const q = url.searchParams;
  for (const name of q.keys()) {
    if (!PARAMS.includes(name)) throw configError(`unsupported parameter "${name}" (supported: ${PARAMS.join(', ')})`);
  }

  let host = q.get('host') ?? decode(url.hostname, 'host');
  if (host.includes(',')) throw configError('several hosts are not supported');
  if (host.startsWith('[') && host.endsWith(']')) host = host.slice(1, -1);
  if (host === '') host = 'localhost';

  const portText = q.get('port') ?? (url.port === '' ? '5432' : url.port);
  const port = Number(portText);
  if (!/^\d+$/.test(portText) || port < 1 || port > 65535) throw configError('port must be a number from 1 to 65535');

  const user = q.get('user') ?? (url.username !== '' ? decode(url.username, 'user name') : defaultUser());
  const passwordText = q.get('password') ?? (url.password !== '' ? decode(url.password, 'password') : undefined);
  const path = decode(url.pathname, 'database name');
  const database = q.get('dbname') ?? (path.length > 1 ? path.slice(1) : user);

  const sslmodeText = q.get('sslmode') ?? 'disable';
  const sslmode = SSL_MODES.find((m) => m === sslmodeText);
  if (sslmode === undefined) throw configError(`sslmode must be one of ${SSL_MODES.join(', ')}`);
  const sslrootcert = q.get('sslrootcert') ?? undefined;
  if (sslrootcert !== undefined && sslmode !== 'verify-full') {
    throw configError('sslrootcert is only used with sslmode=verify-full');
  }

  const timeoutText = q.get('connect_timeout') ?? String(DEFAULT_CONNECT_TIMEOUT_S);
  const timeoutS = Number(timeoutText);
  if (!/^\d+$/.test(timeoutText) || timeoutS < 1) throw configError('connect_timeout must be a whole number of seconds, at least 1');

  return {
    host,
    port,
    socketPath: host.startsWith('/') ? `${host.replace(/\/+$/, '')}/.s.PGSQL.${port}` : undefined,
    user,
    database,
    password: passwordText === undefined ? undefined : new Password(passwordText),
    sslmode,
    sslrootcert,
    applicationName: q.get('application_name') ?? undefined,
    connectTimeoutMs: timeoutS * 1000,
  };
}

/** `user@host:port/database`, for messages: where a connection goes, with no secret. */
export function describeTarget(c: ConnectionConfig): string {
  const where = c.socketPath ?? (c.host.includes(':') ? `[${c.host}]:${c.port}` : `${c.host}:${c.port}`);
  return `${c.user}@${where}/${c.database}`;
}

/** The URL with its password replaced by `***`, for logging the configuration. */
export function redactDatabaseUrl(text: string): string {
  const url = toUrl(text);
  if (url === undefined) return '[unparseable DATABASE_URL]';
  if (url.password !== '') url.password = '***';
  if (url.searchParams.has('password')) url.searchParams.set('password', '***');
  return url.href;
}
