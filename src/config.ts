// Settings: each from an environment variable or the matching command-line flag (the flag
// wins), validated once at start. A bad value is a ConfigError naming the setting.
import { isAbsolute, join, resolve } from 'node:path';
import { LOG_LEVELS, type LogLevel } from './log.js';

/** The storage engines (STORE); src/store/open.ts opens them. */
export const ENGINES = ['sqlite', 'postgres'] as const;
export type EngineName = (typeof ENGINES)[number];

export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}

export type AccessMode = 'shared' | 'owner';

/** Where the key set of AUTH_JWKS is read from. */
export type JwksLocation = { readonly kind: 'url'; readonly url: URL } | { readonly kind: 'file'; readonly path: string };

export interface RateLimit {
  /** Tokens added per second. */
  readonly rate: number;
  /** Bucket size: one second's worth (at least 1). */
  readonly burst: number;
  readonly text: string;
}

export interface Config {
  readonly port: number;
  readonly host: string;
  readonly dataDir: string;
  readonly providersFile: string;
  /** PROVIDERS_FILE was given: the file must exist. */
  readonly providersFileSet: boolean;
  readonly authSecret: string | undefined;
  readonly authSecretFile: string | undefined;
  readonly authPreviousSecrets: readonly string[];
  /** A file of previous keys, one per line (instead of AUTH_PREVIOUS_SECRETS). */
  readonly authPreviousSecretsFile: string | undefined;
  readonly authIssuer: string | undefined;
  readonly authAudience: string | undefined;
  /** AUTH_JWKS: the identity provider's key set, a file path (resolved) or an http(s) URL; undefined: HS256 tokens only. */
  readonly authJwks: JwksLocation | undefined;
  /** How often the key set is fetched again (AUTH_JWKS_REFRESH). */
  readonly authJwksRefreshMs: number;
  /** The claim of a token from the key set that is the user id (AUTH_USER_CLAIM). */
  readonly authUserClaim: string;
  /** false with AUTH_HS256=off: tokens signed with AUTH_SECRET are refused. */
  readonly authHs256: boolean;
  readonly access: AccessMode;
  readonly bodyLimit: number;
  readonly logLevel: LogLevel;
  /** undefined: no CORS headers; '*' or a list of exact origins. */
  readonly corsOrigin: '*' | readonly string[] | undefined;
  readonly metrics: boolean;
  /** GET /docs, the API reference page. */
  readonly docs: boolean;
  readonly rateLimit: RateLimit | undefined;
  readonly trustProxy: boolean;
  readonly fsync: boolean;
  readonly store: EngineName;
  /** STORE=postgres: where the database is (it holds the password: never log it). */
  readonly databaseUrl: string | undefined;
  readonly databaseSchema: string;
  readonly databasePoolSize: number;
  /** STORE=postgres: a streaming turn no instance generates (a client's own) with no write for this long is taken as left by a crash (STREAMING_IDLE). */
  readonly streamingIdleMs: number;
  /** STORE=postgres: the replies of an instance that stopped proving it is alive are interrupted by another within this time (INSTANCE_TIMEOUT). */
  readonly instanceTimeoutMs: number;
  /** false only to measure what group commit buys (GROUP_COMMIT=off): one write per commit. */
  readonly groupCommit: boolean;
  /** Days after its last activity a session without its own expiresAt is gone; undefined: never. */
  readonly retentionDays: number | undefined;
  /** How often the background purge deletes the storage of expired sessions; undefined with PURGE_INTERVAL=off. */
  readonly purgeIntervalMs: number | undefined;
  readonly sqliteFile: string;
  /** Page cache of each sqlite connection, in bytes. */
  readonly sqliteCacheBytes: number;
  /** Search walks the caller's sessions instead of reading the index when a query's rarest word has at least this many documents. */
  readonly searchWalkFrom: number;
  /** false with SEARCH=off: no search index is kept and GET /api/v1/search is not served. */
  readonly search: boolean;
  readonly limits: ConnectionLimits;
  /** The live feed (event streams, tickets); undefined with EVENTS=off. */
  readonly events: EventSettings | undefined;
  /** Replies in progress on this instance at most (REPLIES_MAX). */
  readonly repliesMax: number;
  /** The longest a model provider may send no progress (text, reasoning, a tool call, usage) before a reply ends with error (PROVIDER_IDLE_TIMEOUT). */
  readonly providerIdleTimeoutMs: number;
  /** The longest a reply may take, whatever its provider sends (REPLY_MAX_DURATION). */
  readonly replyMaxDurationMs: number;
  /** The most of a conversation a reply sends its provider, in bytes (REPLY_CONTEXT_MAX; at least BODY_LIMIT). */
  readonly replyContextMax: number;
}

