// The OpenAI door as a use case: which of the caller's sessions a Chat Completions request
// continues, and where in it (the messages are walked down its tree; what is past the deepest
// match is recorded as new turns, so an edited history becomes a branch), then the reply, asked
// as any other. A retry of a request already answered is answered from what was recorded.
import { createHash } from 'node:crypto';
import { DomainError, ReplyInProgress } from '../domain/errors.js';
import { newObjectId } from '../domain/ids.js';
import { DEFAULT_MODE, chatSession, type Turn, type TurnContent } from '../domain/records.js';
import type { ProviderCatalog } from '../providers/catalog.js';
import type { ProviderFailed } from '../providers/failure.js';
import { modelAllowed, providerConfig } from '../providers/config.js';
import { ModelIds, type ModelChoice } from '../providers/model-ids.js';
import type { ProviderConfig, ReplyOptions, ToolChoice, ToolSpec } from '../providers/wire.js';
import { SessionNotFound, TurnNotFound, type SessionRecord, type Store, type TurnRecord } from '../store/store.js';
import type { Piece } from '../domain/deltas.js';
import { pathHashes, sameTurn, type DoorMessage } from '../domain/door-match.js';
import type { Access } from './access.js';
import type { ReplyService } from './replies.js';
import type { StartedReply, UnrecordedReply } from './reply-request.js';
import { turnOf } from './reply-recorder.js';

/** How long a request's answer is remembered for its retries. */
const RETRY_WINDOW_MS = 10 * 60_000;
/** Answers remembered at most (the oldest go first). */
const RETRY_ENTRIES_MAX = 20_000;
/** How often a retry looks at a reply another instance generates, until it ends. */
const FOLLOW_EVERY_MS = 100;

/** Candidates a path lookup reads at most (the sessions holding the same path, newest first: each is checked). */
const PATH_CANDIDATES = 16;

/** A Chat Completions request as the door's edge read it. */
export interface CompletionRequest {
  /** The user the conversation is recorded for (the caller, or the end user it acts for). */
  readonly user: string;
  /** The request's `model`, as it will be answered. */
  readonly model: string;
  readonly messages: readonly DoorMessage[];
  readonly options: ReplyOptions;
  readonly tools?: readonly ToolSpec[] | undefined;
  readonly toolChoice?: ToolChoice | undefined;
  /** X-Session-Id (or metadata.session_id). */
  readonly sessionId?: string | undefined;
  /** X-Conversation-Key (X-OpenWebUI-Chat-Id, metadata.conversation_key). */
  readonly conversationKey?: string | undefined;
  /** X-Project-Id, for a new session. */
  readonly projectId: string;
  /** false: answered (and counted), not recorded. */
  readonly record: boolean;
  /** The key a retry of an answered request is found by (its Idempotency-Key, or its body's hash when the client says it tries again), and the keys this answer is remembered by. */
  readonly retry: { readonly lookup: string | undefined; readonly remember: readonly string[] };
  readonly onPiece: (piece: Piece) => void;
  /** Aborted when the client closes its connection: the reply is cancelled. */
  readonly signal: AbortSignal;
}

/** A request answered: a recorded reply (its session, its turn as it began, its end), or one not recorded. */
export type CompletionStarted =
  | { readonly kind: 'recorded'; readonly session: string; readonly reply: TurnRecord; readonly done: Promise<TurnRecord>; readonly replayed: boolean; readonly failure: () => ProviderFailed | undefined }
  | { readonly kind: 'unrecorded'; readonly done: Promise<UnrecordedReply> };

interface Remembered {
  readonly user: string;
  readonly session: string;
  readonly reply: string;
  readonly at: number;
}

export class DoorService {
  private ids: { readonly catalog: ProviderCatalog; readonly ids: ModelIds } | undefined;
  /** Answers by retry key (an Idempotency-Key or a body's hash), in the order made. */
  private readonly answered = new Map<string, Remembered>();
  /** The last of the requests of each conversation key waiting their turn (beginIn). */
  private readonly keyTurns = new Map<string, Promise<void>>();

