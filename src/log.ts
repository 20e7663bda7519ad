// JSON lines on stdout: {"time","level","msg",...fields}. Lines are gathered and written every
// few milliseconds (or at 64 KiB), so a busy server makes one write for many requests; errors
// are written at once, and everything is flushed on the way out.
export const LOG_LEVELS = ['debug', 'info', 'warn', 'error', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];
export type LogFields = Readonly<Record<string, unknown>>;

/** How long a log line may wait to be written with others. */
const FLUSH_MS = 20;

const RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 };

export class Logger {
  private readonly min: number;
  private pending: string[] = [];
  private pendingChars = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(level: LogLevel) {
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

  /** Writes a line that is already JSON (the request log builds its own, cheaply). */
  raw(line: string): void {
    this.add(line);
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
    this.pending.push(line);
    this.pendingChars += line.length;
    if (this.pendingChars >= 64 * 1024) this.flush();
    else if (this.timer === undefined) this.timer = setTimeout(() => this.flush(), FLUSH_MS);
  }

  /** Writes everything gathered so far, synchronously (also used on the way out). */
  flush(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    if (this.pending.length === 0) return;
    const text = this.pending.join('');
    this.pending = [];
    this.pendingChars = 0;
    // stdout writes to files and pipes are synchronous on Linux, so this also serves at exit
    process.stdout.write(text);
  }
}

/** Errors become {name, message, stack} instead of {}. */
function errorReplacer(_key: string, value: unknown): unknown {
  if (value instanceof Error) return { name: value.name, message: value.message, stack: value.stack };
  return value;
}
