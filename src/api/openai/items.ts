// OpenAI's Responses and Conversations shapes over turns: a turn is one item or a few (a user or
// system turn a message `msg_<turn id>`; a reply its reasoning `rs_<turn id>`, its message
// `msg_<turn id>` and a `function_call` `fc_<turn id>_<n>` per call; a tool turn a
// `function_call_output` `fco_<turn id>_<n>` per result), a reply turn is a response
// `resp_<turn id>`, a session a conversation `conv_<session id>`. Input items become turns the
// other way. Pure functions; the routes (./responses.ts) put them together.
import { COUNT_MAX } from '../../domain/numbers.js';
import { isObjectId } from '../../domain/ids.js';
import { ID_MAX } from '../../domain/limits.js';
import type { JsonObject, JsonValue, Part, Turn, TurnContent, TurnUsage } from '../../domain/records.js';
import { ValidationError } from '../../domain/schema.js';
import { argumentsOfText, jsonText } from '../../providers/wire.js';
import type { DoorMessage } from '../../domain/door-match.js';
import { imagePart } from './wire.js';

const isObject = (v: unknown): v is { readonly [k: string]: JsonValue } => v !== null && typeof v === 'object' && !Array.isArray(v);
const seconds = (iso: string): number => Math.floor(Date.parse(iso) / 1000);
const parts = (c: TurnContent): readonly Part[] => (typeof c === 'string' ? (c === '' ? [] : [{ type: 'text', text: c }]) : c);

/** What an id of OpenAI's names here: a turn (with the n-th call or result it names, if any), or a session. */
export type NamedId = { readonly kind: 'turn'; readonly turn: string; readonly index?: number } | { readonly kind: 'session'; readonly session: string };

/** The turn or session an OpenAI id names; undefined when it names none of ours (a 404 to its route). */
export function namedBy(id: string, prefix: 'resp' | 'conv' | 'item'): NamedId | undefined {
  const m = /^(resp|conv|msg|rs|fc|fco)_([0-9a-f]{24})(?:_(\d{1,4}))?$/.exec(id);
  if (m === null || !isObjectId(m[2] as string)) return undefined;
  const kind = m[1] as string;
  if (prefix === 'resp') return kind === 'resp' && m[3] === undefined ? { kind: 'turn', turn: m[2] as string } : undefined;
  if (prefix === 'conv') return kind === 'conv' && m[3] === undefined ? { kind: 'session', session: m[2] as string } : undefined;
  if (kind === 'resp' || kind === 'conv') return undefined;
  return { kind: 'turn', turn: m[2] as string, ...(m[3] !== undefined ? { index: Number(m[3]) } : {}) };
}

/** An assistant turn's text, reasoning and tool calls, each joined. */
function said(t: Turn): { text: string; reasoning: string; calls: Extract<Part, { type: 'tool_call' }>[] } {
  const text: string[] = [];
  const reasoning: string[] = [];
  const calls: Extract<Part, { type: 'tool_call' }>[] = [];
  for (const p of parts(t.content)) {
    if (p.type === 'text') text.push(p.text);
    else if (p.type === 'reasoning') reasoning.push(p.text);
    else if (p.type === 'tool_call') calls.push(p);
  }
  return { text: text.join(''), reasoning: reasoning.join(''), calls };
}

/** The items of a reply, in their order: its reasoning, its message, its calls. */
export function replyItems(t: Turn): JsonObject[] {
  const { text, reasoning, calls } = said(t);
  // a message cut by max_output_tokens is incomplete, as its response is
  const status = t.status === 'streaming' ? 'in_progress' : t.status === 'complete' && t.stopReason !== 'length' ? 'completed' : 'incomplete';
  const out: JsonObject[] = [];
  if (reasoning !== '') out.push(reasoningItem(t._id, reasoning));
  if (text !== '' || (calls.length === 0 && t.status !== 'streaming')) out.push({ ...messageItem(t._id, text), status });
  calls.forEach((c, n) => out.push(functionCallItem(t._id, n, c)));
  return out;
}

export const reasoningItem = (turnId: string, text: string): JsonObject => ({ id: `rs_${turnId}`, type: 'reasoning', summary: [], content: [{ type: 'reasoning_text', text }] });
export const outputText = (text: string): JsonObject => ({ type: 'output_text', text, annotations: [], logprobs: [] });
export const messageItem = (turnId: string, text: string): JsonObject => ({ id: `msg_${turnId}`, type: 'message', status: 'completed', role: 'assistant', content: [outputText(text)] });
export const functionCallItem = (turnId: string, n: number, c: Extract<Part, { type: 'tool_call' }>): JsonObject => ({
  id: `fc_${turnId}_${n}`,
  type: 'function_call',
  status: 'completed',
  call_id: c.id,
  name: c.name,
  arguments: jsonText(c.arguments),
});

