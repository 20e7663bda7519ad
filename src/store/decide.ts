// What a write changes, decided from what it reads: one pure function per kind of write (./writes.ts),
// from the value and the view of the group (./group-view.ts) to the Changes the engine commits
// (./changes.ts). Every resulting session state, its version and newest turn, what its turns hold
// and what each change adds to its owner's usage are decided here once; engines apply them as they
// are. A refusal is an error thrown before anything is decided; nothing here writes or reads a clock.
import { appendToEnd, type DeltaPlace } from '../domain/deltas.js';
import { newObjectId } from '../domain/ids.js';
import { COUNT_MAX, countIn } from '../domain/numbers.js';
import { turnBefore, type TurnKey } from '../domain/order.js';
import { chatSession, DEFAULT_TURN_STATUS, nextTimestamp, NO_TOKENS, raisedByTurn, tokensOf, turnRecord, type ChatSession, type Tokens, type Turn } from '../domain/records.js';
import { replyEndEdit } from '../domain/reply-end.js';
import { isLive } from '../domain/retention.js';
import { ReplyInProgress } from '../domain/errors.js';
import { ValidationError } from '../domain/schema.js';
import { ifMatchHolds, versionOfSession } from '../domain/version.js';
import { NOTHING_HELD, NO_USAGE, type Change, type Held, type TurnWithJson, type Usage, type UsageDelta } from './changes.js';
import { keyOf, ownBytes, type WriteView } from './group-view.js';
import type { Tail } from './pieces.js';
import {
  PreconditionFailed,
  SessionMoved,
  SessionNotFound,
  SessionNotVisible,
  SessionStillLive,
  TurnNotFound,
  TurnNotStreaming,
  TurnStillStreaming,
  TurnTooLarge,
  type SessionAtWrite,
  type TurnEdit,
} from './store.js';
import type { Guard, Write } from './writes.js';

type Of<K extends Write['kind']> = Extract<Write, { readonly kind: K }>;

/** The changes `w` makes, read from `view`; throws to refuse, having decided nothing. */
export function decide(view: WriteView, w: Write): readonly Change[] {
  switch (w.kind) {
    case 'create':
      return [decideCreate(view, w)];
    case 'update':
      return [decideUpdate(view, w)];
    case 'delete':
      return [decideDelete(view, w)];
    case 'turns':
      return decideTurns(view, w);
    case 'editTurn':
    case 'endReply':
      return [decideEdit(view, w)];
    case 'deleteTurns':
      return [decideDeleteTurns(view, w)];
    case 'fork':
      return [decideFork(view, w)];
    case 'delta':
      return [decideDelta(view, w)];
  }
}

/**
 * Whether the session meets what the write requires of it (./writes.ts Guard), in order: seen by
 * its caller, If-Match, the fields it was decided from, gone for the purge.
 */
export function checkGuard(g: Guard | undefined, current: { readonly session: ChatSession; version(): string }): void {
  if (g === undefined) return;
  const c = g.caller;
  if (c !== undefined && ((c.anyOwner !== true && current.session.user !== c.user) || (c.live !== undefined && !isLive(current.session, c.live)))) throw new SessionNotVisible();
  if (g.ifMatch !== undefined && !ifMatchHolds(g.ifMatch, current.version())) throw new PreconditionFailed();
  if (g.same !== undefined && !Object.entries(g.same).every(([k, v]) => JSON.stringify(v) === JSON.stringify(current.session[k as keyof ChatSession]))) throw new SessionMoved();
  if (g.goneAt !== undefined && isLive(current.session, g.goneAt)) throw new SessionStillLive();
}

/** The session a write names, after its guard; SessionNotFound when there is none. */
function guarded(view: WriteView, id: string, guard: Guard | undefined): SessionAtWrite {
  const current = view.current(id);
  if (current === undefined) throw new SessionNotFound();
  checkGuard(guard, current);
  return current;
}

function decideCreate(view: WriteView, w: Of<'create'>): Change {
  if (view.current(w.session._id) !== undefined) throw new Error('duplicate session id');
  const s = chatSession({ ...w.session, headTurnId: null });
  const json = JSON.stringify(s);
  return { kind: 'create', session: s, json, version: versionOfSession(json, undefined), usage: usageDelta(s.user, { sessions: 1, bytes: Buffer.byteLength(json) }) };
}

