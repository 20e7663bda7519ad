// One reply's text on its way to the store: told to the live feed piece by piece as it comes,
// written in one quiet delta per RECORD_EVERY_MS (one write at a time), and finished with its
// status in one last write. What the store holds of it is a ReplyLedger's to say.
import { appendToEnd, contentEnd, DELTA_MAX, type ContentEnd, type Piece, type PlacedCall } from '../domain/deltas.js';
import { ERROR_MESSAGE_MAX } from '../domain/limits.js';
import type { StopReason, Turn, TurnStatus, TurnUsage } from '../domain/records.js';
import { tooLargeMessage, type ReplyEnd } from '../domain/reply-end.js';
import { charsOfContent, ReplyLedger } from '../domain/reply-ledger.js';
import { HeldTooMuch, type Holding } from '../providers/held.js';
import type { ToolCall } from '../providers/wire.js';
import { deltaEvents } from '../live/changes.js';
import type { Logger } from '../log.js';
import { QuotaExceeded, SessionNotFound, StorageUnavailable, TurnNotFound, TurnNotStreaming, TurnTooLarge, type ChangeEvent, type Store, type TurnRecord } from '../store/store.js';

/** The most a reply's text waits before it is written: what a crash can lose of it. */
export const RECORD_EVERY_MS = 250;
/**
 * A reply's pieces the live feed may hold unlogged: past it the reply reads no more from its
 * provider until the feed has logged them (the provider's stream pauses and TCP holds the rest),
 * so a shared log that lags (PostgreSQL starved of CPU) holds at most this many of a reply's events
 * (and the pieces one provider event is cut into at DELTA_MAX, checked after the whole event).
 */
export const TOLD_AHEAD_MAX = 64;
/** Bytes of BODY_LIMIT a reply's text leaves for what its end adds: its status, usage, the words of an error that says it grew too large. */
const END_ROOM = 512;
/** How long a reply's end is tried again while the store is unavailable (a database restarting); past it the turn is left to the sweep. */
const END_PATIENCE_MS = 60_000;
/** How often it is tried meanwhile. */
const END_RETRY_MS = 1_000;

/** Where the text of replies goes as it comes (the live feed's hub). */
export interface LiveSink {
  publish(events: readonly ChangeEvent[]): Promise<void>;
}

/** How a reply ends: its status, and what is recorded with it. */
export interface Ending {
  readonly status: TurnStatus;
  readonly usage?: TurnUsage | undefined;
  readonly error?: string | undefined;
  readonly stopReason?: StopReason | undefined;
}

/** The session as the feed's events name it (its owner and project say who sees them). */
export interface FeedSession {
  readonly _id: string;
  readonly user: string;
  readonly project: string;
}

/** The turn a stored record holds. */
export function turnOf(record: TurnRecord): Turn {
  return JSON.parse(record.json.toString('utf8')) as Turn;
}

/**
 * A reply's pieces told to the live feed as they come: a shared log takes what comes within a few
 * milliseconds in one append, and appends in the order told (so the last settles last).
 */
class Teller {
  /** The feed's logging of what was told: awaited before the end is written, so the end's event comes last. */
  told: Promise<void> = Promise.resolve();
  /** Pieces told that the feed has not logged yet. */
  private unlogged = 0;
  /** Pieces the feed failed to log. */
  untold = 0;

  constructor(
    private readonly live: LiveSink,
    private readonly turnId: string,
    private readonly log: Logger,
  ) {}

  tell(events: readonly ChangeEvent[]): void {
    this.unlogged++;
    this.told = this.live.publish(events).then(
      () => void this.unlogged--,
      (e: unknown) => {
        this.unlogged--;
        // once a reply: with the database down every piece fails alike
        if (this.untold++ === 0) this.log.warn('a reply\'s text could not be told to the live feed (its listeners miss it; the store records it)', { turn: this.turnId, err: e });
      },
    );
  }

  /** While the feed holds TOLD_AHEAD_MAX pieces unlogged: until it has logged them all. Else undefined. */
  paced(): Promise<void> | undefined {
    return this.unlogged >= TOLD_AHEAD_MAX ? this.told : undefined;
  }
}

export class Recorder {
  /** Where the reply's content ends as told so far (where each next piece goes). */
  private end: ContentEnd;
  private readonly ledger: ReplyLedger;
  private readonly teller: Teller | undefined;
  /** Characters of text and reasoning told so far: where a tool call comes among them. */
  private told: number;
  /** The reply's tool calls, each where it came: recorded whole by the end. */
  private readonly calls: PlacedCall[] = [];
  /** The bytes of the turn's JSON with everything told so far (text, reasoning, tool calls): what BODY_LIMIT bounds. */
  private turnBytes: number;
  /** Bytes of the text told and not yet taken by a write, and of the write under way: held until committed. */
  private pendingBytes = 0;
  private inFlightBytes = 0;
  private timer: NodeJS.Timeout | undefined;
  /** The write under way, if any. */
  private writing: Promise<void> = Promise.resolve();
  /** The last write failed (the store away): the next failure is not logged again. */
  private writeFailing = false;
  /** Set when a write was refused for good (the turn too large, a quota): the reply ends so. */
  stopped: Ending | undefined;
  /** The status the end recorded (finish's, or the refusal's that came after the provider was done). */
  endedAs: TurnStatus | undefined;
  /** The hash of the path the reply answers (read with the conversation): its own, made at its end, is the OpenAI door's index. */
  pathBefore: string | undefined;

