// The PostgreSQL engine's tables, in a schema of their own (DATABASE_SCHEMA), so the service
// can share a database with other applications. They are created and migrated at start in
// one transaction under an advisory lock, so instances that start together do not race; a
// database whose schema is newer than this release knows stops the start.
import type { Pool, Queryable } from '../../pg/pool.js';
import { StoreOpenFailed } from '../store.js';
import { placesSql } from '../tree-index.js';
import { isStreamingSql } from './rows.js';
import { indexedTurnWords, indexedWords } from '../../domain/search.js';
import { CONVERSATION_KEY_PG, textArray, wordsSql } from './values.js';
import { jsonCountSql, repairNumbers, SESSIONS_OUT_OF_RANGE, TURNS_OUT_OF_RANGE } from './numbers.js';
import type { NumbersRepaired } from '../totals.js';

/**
 * A turn's usage read from its JSON by PostgreSQL, which refuses the whole text for one escape it
 * cannot hold (a NUL, half of a surrogate pair alone: a turn's content may have either): those
 * escapes are read as U+FFFD first, only for this read (the turn's JSON stays as it is).
 */
const USAGE_OF_TURN = "(regexp_replace(json, '\\\\u(0000|[dD][89a-fA-F][0-9a-fA-F]{2})', '\\\\ufffd', 'g')::json -> 'usage')";

export const SCHEMA_VERSION = 10;
/** The oldest schema an export of this release reads as it is: steps 9 and 10 add only what the start's repair and the serving instances' liveness use (indexes, a table, a column), which an export does not. */
const READS_FROM = 8;

