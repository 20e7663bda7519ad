// Backup and restore as NDJSON. `export` reads a consistent prefix of the journal (the file as
// it stood at one instant) while the server keeps running; `import` checks a whole file
// before it writes anything, then swaps in a new journal by rename: all or nothing.
//
// Format: a header line, then one record per line, each session followed by its turns:
//   {"format":"chat-session-api/export","version":1,"exportedAt":"...","sessions":N,"turns":M}
//   {"session":{...}}
//   {"turn":{...}}
import { closeSync, existsSync, fstatSync, fsyncSync, mkdirSync, openSync, readSync, renameSync, unlinkSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { sessionProblem, turnProblem } from './domain/inputs.js';
import { isPlainObject } from './domain/schema.js';
import { chatSession, turnRecord, type ChatSession, type Turn } from './domain/records.js';
import { headerLine, scanJournal } from './store/journal-format.js';
import { fsyncDir, IMPORT_SUFFIX, JOURNAL_FILE, linesOf, readCommitted, replayRecord, writeFullySync } from './store/journal.js';
import { acquireLock, lockHolder } from './data-dir-lock.js';
import { MemoryState } from './store/state.js';
import { StoredTurn } from './store/store.js';

export const EXPORT_FORMAT = 'chat-session-api/export';
export const EXPORT_VERSION = 1;

/** A backup file that cannot be imported; nothing was written. */
export class ImportRejected extends Error {
  override readonly name = 'ImportRejected';
}

/** A backup that could not be written; the message is one line for the operator. */
export class ExportFailed extends Error {
  override readonly name = 'ExportFailed';
}

/**
 * Opens the journal and decides how much of it to read: all of it when no server is running;
 * else only what the server has published as durable (COMMITTED_FILE), on the same inode (a
 * compaction may swap the file in between: then look again).
 */
function openConsistent(dataDir: string, file: string): { fd: number; upTo: number } {
  let published = false;
  for (let attempt = 0; attempt < 200; attempt++) {
    const fd = openSync(file, 'r');
    const st = fstatSync(fd);
    if (lockHolder(dataDir) === undefined) return { fd, upTo: st.size };
    const committed = readCommitted(dataDir);
    if (committed !== undefined && committed.ino === String(st.ino)) return { fd, upTo: Math.min(committed.size, st.size) };
    published ||= committed !== undefined;
    closeSync(fd);
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 5); // the server is swapping files: a moment
  }
  const holder = lockHolder(dataDir);
  throw new ExportFailed(
    published
      ? `${file}: the journal kept changing under the export; try again`
      : `the server holding ${dataDir} (pid ${holder?.pid ?? '?'}) does not say how much of its journal is durable (an older release?); stop it, or export with its own release`,
  );
}

/** The data as of one instant: the journal's intact, durable records. */
function readState(dataDir: string, mustExist: boolean): MemoryState {
  const file = join(dataDir, JOURNAL_FILE);
  const state = new MemoryState();
  state.beginLoad();
  if (existsSync(file)) {
    const { fd, upTo } = openConsistent(dataDir, file);
    try {
      scanJournal(file, (r) => replayRecord(state, r), { fd, upTo });
    } finally {
      closeSync(fd);
    }
  } else if (mustExist) {
    throw new ExportFailed(`no journal at ${file} (is DATA_DIR right?)`);
  }
  state.finishLoad();
  return state;
}

export interface ExportSummary {
  readonly sessions: number;
  readonly turns: number;
}

/**
 * Reads the data directory as of one instant and returns a writer of the export, so a
 * journal that cannot be read fails before any output is opened. `write` gets NDJSON chunks.
 */
export function exportData(dataDir: string): (write: (chunk: Buffer) => void) => ExportSummary {
  const state = readState(dataDir, true);
  return (write) => writeExport(state, write);
}

