// The live feed's log: the events committed changes made, with ids that increase in commit
// order, the newest of them kept for clients that reconnect with Last-Event-ID, and the record
// of tickets already used. A single-process engine (journal, sqlite) gets one in memory, fed by
// the store's commit listener; an engine shared by several instances (PostgreSQL) keeps it in
// the database, and each instance follows it (SharedFeedLog).
import type { Logger } from '../log.js';
import { ServerBusy } from '../domain/errors.js';
import type { Announce, ChangeEvent, LoggedEvent, SharedEventLog, Store } from '../store/store.js';
import { makesEvents } from './changes.js';

export interface FeedLog {
  /** The id of the newest event handed to the feed (the live position). */
  readonly head: number;
  /** Starts following committed changes; `deliver` gets new events in id order, each once. */
  start(deliver: (events: readonly LoggedEvent[]) => void): Promise<void>;
  /**
   * Whether a client that saw every event up to `after` can be given what followed: 'ok', 'gone'
   * (older than the retained window) or 'unknown' (an id this feed never gave); and the newest
   * event committed now, which a replay goes up to (on a shared log it may be ahead of `head`).
   */
  check(after: number): Position | Promise<Position>;
  /** Events with ids in (after, upTo], in order, at most `limit`; undefined when some of them are no longer kept. */
  read(after: number, upTo: number, limit: number): readonly LoggedEvent[] | undefined | Promise<readonly LoggedEvent[] | undefined>;
  /** Records a ticket's single use: false when it was used before. */
  claimTicket(id: string, expiresAtMs: number): boolean | Promise<boolean>;
  /**
   * Logs events no commit makes (a reply's text as it comes) and delivers them as the others,
   * with the next ids; resolves once they are logged (at once in memory).
   */
  publish(events: readonly ChangeEvent[]): Promise<void>;
  /** Events published and not logged yet (0 in memory; on a shared log, those waiting for its append). */
  unlogged(): number;
  /** Housekeeping, called on the feed's timer: forget expired tickets, trim, catch up. */
  tick(nowMs: number): void;
  /**
   * Resolves once every event committed before the call is delivered (at once in memory, where a
   * commit delivers its events itself; on a shared log, once it is read back), or after `ms`.
   */
  caughtUp(ms: number): Promise<void>;
  close(): Promise<void>;
}

export interface Position {
  readonly where: 'ok' | 'gone' | 'unknown';
  readonly newest: number;
}

export interface WindowLimits {
  /** Events kept for Last-Event-ID (EVENTS_WINDOW). */
  readonly events: number;
  /** Bytes of their data kept at most, in memory (EVENTS_WINDOW_MEMORY). */
  readonly bytes: number;
}

/** Tickets remembered as used at most (each for its 60 s); past it a stream cannot open (503). */
const MAX_USED_TICKETS = 1_000_000;

/** Event ids of each start begin at its start time in ms × 1000 (see MemoryFeedLog). */
const IDS_PER_MS = 1000;

/**
 * The feed of a single-process engine, in memory. Ids start at the process's start time in
 * milliseconds × 1000 and count up by one, so they keep increasing across restarts without
 * writing anything (unless the average rate of a run passes a million events per second, or the
 * clock is set back across a restart); the window does not survive a restart, and a client
 * coming back with an id of an earlier run gets `reset`.
 */
export class MemoryFeedLog implements FeedLog {
  head: number;
  private readonly kept: EventWindow;
  private readonly used = new Map<string, number>();

  constructor(
    private readonly store: Store,
    private readonly announce: Announce,
    limits: WindowLimits,
    nowMs: number = Date.now(),
  ) {
    this.head = Math.floor(nowMs) * IDS_PER_MS;
    this.kept = new EventWindow(this.head, limits);
  }

  private deliver: ((events: readonly LoggedEvent[]) => void) | undefined;

  start(deliver: (events: readonly LoggedEvent[]) => void): Promise<void> {
    this.deliver = deliver;
    this.store.onCommitted((changes) => this.log(this.announce(changes)));
    return Promise.resolve();
  }