/** Each step takes the schema from version i to i + 1; `S` stands for the quoted schema name. */
const MIGRATIONS: readonly ((S: string) => string)[] = [
  (S) => `
  CREATE TABLE ${S}.sessions (
    id text COLLATE "C" PRIMARY KEY,
    owner text NOT NULL,
    project text NOT NULL,
    archived boolean NOT NULL,
    updated_at text COLLATE "C" NOT NULL,
    name_folded text NOT NULL,
    json text NOT NULL,
    json_bytes integer NOT NULL,
    version text NOT NULL,
    last_turn_at text COLLATE "C",
    last_turn_id text COLLATE "C",
    turn_count integer NOT NULL DEFAULT 0,
    turn_bytes bigint NOT NULL DEFAULT 0
  );
  CREATE INDEX sessions_by_owner ON ${S}.sessions (owner, archived, updated_at, id);
  CREATE INDEX sessions_by_project ON ${S}.sessions (project, archived, updated_at, id);
  CREATE TABLE ${S}.turns (
    id text COLLATE "C" PRIMARY KEY,
    session text COLLATE "C" NOT NULL,
    created_at text COLLATE "C" NOT NULL,
    json text NOT NULL
  );
  CREATE INDEX turns_by_session ON ${S}.turns (session, created_at, id);
  CREATE TABLE ${S}.usage (
    owner text PRIMARY KEY,
    sessions bigint NOT NULL,
    turns bigint NOT NULL,
    bytes bigint NOT NULL
  );
  `,
  // 2: conversations as trees. Every turn of the first release gets the turn before it (by
  // created_at, id) as parent and status complete, every session its newest turn as head, every
  // turn its depth and jump pointer (../tree-index.ts); the
  // stored JSON gets the new keys at their places (the first release wrote a turn's _id and
  // session first and its createdAt last: 70 and 40 ASCII characters), and the byte counts follow.
  (S) => `
  ALTER TABLE ${S}.turns ADD COLUMN parent_id text COLLATE "C";
  ALTER TABLE ${S}.turns ADD COLUMN depth integer NOT NULL DEFAULT 0;
  ALTER TABLE ${S}.turns ADD COLUMN skip_id text COLLATE "C";
  ALTER TABLE ${S}.sessions ADD COLUMN head_turn_id text COLLATE "C";
  CREATE INDEX turns_by_parent ON ${S}.turns (parent_id);
  UPDATE ${S}.turns t SET parent_id = p.prev
    FROM (SELECT id, lag(id) OVER (PARTITION BY session ORDER BY created_at, id) AS prev FROM ${S}.turns) p
    WHERE t.id = p.id AND p.prev IS NOT NULL;
  ${placesSql(`${S}.turns`, 'true', 'NULL::text COLLATE "C"')};
  UPDATE ${S}.turns SET json =
    left(json, 70) || ',"parentId":' || coalesce('"' || parent_id || '"', 'null') || substr(json, 71, length(json) - 110) || ',"status":"complete"' || right(json, 40);
  UPDATE ${S}.sessions SET head_turn_id = last_turn_id,
    json = left(json, -1) || ',"headTurnId":' || coalesce('"' || last_turn_id || '"', 'null') || '}';
  UPDATE ${S}.sessions s SET json_bytes = octet_length(s.json),
    turn_bytes = coalesce((SELECT sum(octet_length(t.json)) FROM ${S}.turns t WHERE t.session = s.id), 0);
  DELETE FROM ${S}.usage;
  INSERT INTO ${S}.usage (owner, sessions, turns, bytes) SELECT owner, count(*), sum(turn_count), sum(json_bytes + turn_bytes) FROM ${S}.sessions GROUP BY owner;
  `,
  // 3: the live feed (./events.ts): events written with the changes that make them; event_head's
  // one row hands out their ids, and its row lock, held to COMMIT, puts them in commit order
  (S) => `
  CREATE TABLE ${S}.events (
    id bigint PRIMARY KEY,
    type text NOT NULL,
    about text NOT NULL,
    data text NOT NULL
  );
  CREATE TABLE ${S}.event_head (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    last bigint NOT NULL
  );
  -- ids start at the creation time in ms x 1000, as a journal's or sqlite's run does: a store
  -- moved here from another (or from another schema) gives ids above the ones its clients have
  INSERT INTO ${S}.event_head (last) VALUES (floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint * 1000);
  CREATE TABLE ${S}.used_tickets (
    id text PRIMARY KEY,
    expires_at bigint NOT NULL
  );
  `,
  // 4: streaming turns: when each took its last write (creation, delta, edit), so an instance
  // tells a turn a live client streams from one left by a crash (./engine.ts, leftStreaming)
  (S) => `
  ALTER TABLE ${S}.turns ADD COLUMN streamed_at timestamptz;
  UPDATE ${S}.turns SET streamed_at = now() WHERE ${isStreamingSql('json')};
  CREATE INDEX turns_streaming ON ${S}.turns (streamed_at) WHERE streamed_at IS NOT NULL;
  `,
  // 5: finding and keeping. A session's tags (folded) are a column the service writes; a
  // trigger keeps a row per tag beside it carrying the session's list columns, so a tag's list
  // is read from its own index in list order. A session's own expiry (expires_at; keep for an
  // explicit null, never) is a column, indexed for the purge, as are the sessions that
  // RETENTION_DAYS applies to. Sessions of earlier schemas have neither tags nor an expiry.
  (S) => `
  ALTER TABLE ${S}.sessions ADD COLUMN tags text[] NOT NULL DEFAULT '{}';
  ALTER TABLE ${S}.sessions ADD COLUMN expires_at text COLLATE "C";
  ALTER TABLE ${S}.sessions ADD COLUMN keep boolean NOT NULL DEFAULT false;
  CREATE INDEX sessions_by_expiry ON ${S}.sessions (expires_at) WHERE expires_at IS NOT NULL;
  CREATE INDEX sessions_by_activity ON ${S}.sessions (updated_at) WHERE expires_at IS NULL AND NOT keep;
  CREATE TABLE ${S}.session_tags (
    session text COLLATE "C" NOT NULL REFERENCES ${S}.sessions (id) ON DELETE CASCADE,
    tag text NOT NULL,
    owner text NOT NULL,
    project text NOT NULL,
    archived boolean NOT NULL,
    updated_at text COLLATE "C" NOT NULL,
    PRIMARY KEY (session, tag)
  );
  CREATE INDEX session_tags_by_owner ON ${S}.session_tags (tag, owner, archived, updated_at, session);
  CREATE INDEX session_tags_by_project ON ${S}.session_tags (tag, project, archived, updated_at, session);
  CREATE FUNCTION ${S}.session_tags_follow() RETURNS trigger LANGUAGE plpgsql AS $f$
  BEGIN
    IF TG_OP = 'UPDATE' AND NEW.tags = OLD.tags THEN
      IF cardinality(NEW.tags) > 0 AND (NEW.owner, NEW.project, NEW.archived, NEW.updated_at) IS DISTINCT FROM (OLD.owner, OLD.project, OLD.archived, OLD.updated_at) THEN
        UPDATE ${S}.session_tags SET owner = NEW.owner, project = NEW.project, archived = NEW.archived, updated_at = NEW.updated_at WHERE session = NEW.id;
      END IF;
      RETURN NULL;
    END IF;
    IF TG_OP = 'UPDATE' THEN
      DELETE FROM ${S}.session_tags WHERE session = NEW.id;
    END IF;
    INSERT INTO ${S}.session_tags (session, tag, owner, project, archived, updated_at)
      SELECT NEW.id, t, NEW.owner, NEW.project, NEW.archived, NEW.updated_at FROM unnest(NEW.tags) AS t;
    RETURN NULL;
  END
  $f$;
  CREATE TRIGGER session_tags_follow AFTER INSERT OR UPDATE ON ${S}.sessions FOR EACH ROW EXECUTE FUNCTION ${S}.session_tags_follow();
  `,
  // 6: search. Each name and turn keeps its words as a tsvector made from the words the domain
  // folds and cuts (src/domain/search.ts, the same on every engine), not by a text search
  // configuration's parser; GIN indexes find them. The existing rows are indexed by AFTER[5].
  (S) => `
  ALTER TABLE ${S}.sessions ADD COLUMN name_words tsvector NOT NULL DEFAULT ''::tsvector;
  ALTER TABLE ${S}.turns ADD COLUMN words tsvector NOT NULL DEFAULT ''::tsvector;
  `,
  // 7: a streaming turn's deltas are rows of their own (turn_pieces, ../pieces.ts) until an edit
  // folds them into the turn, so a delta writes what it adds whatever the turn's length (the
  // turn's row, its TOASTed JSON and its indexes are not touched); each row's time tells a
  // turn that is still streamed (leftStreaming). The group that deletes turns deletes their
  // rows: a foreign key would lock the turn's row for every delta. Usage counts the tokens of
  // the turns' usage: each turn keeps its own, each session and owner their sums (numeric:
  // sums of a client's numbers cannot overflow), made here from the turns' JSON; a number there
  // that is not a count is -1 in its column, which step 9's index finds for the start's repair
  // (a cast of 1.5 or 1e300 to bigint stopped the step).
  (S) => `
  CREATE TABLE ${S}.turn_pieces (
    turn text COLLATE "C" NOT NULL,
    seq integer NOT NULL,
    pieces text NOT NULL,
    bytes bigint NOT NULL,
    tail text NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (turn, seq)
  );
  ALTER TABLE ${S}.turns ADD COLUMN input_tokens bigint NOT NULL DEFAULT 0, ADD COLUMN output_tokens bigint NOT NULL DEFAULT 0, ADD COLUMN cached_tokens bigint NOT NULL DEFAULT 0;
  ALTER TABLE ${S}.sessions ADD COLUMN input_tokens numeric NOT NULL DEFAULT 0, ADD COLUMN output_tokens numeric NOT NULL DEFAULT 0, ADD COLUMN cached_tokens numeric NOT NULL DEFAULT 0;
  ALTER TABLE ${S}.usage ADD COLUMN input_tokens numeric NOT NULL DEFAULT 0, ADD COLUMN output_tokens numeric NOT NULL DEFAULT 0, ADD COLUMN cached_tokens numeric NOT NULL DEFAULT 0;
  UPDATE ${S}.turns SET
    input_tokens = ${jsonCountSql(USAGE_OF_TURN, 'inputTokens')},
    output_tokens = ${jsonCountSql(USAGE_OF_TURN, 'outputTokens')},
    cached_tokens = ${jsonCountSql(USAGE_OF_TURN, 'cachedTokens')}
    WHERE strpos(json, '"usage":') > 0;
  UPDATE ${S}.sessions s SET input_tokens = t.i, output_tokens = t.o, cached_tokens = t.c
    FROM (SELECT session, sum(input_tokens) AS i, sum(output_tokens) AS o, sum(cached_tokens) AS c FROM ${S}.turns GROUP BY session) t
    WHERE s.id = t.session;
  UPDATE ${S}.usage u SET input_tokens = x.i, output_tokens = x.o, cached_tokens = x.c
    FROM (SELECT owner, sum(input_tokens) AS i, sum(output_tokens) AS o, sum(cached_tokens) AS c FROM ${S}.sessions GROUP BY owner) x
    WHERE u.owner = x.owner;
  `,
  // 8: the OpenAI door's index: a turn's path key (the hash of its path from the root, kept for
  // the assistant turns recorded from this release on), and the sessions by their
  // metadata.conversationKey, each read by one index however many sessions a user has
  (S) => `
  ALTER TABLE ${S}.turns ADD COLUMN path_key text COLLATE "C";
  CREATE INDEX turns_by_path_key ON ${S}.turns (path_key) WHERE path_key IS NOT NULL;
  CREATE INDEX sessions_by_conversation ON ${S}.sessions (owner, ${CONVERSATION_KEY_PG}) WHERE ${CONVERSATION_KEY_PG} IS NOT NULL;
  `,
  // 9: numbers in range (./numbers.ts). Two indexes hold only the turns and sessions whose counts
  // are not counts (none, once the start has repaired them; a write only evaluates their
  // condition), so every start finds what an earlier release stored out of range without reading
  // the tables. Made here, they hold what is in the database already.
  (S) => `
  CREATE INDEX turns_out_of_range ON ${S}.turns (session) WHERE ${TURNS_OUT_OF_RANGE};
  CREATE INDEX sessions_out_of_range ON ${S}.sessions (owner) WHERE ${SESSIONS_OUT_OF_RANGE};
  `,
  // 10: liveness (../postgres/liveness.ts): each instance proves it is alive by its row here, and
  // a reply turn names the instance that generates it, so another instance interrupts it once
  // that one is gone, however quiet the reply (a turn no instance generates keeps STREAMING_IDLE)
  (S) => `
  CREATE TABLE ${S}.instances (
    id text COLLATE "C" PRIMARY KEY,
    seen_at timestamptz NOT NULL
  );
  ALTER TABLE ${S}.turns ADD COLUMN generator text COLLATE "C";
  `,
];