/** The items of any turn: a reply's (replyItems), a user's or system's message, a tool turn's outputs. */
export function itemsOf(t: Turn): JsonObject[] {
  if (t.role === 'assistant') return replyItems(t);
  if (t.role === 'tool') {
    const results = parts(t.content).filter((p): p is Extract<Part, { type: 'tool_result' }> => p.type === 'tool_result');
    if (results.length > 0) return results.map((r, n) => ({ id: `fco_${t._id}_${n}`, type: 'function_call_output', status: 'completed', call_id: r.toolCallId, output: jsonText(r.content) }));
  }
  const content = parts(t.content).flatMap((p): JsonObject[] => {
    if (p.type === 'text') return [{ type: 'input_text', text: p.text }];
    if (p.type === 'file' && /^image\//i.test(p.mediaType)) return [{ type: 'input_image', image_url: p.url ?? `data:${p.mediaType};base64,${p.data ?? ''}`, detail: 'auto' }];
    if (p.type === 'tool_result') return [{ type: 'input_text', text: jsonText(p.content) }];
    return [];
  });
  return [{ id: `msg_${t._id}`, type: 'message', status: 'completed', role: t.role === 'tool' ? 'user' : t.role, content }];
}

/** What a response keeps beside its turn (its reply turn's metadata.response). */
export interface ResponseKept {
  readonly model?: string;
  readonly previous_response_id?: string | null;
  readonly instructions?: string | null;
  readonly max_output_tokens?: number | null;
  readonly background?: boolean;
  readonly metadata?: JsonObject;
  readonly conversation?: string | null;
  /** false for a response not recorded (`store: false`): it is kept nowhere, only answered. */
  readonly store?: boolean;
}

/** What a reply turn keeps of its response. */
export function keptOf(t: Turn): ResponseKept {
  const r = t.metadata?.['response'];
  return isObject(r) ? (r as ResponseKept) : {};
}

/** OpenAI's usage object of a response. */
export function responseUsage(u: TurnUsage | undefined): JsonObject | null {
  if (u === undefined) return null;
  return {
    input_tokens: u.inputTokens,
    input_tokens_details: { cached_tokens: u.cachedTokens ?? 0 },
    output_tokens: u.outputTokens,
    output_tokens_details: { reasoning_tokens: u.reasoningTokens ?? 0 },
    // a total saturates as the store's do (../../domain/numbers.ts)
    total_tokens: Math.min(u.inputTokens + u.outputTokens, COUNT_MAX),
  };
}

/** The response object of a reply turn, as it is now (in progress while it streams). */
export function responseObject(t: Turn, over: { readonly output?: JsonObject[] } = {}): JsonObject {
  const k = keptOf(t);
  const status =
    t.status === 'streaming' ? 'in_progress' : t.status === 'error' ? 'failed' : t.status === 'interrupted' ? 'cancelled' : t.stopReason === 'length' ? 'incomplete' : 'completed';
  return {
    id: `resp_${t._id}`,
    object: 'response',
    created_at: seconds(t.createdAt),
    status,
    background: k.background ?? false,
    error: t.status === 'error' ? { code: 'server_error', message: t.error?.message ?? 'The reply failed' } : null,
    incomplete_details: status === 'incomplete' ? { reason: 'max_output_tokens' } : null,
    instructions: k.instructions ?? null,
    max_output_tokens: k.max_output_tokens ?? null,
    model: k.model ?? t.model ?? '',
    output: over.output ?? (t.status === 'streaming' ? [] : replyItems(t)),
    parallel_tool_calls: true,
    previous_response_id: k.previous_response_id ?? null,
    reasoning: { effort: null, summary: null },
    store: k.store ?? true,
    temperature: null,
    text: { format: { type: 'text' } },
    tool_choice: 'auto',
    tools: [],
    top_p: null,
    truncation: 'disabled',
    usage: responseUsage(t.usage),
    user: null,
    metadata: k.metadata ?? {},
    conversation: k.conversation !== undefined && k.conversation !== null ? { id: `conv_${k.conversation}` } : null,
  };
}

/** A content of input parts (`input_text`, `input_image`; an assistant's `output_text` and `refusal`) as a turn's. */
function contentOfInput(content: JsonValue | undefined, at: string, assistant: boolean): TurnContent {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content) || content.length === 0) throw new ValidationError(`${at}.content must be a string or a non-empty array of parts`);
  const out = content.map((p, j): Part => {
    const pat = `${at}.content[${j}]`;
    if (!isObject(p)) throw new ValidationError(`${pat} must be a part`);
    const type = p['type'];
    if ((type === 'input_text' || type === 'output_text' || type === 'text') && typeof p['text'] === 'string') return { type: 'text', text: p['text'] };
    if (assistant && type === 'refusal' && typeof p['refusal'] === 'string') return { type: 'text', text: p['refusal'] };
    if (!assistant && type === 'input_image') return imagePart(p['image_url'], pat);
    throw new ValidationError(`${pat}.type must be one of: ${assistant ? 'output_text, refusal' : 'input_text, input_image'}`);
  });
  return out.length === 1 && out[0]?.type === 'text' ? out[0].text : out;
}

/** A turn a reference names (`item_reference`, or an item given by its id alone): found by the caller's reader. */
export type ItemLookup = (id: string, at: string) => Promise<DoorMessage | undefined>;

