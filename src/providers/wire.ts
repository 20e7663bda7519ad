// What the three wire clients share: the call's input and output shapes, the contract each
// client fills (build a request, read its stream), and the few rules for turning parts into text.
import { randomBytes } from 'node:crypto';
import { PART_JSON_DEPTH } from '../domain/limits.js';
import { COUNT_MAX, isCount } from '../domain/numbers.js';
import { depthExceeds } from '../domain/schema.js';
import type { JsonObject, JsonValue, Part, StopReason, TurnContent, TurnRole } from '../domain/records.js';
import { StreamFailure } from './failure.js';
import { UNCOUNTED, type HeldBytes, type Holding } from './held.js';
import { SseDecoder, type SseEvent } from './stream-decoder.js';

/** The provider types that can reply, each a wire protocol. */
export const REPLY_TYPES = ['openai', 'anthropic', 'ollama'] as const;
export type ReplyType = (typeof REPLY_TYPES)[number];

/** A provider as the clients call it (read from its providers.json record by `providerConfig`). */
export interface ProviderConfig {
  /** The provider's `name`: how every failure names it. */
  readonly name: string;
  readonly type: ReplyType;
  /** Without a trailing slash. */
  readonly baseUrl: string;
  readonly apiKey: string | undefined;
  /** Sent on every call as given (after the protocol's own headers, so they may replace them). */
  readonly headers: Readonly<Record<string, string>>;
  /** When present and non-empty, the only models this provider may be asked for. */
  readonly models: readonly string[] | undefined;
}

/** One message of the conversation sent to the model: a turn's role and content. */
export interface ReplyMessage {
  readonly role: TurnRole;
  readonly content: TurnContent;
}

/** Generation settings, passed on in each protocol's own names; absent ones are not sent. */
export interface ReplyOptions {
  readonly temperature?: number;
  readonly maxTokens?: number;
  readonly topP?: number;
  readonly stop?: readonly string[];
  /** Asks for a repeatable answer, where the protocol takes one (OpenAI's seed, Ollama's options.seed). */
  readonly seed?: number;
}

/** A tool the model may call, as the client declared it. */
export interface ToolSpec {
  readonly name: string;
  readonly description?: string | undefined;
  /** Its arguments' JSON Schema. */
  readonly parameters?: JsonObject | undefined;
}

/** Whether the model may (`auto`), must not (`none`) or must (`required`) call a tool, or the one it must call. */
export type ToolChoice = 'auto' | 'none' | 'required' | { readonly name: string };

/** A tool call as the model made it (a `tool_call` part): its arguments parsed, or the raw text when it is not JSON. */
export interface ToolCall {
  readonly id: string;
  readonly name: string;
  readonly arguments: JsonValue;
}

/** The most argument text a reply's tool calls may hold, in all, in bytes (a provider that never ends one is cut). */
export const TOOL_ARGUMENTS_MAX = 8 * 1024 * 1024;
/** What holding a tool call costs besides its arguments' bytes (its name, id, place): a flood of empty calls is counted too. */
const CALL_COST = 64;

/** An id for a call the provider gave none (Ollama's): `call_` and 24 random hex digits. */
export function newCallId(): string {
  return `call_${randomBytes(12).toString('hex')}`;
}

/**
 * A tool call from what the provider sent: its id (a new one when it gave none) and its name,
 * and its arguments as JSON text (parsed: `{}` when empty, the text itself when it is not JSON)
 * or as a value already (Anthropic's and Ollama's objects).
 */
export function toolCallOf(id: unknown, name: string, args: string | JsonValue): ToolCall {
  // checked without recursion before anything recursive (JSON.stringify, the path's hash) walks it
  if (typeof args !== 'string' && depthExceeds(args, PART_JSON_DEPTH)) throw new StreamFailure(`sent a tool call whose arguments nest more than ${PART_JSON_DEPTH} levels deep`, false);
  return { id: typeof id === 'string' && id !== '' ? id : newCallId(), name, arguments: typeof args === 'string' ? argumentsOfText(args) : args };
}

/**
 * A tool call's arguments from their JSON text as a turn keeps them: `{}` when blank, the object
 * it is, or the text itself when it is no JSON object or parsing would change it (a number of
 * more than 15 significant digits, or past a double's range): sent back, it is the same text.
 */
