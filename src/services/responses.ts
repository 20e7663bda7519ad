// OpenAI's stateful API as a use case over sessions and turns: a response is a reply turn (its
// previous_response_id its parent), a conversation a session, its items the turns of its current
// path. Every id is its caller's own: another user's response or conversation is not found,
// whatever ACCESS says. The replies are ReplyService's; this is where they go and what they keep.
import { DomainError, ReplyInProgress } from '../domain/errors.js';
import { newObjectId } from '../domain/ids.js';
import type { ChatSession, JsonObject, Part, Turn } from '../domain/records.js';
import type { ProviderConfig, ReplyOptions, ToolChoice, ToolSpec } from '../providers/wire.js';
import { SessionNotFound, SessionNotVisible, TurnNotFound, type SessionRecord, type Store, type TurnRecord } from '../store/store.js';
import type { NewTurn } from '../store/writes.js';
import { decidedOnRead } from './access.js';
import type { Piece } from '../domain/deltas.js';
import type { DoorMessage } from '../domain/door-match.js';
import { newSession, type DoorService } from './door.js';
import type { ReplyService } from './replies.js';
import type { UnrecordedReply } from './reply-request.js';
import { turnOf } from './reply-recorder.js';

/** The instructions a response keeps to show them again: longer ones are used, not kept (a turn's metadata is at most 16 KiB). */
const KEPT_INSTRUCTIONS_MAX = 4096;

export class ResponseNotFound extends DomainError {
  constructor() {
    super('turn_not_found', 'Response not found');
  }
}

export class ConversationNotFound extends DomainError {
  constructor() {
    super('session_not_found', 'Conversation not found');
  }
}

export class ItemNotFound extends DomainError {
  constructor() {
    super('turn_not_found', 'Item not found');
  }
}

/** A POST /v1/responses as the edge read it. */
export interface ResponseRequest {
  readonly user: string;
  /** The request's `model`, as it is answered. */
  readonly model: string;
  readonly input: readonly DoorMessage[];
  readonly instructions?: string | undefined;
  /** The turn id of previous_response_id. */
  readonly previousResponse?: string | undefined;
  /** The session id of `conversation`. */
  readonly conversation?: string | undefined;
  readonly store: boolean;
  readonly background: boolean;
  readonly options: ReplyOptions;
  readonly maxOutputTokens?: number | undefined;
  readonly tools?: readonly ToolSpec[] | undefined;
  readonly toolChoice?: ToolChoice | undefined;
  readonly metadata?: JsonObject | undefined;
  /** X-Project-Id, for a new session. */
  readonly projectId: string;
  readonly onPiece: (piece: Piece) => void;
  /** Aborted when the client of a response it waits for (not a background one) closes its connection. */
  readonly signal: AbortSignal;
}

export type ResponseStarted =
  | { readonly kind: 'recorded'; readonly session: string; readonly reply: TurnRecord; readonly done: Promise<TurnRecord> }
  | { readonly kind: 'unrecorded'; readonly reply: Turn; readonly done: Promise<UnrecordedReply> };

export class ResponsesService {
  constructor(
    private readonly store: Store,
    private readonly replies: ReplyService,
    private readonly door: DoorService,
  ) {}

  /** The caller's session of this id, or ConversationNotFound. */
  async session(user: string, id: string): Promise<SessionRecord> {
    const r = await this.store.getSession(id);
    if (r === undefined || r.session.user !== user) throw new ConversationNotFound();
    return r;
  }

  /** One of the caller's turns by its id alone, with its session; `missing` when it is none of theirs. */
  async turn(user: string, id: string, missing: () => DomainError): Promise<{ session: string; turn: Turn }> {
    const session = await this.store.sessionOfTurn(id);
    if (session === undefined) throw missing();
    const s = await this.store.getSession(session);
    const t = s === undefined || s.session.user !== user ? undefined : await this.store.getTurn(session, id);
    if (t === undefined) throw missing();
    return { session, turn: turnOf(t) };
  }

  /** The caller's response (a reply turn). */
  async response(user: string, id: string): Promise<{ session: string; turn: Turn }> {
    const r = await this.turn(user, id, () => new ResponseNotFound());
    if (r.turn.role !== 'assistant') throw new ResponseNotFound();
    return r;
  }

  /** What an item id of the caller's names (an `item_reference`), as the turn it would be; undefined: reasoning, never sent back. */
  async referenced(user: string, turnId: string, index: number | undefined, kind: string): Promise<DoorMessage | undefined> {
    const { turn } = await this.turn(user, turnId, () => new ItemNotFound());
    const parts: readonly Part[] = typeof turn.content === 'string' ? [{ type: 'text', text: turn.content }] : turn.content;
    if (kind === 'rs') return undefined;
    if (kind === 'fc' || kind === 'fco') {
      const wanted = parts.filter((p) => p.type === (kind === 'fc' ? 'tool_call' : 'tool_result'));
      const one = wanted[index ?? -1];
      if (one === undefined) throw new ItemNotFound();
      return { role: kind === 'fc' ? 'assistant' : 'tool', content: [one] };
    }
    // a reply's message is its text alone
    if (turn.role === 'assistant') return { role: 'assistant', content: parts.filter((p) => p.type === 'text').map((p) => (p as { text: string }).text).join('') };
    return { role: turn.role, content: turn.content };
  }

