// What replies in progress hold unfinished, counted in bytes as it arrives: a provider's line or
// event not yet ended, a tool call's arguments not yet whole, text told to listeners and not yet
// written. Bounded per reply (a line or an event: 8 MiB; the turn: BODY_LIMIT) and in sum over
// all replies of the instance (a share of MEMORY_LIMIT), so that many providers together cannot
// make the server hold more than that however they send.

/**
 * Of the smaller of MEMORY_LIMIT and V8's heap limit, the share all replies may hold unfinished:
 * what they hold becomes about twice as much resident memory by the time the collector catches up
 * (decoded strings, the copies of merged pieces), and a thousand honest replies hold a few MiB.
 */
export const HELD_SHARE = 1 / 64;
/** It is never less than this: room for one line or event of the largest a provider may send, and more. */
export const HELD_MIN = 16 * 1024 * 1024;

/** What all replies may hold unfinished for memory ceilings of `residentBytes` (undefined: off) and `heapBytes`. */
export function heldLimitOf(residentBytes: number | undefined, heapBytes: number): number {
  return Math.max(HELD_MIN, Math.floor(Math.min(residentBytes ?? Infinity, heapBytes) * HELD_SHARE));
}

/** A reply would make what all replies hold unfinished pass its bound: the reply ends with error. */
export class HeldTooMuch extends Error {
  override readonly name = 'HeldTooMuch';
  constructor(readonly limit: number) {
    super(`sent more than the replies in progress may hold unfinished together (${Math.round(limit / (1024 * 1024))} MiB, a share of MEMORY_LIMIT)`);
  }
}

/** The instance's count of what all replies hold unfinished, and its bound. */
export class HeldBytes {
  private usedBytes = 0;

  constructor(readonly limit: number) {}

  get used(): number {
    return this.usedBytes;
  }

  /** Takes `n` more bytes; false, taking nothing, when the sum would pass the bound. */
  take(n: number): boolean {
    if (this.usedBytes + n > this.limit) return false;
    this.usedBytes += n;
    return true;
  }

  give(n: number): void {
    this.usedBytes -= n;
  }

  /** One reply's share of the count. */
  holding(): Holding {
    return new ReplyHolding(this);
  }
}

/** What one reply holds unfinished, counted in the instance's sum. */
export interface Holding {
  /** Takes `n` bytes more; throws HeldTooMuch, taking nothing, when the sum would pass its bound. */
  take(n: number): void;
  /** Gives back `n` of the bytes it took (no more than it holds). */
  give(n: number): void;
  /** Gives back everything it holds: the reply ended. */
  release(): void;
}

class ReplyHolding implements Holding {
  private held = 0;

  constructor(private readonly all: HeldBytes) {}

  take(n: number): void {
    if (n <= 0) return;
    if (!this.all.take(n)) throw new HeldTooMuch(this.all.limit);
    this.held += n;
  }

  give(n: number): void {
    const m = Math.min(n, this.held);
    this.held -= m;
    this.all.give(m);
  }

  release(): void {
    this.all.give(this.held);
    this.held = 0;
  }
}

/** A holding that counts nothing (the decoders alone, in their tests): only their own bounds hold. */
export const UNCOUNTED: Holding = { take: () => undefined, give: () => undefined, release: () => undefined };

/** Pieces under this many characters are joined in groups as they come; larger ones are kept as they are. */
const SMALL_PIECE = 4096;

/**
 * Pieces of text kept to be joined later (an event's data lines, a tool call's arguments): small
 * pieces are joined in groups of about SMALL_PIECE characters as they come, so however small the
 * pieces, a string is held for every few KiB at most; larger pieces are kept as they came. Each
 * character is copied at most twice (into its group, into the whole), never again as the text grows.
 */
export class TextRope {
  private parts: string[] = [];
  /** Small pieces not yet joined into a group, and their characters. */
  private small: string[] = [];
  private smallChars = 0;

  constructor(private readonly separator = '') {}

  get empty(): boolean {
    return this.parts.length === 0 && this.small.length === 0;
  }

  push(text: string): void {
    if (text.length >= SMALL_PIECE) {
      this.group();
      this.parts.push(text);
      return;
    }
    this.small.push(text);
    this.smallChars += text.length + this.separator.length;
    if (this.smallChars >= SMALL_PIECE) this.group();
  }

  /** The small pieces so far as one part. */
  private group(): void {
    if (this.small.length === 0) return;
    this.parts.push(this.small.length === 1 ? (this.small[0] as string) : this.small.join(this.separator));
    this.small = [];
    this.smallChars = 0;
  }

  /** The whole text; the rope is empty after. */
  take(): string {
    this.group();
    const text = this.parts.length === 1 ? (this.parts[0] as string) : this.parts.join(this.separator);
    this.parts = [];
    return text;
  }
}

/**
 * Pieces of bytes kept to be joined later (a line not yet ended, an event's data lines): pieces
 * under SMALL_PIECE bytes are copied as they come into buffers of that size, larger ones kept as
 * they came (copied when their buffer is more than twice their size: no piece keeps a whole read
 * alive). However small the pieces, a buffer is held every few KiB, and each byte is copied at
 * most twice (into its group, into the whole). Joined with `separator` between pieces.
 */
export class ByteRope {
  private parts: Buffer[] = [];
  /** The group small pieces are copied into, and how much of it they fill. */
  private group: Buffer | undefined;
  private filled = 0;
  private pieces = 0;
  /** The bytes of the whole, separators included. */
  bytes = 0;

  constructor(private readonly separator: number | undefined = undefined) {}

  get empty(): boolean {
    return this.pieces === 0;
  }

  push(piece: Buffer): void {
    if (this.separator !== undefined && this.pieces > 0) this.copy(Buffer.of(this.separator));
    this.pieces++;
    if (piece.length >= SMALL_PIECE) {
      this.flush();
      this.parts.push(piece.length * 2 < piece.buffer.byteLength ? Buffer.from(piece) : piece);
      this.bytes += piece.length;
    } else this.copy(piece);
  }

  private copy(piece: Buffer): void {
    if (this.group !== undefined && this.filled + piece.length > this.group.length) this.flush();
    this.group ??= Buffer.allocUnsafe(SMALL_PIECE);
    piece.copy(this.group, this.filled);
    this.filled += piece.length;
    this.bytes += piece.length;
  }

  private flush(): void {
    if (this.group === undefined || this.filled === 0) return;
    this.parts.push(this.group.subarray(0, this.filled));
    this.group = undefined;
    this.filled = 0;
  }

  /** The whole, and `more` after it; the rope is empty after. */
  take(more?: Buffer): Buffer {
    this.flush();
    if (more !== undefined && more.length > 0) this.parts.push(more);
    const total = this.bytes + (more?.length ?? 0);
    const whole = this.parts.length === 1 ? (this.parts[0] as Buffer) : Buffer.concat(this.parts, total);
    this.parts = [];
    this.bytes = 0;
    this.pieces = 0;
    return whole;
  }
}