export function argumentsOfText(text: string): JsonValue {
  if (text.trim() === '') return {};
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return text;
  }
  // nested past what a turn's part may hold, it stays text too: nothing recursive walks the value
  if (typeof value !== 'object' || value === null || Array.isArray(value) || !numbersSurvive(text) || depthExceeds(value, PART_JSON_DEPTH)) return text;
  return value as JsonValue;
}

/** Whether every number of a JSON text is a double's exactly enough: at most 15 significant digits, finite. */
function numbersSurvive(text: string): boolean {
  const numbers = /"(?:[^"\\]|\\.)*"|(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)/g;
  for (const m of text.matchAll(numbers)) {
    const n = m[1];
    if (n === undefined) continue;
    const mantissa = (n.replace(/^-/, '').split(/[eE]/)[0] as string).replace('.', '').replace(/^0+/, '').replace(/0+$/, '');
    if (mantissa.length > 15 || !Number.isFinite(Number(n))) return false;
  }
  return true;
}

/**
 * Counts what a reply's tool calls hold, in bytes as they came: their argument text, and
 * CALL_COST for each call; past TOOL_ARGUMENTS_MAX the stream fails. It is counted in the
 * reply's Holding too, and kept there until the reply ends (the calls are recorded with its end).
 */
export class ArgumentBudget {
  private used = 0;
  constructor(private readonly held: Holding = UNCOUNTED) {}

  /** A piece of a call's arguments, as it came. */
  take(text: string): void {
    this.count(Buffer.byteLength(text));
  }

  /** A call begins. */
  call(): void {
    this.count(CALL_COST);
  }

  private count(n: number): void {
    this.used += n;
    if (this.used > TOOL_ARGUMENTS_MAX) throw new StreamFailure(`sent tool calls past ${TOOL_ARGUMENTS_MAX / (1024 * 1024)} MiB`, false);
    this.held.take(n);
  }
}


/**
 * A reply's stop reason from the provider's finish reason (already in OpenAI's words where the
 * protocol has its own): one of the four, `tool_calls` when it called tools and said only `stop`
 * (Ollama's way), absent when it said nothing or something else.
 */
export function stopReasonOf(finish: string | undefined, calledTools: boolean): StopReason | undefined {
  switch (finish) {
    case 'stop':
      return calledTools ? 'tool_calls' : 'stop';
    case 'length':
    case 'tool_calls':
    case 'content_filter':
      return finish;
    case 'function_call':
      return 'tool_calls';
    default:
      return undefined;
  }
}

/** Token counts as the provider reported them. `inputTokens` counts the whole prompt, cached part included. */
export interface ReplyUsage {
  readonly inputTokens: number;
  readonly outputTokens: number;
  readonly cachedTokens?: number;
  /** Of the output, the reasoning's (OpenAI's completion_tokens_details). */
  readonly reasoningTokens?: number;
}

/** What a reply stream yields: answer text, reasoning text, and at most one usage report. */
export type ReplyEvent =
  | { readonly kind: 'text'; readonly text: string }
  | { readonly kind: 'reasoning'; readonly text: string }
  | { readonly kind: 'tool_call'; readonly call: ToolCall }
  | { readonly kind: 'usage'; readonly usage: ReplyUsage };

/** One call: who, which model, what to say. See `streamReply` in call.ts. */
export interface ReplyCall {
  readonly provider: ProviderConfig;
  readonly model: string;
  /** The system message (the session's `instructions`); none when absent. */
  readonly system?: string | undefined;
  /** The conversation, oldest first. `reasoning` parts are never sent. */
  readonly messages: readonly ReplyMessage[];
  readonly options?: ReplyOptions | undefined;
  /** The client's tools the model may call; none when absent or empty. */
  readonly tools?: readonly ToolSpec[] | undefined;
  /** Absent: the protocol's default (auto). */
  readonly toolChoice?: ToolChoice | undefined;
  /** Aborting closes the provider's request at once and ends the iteration without an error. */
  readonly signal?: AbortSignal | undefined;
  /**
   * The longest the provider may go without progress (text, reasoning, a tool call's piece or
   * usage; keep-alives and unfinished lines are none), before its answer or inside it; default 60 s.
   */
  readonly idleTimeoutMs?: number | undefined;
  /** The longest the whole call may take, retries included, whatever the provider sends; none when absent. */
  readonly maxDurationMs?: number | undefined;
  /** Where what the call holds unfinished (lines, events, tool calls not yet whole) is counted with every other reply's; uncounted when absent. */
  readonly held?: HeldBytes | undefined;
  /** The first wait before a retry when the provider gives no Retry-After (doubled for the second); default 1 s. */
  readonly retryBaseMs?: number | undefined;
}

