// Replies from the model: the service holds the providers' keys, so it is the one that calls
// the model. A reply is an assistant turn the server writes as the provider streams it. It is
// started by a request but never owned by one: it goes on when the client goes away, and ends
// only by its end, a failure, a cancel or the server's stop, always recorded. Its text reaches
// the live feed as it comes; the store records it a quarter of a second behind at most (pieces
// gathered into one write per reply), and its end (status, usage) is committed before the last
// event and before a waiting answer.
import { DomainError, ServerBusy } from '../domain/errors.js';
import { checkNewContent } from '../domain/inputs.js';
import { ValidationError } from '../domain/schema.js';
import { appendPieces, withToolCalls, type Piece, type PlacedCall } from '../domain/deltas.js';
import type { ChatSession, JsonObject, StopReason, Turn, TurnContent, TurnRole, TurnStatus, TurnUsage } from '../domain/records.js';
import type { Logger } from '../log.js';
import type { ProviderCatalog } from '../providers/catalog.js';
import { streamReply } from '../providers/call.js';
import { allowedModels, modelAllowed, providerConfig } from '../providers/config.js';
import { ProviderFailed } from '../providers/failure.js';
import { HeldBytes, HeldTooMuch } from '../providers/held.js';
import { answeredCalls, stopReasonOf, type ProviderConfig, type ReplyMessage, type ReplyOptions, type ToolChoice, type ToolSpec } from '../providers/wire.js';
import { SessionNotFound, TurnNotFound, TurnNotStreaming, type Store, type TurnRecord } from '../store/store.js';
import type { NewTurn } from '../store/writes.js';
import { decidedOnRead, type Access, type Caller } from './access.js';
import { pathHash } from '../domain/door-match.js';
import { ContextWindow } from './reply-context.js';
import { Recorder, turnOf, type Ending, type LiveSink } from './reply-recorder.js';

/** How long a cancel waits for another instance to stop the reply it generates before it marks the turn interrupted itself. */
const CANCEL_WAIT_MS = 3_000;
/** How long a stop waits for the replies it interrupts to be recorded. */
const STOP_WAIT_MS = 5_000;

export interface ReplySettings {
  /** Replies in progress on this instance at most (REPLIES_MAX). */
  readonly maxReplies: number;
  /** The longest a provider may send no progress (PROVIDER_IDLE_TIMEOUT). */
  readonly idleTimeoutMs: number;
  /** The longest a reply may take, whatever its provider sends (REPLY_MAX_DURATION). */
  readonly maxDurationMs: number;
  /** The largest a reply's JSON may grow to, in bytes (BODY_LIMIT). */
  readonly maxTurnBytes: number;
  /** What all replies in progress may hold unfinished, in bytes (a share of MEMORY_LIMIT). */
  readonly heldBytes: number;
  /** The most of a conversation sent to the model, in bytes of its turns as stored (REPLY_CONTEXT_MAX). */
  readonly contextMaxBytes: number;
}

/** Past this share of what all replies may hold unfinished, new replies are refused (503): the room left is for those in progress. */
const HELD_REFUSE_SHARE = 0.75;
/** A path whose turns as stored pass this many times REPLY_CONTEXT_MAX is not given its hash (see conversation). */
const PATH_KEY_SHARE = 2;

/** What a message or a reply asks for. */
export interface ReplyRequest {
  /** A message's content: recorded as a user turn (or a tool turn), which the reply answers. Absent: a reply to `parentId`. */
  readonly content?: TurnContent | undefined;
  /** A message's role: `user` (the default), or `tool` (its `tool_result` parts answer tool calls on the path it follows). */
  readonly role?: 'user' | 'tool' | undefined;
  /** The turn the message follows (null: a new root), or the turn to reply to; absent: the head. */
  readonly parentId?: string | null | undefined;
  /** The model to ask; absent: the session's selectedModel. */
  readonly model?: string | undefined;
  /** The provider to ask it of (its `_id`); absent: the session's (the OpenAI door names one per request). */
  readonly providerId?: string | undefined;
  readonly options?: ReplyOptions | undefined;
  /** The client's tools the model may call, and whether it must. */
  readonly tools?: readonly ToolSpec[] | undefined;
  readonly toolChoice?: ToolChoice | undefined;
  /**
   * Turns to record first, in order, each under the one before (the first under `parentId`):
   * the reply answers the last (the OpenAI door's messages past what the session holds).
   */
  readonly chain?: readonly { readonly role: TurnRole; readonly content: TurnContent }[] | undefined;
  /** The chain's turns' path keys, in its order (undefined: none), for the OpenAI door's index. */
  readonly pathKeys?: readonly (string | undefined)[] | undefined;
  /** Told each piece of text and reasoning as it comes (the OpenAI door's stream). */
  readonly onPiece?: ((piece: Piece) => void) | undefined;
  /** The system message of this reply alone, in place of the session's instructions (OpenAI's Responses `instructions`). */
  readonly instructions?: string | undefined;
  /** The reply turn's metadata (what OpenAI's Responses keep of a response). */
  readonly replyMetadata?: JsonObject | undefined;
}

