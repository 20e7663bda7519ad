// The journal file as the writer appends to it: every group of records is written and
// fdatasync'd before anything is applied or acknowledged, and a failed write is cut back to the
// last durable length. Beside it, a small file tells readers that run next to the server (export)
// how much of the journal is durable.
import { closeSync, fdatasync, fstatSync, ftruncate, openSync, readFileSync, unlinkSync, write, writeSync } from 'node:fs';
import { join } from 'node:path';
import { fsyncDir } from '../../files.js';
import type { Logger } from '../../log.js';
import { injectedFault } from '../faults.js';

export const JOURNAL_FILE = 'sessions.journal';
/**
 * Where a running server says how much of the journal is durable: `<inode> <bytes>`. Readers
 * beside it (export) stop there, so they never see a group that is written but not yet fsync'd,
 * which a failed fsync would still take back. A hint for readers only: recovery never needs it,
 * so it is not fsync'd.
 */
export const COMMITTED_FILE = 'sessions.journal.committed';
const COMMITTED_WIDTH = 48;
/** Temp file of a compaction (or an import's rewrite) while it is written. */
export const COMPACT_SUFFIX = '.compact';
/** Temp file name of the rewrite of releases before the store seam; removed at start like a compaction's. */
export const IMPORT_SUFFIX = '.import';

/** The committed journal length a running server last published, if any. */
export function readCommitted(dir: string): { ino: string; size: number } | undefined {
  try {
    const [ino, size] = readFileSync(join(dir, COMMITTED_FILE), 'latin1').trim().split(' ');
    if (ino === undefined || size === undefined || !/^\d+$/.test(ino) || !/^\d+$/.test(size)) return undefined;
    return { ino, size: Number(size) };
  } catch {
    return undefined;
  }
}

export interface AppenderOptions {
  readonly dir: string;
  /** false only to measure what durability costs. */
  readonly fsync: boolean;
  readonly log: Logger;
}

export class Appender {
  private fd: number;
  /** Bytes of the journal that are durable. */
  size: number;
  private ino: string;
  private committedFd: number;
  /** Set after a failed write could not be cut back; the next append cuts back first. */
  private broken = false;
  /** Set after a compaction's rename until the directory fsync succeeds; appends fail until then. */
  private dirSyncPending = false;
  private hintFailed = false;

  /** Opens `file` (already replayed and `size` bytes long) for appending. */
  constructor(
    file: string,
    size: number,
    private readonly opts: AppenderOptions,
  ) {
    this.fd = openSync(file, 'a');
    this.size = size;
    this.ino = String(fstatSync(this.fd).ino);
    this.committedFd = openSync(join(opts.dir, COMMITTED_FILE), 'w', 0o600);
    this.publishCommitted();
  }

  /** Appends and fsyncs `data`; on failure the file is cut back to its last durable size and `done` gets the error. */
  append(data: Buffer, done: (err?: Error) => void): void {
    const fail = (err: Error): void => {
      ftruncate(this.fd, this.size, (e1) => {
        if (e1 !== null) {
          this.broken = true;
          done(err);
          return;
        }
        fdatasync(this.fd, (e2) => {
          this.broken = e2 !== null;
          done(err);
        });
      });
    };
    if (this.dirSyncPending && !this.syncDir()) {
      done(new Error("the data directory could not be fsync'd after the journal was compacted"));
      return;
    }
    if (this.broken) {
      // an earlier failure left bytes we could not remove: remove them before anything else
      ftruncate(this.fd, this.size, (e) => {
        if (e !== null) return done(e);
        this.broken = false;
        this.append(data, done);
      });
      return;
    }
    const writeFrom = (offset: number): void => {
      const fault = injectedFault('write');
      const len = fault === undefined ? data.length - offset : Math.ceil((data.length - offset) / 2);
      write(this.fd, data, offset, len, null, (err, n) => {
        if (err !== null) return fail(err);
        if (fault !== undefined) return fail(fault);
        if (offset + n < data.length) return writeFrom(offset + n);
        if (!this.opts.fsync) return this.appended(data.length, done);
        fdatasync(this.fd, (e) => {
          const f = e ?? injectedFault('fsync') ?? null;
          if (f !== null) return fail(f);
          this.appended(data.length, done);
        });
      });
    };
    writeFrom(0);
  }

  private appended(bytes: number, done: (err?: Error) => void): void {
    this.size += bytes;
    this.publishCommitted();
    done();
  }

  /**
   * Takes over `newFd`, the append descriptor of a rewritten journal just renamed over the old
   * one. Until the directory is fsync'd a crash may bring back the old journal, which lacks what
   * is appended to the new one: no append succeeds before that fsync does.
   */
  swap(newFd: number): void {
    const st = fstatSync(newFd);
    closeSync(this.fd);
    this.fd = newFd;
    this.size = st.size;
    this.ino = String(st.ino);
    this.dirSyncPending = true;
    this.syncDir();
    this.publishCommitted();
  }

  /** fsyncs the data directory if a rename awaits it; false when that fails. */
  private syncDir(): boolean {
    if (!this.dirSyncPending) return true;
    const fault = injectedFault('dirsync');
    try {
      if (fault !== undefined) throw fault;
      fsyncDir(this.opts.dir);
      this.dirSyncPending = false;
      return true;
    } catch (err) {
      this.opts.log.error('fsync of the data directory failed after compaction; writes are refused until it succeeds', { err });
      return false;
    }
  }

  get waitingForDirSync(): boolean {
    return this.dirSyncPending;
  }

  /** Tells readers beside the server how far the journal is durable (see COMMITTED_FILE). */
  private publishCommitted(): void {
    const text = `${this.ino} ${this.size}`.padEnd(COMMITTED_WIDTH - 1) + '\n';
    try {
      writeSync(this.committedFd, text, 0, 'latin1');
    } catch (err) {
      // a hint for readers only (a full disk can refuse even this): they then stop at an older length
      if (!this.hintFailed) this.opts.log.warn('could not update the journal\'s committed-length hint for readers; export sees an older state until it can', { err });
      this.hintFailed = true;
      return;
    }
    this.hintFailed = false;
  }

  close(): void {
    closeSync(this.fd);
    closeSync(this.committedFd);
    unlinkSync(join(this.opts.dir, COMMITTED_FILE));
  }
}
