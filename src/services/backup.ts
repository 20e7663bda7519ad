// Backup and restore as NDJSON, through the store, so they work the same on every engine and
// between engines. `export` reads one consistent snapshot (beside a running server); `import`
// checks a whole file before it writes anything, then writes it in one all-or-nothing step.
//
// Format: a header line, then one record per line, each session followed by its turns, oldest
// first (so a turn's parent comes before it):
//   {"format":"chat-session-api/export","version":2,"exportedAt":"...","sessions":N,"turns":M}
//   {"session":{...}}
//   {"turn":{...}}
// Version 1 (the first release) had no parentId on turns and no headTurnId on sessions: its
// turns are given the turn before them as parent, its sessions their newest turn as head.
import { closeSync, openSync } from 'node:fs';
import { turnOfBackup } from '../domain/backup-turn.js';
import { forkedFromOf, sessionProblem } from '../domain/stored.js';
import { turnBefore } from '../domain/order.js';
import { isPlainObject } from '../domain/schema.js';
import { chatSession, turnRecord, type ChatSession, type JsonObject, type JsonValue, type Turn } from '../domain/records.js';
import { forEachLine } from '../files.js';
import type { StoreSnapshot } from '../store/store.js';

export const EXPORT_FORMAT = 'chat-session-api/export';
/** The version this release writes; it reads 1 too. */
export const EXPORT_VERSION = 2;
const READS = [1, 2];

/** A session's value with each half of a surrogate pair alone made U+FFFD, as a session's fields are now (D-sec-1). */
function wellFormed(v: JsonValue): JsonValue {
  if (typeof v === 'string') return v.replace(/\p{Cs}/gu, '\uFFFD');
  if (Array.isArray(v)) return v.map(wellFormed);
  if (v !== null && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [wellFormed(k) as string, wellFormed(x)]));
  return v;
}

/** A backup file that cannot be imported; nothing was written. */
export class ImportRejected extends Error {
  override readonly name = 'ImportRejected';
}

/** A backup that could not be written; the message is one line for the operator. */
export class ExportFailed extends Error {
  override readonly name = 'ExportFailed';
}

export interface ExportSummary {
  readonly sessions: number;
  readonly turns: number;
}

const SESSION_OPEN = '{"session":';
const TURN_OPEN = Buffer.from('{"turn":');
const RECORD_CLOSE = Buffer.from('}\n');

/** Writes every session and turn of one snapshot of `store` as NDJSON chunks of about a megabyte. */
export async function exportFrom(store: StoreSnapshot, write: (chunk: Buffer) => void | Promise<void>): Promise<ExportSummary> {
  const snapshot = await store.exportAll();
  const header = { format: EXPORT_FORMAT, version: EXPORT_VERSION, exportedAt: new Date().toISOString(), sessions: snapshot.sessions, turns: snapshot.turns };
  await write(Buffer.from(JSON.stringify(header) + '\n'));
  let parts: Buffer[] = [];
  let size = 0;
  for await (const item of snapshot.items) {
    const s = Buffer.from(`${SESSION_OPEN}${item.session.json}}\n`);
    parts.push(s);
    size += s.length;
    for (const t of item.turns) {
      parts.push(TURN_OPEN, t.json, RECORD_CLOSE);
      size += t.json.length + 10;
    }
    if (size >= 1 << 20) {
      await write(Buffer.concat(parts, size));
      parts = [];
      size = 0;
    }
  }
  if (parts.length > 0) await write(Buffer.concat(parts, size));
  return { sessions: snapshot.sessions, turns: snapshot.turns };
}

export interface Parsed {
  readonly sessions: ChatSession[];
  readonly turns: Turn[];
}

