// The live feed's streams: who follows what, and writing each event to the streams that may
// see it. Every stream follows one key (a user's sessions, a project's, a user's sessions of a
// project, or one session); an event is looked up under the few keys it matches, serialized
// once, and the same bytes are written to each stream. A stream that connects with
// Last-Event-ID first replays what it missed from the feed's log, as fast as it reads, then
// goes live. One timer serves every stream: heartbeats, expiry, streams that stopped reading.
import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { DomainError, ServerBusy } from '../domain/errors.js';
import type { Logger } from '../log.js';
import type { Metrics } from '../metrics.js';
import type { ChangeEvent, LoggedEvent } from '../store/store.js';
import { SESSION_ONLY_TYPES } from './changes.js';
import { GONE_RESET, type FeedLog } from './log.js';

export interface HubOptions {
  /** Between heartbeats (EVENTS_HEARTBEAT); also how often expiry and stalled streams are looked at. */
  readonly heartbeatMs: number;
  /** Unsent bytes a stream may hold before it is cut off as too slow (EVENTS_BUFFER). */
  readonly bufferBytes: number;
  /** Streams open at most, and per user (MAX_STREAMS, MAX_STREAMS_PER_USER). */
  readonly maxStreams: number;
  readonly maxStreamsPerUser: number;
  /** A stream that takes no byte for this long is destroyed (WRITE_TIMEOUT). */
  readonly writeTimeoutMs: number;
}

/** What a stream follows: the key of its subscription (FollowKey) and how it started. */
export interface Follow {
  readonly user: string;
  readonly key: string;
  /** A session's own stream: it ends once the session is deleted. */
  readonly session: string | undefined;
  /** Last-Event-ID as the client sent it. */
  readonly lastEventId: string | undefined;
  /** When the credential that opened the stream stops being accepted; the stream ends then. */
  readonly untilMs: number | undefined;
  /** The ticket that opened it, claimed here (single use). */
  readonly ticket: { readonly id: string; readonly expiresAtMs: number } | undefined;
  readonly reqId: string | undefined;
  /**
   * A stream that answers one request (a reply's): only the events `only` takes (and no
   * `ready`); it closes after the event `last` says is its last, with no final event.
   */
  readonly only?: (e: LoggedEvent) => boolean;
  readonly last?: (e: LoggedEvent) => boolean;
}

/** The keys streams subscribe under. */
export const FollowKey = {
  /** The user's own sessions (GET /api/v1/events). */
  user: (user: string): string => `u\0${user}`,
  /** Every session of a project (?projectId=, ACCESS=shared). */
  project: (project: string): string => `p\0${project}`,
  /** The user's own sessions of a project (?projectId=, ACCESS=owner). */
  ownProject: (project: string, user: string): string => `o\0${project}\0${user}`,
  /** One session (GET /api/v1/chat-sessions/:id/events). */
  session: (id: string): string => `s\0${id}`,
};

/**
 * A stream opened and not yet written: `attach` hands it the answer once its head is written;
 * `cancel` when the client left before (what the API answers as an event stream).
 */
export interface OpenedStream {
  readonly status: 200;
  readonly eventStream: {
    attach(res: ServerResponse): void;
    cancel(): void;
  };
}

/**
 * Why a stream ended, as its final event says (and /metrics counts). `gone`: a reply's stream
 * whose instance missed events; its `reset` said so, and it closes with nothing more.
 */
export type EndReason = 'slow' | 'expired' | 'shutdown' | 'deleted' | 'done' | 'gone';

/** How long a shutdown waits for the feed to deliver what was committed before it ends the streams. */
const DRAIN_CATCH_UP_MS = 2_000;
/** Events read from the log per step of a replay. */
const REPLAY_PAGE = 256;
/** A replay waits for the client to read once this much is unsent. */
const REPLAY_HIGH_WATER = 64 * 1024;
const TAIL = Buffer.from('\n\n');
const CRLF = Buffer.from('\r\n');

