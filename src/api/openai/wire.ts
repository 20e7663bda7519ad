// OpenAI's Chat Completions shapes, both ways: a request's messages and tools as the turns and
// tools of this service, and a reply as OpenAI answers it (the chat.completion object, or the
// chunks of its stream, in its order: the role, the pieces, the tool calls, the finish, the
// usage, [DONE]). Small pure functions; the route (./routes.ts) puts them together.
import { isHexObjectId } from '../../domain/ids.js';
import { TOOL_NAME_PATTERN } from '../../domain/inputs.js';
import { COUNT_MAX } from '../../domain/numbers.js';
import { ID_MAX, TOOL_DESCRIPTION_MAX, TOOL_PARAMETERS_MAX_BYTES, TOOLS_MAX, URL_MAX } from '../../domain/limits.js';
import type { JsonObject, JsonValue, Part, StopReason, TurnContent, TurnStatus, TurnUsage } from '../../domain/records.js';
import { ValidationError } from '../../domain/schema.js';
import { argumentsOfText, jsonText, type ToolChoice, type ToolSpec } from '../../providers/wire.js';
import type { DoorMessage } from '../../domain/door-match.js';

const isObject = (v: unknown): v is { readonly [k: string]: JsonValue } => v !== null && typeof v === 'object' && !Array.isArray(v);

/** The text of a content given as a string or as parts of which only `text` ones count (system, developer, tool messages). */
function plainText(content: JsonValue | undefined, at: string): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content
      .map((p, j) => {
        if (isObject(p) && p['type'] === 'text' && typeof p['text'] === 'string') return p['text'];
        throw new ValidationError(`${at}.content[${j}] must be a text part`);
      })
      .join('');
  }
  throw new ValidationError(`${at}.content must be a string or an array of text parts`);
}

