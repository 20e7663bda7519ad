// An import into PostgreSQL: in one transaction, the records the file names are read (their
// sessions locked), planned as on every engine (../import-plan.ts), written as given, and what the
// sessions they touched hold, their versions and every owner's usage counted again from the rows.
import type { TurnKey } from '../../domain/order.js';
import { tokensOf, type ChatSession, type Turn } from '../../domain/records.js';
import { foldForSearch } from '../../domain/search.js';
import { versionOfSession } from '../../domain/version.js';
import type { QueryResult } from '../../pg/query.js';
import type { Pool } from '../../pg/pool.js';
import { planImport } from '../import-plan.js';
import { withDeltas } from '../pieces.js';
import type { ImportSummary } from '../store.js';
import { placesSql } from '../tree-index.js';
import type { GroupEvents } from './apply.js';
import { eventStatements } from './events.js';
import { lease } from './reads.js';
import { deltasSql, finish, insertTurnSql, rowOf, SESSION_ROW, turnBytesSql } from './rows.js';
import { keptColumns, sqlText, storeError, textArray, totalSql, wordsSql, type Indexing } from './values.js';

/** What an import announces to the live feed: not a change of one session, but "read everything again". */
const IMPORT_RESET = { type: 'reset', session: '', owner: '', project: '', data: '{"reason":"import"}' } as const;