/** The live feed's settings. */
export interface EventSettings {
  /** Events kept for clients that reconnect with Last-Event-ID. */
  readonly window: number;
  /** sqlite: bytes of those events' data kept in memory at most. */
  readonly windowBytes: number;
  readonly heartbeatMs: number;
  /** Unsent bytes an event stream may hold before it is cut off. */
  readonly bufferBytes: number;
  /** Event streams open at once, and per user. */
  readonly maxStreams: number;
  readonly maxStreamsPerUser: number;
}

/** What bounds the memory and descriptors that clients can make the server hold. */
export interface ConnectionLimits {
  /** Open connections at most (a few more are let in for /healthz and /metrics). */
  readonly maxConnections: number;
  /** Requests in flight one user (or one address, for requests without a user) may have at once. */
  readonly maxRequestsPerUser: number;
  /** Request body bytes held at once, over all requests. */
  readonly bodyMemory: number;
  /** A request body must arrive within this many milliseconds of its headers. */
  readonly bodyTimeoutMs: number;
  /** An answer the client takes no byte of for this many milliseconds is cut off. */
  readonly writeTimeoutMs: number;
  /** What one user's sessions may hold (QUOTA_*); each undefined when off. */
  readonly quotas: Quotas;
  /** The resident memory the process may use (MEMORY_LIMIT): bytes, or found at start ('auto'), or not watched ('off'). */
  readonly memoryLimit: number | 'auto' | 'off';
}

/** What one user's sessions may hold at most (usage is counted by session owner). */
export interface Quotas {
  readonly sessions?: number | undefined;
  readonly turns?: number | undefined;
  /** UTF-8 bytes of the JSON of the sessions and their turns. */
  readonly bytes?: number | undefined;
}

interface Setting {
  readonly env: string;
  readonly flag: string;
  readonly def: string;
  readonly help: string;
}