  constructor(
    private readonly store: Store,
    private readonly replies: ReplyService,
    private readonly catalog: () => ProviderCatalog,
    private readonly access: Access,
  ) {}

  /** The model ids of the catalog as loaded now (made again after a reload). */
  modelIds(): ModelIds {
    const catalog = this.catalog();
    if (this.ids?.catalog !== catalog) this.ids = { catalog, ids: new ModelIds(catalog) };
    return this.ids.ids;
  }

  /** The provider and model a request's `model` names: 404 model_not_found, or 400 naming the choices. */
  choose(model: string): { readonly choice: ModelChoice; readonly provider: ProviderConfig; readonly providerId: string } {
    const found = this.modelIds().resolve(model);
    if ('kind' in found) {
      if (found.kind === 'several') throw new DomainError('invalid', `The model ${JSON.stringify(model)} is served by several providers: name one of ${found.choices.map((c) => JSON.stringify(c)).join(', ')}`);
      throw new DomainError('model_not_found', `The model ${JSON.stringify(model)} does not exist (GET /v1/models lists those there are)`);
    }
    const record = this.catalog().records.get(found.providerId);
    if (record === undefined) throw new DomainError('model_not_found', `The model ${JSON.stringify(model)} does not exist (GET /v1/models lists those there are)`);
    const provider = providerConfig(record);
    if (!modelAllowed(provider, found.model)) throw new DomainError('model_not_found', `The model ${JSON.stringify(model)} does not exist (GET /v1/models lists those there are)`);
    return { choice: found, provider, providerId: typeof record['_id'] === 'string' ? record['_id'] : found.providerId };
  }

  /** Starts the reply a request asks for (recorded or not), or finds the one a retry of it already has. */
  async complete(req: CompletionRequest): Promise<CompletionStarted> {
    const { choice, provider, providerId } = this.choose(req.model);
    if (!req.record) {
      const messages = req.messages.map((m) => ({ role: m.role, content: m.content }));
      return { kind: 'unrecorded', done: this.replies.unrecorded({ provider, model: choice.model, messages, options: req.options, tools: req.tools, toolChoice: req.toolChoice, onPiece: req.onPiece, signal: req.signal }) };
    }
    if (req.retry.lookup !== undefined) {
      const again = await this.retried(req, choice, providerId);
      if (again !== undefined) return again;
    }
    const caller = { user: req.user };
    // a reply of the session going: wait for its end, then place the messages again (what it
    // recorded now matches them, so this reply becomes its sibling); OpenAI never answers 409
    for (;;) {
      const begun = await this.beginIn(req, choice, providerId);
      if ('busy' in begun) {
        await this.whenEnded(begun.session, begun.busy, req.signal);
        continue;
      }
      const { session, started } = begun;
      this.remember(req, session, started.reply._id);
      this.cancelOnAbort(req.signal, caller, session, started.reply._id, started.done);
      return { kind: 'recorded', session, reply: started.reply, done: started.done, replayed: false, failure: started.failure };
    }
  }