/** An image_url part as a file part: its bytes when it is a data: URL, else its link. */
export function imagePart(url: unknown, at: string): Part {
  if (typeof url !== 'string' || url === '') throw new ValidationError(`${at}.image_url.url is required`);
  const data = /^data:([A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*\/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*)(?:;[^,]*)?;base64,([A-Za-z0-9+/]*={0,2})$/.exec(url);
  if (data !== null) return { type: 'file', name: `image.${(data[1] as string).split('/')[1]}`, mediaType: (data[1] as string).toLowerCase(), data: data[2] as string };
  if (url.length > URL_MAX || !/^[A-Za-z][A-Za-z0-9+.-]*:\S+$/.test(url)) throw new ValidationError(`${at}.image_url.url must be a URL or a data: URL of base64`);
  const ext = /\.(png|jpe?g|gif|webp)(?:[?#]|$)/i.exec(url)?.[1]?.toLowerCase();
  const mediaType = ext === undefined ? 'image/jpeg' : `image/${ext === 'jpg' ? 'jpeg' : ext}`;
  return { type: 'file', name: url.split(/[?#]/)[0]?.split('/').pop() || 'image', mediaType, url };
}

/** A tool call's arguments as a turn keeps them (argumentsOfText). */
function argumentsOf(text: unknown, at: string): JsonValue {
  if (typeof text !== 'string') throw new ValidationError(`${at}.function.arguments must be a string`);
  return argumentsOfText(text);
}

/** Parts as a content: one text part is a plain string (what a client reads back as it sent it). */
function contentOf(parts: readonly Part[]): TurnContent {
  if (parts.length === 1 && parts[0]?.type === 'text') return parts[0].text;
  return parts;
}

/** The request's messages as the turns they are: system and developer as `system`, tool results as a tool turn. */
export function messagesOf(messages: readonly JsonValue[]): DoorMessage[] {
  return messages.map((v, i): DoorMessage => {
    const at = `messages[${i}]`;
    const m = v as JsonObject;
    const role = m['role'] as string;
    const content = m['content'];
    if (role === 'system' || role === 'developer') return { role: 'system', content: plainText(content, at) };
    if (role === 'tool') {
      const id = m['tool_call_id'];
      if (typeof id !== 'string' || id === '') throw new ValidationError(`${at}.tool_call_id is required`);
      return { role: 'tool', content: [{ type: 'tool_result', toolCallId: id, content: plainText(content, at) }] };
    }
    if (role === 'user') {
      if (typeof content === 'string') {
        // a user turn says something (as on the native API), and the 400 names the message
        if (content.trim() === '') throw new ValidationError(`${at}.content is required`);
        return { role: 'user', content };
      }
      if (!Array.isArray(content) || content.length === 0) throw new ValidationError(`${at}.content must be a string or a non-empty array of parts`);
      const parts = content.map((p, j): Part => {
        const pat = `${at}.content[${j}]`;
        if (isObject(p) && p['type'] === 'text' && typeof p['text'] === 'string') return { type: 'text', text: p['text'] };
        if (isObject(p) && p['type'] === 'image_url') return imagePart(isObject(p['image_url']) ? p['image_url']['url'] : undefined, pat);
        throw new ValidationError(`${pat}.type must be one of: text, image_url`);
      });
      return { role: 'user', content: contentOf(parts) };
    }
    // assistant: its text (a refusal is its text too) and its tool calls
    const parts: Part[] = [];
    if (typeof content === 'string') {
      if (content !== '') parts.push({ type: 'text', text: content });
    } else if (Array.isArray(content)) {
      content.forEach((p, j) => {
        if (isObject(p) && (p['type'] === 'text' || p['type'] === 'refusal') && typeof (p['text'] ?? p['refusal']) === 'string') parts.push({ type: 'text', text: (p['text'] ?? p['refusal']) as string });
        else throw new ValidationError(`${at}.content[${j}] must be a text part`);
      });
    } else if (content !== null && content !== undefined) throw new ValidationError(`${at}.content must be a string, an array of text parts or null`);
    const calls = m['tool_calls'];
    if (calls !== undefined && calls !== null) {
      if (!Array.isArray(calls)) throw new ValidationError(`${at}.tool_calls must be an array`);
      calls.forEach((c, j) => {
        const cat = `${at}.tool_calls[${j}]`;
        if (!isObject(c) || !isObject(c['function'])) throw new ValidationError(`${cat}.function is required`);
        const id = c['id'];
        const name = c['function']['name'];
        if (typeof id !== 'string' || id === '' || id.length > ID_MAX) throw new ValidationError(`${cat}.id must be a string of 1-${ID_MAX} characters`);
        if (typeof name !== 'string' || name === '' || name.length > ID_MAX) throw new ValidationError(`${cat}.function.name must be a string of 1-${ID_MAX} characters`);
        parts.push({ type: 'tool_call', id, name, arguments: argumentsOf(c['function']['arguments'], cat) });
      });
    }
    // an empty content is content (a reply of reasoning only comes back so): only none at all is refused
    if (parts.length === 0 && (content === null || content === undefined)) throw new ValidationError(`${at} must have content or tool_calls`);
    return { role: 'assistant', content: parts.length === 0 ? '' : contentOf(parts) };
  });
}

/** OpenAI's `tools` (`{type:"function", function:{name, description?, parameters?}}`) as the reply takes them, held to the native API's rules. */
export function toolsOf(tools: JsonValue | undefined): ToolSpec[] | undefined {
  if (tools === undefined || tools === null) return undefined;
  if (!Array.isArray(tools)) throw new ValidationError('tools must be an array');
  if (tools.length > TOOLS_MAX) throw new ValidationError(`tools must have at most ${TOOLS_MAX} items`);
  const names = new Set<string>();
  return tools.map((t, i): ToolSpec => {
    const at = `tools[${i}]`;
    if (!isObject(t) || t['type'] !== 'function' || !isObject(t['function'])) throw new ValidationError(`${at} must be {"type": "function", "function": {...}}`);
    const f = t['function'];
    const name = f['name'];
    if (typeof name !== 'string' || !new RegExp(TOOL_NAME_PATTERN).test(name)) throw new ValidationError(`${at}.function.name must be 1-64 letters, digits, _ or -`);
    if (names.has(name)) throw new ValidationError(`${at}.function.name must be unique: ${JSON.stringify(name)} is given twice`);
    names.add(name);
    const description = f['description'];
    if (description !== undefined && (typeof description !== 'string' || description.length > TOOL_DESCRIPTION_MAX)) throw new ValidationError(`${at}.function.description must be a string of at most ${TOOL_DESCRIPTION_MAX} characters`);
    const parameters = f['parameters'];
    if (parameters !== undefined && (!isObject(parameters) || Buffer.byteLength(JSON.stringify(parameters)) > TOOL_PARAMETERS_MAX_BYTES)) throw new ValidationError(`${at}.function.parameters must be a JSON Schema object of at most ${TOOL_PARAMETERS_MAX_BYTES} bytes`);
    return { name, ...(typeof description === 'string' ? { description } : {}), ...(isObject(parameters) ? { parameters: parameters as JsonObject } : {}) };
  });
}

/** OpenAI's `tool_choice` as the reply takes it. */
export function toolChoiceOf(choice: JsonValue | undefined, tools: readonly ToolSpec[] | undefined): ToolChoice | undefined {
  if (choice === undefined || choice === null) return undefined;
  let out: ToolChoice;
  if (choice === 'auto' || choice === 'none' || choice === 'required') out = choice;
  else if (isObject(choice) && isObject(choice['function']) && typeof choice['function']['name'] === 'string') out = { name: choice['function']['name'] };
  else throw new ValidationError('tool_choice must be "auto", "none", "required" or {"type": "function", "function": {"name": ...}}');
  if (typeof out === 'object' && !(tools ?? []).some((t) => t.name === (out as { name: string }).name)) throw new ValidationError('tool_choice.function.name must name one of tools');
  if ((out === 'required' || typeof out === 'object') && (tools ?? []).length === 0) throw new ValidationError('tool_choice needs tools');
  return out;
}

/** A 24-hex session id as given in a header or metadata (anything else names no session). */
export function sessionIdOf(v: unknown): string | undefined {
  return typeof v === 'string' && v !== '' ? (isHexObjectId(v) ? v.toLowerCase() : v) : undefined;
}

// ---------------------------------------------------------------------------------------------
// The answer

/** A reply as the door answers it, whichever way it was made (recorded or not). */
export interface ReplyView {
  readonly status: TurnStatus;
  readonly content: TurnContent;
  readonly usage?: TurnUsage | undefined;
  readonly stopReason?: StopReason | undefined;
  readonly error?: { readonly message: string } | undefined;
}

/** What the assistant said: its text joined, its reasoning joined, its tool calls in OpenAI's form. */
export function said(content: TurnContent): { text: string; reasoning: string; calls: { id: string; type: 'function'; function: { name: string; arguments: string } }[] } {
  if (typeof content === 'string') return { text: content, reasoning: '', calls: [] };
  const text: string[] = [];
  const reasoning: string[] = [];
  const calls: { id: string; type: 'function'; function: { name: string; arguments: string } }[] = [];
  for (const p of content) {
    if (p.type === 'text') text.push(p.text);
    else if (p.type === 'reasoning') reasoning.push(p.text);
    else if (p.type === 'tool_call') calls.push({ id: p.id, type: 'function', function: { name: p.name, arguments: jsonText(p.arguments) } });
  }
  return { text: text.join(''), reasoning: reasoning.join(''), calls };
}

/** OpenAI's usage object from a turn's. */
export function usageOf(u: TurnUsage | undefined): JsonObject | undefined {
  if (u === undefined) return undefined;
  return {
    prompt_tokens: u.inputTokens,
    completion_tokens: u.outputTokens,
    // a total saturates as the store's do (../../domain/numbers.ts)
    total_tokens: Math.min(u.inputTokens + u.outputTokens, COUNT_MAX),
    prompt_tokens_details: { cached_tokens: u.cachedTokens ?? 0 },
    completion_tokens_details: { reasoning_tokens: u.reasoningTokens ?? 0 },
  };
}

/** The chat.completion object of a reply that ended complete. */
export function completionObject(id: string, created: number, model: string, r: ReplyView): JsonObject {
  const { text, reasoning, calls } = said(r.content);
  const usage = usageOf(r.usage);
  return {
    id,
    object: 'chat.completion',
    created,
    model,
    choices: [
      {
        index: 0,
        message: { role: 'assistant', content: text === '' && calls.length > 0 ? null : text, refusal: null, ...(reasoning !== '' ? { reasoning_content: reasoning } : {}), ...(calls.length > 0 ? { tool_calls: calls } : {}) },
        logprobs: null,
        finish_reason: r.stopReason ?? 'stop',
      },
    ],
    ...(usage !== undefined ? { usage } : {}),
    system_fingerprint: null,
  };
}

/** The frames of one stream: every chunk with the same id, created and model. */
export class ChunkWriter {
  private readonly head: string;
  private readonly tail: string;

  constructor(
    id: string,
    created: number,
    model: string,
    private readonly includeUsage: boolean,
  ) {
    this.head = `data: {"id":${JSON.stringify(id)},"object":"chat.completion.chunk","created":${created},"model":${JSON.stringify(model)},"system_fingerprint":null,"choices":[{"index":0,"delta":`;
    this.tail = `,"logprobs":null,"finish_reason":null}]${includeUsage ? ',"usage":null' : ''}}\n\n`;
  }

  private delta(d: JsonObject): string {
    return `${this.head}${JSON.stringify(d)}${this.tail}`;
  }

  /** The first chunk: the role, and empty content. */
  role(): string {
    return this.delta({ role: 'assistant', content: '', refusal: null });
  }

  content(text: string): string {
    return this.delta({ content: text });
  }

  reasoning(text: string): string {
    return this.delta({ reasoning_content: text });
  }

  /** A reply's end: its tool calls (each its start, then its arguments), the finish, the usage when asked for, [DONE]. */
  end(r: ReplyView): string {
    const { calls } = said(r.content);
    let out = '';
    calls.forEach((c, index) => {
      out += this.delta({ tool_calls: [{ index, id: c.id, type: 'function', function: { name: c.function.name, arguments: '' } }] });
      if (c.function.arguments !== '') out += this.delta({ tool_calls: [{ index, function: { arguments: c.function.arguments } }] });
    });
    out += `${this.head}{}${this.tail.replace('"finish_reason":null', `"finish_reason":${JSON.stringify(r.stopReason ?? 'stop')}`)}`;
    const usage = usageOf(r.usage);
    if (this.includeUsage) out += `${this.head.slice(0, this.head.indexOf('"choices"'))}"choices":[],"usage":${usage === undefined ? 'null' : JSON.stringify(usage)}}\n\n`;
    return `${out}data: [DONE]\n\n`;
  }

  /** A failure after the stream started: the error, and the stream closes without [DONE]. */
  static error(message: string, code: string): string {
    return `data: ${JSON.stringify({ error: { message, type: 'api_error', param: null, code } })}\n\n`;
  }
}
