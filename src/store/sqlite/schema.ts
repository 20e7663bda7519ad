// The sqlite engine's file: its schema, versioned in the file itself (PRAGMA user_version),
// migrated forward in a transaction at start, and checked before anything is served. A file
// that is not a database, belongs to another application, or was written by a newer release
// stops the start with one line naming it and what to do; it is never reset.
import { existsSync } from 'node:fs';
import { StoreOpenFailed } from '../store.js';
import { STREAMING_MARK, STREAMING_MARK_FROM_END } from '../../domain/deltas.js';
import { placesSql } from '../tree-index.js';
import { indexedWords, plainAscii, textHolds, turnText, turnTextOfJson } from '../../domain/search.js';
import type { JsonValue } from '../../domain/records.js';
import { CONVERSATION_KEY_SQLITE, sqliteCode, type Database } from './binding.js';
import { SESSIONS_OUT_OF_RANGE, totalSql, TURNS_OUT_OF_RANGE } from './numbers.js';

/** Whether the turn JSON in column `json` says `status: "streaming"`. */
export function streamingSql(json: string): string {
  return `substr(${json}, -${STREAMING_MARK_FROM_END}, ${STREAMING_MARK.length}) = CAST('${STREAMING_MARK}' AS BLOB)`;
}

/** The turns whose JSON says `status: "streaming"` (the index turns_streaming holds them; a query uses this very term). */
export const STREAMING_WHERE = streamingSql('json');

/** 'csap' in ASCII: marks the file as this service's (PRAGMA application_id). */
const APPLICATION_ID = 0x63736170;
export const SCHEMA_VERSION = 11;

/** The SQL functions the search index's triggers call: the words of a session's JSON's name, of a turn's JSON. */
export function registerSearchFunctions(db: Database): void {
  db.function('csa_name_words', { deterministic: true }, (json) => ftsWords(String((JSON.parse(String(json)) as { name?: unknown }).name ?? '')));
  db.function('csa_turn_words', { deterministic: true }, (json) => ftsWords(turnTextOfJson(json instanceof Uint8Array ? json : String(json))));
  db.function('csa_plain_ascii', { deterministic: true }, (text) => (plainAscii(String(text)) ? 1 : 0));
}

/**
 * A turn's words for FTS5, in SQL, from its JSON in column `json`: a text content that is plain
 * ASCII read by SQLite's JSON functions (~5 µs a turn of 1 KiB: the turn is parsed in C and only
 * its text crosses into JavaScript, to be checked), any other turn by csa_turn_words (~8: the
 * whole turn copied into JavaScript and parsed there). Both give the same words: ASCII text
 * without NUL has one reading whichever parser reads it, and every other text goes the one way.
 */
export function turnWordsSql(json: string): string {
  const j = `CAST(${json} AS TEXT)`;
  // a NUL goes the JavaScript way: node:sqlite before Node.js 24.16 cuts a text it hands to a
  // function at its first NUL (the check would see only what comes before it), and SQLite
  // before 3.45 cut what ->> gives there
  return `CASE WHEN json_type(${j}, '$.content') = 'text' AND instr(${j}, '\\u0000') = 0 AND csa_plain_ascii(${j} ->> '$.content') THEN ${j} ->> '$.content' ELSE csa_turn_words(${json}) END`;
}

/**
 * What a write queues for the index with a turn of this content, made on the main thread from
 * the turn the write holds (the writer thread, which every commit waits for, only queues it; its
 * indexer only hands it to FTS5): `true` when the content is a string FTS5 can be given as it is
 * (ftsWords: most text; turns_unindexed.content_as_is), which the indexer reads from the stored
 * JSON with SQLite's JSON functions and checks no further (queueing the text would write it
 * twice); the words joined by spaces when it cannot; null for text of parts that it can (the
 * indexer reads them the JavaScript way, turnWordsSql), and for a string holding a NUL (see
 * turnWordsSql).
 */
export function queuedTurnWords(content: JsonValue | undefined): string | true | null {
  const text = turnText(content);
  if (!plainAscii(text)) return indexedWords(text);
  return typeof content === 'string' && !content.includes('\u0000') ? true : null;
}