/** Every setting, in the order --help lists them. */
export const SETTINGS: readonly Setting[] = [
  { env: 'PORT', flag: '--port', def: '3000', help: 'TCP port; 0 picks a free one (the startup log line shows it)' },
  { env: 'HOST', flag: '--host', def: '127.0.0.1', help: 'address to listen on; 0.0.0.0 for containers' },
  { env: 'DATA_DIR', flag: '--data-dir', def: './data', help: 'providers file, sqlite database, generated secret, lock' },
  { env: 'PROVIDERS_FILE', flag: '--providers-file', def: '$DATA_DIR/providers.json', help: 'configured AI providers (JSON array); when set, the file must exist' },
  { env: 'AUTH_SECRET', flag: '--auth-secret', def: '(generated)', help: 'HS256 key, at least 32 bytes (prefer AUTH_SECRET_FILE: flags show in ps)' },
  { env: 'AUTH_SECRET_FILE', flag: '--auth-secret-file', def: '$DATA_DIR/auth-secret', help: 'file holding the HS256 key; generated (0600) on first start when no secret is set' },
  { env: 'AUTH_PREVIOUS_SECRETS', flag: '--auth-previous-secrets', def: '(none)', help: 'comma-separated keys still accepted for verification (rotation)' },
  { env: 'AUTH_PREVIOUS_SECRETS_FILE', flag: '--auth-previous-secrets-file', def: '(none)', help: 'file of keys still accepted for verification, one per line (instead of AUTH_PREVIOUS_SECRETS)' },
  { env: 'AUTH_ISSUER', flag: '--auth-issuer', def: '(none)', help: 'when set, tokens must carry this iss' },
  { env: 'AUTH_AUDIENCE', flag: '--auth-audience', def: '(none)', help: 'when set, a token\'s aud must be or contain this' },
  { env: 'AUTH_JWKS', flag: '--auth-jwks', def: '(none)', help: 'your identity provider\'s JSON Web Key Set, a file or an http(s):// URL: tokens it signs are accepted' },
  { env: 'AUTH_JWKS_REFRESH', flag: '--auth-jwks-refresh', def: '1h', help: 'how often AUTH_JWKS is fetched again (s, m, h); also at most once a minute for a token with an unknown kid' },
  { env: 'AUTH_USER_CLAIM', flag: '--auth-user-claim', def: 'sub', help: 'the claim of an AUTH_JWKS token that is the user id (preferred_username, email, oid...)' },
  { env: 'AUTH_HS256', flag: '--auth-hs256', def: 'on', help: 'off: refuse the HS256 tokens of AUTH_SECRET (the token command\'s); needs AUTH_JWKS' },
  { env: 'ACCESS', flag: '--access', def: 'shared', help: 'shared: any signed-in user may use any session by id; owner: only its creator' },
  { env: 'BODY_LIMIT', flag: '--body-limit', def: '1mb', help: 'largest request body (b, kb, mb); larger gets 413' },
  { env: 'LOG_LEVEL', flag: '--log-level', def: 'info', help: 'debug, info, warn, error or silent; JSON lines on stdout' },
  { env: 'CORS_ORIGIN', flag: '--cors-origin', def: '(none)', help: 'allowed browser origin(s), comma-separated, or *; none sends no CORS headers' },
  { env: 'METRICS', flag: '--metrics', def: 'on', help: 'on or off: GET /metrics in Prometheus text format' },
  { env: 'DOCS', flag: '--docs', def: 'on', help: 'on or off: GET /docs, the API reference page with a try-it form' },
  { env: 'RATE_LIMIT', flag: '--rate-limit', def: '(off)', help: 'per-user request rate, e.g. 100/s or 600/m; over it gets 429' },
  { env: 'TRUST_PROXY', flag: '--trust-proxy', def: 'off', help: 'on: take the client address from X-Forwarded-For (behind nginx)' },
  { env: 'FSYNC', flag: '--fsync', def: 'on', help: 'off only to measure what durability costs: acknowledged writes can be lost' },
  { env: 'REPLIES_MAX', flag: '--replies-max', def: '1000', help: 'replies in progress on this instance at most; more get 503 Too many replies in progress' },
  { env: 'PROVIDER_IDLE_TIMEOUT', flag: '--provider-idle-timeout', def: '60s', help: 'a model provider that sends no progress this long (text, reasoning, a tool call or usage: keep-alives and unfinished lines are none) ends its reply with error' },
  { env: 'REPLY_MAX_DURATION', flag: '--reply-max-duration', def: '30m', help: 'a reply still going after this long ends with error, whatever its provider sends (ms, s, m, h)' },
  { env: 'REPLY_CONTEXT_MAX', flag: '--reply-context-max', def: '4mb', help: 'the most of a conversation sent to the model (kb, mb; at least BODY_LIMIT): the oldest turns are left out past it, the system message kept' },
  { env: 'STORE', flag: '--store', def: 'sqlite', help: 'storage engine: sqlite (a file in DATA_DIR) or postgres (DATABASE_URL; several instances on one database)' },
  { env: 'SQLITE_FILE', flag: '--sqlite-file', def: '$DATA_DIR/chat-sessions.db', help: 'the database file of STORE=sqlite' },
  { env: 'SQLITE_CACHE', flag: '--sqlite-cache', def: '32mb', help: 'page cache of each STORE=sqlite connection (the reader and the writer): what bounds its memory' },
  { env: 'DATABASE_URL', flag: '--database-url', def: '(none)', help: 'STORE=postgres: postgres://user:password@host:port/db?sslmode=disable|require|verify-full[&sslrootcert=FILE]' },
  { env: 'DATABASE_SCHEMA', flag: '--database-schema', def: 'chat_session_api', help: 'STORE=postgres: the schema holding the tables (created and migrated at start)' },
  { env: 'DATABASE_POOL_SIZE', flag: '--database-pool-size', def: '10', help: 'STORE=postgres: connections to the database at most' },
  { env: 'SEARCH', flag: '--search', def: 'on', help: 'on or off: GET /api/v1/search and the word index it reads (off: writes index nothing; on again, what was written meanwhile is indexed at start)' },
  { env: 'SEARCH_WALK_FROM', flag: '--search-walk-from', def: '5000', help: "search reads a word's matches from its index when fewer, and walks the caller's sessions newest first when it starts at least this many documents" },
  { env: 'RETENTION_DAYS', flag: '--retention-days', def: '(off)', help: 'sessions without their own expiresAt are gone (404, out of lists) this many days after their last activity' },
  { env: 'PURGE_INTERVAL', flag: '--purge-interval', def: '1m', help: 'how often the storage of expired sessions is deleted, in batches of 100 (ms, s, m, h); off: never (the purge command still can)' },
  { env: 'STREAMING_IDLE', flag: '--streaming-idle', def: '5m', help: 'STORE=postgres: a turn a client streams itself (the deltas route) that takes no delta for this long is marked interrupted (ms, s, m, h)' },
  { env: 'INSTANCE_TIMEOUT', flag: '--instance-timeout', def: '10s', help: 'STORE=postgres: each instance proves it is alive every fifth of this; the replies of one that stops are interrupted by another within this time (ms, s, m, h; at least 1s)' },
  { env: 'GROUP_COMMIT', flag: '--group-commit', def: 'on', help: 'off only to measure what sharing commits buys: one write per commit' },
  { env: 'MAX_CONNECTIONS', flag: '--max-connections', def: '1000', help: 'open connections at most; past it an idle one is closed, the oldest of whoever holds the most (keep below the descriptor limit)' },
  { env: 'MAX_REQUESTS_PER_USER', flag: '--max-requests-per-user', def: 'MAX_CONNECTIONS / 4, from 2 to 64', help: 'requests one user (or one address without a token) may have in flight at once, event streams included; past it 429 and the connection closed; also the replies of one user in progress, background ones included (past it 429)' },
  { env: 'BODY_MEMORY', flag: '--body-memory', def: '64mb', help: 'request body bytes held at once over all requests; past it 503 (at least BODY_LIMIT)' },
  { env: 'BODY_TIMEOUT', flag: '--body-timeout', def: '15s', help: 'a request body must arrive within this time of its headers, else 408 (ms, s, m, h)' },
  { env: 'WRITE_TIMEOUT', flag: '--write-timeout', def: '30s', help: 'a client that takes no byte of its answer for this long is cut off (ms, s, m, h)' },
  { env: 'MEMORY_LIMIT', flag: '--memory-limit', def: 'auto', help: "memory the process may use: auto (the cgroup's limit, else the machine's), a size, or off; writes get 503 past 85% of it or 80% of V8's heap limit" },
  { env: 'QUOTA_SESSIONS', flag: '--quota-sessions', def: '(off)', help: 'sessions one user may own at most; past it 403 Quota exceeded' },
  { env: 'QUOTA_TURNS', flag: '--quota-turns', def: '(off)', help: "turns one user's sessions may hold at most (whoever wrote them)" },
  { env: 'QUOTA_BYTES', flag: '--quota-bytes', def: '(off)', help: "bytes of JSON one user's sessions and their turns may hold at most (kb, mb, gb)" },
  { env: 'EVENTS', flag: '--events', def: 'on', help: 'on or off: the live feed (GET /api/v1/events, the event streams, their tickets)' },
  { env: 'EVENTS_WINDOW', flag: '--events-window', def: '10000', help: 'events kept for clients that come back with Last-Event-ID; older ones get reset' },
  { env: 'EVENTS_WINDOW_MEMORY', flag: '--events-window-memory', def: '64mb', help: 'sqlite: memory those kept events may take at most' },
  { env: 'EVENTS_HEARTBEAT', flag: '--events-heartbeat', def: '15s', help: 'a heartbeat comment on every event stream this often, so proxies keep it open (ms, s, m, h); the OpenAI door\'s streams send `: ping` after as long a silence' },
  { env: 'EVENTS_BUFFER', flag: '--events-buffer', def: '1mb', help: 'unsent bytes an event stream may hold; past it the stream ends with a final event saying so' },
  { env: 'MAX_STREAMS', flag: '--max-streams', def: 'MAX_CONNECTIONS / 2', help: 'event streams open at once; past it 503 (below MAX_CONNECTIONS: streams are never idle)' },
  { env: 'MAX_STREAMS_PER_USER', flag: '--max-streams-per-user', def: '16 (below MAX_REQUESTS_PER_USER)', help: 'event streams one user may have open at once; past it 429 (below MAX_REQUESTS_PER_USER: a stream is a request in flight)' },
];