  constructor(
    private readonly store: Store,
    private readonly turn: Turn,
    private readonly session: FeedSession,
    private readonly maxBytes: number,
    live: LiveSink | undefined,
    private readonly log: Logger,
    /** Closes the provider's request: the reply cannot go on. */
    private readonly abort: () => void,
    /** Whether the server stops: the end is then not tried again. */
    private readonly stopping: () => boolean,
    /** Where what the reply holds unfinished (its text until written, its tool calls until its end) is counted with every other reply's. */
    private readonly held: Holding,
  ) {
    this.turnBytes = Buffer.byteLength(JSON.stringify(turn));
    this.end = contentEnd(turn.content);
    this.ledger = new ReplyLedger(turn.content);
    this.told = charsOfContent(turn.content);
    this.teller = live === undefined ? undefined : new Teller(live, turn._id, log);
  }

  /** A piece as it came: told to the feed now, written within RECORD_EVERY_MS. */
  add(piece: Piece): void {
    if (piece.text === '' || this.stopped !== undefined) return;
    // the deltas API takes pieces of at most DELTA_MAX: a provider's larger one is cut
    for (let i = 0; i < piece.text.length; i += DELTA_MAX) {
      const p = i === 0 && piece.text.length <= DELTA_MAX ? piece : { kind: piece.kind, text: piece.text.slice(i, i + DELTA_MAX) };
      const { end, place, bytes } = appendToEnd(this.end, p);
      // past BODY_LIMIT the reply ends at once, with what fitted: nothing more is held for it
      if (!this.counted(bytes)) return;
      this.pendingBytes += bytes;
      this.end = end;
      this.told += p.text.length;
      this.ledger.tell(p);
      this.teller?.tell(deltaEvents(this.session, this.turn._id, [p], [place]));
    }
    this.timer ??= setTimeout(() => this.write(), RECORD_EVERY_MS);
  }

  /** A tool call as it came (whole): it reaches the store and the feed with the reply's end. */
  addToolCall(call: ToolCall): void {
    if (this.stopped !== undefined) return;
    const part = { type: 'tool_call', id: call.id, name: call.name, arguments: call.arguments } as const;
    // (a call among text parts may cut one in two: the end's own check counts that exactly)
    if (!this.counted(Buffer.byteLength(JSON.stringify(part)) + 1)) return;
    this.calls.push({ at: this.told, part });
  }

  /**
   * Counts `bytes` more told: false, with the reply stopped, when the turn would pass BODY_LIMIT
   * (as recorded: its JSON, not the provider's framing) or what all replies hold would pass its bound.
   */
  private counted(bytes: number): boolean {
    if (this.turnBytes + bytes > this.deltaMax) {
      this.stop({ status: 'error', error: this.tooLarge() });
      return false;
    }
    try {
      this.held.take(bytes);
    } catch (e) {
      if (!(e instanceof HeldTooMuch)) throw e;
      this.stop({ status: 'error', error: `The reply ${e.message}` });
      return false;
    }
    this.turnBytes += bytes;
    return true;
  }

  /** The reply cannot go on: what was told before is still written (with its end), nothing after it is taken. */
  private stop(ending: Ending): void {
    this.stopped = ending;
    this.abort();
  }

  /**
   * While the feed holds TOLD_AHEAD_MAX of this reply's pieces unlogged: until it has logged
   * them all (the reply reads nothing from the provider meanwhile). Else undefined: go on.
   */
  paced(): Promise<void> | undefined {
    return this.teller?.paced();
  }

  /** Writes what is pending, after the write before it. */
  private write(): Promise<void> {
    this.timer = undefined;
    this.writing = this.writing.then(async () => {
      if (this.stopped !== undefined) return;
      // a write whose answer was lost is settled first, by the text the store holds: its pieces
      // are never written twice (nothing is written while that cannot be read)
      if (this.ledger.inDoubt && !(await this.settleDoubt())) return;
      const pieces = this.ledger.take();
      if (pieces.length === 0) return;
      this.inFlightBytes = this.pendingBytes;
      this.pendingBytes = 0;
      try {
        await this.store.appendDelta(this.turn.session, this.turn._id, pieces, this.deltaMax, { quiet: true });
        this.ledger.committed();
        this.held.give(this.inFlightBytes);
        this.inFlightBytes = 0;
        this.writeFailing = false;
      } catch (e) {
        // refused for good: the reply ends without what was refused
        if (e instanceof TurnTooLarge) this.refuse({ status: 'error', error: this.tooLarge() });
        else if (e instanceof QuotaExceeded) this.refuse({ status: 'error', error: e.message });
        // ended or deleted by someone else: nothing more to write
        else if (e instanceof TurnNotStreaming || e instanceof TurnNotFound || e instanceof SessionNotFound) this.refuse({ status: 'interrupted' });
        else {
          // the store is down for now: the pieces wait for the next write (or the end); the write
          // may have committed all the same (the connection lost after COMMIT): in doubt till read
          this.ledger.lost();
          this.pendingBytes += this.inFlightBytes;
          this.inFlightBytes = 0;
          // once a run of failures, not every 250 ms of it
          if (!this.writeFailing) this.log.warn('a reply\'s text could not be written yet; it is tried again', { turn: this.turn._id, err: e });
          this.writeFailing = true;
        }
      }
    });
    return this.writing;
  }