/**
 * `input` (a string, or items) as the turns it records, in order: messages as turns of their
 * role (developer as system), `function_call` items as an assistant turn's tool calls (with the
 * message before them when it is the assistant's), `function_call_output` items together as one
 * tool turn, `item_reference` as the item it names; reasoning items are left out.
 */
export async function turnsOfInput(input: JsonValue, lookup: ItemLookup, at = 'input'): Promise<DoorMessage[]> {
  if (typeof input === 'string') {
    if (input.trim() === '') throw new ValidationError(`${at} is required`);
    return [{ role: 'user', content: input }];
  }
  if (!Array.isArray(input) || input.length === 0) throw new ValidationError(`${at} must be a string or a non-empty array of items`);
  const out: DoorMessage[] = [];
  /** The assistant turn being gathered: its parts (text, then calls). */
  let assistant: Part[] | undefined;
  let results: Part[] | undefined;
  const flush = (): void => {
    if (assistant !== undefined && assistant.length > 0) out.push({ role: 'assistant', content: assistant.length === 1 && assistant[0]?.type === 'text' ? assistant[0].text : assistant });
    if (results !== undefined && results.length > 0) out.push({ role: 'tool', content: results });
    assistant = undefined;
    results = undefined;
  };
  for (const [i, v] of input.entries()) {
    const iat = `${at}[${i}]`;
    if (!isObject(v)) throw new ValidationError(`${iat} must be an item`);
    const type = v['type'] ?? 'message';
    if (type === 'message') {
      const role = v['role'];
      if (role !== 'user' && role !== 'assistant' && role !== 'system' && role !== 'developer') throw new ValidationError(`${iat}.role must be one of: user, assistant, system, developer`);
      if (role === 'assistant') {
        if (results !== undefined) flush();
        const content = contentOfInput(v['content'], iat, true);
        assistant = [...(assistant ?? []), ...parts(content)];
        continue;
      }
      flush();
      out.push({ role: role === 'developer' ? 'system' : role, content: contentOfInput(v['content'], iat, false) });
    } else if (type === 'function_call') {
      if (results !== undefined) flush();
      const callId = v['call_id'];
      const name = v['name'];
      if (typeof callId !== 'string' || callId === '' || callId.length > ID_MAX) throw new ValidationError(`${iat}.call_id must be a string of 1-${ID_MAX} characters`);
      if (typeof name !== 'string' || name === '' || name.length > ID_MAX) throw new ValidationError(`${iat}.name must be a string of 1-${ID_MAX} characters`);
      const args = argumentsOfText(typeof v['arguments'] === 'string' ? v['arguments'] : '');
      assistant = [...(assistant ?? []), { type: 'tool_call', id: callId, name, arguments: args }];
    } else if (type === 'function_call_output') {
      if (assistant !== undefined) {
        out.push({ role: 'assistant', content: assistant });
        assistant = undefined;
      }
      const callId = v['call_id'];
      if (typeof callId !== 'string' || callId === '') throw new ValidationError(`${iat}.call_id is required`);
      const output = v['output'];
      const text = typeof output === 'string' ? output : Array.isArray(output) ? output.flatMap((p) => (isObject(p) && typeof p['text'] === 'string' ? [p['text']] : [])).join('') : undefined;
      if (text === undefined) throw new ValidationError(`${iat}.output must be a string`);
      results = [...(results ?? []), { type: 'tool_result', toolCallId: callId, content: text }];
    } else if (type === 'item_reference') {
      const id = v['id'];
      if (typeof id !== 'string') throw new ValidationError(`${iat}.id is required`);
      const found = await lookup(id, iat);
      if (found === undefined) continue;
      if (found.role === 'assistant') {
        if (results !== undefined) flush();
        assistant = [...(assistant ?? []), ...parts(found.content)];
      } else if (found.role === 'tool') {
        if (assistant !== undefined) flush();
        results = [...(results ?? []), ...parts(found.content)];
      } else {
        flush();
        out.push(found);
      }
    } else if (type === 'reasoning') {
      // a model's reasoning is never sent back
    } else throw new ValidationError(`${iat}.type must be one of: message, function_call, function_call_output, item_reference, reasoning`);
  }
  flush();
  if (out.length === 0) throw new ValidationError(`${at} holds nothing to say`);
  return out;
}

/** OpenAI's cursor page of items: `limit` of them after the item `after`, in `order`. */
export function itemPage(items: readonly JsonObject[], q: { readonly limit: number; readonly order: 'asc' | 'desc'; readonly after: string | undefined }): JsonObject {
  const ordered = q.order === 'asc' ? items : [...items].reverse();
  let from = 0;
  if (q.after !== undefined) {
    const at = ordered.findIndex((i) => i['id'] === q.after);
    if (at < 0) throw new ValidationError('after must be an id of this list');
    from = at + 1;
  }
  const data = ordered.slice(from, from + q.limit);
  return { object: 'list', data, first_id: (data[0]?.['id'] as string | undefined) ?? null, last_id: (data[data.length - 1]?.['id'] as string | undefined) ?? null, has_more: from + q.limit < ordered.length };
}
