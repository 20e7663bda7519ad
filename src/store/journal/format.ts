// The journal file format: one record per line, `<crc32 as 8 hex digits> <JSON>\n`, the CRC
// taken over the JSON's UTF-8 bytes. The first line is a header naming the format. Records:
//   {"put":<chat session>}   a session's whole new state (create, update, archive)
//   {"del":"<session id>"}   a tombstone: the session and all its turns are gone
//                            (`"carried":true` marks one a compaction carried over; see compaction.ts)
//   {"turn":<turn>}          a turn; it also raises its session's updatedAt to the turn's createdAt
// Replay applies them in order, the last write of an id winning.
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { basename } from 'node:path';
import { sessionProblem } from '../../domain/inputs.js';
import type { ChatSession } from '../../domain/records.js';
import { crc32 } from './crc32.js';
import { StoredTurn, type TurnArena } from './turns.js';

export const JOURNAL_FORMAT = 'chat-session-api/journal';
export const JOURNAL_VERSION = 1;

export interface JournalHeader {
  readonly format: typeof JOURNAL_FORMAT;
  readonly version: number;
  readonly createdAt: string;
}

/** A record as replay hands it over. Turns stay JSON bytes: they are only ever sent as JSON. */
export type JournalRecord =
  | { readonly kind: 'put'; readonly session: ChatSession }
  | { readonly kind: 'del'; readonly id: string; readonly carried: boolean }
  | { readonly kind: 'turn'; readonly session: string; readonly turn: StoredTurn }
  /** A turn of a session a later tombstone deletes: not kept at all. */
  | { readonly kind: 'dead-turn'; readonly session: string };

const HEX = '0123456789abcdef';

/** One journal line for a JSON text given in parts: checksum, space, the text, newline. */
export function frame(...parts: readonly (string | Buffer)[]): Buffer {
  let len = 0;
  for (const p of parts) len += typeof p === 'string' ? Buffer.byteLength(p) : p.length;
  const out = Buffer.allocUnsafe(len + 10);
  let at = 9;
  for (const p of parts) at += typeof p === 'string' ? out.write(p, at, 'utf8') : p.copy(out, at);
  let crc = crc32(out.subarray(9, 9 + len));
  for (let i = 7; i >= 0; i--) {
    out[i] = HEX.charCodeAt(crc & 0xf);
    crc >>>= 4;
  }
  out[8] = 0x20;
  out[len + 9] = 0x0a;
  return out;
}

/** Lines of each record, built around JSON the writer already has. */
export const putLine = (sessionJson: string): Buffer => frame('{"put":', sessionJson, '}');
export const turnLine = (turnJson: string | Buffer): Buffer => frame('{"turn":', turnJson, '}');
export const delLine = (id: string, carried = false): Buffer => frame(`{"del":${JSON.stringify(id)}${carried ? ',"carried":true' : ''}}`);
/** Bytes a put line adds to its session's JSON: checksum, space, `{"put":`, `}`, newline. */
export const PUT_LINE_OVERHEAD = 18;
/** Bytes a turn line adds to its turn's JSON: checksum, space, `{"turn":`, `}`, newline. */
export const TURN_LINE_OVERHEAD = 19;

export function headerLine(now: Date = new Date()): Buffer {
  const header: JournalHeader = { format: JOURNAL_FORMAT, version: JOURNAL_VERSION, createdAt: now.toISOString() };
  return frame(JSON.stringify(header));
}

/** Damage that is not a torn final write: the start stops rather than lose what follows. */
export class JournalDamaged extends Error {
  override readonly name = 'JournalDamaged';
  constructor(
    readonly file: string,
    readonly line: number,
    readonly offset: number,
    readonly reason: string,
    linesAfter: number,
    validAfter: number,
  ) {
    const restore = 'restore from a backup (stop the server, move the data directory aside, run `node dist/server.js import <backup.ndjson>`)';
    super(
      `${file}: damaged record at line ${line} (byte offset ${offset}): ${reason}; ` +
        `${linesAfter} more line(s) follow it (${validAfter} intact), so this is not an interrupted final write. Nothing was changed. ` +
        // cutting at the header would keep nothing: then a backup is the only way back
        (line <= 1
          ? `To recover, ${restore}.`
          : `To recover, ${restore}, or keep only the records before the damage: copy the file aside, then \`truncate -s ${offset} ${basename(file)}\`.`),
    );
  }
}

/**
 * A journal whose lines end in CRLF, as a copy through a text-mode tool (a Windows editor, git
 * with autocrlf) leaves: every record is intact once the CR is removed, and JSON never holds a
 * raw CR, so removing them loses nothing.
 */
