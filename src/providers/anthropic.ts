// Anthropic Messages, streamed (POST {baseUrl}/v1/messages, Server-Sent Events: message_start,
// content blocks and their deltas, message_delta with the usage, message_stop; ping; error).
import { StreamDecodeError, type SseEvent } from './stream-decoder.js';
import { StreamFailure } from './failure.js';
import { TextRope } from './held.js';
import {
  argumentsObject,
  bareMediaType,
  count,
  countOfSum,
  errorWords,
  filePlaceholder,
  isInlineImage,
  isObj,
  joinText,
  jsonText,
  partsOf,
  type ReplyCall,
  type ReplyEvent,
  SseReader,
  toolCallOf,
  type ToolChoice,
  type WireClient,
  type WireRequest,
} from './wire.js';
import type { JsonValue } from '../domain/records.js';

/** The API requires `max_tokens`; this is sent when the caller gives none (every Claude model accepts it). */
export const ANTHROPIC_DEFAULT_MAX_TOKENS = 4096;
export const ANTHROPIC_VERSION = '2023-06-01';

/** The image types the Messages API takes inline. */
const IMAGE_TYPES = new Set(['image/jpeg', 'image/png', 'image/gif', 'image/webp']);

type Block =
  | { type: 'text'; text: string }
  | { type: 'image'; source: { type: 'base64'; media_type: string; data: string } | { type: 'url'; url: string } }
  | { type: 'tool_use'; id: string; name: string; input: { readonly [key: string]: JsonValue } }
  | { type: 'tool_result'; tool_use_id: string; content: string; is_error?: boolean };
type Message = { role: 'user' | 'assistant'; content: Block[] };

/**
 * The conversation as Messages takes it. There is no system role inside `messages`: every
 * system turn, wherever it is in the history, is added in order to the top-level `system`
 * after the session's instructions. Tool turns become user messages of tool_result blocks;
 * turns of one side in a row are one message.
 */
