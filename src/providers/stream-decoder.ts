// A provider's streamed body, decoded once for the three protocols: bytes -> UTF-8 lines ->
// Server-Sent Events (WHATWG rules) or NDJSON objects, whatever cuts the network puts between reads.
// What is held unfinished (a line without its end, an event not yet dispatched) is counted in
// bytes as they arrive, bounded alone (MAX_LINE_BYTES) and in a reply's Holding.
import { TextRope, UNCOUNTED, type Holding } from './held.js';

/** A line or an event past this many bytes is the provider's fault, not a reason to grow without end. */
export const MAX_LINE_BYTES = 8 * 1024 * 1024;

const LF = 0x0a;
const CR = 0x0d;

/** The provider's stream cannot be read: too large, or not what its protocol says. */
export class StreamDecodeError extends Error {
  override readonly name = 'StreamDecodeError';
  constructor(
    message: string,
    /**
     * What the provider sent there, to quote: whole (up to SENT_MAX), since it must be scrubbed
     * of credentials before it is cut (a cut first can leave a piece of a key no rule knows).
     */
    readonly sent?: string,
  ) {
    super(message);
  }
}

/** The most of an offending line kept for its quote (which shows far less): a scrub's cost stays small. */
const SENT_MAX = 4096;

/**
 * Bytes to lines ending in CR, LF or CRLF (a CRLF cut between two reads is one line end).
 * Only whole lines are decoded as UTF-8, and no line end byte can sit inside a multi-byte
 * character, so a character cut between reads arrives whole. Work per read is proportional
 * to that read, never to what came before.
 */
export class LineDecoder {
  /**
   * The unfinished line's bytes, each piece merged with those before it while they are no longer
   * than it: however small the reads (a byte each), about log2(n) buffers are held.
   */
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  /** The previous read ended in CR: an LF first in the next one belongs to it. */
  private afterCR = false;
  private first = true;
  /** The UTF-8 bytes of each line given by the last push or end, in order. */
  readonly sizes: number[] = [];

  constructor(
    private readonly maxLineBytes = MAX_LINE_BYTES,
    private readonly held: Holding = UNCOUNTED,
  ) {}

  /** The lines that `chunk` completes, without their line ends (their bytes in `sizes`). */
  push(chunk: Buffer, lines: string[]): void {
    this.sizes.length = 0;
    // an empty read must not end the wait for the LF of a CRLF
    if (chunk.length === 0) return;
    let start = 0;
    if (this.afterCR) {
      this.afterCR = false;
      if (chunk.length > 0 && chunk[0] === LF) start = 1;
    }
    const n = chunk.length;
    if (!chunk.includes(CR)) {
      // LF-only line ends (nearly every provider): the native search finds them
      for (let lf = chunk.indexOf(LF, start); lf >= 0; lf = chunk.indexOf(LF, start)) {
        this.emit(chunk, start, lf, lines);
        start = lf + 1;
      }
      this.keep(chunk, start);
      return;
    }
    let i = start;
    while (i < n) {
      const b = chunk[i] as number;
      if (b !== LF && b !== CR) {
        i++;
        continue;
      }
      this.emit(chunk, start, i, lines);
      if (b === CR) {
        if (i + 1 < n) {
          if (chunk[i + 1] === LF) i++;
        } else this.afterCR = true;
      }
      start = ++i;
    }
    this.keep(chunk, start);
  }

  /** Holds the unfinished line at the end of a read until a line end comes. */
  private keep(chunk: Buffer, start: number): void {
    if (start >= chunk.length) return;
    const n = chunk.length - start;
    const bytes = this.pendingBytes + n;
    if (bytes > this.maxLineBytes) throw new StreamDecodeError(`a line longer than ${this.maxLineBytes} bytes`);
    this.held.take(n);
    // a small tail of a large read is copied: the piece alone must not keep the whole read alive
    const piece = start > 0 && n < chunk.length >> 1 ? Buffer.from(chunk.subarray(start)) : chunk.subarray(start);
    const pending = this.pending;
    pending.push(piece);
    while (pending.length >= 2 && (pending[pending.length - 2] as Buffer).length <= 2 * (pending[pending.length - 1] as Buffer).length) {
      const last = pending.pop() as Buffer;
      pending[pending.length - 1] = Buffer.concat([pending[pending.length - 1] as Buffer, last]);
    }
    this.pendingBytes = bytes;
  }

  /** What is left at the end of the body: a last line without its line end, or nothing. */
  end(lines: string[]): void {
    this.sizes.length = 0;
    if (this.pendingBytes > 0) this.emit(Buffer.alloc(0), 0, 0, lines);
  }