/**
 * What the indexer gives FTS5 for the queued turn `u` (a row of turns_unindexed): its content as
 * it is when its write checked it can be (queuedTurnWords), else the words its write queued, else
 * (written with SEARCH=off) words made from its JSON.
 */
export const QUEUED_WORDS_SQL = `CASE WHEN u.content_as_is THEN (SELECT CAST(t.json AS TEXT) ->> '$.content' FROM turns t WHERE t.rowid = u.rowid) ELSE coalesce(u.words, (SELECT ${turnWordsSql('t.json')} FROM turns t WHERE t.rowid = u.rowid)) END`;

/**
 * What FTS5 is given for a text: the text as it is when its ascii tokenizer cuts it into the
 * domain's words (ASCII, no word longer than WORD_MAX: most text), else the domain's words joined
 * by spaces. Cutting and folding in C costs the writer less than doing it here.
 */
function ftsWords(text: string): string {
  return plainAscii(text) ? text : indexedWords(text);
}

/**
 * The SQL functions a search calls for names and turns still queued for the index: whether the
 * text holds every word of the query (its words joined by spaces), as the index will hold it.
 */
export function registerHoldsFunctions(db: Database): void {
  let last = '';
  let query: readonly string[] = [];
  const words = (q: unknown): readonly string[] => {
    const text = String(q);
    if (text !== last) {
      last = text;
      query = text.split(' ');
    }
    return query;
  };
  db.function('csa_name_holds', { deterministic: true }, (json, q) => (textHolds(String((JSON.parse(String(json)) as { name?: unknown }).name ?? ''), words(q)) ? 1 : 0));
  db.function('csa_turn_holds', { deterministic: true }, (json, q) => (textHolds(turnTextOfJson(json instanceof Uint8Array ? json : String(json)), words(q)) ? 1 : 0));
}

const SEARCH_TRIGGERS = `
  CREATE TRIGGER name_words_add AFTER INSERT ON sessions BEGIN
    INSERT INTO name_words (rowid, words) VALUES (NEW.rowid, csa_name_words(NEW.json));
  END;
  CREATE TRIGGER name_words_rename AFTER UPDATE OF json ON sessions WHEN json_extract(OLD.json, '$.name') IS NOT json_extract(NEW.json, '$.name') BEGIN
    DELETE FROM name_words WHERE rowid = OLD.rowid;
    INSERT INTO name_words (rowid, words) VALUES (NEW.rowid, csa_name_words(NEW.json));
  END;
  CREATE TRIGGER name_words_gone AFTER DELETE ON sessions BEGIN
    DELETE FROM name_words WHERE rowid = OLD.rowid;
  END;
  CREATE TRIGGER turn_words_add AFTER INSERT ON turns BEGIN
    INSERT INTO turn_words (rowid, words) VALUES (NEW.rowid, csa_turn_words(NEW.json));
  END;
  CREATE TRIGGER turn_words_gone AFTER DELETE ON turns BEGIN
    DELETE FROM turn_words WHERE rowid = OLD.rowid;
  END;
`;

/**
 * Schema 6's triggers: a new or renamed name is not indexed in the transaction that writes it
 * but queued (its rowid in names_unindexed; a new or edited turn is queued in turns_unindexed by
 * the writer, with its words unless the indexer makes them from its JSON); the writer thread indexes the queues between commits
 * (./worker.ts), and search reads what is queued by its text. A deleted one leaves the index
 * and the queue.
 */
const QUEUE_TRIGGERS = `
  CREATE TRIGGER name_words_add AFTER INSERT ON sessions BEGIN
    INSERT INTO names_unindexed (rowid) VALUES (NEW.rowid);
  END;
  CREATE TRIGGER name_words_rename AFTER UPDATE OF json ON sessions WHEN json_extract(OLD.json, '$.name') IS NOT json_extract(NEW.json, '$.name') BEGIN
    DELETE FROM name_words WHERE rowid = OLD.rowid;
    -- not OR IGNORE: the conflict policy of the statement that fires a trigger overrides the trigger's own (an upsert's is ABORT)
    INSERT INTO names_unindexed (rowid) SELECT NEW.rowid WHERE NOT EXISTS (SELECT 1 FROM names_unindexed WHERE rowid = NEW.rowid);
  END;
  CREATE TRIGGER name_words_gone AFTER DELETE ON sessions BEGIN
    DELETE FROM name_words WHERE rowid = OLD.rowid;
    DELETE FROM names_unindexed WHERE rowid = OLD.rowid;
  END;
  CREATE TRIGGER turn_words_gone AFTER DELETE ON turns BEGIN
    DELETE FROM turn_words WHERE rowid = OLD.rowid;
    DELETE FROM turns_unindexed WHERE rowid = OLD.rowid;
  END;
`;

