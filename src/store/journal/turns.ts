// Where the journal engine keeps turns' JSON: off the JS heap, either in a buffer of its own (a
// turn written while running) or in a slab, a large buffer shared by the turns replayed at
// start-up. Memory follows the live data: a slab counts the bytes of its live turns, and once
// half of it is dead its live turns are copied into a slab of their exact size, a few MiB per
// turn of the event loop, and the old one is let go.
import type { TreeTurn, TurnRecord } from '../store.js';

/**
 * A turn as kept: its sort key, its parent, and where its JSON bytes are. A kept turn is one
 * small object, not also a Buffer view of its own: a million turns replay sooner and in less
 * memory (bench/README.md). Its JSON never changes (an edit makes a new StoredTurn); where the
 * bytes are may (a slab repacked), so `json` is a new view on each call. Its parent is set once
 * it is placed in its session's tree, and pointed at the new object when the parent is edited.
 */
export class StoredTurn implements TurnRecord, TreeTurn {
  /** The turn this one follows in its session's tree; null for a root. */
  parent: StoredTurn | null = null;

  constructor(
    readonly _id: string,
    readonly createdAt: string,
    /** A Slab while the slab counts it as live; a Buffer otherwise. */
    private home: Buffer | Slab,
    private start: number,
    private end: number,
  ) {}

  /** A turn whose JSON is all of `json`. */
  static of(_id: string, createdAt: string, json: Buffer): StoredTurn {
    return new StoredTurn(_id, createdAt, json, 0, json.length);
  }

  /** Its JSON (a new view of the bytes on each call). */
  get json(): Buffer {
    const h = this.home;
    return (h instanceof Slab ? h.buf : h).subarray(this.start, this.end);
  }

  /** UTF-8 bytes of its JSON. */
  get bytes(): number {
    return this.end - this.start;
  }

  get parentId(): string | null {
    return this.parent === null ? null : this.parent._id;
  }

  /** The slab that counts this turn as live, if any. */
  get slab(): Slab | undefined {
    return this.home instanceof Slab ? this.home : undefined;
  }

  /** No longer live: the bytes stay readable (a snapshot may still send them) but the slab stops counting them. */
  leaveSlab(): void {
    if (this.home instanceof Slab) this.home = this.home.buf;
  }

  /** The same bytes, now at `start` of `home`. */
  moveTo(home: Slab, start: number): void {
    this.end = start + this.end - this.start;
    this.start = start;
    this.home = home;
  }
}

/** A large buffer holding many turns' JSON back to back. */
export class Slab {
  /** The turns placed here, in order; those whose home is no longer this slab are dead (or moved). */
  readonly turns: StoredTurn[] = [];
  /** Bytes written so far. */
  used = 0;
  /** Bytes of the live turns. */
  live = 0;
  /** Waiting for or under a repack. */
  repacking = false;
  constructor(readonly buf: Buffer) {}
}

/**
 * Replay reserves space in big steps (up to the unread size of the journal, at most this): V8
 * answers every 64 MB of new external memory with a full garbage collection, whose cost grows
 * with the heap, so smaller steps cost seconds on a million turns (bench/README.md). Pages of a
 * reservation never written are never resident.
 */
const MAX_SLAB = 1024 * 1024 * 1024;
/** Slabs smaller than this are not repacked (the copy would save too little to matter). */
const MIN_REPACK = 256 * 1024;
/** Bytes a repack copies per turn of the event loop, so no request waits long behind it. */
const REPACK_STEP = 4 * 1024 * 1024;

/** A repack under way: the live turns of `from` move into `to`, from `next` on. */
interface Repack {
  readonly from: Slab;
  readonly to: Slab;
  next: number;
}

