// JSON lines on stdout (on stderr for a command whose own output is on stdout):
// {"time","level","msg",...fields}. Lines are gathered as bytes and written every few
// milliseconds (or at 64 KiB), so a busy server makes one write for many requests; errors
// are written at once, and everything is flushed on the way out.
// The request line, one per request, is written straight into that buffer from parts the
// caller keeps ready (see `request`): building it as a string and encoding it later cost a
// busy server about 7% of its throughput; this costs about half of that.
export const LOG_LEVELS = ['debug', 'info', 'warn', 'error', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];
export type LogFields = Readonly<Record<string, unknown>>;

/** How long a log line may wait to be written with others. */
const FLUSH_MS = 20;
/** Gathered bytes are written once they pass this. */
const FLUSH_BYTES = 64 * 1024;
/**
 * Room past FLUSH_BYTES. A request line is at most a few hundred bytes plus its user at up to 6
 * bytes a character (a token's sub is at most 200 characters); `request` flushes first when
 * the room left is short.
 */
const SLACK = 16 * 1024;

const MS_KEY = Buffer.from(',"ms":');
const USER_KEY = Buffer.from(',"user":');
const NULL = Buffer.from('null');

const RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 };

/**
 * The middle of a request line, from the end of the request id to the status:
 * `","method":"GET","route":"/api/v1/chat-sessions/:id","status":`. Made once per route.
 */
export function requestLineMiddle(method: string | null, routeJson: string): Buffer {
  return Buffer.from(`","method":${JSON.stringify(method)},"route":${routeJson},"status":`, 'utf8');
}

export class Logger {
  private readonly min: number;
  private buf = Buffer.allocUnsafe(FLUSH_BYTES + SLACK);
  private pos = 0;
  private timer: NodeJS.Timeout | undefined;
  /** The line's start up to the request id, made once per millisecond. */
  private headMs = -1;
  private head = Buffer.alloc(0);

  /** `out`: where the lines go (commands whose own output is on stdout log to stderr). */
  constructor(
    level: LogLevel,
    private readonly out: NodeJS.WritableStream = process.stdout,
  ) {
    this.min = RANK[level];
  }

  enabled(level: Exclude<LogLevel, 'silent'>): boolean {
    return RANK[level] >= this.min;
  }

  debug(msg: string, fields?: LogFields): void {
    if (this.min <= RANK.debug) this.write('debug', msg, fields);
  }
  info(msg: string, fields?: LogFields): void {
    if (this.min <= RANK.info) this.write('info', msg, fields);
  }
  warn(msg: string, fields?: LogFields): void {
    if (this.min <= RANK.warn) this.write('warn', msg, fields);
  }
  error(msg: string, fields?: LogFields): void {
    if (this.min <= RANK.error) this.write('error', msg, fields);
  }

  /**
   * The info line of one request:
   * `{"time":…,"level":"info","msg":"request","reqId":…,"method":…,"route":…,"status":…,"ms":…,"user":…}`.
   * `reqId` must be printable ASCII without `"` or `\` (the pipeline's own ids and the ones it
   * accepts are), `middle` comes from requestLineMiddle, `ms` is rounded to 0.01.
   */
  request(reqId: string, middle: Buffer, status: number, seconds: number, user: string | undefined, fields?: Readonly<Record<string, string>>): void {
    if (this.min > RANK.info) return;
    // what a request line says beside (a raw answer's why): rare, so written as JSON
    const extra = fields === undefined ? undefined : Buffer.from(Object.entries(fields).map(([k, v]) => `,${JSON.stringify(k)}:${JSON.stringify(v)}`).join(''), 'utf8');
    if (extra !== undefined && this.pos + 256 + reqId.length + middle.length + extra.length + 6 * (user?.length ?? 0) > this.buf.length) this.flush();
    if (this.pos + 256 + reqId.length + middle.length + 6 * (user?.length ?? 0) > this.buf.length) this.flush();
    const now = Date.now();
    if (now !== this.headMs) {
      this.headMs = now;
      this.head = Buffer.from(`{"time":"${new Date(now).toISOString()}","level":"info","msg":"request","reqId":"`, 'latin1');
    }
    const b = this.buf;
    let p = this.pos;
    b.set(this.head, p);
    p += this.head.length;
    for (let i = 0; i < reqId.length; i++) b[p++] = reqId.charCodeAt(i);
    b.set(middle, p);
    p += middle.length;
    p = putDigits(b, status, p);
    b.set(MS_KEY, p);
    p += MS_KEY.length;
    // as Math.round(seconds * 1e5) / 100 prints: 12, 0.5, 0.07
    const hundredths = Math.round(seconds * 1e5);
    p = putDigits(b, Math.floor(hundredths / 100), p);
    const frac = hundredths % 100;
    if (frac !== 0) {
      b[p++] = 46; // .
      b[p++] = 48 + Math.floor(frac / 10);
      if (frac % 10 !== 0) b[p++] = 48 + (frac % 10);
    }
    b.set(USER_KEY, p);
    p += USER_KEY.length;
    if (user === undefined) {
      b.set(NULL, p);
      p += NULL.length;
    } else {
      p = putJsonString(b, user, p);
    }
    if (extra !== undefined) {
      b.set(extra, p);
      p += extra.length;
    }
    b[p++] = 125; // }
    b[p++] = 10; // \n
    this.pos = p;
    this.scheduled();
  }