/** What a reply that is not recorded (the OpenAI door's `X-Record: off`) asks for. */
export interface UnrecordedRequest {
  readonly provider: ProviderConfig;
  readonly model: string;
  /** The system message (OpenAI's Responses `instructions`). */
  readonly system?: string | undefined;
  readonly messages: readonly ReplyMessage[];
  readonly options?: ReplyOptions | undefined;
  readonly tools?: readonly ToolSpec[] | undefined;
  readonly toolChoice?: ToolChoice | undefined;
  readonly onPiece?: ((piece: Piece) => void) | undefined;
  /** Aborted when its client leaves. */
  readonly signal: AbortSignal;
}

/** How a reply that is not recorded ended: what a recorded one would hold. */
export interface UnrecordedReply {
  readonly status: TurnStatus;
  readonly content: TurnContent;
  readonly usage?: TurnUsage | undefined;
  readonly stopReason?: StopReason | undefined;
  readonly error?: string | undefined;
  /** The provider's failure it ended with, if it did. */
  readonly failure?: ProviderFailed | undefined;
}

/** A reply under way: the user turn a message recorded, the reply as it began, and the reply as recorded at its end. */
export interface StartedReply {
  readonly turn: TurnRecord | undefined;
  /** Every turn recorded before the reply (the message's, or a chain's), in order. */
  readonly recorded: readonly TurnRecord[];
  readonly reply: TurnRecord;
  readonly done: Promise<TurnRecord>;
  /** Once done: the provider's failure it ended with, if it did (its status and whether it was passing are not recorded). */
  readonly failure: () => ProviderFailed | undefined;
}

/** Counts a metrics page shows. */
export interface ReplyCounts {
  readonly inProgress: number;
  /** Replies ended since start, by status. */
  readonly ended: ReadonlyMap<TurnStatus, number>;
  /** What they hold unfinished now, and may hold at most together. */
  readonly heldBytes: number;
  readonly heldLimit: number;
}

/** What a reply calls, decided when it is recorded: the provider, the model, the system message, and who sees the session. */
interface Call {
  readonly provider: ProviderConfig;
  readonly model: string;
  readonly instructions: string | undefined;
  readonly owner: string;
  readonly project: string;
}

/** One reply being generated by this instance. */
class Running {
  readonly abort = new AbortController();
  /** Set when a cancel (or the stop) asked it to end: it ends `interrupted`. */
  cancelled = false;
  /** Set once how it ends is decided: a cancel after that has lost the race to the end. */
  decided = false;
  /** The provider's failure it ended with, if it did. */
  failure: ProviderFailed | undefined;
  readonly done: Promise<TurnRecord>;
  resolve!: (t: TurnRecord) => void;
  reject!: (e: unknown) => void;