/**
 * An event's bytes, made once for every stream that takes it: as they are, and as one HTTP/1.1
 * chunk (made when a chunked stream first needs them).
 */
class Frame {
  private chunk: Buffer | undefined;
  constructor(readonly raw: Buffer) {}
  bytes(chunked: boolean): Buffer {
    if (!chunked) return this.raw;
    return (this.chunk ??= Buffer.concat([Buffer.from(`${this.raw.length.toString(16)}\r\n`, 'latin1'), this.raw, CRLF]));
  }
}

/**
 * One stream. Events are written straight to its socket, already framed (the head went through
 * node:http, and `res.end()` writes the last chunk): one write call per stream and delivery,
 * where node's `res.write` makes four per event and defers their flush (the fan-out took 10-15%
 * less CPU so, bench/README.md).
 */
class Stream {
  /** Indexed under its key and written to as events come (after its replay). */
  live = false;
  /** Ended by us (a final event) or gone: nothing more is written. */
  ended = false;
  /** The id of the last event this stream was given or passed over. */
  cursor: number;
  /** Unsent bytes at the last tick, and ticks in a row without progress. */
  lastPending = 0;
  stalled = 0;
  readonly opened = Date.now();
  /** HTTP/1.1 answers are chunked; an HTTP/1.0 one is delimited by the connection's end. */
  readonly chunked: boolean;
  /** Frames taken during one delivery, written together when it ends (see Hub.deliver). */
  queue: Frame[] | undefined;
  /** Something was written since the last tick: the stream is not idle, no heartbeat is due. */
  wrote = false;

  constructor(
    readonly res: ServerResponse,
    readonly socket: Socket,
    readonly follow: Follow,
    cursor: number,
  ) {
    this.cursor = cursor;
    this.chunked = res.chunkedEncoding;
  }

  send(f: Frame): void {
    this.wrote = true;
    this.socket.write(f.bytes(this.chunked));
  }

  /** Writes what was queued, several frames in one system call (writev). */
  flush(): void {
    const q = this.queue;
    if (q === undefined) return;
    this.queue = undefined;
    if (q.length === 1) {
      this.send(q[0] as Frame);
      return;
    }
    this.socket.cork();
    for (const f of q) this.send(f);
    this.socket.uncork();
  }

  /** Bytes written and not yet taken by the kernel. */
  get pending(): number {
    return this.socket.writableLength;
  }
}

/** The keys of the streams an event is for: its owner's, its project's, both, and its session's. */
function keysOf(e: LoggedEvent): string[] {
  const own = FollowKey.session(e.session);
  if (SESSION_ONLY_TYPES.has(e.type)) return [own];
  return [FollowKey.user(e.owner), FollowKey.project(e.project), FollowKey.ownProject(e.project, e.owner), own];
}

function frame(type: string, id: number | undefined, data: string | Buffer): Frame {
  const head = `${id === undefined ? '' : `id: ${id}\n`}event: ${type}\ndata: `;
  return new Frame(typeof data === 'string' ? Buffer.from(`${head}${data}\n\n`) : Buffer.concat([Buffer.from(head), data, TAIL]));
}

const frameOf = (e: LoggedEvent): Frame => frame(e.type, e.id, e.data);

/** Last-Event-ID as an id, or undefined when it is not one this server could have sent. */
function parseEventId(text: string): number | undefined {
  const t = text.trim();
  if (!/^\d{1,16}$/.test(t)) return undefined;
  const n = Number(t);
  return Number.isSafeInteger(n) ? n : undefined;
}

function drained(socket: Socket): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      socket.off('drain', done);
      socket.off('close', done);
      resolve();
    };
    socket.on('drain', done);
    socket.on('close', done);
  });
}