/** Empties the search index and indexes every name and turn again (migration 5 and `reindex`). */
const REINDEX_V5_SQL = `
  INSERT INTO name_words (name_words) VALUES ('delete-all');
  INSERT INTO turn_words (turn_words) VALUES ('delete-all');
  INSERT INTO name_words (rowid, words) SELECT rowid, csa_name_words(json) FROM sessions;
  INSERT INTO turn_words (rowid, words) SELECT rowid, ${turnWordsSql('json')} FROM turns;
`;

/** The same from schema 6 on, where nothing is left queued after it (`reindex`). */
export const REINDEX_SQL = `
  ${REINDEX_V5_SQL}
  DELETE FROM names_unindexed;
  DELETE FROM turns_unindexed;
`;

/** Each step takes the schema from version i to i + 1. */
const MIGRATIONS: readonly string[] = [
  `
  CREATE TABLE sessions (
    id TEXT PRIMARY KEY NOT NULL,
    user TEXT NOT NULL,
    project TEXT NOT NULL,
    archived INTEGER NOT NULL,
    updated_at TEXT NOT NULL,
    name_folded TEXT NOT NULL,
    json TEXT NOT NULL,
    json_bytes INTEGER NOT NULL,
    version TEXT NOT NULL,
    last_turn_at TEXT,
    last_turn_id TEXT,
    turn_count INTEGER NOT NULL DEFAULT 0,
    turn_bytes INTEGER NOT NULL DEFAULT 0
  );
  CREATE INDEX sessions_by_user ON sessions (user, archived, updated_at, id);
  CREATE INDEX sessions_by_project ON sessions (project, archived, updated_at, id);
  CREATE TABLE turns (
    id TEXT PRIMARY KEY NOT NULL,
    session TEXT NOT NULL,
    created_at TEXT NOT NULL,
    json BLOB NOT NULL
  );
  CREATE INDEX turns_by_session ON turns (session, created_at, id);
  CREATE TABLE counters (name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL) WITHOUT ROWID;
  INSERT INTO counters (name, value) VALUES ('sessions', 0), ('turns', 0), ('bytes', 0);
  CREATE TABLE users (user TEXT PRIMARY KEY NOT NULL, sessions INTEGER NOT NULL, turns INTEGER NOT NULL, bytes INTEGER NOT NULL) WITHOUT ROWID;
  `,
  // 2: conversations as trees. Every turn of the first release gets the turn before it (by
  // created_at, id) as parent and status complete, every session its newest turn as head; each
  // turn its depth and jump pointer (../tree-index.ts); the stored JSON gets the new keys at
  // their places (the first release wrote a turn's _id and session first and its createdAt
  // last: 70 and 40 ASCII bytes), and the byte counts follow.
  `
  ALTER TABLE turns ADD COLUMN parent_id TEXT;
  ALTER TABLE turns ADD COLUMN depth INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE turns ADD COLUMN skip_id TEXT;
  ALTER TABLE sessions ADD COLUMN head_turn_id TEXT;
  CREATE INDEX turns_by_parent ON turns (parent_id);
  UPDATE turns SET parent_id = p.prev FROM (SELECT id, LAG(id) OVER (PARTITION BY session ORDER BY created_at, id) AS prev FROM turns) AS p WHERE turns.id = p.id;
  ${placesSql('turns', 'true')};
  UPDATE turns SET json = CAST(
    substr(json, 1, 70) || ',"parentId":' || coalesce('"' || parent_id || '"', 'null') || substr(json, 71, length(json) - 110) || ',"status":"complete"' || substr(json, length(json) - 39)
    AS BLOB);
  UPDATE sessions SET head_turn_id = last_turn_id,
    json = substr(json, 1, length(json) - 1) || ',"headTurnId":' || coalesce('"' || last_turn_id || '"', 'null') || '}';
  UPDATE sessions SET json_bytes = length(CAST(json AS BLOB)), turn_bytes = (SELECT coalesce(sum(length(t.json)), 0) FROM turns t WHERE t.session = sessions.id);
  UPDATE counters SET value = (SELECT coalesce(sum(json_bytes + turn_bytes), 0) FROM sessions) WHERE name = 'bytes';
  UPDATE users SET bytes = (SELECT coalesce(sum(s.json_bytes + s.turn_bytes), 0) FROM sessions s WHERE s.user = users.user);
  `,
  // 3: the streaming turns, found at start without reading every turn (../../domain/deltas.ts)
  `
  CREATE INDEX turns_streaming ON turns (session) WHERE ${STREAMING_WHERE};
  `,
  // 4: finding and keeping. Each tag of a session (folded) is a row beside it carrying the
  // session's list columns, so a tag's list is read from its own index in list order; triggers
  // keep those columns with the session's. A session's own expiry (expires_at; keep = 1 for an
  // explicit null, never) is a column, indexed for the purge, as are the sessions that
  // RETENTION_DAYS applies to. Sessions of earlier schemas have neither tags nor an expiry.
  `
  CREATE TABLE session_tags (
    session TEXT NOT NULL,
    tag TEXT NOT NULL,
    user TEXT NOT NULL,
    project TEXT NOT NULL,
    archived INTEGER NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (session, tag)
  ) WITHOUT ROWID;
  CREATE INDEX session_tags_by_user ON session_tags (tag, user, archived, updated_at, session);
  CREATE INDEX session_tags_by_project ON session_tags (tag, project, archived, updated_at, session);
  CREATE TRIGGER session_tags_follow AFTER UPDATE OF user, project, archived, updated_at ON sessions BEGIN
    UPDATE session_tags SET user = NEW.user, project = NEW.project, archived = NEW.archived, updated_at = NEW.updated_at WHERE session = NEW.id;
  END;
  CREATE TRIGGER session_tags_gone AFTER DELETE ON sessions BEGIN
    DELETE FROM session_tags WHERE session = OLD.id;
  END;
  ALTER TABLE sessions ADD COLUMN expires_at TEXT;
  ALTER TABLE sessions ADD COLUMN keep INTEGER NOT NULL DEFAULT 0;
  CREATE INDEX sessions_by_expiry ON sessions (expires_at) WHERE expires_at IS NOT NULL;
  CREATE INDEX sessions_by_activity ON sessions (updated_at) WHERE expires_at IS NULL AND keep = 0;
  `,
  // 5: search. Two FTS5 indexes without content of their own, keyed by the rowid of the session
  // or turn they index: the words of each name and turn text, folded and cut by the domain's
  // rule (src/domain/search.ts, called as SQL functions every writing connection registers),
  // joined by spaces, so FTS5's ascii tokenizer only splits them at those spaces. Triggers keep
  // them with every insert, rename and delete; a turn's edit is indexed by the writer (./worker.ts).
  // The existing names and turns are indexed here.
  `
  CREATE VIRTUAL TABLE name_words USING fts5(words, tokenize = 'ascii', content = '', contentless_delete = 1);
  CREATE VIRTUAL TABLE turn_words USING fts5(words, tokenize = 'ascii', content = '', contentless_delete = 1);
  ${SEARCH_TRIGGERS}
  ${REINDEX_V5_SQL}
  `,
  // 6: indexing off the commit path. The queues of what is written but not indexed yet, and the
  // triggers that fill them instead of indexing (QUEUE_TRIGGERS); a new turn is queued by the
  // writer with its words, made on the main thread (./worker.ts). The index as it is stays.
  `
  CREATE TABLE names_unindexed (rowid INTEGER PRIMARY KEY);
  CREATE TABLE turns_unindexed (rowid INTEGER PRIMARY KEY, words TEXT);
  DROP TRIGGER name_words_add;
  DROP TRIGGER name_words_rename;
  DROP TRIGGER name_words_gone;
  DROP TRIGGER turn_words_add;
  DROP TRIGGER turn_words_gone;
  ${QUEUE_TRIGGERS}
  `,
  // 7: the indexes keep which documents hold a word, not where in them (detail = 'none'): search
  // asks for words and prefixes, never phrases, and without positions a document costs FTS5
  // about a third less to index. Both are made again, empty: prepareSchema then indexes
  // everything (AFTER_NEW_INDEXES).
  `
  DROP TABLE name_words;
  DROP TABLE turn_words;
  CREATE VIRTUAL TABLE name_words USING fts5(words, tokenize = 'ascii', content = '', contentless_delete = 1, detail = 'none');
  CREATE VIRTUAL TABLE turn_words USING fts5(words, tokenize = 'ascii', content = '', contentless_delete = 1, detail = 'none');
  `,
  // 8: a queued turn says whether its write found its content a string FTS5 can be given as it
  // is (queuedTurnWords): the indexer then reads it without checking it again (~6 -> ~1 µs a
  // turn of 1 KiB). What is queued already is checked as before. And FTS5 merges 16 segments of
  // a level at a time as it writes, not 4, and merges a whole level at once (crisismerge) only
  // at 64, not 16: at 16 that whole-level merge took every merge over (1.4 s in one transaction
  // at 262,144 turns, 16 times that a level up); the writer merges further when idle (./worker.ts).
  `
  ALTER TABLE turns_unindexed ADD COLUMN content_as_is INTEGER NOT NULL DEFAULT 0;
  INSERT INTO name_words (name_words, rank) VALUES ('automerge', 16);
  INSERT INTO turn_words (turn_words, rank) VALUES ('automerge', 16);
  INSERT INTO name_words (name_words, rank) VALUES ('crisismerge', 64);
  INSERT INTO turn_words (turn_words, rank) VALUES ('crisismerge', 64);
  `,
  // 9: a streaming turn's deltas are rows of their own (turn_pieces, ../pieces.ts) until an edit
  // folds them into the turn, so a delta writes what it adds whatever the turn's length; a
  // trigger takes them with their turn. Usage counts the tokens of the turns' usage: each turn
  // keeps its own, each session and user their sums, the counters the store's; all made here
  // from the turns' JSON (a streaming turn of an earlier release holds its text in its JSON).
  // The turns' columns take the JSON's numbers as they are (step 11's index finds those that are
  // not counts); the sums saturate, so no number there stops the step.
  `
  CREATE TABLE turn_pieces (
    turn TEXT NOT NULL,
    seq INTEGER NOT NULL,
    pieces TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    tail TEXT NOT NULL,
    PRIMARY KEY (turn, seq)
  ) WITHOUT ROWID;
  CREATE TRIGGER turn_pieces_gone AFTER DELETE ON turns BEGIN
    DELETE FROM turn_pieces WHERE turn = OLD.id;
  END;
  ALTER TABLE turns ADD COLUMN input_tokens INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE turns ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE turns ADD COLUMN cached_tokens INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE sessions ADD COLUMN input_tokens INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE sessions ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE sessions ADD COLUMN cached_tokens INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE users ADD COLUMN input_tokens INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE users ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE users ADD COLUMN cached_tokens INTEGER NOT NULL DEFAULT 0;
  UPDATE turns SET
    input_tokens = coalesce(json_extract(CAST(json AS TEXT), '$.usage.inputTokens'), 0),
    output_tokens = coalesce(json_extract(CAST(json AS TEXT), '$.usage.outputTokens'), 0),
    cached_tokens = coalesce(json_extract(CAST(json AS TEXT), '$.usage.cachedTokens'), 0)
    WHERE instr(json, CAST('"usage":' AS BLOB)) > 0;
  UPDATE sessions SET (input_tokens, output_tokens, cached_tokens) = (
    SELECT ${totalSql('input_tokens')}, ${totalSql('output_tokens')}, ${totalSql('cached_tokens')} FROM turns WHERE turns.session = sessions.id);
  UPDATE users SET (input_tokens, output_tokens, cached_tokens) = (
    SELECT ${totalSql('input_tokens')}, ${totalSql('output_tokens')}, ${totalSql('cached_tokens')} FROM sessions WHERE sessions.user = users.user);
  INSERT INTO counters (name, value) SELECT 'input_tokens', ${totalSql('input_tokens')} FROM sessions;
  INSERT INTO counters (name, value) SELECT 'output_tokens', ${totalSql('output_tokens')} FROM sessions;
  INSERT INTO counters (name, value) SELECT 'cached_tokens', ${totalSql('cached_tokens')} FROM sessions;
  `,
  // 10: the OpenAI door's index: a turn's path key (the hash of its path from the root, kept for
  // the assistant turns recorded from this release on), and the sessions by their
  // metadata.conversationKey, each read by one index however many sessions a user has
  `
  ALTER TABLE turns ADD COLUMN path_key TEXT;
  CREATE INDEX turns_by_path_key ON turns (path_key) WHERE path_key IS NOT NULL;
  CREATE INDEX sessions_by_conversation ON sessions (user, ${CONVERSATION_KEY_SQLITE}) WHERE ${CONVERSATION_KEY_SQLITE} IS NOT NULL;
  `,
  // 11: numbers in range (./numbers.ts). Two indexes hold only the turns and sessions whose counts
  // are not counts (none, once the start has repaired them; a write only evaluates their
  // condition), so every start finds what an earlier release stored out of range without reading
  // the tables. Made here, they hold what is in the file already.
  `
  CREATE INDEX turns_out_of_range ON turns (session) WHERE ${TURNS_OUT_OF_RANGE};
  CREATE INDEX sessions_out_of_range ON sessions (user) WHERE ${SESSIONS_OUT_OF_RANGE};
  `,
];

