// Counters and histograms in Prometheus text format (version 0.0.4). Each route owns its
// counters, so counting a request is an array bump, not a label lookup.
import { getHeapSpaceStatistics } from 'node:v8';
import type { StoreStats } from './store/store.js';

const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];
const COMMIT_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1];
const EVENT_LOOP_BUCKETS = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5];
/** The event loop is sampled by a timer due this often; how late it fires is how long the loop was busy. */
const EVENT_LOOP_SAMPLE_MS = 10;

export class Histogram {
  readonly counts: number[];
  sum = 0;
  count = 0;
  constructor(readonly bounds: readonly number[]) {
    this.counts = new Array<number>(bounds.length).fill(0);
  }
  observe(v: number): void {
    this.sum += v;
    this.count++;
    const b = this.bounds;
    for (let i = 0; i < b.length; i++) {
      if (v <= (b[i] as number)) {
        this.counts[i] = (this.counts[i] as number) + 1;
        return;
      }
    }
  }
  /** Bucket lines (cumulative), then _sum and _count. */
  render(name: string, labels: string): string[] {
    const out: string[] = [];
    let acc = 0;
    const sep = labels === '' ? '' : ',';
    for (let i = 0; i < this.bounds.length; i++) {
      acc += this.counts[i] as number;
      out.push(`${name}_bucket{${labels}${sep}le="${String(this.bounds[i])}"} ${acc}`);
    }
    out.push(`${name}_bucket{${labels}${sep}le="+Inf"} ${this.count}`);
    const l = labels === '' ? '' : `{${labels}}`;
    out.push(`${name}_sum${l} ${this.sum}`, `${name}_count${l} ${this.count}`);
    return out;
  }
}

/** The counters of one route (method and pattern). */
export class RouteStats {
  readonly statuses = new Map<number, number>();
  readonly latency = new Histogram(LATENCY_BUCKETS);
  constructor(
    readonly method: string,
    readonly route: string,
  ) {}
  observe(status: number, seconds: number): void {
    this.statuses.set(status, (this.statuses.get(status) ?? 0) + 1);
    this.latency.observe(seconds);
  }
}

export interface Gauges {
  readonly engine: string;
  readonly store: StoreStats;
  readonly providers: number;
}

function label(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
}

const KNOWN_METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS']);
/** The route label of requests whose path matched no route. */
export const UNMATCHED = '(unmatched)';

export class Metrics {
  private readonly routes: RouteStats[] = [];
  private readonly byKey = new Map<string, RouteStats>();
  /** One observation per store commit (a group of writes made durable together). */
  readonly commits = new Histogram(COMMIT_BUCKETS);
  committedWrites = 0;
  rateLimited = 0;
  /** Idle connections closed to let a newcomer in (MAX_CONNECTIONS). */
  connectionsEvicted = 0;
  /** Connections answered 503 because every slot was busy. */
  connectionsRefused = 0;
  /** Answers cut off because the client did not take them (WRITE_TIMEOUT). */
  writeTimeouts = 0;
  /** Requests answered 429 past their user's share: MAX_REQUESTS_PER_USER, a quarter of BODY_MEMORY, or 2 whole lists being sent. */
  overShare = 0;
  /** How late a timer due every 10 ms fired: how long a request arriving then waited for the event loop. */
  readonly eventLoopDelay = new Histogram(EVENT_LOOP_BUCKETS);
  /** What the connection and body limits hold now (set by the app). */
  load: { connections(): number; bodyBytes(): number; requestsInFlight(): number; busiestInFlight(): number } | undefined;
  /** The low-memory guard (set by the app). */
  memory: { low(): boolean; readonly refused: number } | undefined;
  /** The live feed's streams and events (set by it; undefined with EVENTS=off). */
  live: { streams(): number; events(): number; ended(): ReadonlyMap<string, number>; unlogged(): number } | undefined;
  /** What the background purge deleted (set by the server; undefined with PURGE_INTERVAL=off). */
  purged: { readonly sessions: number; readonly turns: number } | undefined;
  /** Replies from the model: in progress, and ended by status (set by the app). */
  replies: (() => { readonly inProgress: number; readonly ended: ReadonlyMap<string, number>; readonly heldBytes: number; readonly heldLimit: number }) | undefined;
  private readonly startSeconds = Date.now() / 1000;

  /** The counters for one route; `route` is its pattern, never a raw path. */
  forRoute(method: string, route: string): RouteStats {
    const key = `${method} ${route}`;
    let r = this.byKey.get(key);
    if (r === undefined) {
      r = new RouteStats(method, route);
      this.routes.push(r);
      this.byKey.set(key, r);
    }
    return r;
  }

  /** Counters for an answer no route handled (404, 405, preflight): the method from a fixed set, so labels stay few. */
  forUnrouted(method: string, pattern: string | undefined): RouteStats {
    return this.forRoute(KNOWN_METHODS.has(method) ? method : 'other', pattern ?? UNMATCHED);
  }

