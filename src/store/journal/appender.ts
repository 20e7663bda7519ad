// The journal file as the writer appends to it: every group of records is written and
// fdatasync'd before anything is applied or acknowledged, and a failed write is cut back to the
// last durable length. While a compaction runs (compaction.ts) the journal is two files, the
// older one shrinking from its end and the newer one taking the appends. Beside them, a small
// file tells readers that run next to the server (export) how much of each is durable.
import { closeSync, fdatasync, fstatSync, fsync, ftruncate, openSync, readFileSync, unlinkSync, write, writeSync } from 'node:fs';
import { join } from 'node:path';
import { fsyncDir } from '../../files.js';
import type { Logger } from '../../log.js';
import { injectedFault } from '../faults.js';

export const JOURNAL_FILE = 'sessions.journal';
/**
 * Where a running server says how much of the journal is durable: `<inode> <bytes>`, or while
 * the journal is two files `+<inode> <bytes> <inode> <bytes>` (the older file, then the newer;
 * the `+` makes a release that knows one file refuse rather than export half). Readers beside
 * it (export) stop there, so they never see a group that is written but not yet fsync'd, which
 * a failed fsync would still take back. A hint for readers only: recovery never needs it, so it
 * is not fsync'd.
 */
export const COMMITTED_FILE = 'sessions.journal.committed';
const COMMITTED_WIDTH = 96;
/** Temp file of a compaction (or an import's rewrite) while it is written. */
export const COMPACT_SUFFIX = '.compact';
/** Temp file name of the rewrite of releases before the store seam; removed at start like a compaction's. */
export const IMPORT_SUFFIX = '.import';
/**
 * The newer of the journal's two files while a compaction moves the older one's live records
 * into it (compaction.ts): a part of the journal, replayed after the older file, never a
 * leftover to remove.
 */
export const NEXT_SUFFIX = '.next';

/** One file of the journal as published: its inode and durable length. */
export interface DurableFile {
  readonly ino: string;
  readonly size: number;
}

/** The durable length of each journal file a running server last published (older first), if any. */
export function readCommitted(dir: string): DurableFile[] | undefined {
  try {
    const text = readFileSync(join(dir, COMMITTED_FILE), 'latin1').trim();
    const two = text.startsWith('+');
    const words = (two ? text.slice(1) : text).split(' ');
    if (words.length !== (two ? 4 : 2) || !words.every((w) => /^\d+$/.test(w))) return undefined;
    const out: DurableFile[] = [];
    for (let i = 0; i < words.length; i += 2) out.push({ ino: words[i] as string, size: Number(words[i + 1]) });
    return out;
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

/** The older file of a two-file journal: frozen, and cut from its end as a compaction moves its records. */
interface BaseFile {
  readonly fd: number;
  readonly ino: string;
  size: number;
}

export class Appender {
  private fd: number;
  /** Bytes of the file appended to that are durable. */
  size: number;
  private ino: string;
  private base: BaseFile | undefined;
  private committedFd: number;
  /** Set after a failed write could not be cut back; the next append cuts back first. */
  private broken = false;
  /** Set after a compaction's rename until the directory fsync succeeds; appends fail until then. */
  private dirSyncPending = false;
  private hintFailed = false;

  /**
   * Opens `file` (already replayed and `size` bytes long) for appending; with `next`, the journal
   * is two files and `next` (replayed after `file`) takes the appends.
   */
  constructor(
    private readonly file: string,
    size: number,
    private readonly opts: AppenderOptions,
    next?: { file: string; size: number },
  ) {
    this.fd = openSync(next?.file ?? file, 'a');
    this.size = next?.size ?? size;
    this.ino = String(fstatSync(this.fd).ino);
    if (next !== undefined) {
      const fd = openSync(file, 'r+');
      this.base = { fd, ino: String(fstatSync(fd).ino), size };
    }
    this.committedFd = openSync(join(opts.dir, COMMITTED_FILE), 'w', 0o600);
    this.publishCommitted();
  }

  /** Bytes of the journal that are durable, over its files. */
  get totalSize(): number {
    return this.size + (this.base?.size ?? 0);
  }

  /** Whether the journal is two files (a compaction under way). */
  get twoFiles(): boolean {
    return this.base !== undefined;
  }

  /** Durable bytes of the older file of two (0 with one file). */
  get baseSize(): number {
    return this.base?.size ?? 0;
  }

  /** The older file's descriptor while there are two (compaction reads it). */
  get baseFd(): number | undefined {
    return this.base?.fd;
  }

  /** append() as a promise. */
  appendAsync(data: Buffer): Promise<void> {
    return new Promise((resolve, reject) => this.append(data, (err) => (err === undefined ? resolve() : reject(err))));
  }

  /**
   * The journal becomes two files: the file appended to so far is frozen, and `nextFd` (a new
   * file holding a header, fsync'd with its directory entry) takes the appends from now on.
   * Only while no group is being committed.
   */
  startNext(nextFd: number): void {
    const st = fstatSync(nextFd);
    const baseFd = openSync(this.file, 'r+');
    closeSync(this.fd);
    this.base = { fd: baseFd, ino: this.ino, size: this.size };
    this.fd = nextFd;
    this.size = st.size;
    this.ino = String(st.ino);
    this.publishCommitted();
  }

  /** Cuts the older file back to `size` bytes (its records from there on are in the newer one now), durably. */
  truncateBase(size: number): Promise<void> {
    const base = this.base;
    if (base === undefined) return Promise.reject(new Error('the journal is one file'));
    return new Promise((resolve, reject) => {
      ftruncate(base.fd, size, (e1) => {
        if (e1 !== null) return reject(e1);
        fsync(base.fd, (e2) => {
          if (e2 !== null) return reject(e2);
          base.size = size;
          this.publishCommitted();
          resolve();
        });
      });
    });
  }

  /**
   * The newer file was renamed over the older one (which held only its header): the journal is
   * one file again, the one appended to. A crash before the directory is fsync'd leaves either
   * name pointing at a whole journal, so appends need not wait for that fsync.
   */
  promoteNext(): void {
    const base = this.base;
    if (base === undefined) return;
    closeSync(base.fd);
    this.base = undefined;
    this.publishCommitted();
    try {
      const fault = injectedFault('dirsync');
      if (fault !== undefined) throw fault;
      fsyncDir(this.opts.dir);
    } catch (err) {
      this.opts.log.warn('fsync of the data directory failed after a compaction; a crash before the next one may bring back the two files, both whole', { err });
    }
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
    const { base } = this;
    const text = (base === undefined ? `${this.ino} ${this.size}` : `+${base.ino} ${base.size} ${this.ino} ${this.size}`).padEnd(COMMITTED_WIDTH - 1) + '\n';
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
    if (this.base !== undefined) closeSync(this.base.fd);
    closeSync(this.committedFd);
    unlinkSync(join(this.opts.dir, COMMITTED_FILE));
  }
}