/**
 * After step 7 (indexes made again, empty): with search on, every name and turn indexed in the
 * migration's transaction; with SEARCH=off, nothing indexed ("SEARCH=off keeps no index") but
 * everything queued, for the indexer of the first start with search on.
 */
const AFTER_NEW_INDEXES = 7;
const QUEUE_ALL_SQL = `
  DELETE FROM names_unindexed;
  DELETE FROM turns_unindexed;
  INSERT INTO names_unindexed (rowid) SELECT rowid FROM sessions;
  INSERT INTO turns_unindexed (rowid, words) SELECT rowid, NULL FROM turns;
`;

/** Checks made before a step runs, so data it cannot rewrite stops the start instead of being damaged. */
const BEFORE: Readonly<Record<number, string>> = {
  1: `SELECT count(*) FROM turns WHERE NOT (substr(json, 1, 8) = CAST('{"_id":"' AS BLOB) AND substr(json, 33, 13) = CAST('","session":"' AS BLOB) AND substr(json, 70, 1) = CAST('"' AS BLOB) AND substr(json, length(json) - 39, 14) = CAST(',"createdAt":"' AS BLOB))`,
};

/**
 * Tables and indexes a file must have to be read (export, beside a server). Step 11's indexes
 * only serve the start's repair, so an export reads a file of the release
 * before as it is (its counts read in range: ./numbers.ts).
 */
