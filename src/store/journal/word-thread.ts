// The journal's search index on a thread of its own, so that indexing a turn (cutting its text
// into words, finding each word, laying the turn in its words' segments: ~11 µs for 1 KiB) is not paid on
// the thread every write and read waits for. The main thread writes each change into a ring of
// shared memory as it applies it to memory (a session's name, a turn's JSON as written, a
// document gone); the index thread owns the WordIndex, takes the changes from the ring every
// 2 ms while they come (and sleeps when none have come for a while), and answers queries.
//
// What was acknowledged is found: a query is posted after every change made before it was
// asked was written, and the thread takes what the ring holds before it answers. Its answers are
// names of documents; the main thread looks them up in memory as it is when the answer comes (a
// turn deleted meanwhile is skipped).
//
// The index is never replayed from the journal: after a load (and a reload, a `reindex`, or the
// thread lost) it is fed from memory, a bounded piece at a time, while the server serves; a
// search waits until it is fed. The thread's heap is its own V8 heap, with the same limit as the
// main thread's: it reports what it uses, and the low-memory guard watches it too.
import { isMainThread, parentPort, Worker, workerData, type MessagePort } from 'node:worker_threads';
import { turnTextOfJson } from '../../domain/search.js';
import { oldGenerationUsed, reportThreadHeap } from '../../memory.js';
import { lostAt } from '../faults.js';
import { StorageUnavailable } from '../store.js';
import { WordIndex } from './word-index.js';

export const WORD_INDEX_ROLE = 'chat-session-api:journal-word-index';

/** What a change does to a document: gone, or its words given (new: it has none yet). */
const REMOVE = 0;
const ADD_NAME = 1;
const SET_NAME = 2;
const ADD_TURN = 3;
const SET_TURN = 4;
const CLEAR = 5;
/** In the ring: the rest of the ring is unused, the next change is at its start. */
const WRAP = 255;

/**
 * A change as bytes: its kind (1 byte), the lengths of its document's key and of what it gives
 * (4 bytes each, little-endian), the key, then the name or the turn's JSON (UTF-8). In the ring a
 * change never wraps; a change that does not fit in what the thread has not taken yet goes in a
 * message of its own kind (`Spilt`), and the changes after it too until the thread has taken it.
 */
const HEADER = 9;

/** Changes that did not fit in the ring, in order, each encoded as in the ring; they follow what the ring holds before them. */
interface Spilt {
  readonly kind: 'spilt';
  readonly changes: readonly Uint8Array[];
}

type Query =
  | { readonly kind: 'plan'; readonly q: number; readonly words: readonly string[]; readonly walkFrom: number }
  | { readonly kind: 'find'; readonly q: number; readonly words: readonly string[] }
  | { readonly kind: 'holds'; readonly q: number; readonly words: readonly string[]; readonly docs: readonly string[] }
  | { readonly kind: 'size'; readonly q: number };

type ToIndex = Spilt | Query | { readonly kind: 'wake' };

type FromIndex =
  | { readonly kind: 'heap'; readonly used: number }
  | { readonly kind: 'answer'; readonly q: number; readonly answer: Answer };

/** A plan's answer: how many documents the rarest word starts (what reading them costs), and those that match when fewer than `walkFrom`. */
export interface Plan {
  readonly estimate: number;
  readonly docs: readonly string[] | undefined;
}

type Answer = Plan | readonly string[] | Uint8Array | number;

/**
 * The counters both threads share (a BigInt64Array): how far the main thread has written the
 * ring (bytes handed out since the thread started: the place in the ring is this modulo its
 * length), how far the thread has taken it, how many changes it has taken (ring and spilt), and
 * how many bytes of spilt ones. Then, as an Int32Array, whether the thread sleeps (1: the next
 * change wakes it with a message).
 */
const WRITTEN_HEAD = 0;
const TAKEN_HEAD = 1;
const TAKEN_DOCS = 2;
/** Bytes of spilt changes the thread has taken (what the main thread weighs its backlog by, with the ring's). */
const TAKEN_SPILT = 3;
const SHARED_BYTES = 40;
const SLEEPING_AT = 32;