  /**
   * Starts sampling the event loop's delay into `eventLoopDelay`; returns what stops it. A timer
   * of our own rather than perf_hooks.monitorEventLoopDelay: that one's histogram cannot be read
   * as cumulative buckets without being reset at each scrape, which two scrapers would fight over.
   */
  watchEventLoop(): () => void {
    let last = performance.now();
    const timer = setInterval(() => {
      const now = performance.now();
      this.eventLoopDelay.observe(Math.max(0, now - last - EVENT_LOOP_SAMPLE_MS) / 1000);
      last = now;
    }, EVENT_LOOP_SAMPLE_MS);
    timer.unref();
    return () => clearInterval(timer);
  }

  render(g: Gauges): string {
    const p = 'chat_session_api';
    const lines: string[] = [];
    const meta = (name: string, type: string, help: string): void => {
      lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
    };
    meta(`${p}_http_requests_total`, 'counter', 'HTTP requests answered, by method, route pattern and status.');
    for (const r of this.routes) {
      for (const [status, n] of r.statuses) lines.push(`${p}_http_requests_total{method="${r.method}",route="${label(r.route)}",status="${status}"} ${n}`);
    }
    meta(`${p}_http_request_duration_seconds`, 'histogram', 'Time from request to answer, by method and route pattern.');
    for (const r of this.routes) {
      if (r.latency.count > 0) lines.push(...r.latency.render(`${p}_http_request_duration_seconds`, `method="${r.method}",route="${label(r.route)}"`));
    }
    meta(`${p}_rate_limited_total`, 'counter', 'Requests answered 429.');
    lines.push(`${p}_rate_limited_total ${this.rateLimited}`);
    meta(`${p}_store_info`, 'gauge', 'The storage engine in use (STORE), as a label.');
    lines.push(`${p}_store_info{engine="${label(g.engine)}"} 1`);
    if (this.load !== undefined) {
      meta(`${p}_connections`, 'gauge', 'Open client connections (MAX_CONNECTIONS bounds them).');
      lines.push(`${p}_connections ${this.load.connections()}`);
      meta(`${p}_request_body_bytes`, 'gauge', 'Request body bytes held now (BODY_MEMORY bounds them).');
      lines.push(`${p}_request_body_bytes ${this.load.bodyBytes()}`);
      meta(`${p}_requests_in_flight`, 'gauge', 'Requests from their headers to their answer being sent, event streams included.');
      lines.push(`${p}_requests_in_flight ${this.load.requestsInFlight()}`);
      meta(`${p}_requests_in_flight_busiest`, 'gauge', 'The most requests in flight of one user (or one address without a token): MAX_REQUESTS_PER_USER bounds it.');
      lines.push(`${p}_requests_in_flight_busiest ${this.load.busiestInFlight()}`);
    }
    if (this.memory !== undefined) {
      meta(`${p}_memory_low`, 'gauge', 'Whether writes are refused for want of memory now (1) or not (0).');
      lines.push(`${p}_memory_low ${this.memory.low() ? 1 : 0}`);
      meta(`${p}_memory_refusals_total`, 'counter', 'Writes answered 503 Server is low on memory.');
      lines.push(`${p}_memory_refusals_total ${this.memory.refused}`);
    }
    meta(`${p}_connections_evicted_total`, 'counter', 'Idle connections closed to let new ones in.');
    lines.push(`${p}_connections_evicted_total ${this.connectionsEvicted}`);
    meta(`${p}_connections_refused_total`, 'counter', 'Connections answered 503 because every connection was busy.');
    lines.push(`${p}_connections_refused_total ${this.connectionsRefused}`);
    meta(`${p}_write_timeouts_total`, 'counter', 'Answers cut off because the client did not read them.');
    lines.push(`${p}_write_timeouts_total ${this.writeTimeouts}`);
    meta(`${p}_requests_over_share_total`, 'counter', "Requests answered 429 Too many requests in flight: past their user's share (MAX_REQUESTS_PER_USER, a quarter of BODY_MEMORY, or 2 whole lists being sent).");
    lines.push(`${p}_requests_over_share_total ${this.overShare}`);
    if (this.live !== undefined) {
      meta(`${p}_event_streams`, 'gauge', 'Event streams open (MAX_STREAMS bounds them).');
      lines.push(`${p}_event_streams ${this.live.streams()}`);
      meta(`${p}_events_total`, 'counter', 'Events the live feed delivered to this instance\'s streams (one per change event, however many streams took it).');
      lines.push(`${p}_events_total ${this.live.events()}`);
      meta(`${p}_event_streams_ended_total`, 'counter', 'Event streams ended, by reason: client (it went away), slow, expired, deleted, shutdown, done (a reply\'s, after its last event), gone (a reply\'s, after a reset: its instance missed events).');
      for (const [reason, n] of this.live.ended()) lines.push(`${p}_event_streams_ended_total{reason="${label(reason)}"} ${n}`);
      meta(`${p}_events_unlogged`, 'gauge', "Replies' pieces of text told to the live feed and not yet in its log (on PostgreSQL, waiting for the shared log's append; always 0 on sqlite). A reply with 64 of them waits before it reads more from its provider.");
      lines.push(`${p}_events_unlogged ${this.live.unlogged()}`);
    }
    if (this.replies !== undefined) {
      const r = this.replies();
      meta(`${p}_replies_in_progress`, 'gauge', 'Replies this instance is asking a model for now (REPLIES_MAX bounds them).');
      lines.push(`${p}_replies_in_progress ${r.inProgress}`);
      meta(`${p}_replies_total`, 'counter', 'Replies ended, by status: complete, error, interrupted.');
      for (const status of ['complete', 'error', 'interrupted']) lines.push(`${p}_replies_total{status="${status}"} ${r.ended.get(status) ?? 0}`);
      meta(`${p}_replies_held_bytes`, 'gauge', 'Bytes the replies in progress hold unfinished: lines and events being read, text not yet written, tool calls.');
      lines.push(`${p}_replies_held_bytes ${r.heldBytes}`);
      meta(`${p}_replies_held_limit_bytes`, 'gauge', 'What they may hold together (a share of MEMORY_LIMIT): a reply that would pass it ends with error.');
      lines.push(`${p}_replies_held_limit_bytes ${r.heldLimit}`);
    }
    meta(`${p}_sessions`, 'gauge', 'Chat sessions stored.');
    lines.push(`${p}_sessions ${g.store.sessions}`);
    meta(`${p}_turns`, 'gauge', 'Turns stored.');
    lines.push(`${p}_turns ${g.store.turns}`);
    meta(`${p}_store_bytes`, 'gauge', 'UTF-8 bytes of the JSON of every stored session and turn (the same on every engine).');
    lines.push(`${p}_store_bytes ${g.store.bytes}`);
    meta(`${p}_store_tokens`, 'gauge', "Tokens of the usage of every stored turn, by kind: input, output, cached (what GET /api/v1/usage counts, over every user; at most 2^53 - 1).");
    lines.push(`${p}_store_tokens{kind="input"} ${g.store.inputTokens}`, `${p}_store_tokens{kind="output"} ${g.store.outputTokens}`, `${p}_store_tokens{kind="cached"} ${g.store.cachedTokens}`);
    if (this.purged !== undefined) {
      meta(`${p}_purged_sessions_total`, 'counter', 'Expired sessions whose storage the background purge deleted (by this instance).');
      lines.push(`${p}_purged_sessions_total ${this.purged.sessions}`);
      meta(`${p}_purged_turns_total`, 'counter', 'Turns of those sessions deleted with them.');
      lines.push(`${p}_purged_turns_total ${this.purged.turns}`);
    }
    meta(`${p}_commit_duration_seconds`, 'histogram', 'Time to make a group of writes durable (one per group commit).');
    lines.push(...this.commits.render(`${p}_commit_duration_seconds`, ''));
    meta(`${p}_committed_writes_total`, 'counter', 'Writes made durable (several share one commit).');
    lines.push(`${p}_committed_writes_total ${this.committedWrites}`);
    for (const e of g.store.engine) {
      meta(`${p}_${e.name}`, e.type, e.help);
      lines.push(`${p}_${e.name} ${e.value}`);
    }
    meta(`${p}_providers`, 'gauge', 'Providers loaded from the providers file.');
    lines.push(`${p}_providers ${g.providers}`);
    const mem = process.memoryUsage();
    meta('process_resident_memory_bytes', 'gauge', 'Resident memory size in bytes.');
    lines.push(`process_resident_memory_bytes ${mem.rss}`);
    meta('nodejs_heap_used_bytes', 'gauge', 'V8 heap in use.');
    lines.push(`nodejs_heap_used_bytes ${mem.heapUsed}`);
    meta('nodejs_external_memory_bytes', 'gauge', 'Memory outside the V8 heap held by its objects (Buffers among them).');
    lines.push(`nodejs_external_memory_bytes ${mem.external}`);
    meta('nodejs_heap_space_size_total_bytes', 'gauge', 'Size of each space of the V8 heap (new_space: the young generation, at most 8 MiB; see docs/DECISIONS.md).');
    for (const s of getHeapSpaceStatistics()) lines.push(`nodejs_heap_space_size_total_bytes{space="${s.space_name}"} ${s.space_size}`);
    meta('nodejs_eventloop_delay_seconds', 'histogram', 'How late a timer due every 10 ms fired: how long the event loop was busy while requests may have waited.');
    lines.push(...this.eventLoopDelay.render('nodejs_eventloop_delay_seconds', ''));
    meta('process_start_time_seconds', 'gauge', 'Start time of the process since the Unix epoch.');
    lines.push(`process_start_time_seconds ${Math.floor(this.startSeconds)}`);
    return lines.join('\n') + '\n';
  }
}