  private write(level: LogLevel, msg: string, fields: LogFields | undefined): void {
    const head = `{"time":"${new Date().toISOString()}","level":"${level}","msg":${JSON.stringify(msg)}`;
    let line = head + '}\n';
    if (fields !== undefined) {
      const rest = JSON.stringify(fields, errorReplacer);
      if (rest.length > 2) line = `${head},${rest.slice(1)}\n`;
    }
    this.add(line);
    if (level === 'error') this.flush();
  }

  private add(line: string): void {
    // a line that may not fit the room left goes after what is gathered, or alone when it is long
    if (this.pos + line.length * 3 > this.buf.length) {
      this.flush();
      if (line.length * 3 > this.buf.length) {
        this.out.write(line);
        return;
      }
    }
    this.pos += this.buf.write(line, this.pos, 'utf8');
    this.scheduled();
  }

  private scheduled(): void {
    if (this.pos >= FLUSH_BYTES) this.flush();
    else if (this.timer === undefined) this.timer = setTimeout(() => this.flush(), FLUSH_MS);
  }

  /** Writes everything gathered so far, synchronously (also used on the way out). */
  flush(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    if (this.pos === 0) return;
    // stdout writes to files and pipes are synchronous on Linux, so this also serves at exit;
    // where a write is queued instead it keeps this buffer, so the next lines go to a new one
    const full = this.buf.subarray(0, this.pos);
    this.buf = Buffer.allocUnsafe(FLUSH_BYTES + SLACK);
    this.pos = 0;
    this.out.write(full);
  }
}

/**
 * A line said at most once per `everyMs`, for what can happen once a request: `due()` is true
 * when it may be said now, and `since` then counts the times it was kept quiet before.
 */
export class Sparing {
  private at = -Infinity;
  private quiet = 0;
  private quietBefore = 0;

  constructor(private readonly everyMs: number) {}

  due(now = performance.now()): boolean {
    if (now - this.at < this.everyMs) {
      this.quiet++;
      return false;
    }
    this.at = now;
    this.quietBefore = this.quiet;
    this.quiet = 0;
    return true;
  }

  /** How many times the line was kept quiet before the last `due()` that said yes. */
  get since(): number {
    return this.quietBefore;
  }
}

/** Writes a non-negative integer in decimal; returns the next position. */
function putDigits(b: Buffer, n: number, p: number): number {
  if (n >= 10) p = putDigits(b, Math.floor(n / 10), p);
  b[p] = 48 + (n % 10);
  return p + 1;
}

/** Writes `s` as a JSON string: printable ASCII byte by byte, anything else through JSON.stringify. */
function putJsonString(b: Buffer, s: string, p: number): number {
  const start = p;
  b[p++] = 34; // "
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x20 || c > 0x7e || c === 34 || c === 92) return start + b.write(JSON.stringify(s), start, 'utf8');
    b[p++] = c;
  }
  b[p++] = 34;
  return p;
}

/** Errors become {name, message, stack} instead of {}. */
function errorReplacer(_key: string, value: unknown): unknown {
  if (value instanceof Error) return { name: value.name, message: value.message, stack: value.stack };
  return value;
}