function decideUpdate(view: WriteView, w: Of<'update'>): Change {
  const current = guarded(view, w.id, w.guard);
  const head = w.set.headTurnId;
  if (head !== undefined && current.turn(head) === undefined) throw new ValidationError('headTurnId must be a turn of this session');
  const was = current.session;
  const set = Object.fromEntries(Object.entries(w.set).filter(([, v]) => v !== undefined)) as Partial<ChatSession>;
  // (what a session is, its id, owner and origin, no write changes: only an import moves a session to another owner)
  const same = (): boolean => Object.entries(set).every(([k, v]) => JSON.stringify(v) === JSON.stringify(was[k as keyof ChatSession]));
  const next = w.unlessSame && same() ? was : chatSession({ ...was, ...set, updatedAt: nextTimestamp(was.updatedAt, w.now) });
  const json = JSON.stringify(next);
  return { kind: 'update', session: next, json, version: versionOfSession(json, current.lastTurn), usage: usageDelta(next.user, { bytes: Buffer.byteLength(json) - sessionBytes(current) }) };
}

function decideDelete(view: WriteView, w: Of<'delete'>): Change {
  const current = guarded(view, w.id, w.guard);
  // never refused: what it gives back counts for the group's later writes
  const h = current.held;
  const usage = usageDelta(current.session.user, { sessions: -1, turns: -h.turns, bytes: -(sessionBytes(current) + h.turnBytes), inputTokens: -h.inputTokens, outputTokens: -h.outputTokens, cachedTokens: -h.cachedTokens });
  return { kind: 'delete', id: w.id, session: current.session, usage };
}

/**
 * Turns recorded in order, in one write: each newer than the one before, under the head (which
 * each becomes in turn), a turn of the session or an earlier turn of the list. All or none (a
 * message and the start of its reply).
 */
function decideTurns(view: WriteView, w: Of<'turns'>): Change[] {
  const current = guarded(view, w.sessionId, w.guard);
  const streaming = w.refuse?.anyStreaming === true ? current.streamingTurn() : undefined;
  if (streaming !== undefined) throw new ReplyInProgress(streaming);
  const first = w.turns[0];
  if (first === undefined) throw new Error('no turn to append');
  // under a reply still being written, the turn would take the head from it mid-stream
  const firstParent = first.parentId === undefined ? current.session.headTurnId : first.parentId;
  if (w.refuse?.streamingParent === true && firstParent !== null && current.isStreaming(firstParent)) throw new TurnStillStreaming();
  let head = current.session.headTurnId;
  let newest = current.lastTurn;
  let session = current.session;
  let sessionJsonBytes = sessionBytes(current);
  let held = current.held;
  const out: Change[] = [];
  const mine = new Set<string>();
  w.turns.forEach((t, i) => {
    const parentId = t.parentId === undefined ? head : t.parentId;
    // the head is one of the session's turns; another parent is one the write named (read ahead), or one of this list
    if (parentId !== null && parentId !== head && !mine.has(parentId) && current.turn(parentId) === undefined) throw new ValidationError('parentId must be a turn of this session');
    const stamp = t._id !== undefined && t.createdAt !== undefined ? { _id: t._id, createdAt: t.createdAt } : turnStamp({ session, lastTurn: newest }, w.now);
    const turn = turnRecord({
      _id: stamp._id,
      session: w.sessionId,
      parentId,
      user: t.user,
      role: t.role,
      content: t.content,
      ...(t.model !== undefined ? { model: t.model } : {}),
      ...(t.metadata !== undefined ? { metadata: t.metadata } : {}),
      ...(t.usage !== undefined ? { usage: t.usage } : {}),
      status: t.status ?? DEFAULT_TURN_STATUS,
      createdAt: stamp.createdAt,
    });
    if (turn.createdAt < session.updatedAt || (newest !== undefined && !turnBefore(newest, turn))) throw new Error("a new turn must be newer than its session's turns and not older than its updatedAt");
    const next = chatSession({ ...raisedByTurn(session, turn.createdAt), headTurnId: turn._id });
    const json = ownBytes(JSON.stringify(turn));
    const sessionJson = JSON.stringify(next);
    const nextBytes = Buffer.byteLength(sessionJson);
    const tokens = tokensOf(turn.usage);
    // the session's owner is charged, whoever writes the turn
    const usage = usageDelta(session.user, { turns: 1, bytes: json.length + nextBytes - sessionJsonBytes, ...tokens });
    held = heldPlus(held, 1, json.length, tokens);
    const pathKey = w.pathKeys?.[i];
    const generated = w.generated && i === w.turns.length - 1;
    out.push({ kind: 'turn', turn, json, session: next, sessionJson, version: versionOfSession(sessionJson, keyOf(turn)), raised: next.updatedAt !== session.updatedAt, held, usage, ...(pathKey !== undefined ? { pathKey } : {}), ...(generated ? { generated: true } : {}) });
    mine.add(turn._id);
    head = turn._id;
    newest = keyOf(turn);
    session = next;
    sessionJsonBytes = nextBytes;
  });
  return out;
}