/** Indexes every name and turn again, a thousand rows per statement, in the caller's transaction (migration 6 and `reindex`). */
export async function reindexRows(q: Queryable, S: string): Promise<number> {
  let n = 0;
  for (const [table, column, words] of [
    ['sessions', 'name_words', (json: string) => indexedWords(String((JSON.parse(json) as { name?: unknown }).name ?? ''))],
    ['turns', 'words', indexedTurnWords],
  ] as const) {
    let after = '';
    for (;;) {
      const rows = (await q.query(`SELECT id, json FROM ${S}.${table} WHERE id > $1 ORDER BY id LIMIT 1000`, [after])).rows;
      if (rows.length === 0) break;
      const ids = rows.map((r) => r[0] as string);
      await q.query(`UPDATE ${S}.${table} x SET ${column} = ${wordsSql('w.words')} FROM unnest($1::text[], $2::text[]) AS w(id, words) WHERE x.id = w.id`, [
        textArray(ids),
        textArray(rows.map((r) => words(r[1] as string))),
      ]);
      n += rows.length;
      after = ids[ids.length - 1] as string;
    }
  }
  return n;
}

/** Steps run after a migration step, in its transaction: 5 indexes the existing rows, then builds the GIN indexes (faster than keeping them row by row). */
const AFTER: Readonly<Record<number, (q: Queryable, S: string) => Promise<void>>> = {
  5: async (q, S) => {
    await reindexRows(q, S);
    await q.exec(`CREATE INDEX sessions_by_word ON ${S}.sessions USING gin (name_words); CREATE INDEX turns_by_word ON ${S}.turns USING gin (words);`);
  },
};

