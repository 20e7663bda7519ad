// The reader of the retired journal engine's files, kept only to migrate them (./migrate.ts)
// and to export a data directory that was never migrated. The format: one record per line,
// `<crc32 as 8 hex digits> <JSON>\n`, the CRC taken over the JSON's UTF-8 bytes; the first
// line a header naming the format and its version. Records:
//   {"put":<chat session>}                  a session's whole new state
//   {"del":"<session id>"}                  the session and all its turns are gone
//   {"turn":<turn>}                         a turn; it becomes its session's head and raises its updatedAt
//   {"edit":<turn>,"session":<session>}     a turn's new state, and its session's
//   {"prune":["<turn id>",...],"session":<session>}   turns deleted, and the session as that leaves it
//   {"fork":<session>,"turns":[<turn>,...]} a new session with its copied turns, root first
//   {"delta":"<turn id>","session":"<session id>","text":"..."}   text appended to a streaming turn
// Replay applies them in order, the last write of an id winning. Version 1 (the first release)
// had the first three only, its turns without `parentId` and `status`: each turn gets the one
// before it as parent, each session its newest turn as head. While a compaction ran the
// journal was two files, `sessions.journal` then `sessions.journal.next`, replayed in that order.
// The checks the engine made stay: an interrupted final write is dropped with a warning, damage
// anywhere else stops with a message saying where and what to do, and nothing is changed.
import { closeSync, existsSync, fstatSync, openSync, readSync } from 'node:fs';
import { basename, join } from 'node:path';
import { appendText } from '../../domain/deltas.js';
import { turnBefore, type TurnKey } from '../../domain/order.js';
import { chatSession, raisedByTurn, turnRecord, type ChatSession, type Turn } from '../../domain/records.js';
import { isLive, type Liveness } from '../../domain/retention.js';
import { sessionProblem } from '../../domain/stored.js';
import { versionOfSession } from '../../domain/version.js';
import type { Logger } from '../../log.js';
import type { ExpiredSession, ExportItem, ExportSnapshot, TurnRecord } from '../store.js';
import { crc32 } from './crc32.js';

export const JOURNAL_FILE = 'sessions.journal';
/** The newer of the journal's two files while a compaction ran: replayed after the older one. */
export const NEXT_FILE = 'sessions.journal.next';
/** Where a running journal server said how much of its files was durable (a hint for readers beside it). */
export const COMMITTED_FILE = 'sessions.journal.committed';
/** What a migrated journal's files are renamed to: `<name>.migrated`. */
export const MIGRATED_SUFFIX = '.migrated';
const FORMAT = 'chat-session-api/journal';
const READS = [1, 2];

/** Damage that is not a torn final write: nothing is read, nothing changed. */
export class JournalDamaged extends Error {
  override readonly name = 'JournalDamaged';
  constructor(file: string, line: number, offset: number, reason: string, linesAfter: number, validAfter: number) {
    const restore = 'restore from a backup (stop the server, move the data directory aside, run `node dist/server.js import <backup.ndjson>`)';
    super(
      `${file}: damaged record at line ${line} (byte offset ${offset}): ${reason}; ` +
        `${linesAfter} more line(s) follow it (${validAfter} intact), so this is not an interrupted final write. Nothing was changed. ` +
        (line <= 1
          ? `To recover, ${restore}.`
          : `To recover, ${restore}, or keep only the records before the damage: copy the file aside, then \`truncate -s ${offset} ${basename(file)}\`.`),
    );
  }
}

/** A journal whose lines end in CRLF, as a copy through a text-mode tool leaves: intact once the CRs go. */
export class JournalHasCrlf extends Error {
  override readonly name = 'JournalHasCrlf';
  constructor(file: string) {
    super(
      `${file}: the journal has Windows line endings (CRLF), as a copy through a text-mode tool leaves; its records are intact. Nothing was changed. ` +
        `Convert it back, then start again: \`sed -i 's/\\r$//' ${basename(file)}\` (or \`dos2unix ${basename(file)}\`).`,
    );
  }
}

/** The journal files a data directory holds, in replay order; undefined when it holds none. */
export function journalFiles(dir: string): string[] | undefined {
  const main = join(dir, JOURNAL_FILE);
  if (!existsSync(main)) return undefined;
  const next = join(dir, NEXT_FILE);
  return existsSync(next) ? [main, next] : [main];
}