  publish(events: readonly ChangeEvent[]): Promise<void> {
    this.log(events);
    return Promise.resolve();
  }

  unlogged(): number {
    return 0;
  }

  caughtUp(): Promise<void> {
    return Promise.resolve();
  }

  /** Gives events their ids, keeps them for Last-Event-ID and delivers them. */
  private log(made: readonly ChangeEvent[]): void {
    if (made.length === 0 || this.deliver === undefined) return;
    const events: LoggedEvent[] = [];
    for (const e of made) {
      const logged: LoggedEvent = { ...e, id: ++this.head };
      events.push(logged);
      this.kept.keep(logged);
    }
    this.deliver(events);
  }

  check(after: number): Position {
    const where = after > this.head ? 'unknown' : after + 1 >= this.kept.first ? 'ok' : 'gone';
    return { where, newest: this.head };
  }

  read(after: number, upTo: number, limit: number): readonly LoggedEvent[] | undefined {
    return this.kept.read(after, upTo, limit);
  }

  claimTicket(id: string, expiresAtMs: number): boolean {
    if (this.used.has(id)) return false;
    if (this.used.size >= MAX_USED_TICKETS) {
      this.tick(Date.now());
      if (this.used.size >= MAX_USED_TICKETS) throw new ServerBusy();
    }
    this.used.set(id, expiresAtMs);
    return true;
  }

  tick(nowMs: number): void {
    for (const [id, until] of this.used) if (until < nowMs) this.used.delete(id);
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}

/**
 * The newest events delivered, with contiguous ids, bounded in count and bytes: the whole
 * window of a single-process feed, and the recent part of a shared one (replays read it
 * rather than the database).
 */
class EventWindow {
  /** The id of the oldest event kept (or of the next to come, when none is). */
  first: number;
  /** The kept events, oldest first, from index `start0` (shifting one at a time would be O(n)). */
  private kept: LoggedEvent[] = [];
  private start0 = 0;
  private bytes = 0;

  /** `last`: the id of the newest event delivered before this window's first. */
  constructor(
    last: number,
    private readonly limits: WindowLimits,
  ) {
    this.first = last + 1;
  }

  /** The id of the newest event kept (first - 1 when none is). */
  get last(): number {
    return this.first + (this.kept.length - this.start0) - 1;
  }

  /** Keeps `e`, the newest; an id that does not follow the last (a shared log trimmed past this instance) starts the window anew. */
  keep(e: LoggedEvent): void {
    if (e.id !== this.last + 1) {
      this.kept = [];
      this.start0 = 0;
      this.bytes = 0;
      this.first = e.id;
    }
    this.kept.push(e);
    this.bytes += e.data.length;
    while (this.kept.length - this.start0 > this.limits.events || (this.bytes > this.limits.bytes && this.kept.length - this.start0 > 1)) {
      const old = this.kept[this.start0] as LoggedEvent;
      this.kept[this.start0] = undefined as unknown as LoggedEvent;
      this.start0++;
      this.bytes -= old.data.length;
      this.first = old.id + 1;
    }
    if (this.start0 > 1024 && this.start0 * 2 > this.kept.length) {
      this.kept = this.kept.slice(this.start0);
      this.start0 = 0;
    }
  }

