// The journal's search index on a thread of its own, so that indexing a turn (cutting its text
// into words, finding each word, adding the turn to its lists: ~14 µs for 1 KiB) is not paid on
// the thread every write and read waits for. The main thread hands each change over as it
// applies it to memory (a session's name, a turn's JSON as written, a document gone), in a
// batch every 2 ms at most; the index thread owns the WordIndex and answers queries.
//
// What was acknowledged is found: a thread's messages arrive in the order they were posted, and
// a query first posts the changes waiting before it, so the index answers it having taken every
// change memory had when it was asked. Its answers are names of documents; the main thread looks
// them up in memory as it is when the answer comes (a turn deleted meanwhile is skipped).
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

/**
 * Changes in the order memory took them: `ops[i]` on `docs[i]`, with its name (`names`) or its
 * turn's JSON in order: `lens[k]` bytes at `spans[k]` in the ring, or with -1 the next of `spilt`.
 */
interface Changes {
  readonly kind: 'changes';
  /** The ring's head and the documents posted, counted from the thread's start, once these are taken. */
  readonly head: number;
  readonly docsPosted: number;
  readonly ops: readonly number[];
  readonly docs: readonly string[];
  readonly names: readonly string[];
  readonly spans: readonly number[];
  readonly lens: readonly number[];
  readonly spilt: readonly Uint8Array[];
}

type Query =
  | { readonly kind: 'plan'; readonly q: number; readonly words: readonly string[]; readonly walkFrom: number }
  | { readonly kind: 'find'; readonly q: number; readonly words: readonly string[] }
  | { readonly kind: 'holds'; readonly q: number; readonly words: readonly string[]; readonly docs: readonly string[] }
  | { readonly kind: 'size'; readonly q: number };

type ToIndex = Changes | Query;

type FromIndex =
  | { readonly kind: 'heap'; readonly used: number }
  | { readonly kind: 'answer'; readonly q: number; readonly answer: Answer };

/** A plan's answer: how many documents the rarest word starts (what reading them costs), and those that match when fewer than `walkFrom`. */
export interface Plan {
  readonly estimate: number;
  readonly docs: readonly string[] | undefined;
}

type Answer = Plan | readonly string[] | Uint8Array | number;

/** Where the thread says how far it has taken the changes (the ring's head, documents): a shared BigInt64Array. */
const TAKEN_HEAD = 0;
const TAKEN_DOCS = 1;

// ---- the index thread ----

/** Starts the index when this thread is the journal's index thread; false on any other thread. */
export function runWordIndexIfWorker(): boolean {
  if (isMainThread || parentPort === null) return false;
  const data = workerData as { role?: unknown; first?: unknown; ring?: unknown; progress?: unknown } | undefined;
  if (data?.role !== WORD_INDEX_ROLE || !(data.ring instanceof SharedArrayBuffer) || !(data.progress instanceof SharedArrayBuffer)) return false;
  serveIndex(parentPort, data.first === true, Buffer.from(data.ring), new BigInt64Array(data.progress));
  return true;
}

/** How often the thread reports its heap, at most (the guard samples every 100 ms). */
const HEAP_REPORT_MS = 100;

