// The hot sessions of GET by id and the hot pages of session lists, kept in V8's heap for an
// engine whose one process decides every write (sqlite): filled by reads, replaced or dropped at
// the serial point as each group commits, and bounded by bytes, a share of the heap
// (recordCacheBudget, ../memory.ts).
import type { SessionKey } from '../domain/order.js';
import type { ChatSession } from '../domain/records.js';
import type { Liveness } from '../domain/retention.js';
import type { Change } from './changes.js';
import type { EngineGauge, Page, SessionFilter, SessionRecord } from './store.js';

interface RecordEntry {
  readonly kind: 'record';
  readonly record: SessionRecord;
  readonly bytes: number;
  /** Read since the clock hand last passed it: it gets one more turn instead of going. */
  used: boolean;
}

interface PageEntry {
  readonly kind: 'page';
  readonly page: Page<SessionRecord, SessionKey>;
  readonly bytes: number;
  used: boolean;
  /** The list it belongs to (listOf): any change of a session of that user or project drops it. */
  readonly list: string;
  /** The first moment (ms) one of its sessions is no longer live: from then on it is read again. */
  readonly liveUntil: number;
}

type Entry = RecordEntry | PageEntry;

const RECORD = 's\0';
const PAGE = 'l\0';

/**
 * What an entry is charged: its JSON (two bytes a character at worst), the session parsed from
 * it (about one and a half times the JSON for a typical session, measured), the version, the
 * key and the entry. An estimate on the high side, so the budget is never passed.
 */
export function entryBytes(record: SessionRecord): number {
  return 4 * record.json.length + 2 * record.version.length + 256;
}

/** What a page is charged: each session's JSON (two bytes a character at worst) and its key, and the page's own. */
function pageBytes(page: Page<SessionRecord, SessionKey>, key: string): number {
  let n = 256 + 2 * key.length;
  for (const r of page.items) n += 2 * (r.json.length + r.version.length) + 96;
  return n;
}

/** The list a filter reads, as changes name it: its user's, else its project's sessions. */
function listOf(filter: SessionFilter): string | undefined {
  if (filter.user !== undefined) return `u\0${filter.user}`;
  if (filter.project !== undefined) return `p\0${filter.project}`;
  return undefined;
}

/**
 * What a page's answer depends on besides the committed sessions and the moment: the filter
 * (without its moment: `now` moves every millisecond, RETENTION_DAYS does not), the cursor and
 * the limit.
 */
function pageKey(filter: SessionFilter, after: SessionKey | undefined, limit: number): string {
  const live = filter.live === undefined ? null : filter.live.cutoff === undefined ? 'expiry' : Date.parse(filter.live.now) - Date.parse(filter.live.cutoff);
  return JSON.stringify([filter.user ?? null, filter.project ?? null, filter.archived, filter.nameContains ?? null, filter.tags ?? null, live, after?.updatedAt ?? null, after?._id ?? null, limit]);
}

/**
 * When the first of a page's sessions stops being live (src/domain/retention.ts isLive: its own
 * expiry, else its last activity + RETENTION_DAYS); Infinity when none ever does. Sessions the
 * page left out as gone stay gone as time passes, so until then the page is what a read would give.
 */
function liveUntil(page: Page<SessionRecord, SessionKey>, live: Liveness | undefined): number {
  if (live === undefined) return Infinity;
  const retention = live.cutoff === undefined ? undefined : Date.parse(live.now) - Date.parse(live.cutoff);
  let until = Infinity;
  let oldest: string | undefined;
  for (const r of page.items) {
    // only a session that may have an own expiry (or be kept for good) is parsed, apart from the
    // record (the page does not keep the parsed session): the text can be in its metadata too
    if (r.json.includes('"expiresAt":')) {
      const s = JSON.parse(r.json) as ChatSession;
      const end = typeof s.expiresAt === 'string' ? Date.parse(s.expiresAt) : s.expiresAt === null || retention === undefined ? Infinity : Date.parse(s.updatedAt) + retention;
      if (end < until) until = end;
    } else if (retention !== undefined) {
      const at = updatedAtOf(r.json);
      if (oldest === undefined || at < oldest) oldest = at;
    }
  }
  if (oldest !== undefined && retention !== undefined) until = Math.min(until, Date.parse(oldest) + retention);
  return until;
}