/** While changes come, the thread looks for more this often... */
const POLL_MS = 2;
/** ...and sleeps once it has found none this many times in a row. */
const IDLE_POLLS = 50;

// ---- the index thread ----

/** Starts the index when this thread is the journal's index thread; false on any other thread. */
export function runWordIndexIfWorker(): boolean {
  if (isMainThread || parentPort === null) return false;
  const data = workerData as { role?: unknown; first?: unknown; ring?: unknown; shared?: unknown } | undefined;
  if (data?.role !== WORD_INDEX_ROLE || !(data.ring instanceof SharedArrayBuffer) || !(data.shared instanceof SharedArrayBuffer)) return false;
  serveIndex(parentPort, data.first === true, Buffer.from(data.ring), data.shared);
  return true;
}

/** How often the thread reports its heap, at most (the guard samples every 100 ms). */
const HEAP_REPORT_MS = 100;

function serveIndex(port: MessagePort, first: boolean, ring: Buffer, shared: SharedArrayBuffer): void {
  const index = new WordIndex();
  const progress = new BigInt64Array(shared, 0, 4);
  const sleeping = new Int32Array(shared, SLEEPING_AT, 1);
  const post = (m: FromIndex): void => port.postMessage(m);
  let taken = 0;
  let docs = 0;
  let spiltTaken = 0;
  let reportedAt = -Infinity;
  let reportTimer: NodeJS.Timeout | undefined;
  const reportHeap = (): void => {
    reportTimer = undefined;
    reportedAt = performance.now();
    post({ kind: 'heap', used: oldGenerationUsed() });
  };
  const apply = (bytes: Buffer, at: number): number => {
    if (first && lostAt('index-thread')) process.exit(1);
    const op = bytes[at] as number;
    const keyEnd = at + HEADER + bytes.readUInt32LE(at + 1);
    const end = keyEnd + bytes.readUInt32LE(at + 5);
    const doc = bytes.toString('utf8', at + HEADER, keyEnd);
    switch (op) {
      case REMOVE:
        index.remove(doc);
        break;
      case ADD_NAME:
      case SET_NAME: {
        const text = bytes.toString('utf8', keyEnd, end);
        if (op === ADD_NAME) index.add(doc, text);
        else index.set(doc, text);
        break;
      }
      case ADD_TURN:
      case SET_TURN: {
        let text: string;
        try {
          text = turnTextOfJson(bytes.toString('utf8', keyEnd, end));
        } catch {
          // JSON that cannot be read (never seen: memory holds what a write parsed) leaves the
          // turn out rather than losing the thread, which a feed would give the same turn again
          index.remove(doc);
          break;
        }
        if (op === ADD_TURN) index.add(doc, text);
        else index.set(doc, text);
        break;
      }
      case CLEAR:
        index.clear();
        break;
    }
    docs++;
    return end - at;
  };
  const taking = (): void => {
    // what the main thread reads to know what of the ring it may write again (no message back: a message per batch cost both threads more than the indexing of a name)
    Atomics.store(progress, TAKEN_HEAD, BigInt(taken));
    Atomics.store(progress, TAKEN_SPILT, BigInt(spiltTaken));
    Atomics.store(progress, TAKEN_DOCS, BigInt(docs));
    // the last change of a burst is reported too, once the interval has passed
    if (performance.now() - reportedAt >= HEAP_REPORT_MS) reportHeap();
    else reportTimer ??= setTimeout(reportHeap, HEAP_REPORT_MS);
  };
  /** Takes what the ring holds; whether there was anything. */
  const pump = (): boolean => {
    const written = Number(Atomics.load(progress, WRITTEN_HEAD));
    if (taken === written) return false;
    while (taken < written) {
      const at = taken % ring.length;
      taken += ring[at] === WRAP ? ring.length - at : apply(ring, at);
    }
    taking();
    return true;
  };
  let timer: NodeJS.Timeout | undefined;
  let idle = 0;
  const tick = (): void => {
    timer = undefined;
    if (pump()) idle = 0;
    else if (++idle >= IDLE_POLLS) {
      // asleep until a change's message wakes it; one written while it fell asleep is looked for once more
      Atomics.store(sleeping, 0, 1);
      if (Number(Atomics.load(progress, WRITTEN_HEAD)) === taken || Atomics.compareExchange(sleeping, 0, 1, 0) !== 1) return;
      idle = 0;
    }
    timer = setTimeout(tick, POLL_MS);
  };
  port.on('message', (m: ToIndex) => {
    switch (m.kind) {
      case 'wake':
        if (timer === undefined) {
          idle = 0;
          tick();
        }
        return;
      case 'spilt':
        // after what the ring held before them (nothing is written to it until these are taken)
        pump();
        for (const c of m.changes) {
          apply(Buffer.from(c.buffer, c.byteOffset, c.byteLength), 0);
          spiltTaken += c.length;
        }
        taking();
        return;
    }
    // a query is answered having taken every change written before it was asked
    pump();
    switch (m.kind) {
      case 'plan': {
        const estimate = index.estimate(m.words);
        post({ kind: 'answer', q: m.q, answer: { estimate, docs: estimate < m.walkFrom ? index.find(m.words) : undefined } });
        return;
      }
      case 'find':
        post({ kind: 'answer', q: m.q, answer: index.find(m.words) });
        return;
      case 'holds': {
        const held = new Uint8Array(m.docs.length);
        m.docs.forEach((d, i) => (held[i] = index.holds(d, m.words) ? 1 : 0));
        post({ kind: 'answer', q: m.q, answer: held });
        return;
      }
      case 'size':
        post({ kind: 'answer', q: m.q, answer: index.size });
        return;
    }
  });
  reportHeap();
  tick();
}