function serveIndex(port: MessagePort, first: boolean, ring: Buffer, progress: BigInt64Array): void {
  const index = new WordIndex();
  const post = (m: FromIndex): void => port.postMessage(m);
  let reportedAt = -Infinity;
  let reportTimer: NodeJS.Timeout | undefined;
  const reportHeap = (): void => {
    reportTimer = undefined;
    reportedAt = performance.now();
    post({ kind: 'heap', used: oldGenerationUsed() });
  };
  port.on('message', (m: ToIndex) => {
    switch (m.kind) {
      case 'changes': {
        if (first && lostAt('index-thread')) process.exit(1);
        take(index, m, ring);
        // what the main thread reads to know what of the ring it may write again (no message back: a message per batch cost both threads more than the indexing of a name)
        Atomics.store(progress, TAKEN_HEAD, BigInt(m.head));
        Atomics.store(progress, TAKEN_DOCS, BigInt(m.docsPosted));
        // the last batch of a burst is reported too, once the interval has passed
        if (performance.now() - reportedAt >= HEAP_REPORT_MS) reportHeap();
        else reportTimer ??= setTimeout(reportHeap, HEAP_REPORT_MS);
        return;
      }
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
}

function take(index: WordIndex, m: Changes, ring: Buffer): void {
  let name = 0;
  let turn = 0;
  let spilt = 0;
  for (let i = 0; i < m.ops.length; i++) {
    const op = m.ops[i] as number;
    const doc = m.docs[i] as string;
    switch (op) {
      case REMOVE:
        index.remove(doc);
        break;
      case ADD_NAME:
      case SET_NAME: {
        const text = m.names[name++] as string;
        if (op === ADD_NAME) index.add(doc, text);
        else index.set(doc, text);
        break;
      }
      case ADD_TURN:
      case SET_TURN: {
        const at = m.spans[turn] as number;
        const len = m.lens[turn++] as number;
        const own = at < 0 ? (m.spilt[spilt++] as Uint8Array) : undefined;
        let text: string;
        try {
          text = turnTextOfJson(own === undefined ? ring.toString('utf8', at, at + len) : Buffer.from(own.buffer, own.byteOffset, own.byteLength).toString('utf8'));
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
  }
}

// ---- the main thread's side ----

/** Changes wait at most this long to be posted (a query posts those waiting first)... */
const FLUSH_MS = 2;
/** ...or until this many wait... */
const BATCH_OPS = 2048;
/** ...or once this many bytes of turns' JSON do. */
const BATCH_BYTES = 1 << 20;
/**
 * The ring turns' JSON is handed over in, shared with the thread: a change costs one copy and
 * no allocation. (A buffer per batch, moved to the thread, cost no less to copy, but the C
 * library kept the freed megabytes of long turns: 190 MiB more resident after feeding 132 turns
 * of 1 MiB.) A turn that does not fit in what the thread has not taken yet travels on its own.
 */
const RING_BYTES = 4 << 20;
/**
 * Bytes of the ring posted and not yet taken past which a write's acknowledgment waits for
 * the index to catch up: the thread's backlog stays bounded whatever the load (it keeps up with
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
  private ops: number[] = [];
  private docs: string[] = [];
  private names: string[] = [];
  private spans: number[] = [];
  private lens: number[] = [];
  private spilt: Uint8Array[] = [];
  /** Bytes of turns' JSON waiting to be posted. */
  private used = 0;
  private flushing = false;
  /** While a feed makes a piece: what it gives is posted when the piece is whole. */
  private holding = false;
  private readonly ring = new SharedArrayBuffer(RING_BYTES);
  private readonly progress = new BigInt64Array(new SharedArrayBuffer(16));
  private readonly ringBytes = Buffer.from(this.ring);
  /** Bytes of the ring handed out since the thread started (where the next goes, less whole rings); the thread says how far it has taken them in `progress`. */
  private head = 0;
  private docsPosted = 0;
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

  /** Documents posted whose changes the thread has not taken yet (/metrics). */
  get behind(): number {
    return this.worker === undefined ? 0 : this.docsPosted - Number(Atomics.load(this.progress, TAKEN_DOCS));
  }

  /** Bytes of the ring the thread has not taken yet. */
  private get ringBehind(): number {
    return this.head - Number(Atomics.load(this.progress, TAKEN_HEAD));
  }

  // While no thread runs (lost, not started again yet) changes are not kept: the next thread is
  // fed from memory as it is then, and nothing is written to the ring it starts afresh on.

  /** A session's name as a document (`isNew`: the document has no words yet). */
  name(doc: string, text: string, isNew: boolean): void {
    if (this.worker === undefined) return;
    this.ops.push(isNew ? ADD_NAME : SET_NAME);
    this.docs.push(doc);
    this.names.push(text);
    this.queued();
  }

  /** A turn as a document, by its JSON (the thread makes its text). */
  turn(doc: string, json: Uint8Array, isNew: boolean): void {
    if (this.worker === undefined) return;
    const len = json.length;
    // a turn's bytes lie in one piece of the ring: one that would wrap starts it again
    const at = this.head % RING_BYTES;
    const skip = at + len > RING_BYTES ? RING_BYTES - at : 0;
    if (this.ringBehind + skip + len <= RING_BYTES) {
      this.head += skip;
      const from = skip > 0 ? 0 : at;
      this.ringBytes.set(json, from);
      this.head += len;
      this.spans.push(from);
    } else {
      // its own exact copy (a small Buffer.from would be a slice of the shared pool, all of which a message copies)
      this.spilt.push(new Uint8Array(json));
      this.spans.push(-1);
    }
    this.lens.push(len);
    this.used += len;
    this.ops.push(isNew ? ADD_TURN : SET_TURN);
    this.docs.push(doc);
    this.queued();
  }

  remove(doc: string): void {
    if (this.worker === undefined) return;
    this.ops.push(REMOVE);
    this.docs.push(doc);
    this.queued();
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
      this.ops.push(CLEAR);
      this.docs.push('');
      const pieces = each(this);
      let previous: Promise<void> | undefined;
      for (;;) {
        let done = false;
        this.holding = true;
        try {
          while (!done && this.ops.length < BATCH_OPS && this.used < BATCH_BYTES) done = pieces.next().done === true;
        } finally {
          this.holding = false;
        }
        this.flush();
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

  /** Resolves once every change posted so far is in the index. */
  private sync(): Promise<void> {
    return this.ask({ kind: 'size', q: 0 }).then(() => undefined);
  }

  /** A write's acknowledgment waits here while the thread is far behind (MOST_BEHIND_BYTES). */
  keptUp(): Promise<void> | undefined {
    if (this.ringBehind <= MOST_BEHIND_BYTES || this.worker === undefined) return undefined;
    return new Promise((resolve) => {
      // looked at each millisecond until half of it is taken (the thread posts nothing back)
      const look = (): void => {
        if (this.ringBehind <= MOST_BEHIND_BYTES / 2 || this.worker === undefined) resolve();
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
    this.flush();
    const q = ++this.q;
    return new Promise<Answer>((resolve, reject) => {
      this.waiting.set(q, { resolve, reject });
      w.postMessage({ ...query, q });
    });
  }

  private queued(): void {
    if (this.holding) return;
    if (this.ops.length >= BATCH_OPS || this.used >= BATCH_BYTES) this.flush();
    else if (!this.flushing) {
      this.flushing = true;
      setTimeout(() => this.flush(), FLUSH_MS);
    }
  }

  /** Posts the changes waiting, in one message (their turns' JSON in the ring). */
  private flush(): void {
    this.flushing = false;
    if (this.ops.length === 0) return;
    const w = this.worker;
    // closed, or the thread lost since these were queued: they are not kept (the next thread is fed from memory)
    if (w !== undefined) {
      this.docsPosted += this.ops.length;
      const m: Changes = { kind: 'changes', head: this.head, docsPosted: this.docsPosted, ops: this.ops, docs: this.docs, names: this.names, spans: this.spans, lens: this.lens, spilt: this.spilt };
      w.postMessage(m);
    }
    this.drop();
  }

  private drop(): void {
    this.ops = [];
    this.docs = [];
    this.names = [];
    this.spans = [];
    this.lens = [];
    this.spilt = [];
    this.used = 0;
  }

  private start(): void {
    const w = new Worker(this.filename, { workerData: { role: WORD_INDEX_ROLE, first: ++this.started === 1, ring: this.ring, progress: this.progress.buffer } });
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
      // what waits to be posted refers to the ring the next thread starts afresh on: dropped, the next thread is fed from memory
      this.drop();
      this.head = 0;
      this.docsPosted = 0;
      Atomics.store(this.progress, TAKEN_HEAD, 0n);
      Atomics.store(this.progress, TAKEN_DOCS, 0n);
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