export class Hub {
  private readonly byKey = new Map<string, Set<Stream>>();
  private readonly streams = new Set<Stream>();
  private readonly perUser = new Map<string, number>();
  /** Streams counted against the caps: opened, or accepted and about to open. */
  private count = 0;
  private timer: NodeJS.Timeout | undefined;
  private draining = false;
  private eventsDelivered = 0;
  private readonly endedBy = new Map<string, number>();

  constructor(
    private readonly feed: FeedLog,
    private readonly o: HubOptions,
    private readonly log: Logger,
    private readonly metrics: Metrics | undefined,
  ) {
    if (metrics !== undefined) metrics.live = { streams: () => this.count, events: () => this.eventsDelivered, ended: () => this.endedBy, unlogged: () => this.feed.unlogged() };
  }

  /** Follows the store's commits and starts the timer. */
  async start(): Promise<void> {
    await this.feed.start((events) => this.deliver(events));
    this.timer = setInterval(() => this.tick(), this.o.heartbeatMs);
    this.timer.unref();
  }

  /**
   * Accepts a stream (caps, the ticket's single use, where a Last-Event-ID stands) and answers
   * how it opens; 429, 503 or 401 when it cannot.
   */
  async open(f: Follow): Promise<OpenedStream> {
    if (this.draining) return { status: 200, eventStream: { attach: (res) => res.end(frame('end', undefined, '{"reason":"shutdown"}').raw), cancel: () => undefined } };
    this.reserve(f.user);
    let handed = false;
    try {
      if (f.ticket !== undefined && !(await this.feed.claimTicket(f.ticket.id, f.ticket.expiresAtMs))) throw new DomainError('invalid_token', 'ticket already used');
      let cursor = this.feed.head;
      let replayTo = cursor;
      let reset: string | undefined;
      if (f.lastEventId !== undefined) {
        const after = parseEventId(f.lastEventId);
        const at = after === undefined ? { where: 'unknown', newest: cursor } : await this.feed.check(after);
        // a replay goes up to what was committed when the client asked, even past what this instance has read yet
        replayTo = at.newest;
        if (at.where === 'ok') cursor = after as number;
        else reset = at.where;
      }
      handed = true;
      return {
        status: 200,
        eventStream: {
          attach: (res) => this.attach(res, f, cursor, replayTo, reset),
          cancel: () => this.release(f.user),
        },
      };
    } finally {
      if (!handed) this.release(f.user);
    }
  }

  /**
   * Events no commit makes (a reply's text as it comes), logged and delivered as the others;
   * resolves once they are logged.
   */
  publish(events: readonly ChangeEvent[]): Promise<void> {
    return this.feed.publish(events);
  }

  /** The id of the newest event this instance has delivered: a stream opened with it as Last-Event-ID gets everything after. */
  get head(): number {
    return this.feed.head;
  }

  /** SIGTERM: every stream gets its final event and ends; new ones end as they open. */
  /**
   * Ends every stream with its final event, for the shutdown: once the feed has delivered what
   * was committed before (at most DRAIN_CATCH_UP_MS), so the end of a reply recorded just before
   * (SIGTERM interrupts every reply) reaches its streams ahead of their final event.
   */
  async drain(): Promise<void> {
    this.draining = true;
    await this.feed.caughtUp(DRAIN_CATCH_UP_MS).catch(() => undefined);
    const n = this.streams.size;
    for (const s of this.streams) this.end(s, 'shutdown');
    if (n > 0) this.log.info('ended the event streams for shutdown', { streams: n });
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    await this.feed.close();
  }

  private reserve(user: string): void {
    const mine = this.perUser.get(user) ?? 0;
    if (mine >= this.o.maxStreamsPerUser) throw new DomainError('too_many_streams', 'Too many event streams');
    if (this.count >= this.o.maxStreams) throw new ServerBusy();
    this.perUser.set(user, mine + 1);
    this.count++;
  }

  private release(user: string): void {
    this.count--;
    const mine = (this.perUser.get(user) ?? 1) - 1;
    if (mine === 0) this.perUser.delete(user);
    else this.perUser.set(user, mine);
  }

