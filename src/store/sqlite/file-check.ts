// What the sqlite engine checks in its files before SQLite opens them, because SQLite would not:
// the write-ahead log's frames (its recovery stops at the first bad one and silently drops every
// commit after it) and the database file's header and length (a page past the end of a cut file
// is found only when a query reads it). Damage stops the start with one line; nothing is written.
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { endianness } from 'node:os';
import { StoreOpenFailed } from '../store.js';
import { refuse } from './schema.js';

/** What to do about damage found before the start (it is never repaired here). */
const RESTORE = 'restore the database from a backup (`import` into a new SQLITE_FILE)';

const WAL_HEADER = 32;
const FRAME_HEADER = 24;
const WAL_VERSION = 3007000;
/** Bytes read at a time, rounded down to whole frames. */
const CHUNK_BYTES = 8 << 20;

/** What the log's committed transactions hold, for the check of the database file's length. */
export interface WalPages {
  /** The database's size in pages after the log's last committed transaction (undefined: none). */
  readonly lastCommitSize: number | undefined;
  /** The pages above the given number that those transactions write. */
  readonly above: ReadonlySet<number>;
}

const NO_PAGES: WalPages = { lastCommitSize: undefined, above: new Set() };

/**
 * Checks the write-ahead log of `dbFile` (https://www.sqlite.org/fileformat2.html#walformat).
 * Frames whose salts are not the header's are leftovers of an earlier log and are ignored. The
 * first bad frame ends what SQLite will replay; bad frames with no valid commit after them are
 * what a crash leaves (an interrupted transaction, or one rolled back after it spilled pages to
 * the log: SQLite writes the next transaction over the start of those, leaving a bad frame
 * followed by valid ones that never commit) and are fine. A frame that completes a transaction
 * (a commit frame) and whose checksum holds from the frame before it, found after a bad frame,
 * proves that committed work follows the damage: StoreOpenFailed. A damaged header is damage
 * unless no whole frame follows it (an interrupted first write). Returns the pages that
 * `pagesInFile` does not cover and the log holds.
 */
export function checkWal(dbFile: string, pagesInFile: number): WalPages {
  const file = `${dbFile}-wal`;
  let fd: number;
  try {
    fd = openSync(file, 'r');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return NO_PAGES;
    throw new StoreOpenFailed(`${file}: cannot be read (${(e as NodeJS.ErrnoException).code ?? String(e)}); check its permissions and the disk. Nothing was changed.`);
  }
  try {
    return scanWal(fd, file, fstatSync(fd).size, pagesInFile);
  } finally {
    closeSync(fd);
  }
}