export class JournalHasCrlf extends Error {
  override readonly name = 'JournalHasCrlf';
  constructor(readonly file: string) {
    super(
      `${file}: the journal has Windows line endings (CRLF), as a copy through a text-mode tool leaves; its records are intact. Nothing was changed. ` +
        `Convert it back, then start again: \`sed -i 's/\\r$//' ${basename(file)}\` (or \`dos2unix ${basename(file)}\`).`,
    );
  }
}

export interface ScanResult {
  /** Bytes up to the end of the last intact record. */
  readonly validBytes: number;
  /** Bytes after it that were dropped as an interrupted final write (0 when none). */
  readonly tornBytes: number;
  readonly records: number;
  readonly header: JournalHeader | undefined;
}

function hexValue(c: number): number {
  if (c >= 48 && c <= 57) return c - 48;
  if (c >= 97 && c <= 102) return c - 87;
  return -1;
}

type Decoded = { ok: true } | { ok: false; reason: string };

/** Whether bytes [start, end) (newline excluded) are an intact line: its checksum holds. */
function decode(buf: Buffer, start: number, end: number): Decoded {
  if (end - start < 11 || buf[start + 8] !== 0x20) return { ok: false, reason: 'not a journal line' };
  let want = 0;
  for (let i = 0; i < 8; i++) {
    const v = hexValue(buf[start + i] as number);
    if (v < 0) return { ok: false, reason: 'not a journal line' };
    want = want * 16 + v;
  }
  if (crc32(buf.subarray(start + 9, end)) !== want) return { ok: false, reason: 'checksum mismatch' };
  return { ok: true };
}

/** Where replay puts what it reads: turns' JSON in the arena, unless `dead` says a later tombstone deletes them. */
interface ReplayTarget {
  readonly arena: TurnArena;
  /** Position of this file's first byte among all the journal's files (their sizes before it). */
  readonly base: number;
  /** Whether a tombstone after position `pos` deletes `session`. */
  readonly dead: ((session: string, pos: number) => boolean) | undefined;
}

const TURN_PREFIX = Buffer.from('{"turn":{"_id":"');
const SESSION_KEY = Buffer.from('","session":"');
const CREATED_KEY = Buffer.from(',"createdAt":"');

function bytesAt(buf: Buffer, at: number, what: Buffer): boolean {
  return at >= 0 && buf.compare(what, 0, what.length, at, at + what.length) === 0;
}

/**
 * A turn line's record, read from its bytes [start, end) (the JSON, checksum excluded)
 * without parsing the turn: the writer always puts `_id` and `session` (24-character ids)
 * first and `createdAt` (24 characters) last, so they sit at known places. The turn's JSON is
 * copied out as bytes. Anything unexpected takes the slow path, a full parse.
 */
function turnAt(buf: Buffer, start: number, end: number, to: ReplayTarget, pos: number): JournalRecord | undefined {
  const jsonStart = start + 8;
  const jsonEnd = end - 1;
  const created = jsonEnd - 40; // ,"createdAt":"<24>"}
  if (
    bytesAt(buf, start, TURN_PREFIX) &&
    bytesAt(buf, start + 40, SESSION_KEY) &&
    buf[start + 77] === 0x22 &&
    created > start + 77 &&
    bytesAt(buf, created, CREATED_KEY) &&
    buf[jsonEnd - 2] === 0x22 &&
    buf[jsonEnd - 1] === 0x7d &&
    buf[end - 1] === 0x7d
  ) {
    const session = buf.toString('latin1', start + 53, start + 77);
    if (to.dead?.(session, pos) === true) return { kind: 'dead-turn', session };
    return {
      kind: 'turn',
      session,
      turn: to.arena.replayed(buf.toString('latin1', start + 16, start + 40), buf.toString('latin1', created + 14, created + 38), buf, jsonStart, jsonEnd),
    };
  }
  const v: unknown = JSON.parse(buf.toString('utf8', start, end));
  const t = (v as { turn?: Record<string, unknown> }).turn;
  if (typeof t !== 'object' || t === null || typeof t['_id'] !== 'string' || typeof t['session'] !== 'string' || typeof t['createdAt'] !== 'string') {
    return undefined;
  }
  if (to.dead?.(t['session'], pos) === true) return { kind: 'dead-turn', session: t['session'] };
  const json = Buffer.from(JSON.stringify(t));
  return { kind: 'turn', session: t['session'], turn: to.arena.replayed(t['_id'], t['createdAt'], json, 0, json.length) };
}

