// Backup and restore as NDJSON, through the store, so they work the same on every engine and
// between engines. `export` reads one consistent snapshot (beside a running server); `import`
// checks a whole file before it writes anything, then writes it in one all-or-nothing step.
//
// Format: a header line, then one record per line, each session followed by its turns:
//   {"format":"chat-session-api/export","version":1,"exportedAt":"...","sessions":N,"turns":M}
//   {"session":{...}}
//   {"turn":{...}}
import { closeSync, openSync } from 'node:fs';
import { sessionProblem, turnProblem } from './domain/inputs.js';
import { isPlainObject } from './domain/schema.js';
import { chatSession, turnRecord, type ChatSession, type Turn } from './domain/records.js';
import { forEachLine } from './files.js';
import type { Store } from './store/store.js';

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

export interface ExportSummary {
  readonly sessions: number;
  readonly turns: number;
}

const SESSION_OPEN = '{"session":';
const TURN_OPEN = Buffer.from('{"turn":');
const RECORD_CLOSE = Buffer.from('}\n');

/** Writes every session and turn of one snapshot of `store` as NDJSON chunks of about a megabyte. */
export async function exportFrom(store: Store, write: (chunk: Buffer) => void | Promise<void>): Promise<ExportSummary> {
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
  const turnIds = new Set<string>();
  let header: { sessions: number; turns: number } | undefined;
  const bad = (lineNo: number, why: string): never => {
    throw new ImportRejected(`${file} line ${lineNo}: ${why}; nothing was imported`);
  };
  let lastLine = 0;
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
  }
  if (header === undefined) throw new ImportRejected(`${file}: empty file, not a ${EXPORT_FORMAT} backup; nothing was imported`);
  if (header.sessions !== sessions.length || header.turns !== turns.length) {
    throw new ImportRejected(
      `${file} line ${lastLine}: the header promises ${header.sessions} sessions and ${header.turns} turns but the file holds ${sessions.length} and ${turns.length} (truncated?); nothing was imported`,
    );
  }
  return { sessions, turns };
}