export class TurnArena {
  private filling: Slab | undefined;
  private repack: Repack | undefined;
  private readonly waiting: Slab[] = [];
  /** Slabs holding live turns. */
  private readonly slabs = new Set<Slab>();
  /** Bytes of turns kept in buffers of their own (written while running). */
  private ownBytes = 0;
  /** While loading, repacks wait for the end of the load. */
  private loading = false;
  /** Bytes of the journal not yet read: the most the turns still to come can need. */
  unread = 0;
  /** Bytes of turns' JSON replayed into slabs since this arena was made (what a load copied). */
  replayedBytes = 0;

  beginLoad(): void {
    this.loading = true;
  }

  /** Replay is over: the slab being filled is closed, and slabs that are mostly dead are repacked. */
  finishLoad(): void {
    this.loading = false;
    this.filling = undefined;
    for (const s of [...this.slabs]) this.check(s);
  }

  /** A replayed turn whose JSON is a copy of src[start, end). */
  replayed(_id: string, createdAt: string, src: Buffer, start: number, end: number): StoredTurn {
    const n = end - start;
    let s = this.filling;
    if (s === undefined || s.used + n > s.buf.length) {
      s = new Slab(Buffer.allocUnsafeSlow(Math.max(n, Math.min(MAX_SLAB, this.unread))));
      this.filling = s;
      this.slabs.add(s);
    }
    src.copy(s.buf, s.used, start, end);
    this.replayedBytes += n;
    const t = new StoredTurn(_id, createdAt, s, s.used, s.used + n);
    s.turns.push(t);
    s.used += n;
    s.live += n;
    return t;
  }

  /** A turn written while running, in a buffer of its own (the writer made it). */
  written(t: StoredTurn): void {
    this.ownBytes += t.bytes;
  }

  /** A kept turn is gone (its session deleted, or replaced by an import). */
  released(t: StoredTurn): void {
    const s = t.slab;
    if (s === undefined) {
      this.ownBytes -= t.bytes;
      return;
    }
    t.leaveSlab();
    s.live -= t.bytes;
    if (!this.loading) this.check(s);
  }

  /** Bytes of memory the kept turns hold: slabs (up to what they used) and buffers of their own. */
  get heldBytes(): number {
    let n = this.ownBytes;
    for (const s of this.slabs) n += s.used;
    return n;
  }

  /** Whether a repack is under way or waiting (tests and /metrics wait on it). */
  get repacking(): boolean {
    return this.repack !== undefined;
  }

  /** Lets go of a slab with nothing live, and has one that is more than half dead repacked. */
  private check(s: Slab): void {
    if (s === this.filling) return;
    if (s.live === 0 && this.repack?.from !== s) {
      this.slabs.delete(s);
      return;
    }
    if (s.repacking || s.live * 2 >= s.used || s.used < MIN_REPACK) return;
    s.repacking = true;
    this.waiting.push(s);
    if (this.repack === undefined) this.startRepack();
  }

  private startRepack(): void {
    const from = this.waiting.shift();
    if (from === undefined) return;
    const to = new Slab(Buffer.allocUnsafeSlow(Math.max(1, from.live)));
    to.repacking = true; // not repacked itself while it fills
    this.slabs.add(to);
    this.repack = { from, to, next: 0 };
    setImmediate(() => this.repackStep());
  }

  /** Moves up to REPACK_STEP bytes of live turns, then yields to the event loop. */
  private repackStep(): void {
    const r = this.repack as Repack;
    const { from, to } = r;
    let copied = 0;
    while (r.next < from.turns.length && copied < REPACK_STEP) {
      const t = from.turns[r.next++] as StoredTurn;
      if (t.slab !== from) continue; // dead
      const json = t.json;
      json.copy(to.buf, to.used);
      t.moveTo(to, to.used);
      to.turns.push(t);
      to.used += json.length;
      to.live += json.length;
      from.live -= json.length;
      copied += json.length;
    }
    if (r.next < from.turns.length) {
      setImmediate(() => this.repackStep());
      return;
    }
    this.slabs.delete(from);
    this.repack = undefined;
    to.repacking = false;
    this.check(to);
    this.startRepack();
  }
}
