// A provider's streamed body, decoded once for the three protocols: bytes -> UTF-8 lines ->
// Server-Sent Events (WHATWG rules) or NDJSON objects, whatever cuts the network puts between reads.
// What is held unfinished (a line without its end, an event not yet dispatched) is counted in
// bytes as they arrive, bounded alone (MAX_LINE_BYTES) and in a reply's Holding.
import { ByteRope, UNCOUNTED, type Holding } from './held.js';

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
 * Bytes to lines ending in CR, LF or CRLF (a CRLF cut between two reads is one line end), each
 * line its bytes (a byte order mark opening the stream left out), not yet decoded: no line end
 * byte can sit inside a multi-byte character, so a character cut between reads arrives whole in
 * its line. Work per read is proportional to that read, never to what came before. The
 * unfinished line is held as a ByteRope, counted in `held`.
 */
export class LineBytes {
  private readonly pending = new ByteRope();
  /** The previous read ended in CR: an LF first in the next one belongs to it. */
  private afterCR = false;
  private first = true;

  constructor(
    private readonly maxLineBytes = MAX_LINE_BYTES,
    private readonly held: Holding = UNCOUNTED,
  ) {}

  /** The lines that `chunk` completes, without their line ends. */
  push(chunk: Buffer, lines: Buffer[]): void {
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
    if (this.pending.bytes + n > this.maxLineBytes) throw new StreamDecodeError(`a line longer than ${this.maxLineBytes} bytes`);
    this.held.take(n);
    this.pending.push(chunk.subarray(start));
  }

  /** What is left at the end of the body: a last line without its line end, or nothing. */
  end(lines: Buffer[]): void {
    if (!this.pending.empty) this.emit(Buffer.alloc(0), 0, 0, lines);
  }

  private emit(chunk: Buffer, from: number, to: number, lines: Buffer[]): void {
    let line: Buffer;
    if (this.pending.empty) {
      if (to - from > this.maxLineBytes) throw new StreamDecodeError(`a line longer than ${this.maxLineBytes} bytes`);
      // (a blank line, every event's end, is no new buffer)
      line = from === to ? NO_BYTES : chunk.subarray(from, to);
    } else {
      const before = this.pending.bytes;
      if (before + (to - from) > this.maxLineBytes) throw new StreamDecodeError(`a line longer than ${this.maxLineBytes} bytes`);
      line = this.pending.take(chunk.subarray(from, to));
      this.held.give(before);
    }
    if (this.first) {
      this.first = false;
      // a byte order mark opening the stream is not part of its first line (WHATWG)
      if (line.length >= 3 && line[0] === 0xef && line[1] === 0xbb && line[2] === 0xbf) line = line.subarray(3);
    }
    lines.push(line);
  }
}

/** Bytes to lines as LineBytes cuts them, each decoded as UTF-8. */
export class LineDecoder {
  private readonly bytes: LineBytes;
  private readonly scratch: Buffer[] = [];

  constructor(maxLineBytes = MAX_LINE_BYTES, held: Holding = UNCOUNTED) {
    this.bytes = new LineBytes(maxLineBytes, held);
  }

  /** The lines that `chunk` completes, without their line ends. */
  push(chunk: Buffer, lines: string[]): void {
    const b = this.scratch;
    b.length = 0;
    this.bytes.push(chunk, b);
    for (let i = 0; i < b.length; i++) lines.push((b[i] as Buffer).toString('utf8'));
  }

  /** What is left at the end of the body: a last line without its line end, or nothing. */
  end(lines: string[]): void {
    const b = this.scratch;
    b.length = 0;
    this.bytes.end(b);
    for (const l of b) lines.push(l.toString('utf8'));
  }
}

/** One dispatched Server-Sent Event. `event` is `message` when the stream named none. */
export interface SseEvent {
  readonly event: string;
  readonly data: string;
  readonly id: string | undefined;
}

const COLON = 0x3a;
const SPACE = 0x20;
const NO_BYTES = Buffer.alloc(0);