/** Checks made before a step runs (their count must be 0), so data it cannot rewrite stops the start instead of being damaged. */
const BEFORE: Readonly<Record<number, (S: string) => string>> = {
  1: (S) => `SELECT count(*) FROM ${S}.turns WHERE NOT (left(json, 8) = '{"_id":"' AND substr(json, 33, 13) = '","session":"' AND substr(json, 70, 1) = '"' AND substr(json, length(json) - 39, 14) = ',"createdAt":"')`,
};

const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

/** The schema name quoted for SQL; a ConfigError-worthy message when it is not a plain lowercase name. */
export function quotedSchema(name: string): string {
  if (!SCHEMA_NAME.test(name)) throw new StoreOpenFailed(`DATABASE_SCHEMA must be a lowercase name of letters, digits and _ (got "${name}")`);
  return `"${name}"`;
}

/** What a start did beyond the schema's steps, for its log. */
export interface Prepared {
  /** How many names and turns it indexed again: after a start with SEARCH=off, the first start with search on indexes everything. */
  readonly reindexed?: number | undefined;
  /** The numbers an earlier release stored out of range that it put back in range (./numbers.ts). */
  readonly repaired?: NumbersRepaired | undefined;
}

/**
 * Creates or migrates the schema in one transaction, holding an advisory lock named after it,
 * and in the same transaction repairs numbers out of range. With `migrate` false (export, beside
 * servers that may be of another release) it only checks that the schema is this release's.
 */