type Raw = Map<string, string>;

/** Splits argv into settings (by env name) and leaves the rest; unknown flags are errors. */
export function parseFlags(argv: readonly string[]): Raw {
  const raw: Raw = new Map();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    if (!arg.startsWith('--')) throw new ConfigError(`unexpected argument "${arg}" (see --help)`);
    const eq = arg.indexOf('=');
    const flag = eq === -1 ? arg : arg.slice(0, eq);
    const setting = SETTINGS.find((s) => s.flag === flag);
    if (setting === undefined) throw new ConfigError(`unknown option ${flag} (see --help)`);
    if (raw.has(setting.env)) throw new ConfigError(`repeated option ${flag}: give it once`);
    let value: string | undefined;
    if (eq !== -1) value = arg.slice(eq + 1);
    else {
      value = argv[i + 1];
      i++;
    }
    if (value === undefined) throw new ConfigError(`${flag} needs a value`);
    raw.set(setting.env, value);
  }
  return raw;
}

const SIZE = /^(\d+)\s*(b|kb|k|mb|m|gb|g)?$/i;
const UNITS: Record<string, number> = { b: 1, k: 1024, kb: 1024, m: 1024 ** 2, mb: 1024 ** 2, g: 1024 ** 3, gb: 1024 ** 3 };

