// The room a full disk keeps for deletes: a file of RESERVE_BYTES beside the SQLite file, held by
// the writer thread while the store is open. A delete that meets a full disk gives it back, so
// the delete's log frames have room; it is taken again, first in line, as soon as there is room.
import { randomFillSync } from 'node:crypto';
import { closeSync, constants, ftruncateSync, fstatSync, openSync, statfsSync, unlinkSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';

/**
 * The reserve's size: what deleting a session of some 3,500 turns of 1 KiB writes to the log
 * when its rows share their pages with another session's (4.25 MiB for 1,000; a session of 1,000
 * turns of 16 KiB, 1.3 MiB: bench/README.md, "Deletes on a full disk"), and small beside any
 * disk worth serving from. A constant, not a setting: a smaller one only makes deletes fail sooner.
 */
export const RESERVE_BYTES = 16 * 1024 * 1024;

/**
 * Written a chunk at a time, the same chunk of random bytes each time: a compressing file system
 * (ZFS's default lz4) keeps zeros for free, and compresses a record of 128 KiB on its own.
 */
const CHUNK = 256 * 1024;
let randomChunk: Buffer | undefined;

/** The reserve's file name for a SQLite file. */
export function reserveFileOf(file: string): string {
  return `${file}.reserve`;
}

/** On a file system smaller than 8 x RESERVE_BYTES, the reserve is an eighth of it: what is deleted there is small too. */
const MOST_OF_DISK = 8;

export class SpaceReserve {
  private fd: number | undefined;
  private size = 0;
  private readonly bytes: number;

  constructor(readonly path: string) {
    let disk = Infinity;
    try {
      const s = statfsSync(dirname(path));
      disk = s.blocks * s.bsize;
    } catch {
      // not told: the whole reserve
    }
    this.bytes = Math.min(RESERVE_BYTES, Math.floor(disk / MOST_OF_DISK));
  }

  /** Whether less than the whole reserve is held (a full disk took the rest, or it was given back). */
  get short(): boolean {
    return this.size < this.bytes;
  }

  /** Bytes held now. */
  get held(): number {
    return this.size;
  }

  /**
   * Grows the file to the reserve's size, as far as the disk lets it: a full disk leaves it short
   * (taken again later) and is no error. Other failures (a read-only file system) leave it as it is.
   */
  take(): void {
    try {
      if (this.fd === undefined) {
        // not O_APPEND, under which Linux writes at the end whatever position is given
        this.fd = openSync(this.path, constants.O_RDWR | constants.O_CREAT, 0o600);
        this.size = fstatSync(this.fd).size;
      }
      if (this.size > this.bytes) {
        ftruncateSync(this.fd, this.bytes);
        this.size = this.bytes;
      }
      // a disk still full costs a statfs at each commit, not a failing write
      if (this.size < this.bytes && freeBlocks(this.path) === 0) return;
      const chunk = (randomChunk ??= randomFillSync(Buffer.allocUnsafe(CHUNK)));
      while (this.size < this.bytes) {
        this.size += writeSync(this.fd, chunk, 0, Math.min(chunk.length, this.bytes - this.size), this.size);
      }
    } catch {
      // ENOSPC (what was written stays held) or a file that cannot be made: the store works without it
      try {
        if (this.fd !== undefined) this.size = fstatSync(this.fd).size;
      } catch {
        // the size stays as last counted
      }
    }
  }

  /** Gives the whole reserve back to the file system. */
  giveBack(): void {
    if (this.fd === undefined || this.size === 0) return;
    ftruncateSync(this.fd, 0);
    this.size = 0;
  }

  /** Closes and removes the file: a store at rest holds no reserve (its next open takes one). */
  remove(): void {
    if (this.fd === undefined) return;
    closeSync(this.fd);
    this.fd = undefined;
    this.size = 0;
    try {
      unlinkSync(this.path);
    } catch {
      // already gone
    }
  }
}

/** Free blocks of the file system of `path`, root's own included (root may write where others cannot). */
function freeBlocks(path: string): number {
  return statfsSync(dirname(path)).bfree;
}