  /**
   * The session a request goes in (found, or made), the messages placed in it and the reply
   * begun; or the reply of the session that is going. Requests of one conversation key take
   * turns here (across the instances of one PostgreSQL database too, while none has its session),
   * so that the first of them alone makes its session.
   */
  private async beginIn(req: CompletionRequest, choice: ModelChoice, providerId: string): Promise<{ readonly session: string; readonly started: StartedReply } | { readonly session: string; readonly busy: string }> {
    const release = req.conversationKey === undefined ? undefined : await this.keyTurn(`${req.user}\n${req.conversationKey}`);
    let unheld: (() => void) | undefined;
    try {
      let found = await this.sessionOf(req);
      // a key's first requests at other instances (PostgreSQL) take turns too: whoever holds it looks again, then makes the session
      if (found === undefined && req.conversationKey !== undefined) {
        unheld = await this.store.nameLocks()?.hold(`conversation\n${req.user}\n${req.conversationKey}`);
        if (unheld !== undefined) found = await this.sessionOf(req);
      }
      let session = found?.id;
      let fresh = false;
      if (session === undefined) {
        session = await newSession(this.store, { user: req.user, projectId: req.projectId, providerId, model: choice.model, messages: req.messages, ...(req.conversationKey !== undefined ? { metadata: { conversationKey: req.conversationKey } } : {}) });
        fresh = true;
      }
      const { parentId, chain } = await this.placeIn(session, req.messages, fresh, found?.record);
      // the assistant turns recorded here are found by their path later (rule 3)
      const hashes = pathHashes(req.messages);
      const at = req.messages.length - chain.length;
      const pathKeys = chain.map((m, i) => (m.role === 'assistant' ? hashes[at + i] : undefined));
      try {
        const started = await this.replies.begin({ user: req.user }, session, { parentId, chain, pathKeys, model: choice.model, providerId, options: req.options, tools: req.tools, toolChoice: req.toolChoice, onPiece: req.onPiece }, undefined);
        return { session, started };
      } catch (e) {
        if (e instanceof ReplyInProgress) return { session, busy: e.turnId };
        // a session made for this request holds nothing: it goes with the refusal
        if (fresh) await this.store.deleteSession(session).catch(() => undefined);
        throw e;
      }
    } finally {
      unheld?.();
      release?.();
    }
  }

  /** Waits for the requests before it of one key (see beginIn); the function given ends its turn. */
  private async keyTurn(key: string): Promise<() => void> {
    const before = this.keyTurns.get(key);
    let end!: () => void;
    const mine = new Promise<void>((resolve) => (end = resolve));
    const last = (before ?? Promise.resolve()).then(() => mine);
    this.keyTurns.set(key, last);
    await before;
    return () => {
      end();
      if (this.keyTurns.get(key) === last) this.keyTurns.delete(key);
    };
  }

  /** The end of a session's reply (see followed), or of the wait when the client leaves first. */
  async whenEnded(session: string, reply: string, signal: AbortSignal): Promise<void> {
    if (signal.aborted) throw new ReplyInProgress(reply);
    let off: (() => void) | undefined;
    const left = new Promise<never>((_, reject) => {
      const gone = (): void => reject(new ReplyInProgress(reply));
      signal.addEventListener('abort', gone, { once: true });
      off = () => signal.removeEventListener('abort', gone);
    });
    try {
      await Promise.race([this.followed(session, reply, signal).catch((e: unknown) => (e instanceof TurnNotFound ? undefined : Promise.reject(e))), left]);
    } finally {
      off?.();
    }
  }

  /**
   * The session a request continues, by the door's rules: (1) the one X-Session-Id names, (2)
   * the one of the conversation key, (3) when the messages before the last hold an assistant
   * message, the caller's session holding a path equal to them; undefined: a new one (4). The
   * session as read, when it was (rule 1), so that it is not read twice.
   */
  private async sessionOf(req: CompletionRequest): Promise<{ readonly id: string; readonly record?: SessionRecord } | undefined> {
    if (req.sessionId !== undefined) {
      const r = await this.store.getSession(req.sessionId);
      if (r === undefined || r.session.user !== req.user) throw new SessionNotFound();
      return { id: r.session._id, record: r };
    }
    if (req.conversationKey !== undefined) {
      const id = await this.store.sessionByConversationKey(req.user, req.conversationKey, this.access.now());
      return id === undefined ? undefined : { id };
    }
    const before = req.messages.slice(0, -1);
    if (!before.some((m) => m.role === 'assistant')) return undefined;
    const hashes = pathHashes(before);
    // the longest prefix that ends with an assistant message and that some session holds
    for (let k = before.length - 1; k >= 0; k--) {
      if ((before[k] as DoorMessage).role !== 'assistant') continue;
      for (const c of await this.store.turnsByPathKey(req.user, hashes[k] as string, this.access.now(), PATH_CANDIDATES)) {
        if (await this.holds(c.session, c.turn, before.slice(0, k + 1))) return { id: c.session };
      }
    }
    return undefined;
  }