/** A turn changed by an edit, or by a reply's end (../domain/reply-end.ts); a streaming turn's text so far is folded into it for good. */
function decideEdit(view: WriteView, w: Of<'editTurn'> | Of<'endReply'>): Change {
  const current = guarded(view, w.sessionId, w.kind === 'editTurn' ? w.guard : undefined);
  const found = current.turn(w.turnId);
  if (found === undefined) throw new TurnNotFound();
  const was = turnRecord(JSON.parse(found.json.toString('utf8')) as Turn);
  // a delta or a PUT may have ended it since the write was asked
  if ((w.kind === 'endReply' || w.onlyStreaming) && was.status !== 'streaming') throw new TurnNotStreaming();
  const e: TurnEdit = w.kind === 'endReply' ? replyEndEdit(was, w.end) : w.edit;
  const turn = turnRecord({
    ...was,
    ...(e.content !== undefined ? { content: e.content } : {}),
    ...(e.metadata !== undefined ? { metadata: e.metadata } : {}),
    ...(e.usage !== undefined ? { usage: e.usage } : {}),
    ...(e.status !== undefined ? { status: e.status } : {}),
    ...(e.error !== undefined ? { error: e.error } : {}),
    ...(e.stopReason !== undefined ? { stopReason: e.stopReason } : {}),
  });
  const session = chatSession({ ...current.session, updatedAt: nextTimestamp(current.session.updatedAt, w.now) });
  const json = ownBytes(JSON.stringify(turn));
  const sessionJson = JSON.stringify(session);
  const tokens = minus(tokensOf(turn.usage), found.tokens);
  const usage = usageDelta(session.user, { bytes: json.length - found.bytes + Buffer.byteLength(sessionJson) - sessionBytes(current), ...tokens });
  const held = heldPlus(current.held, 0, json.length - found.bytes, tokens);
  // a turn whose content changed no longer has the path it was indexed by; a reply's end gives its own
  const pathKey = e.pathKey !== undefined ? e.pathKey : e.content !== undefined ? null : undefined;
  return { kind: 'editTurn', turn, json, session, sessionJson, version: versionOfSession(sessionJson, current.lastTurn), lastTurn: current.lastTurn, held, usage, ...(pathKey !== undefined ? { pathKey } : {}) };
}

function decideDeleteTurns(view: WriteView, w: Of<'deleteTurns'>): Change {
  const current = guarded(view, w.sessionId, w.guard);
  const target = current.turn(w.turnId);
  const removed = target === undefined ? undefined : current.subtree(w.turnId);
  if (target === undefined || removed === undefined) throw new TurnNotFound();
  const ids = new Set(removed.map((n) => n._id));
  const lastTurn = current.lastTurnAfterRemoving(ids);
  const head = current.session.headTurnId;
  const session = chatSession({ ...current.session, headTurnId: head !== null && ids.has(head) ? target.parentId : head, updatedAt: nextTimestamp(current.session.updatedAt, w.now) });
  const sessionJson = JSON.stringify(session);
  let bytes = 0;
  let tokens: Tokens = NO_TOKENS;
  for (const n of removed) {
    bytes += n.bytes;
    tokens = plus(tokens, n.tokens);
  }
  const gone = minus(NO_TOKENS, tokens);
  // never refused: what it gives back counts for the group's later writes
  const usage = usageDelta(session.user, { turns: -ids.size, bytes: Buffer.byteLength(sessionJson) - sessionBytes(current) - bytes, ...gone });
  const held = heldPlus(current.held, -ids.size, -bytes, gone);
  return { kind: 'deleteTurns', sessionId: w.sessionId, turnId: w.turnId, ids: [...ids], session, sessionJson, version: versionOfSession(sessionJson, lastTurn), lastTurn, held, usage };
}