/** A turn as replay keeps it: its JSON as written, and what its order and tree need. */
interface Kept {
  readonly _id: string;
  readonly createdAt: string;
  readonly json: Buffer;
}

/** One session as replay leaves it; `session` undefined while only turns of it were read (a compaction wrote turns first). */
class Entry {
  session: ChatSession | undefined;
  readonly turns = new Map<string, Kept>();
  constructor(session?: ChatSession) {
    this.session = session;
  }
}

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

function turnOf(v: unknown): { turn: Json; session: string; _id: string; createdAt: string } | undefined {
  if (!isObject(v)) return undefined;
  const { _id, session, createdAt, parentId } = v;
  if (typeof _id !== 'string' || typeof session !== 'string' || typeof createdAt !== 'string') return undefined;
  if (parentId !== undefined && parentId !== null && typeof parentId !== 'string') return undefined;
  return { turn: v, session, _id, createdAt };
}

const sessionOf = (v: unknown): ChatSession | undefined => (sessionProblem(v, false) === undefined ? (v as ChatSession) : undefined);

/**
 * What a journal held: every session that replay leaves, with its turns in list order. Read
 * whole into memory (the engine held it so too); a migration takes it a batch at a time.
 */
export class JournalImage {
  private readonly entries = new Map<string, Entry>();
  /** The first release's journal: turns without parents, sessions without heads. */
  private legacy = false;
  /** Records read, and bytes of the files up to their last intact record. */
  records = 0;
  bytes = 0;

  /** Reads the journal files of `dir` (journalFiles). Warnings (a torn tail, orphan turns) go to `log`. */
  static read(files: readonly string[], log: Logger): JournalImage {
    const image = new JournalImage();
    files.forEach((file, i) => {
      const scan = scanJournal(file, (line) => image.apply(line));
      if (i === 0 && scan.version === 1) image.legacy = true;
      if (scan.tornBytes > 0) log.warn('dropped an interrupted final write from the journal; it was never acknowledged', { file, offset: scan.validBytes, droppedBytes: scan.tornBytes });
      image.bytes += scan.validBytes;
      image.records += scan.records;
    });
    image.finish(log);
    return image;
  }

  private entry(id: string): Entry {
    let e = this.entries.get(id);
    if (e === undefined) this.entries.set(id, (e = new Entry()));
    return e;
  }

  /** Applies one record (the JSON after the checksum); false when it is no record this format has. */
  private apply(r: Json): boolean {
    if (typeof r['del'] === 'string') {
      this.entries.delete(r['del']);
      return true;
    }
    if (typeof r['delta'] === 'string') {
      if (typeof r['session'] !== 'string' || typeof r['text'] !== 'string') return false;
      const e = this.entries.get(r['session']);
      const old = e?.session === undefined ? undefined : e.turns.get(r['delta']);
      if (e === undefined || old === undefined) return true;
      const was = JSON.parse(old.json.toString('utf8')) as Turn;
      const turn = turnRecord({ ...was, content: appendText(was.content, r['text']).content });
      e.turns.set(old._id, { _id: old._id, createdAt: old.createdAt, json: Buffer.from(JSON.stringify(turn)) });
      return true;
    }
    if (r['put'] !== undefined) {
      const s = sessionOf(r['put']);
      if (s === undefined) return false;
      this.entry(s._id).session = s;
      return true;
    }
    if (r['turn'] !== undefined) {
      const t = turnOf(r['turn']);
      if (t === undefined) return false;
      const e = this.entry(t.session);
      e.turns.set(t._id, { _id: t._id, createdAt: t.createdAt, json: Buffer.from(JSON.stringify(t.turn)) });
      // a turn becomes its session's head and raises it (a turn of the first release gets its head at the end)
      if (e.session !== undefined) {
        const raised = raisedByTurn(e.session, t.createdAt);
        e.session = t.turn['parentId'] === undefined ? raised : chatSession({ ...raised, headTurnId: t._id });
      }
      return true;
    }
    const session = sessionOf(r['session'] ?? r['fork']);
    if (session === undefined || session.headTurnId === undefined) return false;
    if (r['edit'] !== undefined) {
      const t = turnOf(r['edit']);
      if (t === undefined || t.turn['parentId'] === undefined) return false;
      const e = this.entries.get(session._id);
      if (e?.session === undefined) return true;
      if (e.turns.has(t._id)) e.turns.set(t._id, { _id: t._id, createdAt: t.createdAt, json: Buffer.from(JSON.stringify(t.turn)) });
      e.session = session;
      return true;
    }
    const prune = r['prune'];
    if (Array.isArray(prune)) {
      if (!prune.every((id) => typeof id === 'string')) return false;
      const e = this.entries.get(session._id);
      if (e?.session === undefined) return true;
      for (const id of prune as string[]) e.turns.delete(id);
      e.session = session;
      return true;
    }
    const turns = r['turns'];
    if (r['fork'] !== undefined && Array.isArray(turns)) {
      const kept: Kept[] = [];
      for (const v of turns as unknown[]) {
        const t = turnOf(v);
        if (t === undefined || t.turn['parentId'] === undefined) return false;
        kept.push({ _id: t._id, createdAt: t.createdAt, json: Buffer.from(JSON.stringify(t.turn)) });
      }
      const e = this.entry(session._id);
      e.session = session;
      for (const k of kept) e.turns.set(k._id, k);
      return true;
    }
    return false;
  }