/** One attempt's HTTP request, as a client builds it. */
export interface WireRequest {
  /** Appended to the provider's `baseUrl`. */
  readonly path: string;
  readonly headers: Record<string, string>;
  readonly body: unknown;
}

/**
 * Reads one response body. `push` appends the events a read completes; a failure the provider
 * reports in the stream is thrown as a StreamFailure, a stream that cannot be read as a
 * StreamDecodeError. `end` is called when the body ends: it throws when the provider had not
 * said it was done.
 */
export interface StreamReader {
  push(chunk: Buffer, out: ReplyEvent[]): void;
  end(out: ReplyEvent[]): void;
  /** The provider said the reply is complete: whatever follows is not read. */
  readonly done: boolean;
  /** The reason the provider gave for the end (see `finishReason` in call.ts). */
  readonly finishReason: string | undefined;
  /**
   * Counts what was read that is progress but gave no event yet (a piece of a tool call's
   * arguments, a usage report kept for the end): with the events, what holds the idle time off.
   */
  readonly progress: number;
}

/** A JSON object as a provider sent it, its fields not yet checked. */
export type Obj = { readonly [key: string]: unknown };
export const isObj = (v: unknown): v is Obj => v !== null && typeof v === 'object' && !Array.isArray(v);

/**
 * A reader of a reply sent as Server-Sent Events (OpenAI's and Anthropic's): each event as it is
 * decoded, none after the one that says the reply is done. A protocol says what an event means
 * and what a stream that ended without that event still counts as.
 */
export abstract class SseReader implements StreamReader {
  done = false;
  finishReason: string | undefined;
  progress = 0;
  private readonly sse: SseDecoder;
  private readonly events: SseEvent[] = [];
  /** What the reply's tool calls hold, counted in its Holding with what the decoder holds. */
  protected readonly budget: ArgumentBudget;

  constructor(held: Holding = UNCOUNTED) {
    this.sse = new SseDecoder(undefined, held);
    this.budget = new ArgumentBudget(held);
  }

  push(chunk: Buffer, out: ReplyEvent[]): void {
    this.read(out, (events) => this.sse.push(chunk, events));
  }

  end(out: ReplyEvent[]): void {
    if (this.done) return;
    this.read(out, (events) => this.sse.end(events));
    if (!this.done) this.endedEarly(out);
  }

  /** One event of the protocol. */
  protected abstract event(e: SseEvent, out: ReplyEvent[]): void;
  /** The body ended before the event that says the reply is done: finish, or throw why not. */
  protected abstract endedEarly(out: ReplyEvent[]): void;

  private read(out: ReplyEvent[], decode: (events: SseEvent[]) => void): void {
    const events = this.events;
    events.length = 0;
    decode(events);
    for (let i = 0; i < events.length && !this.done; i++) this.event(events[i] as SseEvent, out);
  }
}

/** A wire protocol: how to ask, and how to read the answer. */
export interface WireClient {
  /** One attempt's request. `adaptations` holds what earlier refusals asked to change (see `adaptation`). */
  request(call: ReplyCall, adaptations: ReadonlySet<string>): WireRequest;
  /** A reader of one response body, counting what it holds unfinished in `held`. */
  reader(held?: Holding): StreamReader;
  /**
   * A refusal some servers give to a parameter they do not take (a 400 naming it), and the
   * change that makes the request acceptable to them; undefined when the refusal is final.
   */
  adaptation?(status: number, providerMessage: string): string | undefined;
}

/**
 * The conversation with its tool calls paired as every protocol wants them: a call is kept when
 * the tool turns right after its message answer it, a result when it answers a call so kept (a
 * conversation that moved on without answering a call, or a result posted out of place, would
 * have the provider refuse the whole request). A message left with nothing to say is dropped.
 */
