// Ollama's native chat (POST {baseUrl}/api/chat): newline-delimited JSON objects, each with a
// piece of `message.content` (or `message.thinking`), the last with `done: true` and the counts.
import { NdjsonDecoder, StreamDecodeError } from './stream-decoder.js';
import { StreamFailure } from './failure.js';
import type { Holding } from './held.js';
import {
  argumentsObject,
  toolCallOf,
  count,
  errorWords,
  filePlaceholder,
  isInlineImage,
  isObj,
  joinText,
  jsonText,
  partsOf,
  type ReplyCall,
  type ReplyEvent,
  type StreamReader,
  type WireClient,
  type WireRequest,
} from './wire.js';
import type { JsonValue } from '../domain/records.js';

type ChatMessage = {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string;
  images?: string[];
  tool_calls?: { function: { name: string; arguments: { readonly [key: string]: JsonValue } } }[];
  tool_name?: string;
};

function chatMessages(call: ReplyCall): ChatMessage[] {
  const out: ChatMessage[] = [];
  if (call.system !== undefined && call.system !== '') out.push({ role: 'system', content: call.system });
  // Ollama answers a tool call by the tool's name, not by a call id: the name is found from the call
  const toolNames = new Map<string, string>();
  for (const m of call.messages) {
    const texts: string[] = [];
    const images: string[] = [];
    const calls: { function: { name: string; arguments: { readonly [key: string]: JsonValue } } }[] = [];
    for (const p of partsOf(m.content)) {
      if (p.type === 'text') {
        if (p.text !== '') texts.push(p.text);
      } else if (p.type === 'file') {
        if (m.role === 'user' && isInlineImage(p)) images.push(p.data);
        else texts.push(filePlaceholder(p));
      } else if (p.type === 'tool_call') {
        toolNames.set(p.id, p.name);
        if (m.role === 'assistant') calls.push({ function: { name: p.name, arguments: argumentsObject(p.arguments) } });
      } else if (p.type === 'tool_result') {
        const name = toolNames.get(p.toolCallId);
        out.push({ role: 'tool', content: jsonText(p.content), ...(name !== undefined ? { tool_name: name } : {}) });
      }
      // reasoning parts are never sent back
    }
    if (texts.length === 0 && images.length === 0 && calls.length === 0) continue;
    out.push({
      // a tool turn's plain text has no call to answer: it is said as the user's
      role: m.role === 'tool' ? 'user' : m.role,
      content: joinText(texts),
      ...(images.length > 0 ? { images } : {}),
      ...(calls.length > 0 ? { tool_calls: calls } : {}),
    });
  }
  return out;
}

function request(call: ReplyCall): WireRequest {
  const o = call.options ?? {};
  const options: { [key: string]: unknown } = {};
  if (o.temperature !== undefined) options['temperature'] = o.temperature;
  if (o.topP !== undefined) options['top_p'] = o.topP;
  if (o.maxTokens !== undefined) options['num_predict'] = o.maxTokens;
  if (o.stop !== undefined && o.stop.length > 0) options['stop'] = o.stop;
  if (o.seed !== undefined) options['seed'] = o.seed;
  const body: { [key: string]: unknown } = { model: call.model, messages: chatMessages(call), stream: true };
  if (Object.keys(options).length > 0) body['options'] = options;
  // Ollama has no tool choice: `none` is no tools offered; `required` or a named one cannot be enforced (the model may answer in words)
  if (call.tools !== undefined && call.tools.length > 0 && call.toolChoice !== 'none') {
    body['tools'] = call.tools.map((t) => ({ type: 'function', function: { name: t.name, ...(t.description !== undefined ? { description: t.description } : {}), ...(t.parameters !== undefined ? { parameters: t.parameters } : {}) } }));
  }
  const headers: Record<string, string> = { accept: 'application/x-ndjson' };
  // Ollama itself takes no key; a proxy in front of it (or ollama.com) takes a Bearer token
  if (call.provider.apiKey !== undefined) headers['authorization'] = `Bearer ${call.provider.apiKey}`;
  return { path: '/api/chat', headers, body };
}


class ChatReader implements StreamReader {
  done = false;
  finishReason: string | undefined;
  /** (every piece of progress an Ollama line holds is an event of its own) */
  readonly progress = 0;
  private readonly ndjson: NdjsonDecoder;
  private readonly values: unknown[] = [];

  constructor(held?: Holding) {
    this.ndjson = new NdjsonDecoder(undefined, held);
  }

  push(chunk: Buffer, out: ReplyEvent[]): void {
    const values = this.values;
    values.length = 0;
    this.ndjson.push(chunk, values);
    for (let i = 0; i < values.length && !this.done; i++) this.line(values[i], out);
  }

  end(out: ReplyEvent[]): void {
    if (this.done) return;
    const values = this.values;
    values.length = 0;
    this.ndjson.end(values);
    for (let i = 0; i < values.length && !this.done; i++) this.line(values[i], out);
    if (!this.done) throw new StreamFailure('closed the stream before the reply was complete', true);
  }

  private line(v: unknown, out: ReplyEvent[]): void {
    if (!isObj(v)) throw new StreamDecodeError('a line that is not a JSON object');
    if (v['error'] !== undefined && v['error'] !== null) throw new StreamFailure(`reported an error in the stream: ${errorWords(v) ?? 'no message'}`, false);
    const m = v['message'];
    if (isObj(m)) {
      if (typeof m['thinking'] === 'string' && m['thinking'] !== '') out.push({ kind: 'reasoning', text: m['thinking'] });
      if (typeof m['content'] === 'string' && m['content'] !== '') out.push({ kind: 'text', text: m['content'] });
      // each call whole, its arguments an object, most often without an id
      const calls = m['tool_calls'];
      if (Array.isArray(calls)) {
        for (const c of calls) {
          const fn = isObj(c) ? c['function'] : undefined;
          if (!isObj(fn) || typeof fn['name'] !== 'string' || fn['name'] === '') continue;
          const args = fn['arguments'];
          out.push({ kind: 'tool_call', call: toolCallOf(isObj(c) ? c['id'] : undefined, fn['name'], typeof args === 'string' ? args : args === undefined ? {} : (args as JsonValue)) });
        }
      }
    }
    if (v['done'] !== true) return;
    this.done = true;
    if (typeof v['done_reason'] === 'string' && v['done_reason'] !== '') this.finishReason = v['done_reason'];
    const input = count(v['prompt_eval_count']);
    const output = count(v['eval_count']);
    // Ollama may leave prompt_eval_count out when the prompt came from its cache
    if (input !== undefined || output !== undefined) out.push({ kind: 'usage', usage: { inputTokens: input ?? 0, outputTokens: output ?? 0 } });
  }
}

export const ollamaClient: WireClient = { request, reader: (held) => new ChatReader(held) };