function writeExport(state: MemoryState, write: (chunk: Buffer) => void): ExportSummary {
  const items = state.snapshot().sort((a, b) => (a.session._id < b.session._id ? -1 : a.session._id > b.session._id ? 1 : 0));
  write(
    Buffer.from(
      JSON.stringify({ format: EXPORT_FORMAT, version: EXPORT_VERSION, exportedAt: new Date().toISOString(), sessions: items.length, turns: state.turnCount }) + '\n',
    ),
  );
  let parts: (string | Buffer)[] = [];
  let size = 0;
  const flush = (): void => {
    write(Buffer.concat(parts.map((p) => (typeof p === 'string' ? Buffer.from(p) : p))));
    parts = [];
    size = 0;
  };
  for (const item of items) {
    const s = `{"session":${item.json ?? JSON.stringify(item.session)}}\n`;
    parts.push(s);
    size += s.length;
    for (const t of item.turns) {
      parts.push('{"turn":', t.json, '}\n');
      size += t.jsonLength + 10;
    }
    if (size >= 1 << 20) flush();
  }
  if (parts.length > 0) flush();
  return { sessions: items.length, turns: state.turnCount };
}

/** Calls `each(text, lineNo)` for every line of a file, reading it in chunks. */
function forEachLine(file: string, each: (text: string, lineNo: number) => void): void {
  let fd: number;
  try {
    fd = openSync(file, 'r');
  } catch (e) {
    throw new ImportRejected(`cannot read ${file} (${(e as NodeJS.ErrnoException).code ?? 'error'}); nothing was imported`);
  }
  try {
    let buf = Buffer.allocUnsafe(1 << 22);
    let filled = 0;
    let lineNo = 0;
    for (;;) {
      if (filled === buf.length) {
        const bigger = Buffer.allocUnsafe(buf.length * 2);
        buf.copy(bigger, 0, 0, filled);
        buf = bigger;
      }
      const n = readSync(fd, buf, filled, buf.length - filled, null);
      filled += n;
      let pos = 0;
      for (;;) {
        const nl = buf.indexOf(0x0a, pos);
        if (nl === -1 || nl >= filled) break;
        each(buf.toString('utf8', pos, nl), ++lineNo);
        pos = nl + 1;
      }
      if (n === 0) {
        if (pos < filled) each(buf.toString('utf8', pos, filled), ++lineNo);
        return;
      }
      buf.copy(buf, 0, pos, filled);
      filled -= pos;
    }
  } finally {
    closeSync(fd);
  }
}

interface Parsed {
  readonly sessions: ChatSession[];
  readonly turns: Turn[];
}

/** Reads and checks a whole backup file; the first bad line is an ImportRejected naming it. */
export function parseBackup(file: string): Parsed {
  const sessions: ChatSession[] = [];
  const turns: Turn[] = [];
  const ids = new Set<string>();
  const turnIds = new Set<string>();
  let header: { sessions: number; turns: number } | undefined;
  const bad = (lineNo: number, why: string): never => {
    throw new ImportRejected(`${file} line ${lineNo}: ${why}; nothing was imported`);
  };
  let lastLine = 0;
  forEachLine(file, (text, lineNo) => {
    lastLine = lineNo;
    if (text.trim() === '') return;
    let v: unknown;
    try {
      v = JSON.parse(text);
    } catch {
      bad(lineNo, 'not valid JSON');
    }
    if (header === undefined) {
      if (!isPlainObject(v) || v['format'] !== EXPORT_FORMAT) return bad(lineNo, `the first line must be the ${EXPORT_FORMAT} header`);
      if (v['version'] !== EXPORT_VERSION) return bad(lineNo, `export format version ${String(v['version'])} is not supported (this release reads ${EXPORT_VERSION})`);
      if (typeof v['sessions'] !== 'number' || typeof v['turns'] !== 'number') return bad(lineNo, 'the header must give the sessions and turns counts');
      header = { sessions: v['sessions'], turns: v['turns'] };
      return;
    }
    if (!isPlainObject(v)) return bad(lineNo, 'a record must be an object');
    if ('session' in v) {
      const p = sessionProblem(v['session'], true);
      if (p !== undefined) return bad(lineNo, p);
      const s = chatSession(v['session'] as unknown as ChatSession); // its shape checked by sessionProblem just above
      if (ids.has(s._id)) return bad(lineNo, `session ${s._id} appears twice`);
      ids.add(s._id);
      sessions.push(s);
    } else if ('turn' in v) {
      const p = turnProblem(v['turn']);
      if (p !== undefined) return bad(lineNo, p);
      const t = turnRecord(v['turn'] as unknown as Turn); // its shape checked by turnProblem just above
      if (turnIds.has(t._id)) return bad(lineNo, `turn ${t._id} appears twice`);
      if (!ids.has(t.session)) return bad(lineNo, `turn ${t._id} comes before (or without) its session ${t.session}`);
      turnIds.add(t._id);
      turns.push(t);
    } else {
      return bad(lineNo, 'a record must be {"session":...} or {"turn":...}');
    }
  });
  if (header === undefined) throw new ImportRejected(`${file}: empty file, not a ${EXPORT_FORMAT} backup; nothing was imported`);
  if (header.sessions !== sessions.length || header.turns !== turns.length) {
    throw new ImportRejected(
      `${file} line ${lastLine}: the header promises ${header.sessions} sessions and ${header.turns} turns but the file holds ${sessions.length} and ${turns.length} (truncated?); nothing was imported`,
    );
  }
  return { sessions, turns };
}