  /** Starts a response: under previous_response_id, at the conversation's head, or in a new session; or, with store: false, not recorded. */
  async create(req: ResponseRequest): Promise<ResponseStarted> {
    const { choice, provider, providerId } = this.door.choose(req.model);
    if (req.previousResponse !== undefined && req.conversation !== undefined) throw new DomainError('invalid', 'previous_response_id and conversation cannot both be given');
    const options: ReplyOptions = { ...req.options, ...(req.maxOutputTokens !== undefined ? { maxTokens: req.maxOutputTokens } : {}) };
    if (!req.store) return this.unrecorded(req, provider, choice.model, options);
    let session: string;
    let parentId: string | null;
    let fresh = false;
    if (req.previousResponse !== undefined) {
      const prev = await this.turn(req.user, req.previousResponse, () => new DomainError('invalid', 'previous_response_id must name one of your responses'));
      if (prev.turn.role !== 'assistant') throw new DomainError('invalid', 'previous_response_id must name one of your responses');
      session = prev.session;
      parentId = prev.turn._id;
    } else if (req.conversation !== undefined) {
      const s = await this.session(req.user, req.conversation);
      session = s.session._id;
      parentId = s.session.headTurnId;
    } else {
      session = await this.newSession(req.user, req.projectId, providerId, choice.model, req.input);
      parentId = null;
      fresh = true;
    }
    const kept: JsonObject = {
      model: req.model,
      previous_response_id: req.previousResponse !== undefined ? `resp_${req.previousResponse}` : null,
      ...(req.instructions !== undefined && req.instructions.length <= KEPT_INSTRUCTIONS_MAX ? { instructions: req.instructions } : {}),
      ...(req.maxOutputTokens !== undefined ? { max_output_tokens: req.maxOutputTokens } : {}),
      background: req.background,
      ...(req.metadata !== undefined ? { metadata: req.metadata } : {}),
      ...(req.conversation !== undefined ? { conversation: session } : {}),
    };
    try {
      let started;
      for (;;) {
        try {
          started = await this.replies.begin(
            { user: req.user },
            session,
            { parentId, chain: req.input, model: choice.model, providerId, options, tools: req.tools, toolChoice: req.toolChoice, onPiece: req.onPiece, instructions: req.instructions, replyMetadata: { response: kept } },
            undefined,
          );
          break;
        } catch (e) {
          if (!(e instanceof ReplyInProgress)) throw e;
          // a response of the conversation going: this one waits for its end (a conversation's
          // next response then goes on from it, at its head), as the door does
          await this.door.whenEnded(session, e.turnId, req.signal);
          if (req.conversation !== undefined) parentId = (await this.session(req.user, req.conversation)).session.headTurnId;
        }
      }
      if (!req.background) {
        // a client that closes its connection before the end cancels the response (not a background one)
        const cancel = (): void => void this.replies.cancel({ user: req.user }, session, started.reply._id).catch(() => undefined);
        req.signal.addEventListener('abort', cancel, { once: true });
        const off = (): void => req.signal.removeEventListener('abort', cancel);
        started.done.then(off, off);
      }
      return { kind: 'recorded', session, reply: started.reply, done: started.done };
    } catch (e) {
      if (fresh) await this.store.deleteSession(session).catch(() => undefined);
      throw e;
    }
  }

  private async unrecorded(req: ResponseRequest, provider: ProviderConfig, model: string, options: ReplyOptions): Promise<ResponseStarted> {
    const before: DoorMessage[] = [];
    if (req.previousResponse !== undefined) {
      const prev = await this.response(req.user, req.previousResponse);
      for await (const chunk of this.store.scanTurns(prev.session, { turnId: prev.turn._id })) for (const t of chunk) before.push(turnOf(t));
    } else if (req.conversation !== undefined) {
      const s = await this.session(req.user, req.conversation);
      if (s.session.headTurnId !== null) for await (const chunk of this.store.scanTurns(s.session._id, 'head')) for (const t of chunk) before.push(turnOf(t));
    }
    const now = new Date().toISOString();
    const id = newObjectId(Date.parse(now));
    const reply: Turn = { _id: id, session: '', parentId: null, user: req.user, role: 'assistant', content: '', model, metadata: { response: unrecordedKept(req) }, status: 'streaming', createdAt: now };
    const done = this.replies.unrecorded({ provider, model, system: req.instructions, messages: [...before, ...req.input].map((m) => ({ role: m.role, content: m.content })), options, tools: req.tools, toolChoice: req.toolChoice, onPiece: req.onPiece, signal: req.signal });
    return { kind: 'unrecorded', reply, done };
  }