  constructor(
    readonly session: string,
    readonly turnId: string,
  ) {
    this.done = new Promise<TurnRecord>((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
    // a waiting request may have gone: nobody else may need to hear of a failure
    this.done.catch(() => undefined);
  }

  /** Asks it to end `interrupted`; false when its end was already decided (the cancel lost the race). */
  cancel(): boolean {
    if (this.decided) return false;
    this.cancelled = true;
    this.abort.abort();
    return true;
  }
}

export class ReplyService {
  private readonly running = new Map<string, Running>();
  /** Replies accepted and not yet in `running` (their first write is under way): they count against the bound too. */
  private starting = 0;
  private stopping = false;
  private readonly ended = new Map<TurnStatus, number>();
  /** What the replies in progress hold unfinished: lines and events being read, text not yet written, tool calls. */
  readonly held: HeldBytes;

  constructor(
    private readonly store: Store,
    private readonly access: Access,
    private readonly catalog: () => ProviderCatalog,
    private readonly live: LiveSink | undefined,
    private readonly settings: ReplySettings,
    private readonly log: Logger,
  ) {
    this.held = new HeldBytes(settings.heldBytes);
  }

  /** A new reply may start: else 503, too many in progress, or what they hold unfinished is near its bound. */
  private admit(): void {
    if (this.stopping || this.running.size + this.starting >= this.settings.maxReplies) throw new ServerBusy('Too many replies in progress', 5);
    if (this.held.used >= this.held.limit * HELD_REFUSE_SHARE) throw new ServerBusy('Server is low on memory', 5);
  }

  /** Listens for cancels sent by other instances (PostgreSQL), before the server takes requests. */
  async start(): Promise<void> {
    await this.store.broadcast()?.listen((message) => {
      const m = /^cancel (\S+)$/.exec(message);
      if (m !== null) this.running.get(m[1] as string)?.cancel();
    });
  }

  get counts(): ReplyCounts {
    return { inProgress: this.running.size + this.starting, ended: this.ended, heldBytes: this.held.used, heldLimit: this.held.limit };
  }

  /**
   * Records a message (when `req.content` is given) and starts the model's reply to it, or to
   * `req.parentId`: refused before anything is recorded when the provider cannot reply, the
   * model is not one of its `models`, a reply of the session is already streaming, or this
   * instance has REPLIES_MAX replies in progress.
   */
  async begin(caller: Caller, sessionId: string, req: ReplyRequest, ifMatch: string | undefined): Promise<StartedReply> {
    // a message is a turn that says something (only a turn created streaming may start blank)
    if (req.content !== undefined) checkNewContent(req.content, undefined);
    checkTools(req.tools, req.toolChoice);
    // a tool message goes exactly under the turn whose path holds the calls it answers
    if (req.content !== undefined && req.role === 'tool') req = { ...req, parentId: await this.toolTurnParent(caller, sessionId, req.content, req.parentId) };
    this.admit();
    this.starting++;
    let call: Call | undefined;
    let made: TurnRecord[];
    try {
      const guard = this.access.guard(caller.user, ifMatch);
      // the call is decided from the session as read (its provider, model, instructions): the
      // write holds only while the session is that version still, else it is decided again
      made = await decidedOnRead(async () => {
        const read = await this.store.getSession(sessionId);
        if (read === undefined) throw new SessionNotFound();
        this.access.check(caller.user, ifMatch, read);
        call = this.callOf(read.session, req.model, req.providerId);
        if (req.instructions !== undefined) call = { ...call, instructions: req.instructions };
        // an assistant message a client sends back may be blank (a reply of reasoning only was)
        for (const t of req.chain ?? []) if (t.role !== 'assistant') checkNewContent(t.content, undefined);
        // the reply, the last turn, is generated here (PostgreSQL names this instance with it)
        return this.store.appendTurns(sessionId, this.turnsOf(caller.user, req, call.model), { guard: { ...guard, version: read.version }, refuse: { anyStreaming: true }, pathKeys: req.pathKeys, generated: true });
      });
    } finally {
      this.starting--;
    }
    const reply = made[made.length - 1] as TurnRecord;
    const turn = made.length > 1 ? made[0] : undefined;
    const r = new Running(sessionId, reply._id);
    this.running.set(reply._id, r);
    void this.run(r, call as NonNullable<typeof call>, req, turnOf(reply));
    return { turn, recorded: made.slice(0, -1), reply, done: r.done, failure: () => r.failure };
  }

  /** The reply turns this instance generates now (Store.leftStreaming: its own that no reply holds are left). */
  generating(): ReadonlySet<string> {
    return new Set(this.running.keys());
  }

  /** The end of a reply this instance generates, as it will be recorded; undefined when none by that id runs here. */
  whenEnded(turnId: string): Promise<TurnRecord> | undefined {
    return this.running.get(turnId)?.done;
  }

  /**
   * A reply asked of a provider and answered, not recorded (the OpenAI door's title and tag
   * requests): it counts against REPLIES_MAX and in the replies' counts like any other.
   */
  async unrecorded(req: UnrecordedRequest): Promise<UnrecordedReply> {
    this.admit();
    this.starting++;
    const pieces: Piece[] = [];
    const calls: PlacedCall[] = [];
    let told = 0;
    let out: UnrecordedReply;
    // held to the same bounds as a recorded reply: BODY_LIMIT for what it says, and its share of what all replies hold
    const holding = this.held.holding();
    let bytes = 0;
    const count = (n: number): void => {
      bytes += n;
      if (bytes > this.settings.maxTurnBytes) throw new ProviderFailed(`The reply grew past the largest a turn may be (BODY_LIMIT, ${this.settings.maxTurnBytes} bytes)`, false);
      try {
        holding.take(n);
      } catch (e) {
        if (e instanceof HeldTooMuch) throw new ProviderFailed(`The reply ${e.message}`, false);
        throw e;
      }
    };
    const stop = new AbortController();
    const signal = AbortSignal.any([req.signal, stop.signal]);
    try {
      const stream = streamReply({ provider: req.provider, model: req.model, system: req.system, messages: answeredCalls(req.messages), options: req.options, tools: req.tools, toolChoice: req.toolChoice, signal, idleTimeoutMs: this.settings.idleTimeoutMs, maxDurationMs: this.settings.maxDurationMs, held: this.held });
      let usage: TurnUsage | undefined;
      for await (const e of stream) {
        if (e.kind === 'usage') usage = e.usage;
        else if (e.kind === 'tool_call') {
          const part = { type: 'tool_call', ...e.call } as const;
          count(Buffer.byteLength(JSON.stringify(part)));
          calls.push({ at: told, part });
        } else {
          count(Buffer.byteLength(e.text));
          pieces.push(e);
          told += e.text.length;
          req.onPiece?.(e);
        }
      }
      const content = withToolCalls(appendPieces('', pieces), calls);
      out = req.signal.aborted ? { status: 'interrupted', content, usage } : { status: 'complete', content, usage, stopReason: stopReasonOf(stream.finishReason, calls.length > 0) };
    } catch (e) {
      if (!(e instanceof ProviderFailed)) this.log.error('a reply failed for a reason of this server; it ends with error', { err: e });
      // (a bound passed: the provider's request is closed at once)
      stop.abort();
      out = { status: 'error', content: appendPieces('', pieces), error: e instanceof ProviderFailed ? e.message : 'The reply failed inside this server', ...(e instanceof ProviderFailed ? { failure: e } : {}) };
    } finally {
      this.starting--;
      holding.release();
    }
    this.ended.set(out.status, (this.ended.get(out.status) ?? 0) + 1);
    return out;
  }

  /** The provider and model a reply of `session` calls, or a refusal naming them (409). */
  private callOf(session: ChatSession, model: string | undefined, providerId: string | undefined): Call {
    const id = providerId ?? session.provider;
    const record = this.catalog().records.get(id.toLowerCase());
    if (record === undefined) throw new DomainError('cannot_reply', `Provider ${JSON.stringify(id)} is not configured (providers.json has no provider with that _id)`);
    const provider = providerConfig(record);
    const chosen = model ?? session.selectedModel;
    if (!modelAllowed(provider, chosen)) throw new DomainError('cannot_reply', `Model ${JSON.stringify(chosen)} is not one of provider ${JSON.stringify(provider.name)}'s models: ${allowedModels(provider)}`);
    return { provider, model: chosen, instructions: session.instructions, owner: session.user, project: session.project };
  }

  /**
   * The turns a message records (its user turn, then the reply under it), a chain records (its
   * turns, then the reply), or a reply alone records (under `parentId`, by default the head): the
   * first under its parent, each next under the one before (the serial point stamps them).
   */
  private turnsOf(who: string, req: ReplyRequest, model: string): NewTurn[] {
    const reply: NewTurn = { user: who, role: 'assistant', content: '', model, ...(req.replyMetadata !== undefined ? { metadata: req.replyMetadata } : {}), status: 'streaming' };
    if (req.content !== undefined) return [{ user: who, role: req.role ?? 'user', content: req.content, parentId: req.parentId }, reply];
    if (req.chain !== undefined && req.chain.length > 0) return [...req.chain.map((t, i): NewTurn => ({ user: who, role: t.role, content: t.content, status: 'complete', ...(i === 0 ? { parentId: req.parentId } : {}) })), reply];
    // a reply alone goes under the head unless the request names a turn
    return [{ ...reply, parentId: req.parentId ?? undefined }];
  }

  /** Generates one reply to its end, recording it as it goes. */
  private async run(r: Running, call: Call, req: ReplyRequest, begun: Turn): Promise<void> {
    const recorder = new Recorder(this.store, begun, { _id: begun.session, user: call.owner, project: call.project }, this.settings.maxTurnBytes, this.live, this.log, () => r.abort.abort(), () => this.stopping, this.held.holding());
    let ending: Ending;
    try {
      const { messages, pathKey } = await this.conversation(r.session, begun.parentId);
      recorder.pathBefore = pathKey;
      const stream = streamReply({ provider: call.provider, model: call.model, system: call.instructions, messages, options: req.options, tools: req.tools, toolChoice: req.toolChoice, signal: r.abort.signal, idleTimeoutMs: this.settings.idleTimeoutMs, maxDurationMs: this.settings.maxDurationMs, held: this.held });
      let usage: TurnUsage | undefined;
      let called = false;
      for await (const e of stream) {
        if (e.kind === 'usage') usage = e.usage;
        else if (e.kind === 'tool_call') {
          called = true;
          recorder.addToolCall(e.call);
        } else {
          recorder.add(e);
          req.onPiece?.(e);
        }
        if (recorder.stopped !== undefined) break;
        // the provider waits while the feed lags (its silence then is not counted as idle)
        const paced = recorder.paced();
        if (paced !== undefined) await paced;
      }
      if (recorder.stopped !== undefined) ending = recorder.stopped;
      else if (r.cancelled) ending = { status: 'interrupted', usage };
      else ending = { status: 'complete', usage, stopReason: stopReasonOf(stream.finishReason, called) };
    } catch (e) {
      if (r.cancelled) ending = { status: 'interrupted' };
      else if (e instanceof ProviderFailed) {
        r.failure = e;
        ending = { status: 'error', error: e.message };
      }
      else {
        this.log.error('a reply failed for a reason of this server; it ends with error', { session: r.session, turn: r.turnId, err: e });
        ending = { status: 'error', error: 'The reply failed inside this server' };
      }
    }
    r.decided = true;
    try {
      const final = await recorder.finish(ending);
      const status = recorder.endedAs ?? ending.status;
      this.ended.set(status, (this.ended.get(status) ?? 0) + 1);
      r.resolve(final);
    } catch (e) {
      // the session or the turn went away meanwhile (deleted), or the store is down: the turn stays
      // streaming until a start (or on PostgreSQL the sweep) marks it interrupted
      if (!(e instanceof SessionNotFound || e instanceof TurnNotFound || e instanceof TurnNotStreaming)) this.log.error('the end of a reply could not be recorded', { session: r.session, turn: r.turnId, err: e });
      r.reject(e);
    } finally {
      this.running.delete(r.turnId);
    }
  }

  /**
   * The parent of a tool message: the turn it names, or the head as it is now, once every
   * `tool_result` it holds names a `tool_call` on the path to that turn (400 otherwise).
   */
  private async toolTurnParent(caller: Caller, sessionId: string, content: TurnContent, parentId: string | null | undefined): Promise<string | null> {
    const answers = typeof content === 'string' ? [] : content.flatMap((p) => (p.type === 'tool_result' ? [p.toolCallId] : []));
    if (answers.length === 0) throw new ValidationError('content of a tool message must hold tool_result parts');
    const { session } = this.access.seen(await this.store.getSession(sessionId), caller.user);
    const parent = parentId !== undefined ? parentId : session.headTurnId;
    const calls = new Set<string>();
    if (parent !== null) {
      try {
        for await (const chunk of this.store.scanTurns(sessionId, { turnId: parent })) {
          for (const t of chunk) {
            const c = turnOf(t).content;
            if (typeof c !== 'string') for (const p of c) if (p.type === 'tool_call') calls.add(p.id);
          }
        }
      } catch (e) {
        if (e instanceof TurnNotFound) throw new ValidationError('parentId must be a turn of this session');
        throw e;
      }
    }
    if (!answers.every((id) => calls.has(id))) throw new ValidationError('toolCallId must name a tool call on the path');
    return parent;
  }

  /**
   * What the model is sent: the path from the root to the turn it answers, oldest first,
   * without turns that ended in error or said nothing (reasoning parts the clients leave out),
   * cut from its oldest end to REPLY_CONTEXT_MAX (see ContextWindow) as it is read; and the
   * path's hash (the OpenAI door's index), undefined for a path longer than PATH_KEY_SHARE times
   * that bound, which no door request can carry (its body is at most BODY_LIMIT): such a path's
   * turns are not parsed but the few kept.
   */
  private async conversation(session: string, to: string | null): Promise<{ messages: ReplyMessage[]; pathKey: string | undefined }> {
    let pathKey: string | undefined = '';
    if (to === null) return { messages: [], pathKey };
    const window = new ContextWindow(this.settings.contextMaxBytes);
    const hashUpTo = this.settings.contextMaxBytes * PATH_KEY_SHARE;
    let pathBytes = 0;
    for await (const chunk of this.store.scanTurns(session, { turnId: to })) {
      for (const t of chunk) {
        pathBytes += t.json.length;
        if (pathBytes > hashUpTo) pathKey = undefined;
        // the path's hash, every turn of it: what the reply's own is made from (the door's index)
        const turn = pathKey !== undefined ? turnOf(t) : undefined;
        if (turn !== undefined) pathKey = pathHash(pathKey as string, turn);
        window.add(t.json, turn);
      }
    }
    return { messages: window.messages(), pathKey };
  }

  /**
   * Stops a streaming turn: the reply this instance generates is cancelled and recorded with
   * the text so far (`interrupted`); with PostgreSQL, one another instance generates is told to;
   * a streaming turn no one generates is marked interrupted. The turn as recorded then; 409
   * `Turn is not streaming` when it was not.
   */
  async cancel(caller: Caller, sessionId: string, turnId: string): Promise<TurnRecord> {
    this.access.seen(await this.store.getSession(sessionId), caller.user);
    const mine = this.running.get(turnId);
    if (mine !== undefined && mine.session === sessionId) {
      const won = mine.cancel();
      const ended = await mine.done;
      // a cancel that came after the end was decided, or a reply that ended otherwise meanwhile (a
      // write refused), lost the race: the turn is not streaming any more, never a 200 `complete`
      if (!won || turnOf(ended).status !== 'interrupted') throw new TurnNotStreaming();
      return ended;
    }
    const turn = await this.store.getTurn(sessionId, turnId);
    if (turn === undefined) throw new TurnNotFound();
    if (turnOf(turn).status !== 'streaming') throw new TurnNotStreaming();
    const broadcast = this.store.broadcast();
    if (broadcast !== undefined) {
      await broadcast.send(`cancel ${turnId}`);
      const ended = await this.endedWithin(sessionId, turnId, CANCEL_WAIT_MS);
      if (ended !== undefined) return interruptedOr409(ended);
    }
    // no one generates it any more (or the one that did is gone): it ends here
    try {
      const r = await this.store.updateTurn(sessionId, turnId, { status: 'interrupted' }, { guard: this.access.guard(caller.user, undefined), onlyStreaming: true, uncharged: true });
      return r.turn;
    } catch (e) {
      // another instance recorded its end meanwhile: that is the answer when the end is the cancel's
      if (!(e instanceof TurnNotStreaming)) throw e;
      const t = await this.store.getTurn(sessionId, turnId);
      if (t === undefined) throw new TurnNotFound();
      return interruptedOr409(t);
    }
  }

  /** The turn once it is no longer streaming, looked at every 50 ms for `ms`; undefined if it still is. */
  private async endedWithin(sessionId: string, turnId: string, ms: number): Promise<TurnRecord | undefined> {
    const until = Date.now() + ms;
    for (;;) {
      const t = await this.store.getTurn(sessionId, turnId);
      if (t === undefined) throw new TurnNotFound();
      if (turnOf(t).status !== 'streaming') return t;
      if (Date.now() >= until) return undefined;
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /** The server stops: every reply in progress is cancelled and recorded `interrupted` (for at most a few seconds). */
  async stop(): Promise<void> {
    this.stopping = true;
    const all = [...this.running.values()];
    for (const r of all) r.cancel();
    await Promise.race([Promise.allSettled(all.map((r) => r.done)), new Promise((resolve) => setTimeout(resolve, STOP_WAIT_MS).unref())]);
    await this.store.broadcast()?.close();
  }
}

/** A turn a cancel ended (`interrupted`), or 409: a cancel that loses the race to the end never answers it. */
function interruptedOr409(t: TurnRecord): TurnRecord {
  if (turnOf(t).status !== 'interrupted') throw new TurnNotStreaming();
  return t;
}

/** The tools of a request that a provider would refuse: names given twice, a choice of no tool offered (400). */
function checkTools(tools: readonly ToolSpec[] | undefined, choice: ToolChoice | undefined): void {
  const names = new Set<string>();
  for (const [i, t] of (tools ?? []).entries()) {
    if (names.has(t.name)) throw new ValidationError(`tools[${i}].name must be unique: ${JSON.stringify(t.name)} is given twice`);
    names.add(t.name);
  }
  if (choice !== undefined && choice !== 'auto' && choice !== 'none' && names.size === 0) throw new ValidationError('toolChoice needs tools');
  if (typeof choice === 'object' && !names.has(choice.name)) throw new ValidationError('toolChoice.name must name one of tools');
}
