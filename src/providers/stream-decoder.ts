// A provider's streamed body, decoded once for the three protocols: bytes -> UTF-8 lines ->
// Server-Sent Events (WHATWG rules) or NDJSON objects, whatever cuts the network puts between reads.

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
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  /** The previous read ended in CR: an LF first in the next one belongs to it. */
  private afterCR = false;
  private first = true;

  constructor(private readonly maxLineBytes = MAX_LINE_BYTES) {}

  /** The lines that `chunk` completes, without their line ends. */
  push(chunk: Buffer, lines: string[]): void {
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
    const bytes = this.pendingBytes + (chunk.length - start);
    if (bytes > this.maxLineBytes) throw new StreamDecodeError(`a line longer than ${this.maxLineBytes} bytes`);
    this.pending.push(chunk.subarray(start));
    this.pendingBytes = bytes;
  }

  /** What is left at the end of the body: a last line without its line end, or nothing. */
  end(lines: string[]): void {
    if (this.pendingBytes > 0) this.emit(Buffer.alloc(0), 0, 0, lines);
  }

  private emit(chunk: Buffer, from: number, to: number, lines: string[]): void {
    let line: string;
    if (this.pending.length === 0) {
      if (to - from > this.maxLineBytes) throw new StreamDecodeError(`a line longer than ${this.maxLineBytes} bytes`);
      line = chunk.toString('utf8', from, to);
    } else {
      if (this.pendingBytes + (to - from) > this.maxLineBytes) throw new StreamDecodeError(`a line longer than ${this.maxLineBytes} bytes`);
      this.pending.push(chunk.subarray(from, to));
      line = Buffer.concat(this.pending, this.pendingBytes + (to - from)).toString('utf8');
      this.pending = [];
      this.pendingBytes = 0;
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
  private data = '';
  private hasData = false;
  private lastId: string | undefined;

  constructor(private readonly maxEventBytes = MAX_LINE_BYTES) {
    this.lines = new LineDecoder(maxEventBytes);
  }

  /** The events that `chunk` completes, appended to `events`. */
  push(chunk: Buffer, events: SseEvent[]): void {
    const lines = this.scratch;
    lines.length = 0;
    this.lines.push(chunk, lines);
    for (let i = 0; i < lines.length; i++) this.line(lines[i] as string, events);
  }

  /** The body ended: a last line without its line end is read; an event not yet dispatched is dropped (WHATWG). */
  end(events: SseEvent[]): void {
    const lines = this.scratch;
    lines.length = 0;
    this.lines.end(lines);
    for (const l of lines) this.line(l, events);
  }

  private line(line: string, events: SseEvent[]): void {
    if (line.length === 0) {
      if (this.hasData) events.push({ event: this.eventType === '' ? 'message' : this.eventType, data: this.data, id: this.lastId });
      this.eventType = '';
      this.data = '';
      this.hasData = false;
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
      case 'data':
        if (this.hasData) {
          if (this.data.length + 1 + value.length > this.maxEventBytes) throw new StreamDecodeError(`an event larger than ${this.maxEventBytes} bytes`);
          this.data += '\n' + value;
        } else {
          this.data = value;
          this.hasData = true;
        }
        break;
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

  constructor(maxLineBytes = MAX_LINE_BYTES) {
    this.lines = new LineDecoder(maxLineBytes);
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
