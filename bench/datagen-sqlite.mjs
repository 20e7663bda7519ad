// Writes the data set of bench/datagen.mjs (same sessions, turns, ids and times) as a sqlite
// data directory, exactly as the sqlite engine would have written it: the file is created
// through the real engine (dist/testkit.cjs's openStore), so its schema is the engine's; then
// the rows are bulk-inserted with node:sqlite in large transactions with every column the
// engine keeps (json, json_bytes, version, name_folded, head_turn_id, last_turn_at/id,
// turn_count, turn_bytes; a turn's parent_id, depth and skip_id), the counters and each
// owner's usage row; last, it is opened through the engine
// again and checked (counts, bytes, usage, versions). Needs Node 22.13+ (node:sqlite).
// Usage: node_modules/node/bin/node bench/datagen-sqlite.mjs DIR SESSIONS [TURNS]
import { closeSync, copyFileSync, fdatasyncSync, mkdirSync, openSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { EXAMPLE_PROVIDERS, ROOT } from './common.mjs';
import { PROVIDER, sessionOf } from './datagen.mjs';

const kit = createRequire(import.meta.url)(join(ROOT, 'dist', 'testkit.cjs'));

/** Sessions per transaction of the bulk insert. */
const BATCH = 20_000;

/** The session as the engine stores it once its turns are in: record, JSON, version, and its turns' rows. */
function rowsOf(i, shape) {
  const g = sessionOf(i, shape);
  const last = g.turns.at(-1);
  const session = kit.chatSession({
    _id: g.id,
    name: g.name,
    provider: PROVIDER,
    selectedModel: 'gpt-4o',
    mode: 'Build',
    user: g.user,
    project: g.project,
    createdAt: g.createdAt,
    // a turn raises its session's updatedAt to its own createdAt (src/domain/records.ts raisedByTurn)
    updatedAt: last === undefined || last.createdAt <= g.createdAt ? g.createdAt : last.createdAt,
    archived: false,
    // the newest turn is the head, as replay of the journal makes it
    headTurnId: last?.id ?? null,
  });
  const json = JSON.stringify(session);
  const lastTurn = last === undefined ? undefined : { createdAt: last.createdAt, _id: last.id };
  const places = kit.placesOfChain(g.turns.map((t) => t.id));
  // the engine keeps the turn's JSON (src/domain/records.ts turnRecord) as UTF-8 bytes
  const turns = g.turns.map((t, k) => ({
    id: t.id,
    parentId: t.parentId,
    createdAt: t.createdAt,
    depth: places[k].depth,
    skipId: places[k].skipId,
    json: Buffer.from(JSON.stringify(kit.turnRecord({ _id: t.id, session: g.id, parentId: t.parentId, user: g.user, role: 'user', content: t.content, status: 'complete', createdAt: t.createdAt }))),
  }));
  return { session, json, version: kit.versionOfSession(json, lastTurn), lastTurn, turns };
}

/**
 * Creates DIR (with the example providers.json) holding DIR/chat-sessions.db, the sqlite
 * engine's default SQLITE_FILE. Returns {fileBytes, ms, sessions, turns, storeBytes} (storeBytes:
 * the JSON bytes of every session and turn, what /metrics reports as chat_session_api_store_bytes).
 */
export async function generateSqliteDir(dir, { sessions, turns = 0, turnBytes = 1024 }) {
  const started = performance.now();
  mkdirSync(dir, { recursive: true });
  copyFileSync(EXAMPLE_PROVIDERS, join(dir, 'providers.json'));
  const config = kit.loadConfig({ STORE: 'sqlite', DATA_DIR: dir });
  const file = config.sqliteFile;
  // created and closed once by the engine: its schema, application id and version, WAL mode
  await (await kit.openStore(config, new kit.Logger('silent'))).close();

  const { DatabaseSync } = process.getBuiltinModule('node:sqlite');
  const db = new DatabaseSync(file);
  // the search index's triggers call the engine's folding, as on the engine's own connections
  kit.registerSearchFunctions(db);
  // bulk-load settings of this connection only; the file keeps WAL mode (set again below)
  db.exec('PRAGMA journal_mode = OFF');
  db.exec('PRAGMA synchronous = OFF');
  db.exec('PRAGMA cache_size = -1048576');
  const putSession = db.prepare(
    `INSERT INTO sessions (id, user, project, archived, updated_at, name_folded, json, json_bytes, version, head_turn_id, last_turn_at, last_turn_id, turn_count, turn_bytes)
     VALUES (?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  const putTurn = db.prepare('INSERT INTO turns (id, session, parent_id, created_at, json, depth, skip_id) VALUES (?, ?, ?, ?, ?, ?, ?)');
  const shape = { sessions, turns, turnBytes };
  const users = new Map();
  const total = { sessions: 0, turns: 0, bytes: 0 };
  for (let from = 0; from < sessions; from += BATCH) {
    db.exec('BEGIN');
    for (let i = from; i < Math.min(sessions, from + BATCH); i++) {
      const r = rowsOf(i, shape);
      const s = r.session;
      const jsonBytes = Buffer.byteLength(r.json);
      let turnBytesOf = 0;
      for (const t of r.turns) {
        putTurn.run(t.id, s._id, t.parentId, t.createdAt, t.json, t.depth, t.skipId);
        turnBytesOf += t.json.length;
      }
      putSession.run(s._id, s.user, s.project, s.updatedAt, kit.foldForSearch(s.name), r.json, jsonBytes, r.version, s.headTurnId, r.lastTurn?.createdAt ?? null, r.lastTurn?._id ?? null, r.turns.length, turnBytesOf);
      const u = users.get(s.user) ?? { sessions: 0, turns: 0, bytes: 0 };
      u.sessions++;
      u.turns += r.turns.length;
      u.bytes += jsonBytes + turnBytesOf;
      users.set(s.user, u);
      total.sessions++;
      total.turns += r.turns.length;
      total.bytes += jsonBytes + turnBytesOf;
    }
    db.exec('COMMIT');
  }
  db.exec('BEGIN');
  const setCounter = db.prepare('UPDATE counters SET value = ? WHERE name = ?');
  for (const name of ['sessions', 'turns', 'bytes']) setCounter.run(total[name], name);
  const putUser = db.prepare('INSERT INTO users (user, sessions, turns, bytes) VALUES (?, ?, ?, ?)');
  for (const [user, u] of users) putUser.run(user, u.sessions, u.turns, u.bytes);
  db.exec('COMMIT');
  db.exec('PRAGMA journal_mode = WAL');
  db.close();
  // on disk before anything is measured on it, as a file the server wrote would be
  const fd = openSync(file, 'r+');
  fdatasyncSync(fd);
  closeSync(fd);
  const ms = performance.now() - started;

  await check(config, total, users, shape);
  return { fileBytes: statSync(file).size, ms, sessions: total.sessions, turns: total.turns, storeBytes: total.bytes };
}

/** Opens the file through the engine and checks what it reads against what was generated. */
async function check(config, total, users, shape) {
  const store = await kit.openStore(config, new kit.Logger('silent'));
  try {
    const stats = await store.stats();
    for (const k of ['sessions', 'turns', 'bytes']) {
      if (stats[k] !== total[k]) throw new Error(`the engine reads ${k} = ${stats[k]}, generated ${total[k]}`);
    }
    for (const user of ['user-0', `user-${users.size - 1}`]) {
      // the generated turns carry no usage: their tokens are 0, the counts what is checked
      const { sessions, turns, bytes, ...tokens } = await store.usage(user);
      const got = { sessions, turns, bytes };
      const want = users.get(user);
      if (Object.values(tokens).some((n) => n !== 0)) throw new Error(`usage of ${user}: the engine reads tokens ${JSON.stringify(tokens)}, generated none`);
      if (JSON.stringify(got) !== JSON.stringify(want)) throw new Error(`usage of ${user}: the engine reads ${JSON.stringify(got)}, generated ${JSON.stringify(want)}`);
    }
    for (const i of [0, Math.floor(shape.sessions / 2), shape.sessions - 1]) {
      const want = rowsOf(i, shape);
      const got = await store.getSession(want.session._id);
      if (got?.json !== want.json || got.version !== want.version) throw new Error(`session ${i}: the engine reads ${got?.json} ${got?.version}`);
      const page = await store.listTurns(want.session._id, undefined, 100);
      if (page.items.length !== want.turns.length || page.items.some((t, k) => Buffer.compare(t.json, want.turns[k].json) !== 0)) throw new Error(`turns of session ${i} differ`);
    }
  } finally {
    await store.close();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const [dir, sessions, turns] = process.argv.slice(2);
  if (dir === undefined || sessions === undefined) {
    process.stderr.write('usage: node_modules/node/bin/node bench/datagen-sqlite.mjs DIR SESSIONS [TURNS]\n');
    process.exit(2);
  }
  const r = await generateSqliteDir(dir, { sessions: Number(sessions), turns: Number(turns ?? 0) });
  process.stdout.write(`${JSON.stringify({ dir, ...r })}\n`);
}