  private attach(res: ServerResponse, f: Follow, cursor: number, replayTo: number, reset: string | undefined): void {
    const socket = res.socket;
    if (socket === null) {
      this.release(f.user);
      return;
    }
    const s = new Stream(res, socket, f, cursor);
    this.streams.add(s);
    res.once('close', () => this.gone(s));
    // a write racing the client's going away must not become an uncaught 'error'
    res.on('error', () => undefined);
    if (this.draining) {
      this.end(s, 'shutdown');
      return;
    }
    this.replay(s, replayTo, reset).catch((e: unknown) => {
      this.log.error('an event stream failed; it was cut', { reqId: f.reqId, err: e });
      res.destroy();
    });
  }

  /** Writes what the stream missed, as fast as the client reads it, then makes it live. */
  private async replay(s: Stream, replayTo: number, reset: string | undefined): Promise<void> {
    if (reset !== undefined) this.reset(s, reset);
    for (;;) {
      if (s.ended) return;
      // events this instance delivers live from now on are skipped up to the stream's cursor
      const upTo = Math.max(this.feed.head, replayTo);
      if (s.cursor >= upTo) break;
      const got = await this.feed.read(s.cursor, upTo, REPLAY_PAGE);
      if (s.ended) return;
      if (got === undefined) {
        // the window moved past the stream while it was reading
        this.reset(s, 'gone');
        continue;
      }
      for (const e of got) {
        if (e.id <= s.cursor) continue;
        if (e.type === 'reset') this.reset(s, 'import', e.id);
        else if (this.follows(s, e)) {
          s.send(frameOf(e));
          s.cursor = e.id;
          if (s.follow.last?.(e) === true) {
            this.end(s, 'done');
            return;
          }
          if (e.type === 'session.deleted' && s.follow.session !== undefined) {
            this.end(s, 'deleted');
            return;
          }
        }
        s.cursor = e.id;
      }
      if (s.pending > REPLAY_HIGH_WATER) await drained(s.socket);
    }
    // caught up, in the same turn of the event loop as the check: no event can fall in between
    s.live = true;
    let set = this.byKey.get(s.follow.key);
    if (set === undefined) this.byKey.set(s.follow.key, (set = new Set()));
    set.add(s);
    if (s.follow.only === undefined) s.send(frame('ready', s.cursor, '{}'));
  }

  private follows(s: Stream, e: LoggedEvent): boolean {
    return keysOf(e).includes(s.follow.key) && (s.follow.only === undefined || s.follow.only(e));
  }

  /** `reset`: what follows Last-Event-ID cannot be replayed; the client reads everything again. */
  private reset(s: Stream, reason: string, id: number = this.feed.head): void {
    s.flush();
    s.cursor = Math.max(s.cursor, id);
    s.send(frame('reset', s.cursor, JSON.stringify({ reason })));
  }

  /**
   * New events, in id order: each serialized once, and given to every live stream it is for. A
   * stream's events of one delivery (a turn and the session.updated it makes, a group's writes
   * of one user) go out in one system call: on each of them, the call is most of what it costs.
   */
  private deliver(events: readonly LoggedEvent[]): void {
    this.eventsDelivered += events.length;
    const touched: Stream[] = [];
    for (const e of events) {
      if (e.type === 'reset') {
        // an import (in the log), or events this instance missed (the feed says so: 'gone')
        const gone = e.data === GONE_RESET;
        for (const s of this.streams) {
          if (!s.live || s.ended) continue;
          this.reset(s, gone ? 'gone' : 'import', e.id);
          // a reply's stream cannot be read again, and its last event may be among those missed
          if (gone && s.follow.only !== undefined) this.end(s, 'gone');
        }
        continue;
      }
      let bytes: Frame | undefined;
      for (const key of keysOf(e)) {
        const set = this.byKey.get(key);
        if (set === undefined) continue;
        for (const s of set) {
          if (e.id <= s.cursor) continue;
          if (s.follow.only !== undefined && !s.follow.only(e)) {
            s.cursor = e.id;
            continue;
          }
          if (s.pending > this.o.bufferBytes) {
            this.end(s, 'slow');
            continue;
          }
          bytes ??= frameOf(e);
          if (s.queue === undefined) {
            s.queue = [bytes];
            touched.push(s);
          } else s.queue.push(bytes);
          s.cursor = e.id;
          if (s.follow.last?.(e) === true) this.end(s, 'done');
        }
      }
      if (e.type === 'session.deleted') {
        const set = this.byKey.get(FollowKey.session(e.session));
        if (set !== undefined) for (const s of set) this.end(s, 'deleted');
      }
    }
    for (const s of touched) s.flush();
  }

