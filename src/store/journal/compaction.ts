// Rewriting the journal to hold only live records. The live records of one moment are written
// beside the journal while writes go on; then, with the writer paused, the groups committed
// meanwhile are appended, the new file is fsync'd, renamed over the journal and the directory
// fsync'd. A crash at any step leaves the old journal or the new one, both complete.
import { closeSync, openSync, renameSync, unlinkSync } from 'node:fs';
import { ChunkWriter, fdatasyncAsync } from '../../files.js';
import { crashpoint } from '../faults.js';
import type { Appender } from './appender.js';
import { COMPACT_SUFFIX } from './appender.js';
import { headerLine, putLine, turnLine } from './format.js';
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