/** Whether a line's field, the bytes before its colon at `colon`, is `data`. */
function isData(line: Buffer, colon: number): boolean {
  return colon === 4 && line[0] === 0x64 && line[1] === 0x61 && line[2] === 0x74 && line[3] === 0x61;
}

/**
 * Bytes to Server-Sent Events, as the WHATWG HTML standard parses `text/event-stream`:
 * `data:` lines joined with LF, `event:`, `id:`, comments (`:`) ignored, dispatch on a blank
 * line, an event without data not dispatched, an unfinished event at the end discarded. An
 * event's data is kept as the bytes that came until its dispatch decodes it: one never
 * dispatched costs its bytes, counted in `held`, and no decoding.
 */
export class SseDecoder {
  private readonly lines: LineBytes;
  private readonly scratch: Buffer[] = [];
  private eventType = '';
  /**
   * The event's first data line, where its value starts, as long as it is the only one and its
   * read is the one being decoded (most events: one line, dispatched in the read that brought it,
   * decoded from that read with no copy); past that, the data lines are in `data` (joined by LF).
   */
  private single: Buffer | undefined;
  private singleAt = 0;
  private readonly data = new ByteRope(LF);
  /** The bytes of the event's data lines as they came. */
  private dataBytes = 0;
  private lastId: string | undefined;

  constructor(
    private readonly maxEventBytes = MAX_LINE_BYTES,
    private readonly held: Holding = UNCOUNTED,
  ) {
    this.lines = new LineBytes(maxEventBytes, held);
  }

  /** The events that `chunk` completes, appended to `events`. */
  push(chunk: Buffer, events: SseEvent[]): void {
    const lines = this.scratch;
    lines.length = 0;
    this.lines.push(chunk, lines);
    for (let i = 0; i < lines.length; i++) this.line(lines[i] as Buffer, events);
    // an event still open keeps its data as a copy: not the read it came in
    this.settle();
  }

  /** The single data line into `data`. */
  private settle(): void {
    if (this.single === undefined) return;
    this.data.push(this.single.subarray(this.singleAt));
    this.single = undefined;
  }

  /** The body ended: a last line without its line end is read; an event not yet dispatched is dropped (WHATWG). */
  end(events: SseEvent[]): void {
    const lines = this.scratch;
    lines.length = 0;
    this.lines.end(lines);
    for (let i = 0; i < lines.length; i++) this.line(lines[i] as Buffer, events);
    this.reset();
  }

  /** Drops the event being read (its data given back). */
  private reset(): void {
    this.eventType = '';
    this.single = undefined;
    if (!this.data.empty) this.data.take();
    this.held.give(this.dataBytes);
    this.dataBytes = 0;
  }

  private line(line: Buffer, events: SseEvent[]): void {
    if (line.length === 0) {
      const data = this.single !== undefined ? this.single.toString('utf8', this.singleAt) : this.data.empty ? undefined : this.data.take().toString('utf8');
      if (data !== undefined) events.push({ event: this.eventType === '' ? 'message' : this.eventType, data, id: this.lastId });
      this.reset();
      return;
    }
    const colon = line.indexOf(COLON);
    if (colon === 0) return; // a comment: keep-alives and the like
    const valueAt = colon < 0 ? line.length : line[colon + 1] === SPACE ? colon + 2 : colon + 1;
    if (isData(line, colon) || (colon < 0 && line.length === 4 && isData(line, 4))) {
      // counted in bytes (the line's, as it came): characters would let three times as much in
      const more = line.length + 1;
      if (this.dataBytes + more > this.maxEventBytes) throw new StreamDecodeError(`an event larger than ${this.maxEventBytes} bytes`);
      this.held.take(more);
      this.dataBytes += more;
      if (this.dataBytes === more) {
        this.single = line;
        this.singleAt = valueAt;
      } else {
        this.settle();
        this.data.push(line.subarray(valueAt));
      }
      return;
    }
    const field = line.toString('utf8', 0, colon < 0 ? line.length : colon);
    const value = line.toString('utf8', valueAt);
    switch (field) {
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
