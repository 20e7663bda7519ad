// The sqlite engine's full check: PRAGMA quick_check, which reads the whole file, run in a
// process of its own (this same file, started with CHECK_ENV naming the database) on a read-only
// connection of its own, a minute after the start and then daily. Neither requests nor commits
// wait for it, and a stop never does either: a process is killed at once, where a thread in the
// middle of a SQLite call cannot be stopped until that call returns (a whole quick_check).
import { spawn, type ChildProcess } from 'node:child_process';
import { constants, setPriority } from 'node:os';
import { isMainThread } from 'node:worker_threads';
import { hurried } from '../faults.js';
import { sqliteCode, sqliteDatabase } from './binding.js';

/** Set in the check's environment: the database file it checks. */
const CHECK_ENV = 'CHAT_SESSION_API_SQLITE_CHECK';

/**
 * The first check waits this long after the start, so the start's own work goes first and a
 * server started again and again (a crash loop, a deploy script) does not read the whole file
 * each time; then one a day, so damage that appears while serving (a failing disk) is found
 * long before the last good backup ages out of a daily rotation.
 */
const FIRST_CHECK_MS = 60_000;
const CHECK_EVERY_MS = 24 * 60 * 60_000;
/** Problems one check lists at most: the first says where, the rest how far it goes. */
const MOST_PROBLEMS = 100;
/** Bytes of the check's output kept (its one line; a runaway one is cut). */
const OUTPUT_BYTES = 64 * 1024;

/** What one check found (its one line of output). */
type Outcome = { readonly kind: 'ok' } | { readonly kind: 'damaged'; readonly problems: readonly string[] } | { readonly kind: 'failed'; readonly message: string };

/** Runs a check when this process was started as one (CHECK_ENV); false otherwise. */
export function runFullCheckIfAsked(): boolean {
  const file = process.env[CHECK_ENV];
  if (file === undefined || !isMainThread) return false;
  try {
    // requests and commits on the shared cores come first
    setPriority(constants.priority.PRIORITY_LOW);
  } catch {
    // not allowed here: the check runs at the server's priority
  }
  process.stdout.write(`${JSON.stringify(quickCheck(file))}\n`);
  return true;
}

function quickCheck(file: string): Outcome {
  try {
    const db = new (sqliteDatabase())(file, { readOnly: true, timeout: 10_000 });
    try {
      const problems = db
        .prepare(`PRAGMA quick_check(${MOST_PROBLEMS})`)
        .all()
        .map((row) => String(Object.values(row)[0]));
      return problems.length === 1 && problems[0] === 'ok' ? { kind: 'ok' } : { kind: 'damaged', problems };
    } finally {
      db.close();
    }
  } catch (e) {
    const message = e instanceof Error ? e.message : String(e);
    // SQLITE_CORRUPT or SQLITE_NOTADB: the check could not go on for the damage it met
    const code = sqliteCode(e);
    return code === 11 || code === 26 ? { kind: 'damaged', problems: [message] } : { kind: 'failed', message };
  }
}

/** The schedule of full checks of one file, from the store's start to its close. */
export class FullCheck {
  private timer: NodeJS.Timeout | undefined;
  private child: ChildProcess | undefined;
  private stopped = false;
  /** Checks that ran to their end since the start (the one that found damage included). */
  finished = 0;

  constructor(
    private readonly file: string,
    /** Damage found: no check follows. */
    private readonly damaged: (problems: readonly string[]) => void,
    /** A check that could not run to its end (the next one is tried at the usual time). */
    private readonly failed: (message: string) => void,
  ) {
    this.schedule(hurried('sqlite-check') ? 0 : FIRST_CHECK_MS);
  }

  private schedule(ms: number): void {
    this.timer = setTimeout(() => this.run(), ms);
    // a check never keeps a stopping process alive
    this.timer.unref();
  }

  private run(): void {
    this.timer = undefined;
    let child: ChildProcess;
    try {
      child = spawn(process.execPath, [__filename], { env: { ...process.env, [CHECK_ENV]: this.file }, stdio: ['ignore', 'pipe', 'pipe'] });
    } catch (e) {
      // no process to be had now (EAGAIN, ENOMEM): a warning, and the next check at the usual time
      this.failed(`the check process could not be started (${e instanceof Error ? e.message : String(e)})`);
      this.schedule(CHECK_EVERY_MS);
      return;
    }
    this.child = child;
    let out = '';
    let err = '';
    child.stdout?.setEncoding('utf8').on('data', (d: string) => {
      if (out.length < OUTPUT_BYTES) out += d;
    });
    child.stderr?.setEncoding('utf8').on('data', (d: string) => {
      if (err.length < OUTPUT_BYTES) err += d;
    });
    child.on('error', (e) => {
      // it could not be started; 'close' follows
      err ||= e.message;
    });
    child.on('close', (code, signal) => {
      this.child = undefined;
      if (this.stopped) return;
      const outcome = outcomeOf(out, err, code, signal);
      if (outcome.kind !== 'failed') this.finished++;
      if (outcome.kind === 'damaged') {
        this.damaged(outcome.problems);
        return;
      }
      if (outcome.kind === 'failed') this.failed(outcome.message);
      this.schedule(CHECK_EVERY_MS);
    });
  }

  /** Stops the schedule and kills a check under way (it only reads). */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    const child = this.child;
    if (child === undefined || child.exitCode !== null || child.signalCode !== null) return;
    await new Promise<void>((resolve) => {
      child.once('close', () => resolve());
      child.kill('SIGKILL');
    });
  }
}

function outcomeOf(out: string, err: string, code: number | null, signal: NodeJS.Signals | null): Outcome {
  const line = out.trim().split('\n').pop() ?? '';
  try {
    const v = JSON.parse(line) as Outcome;
    if (v.kind === 'ok' || (v.kind === 'damaged' && Array.isArray(v.problems)) || (v.kind === 'failed' && typeof v.message === 'string')) return v;
  } catch {
    // no line: it ended early (see below)
  }
  const how = signal !== null ? `killed by ${signal}` : `exit code ${code ?? '?'}`;
  return { kind: 'failed', message: `the check process ended without an answer (${how}): ${err.trim().split('\n').slice(-3).join(' ').slice(0, 500)}` };
}