function messagesOf(call: ReplyCall): { system: string[]; messages: Message[] } {
  const system: string[] = [];
  if (call.system !== undefined && call.system !== '') system.push(call.system);
  const messages: Message[] = [];
  for (const m of call.messages) {
    const blocks: Block[] = [];
    const texts: string[] = [];
    const userSide = m.role === 'user' || m.role === 'tool';
    for (const p of partsOf(m.content)) {
      if (p.type === 'text') {
        // the API refuses empty text blocks
        if (p.text === '') continue;
        if (m.role === 'system') texts.push(p.text);
        else blocks.push({ type: 'text', text: p.text });
      } else if (p.type === 'file') {
        const image = IMAGE_TYPES.has(bareMediaType(p.mediaType));
        if (userSide && image && isInlineImage(p)) blocks.push({ type: 'image', source: { type: 'base64', media_type: bareMediaType(p.mediaType), data: p.data } });
        else if (userSide && image && p.url !== undefined && /^https?:\/\//i.test(p.url)) blocks.push({ type: 'image', source: { type: 'url', url: p.url } });
        else if (m.role === 'system') texts.push(filePlaceholder(p));
        else blocks.push({ type: 'text', text: filePlaceholder(p) });
      } else if (p.type === 'tool_call') {
        if (m.role === 'assistant') blocks.push({ type: 'tool_use', id: p.id, name: p.name, input: argumentsObject(p.arguments) });
      } else if (p.type === 'tool_result') {
        if (userSide) blocks.push({ type: 'tool_result', tool_use_id: p.toolCallId, content: jsonText(p.content), ...(p.isError === true ? { is_error: true } : {}) });
      }
      // reasoning parts are never sent back
    }
    if (m.role === 'system') {
      if (texts.length > 0) system.push(joinText(texts));
      continue;
    }
    if (blocks.length === 0) continue;
    const role = m.role === 'assistant' ? 'assistant' : 'user';
    // turns of one side in a row are one message: the results of parallel calls, recorded as a
    // tool turn each (the OpenAI door), must all be in the user message right after the calls
    const last = messages[messages.length - 1];
    if (last !== undefined && last.role === role) last.content.push(...blocks);
    else messages.push({ role, content: blocks });
  }
  // tool results must open the user message that holds them
  for (const m of messages) {
    const results = m.content.filter((b) => b.type === 'tool_result');
    if (results.length > 0 && results.length < m.content.length) m.content = [...results, ...m.content.filter((b) => b.type !== 'tool_result')];
  }
  return { system, messages };
}

function request(call: ReplyCall): WireRequest {
  const o = call.options ?? {};
  const { system, messages } = messagesOf(call);
  const body: { [key: string]: unknown } = { model: call.model, max_tokens: o.maxTokens ?? ANTHROPIC_DEFAULT_MAX_TOKENS, messages, stream: true };
  if (system.length > 0) body['system'] = joinText(system);
  if (o.temperature !== undefined) body['temperature'] = o.temperature;
  if (o.topP !== undefined) body['top_p'] = o.topP;
  if (o.stop !== undefined && o.stop.length > 0) body['stop_sequences'] = o.stop;
  if (call.tools !== undefined && call.tools.length > 0) {
    // every tool needs an input_schema: one that takes any object when the client gave none
    body['tools'] = call.tools.map((t) => ({ name: t.name, ...(t.description !== undefined ? { description: t.description } : {}), input_schema: t.parameters ?? { type: 'object' } }));
    if (call.toolChoice !== undefined) body['tool_choice'] = toolChoice(call.toolChoice);
  }
  const headers: Record<string, string> = { accept: 'text/event-stream', 'anthropic-version': ANTHROPIC_VERSION };
  if (call.provider.apiKey !== undefined) headers['x-api-key'] = call.provider.apiKey;
  return { path: '/v1/messages', headers, body };
}

/** A tool choice in Messages' words: `required` is `any`, a named tool is `{type:"tool", name}`. */
function toolChoice(c: ToolChoice): unknown {
  if (typeof c !== 'string') return { type: 'tool', name: c.name };
  return { type: c === 'required' ? 'any' : c };
}

/** Anthropic's stop reasons in the words the other protocols use (and OpenAI's API): stop, length, tool_calls, content_filter. */
const STOP_REASONS: { readonly [reason: string]: string } = {
  end_turn: 'stop',
  stop_sequence: 'stop',
  max_tokens: 'length',
  tool_use: 'tool_calls',
  refusal: 'content_filter',
};

/** The error types of an `error` event that say the trouble is passing (a 529, 500 or 429 outside a stream). */
const TRANSIENT_ERRORS = new Set(['overloaded_error', 'api_error', 'rate_limit_error']);


class MessagesReader extends SseReader {
  // usage: message_start has the input side, message_delta the running output count
  private input: number | undefined;
  private cacheRead: number | undefined;
  private cacheWrite: number | undefined;
  private output: number | undefined;
  /** The tool_use block being streamed: its id and name from its start, its input as JSON in pieces. */
  private toolUse: { readonly index: unknown; readonly id: unknown; readonly name: string; readonly input: unknown; readonly json: TextRope } | undefined;

  protected endedEarly(out: ReplyEvent[]): void {
    // message_delta gave the stop reason: a body cut just before message_stop's line end (which
    // WHATWG drops unfinished) still said the reply was complete, as OpenAI's without [DONE]
    if (this.finishReason === undefined) throw new StreamFailure('closed the stream before the reply was complete', true);
    this.finish(out);
  }

  private finish(out: ReplyEvent[]): void {
    this.done = true;
    if (this.input !== undefined || this.output !== undefined) {
      // input_tokens leaves out the cached part of the prompt; inputTokens counts the whole prompt
      const inputTokens = countOfSum(this.input, this.cacheRead, this.cacheWrite);
      out.push({ kind: 'usage', usage: { inputTokens, outputTokens: this.output ?? 0, ...(this.cacheRead !== undefined ? { cachedTokens: this.cacheRead } : {}) } });
    }
  }

  private usageFrom(u: unknown): void {
    if (!isObj(u)) return;
    this.progress++;
    this.input = count(u['input_tokens']) ?? this.input;
    this.cacheRead = count(u['cache_read_input_tokens']) ?? this.cacheRead;
    this.cacheWrite = count(u['cache_creation_input_tokens']) ?? this.cacheWrite;
    this.output = count(u['output_tokens']) ?? this.output;
  }

  protected event(e: SseEvent, out: ReplyEvent[]): void {
    let data: unknown;
    try {
      data = JSON.parse(e.data);
    } catch {
      throw new StreamDecodeError('an event that is not JSON');
    }
    if (!isObj(data)) throw new StreamDecodeError('an event that is not a JSON object');
    const type = typeof data['type'] === 'string' ? data['type'] : e.event;
    switch (type) {
      case 'content_block_delta': {
        const d = data['delta'];
        if (!isObj(d)) return;
        if (d['type'] === 'text_delta' && typeof d['text'] === 'string' && d['text'] !== '') out.push({ kind: 'text', text: d['text'] });
        else if (d['type'] === 'thinking_delta' && typeof d['thinking'] === 'string' && d['thinking'] !== '') out.push({ kind: 'reasoning', text: d['thinking'] });
        else if (d['type'] === 'input_json_delta' && typeof d['partial_json'] === 'string' && this.toolUse !== undefined && this.toolUse.index === data['index']) {
          this.budget.take(d['partial_json']);
          this.progress++;
          this.toolUse.json.push(d['partial_json']);
        }
        // signature_delta, citations_delta: nothing the reply records
        return;
      }
      case 'content_block_start': {
        const b = data['content_block'];
        if (!isObj(b)) return;
        if (b['type'] === 'text' && typeof b['text'] === 'string' && b['text'] !== '') out.push({ kind: 'text', text: b['text'] });
        else if (b['type'] === 'thinking' && typeof b['thinking'] === 'string' && b['thinking'] !== '') out.push({ kind: 'reasoning', text: b['thinking'] });
        else if (b['type'] === 'tool_use' && typeof b['name'] === 'string' && b['name'] !== '') {
          this.progress++;
          this.budget.call();
          this.budget.take(b['name']);
          this.toolUse = { index: data['index'], id: b['id'], name: b['name'], input: b['input'], json: new TextRope() };
        }
        return;
      }
      case 'content_block_stop': {
        const t = this.toolUse;
        if (t === undefined || t.index !== data['index']) return;
        this.toolUse = undefined;
        // the input comes as input_json_delta pieces; the start's own input (`{}`) when none came
        const json = t.json.take();
        out.push({ kind: 'tool_call', call: toolCallOf(t.id, t.name, json !== '' ? json : isObj(t.input) ? (t.input as JsonValue) : {}) });
        return;
      }
      case 'message_start': {
        const m = data['message'];
        if (isObj(m)) this.usageFrom(m['usage']);
        return;
      }
      case 'message_delta': {
        const d = data['delta'];
        if (isObj(d) && typeof d['stop_reason'] === 'string') this.finishReason = STOP_REASONS[d['stop_reason']] ?? d['stop_reason'];
        this.usageFrom(data['usage']);
        return;
      }
      case 'message_stop':
        this.finish(out);
        return;
      case 'error': {
        const err = data['error'];
        const errType = isObj(err) && typeof err['type'] === 'string' ? err['type'] : '';
        throw new StreamFailure(`reported an error in the stream: ${errorWords(data) ?? 'no message'}`, TRANSIENT_ERRORS.has(errType));
      }
      default: // ping, and event types added later: nothing to record
    }
  }
}

export const anthropicClient: WireClient = { request, reader: (held) => new MessagesReader(held) };