  /** Whether the path from the root to `turn` of `session` is these messages (an index entry may be stale: a turn edited since). */
  private async holds(session: string, turn: string, messages: readonly DoorMessage[]): Promise<boolean> {
    const path: Turn[] = [];
    try {
      for await (const chunk of this.store.scanTurns(session, { turnId: turn })) for (const t of chunk) path.push(turnOf(t));
    } catch (e) {
      if (e instanceof TurnNotFound || e instanceof SessionNotFound) return false;
      throw e;
    }
    return path.length === messages.length && path.every((t, i) => sameTurn(t, messages[i] as DoorMessage));
  }

  /**
   * Where the messages go in a session: walked down its tree from the root (a turn matches a
   * message by sameTurn; of several that match, the one on the head's path, else the newest),
   * the reply's parent is the deepest match and the messages past it are the turns to record.
   * `known`: the session as sessionOf read it, if it did.
   */
  private async placeIn(session: string, messages: readonly DoorMessage[], fresh: boolean, known: SessionRecord | undefined): Promise<{ parentId: string | null; chain: DoorMessage[] }> {
    if (fresh) return { parentId: null, chain: [...messages] };
    const children = new Map<string | null, Turn[]>();
    let head: string | null = null;
    const s = known ?? (await this.store.getSession(session));
    if (s === undefined) throw new SessionNotFound();
    head = s.session.headTurnId;
    const byId = new Map<string, Turn>();
    for await (const chunk of this.store.scanTurns(session)) {
      for (const r of chunk) {
        const t = turnOf(r);
        byId.set(t._id, t);
        const list = children.get(t.parentId);
        if (list === undefined) children.set(t.parentId, [t]);
        else list.push(t);
      }
    }
    const onHead = new Set<string>();
    for (let id = head; id !== null; id = byId.get(id)?.parentId ?? null) onHead.add(id);
    let parent: string | null = null;
    let k = 0;
    for (; k < messages.length; k++) {
      const m = messages[k] as DoorMessage;
      const matches: Turn[] = (children.get(parent) ?? []).filter((t) => t.status !== 'streaming' && sameTurn(t, m));
      if (matches.length === 0) break;
      const pick: Turn = matches.find((t) => onHead.has(t._id)) ?? matches.reduce((a, b) => (b.createdAt > a.createdAt || (b.createdAt === a.createdAt && b._id > a._id) ? b : a));
      parent = pick._id;
    }
    return { parentId: parent, chain: messages.slice(k) };
  }

  /** The answer to a retry: its reply as recorded (followed to its end), or a new reply under the same turn when that one failed; undefined when none is remembered. */
  private async retried(req: CompletionRequest, choice: ModelChoice, providerId: string): Promise<CompletionStarted | undefined> {
    const now = Date.now();
    const seen = this.answered.get(req.retry.lookup as string);
    if (seen === undefined || seen.user !== req.user || now - seen.at >= RETRY_WINDOW_MS) return undefined;
    const reply = await this.store.getTurn(seen.session, seen.reply);
    if (reply === undefined) return undefined;
    const turn = turnOf(reply);
    if (turn.status === 'complete' || turn.status === 'streaming') {
      return { kind: 'recorded', session: seen.session, reply, done: turn.status === 'complete' ? Promise.resolve(reply) : this.followed(seen.session, seen.reply), replayed: true, failure: () => undefined };
    }
    // it ended interrupted (the client timed out and closed) or error: asked again under the same turn
    const caller = { user: req.user };
    const started = await this.replies.begin(caller, seen.session, { parentId: turn.parentId, model: choice.model, providerId, options: req.options, tools: req.tools, toolChoice: req.toolChoice, onPiece: req.onPiece }, undefined);
    this.remember(req, seen.session, started.reply._id);
    this.cancelOnAbort(req.signal, caller, seen.session, started.reply._id, started.done);
    return { kind: 'recorded', session: seen.session, reply: started.reply, done: started.done, replayed: false, failure: started.failure };
  }