// ---- the main thread's side ----

/** Changes spilt wait at most this long to be posted (a query posts those waiting first)... */
const FLUSH_MS = 2;
/** ...or until this many wait (a feed's piece is this many changes at most, too)... */
const BATCH_OPS = 2048;
/** ...or once this many bytes do. */
const BATCH_BYTES = 1 << 20;
/**
 * The ring, shared with the thread: a change costs one copy and no allocation. (A buffer per
 * batch, moved to the thread, cost no less to copy, but the C library kept the freed megabytes of
 * long turns: 190 MiB more resident after feeding 132 turns of 1 MiB.)
 */
const RING_BYTES = 4 << 20;
/**
 * Bytes of changes handed over and not yet taken (ring and spilt) past which a write's
 * acknowledgment waits for the index to catch up: the thread's backlog stays bounded whatever the load (it keeps up with
 * a saturated server on 2 cores, so this is only reached on a starved machine).
 */
const MOST_BEHIND_BYTES = RING_BYTES / 2;
/** How long a thread lost again within a minute of the last loss is left before it is started again (doubled each time, to a minute). */
const RESTART_MS = 1000;

let threadsMade = 0;

interface Waiting {
  readonly resolve: (a: Answer) => void;
  readonly reject: (e: Error) => void;
}

/** The index thread as the main thread uses it: changes handed over in order, queries answered in order after them. */
export class WordThread {
  private worker: Worker | undefined;
  private readonly ring = new SharedArrayBuffer(RING_BYTES);
  private readonly ringBytes = Buffer.from(this.ring);
  private readonly shared = new SharedArrayBuffer(SHARED_BYTES);
  private readonly progress = new BigInt64Array(this.shared, 0, 4);
  private readonly sleeping = new Int32Array(this.shared, SLEEPING_AT, 1);
  /** Bytes of the ring handed out since the thread started (where the next goes, less whole rings). */
  private head = 0;
  /** How far the thread had taken the ring when last looked at (it may be further now). */
  private takenHead = 0;
  /** Changes handed over since the thread started, ring and spilt, and how many the thread had taken when last looked at. */
  private docsPosted = 0;
  private takenDocs = 0;
  /** Bytes of names and turns handed over since the thread started (what bounds a feed's piece). */
  private given = 0;
  /** Changes spilt and not posted yet, their bytes, and the count of changes handed over once the last was spilt. */
  private spilt: Uint8Array[] = [];
  private spiltBytes = 0;
  private spiltUpTo = 0;
  /** Bytes of changes spilt since the thread started (the thread counts those it has taken in TAKEN_SPILT). */
  private spiltTotal = 0;
  private flushing = false;
  private q = 0;
  private readonly waiting = new Map<number, Waiting>();
  /** While the index is being fed from memory: what a query waits for first. */
  private feeding: Promise<void> | undefined;
  private feeds = 0;
  private restartMs = 0;
  /** Threads started, the first 1 (a test's planned loss applies to the first only). */
  private started = 0;
  private lostAt = -Infinity;
  private closed = false;
  /** This store's thread's name in the guard's account (a process may hold several stores: the tests). */
  private readonly heapKey = `${WORD_INDEX_ROLE}:${++threadsMade}`;