  /** Ends a stream with a final event saying why. */
  private end(s: Stream, reason: EndReason): void {
    if (s.ended) return;
    s.ended = true;
    this.unindex(s);
    this.endedBy.set(reason, (this.endedBy.get(reason) ?? 0) + 1);
    const fields = { reqId: s.follow.reqId, user: s.follow.user, reason, seconds: Math.round((Date.now() - s.opened) / 1000) };
    if (reason === 'slow') this.log.warn('an event stream fell too far behind (EVENTS_BUFFER); it was cut off', { ...fields, unsentBytes: s.pending });
    else this.log.debug('event stream ended', fields);
    s.flush();
    // a stream that answered one request closes after its last event (or its reset), with nothing more
    if (reason !== 'done' && reason !== 'gone') s.send(frame('end', undefined, JSON.stringify({ reason })));
    s.res.end();
    if (!s.res.writableFinished) {
      // a client that does not read even its final event goes after WRITE_TIMEOUT
      const t = setTimeout(() => s.res.destroy(), this.o.writeTimeoutMs);
      t.unref();
      s.res.once('close', () => clearTimeout(t));
    }
  }

  /** The connection closed, whoever closed it. */
  private gone(s: Stream): void {
    if (!s.ended) {
      s.ended = true;
      this.unindex(s);
      this.endedBy.set('client', (this.endedBy.get('client') ?? 0) + 1);
    }
    if (this.streams.delete(s)) this.release(s.follow.user);
  }

  private unindex(s: Stream): void {
    if (!s.live) return;
    s.live = false;
    const set = this.byKey.get(s.follow.key);
    if (set === undefined) return;
    set.delete(s);
    if (set.size === 0) this.byKey.delete(s.follow.key);
  }

  /** Every heartbeat: the feed's housekeeping, then each stream's heartbeat, expiry and progress. */
  private tick(): void {
    const now = Date.now();
    this.feed.tick(now);
    const heartbeat = new Frame(Buffer.from(`: heartbeat\nid: ${this.feed.head}\n\n`));
    const stallTicks = Math.max(1, Math.ceil(this.o.writeTimeoutMs / this.o.heartbeatMs));
    for (const s of this.streams) {
      if (s.ended) continue;
      if (s.follow.untilMs !== undefined && s.follow.untilMs <= now) {
        this.end(s, 'expired');
        continue;
      }
      const pending = s.pending;
      if (pending > 0 && pending >= s.lastPending) {
        if (++s.stalled >= stallTicks) {
          this.log.warn('an event stream took no byte for WRITE_TIMEOUT; connection closed', { reqId: s.follow.reqId, user: s.follow.user, unsentBytes: pending });
          if (this.metrics !== undefined) this.metrics.writeTimeouts++;
          s.res.destroy();
          continue;
        }
      } else s.stalled = 0;
      s.lastPending = pending;
      // only to a stream that was written nothing for a whole interval (one just opened has its
      // `ready`); the newest id goes with it: a reconnect does not replay what it passed over
      if (s.live && !s.wrote) s.send(heartbeat);
      s.wrote = false;
    }
  }
}