  /** What the engine did once a load was read: orphans dropped, the first release's tree made, sessions raised to their newest turn. */
  private finish(log: Logger): void {
    let orphanTurns = 0;
    for (const [id, e] of this.entries) {
      if (e.session === undefined) {
        orphanTurns += e.turns.size;
        this.entries.delete(id);
        continue;
      }
      const turns = sortedTurns(e);
      if (this.legacy) {
        let previous: string | null = null;
        e.turns.clear();
        for (const t of turns) {
          const json = Buffer.from(JSON.stringify(turnRecord({ ...(JSON.parse(t.json.toString('utf8')) as Turn), parentId: previous })));
          e.turns.set(t._id, { _id: t._id, createdAt: t.createdAt, json });
          previous = t._id;
        }
        e.session = chatSession({ ...e.session, headTurnId: previous });
      }
      const last = turns[turns.length - 1];
      if (last !== undefined) e.session = raisedByTurn(e.session, last.createdAt);
    }
    if (orphanTurns > 0) log.warn('dropped turns whose session does not exist', { turns: orphanTurns });
  }

  get sessionCount(): number {
    return this.entries.size;
  }

  get turnCount(): number {
    let n = 0;
    for (const e of this.entries.values()) n += e.turns.size;
    return n;
  }

  /** Every session with its turns (oldest first), in `_id` order. */
  *sessions(): IterableIterator<{ readonly session: ChatSession; readonly turns: readonly Turn[] }> {
    for (const id of [...this.entries.keys()].sort()) {
      const e = this.entries.get(id) as Entry;
      yield { session: e.session as ChatSession, turns: sortedTurns(e).map((t) => JSON.parse(t.json.toString('utf8')) as Turn) };
    }
  }

  /** The data as `export` reads a store: every session with its turns, in `_id` order. */
  exportAll(): Promise<ExportSnapshot> {
    const entries = this.entries;
    const turnCount = this.turnCount;
    async function* items(): AsyncIterable<ExportItem> {
      for (const id of [...entries.keys()].sort()) {
        const e = entries.get(id) as Entry;
        const session = e.session as ChatSession;
        const turns: TurnRecord[] = sortedTurns(e).map((t) => ({ _id: t._id, createdAt: t.createdAt, json: t.json }));
        const last = turns[turns.length - 1];
        const json = JSON.stringify(session);
        yield { session: { session, json, version: versionOfSession(json, last === undefined ? undefined : { createdAt: last.createdAt, _id: last._id }) }, turns };
      }
    }
    return Promise.resolve({ sessions: entries.size, turns: turnCount, items: items() });
  }

  /** Sessions gone at `live` (what `purge --dry-run` lists), oldest expiry first. */
  expiredSessions(live: Liveness, limit: number): Promise<readonly ExpiredSession[]> {
    const out: ExpiredSession[] = [];
    for (const e of this.entries.values()) {
      const s = e.session as ChatSession;
      if (!isLive(s, live)) out.push({ session: s, turns: e.turns.size });
    }
    return Promise.resolve(out.slice(0, limit));
  }

  close(): Promise<void> {
    this.entries.clear();
    return Promise.resolve();
  }
}

function sortedTurns(e: Entry): Kept[] {
  return [...e.turns.values()].sort((a: TurnKey, b: TurnKey) => (turnBefore(a, b) ? -1 : 1));
}

function hexValue(c: number): number {
  if (c >= 48 && c <= 57) return c - 48;
  if (c >= 97 && c <= 102) return c - 87;
  return -1;
}