export interface ImportSummary {
  readonly sessions: number;
  readonly turns: number;
  readonly unchanged: number;
}

/**
 * Imports a backup into a data directory no server is using. A record whose `_id` is already
 * stored is replaced by the file's version (same `_id`, same record), so importing the same
 * file twice changes nothing the second time.
 */
export function importData(dataDir: string, file: string): ImportSummary {
  const parsed = parseBackup(file);
  mkdirSync(dataDir, { recursive: true });
  const lock = acquireLock(dataDir);
  try {
    const state = readState(dataDir, false);
    const stored = new Map<string, { session: string; turn: StoredTurn }>();
    for (const item of state.snapshot()) for (const t of item.turns) stored.set(t._id, { session: item.session._id, turn: t });
    // a session's updatedAt is never before its newest turn (replay would raise it): compare like with like
    const newestTurn = new Map<string, string>();
    for (const t of parsed.turns) if (t.createdAt > (newestTurn.get(t.session) ?? '')) newestTurn.set(t.session, t.createdAt);
    let sessions = 0;
    let turns = 0;
    let unchanged = 0;
    for (const given of parsed.sessions) {
      const old = state.get(given._id);
      const last = [newestTurn.get(given._id), old?.lastTurn?.createdAt].reduce<string>((a, b) => (b !== undefined && b > a ? b : a), given.updatedAt);
      const s = last > given.updatedAt ? chatSession({ ...given, updatedAt: last }) : given;
      if (old !== undefined && old.json === JSON.stringify(s)) {
        unchanged++;
        continue;
      }
      state.putSession(s);
      sessions++;
    }
    for (const t of parsed.turns) {
      const json = Buffer.from(JSON.stringify(t));
      const have = stored.get(t._id);
      if (have !== undefined && have.session === t.session && have.turn.json.equals(json)) {
        unchanged++;
        continue;
      }
      if (have !== undefined) state.removeTurn(have.session, t._id); // the file's version wins
      state.addTurn(t.session, StoredTurn.of(t._id, t.createdAt, json));
      turns++;
    }
    if (sessions + turns > 0) writeJournal(join(dataDir, JOURNAL_FILE), state);
    return { sessions, turns, unchanged };
  } finally {
    lock.release();
  }
}

/** Replaces a journal with one holding exactly `state`: temp file, fsync, rename, directory fsync. */
function writeJournal(file: string, state: MemoryState): void {
  const tmp = file + IMPORT_SUFFIX;
  const fd = openSync(tmp, 'w', 0o600);
  try {
    const parts: Buffer[] = [headerLine()];
    let bytes = 0;
    const flush = (): void => {
      writeFullySync(fd, Buffer.concat(parts));
      parts.length = 0;
      bytes = 0;
    };
    for (const item of state.snapshot()) {
      for (const line of linesOf(item)) {
        parts.push(line);
        bytes += line.length;
      }
      if (bytes >= 1 << 20) flush();
    }
    flush();
    fsyncSync(fd);
  } catch (e) {
    closeSync(fd);
    unlinkSync(tmp);
    throw e;
  }
  closeSync(fd);
  renameSync(tmp, file);
  fsyncDir(dirname(file));
}