/** Reads and checks a whole backup file; the first bad line is an ImportRejected naming it. */
export function parseBackup(file: string): Parsed {
  const sessions: ChatSession[] = [];
  const turns: Turn[] = [];
  const ids = new Set<string>();
  /** Each turn read so far: its session and its sort key, for its children's check. */
  const turnsRead = new Map<string, Turn>();
  /** The newest turn of each session read so far (a turn of a first-release backup follows it). */
  const newest = new Map<string, Turn>();
  let header: { version: number; sessions: number; turns: number } | undefined;
  const bad = (lineNo: number, why: string): never => {
    throw new ImportRejected(`${file} line ${lineNo}: ${why}; nothing was imported`);
  };
  let lastLine = 0;
  /** The line of each session, for a message about its head. */
  const heads: number[] = [];
  let fd: number;
  try {
    fd = openSync(file, 'r');
  } catch (e) {
    throw new ImportRejected(`cannot read ${file} (${(e as NodeJS.ErrnoException).code ?? 'error'}); nothing was imported`);
  }
  try {
    forEachLine(fd, (text, lineNo) => each(text, lineNo));
  } finally {
    closeSync(fd);
  }
  function each(text: string, lineNo: number): void {
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
      const version = v['version'];
      if (typeof version !== 'number' || !READS.includes(version)) return bad(lineNo, `export format version ${String(version)} is not supported (this release reads ${READS.join(' and ')})`);
      if (typeof v['sessions'] !== 'number' || typeof v['turns'] !== 'number') return bad(lineNo, 'the header must give the sessions and turns counts');
      header = { version, sessions: v['sessions'], turns: v['turns'] };
      return;
    }
    const legacy = header.version === 1;
    if (!isPlainObject(v)) return bad(lineNo, 'a record must be an object');
    if ('session' in v) {
      const raw = v['session'];
      const p = sessionProblem(raw, true);
      if (p !== undefined) return bad(lineNo, p);
      // an earlier release kept half a surrogate pair alone in a session's fields (a door's name cut from a message): on
      // PostgreSQL the conversation key's index reads the session's JSON back, which then failed the whole import
      const r = wellFormed(raw) as unknown as ChatSession & Record<string, unknown>; // its shape checked by sessionProblem just above
      if (!legacy && r['headTurnId'] === undefined) return bad(lineNo, 'session headTurnId must be a turn _id or null');
      const forkedFrom = forkedFromOf(raw as JsonObject);
      const s = chatSession({ ...r, headTurnId: legacy ? null : r.headTurnId, ...(forkedFrom !== undefined ? { forkedFrom } : {}) });
      if (ids.has(s._id)) return bad(lineNo, `session ${s._id} appears twice`);
      ids.add(s._id);
      sessions.push(s);
      heads.push(lineNo);
    } else if ('turn' in v) {
      const raw = v['turn'];
      if (!legacy && isPlainObject(raw) && raw['parentId'] === undefined) return bad(lineNo, 'turn parentId must be a turn _id or null');
      const read = turnOfBackup(raw);
      if (typeof read === 'string') return bad(lineNo, read);
      if (turnsRead.has(read._id)) return bad(lineNo, `turn ${read._id} appears twice`);
      if (!ids.has(read.session)) return bad(lineNo, `turn ${read._id} comes before (or without) its session ${read.session}`);
      const before = newest.get(read.session);
      let t = read;
      if (legacy) {
        // the first release's turns come in their session's order: each follows the one before it
        if (before !== undefined && !turnBefore(before, t)) return bad(lineNo, `turn ${t._id} comes before the turn listed above it (${before._id}): a backup lists a session's turns oldest first`);
        t = turnRecord({ ...t, parentId: before?._id ?? null });
      } else if (t.parentId !== null) {
        const parent = turnsRead.get(t.parentId);
        if (parent === undefined || parent.session !== t.session) return bad(lineNo, `turn ${t._id} has parentId ${t.parentId}, which is not a turn of its session listed above it`);
        if (!turnBefore(parent, t)) return bad(lineNo, `turn ${t._id} is older than its parent ${t.parentId}`);
      }
      if (before === undefined || turnBefore(before, t)) newest.set(t.session, t);
      turnsRead.set(t._id, t);
      turns.push(t);
    } else {
      return bad(lineNo, 'a record must be {"session":...} or {"turn":...}');
    }
  }
  if (header === undefined) throw new ImportRejected(`${file}: empty file, not a ${EXPORT_FORMAT} backup; nothing was imported`);
  if (header.sessions !== sessions.length || header.turns !== turns.length) {
    throw new ImportRejected(
      `${file} line ${lastLine}: the header promises ${header.sessions} sessions and ${header.turns} turns but the file holds ${sessions.length} and ${turns.length} (truncated?); nothing was imported`,
    );
  }
  for (let i = 0; i < sessions.length; i++) {
    const s = sessions[i] as ChatSession;
    if (header.version === 1) sessions[i] = chatSession({ ...s, headTurnId: newest.get(s._id)?._id ?? null });
    else if (s.headTurnId !== null && turnsRead.get(s.headTurnId)?.session !== s._id) {
      throw new ImportRejected(`${file} line ${heads[i] as number}: session ${s._id} has headTurnId ${s.headTurnId}, which is not one of its turns in the file; nothing was imported`);
    }
  }
  return { sessions, turns };
}