  constructor(
    private readonly filename: string,
    /** Feeds a new thread's index from memory (the state the engine holds now). */
    private readonly refill: () => Promise<void>,
    private readonly lost: (err: Error | undefined) => void,
  ) {
    this.start();
  }

  /** Documents handed over whose changes the thread has not taken yet (/metrics). */
  get behind(): number {
    return this.worker === undefined ? 0 : this.docsPosted - Number(Atomics.load(this.progress, TAKEN_DOCS));
  }

  /** Bytes of the ring the thread has not taken yet. */
  private get ringBehind(): number {
    return this.head - Number(Atomics.load(this.progress, TAKEN_HEAD));
  }

  /** Bytes of changes, in the ring or spilt, the thread has not taken yet. */
  private get bytesBehind(): number {
    return this.ringBehind + this.spiltTotal - Number(Atomics.load(this.progress, TAKEN_SPILT));
  }

  // While no thread runs (lost, not started again yet) changes are not kept: the next thread is
  // fed from memory as it is then, and nothing is written to the ring it starts afresh on.

  /** A session's name as a document (`isNew`: the document has no words yet). */
  name(doc: string, text: string, isNew: boolean): void {
    this.change(isNew ? ADD_NAME : SET_NAME, doc, text);
  }

  /** A turn as a document, by its JSON (the thread makes its text). */
  turn(doc: string, json: Uint8Array, isNew: boolean): void {
    this.change(isNew ? ADD_TURN : SET_TURN, doc, json);
  }

  remove(doc: string): void {
    this.change(REMOVE, doc, undefined);
  }

  private change(op: number, doc: string, gives: string | Uint8Array | undefined): void {
    const w = this.worker;
    if (w === undefined) return;
    this.docsPosted++;
    this.given += gives === undefined ? 0 : gives.length;
    // none goes to the ring while one spilt before it is not taken: the thread takes the ring first
    if (this.spiltUpTo > this.takenDocs && this.spiltUpTo > (this.takenDocs = Number(Atomics.load(this.progress, TAKEN_DOCS)))) return this.spill(op, doc, gives);
    // UTF-8 takes at most 3 bytes for each UTF-16 unit
    const most = HEADER + doc.length * 3 + (gives === undefined ? 0 : typeof gives === 'string' ? gives.length * 3 : gives.length);
    const r = this.ringBytes;
    // a change lies in one piece of the ring: one that would wrap starts it again
    let at = this.head % RING_BYTES;
    const skip = at + most > RING_BYTES ? RING_BYTES - at : 0;
    if (this.head - this.takenHead + skip + most > RING_BYTES) {
      this.takenHead = Number(Atomics.load(this.progress, TAKEN_HEAD));
      if (this.head - this.takenHead + skip + most > RING_BYTES) return this.spill(op, doc, gives);
    }
    if (skip > 0) {
      r[at] = WRAP;
      this.head += skip;
      at = 0;
    }
    const keyLen = r.write(doc, at + HEADER);
    const givenLen = gives === undefined ? 0 : typeof gives === 'string' ? r.write(gives, at + HEADER + keyLen) : (r.set(gives, at + HEADER + keyLen), gives.length);
    r[at] = op;
    r.writeUInt32LE(keyLen, at + 1);
    r.writeUInt32LE(givenLen, at + 5);
    this.head += HEADER + keyLen + givenLen;
    Atomics.store(this.progress, WRITTEN_HEAD, BigInt(this.head));
    if (Atomics.load(this.sleeping, 0) === 1 && Atomics.compareExchange(this.sleeping, 0, 1, 0) === 1) w.postMessage({ kind: 'wake' } satisfies ToIndex);
  }