/** The source's fields a fork keeps: its provider, model, mode, project, tags and metadata (not its expiry, instructions or history). */
function forkedSession(from: ChatSession, as: Of<'fork'>['as']): ChatSession {
  return chatSession({
    _id: as._id,
    name: as.name ?? from.name,
    provider: from.provider,
    selectedModel: from.selectedModel,
    mode: from.mode,
    user: as.owner,
    project: from.project,
    createdAt: as.at,
    updatedAt: as.at,
    archived: false,
    headTurnId: null,
    ...(from.tags !== undefined ? { tags: from.tags } : {}),
    ...(from.metadata !== undefined ? { metadata: from.metadata } : {}),
  });
}

function decideFork(view: WriteView, w: Of<'fork'>): Change {
  const source = guarded(view, w.sourceId, w.guard);
  const given = forkedSession(source.session, w.as);
  const end = w.turnId ?? source.session.headTurnId;
  const path = end === null ? [] : source.path(end);
  if (path === undefined) throw new TurnNotFound();
  if (view.current(given._id) !== undefined) throw new Error('duplicate session id');
  const turns: TurnWithJson[] = [];
  const copyOf = new Map<string, string>();
  let previous: Turn | undefined;
  let held = NOTHING_HELD;
  for (const t of path) {
    const was = turnRecord(JSON.parse(t.json.toString('utf8')) as Turn);
    const turn = turnRecord({ ...was, _id: copyId(was, previous), session: given._id, parentId: was.parentId === null ? null : (copyOf.get(was.parentId) ?? null) });
    copyOf.set(was._id, turn._id);
    const json = ownBytes(JSON.stringify(turn));
    turns.push({ turn, json });
    held = heldPlus(held, 1, json.length, tokensOf(turn.usage));
    previous = turn;
  }
  const last = previous === undefined ? undefined : keyOf(previous);
  const session = chatSession({
    ...(last === undefined ? given : raisedByTurn(given, last.createdAt)),
    headTurnId: previous?._id ?? null,
    forkedFrom: { session: w.sourceId, turn: end },
  });
  const json = JSON.stringify(session);
  // the copies are the fork's owner's, like turns they wrote
  const usage = usageDelta(w.as.owner, { sessions: 1, turns: held.turns, bytes: Buffer.byteLength(json) + held.turnBytes, inputTokens: held.inputTokens, outputTokens: held.outputTokens, cachedTokens: held.cachedTokens });
  return { kind: 'fork', session, json, version: versionOfSession(json, last), turns, held, usage };
}

/**
 * Pieces appended to a streaming turn from its tail alone (its bytes, where its content ends,
 * its last delta's number): the places, the size check and the bytes charged cost what the
 * pieces hold, whatever the turn's length; the engine stores the delta as a row of its own.
 */
function decideDelta(view: WriteView, w: Of<'delta'>): Change {
  const current = guarded(view, w.sessionId, w.guard);
  const tail: Tail | 'not streaming' | undefined = view.tail(w.sessionId, w.turnId);
  if (tail === undefined) throw new TurnNotFound();
  if (tail === 'not streaming') throw new TurnNotStreaming();
  let end = tail.end;
  let grown = 0;
  const places: DeltaPlace[] = [];
  for (const p of w.pieces) {
    const r = appendToEnd(end, p);
    end = r.end;
    grown += r.bytes;
    places.push(r.place);
  }
  const bytes = tail.bytes + grown;
  if (bytes > w.maxBytes) throw new TurnTooLarge();
  // a streaming turn grows its session's owner's bytes, delta by delta; the session's own fields stay
  const usage = usageDelta(current.session.user, { bytes: grown });
  const held = heldPlus(current.held, 0, grown, NO_TOKENS);
  return { kind: 'delta', turnId: w.turnId, seq: tail.seq + 1, pieces: w.pieces, places, bytes, end, quiet: w.quiet, session: current.session, held, usage };
}

