// What the client sends: the frontend messages of the PostgreSQL protocol (version 3.0).
// Query messages are encoded back to back into one growing buffer and handed to the socket
// as one slice per flush, so a pipeline of queries costs one write. Start-up and
// authentication messages are small one-off buffers.

const CHUNK = 16 * 1024;
/**
 * A buffer past this size is not kept once its bytes are handed to the socket: one large
 * parameter (a long reply's turn, 6 MB) once made this writer double three bytes a character
 * into a 90 MiB buffer that each connection of the pool then kept.
 */
const LARGE = 1024 * 1024;
/** A parameter longer than this is measured (Buffer.byteLength) rather than counted at three bytes a character. */
const MEASURE_FROM = 4 * 1024;

/** Execute (unnamed portal, all rows) followed by Sync: the tail of every query. */
const EXECUTE_SYNC = Buffer.from([0x45, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0x53, 0, 0, 0, 4]);
const TERMINATE = Buffer.from([0x58, 0, 0, 0, 4]);
/** SSLRequest: length 8, the code 1234.5679. */
export const SSL_REQUEST = Buffer.from([0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f]);

/**
 * A write buffer that only grows forward: `take()` hands the bytes written since the last
 * take to the socket, which keeps them until written, so that region is never reused; a
 * new buffer is started when the current one is full, or after a large one is handed out.
 */
export class MessageWriter {
  private buf = Buffer.allocUnsafe(CHUNK);
  /** Bytes before `start` were handed out by take(). */
  private start = 0;
  private pos = 0;

  get pending(): number {
    return this.pos - this.start;
  }

  /** The bytes written since the last call, or undefined if none. */
  take(): Buffer | undefined {
    if (this.pos === this.start) return undefined;
    const out = this.buf.subarray(this.start, this.pos);
    if (this.buf.length > LARGE) {
      // the socket keeps the large buffer until it is written, and no longer
      this.buf = Buffer.allocUnsafe(CHUNK);
      this.start = this.pos = 0;
    } else {
      this.start = this.pos;
    }
    return out;
  }

  /** Parse into the named statement `name`, parameter types left to the server. */
  parse(name: string, text: string): void {
    this.ensure(name.length * 3 + text.length * 3 + 16);
    const at = this.begin(0x50);
    this.cstring(name);
    this.cstring(text);
    this.buf.writeInt16BE(0, this.pos);
    this.pos += 2;
    this.end(at);
  }

  /** Describe a named statement: the server answers ParameterDescription, then RowDescription or NoData. */
  describeStatement(name: string): void {
    this.ensure(name.length * 3 + 8);
    const at = this.begin(0x44);
    this.buf[this.pos++] = 0x53; // 'S'
    this.cstring(name);
    this.end(at);
  }

  /** Bind the unnamed portal to statement `name` with text parameters, results in text. */
  bind(name: string, params: readonly (string | null)[]): void {
    let room = name.length * 3 + 16;
    for (let i = 0; i < params.length; i++) {
      const n = params[i]?.length ?? 0;
      room += 4 + (n > MEASURE_FROM ? Buffer.byteLength(params[i] as string, 'utf8') : n * 3);
    }
    this.ensure(room);
    const at = this.begin(0x42);
    this.buf[this.pos++] = 0; // unnamed portal
    this.cstring(name);
    this.buf.writeInt16BE(0, this.pos); // no format codes: every parameter is text
    this.buf.writeUInt16BE(params.length, this.pos + 2);
    this.pos += 4;
    for (let i = 0; i < params.length; i++) {
      const p = params[i];
      if (p === null || p === undefined) {
        this.buf.writeInt32BE(-1, this.pos);
        this.pos += 4;
      } else {
        const n = this.buf.write(p, this.pos + 4, 'utf8');
        this.buf.writeInt32BE(n, this.pos);
        this.pos += 4 + n;
      }
    }
    this.buf.writeInt16BE(0, this.pos); // no result format codes: every column is text
    this.pos += 2;
    this.end(at);
  }

  executeAndSync(): void {
    this.ensure(EXECUTE_SYNC.length);
    this.pos += EXECUTE_SYNC.copy(this.buf, this.pos);
  }

  /** Close (deallocate) a named statement. */
  closeStatement(name: string): void {
    this.ensure(name.length * 3 + 8);
    const at = this.begin(0x43);
    this.buf[this.pos++] = 0x53; // 'S'
    this.cstring(name);
    this.end(at);
  }

  /** A simple-protocol Query: any number of statements, no parameters. */
  query(sql: string): void {
    this.ensure(sql.length * 3 + 8);
    const at = this.begin(0x51);
    this.cstring(sql);
    this.end(at);
  }

  /** Answers a COPY FROM STDIN, which this client does not support, so the server fails it. */
  copyFail(reason: string): void {
    this.ensure(reason.length * 3 + 8);
    const at = this.begin(0x66);
    this.cstring(reason);
    this.end(at);
  }

  terminate(): void {
    this.ensure(TERMINATE.length);
    this.pos += TERMINATE.copy(this.buf, this.pos);
  }

  /** Makes room for `n` more bytes, so that a message is written without moving midway. */
  private ensure(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    const pending = this.pos - this.start;
    // room for this message, and twice what is gathered (a pipeline of many grows in doublings,
    // never a copy per message); a large message alone gets its own size, not twice it
    const next = Buffer.allocUnsafe(Math.max(CHUNK, pending + n, 2 * pending));
    this.buf.copy(next, 0, this.start, this.pos);
    this.buf = next;
    this.start = 0;
    this.pos = pending;
  }

  private begin(type: number): number {
    const at = this.pos;
    this.buf[at] = type;
    this.pos += 5;
    return at;
  }

  private end(at: number): void {
    this.buf.writeInt32BE(this.pos - at - 1, at + 1);
  }

  private cstring(s: string): void {
    this.pos += this.buf.write(s, this.pos, 'utf8');
    this.buf[this.pos++] = 0;
  }
}

/** The StartupMessage: protocol 3.0 and the session's parameters. */
export function startupMessage(params: Readonly<Record<string, string>>): Buffer {
  let body = '';
  for (const [k, v] of Object.entries(params)) body += `${k}\0${v}\0`;
  const bytes = Buffer.from(`${body}\0`, 'utf8');
  const out = Buffer.allocUnsafe(8 + bytes.length);
  out.writeInt32BE(out.length, 0);
  out.writeInt32BE(0x00030000, 4);
  bytes.copy(out, 8);
  return out;
}

/** A 'p' message: PasswordMessage, SASLInitialResponse and SASLResponse all share the type. */
export function passwordMessage(body: Buffer): Buffer {
  const out = Buffer.allocUnsafe(5 + body.length);
  out[0] = 0x70;
  out.writeInt32BE(4 + body.length, 1);
  body.copy(out, 5);
  return out;
}

/** NUL-terminated, for the password and md5 messages. */
export function cstringBytes(s: string): Buffer {
  return Buffer.from(`${s}\0`, 'utf8');
}

/** SASLInitialResponse body: the mechanism name and the client-first message. */
export function saslInitialBody(mechanism: string, data: string): Buffer {
  const name = cstringBytes(mechanism);
  const bytes = Buffer.from(data, 'utf8');
  const out = Buffer.allocUnsafe(name.length + 4 + bytes.length);
  name.copy(out, 0);
  out.writeInt32BE(bytes.length, name.length);
  bytes.copy(out, name.length + 4);
  return out;
}