  /** A change that does not fit in the ring: its own exact copy, posted with those spilt after it. */
  private spill(op: number, doc: string, gives: string | Uint8Array | undefined): void {
    const key = Buffer.from(doc);
    const what = gives === undefined ? undefined : typeof gives === 'string' ? Buffer.from(gives) : gives;
    const c = new Uint8Array(HEADER + key.length + (what?.length ?? 0));
    const v = Buffer.from(c.buffer, c.byteOffset, c.byteLength);
    v[0] = op;
    v.writeUInt32LE(key.length, 1);
    v.writeUInt32LE(what?.length ?? 0, 5);
    v.set(key, HEADER);
    if (what !== undefined) v.set(what, HEADER + key.length);
    this.spilt.push(c);
    this.spiltBytes += c.length;
    this.spiltTotal += c.length;
    this.spiltUpTo = this.docsPosted;
    if (this.spilt.length >= BATCH_OPS || this.spiltBytes >= BATCH_BYTES) this.flush();
    else if (!this.flushing) {
      this.flushing = true;
      setTimeout(() => this.flush(), FLUSH_MS);
    }
  }

  /**
   * Feeds the index anew: empties it, then hands it every document `each` gives, a bounded piece
   * at a time (at most two pieces waiting in the thread). Changes made meanwhile go in order
   * between the pieces: a document changed before its piece is given again as it is then; one
   * gone is not in any later piece. Queries wait until the last piece is taken. A newer feed
   * ends an older one at its next piece.
   */
  feed(each: (give: WordThread) => Iterator<void>): Promise<void> {
    const feed = ++this.feeds;
    const run = async (): Promise<void> => {
      this.change(CLEAR, '', undefined);
      const pieces = each(this);
      let previous: Promise<void> | undefined;
      for (;;) {
        let done = false;
        const docs = this.docsPosted;
        const given = this.given;
        while (!done && this.docsPosted - docs < BATCH_OPS && this.given - given < BATCH_BYTES) done = pieces.next().done === true;
        const taken = this.sync();
        // a lost thread fails both pieces at once: the one not awaited yet is not left unhandled
        taken.catch(() => undefined);
        if (previous !== undefined) await previous;
        previous = taken;
        if (done || feed !== this.feeds || this.closed) break;
      }
      await previous;
    };
    const fed: Promise<void> = run().finally(() => {
      if (this.feeding === fed) this.feeding = undefined;
    });
    this.feeding = fed;
    // a feed the thread's loss ends fails the queries waiting for it; the next thread is fed anew
    fed.catch(() => undefined);
    return fed;
  }

  /** Resolves once every change handed over so far is in the index. */
  private sync(): Promise<void> {
    return this.ask({ kind: 'size', q: 0 }).then(() => undefined);
  }

  /** A write's acknowledgment waits here while the thread is far behind (MOST_BEHIND_BYTES). */
  keptUp(): Promise<void> | undefined {
    if (this.bytesBehind <= MOST_BEHIND_BYTES || this.worker === undefined) return undefined;
    return new Promise((resolve) => {
      // looked at each millisecond until half of it is taken (the thread posts nothing back); spilt changes count too, or a backlog gone to messages would never hold a write back
      const look = (): void => {
        if (this.bytesBehind <= MOST_BEHIND_BYTES / 2 || this.worker === undefined) resolve();
        else setTimeout(look, 1);
      };
      look();
    });
  }

  /** How many documents the rarest query word starts, and when fewer than `walkFrom`, the documents that match. */
  async plan(words: readonly string[], walkFrom: number): Promise<Plan> {
    return (await this.askFed({ kind: 'plan', q: 0, words, walkFrom })) as Plan;
  }

  async find(words: readonly string[]): Promise<readonly string[]> {
    return (await this.askFed({ kind: 'find', q: 0, words })) as readonly string[];
  }