export function answeredCalls(messages: readonly ReplyMessage[]): ReplyMessage[] {
  const out: ReplyMessage[] = [];
  /** The calls of the last assistant message kept, which the tool messages after it may answer. */
  let open = new Set<string>();
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i] as ReplyMessage;
    if (typeof m.content === 'string') {
      if (m.role !== 'tool') open = new Set();
      out.push(m);
      continue;
    }
    let parts: readonly Part[] = m.content;
    if (m.role === 'assistant') {
      const answered = new Set<string>();
      // the tool turns right after it, or the one user turn right after it (a client's own way to answer)
      for (let j = i + 1; j < messages.length; j++) {
        const next = messages[j] as ReplyMessage;
        if (next.role !== 'tool' && next.role !== 'user') break;
        for (const p of partsOf(next.content)) if (p.type === 'tool_result') answered.add(p.toolCallId);
        if (next.role === 'user') break;
      }
      parts = parts.filter((p) => p.type !== 'tool_call' || answered.has(p.id));
      open = new Set(parts.flatMap((p) => (p.type === 'tool_call' ? [p.id] : [])));
    } else {
      const answering = open;
      parts = parts.filter((p) => p.type !== 'tool_result' || ((m.role === 'tool' || m.role === 'user') && answering.has(p.toolCallId)));
      if (m.role !== 'tool') open = new Set();
    }
    if (parts.length === 0) continue;
    out.push(parts.length === m.content.length ? m : { role: m.role, content: parts });
  }
  return out;
}

/** A turn's content as parts (plain text is one text part). */
export function partsOf(content: TurnContent): readonly Part[] {
  return typeof content === 'string' ? [{ type: 'text', text: content }] : content;
}

export type FilePart = Extract<Part, { type: 'file' }>;

/** An image whose bytes the turn holds: sent as each protocol's image input. */
export function isInlineImage(part: FilePart): part is FilePart & { data: string } {
  return part.data !== undefined && /^image\//i.test(part.mediaType);
}

/** The media type without its parameters (`image/png; x=y` -> `image/png`). */
export function bareMediaType(mediaType: string): string {
  return (mediaType.split(';')[0] ?? mediaType).trim().toLowerCase();
}

/** What a file the protocol cannot take says in its place. */
export function filePlaceholder(part: FilePart): string {
  return `[file: ${part.name} (${bareMediaType(part.mediaType)})]`;
}

/** A tool's output or arguments as text: strings as they are, anything else as JSON. */
export function jsonText(value: JsonValue): string {
  return typeof value === 'string' ? value : JSON.stringify(value);
}

/** Text pieces of one message, joined the same way by every protocol. */
export function joinText(pieces: readonly string[]): string {
  return pieces.join('\n\n');
}

/** A tool call's arguments as an object (what Anthropic and Ollama take): JSON text is parsed, other values wrapped. */
export function argumentsObject(value: JsonValue): { readonly [key: string]: JsonValue } {
  let v: JsonValue = value;
  if (typeof v === 'string') {
    try {
      v = JSON.parse(v) as JsonValue;
    } catch {
      return { value };
    }
    if (depthExceeds(v, PART_JSON_DEPTH)) return { value };
  }
  return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as { readonly [key: string]: JsonValue }) : { value: v };
}

/**
 * A count the provider reported, or undefined when it is not a whole number from 0 to 2^53 - 1
 * (../domain/numbers.ts): a client's usage is held to the same, and PostgreSQL keeps counts as
 * bigint (a fraction or 1e300 there refused the reply's end).
 */
export function count(v: unknown): number | undefined {
  return isCount(v) ? v : undefined;
}

/** Counts the provider reported apart, added up into one (Anthropic's prompt): a sum past 2^53 - 1 is 2^53 - 1, as a total is. */
export function countOfSum(...parts: readonly (number | undefined)[]): number {
  return Math.min(COUNT_MAX, parts.reduce<number>((sum, p) => sum + (p ?? 0), 0));
}

/** The provider's own words in a JSON error value, whichever of the usual shapes it has. */
export function errorWords(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (value === null || typeof value !== 'object') return undefined;
  const o = value as { [key: string]: unknown };
  const err = o['error'];
  if (typeof err === 'string') return err;
  if (err !== null && typeof err === 'object') {
    const e = err as { [key: string]: unknown };
    const message = typeof e['message'] === 'string' ? e['message'] : undefined;
    const type = typeof e['type'] === 'string' ? e['type'] : undefined;
    if (message !== undefined) return type !== undefined && !message.includes(type) ? `${type}: ${message}` : message;
    if (type !== undefined) return type;
  }
  if (typeof o['message'] === 'string') return o['message'];
  const detail = o['detail'];
  if (typeof detail === 'string') return detail;
  if (Array.isArray(detail) && detail.length > 0) {
    const first = detail[0] as { [key: string]: unknown } | null;
    if (first !== null && typeof first === 'object' && typeof first['msg'] === 'string') return first['msg'];
  }
  return undefined;
}
