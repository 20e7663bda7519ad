// What the server sends: backend messages framed out of the socket's chunks, and decoders
// for the ones the client reads. A message that lies whole in one chunk is decoded in place;
// only a message split across chunks is copied, once, into a buffer sized from its header.
import { PgError, type ServerErrorFields } from './errors.js';

const EMPTY = Buffer.alloc(0);
/** The server never sends more in one message (1 GiB is the largest field); more is garbage. */
const MAX_MESSAGE = 0x40000000 + 0x10000;

/** Splits the byte stream into messages: push() a chunk, then next() until it returns false. */
export class MessageReader {
  private buf: Buffer = EMPTY;
  private start = 0;
  private end = 0;
  /** True when `buf` is ours (copied into), false when it is the socket's chunk. */
  private owned = false;

  /** The current message's type byte and body, `body[offset..bodyEnd)`, after next() returned true. */
  type = 0;
  body: Buffer = EMPTY;
  offset = 0;
  bodyEnd = 0;

  push(chunk: Buffer): void {
    const have = this.end - this.start;
    if (have === 0) {
      this.buf = chunk;
      this.start = 0;
      this.end = chunk.length;
      this.owned = false;
      return;
    }
    if (this.owned && this.end + chunk.length <= this.buf.length) {
      this.end += chunk.copy(this.buf, this.end);
      return;
    }
    // a split message: size the new buffer for the whole of it when its header is here
    const wanted = have >= 5 ? this.buf.readInt32BE(this.start + 1) + 1 : 0;
    const next = Buffer.allocUnsafe(Math.max(have + chunk.length, wanted, 8192));
    this.buf.copy(next, 0, this.start, this.end);
    chunk.copy(next, have);
    this.buf = next;
    this.start = 0;
    this.end = have + chunk.length;
    this.owned = true;
  }

  /** Advances to the next complete message; false when the rest has not arrived yet. */
  next(): boolean {
    const have = this.end - this.start;
    if (have < 5) {
      if (have === 0) this.buf = EMPTY; // let the chunk go
      return false;
    }
    const length = this.buf.readInt32BE(this.start + 1);
    if (length < 4 || length > MAX_MESSAGE) throw new PgError('protocol', `invalid message length ${length}`);
    if (have < length + 1) return false;
    this.type = this.buf[this.start] ?? 0;
    this.body = this.buf;
    this.offset = this.start + 5;
    this.bodyEnd = this.start + 1 + length;
    this.start = this.bodyEnd;
    return true;
  }

  /** Bytes received and not yet framed: none may follow the one-byte answer to SSLRequest. */
  get buffered(): number {
    return this.end - this.start;
  }
}

function cstringEnd(buf: Buffer, at: number, end: number): number {
  const nul = buf.indexOf(0, at);
  if (nul === -1 || nul >= end) throw new PgError('protocol', 'unterminated string in a message');
  return nul;
}

/** DataRow: one array per row, each value its text or null. */
export function decodeDataRow(buf: Buffer, at: number): (string | null)[] {
  const n = buf.readInt16BE(at);
  const row = new Array<string | null>(n);
  let p = at + 2;
  for (let i = 0; i < n; i++) {
    const len = buf.readInt32BE(p);
    p += 4;
    if (len < 0) {
      row[i] = null;
    } else {
      row[i] = buf.toString('utf8', p, p + len);
      p += len;
    }
  }
  return row;
}

/** RowDescription: the column names (types are not needed: every value comes as text). */
export function decodeFieldNames(buf: Buffer, at: number, end: number): string[] {
  const n = buf.readInt16BE(at);
  const names = new Array<string>(n);
  let p = at + 2;
  for (let i = 0; i < n; i++) {
    const nul = cstringEnd(buf, p, end);
    names[i] = buf.toString('utf8', p, nul);
    p = nul + 1 + 18; // table oid, column number, type oid, type size, type modifier, format
  }
  return names;
}

/** The two parts of a CommandComplete tag ("INSERT 0 5", "SELECT 3", "BEGIN"). */
export interface CommandTag {
  readonly command: string;
  /** The tag's last number: rows inserted, updated, deleted, selected, copied; 0 if none. */
  readonly rowCount: number;
}

export function decodeCommandTag(buf: Buffer, at: number, end: number): CommandTag {
  const tag = buf.toString('latin1', at, cstringEnd(buf, at, end));
  const space = tag.indexOf(' ');
  const command = space === -1 ? tag : tag.slice(0, space);
  const last = tag.lastIndexOf(' ');
  const n = last === -1 ? 0 : Number(tag.slice(last + 1));
  return { command, rowCount: Number.isInteger(n) ? n : 0 };
}

/** ErrorResponse and NoticeResponse: typed fields, each a byte code and a string. */
export function decodeErrorFields(buf: Buffer, at: number, end: number): ServerErrorFields {
  const f = new Map<number, string>();
  let p = at;
  while (p < end && buf[p] !== 0) {
    const code = buf[p] ?? 0;
    const nul = cstringEnd(buf, p + 1, end);
    f.set(code, buf.toString('utf8', p + 1, nul));
    p = nul + 1;
  }
  const letter = (c: string): string | undefined => f.get(c.charCodeAt(0));
  return {
    severity: letter('V') ?? letter('S') ?? 'ERROR', // V is never localized; S may be
    code: letter('C') ?? 'XX000',
    message: letter('M') ?? 'unknown server error',
    detail: letter('D'),
    hint: letter('H'),
    position: letter('P'),
    where: letter('W'),
    schema: letter('s'),
    table: letter('t'),
    column: letter('c'),
    constraint: letter('n'),
  };
}

export interface Notification {
  readonly channel: string;
  readonly payload: string;
  /** The notifying backend's process id. */
  readonly pid: number;
}

export function decodeNotification(buf: Buffer, at: number, end: number): Notification {
  const pid = buf.readInt32BE(at);
  const channelEnd = cstringEnd(buf, at + 4, end);
  const payloadEnd = cstringEnd(buf, channelEnd + 1, end);
  return {
    channel: buf.toString('utf8', at + 4, channelEnd),
    payload: buf.toString('utf8', channelEnd + 1, payloadEnd),
    pid,
  };
}

/** ParameterStatus: a run-time parameter the server reports (server_version, TimeZone...). */
export function decodeParameterStatus(buf: Buffer, at: number, end: number): readonly [string, string] {
  const nameEnd = cstringEnd(buf, at, end);
  const valueEnd = cstringEnd(buf, nameEnd + 1, end);
  return [buf.toString('utf8', at, nameEnd), buf.toString('utf8', nameEnd + 1, valueEnd)];
}

/** The NUL-separated list of SASL mechanisms in AuthenticationSASL. */
export function decodeSaslMechanisms(buf: Buffer, at: number, end: number): string[] {
  const out: string[] = [];
  let p = at;
  while (p < end && buf[p] !== 0) {
    const nul = cstringEnd(buf, p, end);
    out.push(buf.toString('utf8', p, nul));
    p = nul + 1;
  }
  return out;
}
