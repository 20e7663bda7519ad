// The live feed's log in PostgreSQL, shared by every instance on the schema. A group's events
// are written in the group's own transaction, after its changes: one UPDATE of event_head hands
// out their ids and holds that row's lock until COMMIT, so a transaction that takes ids after
// another commits after it. Ids therefore increase in commit order: once an instance has read
// every event up to id N, no event with a smaller id can commit later. The transaction also
// NOTIFYs; every instance LISTENs and reads the new rows by id.
import { createHash } from 'node:crypto';
import type { TurnStatus } from '../../domain/records.js';
import type { QueryResult } from '../../pg/query.js';
import { Listener } from '../../pg/listen.js';
import type { Pool, Queryable } from '../../pg/pool.js';
import type { Logger } from '../../log.js';
import type { Broadcast, ChangeEvent, LoggedEvent, SharedEventLog } from '../store.js';
import { storeError, textArray } from './values.js';

/** The NOTIFY channel of a schema's feed: short (channel names are at most 63 bytes) and one per schema. */
export function channelOf(schema: string): string {
  return `csa_events_${createHash('sha256').update(schema).digest('hex').slice(0, 20)}`;
}

/**
 * The statement that logs `events`, to be sent last before COMMIT in a group's transaction (the
 * lock on event_head is then held for the shortest time: the insert and the COMMIT), or alone as
 * a transaction of its own. It takes the ids (the i-th of n gets the id last - n + i), inserts
 * every event and NOTIFYs, and answers one row: the last id it took. One statement rather than
 * an INSERT and a SELECT pg_notify: a reply's text is logged every few milliseconds, and each
 * statement is a message PostgreSQL parses, runs and answers.
 */
export function eventStatements(q: Queryable, S: string, channel: string, events: readonly ChangeEvent[]): Promise<QueryResult>[] {
  const n = events.length;
  if (n === 0) return [];
  const types: string[] = [];
  const about: string[] = [];
  const data: string[] = [];
  for (const e of events) {
    types.push(e.type);
    // owner and project as JSON, which PostgreSQL's text holds whatever they contain (NUL included);
    // a turn's event adds the turn and its status (rows written before they were read as none)
    about.push(JSON.stringify(e.turnId === undefined ? [e.session, e.owner, e.project] : e.status === undefined ? [e.session, e.owner, e.project, e.turnId] : [e.session, e.owner, e.project, e.turnId, e.status]));
    data.push(typeof e.data === 'string' ? e.data : e.data.toString('utf8'));
  }
  return [
    q.query(
      `WITH head AS (UPDATE ${S}.event_head SET last = last + $1 RETURNING last),
       logged AS (INSERT INTO ${S}.events (id, type, about, data) SELECT head.last - $1 + e.i, e.type, e.about, e.data FROM head, unnest($2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS e(type, about, data, i))
       SELECT head.last, pg_notify($5, '') FROM head`,
      [String(n), textArray(types), textArray(about), textArray(data), channel],
    ),
  ];
}

function eventOf(r: readonly (string | null)[]): LoggedEvent {
  const [session, owner, project, turnId, status] = JSON.parse(r[2] as string) as [string, string, string, string?, TurnStatus?];
  return { id: Number(r[0]), type: r[1] as string, session, owner, project, data: r[3] as string, ...(turnId !== undefined ? { turnId } : {}), ...(status !== undefined ? { status } : {}) };
}

export class PgEventLog implements SharedEventLog {
  private listener: Listener | undefined;

  constructor(
    private readonly pool: Pool,
    private readonly S: string,
    private readonly url: string,
    private readonly channel: string,
    private readonly log: Logger,
  ) {}

  async bounds(): Promise<{ newest: number; oldest: number | undefined }> {
    const r = await this.pool.query(`SELECT (SELECT last FROM ${this.S}.event_head), (SELECT min(id) FROM ${this.S}.events)`).catch(rethrow);
    const row = r.rows[0] ?? ['0', null];
    return { newest: Number(row[0] ?? '0'), oldest: row[1] === null || row[1] === undefined ? undefined : Number(row[1]) };
  }