  /** For each document, whether every query word starts one of its words. */
  async holds(docs: readonly string[], words: readonly string[]): Promise<Uint8Array> {
    return (await this.askFed({ kind: 'holds', q: 0, words, docs })) as Uint8Array;
  }

  /** Documents in the index. */
  async size(): Promise<number> {
    return (await this.askFed({ kind: 'size', q: 0 })) as number;
  }

  async close(): Promise<void> {
    this.closed = true;
    const w = this.worker;
    this.worker = undefined;
    reportThreadHeap(this.heapKey, undefined);
    if (w !== undefined) await w.terminate();
    this.failWaiting(new StorageUnavailable(new Error('the store is closed')));
  }

  /** Asks once no feed is under way (checked again when the wait ends: a feed may have started in between). */
  private async askFed(query: Query): Promise<Answer> {
    while (this.feeding !== undefined) await this.feeding;
    return this.ask(query);
  }

  private ask(query: Query): Promise<Answer> {
    const w = this.worker;
    if (w === undefined) return Promise.reject(new StorageUnavailable(new Error('the search index is being fed again after its thread stopped')));
    // the thread takes the ring when the query comes, and spilt changes come before it
    this.flush();
    const q = ++this.q;
    return new Promise<Answer>((resolve, reject) => {
      this.waiting.set(q, { resolve, reject });
      w.postMessage({ ...query, q });
    });
  }

  /** Posts the changes spilt and waiting, in one message. */
  private flush(): void {
    this.flushing = false;
    if (this.spilt.length === 0) return;
    // closed, or the thread lost since these were spilt: they are not kept (the next thread is fed from memory)
    this.worker?.postMessage({ kind: 'spilt', changes: this.spilt } satisfies Spilt);
    this.spilt = [];
    this.spiltBytes = 0;
  }

  private start(): void {
    const w = new Worker(this.filename, { workerData: { role: WORD_INDEX_ROLE, first: ++this.started === 1, ring: this.ring, shared: this.shared } });
    w.unref();
    this.worker = w;
    let failure: Error | undefined;
    w.on('message', (m: FromIndex) => {
      switch (m.kind) {
        case 'heap':
          // a report that comes after its thread was let go is not this store's any more
          if (this.worker === w) reportThreadHeap(this.heapKey, m.used);
          return;
        case 'answer': {
          const waiting = this.waiting.get(m.q);
          this.waiting.delete(m.q);
          waiting?.resolve(m.answer);
          return;
        }
      }
    });
    w.on('error', (err) => {
      failure = err;
    });
    w.on('exit', () => {
      if (this.worker !== w) return;
      this.worker = undefined;
      reportThreadHeap(this.heapKey, undefined);
      // what waits to be posted and what the ring holds are the lost thread's: the next starts afresh and is fed from memory
      this.spilt = [];
      this.spiltBytes = 0;
      this.spiltUpTo = 0;
      this.spiltTotal = 0;
      this.head = 0;
      this.takenHead = 0;
      this.docsPosted = 0;
      this.takenDocs = 0;
      this.given = 0;
      for (const i of [WRITTEN_HEAD, TAKEN_HEAD, TAKEN_DOCS, TAKEN_SPILT]) Atomics.store(this.progress, i, 0n);
      Atomics.store(this.sleeping, 0, 0);
      this.failWaiting(new StorageUnavailable(new Error('the search index is being fed again after its thread stopped')));
      if (this.closed) return;
      this.lost(failure);
      // started again at once; lost again within a minute, after a wait that doubles each time
      const now = performance.now();
      this.restartMs = now - this.lostAt < 60_000 ? Math.min(60_000, Math.max(RESTART_MS, this.restartMs * 2)) : 0;
      this.lostAt = now;
      const t = setTimeout(() => {
        if (this.closed) return;
        this.start();
        this.refill().catch(() => undefined);
      }, this.restartMs);
      t.unref();
    });
  }

  private failWaiting(err: Error): void {
    for (const w of this.waiting.values()) w.reject(err);
    this.waiting.clear();
  }
}