export function parseSize(name: string, text: string): number {
  const m = SIZE.exec(text.trim());
  const n = m === null ? NaN : Number(m[1]) * (UNITS[(m[2] ?? 'b').toLowerCase()] as number);
  if (!Number.isSafeInteger(n) || n < 1) throw new ConfigError(`${name} must be a size such as 1mb, 512kb or 65536 (got "${text}")`);
  return n;
}

const DURATION = /^(\d+)\s*(ms|s|m|h)$/i;
const DURATION_UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** A duration in milliseconds from text such as 500ms, 15s, 2m or 1h. */
export function parseDuration(name: string, text: string): number {
  const m = DURATION.exec(text.trim());
  const n = m === null ? NaN : Number(m[1]) * (DURATION_UNITS[(m[2] as string).toLowerCase()] as number);
  if (!Number.isSafeInteger(n) || n < 1 || n > 2 ** 31 - 1) throw new ConfigError(`${name} must be a duration such as 500ms, 15s, 2m or 1h (got "${text}")`);
  return n;
}

/** `ms`, or a ConfigError naming the setting when it is under `min`. */
function atLeast(name: string, ms: number, min: number, text: string): number {
  if (ms < min) throw new ConfigError(`${name} must be at least ${min / 1000}s (got "${text}")`);
  return ms;
}

function parseCount(name: string, text: string, max: number): number {
  const t = text.trim();
  const n = /^\d+$/.test(t) ? Number(t) : NaN;
  if (!(n >= 1 && n <= max)) throw new ConfigError(`${name} must be a whole number from 1 to ${max} (got "${text}")`);
  return n;
}

function parseSwitch(name: string, text: string): boolean {
  const t = text.trim().toLowerCase();
  if (['on', 'true', '1', 'yes'].includes(t)) return true;
  if (['off', 'false', '0', 'no'].includes(t)) return false;
  throw new ConfigError(`${name} must be on or off (got "${text}")`);
}

const RATE = /^(\d+(?:\.\d+)?)\s*\/\s*(s|sec|second|m|min|minute)$/i;

function parseRateLimit(text: string): RateLimit {
  const m = RATE.exec(text.trim());
  const n = m === null ? NaN : Number(m[1]);
  if (m === null || !(n > 0)) throw new ConfigError(`RATE_LIMIT must look like 100/s or 600/m (got "${text}")`);
  const perSecond = (m[2] as string).toLowerCase().startsWith('m') ? n / 60 : n;
  return { rate: perSecond, burst: Math.max(1, Math.ceil(perSecond)), text: text.trim() };
}

/** AUTH_JWKS: an http(s) URL, or else a file path (relative to the working directory). */
function parseJwksLocation(text: string, cwd: string): JwksLocation {
  if (/^https?:\/\//i.test(text)) {
    let url: URL;
    try {
      url = new URL(text);
    } catch {
      throw new ConfigError(`AUTH_JWKS must be a file path or an http(s):// URL (got "${text}")`);
    }
    return { kind: 'url', url };
  }
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(text)) throw new ConfigError(`AUTH_JWKS must be a file path or an http(s):// URL (got "${text}")`);
  return { kind: 'file', path: resolve(cwd, text) };
}

function optional(v: string | undefined): string | undefined {
  return v === undefined || v.trim() === '' ? undefined : v;
}