/** The record bytes [start, end) hold (the JSON, checksum excluded), or undefined when none this release knows. */
function recordAt(buf: Buffer, start: number, end: number, to: ReplayTarget, pos: number): JournalRecord | undefined {
  if (buf[start + 2] === 0x74 /* t */ && bytesAt(buf, start, TURN_PREFIX.subarray(0, 8))) return turnAt(buf, start, end, to, pos);
  const v: unknown = JSON.parse(buf.toString('utf8', start, end));
  if (typeof v !== 'object' || v === null) return undefined;
  const r = v as Record<string, unknown>;
  if (typeof r['del'] === 'string') return { kind: 'del', id: r['del'], carried: r['carried'] === true };
  const put = r['put'];
  // checksummed and written by this server, so the types are checked, not the API's limits
  if (sessionProblem(put, false) === undefined) return { kind: 'put', session: put as ChatSession };
  return undefined;
}

function isHeader(v: unknown): v is JournalHeader {
  return typeof v === 'object' && v !== null && (v as Record<string, unknown>)['format'] === JOURNAL_FORMAT;
}

const CHUNK = 8 * 1024 * 1024;

/**
 * Whether a journal of `size` bytes with no intact header is what an interrupted creation
 * leaves: a prefix of a header line (or zeros a crash left in its place), and nothing more.
 */
function unfinishedHeader(fd: number, size: number): boolean {
  const full = headerLine().length + 1;
  if (size > full) return false;
  const bytes = Buffer.alloc(size);
  readSync(fd, bytes, 0, size, 0);
  if (bytes.every((b) => b === 0)) return true;
  const text = bytes.toString('latin1');
  const json = `{"format":"${JOURNAL_FORMAT}"`;
  const rest = text.slice(9);
  return /^[0-9a-f]{0,8}$/.test(text.slice(0, 8)) && (text.length <= 8 || text[8] === ' ') && (json.startsWith(rest) || rest.startsWith(json));
}

/**
 * Reads a journal from the start, calling `onRecord` for every intact record in order.
 * Damage confined to the final line (a fragment without its newline, or one last line that
 * fails its checksum: what an interrupted append leaves) is reported in `tornBytes` and not
 * replayed; damage anywhere else throws JournalDamaged and nothing is dropped.
 * `upTo` bounds the bytes read, and `fd` reads an already open file: together they give a
 * consistent prefix of a journal that is still growing (or being replaced by compaction).
 */
export function scanJournal(
  file: string,
  onRecord: (r: JournalRecord, bytes: number) => void,
  opts: { fd?: number; upTo?: number; arena: TurnArena; base?: number; dead?: (session: string, pos: number) => boolean },
): ScanResult {
  const upTo = opts.upTo ?? Infinity;
  const target: ReplayTarget = { arena: opts.arena, base: opts.base ?? 0, dead: opts.dead };
  const fd = opts.fd ?? openSync(file, 'r');
  try {
    let buf = Buffer.allocUnsafe(CHUNK);
    let filled = 0; // bytes in buf
    let base = 0; // file offset of buf[0]
    let eof = false;
    let lineNo = 0;
    let records = 0;
    let header: JournalHeader | undefined;
    let validBytes = 0;
    let damage: { line: number; offset: number; reason: string } | undefined;
    let linesAfterDamage = 0;
    let validAfterDamage = 0;

    const handle = (start: number, end: number): void => {
      lineNo++;
      const offset = base + start;
      const d = decode(buf, start, end);
      if (!d.ok && lineNo === 1 && buf[end - 1] === 0x0d && decode(buf, start, end - 1).ok) throw new JournalHasCrlf(file);
      if (damage !== undefined) {
        linesAfterDamage++;
        if (d.ok) validAfterDamage++;
        return;
      }
      if (!d.ok) {
        damage = { line: lineNo, offset, reason: d.reason };
        return;
      }
      let value: unknown;
      let record: JournalRecord | undefined;
      try {
        if (lineNo === 1) value = JSON.parse(buf.toString('utf8', start + 9, end));
        else record = recordAt(buf, start + 9, end, target, target.base + offset);
      } catch {
        damage = { line: lineNo, offset, reason: 'checksum matches but the JSON does not parse' };
        return;
      }
      if (lineNo === 1) {
        if (!isHeader(value)) throw new JournalDamaged(file, 1, 0, 'the first line is not a chat-session-api journal header', 0, 0);
        if (value.version !== JOURNAL_VERSION) {
          throw new Error(`${file}: journal format version ${String(value.version)} is not supported by this release (it reads version ${JOURNAL_VERSION})`);
        }
        header = value;
      } else {
        if (record === undefined) {
          damage = { line: lineNo, offset, reason: 'intact line holds no known record' };
          return;
        }
        onRecord(record, end + 1 - start);
        records++;
      }
      validBytes = base + end + 1;
    };

    for (;;) {
      target.arena.unread = Math.min(upTo, fstatSync(fd).size) - base;
      if (!eof && filled < buf.length) {
        const want = Math.min(buf.length - filled, upTo - (base + filled));
        const n = want > 0 ? readSync(fd, buf, filled, want, base + filled) : 0;
        if (n === 0) eof = true;
        filled += n;
      }
      let pos = 0;
      for (;;) {
        const nl = buf.indexOf(0x0a, pos);
        if (nl === -1 || nl >= filled) break;
        handle(pos, nl);
        pos = nl + 1;
      }
      if (eof) {
        // a fragment without its newline is where an interrupted write stopped
        if (pos < filled && damage !== undefined) linesAfterDamage++;
        break;
      }
      if (pos === 0 && filled === buf.length) {
        // a line longer than the buffer: grow it
        const bigger = Buffer.allocUnsafe(buf.length * 2);
        buf.copy(bigger, 0, 0, filled);
        buf = bigger;
        continue;
      }
      buf.copy(buf, 0, pos, filled);
      base += pos;
      filled -= pos;
    }
    const end = base + filled;
    if (damage !== undefined && linesAfterDamage > 0) {
      throw new JournalDamaged(file, damage.line, damage.offset, damage.reason, linesAfterDamage, validAfterDamage);
    }
    if (header === undefined && end > 0 && !unfinishedHeader(fd, end)) {
      // not even a header, and not what an interrupted creation leaves: some other file
      throw new JournalDamaged(file, 1, 0, damage?.reason ?? 'not a chat-session-api journal', 0, 0);
    }
    return { validBytes, tornBytes: end - validBytes, records, header };
  } finally {
    if (opts.fd === undefined) closeSync(fd);
  }
}