function scanWal(fd: number, file: string, size: number, pagesInFile: number): WalPages {
  if (size < WAL_HEADER) return NO_PAGES;
  const header = Buffer.alloc(WAL_HEADER);
  readSync(fd, header, 0, WAL_HEADER, 0);
  const magic = header.readUInt32BE(0);
  const pageSize = header.readUInt32BE(8);
  const validSize = pageSize >= 512 && pageSize <= 65536 && (pageSize & (pageSize - 1)) === 0;
  // magic 0x377f0682: the checksum reads little-endian words; 0x377f0683: big-endian
  const native = (magic & 1) === (endianness() === 'BE' ? 1 : 0);
  const sum = new Checksum(native);
  let why: string | undefined;
  if ((magic & 0xfffffffe) !== 0x377f0682) why = 'not a SQLite log';
  else if (header.readUInt32BE(4) !== WAL_VERSION) why = `format version ${header.readUInt32BE(4)}`;
  else if (!validSize) why = `page size ${pageSize}`;
  else {
    sum.add(new Int32Array(header.buffer, header.byteOffset, WAL_HEADER >> 2), 0, (WAL_HEADER - 8) >> 2);
    if (sum.s0 !== header.readInt32BE(24) || sum.s1 !== header.readInt32BE(28)) why = 'its checksum does not match';
  }
  const frameSize = FRAME_HEADER + (validSize ? pageSize : 512);
  if (why !== undefined) {
    // a first write cut short leaves no whole frame; SQLite ignores such a log
    if (size < WAL_HEADER + frameSize) return NO_PAGES;
    throw refuse(file, `has a damaged header (${why}) with ${size - WAL_HEADER} bytes of frames after it, so it is not an interrupted first write`, RESTORE);
  }
  const salt1 = header.readInt32BE(16);
  const salt2 = header.readInt32BE(20);
  let s0 = header.readInt32BE(24);
  let s1 = header.readInt32BE(28);
  const framesPerChunk = Math.max(1, Math.floor(CHUNK_BYTES / frameSize));
  const chunk = Buffer.allocUnsafeSlow(framesPerChunk * frameSize);
  // frames are a multiple of 8 bytes long, so every frame's words line up with the chunk's
  const words = new Int32Array(chunk.buffer, chunk.byteOffset, chunk.length >> 2);
  const frames = Math.floor((size - WAL_HEADER) / frameSize);
  // the valid prefix: what SQLite will replay; pages above pagesInFile that its committed transactions hold
  let replayed = true;
  let lastCommitSize: number | undefined;
  const above = new Set<number>();
  let pending: number[] = [];
  let damage: { frame: number; offset: number; why: string } | undefined;
  let committedAfter = 0;
  for (let first = 0; first < frames; first += framesPerChunk) {
    const n = Math.min(framesPerChunk, frames - first);
    const bytes = n * frameSize;
    let got = 0;
    while (got < bytes) {
      const r = readSync(fd, chunk, got, bytes - got, WAL_HEADER + first * frameSize + got);
      if (r === 0) break;
      got += r;
    }
    for (let i = 0; i < Math.floor(got / frameSize); i++) {
      const at = i * frameSize;
      const page = chunk.readUInt32BE(at);
      const commitSize = chunk.readUInt32BE(at + 4);
      const ours = chunk.readInt32BE(at + 8) === salt1 && chunk.readInt32BE(at + 12) === salt2;
      const stored0 = chunk.readInt32BE(at + 16);
      const stored1 = chunk.readInt32BE(at + 20);
      // each frame's header holds the running checksum, so every frame is checked from the one
      // before it; past the first bad frame only a commit frame of the log's salts matters
      let good = ours && page !== 0 && (replayed || commitSize !== 0);
      if (good) {
        sum.s0 = s0;
        sum.s1 = s1;
        sum.add(words, at >> 2, (at + 8) >> 2);
        sum.add(words, (at + FRAME_HEADER) >> 2, (at + frameSize) >> 2);
        good = sum.s0 === stored0 && sum.s1 === stored1;
      }
      s0 = stored0;
      s1 = stored1;
      if (replayed && good) {
        if (page > pagesInFile) pending.push(page);
        if (commitSize !== 0) {
          lastCommitSize = commitSize;
          for (const p of pending) above.add(p);
          pending = [];
        }
      } else if (replayed) {
        replayed = false;
        const frame = first + i + 1;
        damage = { frame, offset: WAL_HEADER + (frame - 1) * frameSize, why: !ours ? 'its salts are not the log header\'s' : page === 0 ? 'its page number is 0' : 'its checksum does not match' };
      } else if (good && commitSize !== 0) committedAfter++;
    }
  }
  if (damage !== undefined && committedAfter > 0) {
    throw refuse(file, `has a damaged frame ${damage.frame} (byte offset ${damage.offset}: ${damage.why}) with ${committedAfter} committed transaction(s) after it, so it is not an interrupted final write`, RESTORE);
  }
  return { lastCommitSize, above };
}

/**
 * SQLite's running checksum of 32-bit words: s0 += x0 + s1, s1 += x1 + s0 for each pair, the
 * words read in the host's byte order when `native`, else swapped. Kept as signed 32-bit
 * integers, to compare with readInt32BE.
 */
class Checksum {
  s0 = 0;
  s1 = 0;
  constructor(private readonly native: boolean) {}