/**
 * A session's updatedAt read from its JSON without parsing it: the first `"updatedAt":"` is its
 * own (only string fields come before it, in which a quote is escaped).
 */
function updatedAtOf(json: string): string {
  const at = json.indexOf('"updatedAt":"') + 13;
  return json.slice(at, json.indexOf('"', at));
}

/**
 * Sessions by id and pages of lists, evicted by CLOCK (second chance) when the bytes would pass
 * the budget: a hit only sets a flag, so a read pays no reordering. Never holds anything older
 * than the last commit: `committed` runs when a group's commit resolves, before any of its
 * writes is answered, and every read that fills the cache runs on the same thread, whole, in
 * between. A session changed is replaced; the pages of its owner's and its project's lists are
 * dropped, to be read again.
 */
export class RecordCache {
  private readonly entries = new Map<string, Entry>();
  /** The keys of the cached pages of each list (listOf). */
  private readonly lists = new Map<string, Set<string>>();
  private held = 0;
  private hits = 0;
  private misses = 0;
  private pageHits = 0;
  private pageMisses = 0;

  constructor(readonly budget: number) {}

  get(id: string): SessionRecord | undefined {
    const e = this.entries.get(RECORD + id);
    if (e?.kind !== 'record') {
      this.misses++;
      return undefined;
    }
    this.hits++;
    e.used = true;
    return e.record;
  }

  /** Keeps a record just read from the committed state (one too large for a sixteenth of the budget is not kept). */
  put(id: string, record: SessionRecord): void {
    this.keep(RECORD + id, { kind: 'record', record, bytes: entryBytes(record), used: false });
  }

  /** A page of a list as a read with the same filter, cursor and limit would give it now, if kept. */
  getPage(filter: SessionFilter, after: SessionKey | undefined, limit: number): Page<SessionRecord, SessionKey> | undefined {
    const key = PAGE + pageKey(filter, after, limit);
    const e = this.entries.get(key);
    if (e?.kind !== 'page') {
      this.pageMisses++;
      return undefined;
    }
    if (filter.live !== undefined && Date.parse(filter.live.now) >= e.liveUntil) {
      this.drop(key);
      this.pageMisses++;
      return undefined;
    }
    this.pageHits++;
    e.used = true;
    return e.page;
  }

  /** Keeps a page just read from the committed state. */
  putPage(filter: SessionFilter, after: SessionKey | undefined, limit: number, page: Page<SessionRecord, SessionKey>): void {
    const list = listOf(filter);
    if (list === undefined) return;
    const key = PAGE + pageKey(filter, after, limit);
    if (!this.keep(key, { kind: 'page', page, bytes: pageBytes(page, key), used: false, list, liveUntil: liveUntil(page, filter.live) })) return;
    let keys = this.lists.get(list);
    if (keys === undefined) this.lists.set(list, (keys = new Set()));
    keys.add(key);
  }

  /** Puts an entry in, making room; false when it is too large for a sixteenth of the budget (not kept). */
  private keep(key: string, e: Entry): boolean {
    if (e.bytes > this.budget / 16) return false;
    this.drop(key);
    while (this.held + e.bytes > this.budget && this.entries.size > 0) this.evictOne();
    this.entries.set(key, e);
    this.held += e.bytes;
    return true;
  }