/** Writes `sessions` and `turns` into schema `S` as given, all or nothing (the store's serial writer is paused meanwhile). */
export async function importInto(pool: Pool, S: string, index: Indexing, events: GroupEvents | undefined, sessions: readonly ChatSession[], turns: readonly Turn[]): Promise<ImportSummary> {
  const { q, done } = await lease(pool);
  let ended = false;
  try {
    await q.query('BEGIN');
    // what is stored of the records the file names, read (and the sessions locked) in pieces
    const stored = new Map<string, { json: string; lastTurn: TurnKey | undefined }>();
    const storedTurns = new Map<string, { session: string; json: Buffer }>();
    const ids = sessions.map((s) => s._id);
    for (let i = 0; i < ids.length; i += 5000) {
      for (const r of (await q.query(`SELECT ${SESSION_ROW} FROM ${S}.sessions WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE`, [textArray(ids.slice(i, i + 5000))])).rows) {
        const row = rowOf(r);
        stored.set(r[0] as string, { json: row.json, lastTurn: row.lastTurn });
      }
    }
    const turnIds = turns.map((t) => t._id);
    for (let i = 0; i < turnIds.length; i += 5000) {
      for (const r of (await q.query(`SELECT t.id, t.session, t.json, ${deltasSql(S, 't')} FROM ${S}.turns t WHERE t.id = ANY($1::text[])`, [textArray(turnIds.slice(i, i + 5000))])).rows) {
        storedTurns.set(r[0] as string, { session: r[1] as string, json: withDeltas(Buffer.from(r[2] as string), r[3]) });
      }
    }
    const plan = planImport(sessions, turns, {
      session: (id) => {
        const s = stored.get(id);
        return s === undefined ? undefined : { json: s.json, lastTurnAt: s.lastTurn?.createdAt };
      },
      turn: (id) => storedTurns.get(id),
    });
    const sent: Promise<QueryResult>[] = [];
    for (const s of plan.sessions) {
      const json = JSON.stringify(s);
      sent.push(
        q.query(
          `INSERT INTO ${S}.sessions (id, owner, project, archived, updated_at, name_folded, json, json_bytes, version, head_turn_id, tags, expires_at, keep, name_words) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, '', $9, $10::text[], $11, $12, ${wordsSql('$13')})
           ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, project = excluded.project, archived = excluded.archived, updated_at = excluded.updated_at,
             name_folded = excluded.name_folded, json = excluded.json, json_bytes = excluded.json_bytes, head_turn_id = excluded.head_turn_id,
             tags = excluded.tags, expires_at = excluded.expires_at, keep = excluded.keep, name_words = excluded.name_words`,
          [s._id, sqlText(s.user), sqlText(s.project), String(s.archived), s.updatedAt, sqlText(foldForSearch(s.name)), json, String(Buffer.byteLength(json)), s.headTurnId, ...keptColumns(s), index.name(s.name)],
        ),
      );
    }
    for (const t of plan.turns) {
      if (t.replaces !== undefined) {
        sent.push(q.query(`DELETE FROM ${S}.turn_pieces WHERE turn = $1`, [t.turn._id]));
        sent.push(q.query(`DELETE FROM ${S}.turns WHERE id = $1`, [t.turn._id]));
      }
      const tokens = tokensOf(t.turn.usage);
      sent.push(q.query(insertTurnSql(S), [t.turn._id, t.turn.session, t.turn.parentId, t.turn.createdAt, t.json.toString('utf8'), index.turn(t.json), String(tokens.inputTokens), String(tokens.outputTokens), String(tokens.cachedTokens), null, null]));
    }
    // the sessions whose turns changed (here or by a replaced turn elsewhere) get their newest turn and counts again
    const touched = new Set<string>([...plan.sessions.map((s) => s._id), ...plan.turns.flatMap((t) => [t.turn.session, ...(t.replaces !== undefined ? [t.replaces] : [])])]);
    await Promise.all(sent);
    // an import may give a stored turn another parent: the depths of the sessions whose turns it wrote are made again
    const withTurns = [...new Set(plan.turns.flatMap((t) => [t.turn.session, ...(t.replaces !== undefined ? [t.replaces] : [])]))];
    for (let i = 0; i < withTurns.length; i += 5000) await q.query(placesSql(`${S}.turns`, 'session = ANY($1::text[])', 'NULL::text COLLATE "C"'), [textArray(withTurns.slice(i, i + 5000))]);
    const touchedIds = [...touched];
    for (let i = 0; i < touchedIds.length; i += 5000) {
      const some = textArray(touchedIds.slice(i, i + 5000));
      await q.query(
        `UPDATE ${S}.sessions s SET turn_count = coalesce(t.n, 0), turn_bytes = coalesce(t.bytes, 0), last_turn_at = t.last_at, last_turn_id = t.last_id,
           input_tokens = coalesce(t.i, 0), output_tokens = coalesce(t.o, 0), cached_tokens = coalesce(t.c, 0)
         FROM (SELECT id FROM unnest($1::text[]) AS id) ids
         LEFT JOIN (SELECT session, count(*) AS n, sum(${turnBytesSql(S, 'x')}) AS bytes, ${totalSql('input_tokens')} AS i, ${totalSql('output_tokens')} AS o, ${totalSql('cached_tokens')} AS c,
                      (array_agg(created_at ORDER BY created_at DESC, id DESC))[1] AS last_at, (array_agg(id ORDER BY created_at DESC, id DESC))[1] AS last_id
                    FROM ${S}.turns x WHERE session = ANY($1::text[]) GROUP BY session) t ON t.session = ids.id
         WHERE s.id = ids.id`,
        [some],
      );
      const versions: Promise<QueryResult>[] = [];
      for (const r of (await q.query(`SELECT id, json, last_turn_at, last_turn_id FROM ${S}.sessions WHERE id = ANY($1::text[])`, [some])).rows) {
        const last = r[2] === null || r[3] === null ? undefined : { createdAt: r[2] as string, _id: r[3] as string };
        versions.push(q.query(`UPDATE ${S}.sessions SET version = $1 WHERE id = $2`, [versionOfSession(r[1] as string, last), r[0] as string]));
      }
      await Promise.all(versions);
    }
    await q.query(`DELETE FROM ${S}.usage`);
    await q.query(
      `INSERT INTO ${S}.usage (owner, sessions, turns, bytes, input_tokens, output_tokens, cached_tokens)
       SELECT owner, count(*), sum(turn_count), sum(json_bytes + turn_bytes), ${totalSql('input_tokens')}, ${totalSql('output_tokens')}, ${totalSql('cached_tokens')} FROM ${S}.sessions GROUP BY owner`,
    );
    // instances serving beside the import tell their subscribers to read everything again
    const changed = plan.sessions.length + plan.turns.length > 0;
    const reset = events === undefined || !changed ? [] : eventStatements(q, S, events.channel, [IMPORT_RESET]);
    await finish(q, reset, done, () => (ended = true));
    return plan.summary;
  } catch (e) {
    if (!ended) {
      await q.query('ROLLBACK').catch(() => undefined);
      done();
    }
    throw storeError(e);
  }
}