const REQUIRED_TO_READ = ['sessions', 'sessions_by_user', 'sessions_by_project', 'turns', 'turns_by_session', 'turns_by_parent', 'turns_streaming', 'counters', 'users', 'session_tags', 'session_tags_by_user', 'session_tags_by_project', 'session_tags_follow', 'session_tags_gone', 'sessions_by_expiry', 'sessions_by_activity', 'name_words', 'turn_words', 'names_unindexed', 'turns_unindexed', 'name_words_add', 'name_words_rename', 'name_words_gone', 'turn_words_gone', 'turn_pieces', 'turn_pieces_gone'];
/** Tables and indexes the current schema must have: a file missing one fails its check at start. */
const REQUIRED = [...REQUIRED_TO_READ, 'turns_out_of_range', 'sessions_out_of_range'];

function scalar(db: Database, sql: string): number {
  const row = db.prepare(sql).get();
  const v = row === undefined ? undefined : Object.values(row)[0];
  return typeof v === 'number' ? v : Number(v ?? 0);
}

/** What a failed check says: the file, what is wrong, what to do. */
export function refuse(file: string, what: string, todo: string): StoreOpenFailed {
  return new StoreOpenFailed(`${file}: ${what}; ${todo}. Nothing was changed.`);
}

/**
 * Brings the file up to this release's schema (creating it when new), inside one transaction,
 * and checks it. `db` is a writing connection; the file is WAL-journaled from then on.
 */
