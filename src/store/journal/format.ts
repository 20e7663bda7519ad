// The journal file format: one record per line, `<crc32 as 8 hex digits> <JSON>\n`, the CRC
// taken over the JSON's UTF-8 bytes. The first line is a header naming the format and its
// version. Records:
//   {"put":<chat session>}                  a session's whole new state (create, update, archive, head switch)
//   {"del":"<session id>"}                  a tombstone: the session and all its turns are gone
//                                           (`"carried":true` marks one a compaction carried over; see compaction.ts)
//   {"turn":<turn>}                         a turn; it becomes its session's head and raises its updatedAt to the turn's createdAt
//   {"edit":<turn>,"session":<session>}     a turn's new state, and its session's
//   {"prune":["<turn id>",...],"session":<session>}   turns deleted (a turn and its descendants), and the session as that leaves it
//                                           (`"carried":true` at its end: carried over by a compaction)
//   {"fork":<session>,"turns":[<turn>,...]} a new session with its copied turns, root first
//   {"delta":"<turn id>","session":"<session id>","text":"..."}   text appended to a streaming turn
//                                           (src/domain/deltas.ts says where); the session does not change
// Each change is one line, so an interrupted final write drops a change whole. Replay applies
// them in order, the last write of an id winning. Version 1 (the first release) had the first
// three only, its turns without `parentId` and `status`: replay gives each turn the one before
// it as parent, and a journal of version 1 is rewritten as version 2 at the first start.
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { basename } from 'node:path';
import { sessionProblem } from '../../domain/stored.js';
import type { ChatSession } from '../../domain/records.js';
import { crc32 } from './crc32.js';
import { StoredTurn, type TurnArena } from './turns.js';

export const JOURNAL_FORMAT = 'chat-session-api/journal';
/** The version this release writes. */
export const JOURNAL_VERSION = 2;
/** The versions it reads: 1 is the first release's, rewritten at start. */
const READS = [1, 2];

export interface JournalHeader {
  readonly format: typeof JOURNAL_FORMAT;
  readonly version: number;
  readonly createdAt: string;
}

/**
 * A record as replay hands it over. Turns stay JSON bytes: they are only ever sent as JSON.
 * `parentId` undefined: a turn of the first release, whose parent is the turn before it.
 */
export type JournalRecord =
  | { readonly kind: 'put'; readonly session: ChatSession }
  | { readonly kind: 'del'; readonly id: string }
  | { readonly kind: 'turn'; readonly session: string; readonly turn: StoredTurn; readonly parentId: string | null | undefined }
  /** A turn a later record deletes (its session's tombstone, or a prune): not kept at all. */
  | { readonly kind: 'dead-turn'; readonly session: string }
  /** `turn` undefined: the edit of a turn a later record deletes (its session still moves). */
  | { readonly kind: 'edit'; readonly session: ChatSession; readonly turn: StoredTurn | undefined }
  | { readonly kind: 'prune'; readonly session: ChatSession; readonly ids: readonly string[] }
  | { readonly kind: 'fork'; readonly session: ChatSession; readonly turns: readonly { readonly turn: StoredTurn; readonly parentId: string | null }[] }
  | { readonly kind: 'delta'; readonly session: string; readonly turnId: string; readonly text: string };

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
export const editLine = (turnJson: Buffer, sessionJson: string): Buffer => frame('{"edit":', turnJson, ',"session":', sessionJson, '}');
export const pruneLine = (ids: readonly string[], sessionJson: string, carried = false): Buffer =>
  frame(`{"prune":${JSON.stringify(ids)},"session":`, sessionJson, carried ? ',"carried":true}' : '}');
export const deltaLine = (turnId: string, sessionId: string, text: string): Buffer => frame(`{"delta":${JSON.stringify(turnId)},"session":${JSON.stringify(sessionId)},"text":${JSON.stringify(text)}}`);
export function forkLine(sessionJson: string, turns: readonly Buffer[]): Buffer {
  const parts: (string | Buffer)[] = ['{"fork":', sessionJson, ',"turns":['];
  turns.forEach((t, i) => parts.push(...(i > 0 ? [',', t] : [t])));
  parts.push(']}');
  return frame(...parts);
}
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

type LineCheck = { ok: true } | { ok: false; reason: string };

