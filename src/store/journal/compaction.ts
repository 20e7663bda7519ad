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
import { delLine, headerLine, pruneLine, putLine, turnLine } from './format.js';
import type { SnapshotItem, StoredTurn } from './state.js';

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
        // a session's turns, then its state: replay makes each turn line its session's head, as
        // appending it did, and the put that follows gives the session its own head back
        for (const t of item.turns) out.add(turnLine(t.json));
        out.add(putLine(JSON.stringify(item.session)));
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
  /** A live turn of a live session, as it is now (edited or not), if any. */
  turn(session: string, id: string): StoredTurn | undefined;
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
 * acknowledged write. What a piece moves is written as memory holds it now, never as the piece
 * held it: each live turn a record of the piece names (a turn, an edit, a delta, a fork's copies) as a
 * turn line with its newest JSON, then, for each live session the piece touches, its state as a
 * put line, after its turns (replay makes a turn line its session's head; the put gives the
 * session its own head back). A turn written twice (its older records still in the older file,
 * or a step repeated after a kill) is one turn: replay keeps the last by id, and links a turn
 * moved before its parent once the load is done. A deleting record (a tombstone, a prune of
 * turns of a live session) is carried over (`"carried":true`) for the older records it deletes
 * that are still in the older file. A carried one is dropped by the next compaction: by then
 * nothing it deletes is left before it. A kill at any step leaves two whole files or one; the
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
    let end = appender.baseSize;
    while (end > headerEnd) {
      if (this.abort) throw new CompactionAborted();
      const { start, buf } = await linesBefore(fd, headerEnd, end, this.pieceBytes);
      // decided with the writer paused: what is live cannot change before it is appended
      await host.pauseWriter();
      try {
        const out = movedLines(host, buf);
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

/** What a piece of the older file becomes in the newer one (see TailFirstCompaction). */
function movedLines(host: TailFirstHost, buf: Buffer): Buffer[] {
  const turns: Buffer[] = [];
  const carried: Buffer[] = [];
  const moved = new Set<string>();
  // live sessions the piece touches, each to be put once after its turns
  const touched = new Set<string>();
  let pos = 0;
  while (pos < buf.length) {
    const nl = buf.indexOf(0x0a, pos);
    const r = classify(buf.subarray(pos, nl + 1));
    pos = nl + 1;
    switch (r.kind) {
      case 'turns': {
        if (host.live(r.session) === undefined) break;
        touched.add(r.session);
        for (const id of r.ids) {
          if (moved.has(id)) continue;
          moved.add(id);
          const t = host.turn(r.session, id);
          if (t !== undefined) turns.push(turnLine(t.json));
        }
        break;
      }
      case 'put':
        if (host.live(r.id) !== undefined) touched.add(r.id);
        break;
      case 'prune': {
        const s = r.carried ? undefined : host.live(r.session);
        // the turns of a deleted session are the tombstone's to delete
        if (s === undefined) break;
        carried.push(pruneLine(r.ids, JSON.stringify(s), true));
        touched.add(r.session);
        break;
      }
      case 'del':
        if (!r.carried) carried.push(delLine(r.id, true));
    }
  }
  const puts: Buffer[] = [];
  for (const id of touched) puts.push(putLine(JSON.stringify(host.live(id) as ChatSession)));
  return [...turns, ...carried, ...puts];
}

type Classified =
  /** A record holding turns: a turn, an edit, a fork's copies. */
  | { kind: 'turns'; session: string; ids: readonly string[] }
  | { kind: 'put'; id: string }
  | { kind: 'del'; id: string; carried: boolean }
  | { kind: 'prune'; session: string; ids: readonly string[]; carried: boolean };

const TURN_HEAD = Buffer.from('{"turn":{"_id":"');
const SESSION_KEY = Buffer.from('","session":"');

/** What a journal line (checksum, space, JSON, newline) is about. */
function classify(line: Buffer): Classified {
  // the writer puts a turn's _id and session (24-character ids) first
  if (line.compare(TURN_HEAD, 0, TURN_HEAD.length, 9, 9 + TURN_HEAD.length) === 0 && line.compare(SESSION_KEY, 0, SESSION_KEY.length, 49, 62) === 0) {
    return { kind: 'turns', session: line.toString('latin1', 62, 86), ids: [line.toString('latin1', 25, 49)] };
  }
  const v = JSON.parse(line.toString('utf8', 9, line.length - 1)) as Record<string, unknown>;
  const put = v['put'] as Record<string, unknown> | undefined;
  if (typeof put === 'object' && put !== null && typeof put['_id'] === 'string') return { kind: 'put', id: put['_id'] };
  if (typeof v['del'] === 'string') return { kind: 'del', id: v['del'], carried: v['carried'] === true };
  // text appended to a streaming turn: the turn as it is now is what moves
  if (typeof v['delta'] === 'string' && typeof v['session'] === 'string') return { kind: 'turns', session: v['session'], ids: [v['delta']] };
  const turn = (v['turn'] ?? v['edit']) as Record<string, unknown> | undefined;
  if (typeof turn === 'object' && turn !== null && typeof turn['session'] === 'string' && typeof turn['_id'] === 'string') return { kind: 'turns', session: turn['session'], ids: [turn['_id']] };
  const session = (v['session'] ?? v['fork']) as Record<string, unknown> | undefined;
  if (typeof session === 'object' && session !== null && typeof session['_id'] === 'string') {
    const ids = (list: unknown): string[] => (Array.isArray(list) ? list.flatMap((x: unknown) => (typeof x === 'string' ? [x] : typeof x === 'object' && x !== null && typeof (x as Record<string, unknown>)['_id'] === 'string' ? [(x as Record<string, unknown>)['_id'] as string] : [])) : []);
    if (Array.isArray(v['prune'])) return { kind: 'prune', session: session['_id'], ids: ids(v['prune']), carried: v['carried'] === true };
    if (v['fork'] !== undefined) return { kind: 'turns', session: session['_id'], ids: ids(v['turns']) };
  }
  throw new Error('a journal line holds no known record');
}