  /** Events with ids in (after, upTo], at most `limit`, up to the newest kept; undefined when the first of them is no longer kept. */
  read(after: number, upTo: number, limit: number): readonly LoggedEvent[] | undefined {
    if (after + 1 < this.first) return undefined;
    const from = this.start0 + (after + 1 - this.first);
    const to = Math.min(from + limit, this.start0 + (Math.min(upTo, this.last) + 1 - this.first));
    return from >= to ? [] : this.kept.slice(from, to);
  }
}

/** Events read from the shared log per query. */
const PAGE = 500;
/**
 * The newest events a shared feed keeps in memory, for the replays of streams that open: a
 * reply's stream replays from when it was asked, while every other reply's text goes by.
 */
const RECENT: WindowLimits = { events: 4096, bytes: 4 * 1024 * 1024 };

/** How long a reply's text waits for others' to be logged with it in one statement. */
const PUBLISH_GATHER_MS = 2;
/** The data of the reset a stream gets when this instance missed events: as for an id older than the window. */
export const GONE_RESET = '{"reason":"gone"}';
/** How often the shared log is trimmed (by every instance; any one's trim serves all). */
const TRIM_EVERY_MS = 60_000;

/** Publishers waiting for their events to be logged. */
type Waiter = { readonly resolve: () => void; readonly reject: (e: unknown) => void };

/**
 * The feed of an engine shared by several instances: the events are in the database (written
 * with their changes, ids in commit order). This instance reads them by id whenever it may
 * have missed some: a notification from any instance, a commit of its own that made events,
 * a reconnection of the listener, and on the feed's timer in case a notification was lost.
 * The events it logs itself (a reply's text) it delivers without reading them back when
 * nothing came between them and what it delivered last.
 */
export class SharedFeedLog implements FeedLog {
  head = 0;
  private deliver: ((events: readonly LoggedEvent[]) => void) | undefined;
  private reading = false;
  private again = false;
  private trimmedAt = 0;
  private closed = false;
  private recent: EventWindow = new EventWindow(0, RECENT);

  constructor(
    private readonly store: Store,
    private readonly shared: SharedEventLog,
    private readonly window: number,
    private readonly log: Logger,
  ) {}

  async start(deliver: (events: readonly LoggedEvent[]) => void): Promise<void> {
    this.head = (await this.shared.bounds()).newest;
    this.recent = new EventWindow(this.head, RECENT);
    this.deliver = deliver;
    // this instance's own commits that made events: read at once rather than wait for the
    // notification's round trip (a quiet delta, the most frequent commit of a reply, makes none)
    this.store.onCommitted((changes) => {
      if (makesEvents(changes)) this.catchUp();
    });
    await this.shared.watch(() => this.catchUp());
    this.catchUp();
  }

  /** Hands on events that follow `head`, in order; those already handed on (read twice) are dropped. */
  private handOn(events: readonly LoggedEvent[]): void {
    const fresh = events[0] !== undefined && events[0].id <= this.head ? events.filter((e) => e.id > this.head) : events;
    const first = fresh[0];
    const last = fresh[fresh.length - 1];
    if (first === undefined || last === undefined || this.closed) return;
    // ids are contiguous: a first id past head + 1 means another instance trimmed events this
    // one had not read yet (it lagged more than EVENTS_WINDOW); its streams are told
    const missed = first.id - this.head - 1;
    if (missed > 0) {
      this.log.warn('the live feed fell more than EVENTS_WINDOW behind the shared log and missed events another instance trimmed; its streams get reset', { missed });
      this.deliver?.([{ id: first.id - 1, type: 'reset', session: '', owner: '', project: '', data: GONE_RESET }]);
    }
    this.head = last.id;
    for (const e of fresh) this.recent.keep(e);
    this.deliver?.(fresh);
  }