/** Whether bytes [start, end) (newline excluded) are an intact line: its checksum holds. */
function checkLine(buf: Buffer, start: number, end: number): LineCheck {
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

/** Where replay puts what it reads: turns' JSON in the arena, unless `dead` says a later record deletes them. */
interface ReplayTarget {
  readonly arena: TurnArena;
  /** Position of this file's first byte among all the journal's files (their sizes before it). */
  readonly base: number;
  readonly dead: Deleted | undefined;
}

/** Whether a record after position `pos` deletes session `session`, or its turn `turn`. */
export type Deleted = (session: string, turn: string | undefined, pos: number) => boolean;

const TURN_PREFIX = Buffer.from('{"turn":{"_id":"');
const SESSION_KEY = Buffer.from('","session":"');
const PARENT_KEY = Buffer.from(',"parentId":');
const CREATED_KEY = Buffer.from(',"createdAt":"');
const NULL = Buffer.from('null');

function bytesAt(buf: Buffer, at: number, what: Buffer): boolean {
  return at >= 0 && buf.compare(what, 0, what.length, at, at + what.length) === 0;
}

/**
 * A turn line's record, read from its bytes [start, end) (the JSON, checksum excluded)
 * without parsing the turn: the writer always puts `_id`, `session` (24-character ids) and
 * `parentId` (an id or null) first and `createdAt` (24 characters) last, so they sit at known
 * places. The turn's JSON is copied out as bytes. Anything unexpected takes the slow path, a
 * full parse; a turn of the first release (no parentId) is kept as written until the load
 * gives it its parent (upgradeTurnJson).
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
    let parentId: string | null | undefined;
    if (bytesAt(buf, start + 78, PARENT_KEY)) {
      if (bytesAt(buf, start + 90, NULL)) parentId = null;
      else if (buf[start + 90] === 0x22 && buf[start + 115] === 0x22) parentId = buf.toString('latin1', start + 91, start + 115);
      else return slowTurn(buf, start, end, to, pos);
    }
    const session = buf.toString('latin1', start + 53, start + 77);
    const id = buf.toString('latin1', start + 16, start + 40);
    if (to.dead?.(session, id, pos) === true) return { kind: 'dead-turn', session };
    return { kind: 'turn', session, turn: to.arena.replayed(id, buf.toString('latin1', created + 14, created + 38), buf, jsonStart, jsonEnd), parentId };
  }
  return slowTurn(buf, start, end, to, pos);
}

function slowTurn(buf: Buffer, start: number, end: number, to: ReplayTarget, pos: number): JournalRecord | undefined {
  const v: unknown = JSON.parse(buf.toString('utf8', start, end));
  const t = (v as { turn?: unknown }).turn;
  if (!isTurnish(t)) return undefined;
  if (to.dead?.(t.session, t._id, pos) === true) return { kind: 'dead-turn', session: t.session };
  const parentId = t['parentId'];
  return { kind: 'turn', session: t.session, turn: storedOf(t, to.arena), parentId: parentId === undefined ? undefined : (parentId as string | null) };
}

type Turnish = Record<string, unknown> & { readonly _id: string; readonly session: string; readonly createdAt: string };

function isTurnish(t: unknown): t is Turnish {
  if (typeof t !== 'object' || t === null) return false;
  const r = t as Record<string, unknown>;
  const p = r['parentId'];
  return typeof r['_id'] === 'string' && typeof r['session'] === 'string' && typeof r['createdAt'] === 'string' && (p === undefined || p === null || typeof p === 'string');
}

/** A turn parsed from a record, its JSON written again into the arena. */
function storedOf(t: Turnish, arena: TurnArena): StoredTurn {
  const json = Buffer.from(JSON.stringify(t));
  return arena.replayed(t._id, t.createdAt, json, 0, json.length);
}

/** A session of a record: its shape checked (checksummed and written by this server, so the types, not the API's limits). */
function sessionOf(v: unknown): ChatSession | undefined {
  return sessionProblem(v, false) === undefined ? (v as ChatSession) : undefined;
}

/** The record bytes [start, end) hold (the JSON, checksum excluded), or undefined when none this release knows. */
function recordAt(buf: Buffer, start: number, end: number, to: ReplayTarget, pos: number): JournalRecord | undefined {
  if (buf[start + 2] === 0x74 /* t */ && bytesAt(buf, start, TURN_PREFIX.subarray(0, 8))) return turnAt(buf, start, end, to, pos);
  const v: unknown = JSON.parse(buf.toString('utf8', start, end));
  if (typeof v !== 'object' || v === null) return undefined;
  const r = v as Record<string, unknown>;
  if (typeof r['del'] === 'string') return { kind: 'del', id: r['del'] };
  if (typeof r['delta'] === 'string') {
    return typeof r['session'] === 'string' && typeof r['text'] === 'string' ? { kind: 'delta', session: r['session'], turnId: r['delta'], text: r['text'] } : undefined;
  }
  if (r['put'] !== undefined) {
    const session = sessionOf(r['put']);
    return session === undefined ? undefined : { kind: 'put', session };
  }
  const session = sessionOf(r['session'] ?? r['fork']);
  if (session === undefined || session.headTurnId === undefined) return undefined;
  if (r['edit'] !== undefined) {
    const t = r['edit'];
    if (!isTurnish(t) || t.parentId === undefined) return undefined;
    // an edit of a turn deleted later: its session still moves, its turn is not kept
    return { kind: 'edit', session, turn: to.dead?.(t.session, t._id, pos) === true ? undefined : storedOf(t, to.arena) };
  }
  const prune = r['prune'];
  if (Array.isArray(prune)) return prune.every((id) => typeof id === 'string') ? { kind: 'prune', session, ids: prune as string[] } : undefined;
  const turns = r['turns'];
  if (r['fork'] !== undefined && Array.isArray(turns)) {
    const out: { turn: StoredTurn; parentId: string | null }[] = [];
    for (const t of turns as unknown[]) {
      if (!isTurnish(t) || t.parentId === undefined) return undefined;
      if (to.dead?.(t.session, t._id, pos) !== true) out.push({ turn: storedOf(t, to.arena), parentId: t.parentId as string | null });
    }
    return { kind: 'fork', session, turns: out };
  }
  return undefined;
}

const V1_TURN_HEAD = 70; // {"_id":"<24>","session":"<24>"
const V1_TURN_TAIL = 40; // ,"createdAt":"<24>"}
const STATUS_COMPLETE = ',"status":"complete"';

/**
 * The JSON of a turn of the first release as this release keeps it: `parentId` after
 * `session`, `status` (complete) before `createdAt`. The first release wrote `_id` and `session`
 * first and `createdAt` last, so both go in at known places without parsing the turn; anything
 * else is parsed and written again.
 */
export function upgradeTurnJson(json: Buffer, parentId: string | null): Buffer {
  const parent = `,"parentId":${parentId === null ? 'null' : `"${parentId}"`}`;
  const n = json.length;
  if (n > V1_TURN_HEAD + V1_TURN_TAIL && json.toString('latin1', 0, 8) === '{"_id":"' && json.toString('latin1', 32, 45) === '","session":"' && json[69] === 0x22 && json.toString('latin1', n - V1_TURN_TAIL, n - 26) === ',"createdAt":"') {
    return Buffer.concat([json.subarray(0, V1_TURN_HEAD), Buffer.from(parent), json.subarray(V1_TURN_HEAD, n - V1_TURN_TAIL), Buffer.from(STATUS_COMPLETE), json.subarray(n - V1_TURN_TAIL)]);
  }
  const t = JSON.parse(json.toString('utf8')) as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(t)) {
    if (k === 'parentId' || k === 'status') continue;
    if (k === 'createdAt') out['status'] = t['status'] ?? 'complete';
    out[k] = v;
    if (k === 'session') out['parentId'] = parentId;
  }
  return Buffer.from(JSON.stringify(out));
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
  opts: { fd?: number; upTo?: number; arena: TurnArena; base?: number; dead?: Deleted },
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
      const d = checkLine(buf, start, end);
      if (!d.ok && lineNo === 1 && buf[end - 1] === 0x0d && checkLine(buf, start, end - 1).ok) throw new JournalHasCrlf(file);
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
        if (!READS.includes(value.version)) {
          throw new Error(`${file}: journal format version ${String(value.version)} is not supported by this release (it reads versions ${READS.join(' and ')})`);
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
const PRUNE_PREFIX = Buffer.from('{"prune":[');

/** Where the records that delete are: per session its last tombstone, per turn the last prune naming it. */
export interface Deletions {
  readonly sessions: Map<string, number>;
  readonly turns: Map<string, number>;
}

/**
 * Where each deleting record is, before replay: `into` gets, per deleted session id, the
 * position (`base` + byte offset) of its last intact `del` line, and per deleted turn id that of
 * the last `prune` line naming it. Replay then leaves out the turns a later record deletes
 * instead of copying them into memory first, so replay needs no more memory than the live data,
 * however many deleted turns the journal still holds. A quick search for the bytes those lines
 * start with; only whole, checksummed lines count (a torn last line deletes nothing, as replay
 * drops it).
 */
export function findDeletions(file: string, into: Deletions, opts: { fd?: number; upTo?: number; base?: number } = {}): void {
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
      for (const prefix of [DEL_PREFIX, PRUNE_PREFIX]) {
        let pos = 0;
        for (;;) {
          const hit = buf.indexOf(prefix, pos);
          if (hit === -1 || hit >= end) break;
          pos = hit + 1;
          // a line `<8 hex> {"del":"<id>"...}` or `<8 hex> {"prune":[...` at the start of a line
          // (buf[0] always is one; never inside a line: JSON escapes newlines)
          if (hit < 9 || buf[hit - 1] !== 0x20 || (hit > 9 && buf[hit - 10] !== 0x0a)) continue;
          const nl = buf.indexOf(0x0a, hit);
          if (nl === -1 || nl >= end) continue;
          if (!checkLine(buf, hit - 9, nl).ok) continue;
          const where = base + at + hit - 9;
          if (prefix === DEL_PREFIX) {
            const idEnd = buf.indexOf(0x22, hit + DEL_PREFIX.length);
            if (idEnd === -1 || idEnd >= nl) continue;
            into.sessions.set(buf.toString('latin1', hit + DEL_PREFIX.length, idEnd), where);
          } else {
            // ids are hex: the list ends at the first `]`
            const listEnd = buf.indexOf(0x5d, hit + PRUNE_PREFIX.length - 1);
            if (listEnd === -1 || listEnd >= nl) continue;
            let ids: unknown;
            try {
              ids = JSON.parse(buf.toString('latin1', hit + PRUNE_PREFIX.length - 1, listEnd + 1));
            } catch {
              continue;
            }
            if (Array.isArray(ids)) for (const id of ids) if (typeof id === 'string') into.turns.set(id, where);
          }
        }
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