export async function prepareSchema(pool: Pool, schema: string, where: string, migrate = true, search = true): Promise<Prepared> {
  const S = quotedSchema(schema);
  if (!migrate) {
    const exists = (await pool.query('SELECT to_regclass($1) IS NOT NULL', [`${S}.meta`])).rows[0]?.[0] === 't';
    const row = exists ? (await pool.query(`SELECT value FROM ${S}.meta WHERE key = 'schema_version'`)).rows[0] : undefined;
    const version = row === undefined ? 0 : Number(row[0]);
    if (version >= READS_FROM && version <= SCHEMA_VERSION) return {};
    throw new StoreOpenFailed(
      version === 0
        ? `${where}: schema ${schema} holds no chat-session-api data (is DATABASE_SCHEMA right?)`
        : `${where}: schema ${schema} is at version ${version}, this release reads ${SCHEMA_VERSION}; export with the release that wrote it (or start a server of this release once to migrate it)`,
    );
  }
  return pool.transaction(async (tx: Queryable) => {
    await tx.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`chat-session-api schema ${schema}`]);
    await tx.query(`CREATE SCHEMA IF NOT EXISTS ${S}`);
    await tx.query(`CREATE TABLE IF NOT EXISTS ${S}.meta (key text PRIMARY KEY, value text NOT NULL)`);
    const row = (await tx.query(`SELECT value FROM ${S}.meta WHERE key = 'schema_version'`)).rows[0];
    const version = row === undefined ? 0 : Number(row[0]);
    if (!Number.isInteger(version)) throw new StoreOpenFailed(`${where}: schema ${schema} holds a schema version this release cannot read ("${String(row?.[0])}"); point DATABASE_SCHEMA at this service's own schema`);
    if (version > SCHEMA_VERSION) {
      throw new StoreOpenFailed(
        `${where}: schema ${schema} was written by a newer release (schema version ${version}; this release knows up to ${SCHEMA_VERSION}); run that release, or export with it and import into another schema with this one. Nothing was changed.`,
      );
    }
    if (version === 0) {
      const other = (await tx.query(`SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename <> 'meta'`, [schema])).rows[0]?.[0];
      if (other !== '0') throw new StoreOpenFailed(`${where}: schema ${schema} holds tables of another application; set DATABASE_SCHEMA to a schema of this service's own. Nothing was changed.`);
    }
    for (let v = version; v < SCHEMA_VERSION; v++) {
      const before = BEFORE[v];
      if (before !== undefined && (await tx.query(before(S))).rows[0]?.[0] !== '0') {
        throw new StoreOpenFailed(`${where}: schema ${schema} holds turns this release cannot rewrite for schema version ${v + 1} (not as the first release wrote them); export them with the release that wrote them. Nothing was changed.`);
      }
      await tx.exec((MIGRATIONS[v] as (S: string) => string)(S));
      await AFTER[v]?.(tx, S);
    }
    if (version < SCHEMA_VERSION) {
      await tx.query(`INSERT INTO ${S}.meta (key, value) VALUES ('schema_version', $1) ON CONFLICT (key) DO UPDATE SET value = excluded.value`, [String(SCHEMA_VERSION)]);
    }
    const repaired = await repairNumbers(tx, S);
    // SEARCH=off writes no words: the schema says so until a start with search on indexes everything again
    if (!search) await tx.query(`INSERT INTO ${S}.meta (key, value) VALUES ('search_index', 'behind') ON CONFLICT (key) DO NOTHING`);
    else if ((await tx.query(`DELETE FROM ${S}.meta WHERE key = 'search_index' RETURNING value`)).rows.length > 0) return { reindexed: await reindexRows(tx, S), repaired };
    return { repaired };
  });
}