  async caughtUp(ms: number): Promise<void> {
    const until = Date.now() + ms;
    const { newest } = await this.shared.bounds();
    while (this.head < newest && !this.closed && Date.now() < until) {
      this.catchUp();
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }

  /** Reads what was committed after `head` and delivers it; one read at a time, again if asked meanwhile. */
  catchUp(): void {
    if (this.closed) return;
    if (this.reading) {
      this.again = true;
      return;
    }
    this.reading = true;
    this.again = false;
    this.shared.read(this.head, Number.MAX_SAFE_INTEGER, PAGE).then(
      (events) => {
        this.reading = false;
        this.handOn(events);
        if (events.length === PAGE || this.again) this.catchUp();
      },
      (e: unknown) => {
        this.reading = false;
        // the database is away: the timer tries again
        this.log.warn('cannot read the shared event log; trying again', { err: (e as Error).message });
      },
    );
  }

  async check(after: number): Promise<Position> {
    const { newest, oldest } = await this.shared.bounds();
    if (after > newest) return { where: 'unknown', newest };
    // the window is the newest EVENTS_WINDOW events, whether or not older rows are trimmed yet;
    // ids are contiguous, so what follows `after` is all there when the oldest kept is at most after + 1
    const kept = after === newest || (after >= newest - this.window && oldest !== undefined && oldest <= after + 1);
    return { where: kept ? 'ok' : 'gone', newest };
  }

  async read(after: number, upTo: number, limit: number): Promise<readonly LoggedEvent[] | undefined> {
    // what this instance delivered lately is in memory: a replay reads the database only past it
    // (what was committed and not yet read here) or before it; an empty answer goes to the database
    // too, which tells a trimmed range from an empty one
    const near = after < this.head ? this.recent.read(after, upTo, limit) : undefined;
    if (near !== undefined && near.length > 0) return near;
    const events = await this.shared.read(after, upTo, limit);
    const first = events[0];
    // ids are contiguous and `upTo` is committed: nothing read while something lay between means trimmed
    if (first === undefined) return after < upTo ? undefined : [];
    return first.id === after + 1 ? events : undefined;
  }

  claimTicket(id: string, expiresAtMs: number): Promise<boolean> {
    return this.shared.claimTicket(id, expiresAtMs);
  }

  /** Events waiting to be logged together, and who waits for them. */
  private gathered: ChangeEvent[] = [];
  private waiters: Waiter[] = [];
  /** The gathering's timer, while it runs. */
  private gathering: NodeJS.Timeout | undefined;
  /** An append is under way: what is published meanwhile goes in the next, as soon as it ends. */
  private appending = false;
  /** Events of the append under way. */
  private inAppend = 0;

  unlogged(): number {
    return this.gathered.length + this.inAppend;
  }

  publish(events: readonly ChangeEvent[]): Promise<void> {
    if (events.length === 0) return Promise.resolve();
    return new Promise((resolve, reject) => {
      for (const e of events) this.gathered.push(e);
      this.waiters.push({ resolve, reject });
      // what arrives within a few milliseconds (or while the append before is under way) joins:
      // one statement logs the text of every reply of that time, and the busier the log, the more
      if (!this.appending && this.gathering === undefined) {
        this.gathering = setTimeout(() => {
          this.gathering = undefined;
          this.append();
        }, PUBLISH_GATHER_MS);
      }
    });
  }

  /**
   * Logs what was gathered. One append at a time: each takes its ids when it commits, so a
   * later one never gets smaller ids, and each publisher's events keep the order they were told.
   */
  private append(): void {
    if (this.appending || this.gathered.length === 0) return;
    const events = this.gathered;
    const waiters = this.waiters;
    this.gathered = [];
    this.waiters = [];
    this.appending = true;
    this.inAppend = events.length;
    this.shared.append(events).then(
      (last) => {
        this.appending = false;
        this.inAppend = 0;
        if (last !== undefined) this.logged(events, last);
        for (const w of waiters) w.resolve();
        this.append();
      },
      (e: unknown) => {
        this.appending = false;
        this.inAppend = 0;
        for (const w of waiters) w.reject(e);
        this.append();
      },
    );
  }

  /**
   * Its own events, logged with the ids up to `last`: delivered as they are when every event
   * before them is delivered already (ids are contiguous, and none smaller can commit later);
   * else read back with what came between.
   */
  private logged(events: readonly ChangeEvent[], last: number): void {
    const first = last - events.length + 1;
    if (this.head !== first - 1 || this.deliver === undefined) {
      this.catchUp();
      return;
    }
    this.handOn(events.map((e, i) => ({ ...e, id: first + i })));
  }

  tick(nowMs: number): void {
    this.catchUp();
    if (nowMs - this.trimmedAt < TRIM_EVERY_MS) return;
    this.trimmedAt = nowMs;
    // never past what this instance has read: a feed that lags (a burst of replies' text) must
    // not have its own unread events trimmed under it
    this.shared.trim(this.window, this.head, nowMs).catch((e: unknown) => this.log.warn('cannot trim the shared event log; trying again later', { err: (e as Error).message }));
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.shared.close();
  }
}