/** The configuration from `env` overlaid with `flags` (from parseFlags). */
export function loadConfig(env: NodeJS.ProcessEnv, flags: Raw = new Map(), cwd: string = process.cwd()): Config {
  const get = (name: string): string | undefined => optional(flags.get(name) ?? env[name]);

  const portText = get('PORT') ?? '3000';
  const port = /^\d{1,5}$/.test(portText.trim()) ? Number(portText) : NaN;
  if (!(port >= 0 && port <= 65535)) throw new ConfigError(`PORT must be a port number from 0 to 65535 (got "${portText}")`);

  const host = (get('HOST') ?? '127.0.0.1').trim();
  const dataDirText = get('DATA_DIR') ?? './data';
  const dataDir = isAbsolute(dataDirText) ? dataDirText : resolve(cwd, dataDirText);
  const providersText = get('PROVIDERS_FILE');
  const providersFile = providersText === undefined ? join(dataDir, 'providers.json') : resolve(cwd, providersText);

  const authSecret = get('AUTH_SECRET');
  const secretFileText = get('AUTH_SECRET_FILE');
  if (authSecret !== undefined && secretFileText !== undefined) {
    throw new ConfigError('AUTH_SECRET and AUTH_SECRET_FILE are both set; set one of them');
  }
  const previous = (get('AUTH_PREVIOUS_SECRETS') ?? '').split(',').map((s) => s.trim()).filter((s) => s !== '');
  const previousFileText = get('AUTH_PREVIOUS_SECRETS_FILE');
  if (previous.length > 0 && previousFileText !== undefined) {
    throw new ConfigError('AUTH_PREVIOUS_SECRETS and AUTH_PREVIOUS_SECRETS_FILE are both set; set one of them');
  }

  const jwksText = get('AUTH_JWKS');
  const authJwks = jwksText === undefined ? undefined : parseJwksLocation(jwksText.trim(), cwd);
  const authHs256 = parseSwitch('AUTH_HS256', get('AUTH_HS256') ?? 'on');
  for (const name of ['AUTH_JWKS_REFRESH', 'AUTH_USER_CLAIM']) {
    if (authJwks === undefined && get(name) !== undefined) throw new ConfigError(`${name} is about the tokens of AUTH_JWKS, which is not set`);
  }
  if (!authHs256 && authJwks === undefined) throw new ConfigError('AUTH_HS256=off needs AUTH_JWKS: no token could be accepted');
  const authJwksRefreshMs = parseDuration('AUTH_JWKS_REFRESH', get('AUTH_JWKS_REFRESH') ?? '1h');
  if (authJwksRefreshMs < 1000) throw new ConfigError(`AUTH_JWKS_REFRESH must be at least 1s (got "${get('AUTH_JWKS_REFRESH') ?? ''}")`);
  const authUserClaim = (get('AUTH_USER_CLAIM') ?? 'sub').trim();

  const access = (get('ACCESS') ?? 'shared').trim();
  if (access !== 'shared' && access !== 'owner') throw new ConfigError(`ACCESS must be shared or owner (got "${access}")`);

  const logLevel = (get('LOG_LEVEL') ?? 'info').trim().toLowerCase();
  if (!(LOG_LEVELS as readonly string[]).includes(logLevel)) {
    throw new ConfigError(`LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')} (got "${logLevel}")`);
  }

  const corsText = get('CORS_ORIGIN');
  let corsOrigin: Config['corsOrigin'];
  if (corsText !== undefined) {
    const list = corsText.split(',').map((s) => s.trim()).filter((s) => s !== '');
    if (list.includes('*')) corsOrigin = '*';
    else {
      for (const o of list) {
        if (!/^https?:\/\/[^/\s]+$/i.test(o)) throw new ConfigError(`CORS_ORIGIN entries must be origins like https://chat.example.com or * (got "${o}")`);
      }
      corsOrigin = list;
    }
  }

  const storeText = (get('STORE') ?? 'sqlite').trim().toLowerCase();
  if (storeText === 'journal') throw new ConfigError('STORE=journal: the journal engine is retired; leave STORE unset (sqlite: the first start migrates the journal of DATA_DIR) or set it to postgres');
  if (!(ENGINES as readonly string[]).includes(storeText)) throw new ConfigError(`STORE must be one of ${ENGINES.join(', ')} (got "${storeText}")`);
  const sqliteText = get('SQLITE_FILE');
  const purgeText = get('PURGE_INTERVAL');
  const databaseUrl = get('DATABASE_URL');
  if (storeText === 'postgres' && databaseUrl === undefined) throw new ConfigError('STORE=postgres needs DATABASE_URL (postgres://user:password@host:port/database)');
  const bodyLimit = parseSize('BODY_LIMIT', get('BODY_LIMIT') ?? '1mb');
  const bodyMemory = parseSize('BODY_MEMORY', get('BODY_MEMORY') ?? '64mb');
  const replyContextMax = parseSize('REPLY_CONTEXT_MAX', get('REPLY_CONTEXT_MAX') ?? '4mb');
  // the turn answered, at most BODY_LIMIT, must always fit
  if (replyContextMax < bodyLimit) throw new ConfigError(`REPLY_CONTEXT_MAX must be at least BODY_LIMIT (${bodyLimit} bytes), or the turn a reply answers might not fit (got ${replyContextMax} bytes)`);
  if (bodyMemory < bodyLimit) throw new ConfigError(`BODY_MEMORY must be at least BODY_LIMIT (${bodyLimit} bytes), or no body that large could ever be read (got ${bodyMemory} bytes)`);

  const rateText = get('RATE_LIMIT');
  const maxConnections = parseCount('MAX_CONNECTIONS', get('MAX_CONNECTIONS') ?? '1000', 1_000_000);
  const eventsOn = parseSwitch('EVENTS', get('EVENTS') ?? 'on');
  const maxRequestsText = get('MAX_REQUESTS_PER_USER');
  // a quarter of the connections, so that one user cannot hold them all, and never fewer than a
  // client with a few requests in parallel needs nor more than one plausibly makes
  const maxRequestsPerUser = maxRequestsText === undefined ? Math.min(64, Math.max(2, Math.floor(maxConnections / 4))) : parseCount('MAX_REQUESTS_PER_USER', maxRequestsText, 1_000_000);
  if (maxRequestsText !== undefined && maxRequestsPerUser >= maxConnections) {
    throw new ConfigError(`MAX_REQUESTS_PER_USER must be below MAX_CONNECTIONS (${maxConnections}): one user could otherwise hold every connection (got ${maxRequestsPerUser})`);
  }
  const maxStreamsPerUserText = get('MAX_STREAMS_PER_USER');
  const maxStreamsPerUser =
    maxStreamsPerUserText === undefined ? Math.max(1, Math.min(16, maxRequestsPerUser - 1)) : parseCount('MAX_STREAMS_PER_USER', maxStreamsPerUserText, 1_000_000);
  if (eventsOn && maxStreamsPerUser >= maxRequestsPerUser) {
    throw new ConfigError(
      `MAX_STREAMS_PER_USER must be below MAX_REQUESTS_PER_USER (${maxRequestsPerUser}): an event stream is a request in flight, and the user's other requests need some (got ${maxStreamsPerUser})`,
    );
  }
  const maxStreamsText = get('MAX_STREAMS');
  const maxStreams = maxStreamsText === undefined ? Math.max(1, Math.floor(maxConnections / 2)) : parseCount('MAX_STREAMS', maxStreamsText, 1_000_000);
  if (eventsOn && maxStreams >= maxConnections) {
    throw new ConfigError(`MAX_STREAMS must be below MAX_CONNECTIONS (${maxConnections}): an event stream holds its connection, and other requests need some (got ${maxStreams})`);
  }
  const events: EventSettings | undefined = eventsOn
    ? {
        window: parseCount('EVENTS_WINDOW', get('EVENTS_WINDOW') ?? '10000', 100_000_000),
        windowBytes: parseSize('EVENTS_WINDOW_MEMORY', get('EVENTS_WINDOW_MEMORY') ?? '64mb'),
        heartbeatMs: parseDuration('EVENTS_HEARTBEAT', get('EVENTS_HEARTBEAT') ?? '15s'),
        bufferBytes: parseSize('EVENTS_BUFFER', get('EVENTS_BUFFER') ?? '1mb'),
        maxStreams,
        maxStreamsPerUser,
      }
    : undefined;
  return {
    port,
    host,
    dataDir,
    providersFile,
    providersFileSet: providersText !== undefined,
    authSecret,
    authSecretFile: secretFileText === undefined ? undefined : resolve(cwd, secretFileText),
    authPreviousSecrets: previous,
    authPreviousSecretsFile: previousFileText === undefined ? undefined : resolve(cwd, previousFileText),
    authIssuer: get('AUTH_ISSUER'),
    authAudience: get('AUTH_AUDIENCE'),
    authJwks,
    authJwksRefreshMs,
    authUserClaim,
    authHs256,
    access,
    bodyLimit,
    logLevel: logLevel as LogLevel,
    corsOrigin,
    metrics: parseSwitch('METRICS', get('METRICS') ?? 'on'),
    docs: parseSwitch('DOCS', get('DOCS') ?? 'on'),
    rateLimit: rateText === undefined || rateText.trim().toLowerCase() === 'off' ? undefined : parseRateLimit(rateText),
    trustProxy: parseSwitch('TRUST_PROXY', get('TRUST_PROXY') ?? 'off'),
    fsync: parseSwitch('FSYNC', get('FSYNC') ?? 'on'),
    store: storeText as EngineName,
    databaseUrl,
    databaseSchema: (get('DATABASE_SCHEMA') ?? 'chat_session_api').trim(),
    databasePoolSize: parseCount('DATABASE_POOL_SIZE', get('DATABASE_POOL_SIZE') ?? '10', 1000),
    streamingIdleMs: parseDuration('STREAMING_IDLE', get('STREAMING_IDLE') ?? '5m'),
    instanceTimeoutMs: atLeast('INSTANCE_TIMEOUT', parseDuration('INSTANCE_TIMEOUT', get('INSTANCE_TIMEOUT') ?? '10s'), 1000, get('INSTANCE_TIMEOUT') ?? '10s'),
    groupCommit: parseSwitch('GROUP_COMMIT', get('GROUP_COMMIT') ?? 'on'),
    retentionDays: get('RETENTION_DAYS') === undefined ? undefined : parseCount('RETENTION_DAYS', get('RETENTION_DAYS') as string, 1_000_000),
    purgeIntervalMs: purgeText?.trim().toLowerCase() === 'off' ? undefined : parseDuration('PURGE_INTERVAL', purgeText ?? '1m'),
    sqliteFile: sqliteText === undefined ? join(dataDir, 'chat-sessions.db') : resolve(cwd, sqliteText),
    sqliteCacheBytes: parseSize('SQLITE_CACHE', get('SQLITE_CACHE') ?? '32mb'),
    searchWalkFrom: parseCount('SEARCH_WALK_FROM', get('SEARCH_WALK_FROM') ?? String(SEARCH_WALK_FROM), MAX_QUOTA),
    search: parseSwitch('SEARCH', get('SEARCH') ?? 'on'),
    limits: {
      maxConnections,
      maxRequestsPerUser,
      bodyMemory,
      bodyTimeoutMs: parseDuration('BODY_TIMEOUT', get('BODY_TIMEOUT') ?? '15s'),
      writeTimeoutMs: parseDuration('WRITE_TIMEOUT', get('WRITE_TIMEOUT') ?? '30s'),
      quotas: {
        sessions: offOr(get('QUOTA_SESSIONS'), (t) => parseCount('QUOTA_SESSIONS', t, MAX_QUOTA)),
        turns: offOr(get('QUOTA_TURNS'), (t) => parseCount('QUOTA_TURNS', t, MAX_QUOTA)),
        bytes: offOr(get('QUOTA_BYTES'), (t) => parseSize('QUOTA_BYTES', t)),
      },
      memoryLimit: parseMemoryLimit(get('MEMORY_LIMIT') ?? 'auto'),
    },
    events,
    repliesMax: parseCount('REPLIES_MAX', get('REPLIES_MAX') ?? '1000', 1_000_000),
    providerIdleTimeoutMs: parseDuration('PROVIDER_IDLE_TIMEOUT', get('PROVIDER_IDLE_TIMEOUT') ?? '60s'),
    replyMaxDurationMs: parseDuration('REPLY_MAX_DURATION', get('REPLY_MAX_DURATION') ?? '30m'),
    replyContextMax,
  };
}

const MAX_QUOTA = 1_000_000_000;
/** SEARCH_WALK_FROM's default: about where reading the matches and walking cost the same over 1M turns. */
const SEARCH_WALK_FROM = 5000;

/** undefined for an absent value or `off`, else what `parse` makes of it. */
function offOr<T>(text: string | undefined, parse: (t: string) => T): T | undefined {
  return text === undefined || text.trim().toLowerCase() === 'off' ? undefined : parse(text);
}

function parseMemoryLimit(text: string): number | 'auto' | 'off' {
  const t = text.trim().toLowerCase();
  if (t === 'auto' || t === 'off') return t;
  if (!SIZE.test(t)) throw new ConfigError(`MEMORY_LIMIT must be auto, off or a size such as 2gb or 512mb (got "${text}")`);
  return parseSize('MEMORY_LIMIT', t);
}

/** The settings part of --help. */
export function settingsHelp(): string {
  const rows = SETTINGS;
  const w = Math.max(...rows.map((s) => `${s.env} / ${s.flag}`.length));
  return rows.map((s) => `  ${`${s.env} / ${s.flag}`.padEnd(w)}  ${s.help} [default: ${s.def}]`).join('\n');
}