  /** A streaming reply's end: this instance's own, or (another instance generates it) read until it is no longer streaming. */
  private async followed(session: string, id: string, signal?: AbortSignal): Promise<TurnRecord> {
    const own = this.replies.whenEnded(id);
    if (own !== undefined) return own;
    for (;;) {
      if (signal?.aborted === true) throw new ReplyInProgress(id);
      const t = await this.store.getTurn(session, id);
      if (t === undefined) throw new TurnNotFound();
      if (turnOf(t).status !== 'streaming') return t;
      await new Promise((resolve) => setTimeout(resolve, FOLLOW_EVERY_MS));
    }
  }

  private remember(req: CompletionRequest, session: string, reply: string): void {
    const at = Date.now();
    for (const k of req.retry.remember) {
      this.answered.delete(k);
      this.answered.set(k, { user: req.user, session, reply, at });
    }
    // oldest first: drop what is past the window, and past the bound
    for (const [k, r] of this.answered) {
      if (this.answered.size <= RETRY_ENTRIES_MAX && at - r.at < RETRY_WINDOW_MS) break;
      this.answered.delete(k);
    }
  }

  /** A client that closes its connection before the end cancels the reply (a chat UI's stop button). */
  private cancelOnAbort(signal: AbortSignal, caller: { readonly user: string }, session: string, reply: string, done: Promise<TurnRecord>): void {
    if (signal.aborted) {
      void this.replies.cancel(caller, session, reply).catch(() => undefined);
      return;
    }
    const cancel = (): void => void this.replies.cancel(caller, session, reply).catch(() => undefined);
    signal.addEventListener('abort', cancel, { once: true });
    done.then(
      () => signal.removeEventListener('abort', cancel),
      () => signal.removeEventListener('abort', cancel),
    );
  }
}

/** The text of a content, joined (the first user message names a new session). */
export function textOf(content: TurnContent): string {
  return typeof content === 'string' ? content : content.flatMap((p) => (p.type === 'text' ? [p.text] : [])).join('');
}

/** The retry key of a body: its hash, per user. */
export function bodyKey(user: string, body: unknown): string {
  return `b:${createHash('sha256').update(user).update('\n').update(JSON.stringify(body)).digest('base64url')}`;
}

/**
 * A new session for a conversation the OpenAI door records: the caller's, in `projectId`, of the
 * provider and model its first reply names ('' for a conversation made before one), named after
 * the first 80 characters of its first user message.
 */
export async function newSession(
  store: Store,
  s: { readonly user: string; readonly projectId: string; readonly providerId: string; readonly model: string; readonly messages: readonly DoorMessage[]; readonly metadata?: { readonly [key: string]: string } | undefined },
): Promise<string> {
  const now = Date.now();
  const at = new Date(now).toISOString();
  const first = s.messages.find((m) => m.role === 'user');
  // (a message may hold half of a surrogate pair alone; a session's name is well-formed, as PostgreSQL reads it back from its JSON)
  const name = first === undefined ? '' : [...textOf(first.content).replace(/\s+/g, ' ').trim()].slice(0, 80).join('').replace(/\p{Cs}/gu, '\uFFFD');
  const r = await store.createSession(
    chatSession({
      _id: newObjectId(now),
      name,
      provider: s.providerId,
      selectedModel: s.model,
      mode: DEFAULT_MODE,
      user: s.user,
      project: s.projectId,
      createdAt: at,
      updatedAt: at,
      archived: false,
      headTurnId: null,
      ...(s.metadata !== undefined && Object.keys(s.metadata).length > 0 ? { metadata: s.metadata } : {}),
    }),
  );
  return r.session._id;
}