  private emit(chunk: Buffer, from: number, to: number, lines: string[]): void {
    let line: string;
    if (this.pending.length === 0) {
      if (to - from > this.maxLineBytes) throw new StreamDecodeError(`a line longer than ${this.maxLineBytes} bytes`);
      line = chunk.toString('utf8', from, to);
      this.sizes.push(to - from);
    } else {
      const bytes = this.pendingBytes + (to - from);
      if (bytes > this.maxLineBytes) throw new StreamDecodeError(`a line longer than ${this.maxLineBytes} bytes`);
      this.pending.push(chunk.subarray(from, to));
      line = Buffer.concat(this.pending, bytes).toString('utf8');
      this.held.give(this.pendingBytes);
      this.pending = [];
      this.pendingBytes = 0;
      this.sizes.push(bytes);
    }
    if (this.first) {
      this.first = false;
      // a byte order mark opening the stream is not part of its first line (WHATWG)
      if (line.charCodeAt(0) === 0xfeff) line = line.slice(1);
    }
    lines.push(line);
  }
}

/** One dispatched Server-Sent Event. `event` is `message` when the stream named none. */
export interface SseEvent {
  readonly event: string;
  readonly data: string;
  readonly id: string | undefined;
}

/**
 * Bytes to Server-Sent Events, as the WHATWG HTML standard parses `text/event-stream`:
 * `data:` lines joined with LF, `event:`, `id:`, comments (`:`) ignored, dispatch on a blank
 * line, an event without data not dispatched, an unfinished event at the end discarded.
 */
export class SseDecoder {
  private readonly lines: LineDecoder;
  private readonly scratch: string[] = [];
  private eventType = '';
  /** The event's data lines so far (joined by LF at its dispatch), and their bytes as they came. */
  private readonly data = new TextRope('\n');
  private dataBytes = 0;
  private lastId: string | undefined;

  constructor(
    private readonly maxEventBytes = MAX_LINE_BYTES,
    private readonly held: Holding = UNCOUNTED,
  ) {
    this.lines = new LineDecoder(maxEventBytes, held);
  }

  /** The events that `chunk` completes, appended to `events`. */
  push(chunk: Buffer, events: SseEvent[]): void {
    const lines = this.scratch;
    lines.length = 0;
    this.lines.push(chunk, lines);
    const sizes = this.lines.sizes;
    for (let i = 0; i < lines.length; i++) this.line(lines[i] as string, sizes[i] as number, events);
  }

  /** The body ended: a last line without its line end is read; an event not yet dispatched is dropped (WHATWG). */
  end(events: SseEvent[]): void {
    const lines = this.scratch;
    lines.length = 0;
    this.lines.end(lines);
    const sizes = this.lines.sizes;
    for (let i = 0; i < lines.length; i++) this.line(lines[i] as string, sizes[i] as number, events);
    this.reset();
  }

  /** Drops the event being read (its data given back). */
  private reset(): void {
    this.eventType = '';
    if (!this.data.empty) this.data.take();
    this.held.give(this.dataBytes);
    this.dataBytes = 0;
  }

  /** One line, of `bytes` UTF-8 bytes. */
  private line(line: string, bytes: number, events: SseEvent[]): void {
    if (line.length === 0) {
      if (!this.data.empty) events.push({ event: this.eventType === '' ? 'message' : this.eventType, data: this.data.take(), id: this.lastId });
      this.reset();
      return;
    }
    const colon = line.indexOf(':');
    if (colon === 0) return; // a comment: keep-alives and the like
    let field: string;
    let value: string;
    if (colon < 0) {
      field = line;
      value = '';
    } else {
      field = line.slice(0, colon);
      value = line.charCodeAt(colon + 1) === 0x20 ? line.slice(colon + 2) : line.slice(colon + 1);
    }
    switch (field) {
      case 'data': {
        // counted in bytes (the line's, as it came): characters would let three times as much in
        const more = bytes + 1;
        if (this.dataBytes + more > this.maxEventBytes) throw new StreamDecodeError(`an event larger than ${this.maxEventBytes} bytes`);
        this.held.take(more);
        this.dataBytes += more;
        this.data.push(value);
        break;
      }
      case 'event':
        this.eventType = value;
        break;
      case 'id':
        if (!value.includes('\0')) this.lastId = value;
        break;
      default: // `retry` and unknown fields: nothing a one-shot reader acts on
    }
  }
}

/** Bytes to newline-delimited JSON values (blank lines skipped); a line that is not JSON is the provider's fault. */
export class NdjsonDecoder {
  private readonly lines: LineDecoder;
  private readonly scratch: string[] = [];

  constructor(maxLineBytes = MAX_LINE_BYTES, held: Holding = UNCOUNTED) {
    this.lines = new LineDecoder(maxLineBytes, held);
  }

  push(chunk: Buffer, values: unknown[]): void {
    const lines = this.scratch;
    lines.length = 0;
    this.lines.push(chunk, lines);
    for (let i = 0; i < lines.length; i++) parseLine(lines[i] as string, values);
  }

  end(values: unknown[]): void {
    const lines = this.scratch;
    lines.length = 0;
    this.lines.end(lines);
    for (const l of lines) parseLine(l, values);
  }
}

function parseLine(line: string, values: unknown[]): void {
  if (line.trim() === '') return;
  try {
    values.push(JSON.parse(line));
  } catch {
    throw new StreamDecodeError('a line that is not JSON', line.slice(0, SENT_MAX));
  }
}
