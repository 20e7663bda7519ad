// Writes a data directory as an earlier release would have, straight in the journal format of
// src/store/journal/format.ts (`<crc32 hex> <JSON>\n` lines after a header line), streaming, so
// a million sessions take seconds instead of a million API calls: what `migrate` starts this
// release on. The layout (sessionOf) is shared with bench/datagen-sqlite.mjs, which writes the
// same data as a sqlite file for the scale scenarios.
// Layout: session i belongs to user `user-(i % users)` and project `project-(floor(i / 50))`,
// with users = sessions / 50, so every user and every project holds exactly 50 sessions
// (user-0's are spread over the whole file). Turn j belongs to session j % sessions and is
// written right after it, as the server writes them: the session is created with updatedAt =
// createdAt, and each turn is a millisecond later, under the turn before it, so replay raises
// the session to its newest turn and makes it the head (the journal holds no second put of the
// session for that). Journal format version 2 (turns with parentId and status, sessions with
// headTurnId).
// Usage: node bench/datagen.mjs DIR SESSIONS [TURNS]
import { closeSync, copyFileSync, fdatasyncSync, mkdirSync, openSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { crc32 } from 'node:zlib';
import { EXAMPLE_PROVIDERS } from './common.mjs';

export const PER_LIST = 50;
const BASE_MS = Date.UTC(2024, 0, 1);
export const PROVIDER = '665f1c2a9b1e8a0012ab34c1';
const FILLER = 'The quick brown fox jumps over the lazy dog. '.repeat(30);

function line(json) {
  return `${(crc32(json) >>> 0).toString(16).padStart(8, '0')} ${json}\n`;
}

/** 24 lowercase hex characters: 4-byte seconds, a 2-byte kind tag, a 5-byte sequence. */
function objectId(ms, tag, n) {
  return Math.floor(ms / 1000).toString(16).padStart(8, '0') + tag + n.toString(16).padStart(12, '0');
}

/** Users of a data set: each owns exactly PER_LIST sessions. */
export const usersOf = (sessions) => Math.max(1, Math.floor(sessions / PER_LIST));

/**
 * Session i of a data set of `sessions` sessions and `turns` turns: its fields as created
 * (updatedAt = createdAt) and its turns oldest first, each `turnBytes` ASCII characters and
 * each under the one before it (one branch; the newest is the head).
 */
export function sessionOf(i, { sessions, turns = 0, turnBytes = 1024 }) {
  const created = BASE_MS + i * 1000;
  const id = objectId(created, 'a000', i);
  const s = { id, name: `Session ${i}`, user: `user-${i % usersOf(sessions)}`, project: `project-${Math.floor(i / PER_LIST)}`, createdAt: new Date(created).toISOString(), turns: [] };
  for (let j = i, k = 0; j < turns; j += sessions, k++) {
    const prefix = `turn ${j}: `;
    s.turns.push({
      id: objectId(created, 'b000', j),
      parentId: k === 0 ? null : objectId(created, 'b000', j - sessions),
      content: prefix + FILLER.slice(0, turnBytes - prefix.length),
      createdAt: new Date(created + 1 + Math.min(k, 998)).toISOString(),
    });
  }
  return s;
}

/**
 * Creates DIR/sessions.journal (and the example providers.json) with `sessions` sessions and
 * `turns` turns of `turnBytes` ASCII characters each. Returns {bytes, ms}.
 */
export function generateDataDir(dir, { sessions, turns = 0, turnBytes = 1024 }) {
  const started = performance.now();
  mkdirSync(dir, { recursive: true });
  copyFileSync(EXAMPLE_PROVIDERS, join(dir, 'providers.json'));
  const fd = openSync(join(dir, 'sessions.journal'), 'w', 0o600);
  let parts = [line(JSON.stringify({ format: 'chat-session-api/journal', version: 2, createdAt: new Date().toISOString() }))];
  let pending = parts[0].length;
  let bytes = 0;
  const flush = () => {
    const text = parts.join('');
    writeSync(fd, text);
    bytes += Buffer.byteLength(text);
    parts = [];
    pending = 0;
  };
  for (let i = 0; i < sessions; i++) {
    const s = sessionOf(i, { sessions, turns, turnBytes });
    // field order as src/domain/records.ts writes them
    const put =
      `{"put":{"_id":"${s.id}","name":"${s.name}","provider":"${PROVIDER}","selectedModel":"gpt-4o","mode":"Build",` +
      `"user":"${s.user}","project":"${s.project}","createdAt":"${s.createdAt}","updatedAt":"${s.createdAt}","archived":false,"headTurnId":null}}`;
    let text = line(put);
    for (const t of s.turns) {
      const parent = t.parentId === null ? 'null' : `"${t.parentId}"`;
      text += line(`{"turn":{"_id":"${t.id}","session":"${s.id}","parentId":${parent},"user":"${s.user}","role":"user","content":"${t.content}","status":"complete","createdAt":"${t.createdAt}"}}`);
    }
    parts.push(text);
    pending += text.length;
    if (pending >= 8 << 20) flush();
  }
  flush();
  // on disk before anything is measured on it, as a journal the server wrote would be: else
  // the kernel writes the pages back while the server replays them, and replay pays for it
  fdatasyncSync(fd);
  closeSync(fd);
  return { bytes, ms: performance.now() - started };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const [dir, sessions, turns] = process.argv.slice(2);
  if (dir === undefined || sessions === undefined) {
    process.stderr.write('usage: node bench/datagen.mjs DIR SESSIONS [TURNS]\n');
    process.exit(2);
  }
  const r = generateDataDir(dir, { sessions: Number(sessions), turns: Number(turns ?? 0) });
  process.stdout.write(`${dir}: ${(r.bytes / 2 ** 20).toFixed(0)} MiB in ${(r.ms / 1000).toFixed(1)} s\n`);
}
