// What replies in progress hold unfinished, counted in bytes as it arrives: a provider's line or
// event not yet ended, a tool call's arguments not yet whole, text told to listeners and not yet
// written. Bounded per reply (a line or an event: 8 MiB; the turn: BODY_LIMIT) and in sum over
// all replies of the instance (a share of MEMORY_LIMIT), so that many providers together cannot
// make the server hold more than that however they send.

/** Of the smaller of MEMORY_LIMIT and V8's heap limit, the share all replies may hold unfinished. */
export const HELD_SHARE = 1 / 16;
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

/**
 * Pieces of text kept to be joined later (an event's data lines, a tool call's arguments): each
 * piece pushed is merged with the ones before it while they are no longer than it, so however
 * small the pieces, at most about log2(n) strings are held (flat strings: a join makes one), and
 * the copying is O(n log n) over the whole text.
 */
export class TextRope {
  private parts: string[] = [];

  constructor(private readonly separator = '') {}

  get empty(): boolean {
    return this.parts.length === 0;
  }

  push(text: string): void {
    const parts = this.parts;
    parts.push(text);
    while (parts.length >= 2 && (parts[parts.length - 2] as string).length <= 2 * (parts[parts.length - 1] as string).length) {
      const last = parts.pop() as string;
      parts[parts.length - 1] = [parts[parts.length - 1] as string, last].join(this.separator);
    }
  }

  /** The whole text; the rope is empty after. */
  take(): string {
    const text = this.parts.length === 1 ? (this.parts[0] as string) : this.parts.join(this.separator);
    this.parts = [];
    return text;
  }
}