export function prepareSchema(db: Database, file: string, search = true): void {
  let version: number;
  let appId: number;
  let tables: number;
  try {
    appId = scalar(db, 'PRAGMA application_id');
    version = scalar(db, 'PRAGMA user_version');
    tables = scalar(db, "SELECT count(*) FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%'");
  } catch (e) {
    throw unreadable(file, e);
  }
  if (appId !== APPLICATION_ID && !(appId === 0 && tables === 0 && version === 0)) {
    throw refuse(file, 'is a SQLite database of another application', 'set SQLITE_FILE to a file of its own');
  }
  if (version > SCHEMA_VERSION) {
    throw refuse(file, `was written by a newer release (schema version ${version}; this release knows up to ${SCHEMA_VERSION})`, 'run that release, or `export` with it and `import` into a new file with this one');
  }
  try {
    db.exec('PRAGMA journal_mode = WAL');
    registerSearchFunctions(db);
    if (version < SCHEMA_VERSION) {
      db.exec('BEGIN IMMEDIATE');
      try {
        for (let v = version; v < SCHEMA_VERSION; v++) {
          const before = BEFORE[v];
          if (before !== undefined && scalar(db, before) !== 0) throw new Error(`turns this release cannot rewrite for schema version ${v + 1} (not as the first release wrote them)`);
          db.exec(MIGRATIONS[v] as string);
          if (v + 1 === AFTER_NEW_INDEXES) db.exec(search ? REINDEX_SQL : QUEUE_ALL_SQL);
        }
        db.exec(`PRAGMA application_id = ${APPLICATION_ID}`);
        db.exec(`PRAGMA user_version = ${SCHEMA_VERSION}`);
        db.exec('COMMIT');
      } catch (e) {
        db.exec('ROLLBACK');
        throw e;
      }
    }
  } catch (e) {
    throw unreadable(file, e);
  }
  checkSchema(db, file);
}

