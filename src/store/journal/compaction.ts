// Rewriting the journal to hold only live records, two ways. The journal's own compaction
// (TailFirstCompaction) moves the live records of the journal's end into a newer file a piece
// at a time and cuts them off the older one, so it needs free space for one piece only. An
// import rewrites the journal whole (Compaction): the live records of one moment are written
// beside the journal; then, with the writer paused, the groups committed meanwhile are
// appended, the new file is fsync'd, renamed over the journal and the directory fsync'd. A crash
// at any step of either leaves whole files that replay to every acknowledged write.
import { closeSync, openSync, read, readSync, renameSync, unlinkSync } from 'node:fs';
import type { ChatSession } from '../../domain/records.js';
import { ChunkWriter, fdatasyncAsync, fsyncDir, writeFullySync } from '../../files.js';
import { crashpoint } from '../faults.js';
import type { Appender } from './appender.js';
import { COMPACT_SUFFIX } from './appender.js';
import { delLine, headerLine, putLine, turnLine } from './format.js';
import type { SnapshotItem } from './state.js';

export interface CompactionHost {
  readonly file: string;
  readonly appender: Appender;
  /** Resolves once no group is being committed and no new one will start. */
  pauseWriter(): Promise<void>;
  resumeWriter(): void;
}

export class CompactionAborted extends Error {
  override readonly name = 'CompactionAborted';
  constructor() {
    super('compaction stopped for shutdown');
  }
}

/** The whole-file rewrite of an import (see the file's head). */
export class Compaction {
  /** Journal groups committed after the snapshot, to be appended to the new file. */
  readonly tail: Buffer[] = [];
  abort = false;

  /** Rewrites the journal as `snapshot` (taken at the instant this compaction began collecting its tail). */
  async run(host: CompactionHost, snapshot: readonly SnapshotItem[]): Promise<void> {
    const tmp = host.file + COMPACT_SUFFIX;
    const fd = openSync(tmp, 'w', 0o600);
    let closed = false;
    let renamed = false;
    try {
      crashpoint('compact-start');
      const out = new ChunkWriter(fd);
      out.add(headerLine());
      for (let i = 0; i < snapshot.length; i++) {
        if (out.full()) {
          await out.flush(); // yields to the event loop between chunks
          if (this.abort) throw new CompactionAborted();
        }
        const item = snapshot[i] as SnapshotItem;
        out.add(putLine(JSON.stringify(item.session)));
        for (const t of item.turns) out.add(turnLine(t.json));
        if (i === snapshot.length >> 1) crashpoint('compact-middle');
      }
      await out.flush();
      await fdatasyncAsync(fd);
      crashpoint('compact-written');
      await host.pauseWriter();
      try {
        for (const b of this.tail) out.add(b);
        await out.flush();
        await fdatasyncAsync(fd);
        closeSync(fd);
        closed = true;
        // the append descriptor is opened before the rename (it follows the file), so nothing
        // that can fail stands between the rename and writing to the new journal
        const newFd = openSync(tmp, 'a');
        crashpoint('compact-before-rename');
        try {
          renameSync(tmp, host.file);
        } catch (e) {
          closeSync(newFd);
          throw e;
        }
        renamed = true;
        crashpoint('compact-after-rename');
        host.appender.swap(newFd);
        crashpoint('compact-done');
      } finally {
        host.resumeWriter();
      }
    } catch (e) {
      if (!renamed) {
        if (!closed) closeSync(fd);
        try {
          unlinkSync(tmp);
        } catch {
          // never created or already gone
        }
      }
      throw e;
    }
  }
}

/** What a tail-first compaction needs of the engine. */
export interface TailFirstHost {
  /** The journal (its older file while there are two). */
  readonly file: string;
  /** Its newer file (NEXT_SUFFIX). */
  readonly next: string;
  readonly dir: string;
  readonly appender: Appender;
  /** The live session with this id, as it is now, if any. */
  live(id: string): ChatSession | undefined;
  /** Resolves once no group is being committed and no new one will start. */
  pauseWriter(): Promise<void>;
  resumeWriter(): void;
}

/**
 * Compaction that needs little free space: the journal becomes two files, the newer one taking
 * the appends; then, from the end of the older file backwards, a piece at a time, the live
 * records of the piece are appended to the newer file (fsync'd) and the older file is cut
 * before the piece (fsync'd). The space a piece's live records take is given back by the cut
 * right after, so the disk needs free room for one piece, not for the whole live data. When the
 * older file holds only its header, the newer one is renamed over it.
 *
 * Replay reads the older file, then the newer one, so at every step the two hold every
 * acknowledged write: records appended to the newer file come after all of the older one's, a
 * session's state is written as it is in memory (its newest, whatever the older file still
 * holds), a turn copied twice by a repeated step is one turn (replay keeps one per id), and a
 * tombstone is carried over (`"carried":true`) for the older records of its session that are
 * still in the older file. A carried tombstone is dropped by the next compaction: by then no
 * record of its session is left before it. A kill at any step leaves two whole files or one; the
 * next start replays them, and the next compaction goes on from where this one stopped.
 */
export class TailFirstCompaction {
  abort = false;
  /** Bytes a piece's live records needed when appending them failed (to wait for that much free space). */
  needed = 0;

  constructor(private readonly pieceBytes: number) {}

