// The pieces of a reply on their way to a stream of the OpenAI door (Chat Completions' chunks,
// Responses' events): queued as the reply tells them, taken by the stream as fast as its client
// reads, with a ping when nothing came for a while.
import type { Piece } from '../../domain/deltas.js';

/**
 * The pieces of one reply as they come, for its stream: waits for the next, for the reply's end,
 * or for a ping's time of silence.
 */
export class PieceQueue {
  private pieces: Piece[] = [];
  private wake: (() => void) | undefined;
  private readonly timer: NodeJS.Timeout;
  pinged = false;

  constructor(pingMs: number) {
    this.timer = setTimeout(() => {
      this.pinged = true;
      this.notify();
    }, pingMs);
  }

  readonly push = (p: Piece): void => {
    this.pieces.push(p);
    this.notify();
  };

  notify(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }

  take(): Piece[] {
    const out = this.pieces;
    if (out.length > 0) this.pieces = [];
    return out;
  }

  next(): Promise<void> {
    return new Promise((resolve) => {
      this.wake = resolve;
    });
  }

  /** A frame went out: the silence starts again. */
  wrote(): void {
    this.pinged = false;
    this.timer.refresh();
  }

  stop(): void {
    clearTimeout(this.timer);
  }
}


/** What a stream of the door writes: its first frames, a piece's, its last ones (the reply as it ended), or a failure's. */
export interface Frames<V> {
  first(): string;
  piece(p: Piece): string;
  last(v: V): string;
  /** The reply's end could not be had (its record failed). */
  failed(): string;
}

/**
 * A reply's stream: the first frames, its pieces as they come (those that came together in one
 * write), a `: ping` after a silence, then its last frames. A client that leaves before the end
 * cancels the reply (`cancel`).
 */
export async function* relay<V>(queue: PieceQueue, end: Promise<V>, frames: Frames<V>, cancel: () => void): AsyncGenerator<string> {
  let over = false;
  const ended = end.then(
    (v) => ({ v }),
    (e: unknown) => ({ e }),
  );
  void ended.then(() => {
    over = true;
    queue.notify();
  });
  try {
    yield frames.first();
    queue.wrote();
    for (;;) {
      const pieces = queue.take();
      if (pieces.length > 0) {
        let out = '';
        for (const p of pieces) out += frames.piece(p);
        if (out !== '') {
          yield out;
          queue.wrote();
        }
        continue;
      }
      if (over) break;
      if (queue.pinged) {
        yield ': ping\n\n';
        queue.wrote();
        continue;
      }
      await queue.next();
    }
    const r = await ended;
    yield 'e' in r ? frames.failed() : frames.last(r.v);
  } finally {
    queue.stop();
    // the client left before the end: the reply is cancelled
    if (!over) cancel();
  }
}