/**
 * The structural check made at every start: every table and index of the schema is there, and
 * every table's first rows can be read (its root page and the pages down to its first leaf: a
 * few pages each, where a damaged root would fail every query of the table). `toRead`: for a
 * read beside a server (export), which needs fewer (REQUIRED_TO_READ).
 */
export function checkSchema(db: Database, file: string, toRead = false): void {
  let names: Set<string>;
  try {
    const rows = db.prepare('SELECT type, name, sql FROM sqlite_schema').all();
    names = new Set(rows.map((r) => String(r['name'])));
    for (const r of rows) {
      // NOT INDEXED: the table's own tree (the planner would scan a smaller covering index)
      if (r['type'] === 'table' && !String(r['sql']).startsWith('CREATE VIRTUAL')) db.prepare(`SELECT 1 FROM "${String(r['name']).replaceAll('"', '""')}" NOT INDEXED LIMIT 1`).get();
    }
  } catch (e) {
    throw unreadable(file, e);
  }
  const missing = (toRead ? REQUIRED_TO_READ : REQUIRED).filter((n) => !names.has(n));
  if (missing.length > 0) {
    throw refuse(file, `fails its check at start (missing ${missing.join(', ')})`, 'restore it from a backup (`import` into a new SQLITE_FILE), or move it aside to start a new one');
  }
}

/** The error a file gives that SQLite cannot read as a database, with what to do. */
export function unreadable(file: string, e: unknown): StoreOpenFailed {
  const code = sqliteCode(e);
  if (code === 26) return refuse(file, 'is not a SQLite database', 'set SQLITE_FILE to the right file, or move this one aside to start a new store');
  if (code === 11) return refuse(file, 'is damaged (SQLite reports it malformed)', 'restore it from a backup (`import` into a new SQLITE_FILE)');
  const why = e instanceof Error ? e.message : String(e);
  return refuse(file, `cannot be opened (${why})`, existsSync(file) ? 'check its permissions and the disk' : 'check that its directory exists and is writable');
}