/** Whether bytes [start, end) (newline excluded) are an intact line: its checksum holds. */
function checkLine(buf: Buffer, start: number, end: number): string | undefined {
  if (end - start < 11 || buf[start + 8] !== 0x20) return 'not a journal line';
  let want = 0;
  for (let i = 0; i < 8; i++) {
    const v = hexValue(buf[start + i] as number);
    if (v < 0) return 'not a journal line';
    want = want * 16 + v;
  }
  return crc32(buf.subarray(start + 9, end)) === want ? undefined : 'checksum mismatch';
}

/** Whether the bytes of a file with no intact header are what an interrupted creation leaves: a prefix of a header line, or zeros. */
function unfinishedHeader(bytes: Buffer): boolean {
  if (bytes.length > 120) return false;
  if (bytes.every((b) => b === 0)) return true;
  const text = bytes.toString('latin1');
  const json = `{"format":"${FORMAT}"`;
  const rest = text.slice(9);
  return /^[0-9a-f]{0,8}$/.test(text.slice(0, 8)) && (text.length <= 8 || text[8] === ' ') && (json.startsWith(rest) || rest.startsWith(json));
}

const CHUNK = 8 * 1024 * 1024;

/**
 * Reads a journal file from the start, handing every intact record to `onRecord` (false: no
 * record this format has, which is damage). Damage confined to the final line (a fragment
 * without its newline, or one last line that fails its checksum) is reported in `tornBytes`;
 * damage anywhere else throws JournalDamaged.
 */
function scanJournal(file: string, onRecord: (r: Json) => boolean): { validBytes: number; tornBytes: number; records: number; version: number | undefined } {
  const fd = openSync(file, 'r');
  try {
    const size = fstatSync(fd).size;
    let buf = Buffer.allocUnsafe(Math.min(CHUNK, Math.max(size, 1)));
    let filled = 0;
    let base = 0;
    let lineNo = 0;
    let records = 0;
    let version: number | undefined;
    let validBytes = 0;
    let damage: { line: number; offset: number; reason: string } | undefined;
    let linesAfter = 0;
    let validAfter = 0;

    const handle = (start: number, end: number): void => {
      lineNo++;
      const offset = base + start;
      let reason = checkLine(buf, start, end);
      if (reason !== undefined && lineNo === 1 && buf[end - 1] === 0x0d && checkLine(buf, start, end - 1) === undefined) throw new JournalHasCrlf(file);
      if (damage !== undefined) {
        linesAfter++;
        if (reason === undefined) validAfter++;
        return;
      }
      let value: unknown;
      if (reason === undefined) {
        try {
          value = JSON.parse(buf.toString('utf8', start + 9, end));
        } catch {
          reason = 'checksum matches but the JSON does not parse';
        }
      }
      if (reason === undefined && lineNo === 1) {
        if (!isObject(value) || value['format'] !== FORMAT) throw new JournalDamaged(file, 1, 0, 'the first line is not a chat-session-api journal header', 0, 0);
        const v = value['version'];
        if (typeof v !== 'number' || !READS.includes(v)) throw new Error(`${file}: journal format version ${String(v)} is not supported by this release (it reads versions ${READS.join(' and ')})`);
        version = v;
      } else if (reason === undefined) {
        if (!isObject(value) || !onRecord(value)) reason = 'intact line holds no known record';
        else records++;
      }
      if (reason !== undefined) damage = { line: lineNo, offset, reason };
      else validBytes = base + end + 1;
    };

    let eof = false;
    for (;;) {
      if (!eof && filled < buf.length) {
        const n = readSync(fd, buf, filled, buf.length - filled, base + filled);
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
        if (pos < filled && damage !== undefined) linesAfter++;
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
    if (damage !== undefined && linesAfter > 0) throw new JournalDamaged(file, damage.line, damage.offset, damage.reason, linesAfter, validAfter);
    if (version === undefined && end > 0) {
      const head = Buffer.alloc(Math.min(end, 121));
      readSync(fd, head, 0, head.length, 0);
      // not even a header, and not what an interrupted creation leaves: some other file
      if (!unfinishedHeader(head)) throw new JournalDamaged(file, 1, 0, damage?.reason ?? 'not a chat-session-api journal', 0, 0);
    }
    return { validBytes, tornBytes: end - validBytes, records, version };
  } finally {
    closeSync(fd);
  }
}