  /** Goes on over words[from, to) (an even number of them). */
  add(words: Int32Array, from: number, to: number): void {
    let a = this.s0;
    let b = this.s1;
    // each sum kept within 32 bits at every step, so the loop stays in integer arithmetic
    if (this.native) {
      for (let i = from; i < to; i += 2) {
        a = (((a + b) | 0) + (words[i] as number)) | 0;
        b = (((b + a) | 0) + (words[i + 1] as number)) | 0;
      }
    } else {
      for (let i = from; i < to; i += 2) {
        a = (((a + b) | 0) + swap(words[i] as number)) | 0;
        b = (((b + a) | 0) + swap(words[i + 1] as number)) | 0;
      }
    }
    this.s0 = a;
    this.s1 = b;
  }
}

function swap(x: number): number {
  return ((x & 0xff) << 24) | ((x & 0xff00) << 8) | ((x >>> 8) & 0xff00) | (x >>> 24);
}

const MAGIC = Buffer.from('SQLite format 3\0', 'latin1');

/**
 * Checks the database file and its log before SQLite opens them: the log (checkWal), the file's
 * 100-byte header where it is a SQLite header (page size, format versions, payload fractions:
 * what SQLite checks only when it first reads the file, and then calls "not a database"), and
 * its length: every page up to the database's size (the log's last commit's, else the header's)
 * must be in the file or in the log. A file that is not a database at all is left to SQLite,
 * whose error says so (./schema.ts unreadable).
 */
export function checkFiles(dbFile: string): void {
  let fd: number;
  try {
    fd = openSync(dbFile, 'r');
  } catch {
    // a file that cannot be opened is SQLite's to report (./schema.ts unreadable names the cause)
    checkWal(dbFile, 0);
    return;
  }
  let size: number;
  const header = Buffer.alloc(100);
  let got: number;
  try {
    size = fstatSync(fd).size;
    got = readSync(fd, header, 0, 100, 0);
  } finally {
    closeSync(fd);
  }
  const sqlite = got === 100 && header.subarray(0, 16).equals(MAGIC);
  const pageSize = sqlite ? pageSizeOf(header) : undefined;
  if (sqlite) {
    const why = headerDamage(header, pageSize);
    if (why !== undefined) throw refuse(dbFile, `has a damaged header (${why})`, RESTORE);
  }
  const pagesInFile = pageSize === undefined ? 0 : Math.floor(size / pageSize);
  const wal = checkWal(dbFile, pagesInFile);
  if (!sqlite || pageSize === undefined) return;
  // the size in the header counts only when the change counter matches the "version valid for" field
  const headerPages = header.readUInt32BE(24) === header.readUInt32BE(92) ? header.readUInt32BE(28) : undefined;
  const pages = wal.lastCommitSize ?? headerPages;
  if (pages === undefined || pages <= pagesInFile) return;
  let inLog = 0;
  for (const p of wal.above) if (p <= pages) inLog++;
  if (pagesInFile + inLog < pages) {
    throw refuse(dbFile, `is cut short: the database has ${pages} pages of ${pageSize} bytes, the file holds ${pagesInFile} and its log ${inLog} of the others`, RESTORE);
  }
}

function pageSizeOf(header: Buffer): number | undefined {
  const raw = header.readUInt16BE(16);
  const size = raw === 1 ? 65536 : raw;
  return size >= 512 && (size & (size - 1)) === 0 ? size : undefined;
}

/** What is wrong with a SQLite header, by the rules SQLite applies when it first reads the file. */
function headerDamage(header: Buffer, pageSize: number | undefined): string | undefined {
  if (pageSize === undefined) return `page size ${header.readUInt16BE(16)}`;
  const write = header[18] as number;
  const read = header[19] as number;
  if (write < 1 || write > 2 || read < 1 || read > 2) return `file format versions ${write} and ${read}`;
  if (header[21] !== 64 || header[22] !== 32 || header[23] !== 32) return 'payload fractions';
  if ((header[20] as number) > pageSize - 480) return `${header[20] as number} reserved bytes per page`;
  return undefined;
}
