// File plumbing shared by the journal, backups and the command line: a file written whole or
// not at all, writes gathered into large chunks, and a file read line by line.
import { closeSync, fdatasync, fsyncSync, openSync, readSync, renameSync, unlinkSync, write, writeSync } from 'node:fs';
import { dirname } from 'node:path';

/** fsyncs a directory, so a rename or a new file in it survives a crash. */
export function fsyncDir(dir: string): void {
  const fd = openSync(dir, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** Writes all of `data` at the file's position (writeSync may write less than asked). */
export function writeFullySync(fd: number, data: Buffer): void {
  let offset = 0;
  while (offset < data.length) offset += writeSync(fd, data, offset, data.length - offset);
}

/** fdatasync as a promise. */
export function fdatasyncAsync(fd: number): Promise<void> {
  return new Promise((resolve, reject) => fdatasync(fd, (err) => (err !== null ? reject(err) : resolve())));
}

/** Gathers small buffers and writes them in chunks of about a megabyte, yielding between chunks. */
export class ChunkWriter {
  private parts: Buffer[] = [];
  private bytes = 0;
  constructor(private readonly fd: number) {}

  add(b: Buffer): void {
    this.parts.push(b);
    this.bytes += b.length;
  }

  full(): boolean {
    return this.bytes >= 1 << 20;
  }

  async flush(): Promise<void> {
    if (this.bytes === 0) return;
    const data = this.parts.length === 1 ? (this.parts[0] as Buffer) : Buffer.concat(this.parts, this.bytes);
    this.parts = [];
    this.bytes = 0;
    let offset = 0;
    while (offset < data.length) {
      offset += await new Promise<number>((resolve, reject) => {
        write(this.fd, data, offset, data.length - offset, null, (err, n) => (err !== null ? reject(err) : resolve(n)));
      });
    }
  }
}

/**
 * Writes `target` whole or not at all: into `target + suffix`, fsync'd, renamed over `target`,
 * the directory fsync'd. On any failure the temporary file is removed and `target` is untouched.
 */
export async function writeFileAtomically(target: string, fill: (out: ChunkWriter) => Promise<void>, opts: { suffix?: string; mode?: number } = {}): Promise<void> {
  const tmp = target + (opts.suffix ?? '.partial');
  const fd = openSync(tmp, 'w', opts.mode ?? 0o600);
  let open = true;
  try {
    const out = new ChunkWriter(fd);
    await fill(out);
    await out.flush();
    fsyncSync(fd);
    closeSync(fd);
    open = false;
    renameSync(tmp, target);
  } catch (e) {
    if (open) closeSync(fd);
    try {
      unlinkSync(tmp);
    } catch {
      // never written, or already renamed
    }
    throw e;
  }
  fsyncDir(dirname(target));
}

/** Calls `each(text, lineNo)` for every line of an open file, reading it in chunks; a last line without a newline counts. */
export function forEachLine(fd: number, each: (text: string, lineNo: number) => void): void {
  let buf = Buffer.allocUnsafe(1 << 22);
  let filled = 0;
  let lineNo = 0;
  for (;;) {
    if (filled === buf.length) {
      const bigger = Buffer.allocUnsafe(buf.length * 2);
      buf.copy(bigger, 0, 0, filled);
      buf = bigger;
    }
    const n = readSync(fd, buf, filled, buf.length - filled, null);
    filled += n;
    let pos = 0;
    for (;;) {
      const nl = buf.indexOf(0x0a, pos);
      if (nl === -1 || nl >= filled) break;
      each(buf.toString('utf8', pos, nl), ++lineNo);
      pos = nl + 1;
    }
    if (n === 0) {
      if (pos < filled) each(buf.toString('utf8', pos, filled), ++lineNo);
      return;
    }
    buf.copy(buf, 0, pos, filled);
    filled -= pos;
  }
}
