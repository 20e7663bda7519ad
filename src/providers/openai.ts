// OpenAI Chat Completions, streamed (POST {baseUrl}/chat/completions, Server-Sent Events ending
// in `data: [DONE]`): OpenAI itself and every server that speaks it (vLLM, llama.cpp, LM Studio,
// Ollama's /v1, OpenRouter).
import { StreamDecodeError, type SseEvent } from './stream-decoder.js';
import { StreamFailure } from './failure.js';
import { TextRope } from './held.js';
import {
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
  type ReplyUsage,
  SseReader,
  toolCallOf,
  type ToolChoice,
  type WireClient,
  type WireRequest,
} from './wire.js';

/** Adaptations: the server refused `stream_options` (so it reports no usage), or wants `max_completion_tokens` (OpenAI's reasoning models). */
const NO_STREAM_OPTIONS = 'no-stream-options';
const MAX_COMPLETION_TOKENS = 'max-completion-tokens';

type ContentPart = { type: 'text'; text: string } | { type: 'image_url'; image_url: { url: string } };
type ChatMessage =
  | { role: 'system' | 'user'; content: string | ContentPart[] }
  | { role: 'assistant'; content: string | null; tool_calls?: { id: string; type: 'function'; function: { name: string; arguments: string } }[] }
  | { role: 'tool'; tool_call_id: string; content: string };

function chatMessages(call: ReplyCall): ChatMessage[] {
  const out: ChatMessage[] = [];
  if (call.system !== undefined && call.system !== '') out.push({ role: 'system', content: call.system });
  for (const m of call.messages) {
    // in order, so that a user's images stay where they were among the text
    const items: ContentPart[] = [];
    let images = 0;
    const calls: { id: string; type: 'function'; function: { name: string; arguments: string } }[] = [];
    for (const p of partsOf(m.content)) {
      if (p.type === 'text') {
        if (p.text !== '') items.push({ type: 'text', text: p.text });
      } else if (p.type === 'file') {
        const url = m.role !== 'user' ? undefined : isInlineImage(p) ? `data:${p.mediaType};base64,${p.data}` : p.url !== undefined && /^image\//i.test(p.mediaType) ? p.url : undefined;
        if (url !== undefined) {
          items.push({ type: 'image_url', image_url: { url } });
          images++;
        } else items.push({ type: 'text', text: filePlaceholder(p) });
      } else if (p.type === 'tool_call') {
        calls.push({ id: p.id, type: 'function', function: { name: p.name, arguments: jsonText(p.arguments) } });
      } else if (p.type === 'tool_result') {
        out.push({ role: 'tool', tool_call_id: p.toolCallId, content: jsonText(p.content) });
      }
      // reasoning parts are never sent back
    }
    const text = joinText(items.flatMap((i) => (i.type === 'text' ? [i.text] : [])));
    if (m.role === 'assistant') {
      if (text !== '' || calls.length > 0) out.push({ role: 'assistant', content: text !== '' ? text : null, ...(calls.length > 0 ? { tool_calls: calls } : {}) });
    } else if (images > 0) {
      out.push({ role: 'user', content: items });
    } else if (text !== '') {
      // a tool turn's plain text has no call to answer: it is said as the user's
      out.push({ role: m.role === 'system' ? 'system' : 'user', content: text });
    }
  }
  return out;
}

function request(call: ReplyCall, adaptations: ReadonlySet<string>): WireRequest {
  const o = call.options ?? {};
  const body: { [key: string]: unknown } = { model: call.model, messages: chatMessages(call), stream: true };
  if (!adaptations.has(NO_STREAM_OPTIONS)) body['stream_options'] = { include_usage: true };
  if (o.temperature !== undefined) body['temperature'] = o.temperature;
  if (o.topP !== undefined) body['top_p'] = o.topP;
  if (o.maxTokens !== undefined) body[adaptations.has(MAX_COMPLETION_TOKENS) ? 'max_completion_tokens' : 'max_tokens'] = o.maxTokens;
  if (o.stop !== undefined && o.stop.length > 0) body['stop'] = o.stop;
  if (o.seed !== undefined) body['seed'] = o.seed;
  if (call.tools !== undefined && call.tools.length > 0) {
    body['tools'] = call.tools.map((t) => ({ type: 'function', function: { name: t.name, ...(t.description !== undefined ? { description: t.description } : {}), ...(t.parameters !== undefined ? { parameters: t.parameters } : {}) } }));
    if (call.toolChoice !== undefined) body['tool_choice'] = toolChoice(call.toolChoice);
  }
  const headers: Record<string, string> = { accept: 'text/event-stream' };
  if (call.provider.apiKey !== undefined) headers['authorization'] = `Bearer ${call.provider.apiKey}`;
  return { path: '/chat/completions', headers, body };
}

function toolChoice(c: ToolChoice): unknown {
  return typeof c === 'string' ? c : { type: 'function', function: { name: c.name } };
}

function adaptation(status: number, message: string): string | undefined {
  if (status !== 400 && status !== 422) return undefined;
  if (message.includes('stream_options')) return NO_STREAM_OPTIONS;
  if (message.includes('max_completion_tokens')) return MAX_COMPLETION_TOKENS;
  return undefined;
}


/** A tool call being streamed: its id and name from its first delta, its argument text in pieces. */
interface CallInProgress {
  id: string | undefined;
  name: string;
  readonly args: TextRope;
}