  /** Whether the write in doubt is settled by the turn read back; false while the store cannot be read. */
  private async settleDoubt(): Promise<boolean> {
    let t: TurnRecord | undefined;
    try {
      t = await this.store.getTurn(this.turn.session, this.turn._id);
    } catch {
      return false;
    }
    // a turn gone or ended: the next write says so
    this.ledger.settle(t === undefined ? undefined : turnOf(t).content);
    return true;
  }

  /** What the reply's text may grow to: BODY_LIMIT less the room its end takes. */
  private get deltaMax(): number {
    // (a BODY_LIMIT too small to leave the room is no limit a reply could live under anyway)
    return Math.max(this.maxBytes - END_ROOM, this.maxBytes >> 1);
  }

  private tooLarge(): string {
    return tooLargeMessage(this.maxBytes);
  }

  /** A write was refused for good: the reply cannot go on, and what was not recorded never will be. */
  private refuse(ending: Ending): void {
    this.ledger.refused();
    this.ledger.clear();
    this.held.give(this.pendingBytes + this.inFlightBytes);
    this.pendingBytes = 0;
    this.inFlightBytes = 0;
    this.stop(ending);
  }

  /** Writes the end: what is pending, the status, usage and error, in one write; the turn as recorded. */
  async finish(ending: Ending): Promise<TurnRecord> {
    try {
      return await this.writeEnd(ending);
    } finally {
      this.held.release();
    }
  }

  private async writeEnd(ending: Ending): Promise<TurnRecord> {
    clearTimeout(this.timer);
    this.timer = undefined;
    await this.writing;
    await this.teller?.told;
    // a write refused for good after the provider had finished (its last pieces came before the
    // refusal did) still ends the reply so: what the provider said last does not make it complete
    if (this.stopped !== undefined) ending = { ...this.stopped, ...(ending.usage !== undefined ? { usage: ending.usage } : {}) };
    this.endedAs = ending.status;
    const error = ending.error === undefined ? undefined : { message: ending.error.length > ERROR_MESSAGE_MAX ? `${ending.error.slice(0, ERROR_MESSAGE_MAX - 1)}…` : ending.error };
    const untold = this.teller?.untold ?? 0;
    if (untold > 1) this.log.warn('pieces of a reply\'s text could not be told to the live feed', { turn: this.turn._id, pieces: untold });
    // the end is decided at the serial point from the turn as it stands (../domain/reply-end.ts):
    // what is not yet recorded of its text goes with it, never twice
    const end: ReplyEnd = {
      unrecorded: this.ledger.value(),
      calls: this.calls,
      status: ending.status,
      usage: ending.usage,
      error,
      stopReason: ending.stopReason,
      deltaMax: this.deltaMax,
      maxBytes: this.maxBytes,
      pathBefore: this.pathBefore,
    };
    return this.untilStored(async () => {
      const r = await this.store.endReply(this.turn.session, this.turn._id, end);
      // (a reply whose text would pass BODY_LIMIT with its end ends `error`)
      this.endedAs = r.status;
      return r;
    });
  }

  /**
   * The end's write, tried again every END_RETRY_MS while the store is unavailable (a database
   * restarting: the reply's text is all in memory, and recording it whole beats leaving the turn
   * to the sweep), for END_PATIENCE_MS at most and never once the server stops.
   */
  private async untilStored(write: () => Promise<{ readonly turn: TurnRecord }>): Promise<TurnRecord> {
    const until = Date.now() + END_PATIENCE_MS;
    for (let attempt = 0; ; attempt++) {
      try {
        try {
          return (await write()).turn;
        } catch (e) {
          if (!(e instanceof TurnNotStreaming)) throw e;
          // someone else ended the turn (a client's edit of its status, a cancel through another
          // instance), or a try whose commit went through though its answer was lost: the turn as
          // recorded, and it counts as what it says (the message was recorded: never a 409 for it)
          const t = await this.store.getTurn(this.turn.session, this.turn._id);
          if (t === undefined) throw e;
          this.endedAs = turnOf(t).status;
          return t;
        }
      } catch (e) {
        // (the read above failing while the store is away is tried again like the write)
        if (!(e instanceof StorageUnavailable) || this.stopping() || Date.now() >= until) throw e;
        if (attempt === 0) this.log.warn('the end of a reply cannot be recorded while the store is unavailable; trying again', { turn: this.turn._id, err: e });
        await new Promise((resolve) => setTimeout(resolve, END_RETRY_MS));
      }
    }
  }
}