  /**
   * A group's changes, once committed: a cached session is replaced by what the group left
   * (the writer decided its JSON and version, the same bytes the engine stored), a deleted one
   * dropped. Sessions not cached stay out: the cache holds what is read.
   */
  committed(changes: readonly Change[]): void {
    if (this.entries.size === 0) return;
    for (const c of changes) {
      // any change but a delta (which leaves its session's fields alone) may move, add or drop a session in its lists
      if (c.kind !== 'delta') this.dropLists(c.session);
      switch (c.kind) {
        case 'create':
        case 'fork':
          // a new id: nothing of it can be cached
          break;
        case 'update':
          this.replace(c.session._id, { session: c.session, json: c.json, version: c.version });
          break;
        case 'turn':
        case 'editTurn':
        case 'deleteTurns':
          this.replace(c.session._id, { session: c.session, json: c.sessionJson, version: c.version });
          break;
        case 'delta':
          // a delta changes its turn, not its session's JSON or version
          break;
        case 'delete':
          this.drop(RECORD + c.id);
          break;
      }
    }
  }

  /** Drops these sessions and their lists' pages (a commit that failed in a way that leaves its outcome unknown). */
  forget(sessions: Iterable<ChatSession>): void {
    for (const s of sessions) {
      this.drop(RECORD + s._id);
      this.dropLists(s);
    }
  }

  /** Drops everything (writes that did not pass the serial writer: an import). */
  clear(): void {
    this.entries.clear();
    this.lists.clear();
    this.held = 0;
  }

  /** Drops the cached pages of the lists a session is in: its owner's and its project's. */
  private dropLists(s: ChatSession): void {
    for (const list of [`u\0${s.user}`, `p\0${s.project}`]) {
      const keys = this.lists.get(list);
      if (keys === undefined) continue;
      this.lists.delete(list);
      for (const key of keys) this.drop(key);
    }
  }

  /** What /metrics shows of it, each name after `prefix` (the engine's). */
  gauges(prefix: string): EngineGauge[] {
    return [
      { name: `${prefix}_record_cache_bytes`, type: 'gauge', help: 'What the sessions and pages kept are charged (an estimate on the high side of their heap).', value: this.held },
      { name: `${prefix}_record_cache_budget_bytes`, type: 'gauge', help: 'The most they may be charged: a sixty-fourth of the heap limit, 1 to 64 MiB.', value: this.budget },
      { name: `${prefix}_record_cache_sessions`, type: 'gauge', help: 'Sessions kept for GET by id.', value: this.entries.size - this.pages() },
      { name: `${prefix}_record_cache_pages`, type: 'gauge', help: 'Pages of session lists kept.', value: this.pages() },
      { name: `${prefix}_record_cache_hits_total`, type: 'counter', help: 'Sessions read by id from the cache since start.', value: this.hits },
      { name: `${prefix}_record_cache_misses_total`, type: 'counter', help: 'Sessions asked by id that were not kept (read from the file) since start.', value: this.misses },
      { name: `${prefix}_record_cache_page_hits_total`, type: 'counter', help: 'Pages of session lists answered from the cache since start.', value: this.pageHits },
      { name: `${prefix}_record_cache_page_misses_total`, type: 'counter', help: 'Pages of session lists read from the file since start.', value: this.pageMisses },
    ];
  }

  private pages(): number {
    let n = 0;
    for (const keys of this.lists.values()) n += keys.size;
    return n;
  }

  private replace(id: string, record: SessionRecord): void {
    if (!this.entries.has(RECORD + id)) return;
    this.put(id, record);
  }

  private drop(key: string): void {
    const e = this.entries.get(key);
    if (e === undefined) return;
    this.entries.delete(key);
    this.held -= e.bytes;
    if (e.kind === 'page') this.unlist(key, e);
  }

  private unlist(key: string, e: PageEntry): void {
    const keys = this.lists.get(e.list);
    keys?.delete(key);
    if (keys?.size === 0) this.lists.delete(e.list);
  }

  /** The clock hand is the Map's insertion order: a used entry goes to the back once, unused. */
  private evictOne(): void {
    for (const [id, e] of this.entries) {
      this.entries.delete(id);
      if (e.used) {
        e.used = false;
        this.entries.set(id, e);
        continue;
      }
      this.held -= e.bytes;
      if (e.kind === 'page') this.unlist(id, e);
      return;
    }
  }
}