class ChatCompletionsReader extends SseReader {
  private usage: ReplyUsage | undefined;
  /** Tool calls by the `index` their deltas carry, in the order they began. */
  private readonly calls = new Map<number, CallInProgress>();
  private lastIndex = 0;
  /** The model refused (`delta.refusal`): its words are the reply's text, and it ends content_filter. */
  private refused = false;

  protected endedEarly(out: ReplyEvent[]): void {
    // a server that ends the body after the finish reason without `[DONE]` has still finished
    if (this.finishReason === undefined) throw new StreamFailure('closed the stream before the reply was complete', true);
    this.finish(out);
  }

  private finish(out: ReplyEvent[]): void {
    this.done = true;
    this.flushCalls(out);
    if (this.refused) this.finishReason = 'content_filter';
    if (this.usage !== undefined) out.push({ kind: 'usage', usage: this.usage });
  }

  /** The tool calls streamed so far, whole, in the order they began (once the model said why it stopped). */
  private flushCalls(out: ReplyEvent[]): void {
    for (const c of this.calls.values()) if (c.name !== '') out.push({ kind: 'tool_call', call: toolCallOf(c.id, c.name, c.args.take()) });
    this.calls.clear();
  }

  private indexOfId(id: string): number {
    let next = 0;
    for (const [i, c] of this.calls) {
      if (c.id === id) return i;
      next = Math.max(next, i + 1);
    }
    return next;
  }

  /**
   * One entry of a delta's `tool_calls`: the first of a call brings its index, id and name, the
   * next ones pieces of its arguments (several calls interleave by index). Some servers repeat
   * the id (and name) on every piece, leave out the index, or send a whole call at once.
   */
  private toolCallDelta(tc: unknown): void {
    if (!isObj(tc)) return;
    const id = typeof tc['id'] === 'string' && tc['id'] !== '' ? tc['id'] : undefined;
    // without an index, a piece goes to the call its id names (a new one for a new id), else to the last
    const index = typeof tc['index'] === 'number' ? tc['index'] : id !== undefined ? this.indexOfId(id) : this.lastIndex;
    this.lastIndex = index;
    let c = this.calls.get(index);
    if (c === undefined) {
      this.budget.call();
      c = { id, name: '', args: new TextRope() };
      this.calls.set(index, c);
    }
    c.id ??= id;
    const fn = tc['function'];
    if (!isObj(fn)) return;
    this.progress++;
    const name = fn['name'];
    if (typeof name === 'string' && name !== '' && name !== c.name) {
      this.budget.take(name);
      c.name += name;
    }
    const args = fn['arguments'];
    if (typeof args === 'string' && args !== '') {
      this.budget.take(args);
      c.args.push(args);
    } else if (isObj(args)) {
      const text = JSON.stringify(args);
      this.budget.take(text);
      c.args.push(text);
    }
  }

  protected event(e: SseEvent, out: ReplyEvent[]): void {
    if (e.data === '[DONE]') {
      this.finish(out);
      return;
    }
    let chunk: unknown;
    try {
      chunk = JSON.parse(e.data);
    } catch {
      throw new StreamDecodeError('an event that is not JSON');
    }
    if (!isObj(chunk)) throw new StreamDecodeError('an event that is not a JSON object');
    // OpenRouter, vLLM and others report a failure inside the stream as `{"error": ...}`
    // (`"error": null` is no error: some servers put it on every chunk)
    if ((chunk['error'] !== undefined && chunk['error'] !== null) || e.event === 'error') {
      throw new StreamFailure(`reported an error in the stream: ${errorWords(chunk) ?? 'no message'}`, false);
    }
    const choices = chunk['choices'];
    if (Array.isArray(choices)) {
      for (const c of choices) {
        if (!isObj(c) || (c['index'] !== undefined && c['index'] !== 0)) continue;
        const delta = c['delta'];
        if (isObj(delta)) {
          const thought = typeof delta['reasoning_content'] === 'string' ? delta['reasoning_content'] : delta['reasoning'];
          if (typeof thought === 'string' && thought !== '') out.push({ kind: 'reasoning', text: thought });
          const text = delta['content'];
          if (typeof text === 'string' && text !== '') out.push({ kind: 'text', text });
          const refusal = delta['refusal'];
          if (typeof refusal === 'string' && refusal !== '') {
            this.refused = true;
            out.push({ kind: 'text', text: refusal });
          }
          const calls = delta['tool_calls'];
          if (Array.isArray(calls)) for (const tc of calls) this.toolCallDelta(tc);
        }
        const reason = c['finish_reason'];
        if (typeof reason === 'string' && reason !== '') {
          this.finishReason = reason;
          this.flushCalls(out);
        }
      }
    }
    const u = chunk['usage'];
    if (isObj(u)) {
      const input = count(u['prompt_tokens']);
      const output = count(u['completion_tokens']);
      if (input !== undefined || output !== undefined) {
        const details = u['prompt_tokens_details'];
        const cached = isObj(details) ? count(details['cached_tokens']) : undefined;
        const out = u['completion_tokens_details'];
        const reasoning = isObj(out) ? count(out['reasoning_tokens']) : undefined;
        this.progress++;
        this.usage = { inputTokens: input ?? 0, outputTokens: output ?? 0, ...(cached !== undefined ? { cachedTokens: cached } : {}), ...(reasoning !== undefined && reasoning > 0 ? { reasoningTokens: reasoning } : {}) };
      }
    }
  }
}

export const openaiClient: WireClient = { request, reader: (held) => new ChatCompletionsReader(held), adaptation };