  async run(host: TailFirstHost): Promise<void> {
    const { appender } = host;
    if (!appender.twoFiles) await this.split(host);
    const fd = appender.baseFd as number;
    const headerEnd = firstLineEnd(fd);
    // sessions whose state this run has written to the newer file already
    const written = new Set<string>();
    let end = appender.baseSize;
    while (end > headerEnd) {
      if (this.abort) throw new CompactionAborted();
      const { start, buf } = await linesBefore(fd, headerEnd, end, this.pieceBytes);
      // decided with the writer paused: what is live cannot change before it is appended
      await host.pauseWriter();
      try {
        const out: Buffer[] = [];
        let pos = 0;
        while (pos < buf.length) {
          const nl = buf.indexOf(0x0a, pos);
          const line = buf.subarray(pos, nl + 1);
          pos = nl + 1;
          const r = classify(line);
          if (r.kind === 'turn') {
            if (host.live(r.session) !== undefined) out.push(line);
          } else if (r.kind === 'put') {
            const s = host.live(r.id);
            if (s !== undefined && !written.has(r.id)) {
              written.add(r.id);
              out.push(putLine(JSON.stringify(s)));
            }
          } else if (!r.carried) out.push(delLine(r.id, true));
        }
        crashpoint('compact-piece');
        if (out.length > 0) {
          const data = Buffer.concat(out);
          try {
            await appender.appendAsync(data);
          } catch (e) {
            this.needed = data.length;
            throw e;
          }
        }
      } finally {
        host.resumeWriter();
      }
      crashpoint('compact-moved');
      await appender.truncateBase(start);
      crashpoint('compact-cut');
      end = start;
      await new Promise((resolve) => setImmediate(resolve));
    }
    crashpoint('compact-before-rename');
    await host.pauseWriter();
    try {
      renameSync(host.next, host.file);
      crashpoint('compact-after-rename');
      appender.promoteNext();
    } finally {
      host.resumeWriter();
    }
    crashpoint('compact-done');
  }

  /** The journal becomes two files: a new one (a header, fsync'd with its directory entry) takes the appends. */
  private async split(host: TailFirstHost): Promise<void> {
    // for appending: a write cut back after a failure must not leave the file position past the end
    const fd = openSync(host.next, 'ax', 0o600);
    try {
      writeFullySync(fd, headerLine());
      await fdatasyncAsync(fd);
      fsyncDir(host.dir);
    } catch (e) {
      closeSync(fd);
      unlinkSync(host.next);
      throw e;
    }
    crashpoint('compact-start');
    await host.pauseWriter();
    try {
      host.appender.startNext(fd);
    } finally {
      host.resumeWriter();
    }
  }
}

/** The byte after the first line of an open file (its header's). */
function firstLineEnd(fd: number): number {
  const buf = Buffer.alloc(4096);
  const n = readSync(fd, buf, 0, buf.length, 0);
  const nl = buf.subarray(0, n).indexOf(0x0a);
  if (nl === -1) throw new Error('the journal has no header line');
  return nl + 1;
}

/**
 * The whole lines of an open file that end at `end` (a line boundary) and start after `floor`,
 * about `size` bytes of them (more when one line is longer): where they start, and their bytes.
 */
async function linesBefore(fd: number, floor: number, end: number, size: number): Promise<{ start: number; buf: Buffer }> {
  for (let want = size; ; want *= 2) {
    const from = Math.max(floor, end - want);
    // one byte before `from`, to see whether a line starts there
    const readFrom = from === floor ? floor : from - 1;
    const buf = Buffer.allocUnsafe(end - readFrom);
    let got = 0;
    while (got < buf.length) {
      const n = await new Promise<number>((resolve, reject) => read(fd, buf, got, buf.length - got, readFrom + got, (err, k) => (err !== null ? reject(err) : resolve(k))));
      if (n === 0) throw new Error('the journal is shorter than its durable length');
      got += n;
    }
    if (readFrom === floor) return { start: floor, buf };
    const nl = buf.indexOf(0x0a);
    if (nl !== -1 && nl + 1 < buf.length) return { start: readFrom + nl + 1, buf: buf.subarray(nl + 1) };
  }
}

type Classified = { kind: 'turn'; session: string } | { kind: 'put'; id: string } | { kind: 'del'; id: string; carried: boolean };

const TURN_HEAD = Buffer.from('{"turn":{"_id":"');
const SESSION_KEY = Buffer.from('","session":"');

/** What a journal line (checksum, space, JSON, newline) is about. */
function classify(line: Buffer): Classified {
  // the writer puts a turn's _id and session (24-character ids) first
  if (line.compare(TURN_HEAD, 0, TURN_HEAD.length, 9, 9 + TURN_HEAD.length) === 0 && line.compare(SESSION_KEY, 0, SESSION_KEY.length, 49, 62) === 0) {
    return { kind: 'turn', session: line.toString('latin1', 62, 86) };
  }
  const v = JSON.parse(line.toString('utf8', 9, line.length - 1)) as Record<string, unknown>;
  const put = v['put'] as Record<string, unknown> | undefined;
  if (typeof put === 'object' && put !== null && typeof put['_id'] === 'string') return { kind: 'put', id: put['_id'] };
  if (typeof v['del'] === 'string') return { kind: 'del', id: v['del'], carried: v['carried'] === true };
  const turn = v['turn'] as Record<string, unknown> | undefined;
  if (typeof turn === 'object' && turn !== null && typeof turn['session'] === 'string') return { kind: 'turn', session: turn['session'] };
  throw new Error('a journal line holds no known record');
}