/**
 * The createdAt and _id of a new turn: now, never before the session's updatedAt or its newest
 * turn. Turns recorded within one millisecond share it, their ids in the order they were made
 * (a burst of turns is never stamped ahead of the clock); on a tie with the newest turn whose id
 * does not sort before the new one (ids sort in creation order within one process, not across a
 * restart with the clock set back) it is a millisecond later. The version still moves with every
 * turn: the newest turn is part of it.
 */
export function turnStamp(current: { readonly session: { readonly updatedAt: string }; readonly lastTurn: TurnKey | undefined }, nowMs: number): { createdAt: string; _id: string } {
  const now = new Date(nowMs).toISOString();
  let at = current.session.updatedAt > now ? current.session.updatedAt : now;
  const last = current.lastTurn;
  if (last !== undefined && last.createdAt > at) at = last.createdAt;
  let _id = newObjectId(Date.parse(at));
  if (last !== undefined && last.createdAt === at && _id <= last._id) {
    at = nextTimestamp(at, nowMs);
    _id = newObjectId(Date.parse(at));
  }
  return { createdAt: at, _id };
}

/**
 * The id of a turn's copy: a new id carrying its createdAt's second. Ids made in one second
 * sort in the order they are made, so copies keep the order of their originals; a copy that
 * shares a millisecond with the one before it (data of the first release) is made to sort after it.
 */
function copyId(original: Turn, previous: Turn | undefined): string {
  const id = newObjectId(Date.parse(original.createdAt));
  if (previous === undefined || previous.createdAt !== original.createdAt || id > previous._id) return id;
  return (BigInt(`0x${previous._id}`) + 1n).toString(16).padStart(24, '0');
}

/** A usage delta of `owner`: the figures given, 0 for the others. */
function usageDelta(owner: string, figures: Partial<Usage>): UsageDelta {
  return { ...NO_USAGE, ...figures, owner };
}

/** The tokens of several turns added up, each figure saturating at COUNT_MAX as a total does. */
function plus(a: Tokens, b: Tokens): Tokens {
  return { inputTokens: Math.min(COUNT_MAX, a.inputTokens + b.inputTokens), outputTokens: Math.min(COUNT_MAX, a.outputTokens + b.outputTokens), cachedTokens: Math.min(COUNT_MAX, a.cachedTokens + b.cachedTokens) };
}

/** The change from tokens `b` to tokens `a` (each figure a count: the difference is exact). */
function minus(a: Tokens, b: Tokens): Tokens {
  return { inputTokens: a.inputTokens - b.inputTokens, outputTokens: a.outputTokens - b.outputTokens, cachedTokens: a.cachedTokens - b.cachedTokens };
}

/**
 * What a session's turns hold once `turns` turns, `bytes` bytes and `tokens` are added (negative:
 * taken away). Token figures saturate at COUNT_MAX; taking from one at the top leaves a figure
 * not known here, so the held says `recount` and the engine counts the session's tokens again.
 */
function heldPlus(h: Held, turns: number, bytes: number, tokens: Tokens): Held {
  let recount = h.recount === true;
  const figure = (k: keyof Tokens): number => {
    if (tokens[k] < 0 && h[k] >= COUNT_MAX) {
      recount = true;
      return COUNT_MAX;
    }
    return countIn(h[k] + tokens[k]);
  };
  const next: Held = { turns: h.turns + turns, turnBytes: h.turnBytes + bytes, inputTokens: figure('inputTokens'), outputTokens: figure('outputTokens'), cachedTokens: figure('cachedTokens') };
  return recount ? { ...next, recount: true } : next;
}

/** UTF-8 bytes of a session's JSON as it stands before a write. */
function sessionBytes(current: SessionAtWrite): number {
  return Buffer.byteLength(JSON.stringify(current.session));
}