const DEL_PREFIX = Buffer.from('{"del":"');

/**
 * Where each session's last tombstone is, before replay: `into` gets, per deleted session id,
 * the position (`base` + byte offset) of its last intact `del` line. Replay then leaves out the
 * turns a later tombstone deletes instead of copying them into memory first, so replay needs no
 * more memory than the live data, however many deleted turns the journal still holds. A quick
 * search for the bytes a tombstone starts with; only whole, checksummed lines count (a torn last
 * line deletes nothing, as replay drops it).
 */
export function findTombstones(file: string, into: Map<string, number>, opts: { fd?: number; upTo?: number; base?: number } = {}): void {
  const upTo = opts.upTo ?? Infinity;
  const base = opts.base ?? 0;
  const fd = opts.fd ?? openSync(file, 'r');
  try {
    let buf = Buffer.allocUnsafe(CHUNK);
    let filled = 0;
    let at = 0; // file offset of buf[0]
    for (;;) {
      const want = Math.min(buf.length - filled, upTo - (at + filled));
      const n = want > 0 ? readSync(fd, buf, filled, want, at + filled) : 0;
      filled += n;
      // lines wholly inside buf[0, end) are examined; the rest waits for the next read
      const end = n === 0 ? filled : buf.lastIndexOf(0x0a, filled - 1) + 1;
      let pos = 0;
      for (;;) {
        const hit = buf.indexOf(DEL_PREFIX, pos);
        if (hit === -1 || hit >= end) break;
        pos = hit + 1;
        // a tombstone line: `<8 hex> {"del":"<id>"...}` at the start of a line (buf[0] always is one;
        // never inside a line: JSON escapes newlines)
        if (hit < 9 || buf[hit - 1] !== 0x20 || (hit > 9 && buf[hit - 10] !== 0x0a)) continue;
        const nl = buf.indexOf(0x0a, hit);
        if (nl === -1 || nl >= end) continue;
        if (!decode(buf, hit - 9, nl).ok) continue;
        const idEnd = buf.indexOf(0x22, hit + DEL_PREFIX.length);
        if (idEnd === -1 || idEnd >= nl) continue;
        into.set(buf.toString('latin1', hit + DEL_PREFIX.length, idEnd), base + at + hit - 9);
      }
      if (n === 0) return;
      if (end === 0) {
        // a line longer than the buffer: grow it
        if (filled === buf.length) {
          const bigger = Buffer.allocUnsafe(buf.length * 2);
          buf.copy(bigger, 0, 0, filled);
          buf = bigger;
        }
        continue;
      }
      buf.copy(buf, 0, end, filled);
      at += end;
      filled -= end;
    }
  } finally {
    if (opts.fd === undefined) closeSync(fd);
  }
}