  /** A new session for a response or a conversation (the door's newSession). */
  newSession(user: string, projectId: string, providerId: string, model: string, input: readonly DoorMessage[], metadata?: JsonObject): Promise<string> {
    return newSession(this.store, { user, projectId, providerId, model, messages: input, ...(metadata !== undefined ? { metadata: metadata as { [k: string]: string } } : {}) });
  }

  /** Stops a response in progress (background, or streaming to its client): the turn as recorded. */
  async cancel(user: string, id: string): Promise<Turn> {
    const r = await this.response(user, id);
    return turnOf(await this.replies.cancel({ user }, r.session, id));
  }

  /** Deletes a response: its turn and what grew under it. */
  async deleteResponse(user: string, id: string): Promise<void> {
    const r = await this.response(user, id);
    await this.store.deleteTurn(r.session, id);
  }

  /** The input of a response: the turns between the reply before it on its path and it. */
  async inputOf(user: string, id: string): Promise<Turn[]> {
    const r = await this.response(user, id);
    const path: Turn[] = [];
    for await (const chunk of this.store.scanTurns(r.session, { turnId: id })) for (const t of chunk) path.push(turnOf(t));
    path.pop();
    let from = path.length;
    while (from > 0 && (path[from - 1] as Turn).role !== 'assistant') from--;
    return path.slice(from);
  }

  /** The turns of a conversation's current path, oldest first. */
  async pathOf(user: string, sessionId: string): Promise<{ session: SessionRecord; turns: Turn[] }> {
    const s = await this.session(user, sessionId);
    const turns: Turn[] = [];
    if (s.session.headTurnId !== null) for await (const chunk of this.store.scanTurns(sessionId, 'head')) for (const t of chunk) turns.push(turnOf(t));
    return { session: s, turns };
  }

  /** Records items at a conversation's head, in order: the turns made. */
  async addItems(user: string, sessionId: string, items: readonly DoorMessage[]): Promise<Turn[]> {
    await this.session(user, sessionId);
    // each at the head as it moves: the first under the conversation's head, each next under the one before
    const turns = items.map((m): NewTurn => ({ user, role: m.role, content: m.content, status: 'complete' }));
    const made = await this.store.appendTurns(sessionId, turns);
    return made.map(turnOf);
  }

  /** Replaces a conversation's metadata (a conversation key the chat door keeps stays). */
  async updateMetadata(user: string, sessionId: string, metadata: JsonObject): Promise<ChatSession> {
    // the key kept is read first: the write holds only while the metadata is as read, else it is decided again
    const r = await decidedOnRead(async () => {
      const read = await this.store.getSession(sessionId);
      if (read === undefined) throw new SessionNotFound();
      if (read.session.user !== user) throw new ConversationNotFound();
      const key = read.session.metadata?.['conversationKey'];
      const next = { ...(key !== undefined ? { conversationKey: key } : {}), ...(metadata as { [k: string]: string }) };
      return this.store.updateSession(sessionId, { metadata: next }, { guard: { caller: { user }, same: { metadata: read.session.metadata } } }).catch(conversationNotVisible);
    });
    return r.session;
  }

  /** Deletes a conversation: its session and its turns. */
  async deleteConversation(user: string, sessionId: string): Promise<void> {
    await this.store.deleteSession(sessionId, { guard: { caller: { user } } }).catch(conversationNotVisible);
  }

  /** Deletes one turn of a conversation (an item) and what grew under it. */
  async deleteItem(user: string, sessionId: string, turnId: string): Promise<void> {
    await this.session(user, sessionId);
    try {
      await this.store.deleteTurn(sessionId, turnId);
    } catch (e) {
      if (e instanceof TurnNotFound) throw new ItemNotFound();
      throw e;
    }
  }
}

/** What a response not recorded shows of its request, as a recorded one shows what its turn keeps. */
function unrecordedKept(req: ResponseRequest): JsonObject {
  return {
    model: req.model,
    previous_response_id: req.previousResponse !== undefined ? `resp_${req.previousResponse}` : null,
    ...(req.instructions !== undefined ? { instructions: req.instructions } : {}),
    ...(req.maxOutputTokens !== undefined ? { max_output_tokens: req.maxOutputTokens } : {}),
    background: false,
    ...(req.metadata !== undefined ? { metadata: req.metadata } : {}),
    store: false,
  };
}

/** Another user's session is a conversation that is not there, in the door's words (one not there at all keeps the store's). */
function conversationNotVisible(e: unknown): never {
  throw e instanceof SessionNotVisible ? new ConversationNotFound() : e;
}