  async read(after: number, upTo: number, limit: number): Promise<readonly LoggedEvent[]> {
    const r = await this.pool
      .query(`SELECT id, type, about, data FROM ${this.S}.events WHERE id > $1 AND id <= $2 ORDER BY id LIMIT $3`, [String(after), String(upTo), String(limit)])
      .catch(rethrow);
    return r.rows.map(eventOf);
  }

  async watch(onChange: () => void): Promise<void> {
    const listener = new Listener(this.url, {
      // a notification of this instance's own commit: its events are read once that commit is answered (onCommitted)
      onNotification: (n) => {
        if (!this.pool.servedBy(n.pid)) onChange();
      },
      onReconnect: () => {
        this.log.info('listening for other instances\' events again; catching up');
        onChange();
      },
      onError: (err) => this.log.warn('the connection that listens for other instances\' events was lost; reconnecting', { err: err.message }),
    });
    this.listener = listener;
    try {
      await listener.listen(this.channel);
    } catch (e) {
      // the listener keeps trying; until it listens, the feed reads on its timer
      this.log.warn('cannot listen for other instances\' events yet; retrying', { err: (e as Error).message });
    }
  }

  async trim(keep: number, readTo: number, nowMs: number): Promise<void> {
    await Promise.all([
      this.pool.query(`DELETE FROM ${this.S}.events WHERE id <= LEAST((SELECT last FROM ${this.S}.event_head) - $1, $2)`, [String(keep), String(readTo)]),
      this.pool.query(`DELETE FROM ${this.S}.used_tickets WHERE expires_at < $1`, [String(nowMs)]),
    ]).catch(rethrow);
  }

  async append(events: readonly ChangeEvent[]): Promise<number | undefined> {
    if (events.length === 0) return undefined;
    // one statement outside a transaction block is a transaction of its own: one round trip,
    // where BEGIN, the statement and COMMIT were three
    const [logged] = eventStatements(this.pool, this.S, this.channel, events);
    const r = await (logged as Promise<QueryResult>).catch(rethrow);
    return Number(r.rows[0]?.[0]);
  }

  async claimTicket(id: string, expiresAtMs: number): Promise<boolean> {
    const r = await this.pool.query(`INSERT INTO ${this.S}.used_tickets (id, expires_at) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`, [id, String(expiresAtMs)]).catch(rethrow);
    return r.rowCount === 1;
  }

  async close(): Promise<void> {
    const listener = this.listener;
    this.listener = undefined;
    await listener?.close();
  }
}

/** Short messages among the instances on one schema: pg_notify to send, a Listener to hear. */
export class PgBroadcast implements Broadcast {
  private listener: Listener | undefined;

  constructor(
    private readonly pool: Pool,
    private readonly url: string,
    private readonly channel: string,
    private readonly log: Logger,
  ) {}

  async send(message: string): Promise<void> {
    await this.pool.query('SELECT pg_notify($1, $2)', [this.channel, message]).catch(rethrow);
  }

  async listen(on: (message: string) => void): Promise<void> {
    const listener = new Listener(this.url, {
      onNotification: (n) => on(n.payload),
      onReconnect: () => this.log.info('listening for other instances\' messages again'),
      onError: (err) => this.log.warn('the connection that listens for other instances\' messages was lost; reconnecting', { err: err.message }),
    });
    this.listener = listener;
    try {
      await listener.listen(this.channel);
    } catch (e) {
      this.log.warn('cannot listen for other instances\' messages yet; retrying', { err: (e as Error).message });
    }
  }

  async close(): Promise<void> {
    const listener = this.listener;
    this.listener = undefined;
    await listener?.close();
  }
}

function rethrow(e: unknown): never {
  throw storeError(e);
}
