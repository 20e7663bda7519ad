// A local model provider for the tests and the benchmark: one node:http server that speaks
// OpenAI Chat Completions, Anthropic Messages and Ollama's /api/chat as their documentation
// shows them, with the faults their users meet chosen per request by the model name (see
// SCENARIOS below). It records each request and whether the client closed it before the end.
// Alone: `node test/provider/server.mjs --port 11434` serves as an Ollama-style server.
import { createServer } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';

/**
 * The model name says what the reply does: directives joined by `+`, in any order; a name
 * that is not a directive (`llama3.2`, `gpt-4o`) is just a name and the reply echoes the last
 * user text. E.g. `tokens:100@50` (100 tokens at 50 per second), `echo+split:1` (every event
 * written byte by byte), `status:429+retry-after:1+times:1+n:abc` (the first request of this
 * exact name gets a 429).
 */
export const SCENARIOS = {
  echo: 'answer with the last user text (the default); when the request offers tools (and tool_choice is not none), call the first one instead, its first required argument set to that text (an agent loop then ends with the results, as call: says)',
  'say:TEXT': 'answer with TEXT (percent-decoded)',
  'tokens:N[@R]': 'answer N generated tokens, R per second (default: as fast as the socket takes them)',
  stamp: 'each token (and reasoning token) is the time it is written instead of a word: `t` and the microseconds since the epoch (performance.timeOrigin + performance.now()), so a client on this machine can tell how long it took to reach it (the benchmark)',
  'reasoning:N': 'N tokens of reasoning before the answer (reasoning_content / thinking block / thinking)',
  'alternate:N': 'the answer is N pieces of one character each, reasoning and text in turn (a, a, b, b, ...), as fast as the socket takes them: a reply of N parts',
  'reasoning-field:reasoning': 'OpenAI: reasoning deltas in `reasoning` (OpenRouter) instead of `reasoning_content` (DeepSeek, vLLM)',
  'split:N': 'write every event in writes of N bytes, each on its own turn of the event loop (cuts events and UTF-8 characters)',
  'eol:crlf|cr': 'end SSE lines with CRLF or CR instead of LF',
  keepalive: 'a `: keep-alive` comment before every SSE event',
  'reject-stream-options': 'OpenAI: 400 naming stream_options when the request has it',
  'reject-max-tokens': 'OpenAI: 400 asking for max_completion_tokens when the request has max_tokens',
  'no-usage': 'report no token counts',
  'cached:K': 'report K of the prompt tokens as cached',
  'counts:V': 'report V (a JSON number, e.g. 1e300, 1.5, -3) as every token count: the prompt\'s and the answer\'s (Anthropic: its input_tokens, beside the K of `cached:K` read from the cache)',
  'status:CODE': "answer the HTTP status with the protocol's error body",
  'retry-after:V': 'with status: a Retry-After header (seconds, or `dateS` for an HTTP date S seconds ahead)',
  'times:K': 'the faults (status, error-after, stall-*, trickle-after, keepalive-after, reset-after, rst-after, cut-after, garbage-after) apply to the first K requests of this exact model name only',
  'echo-key[:FORM]': "with status: the error body quotes the key the request carried; with garbage-after: the line that is not JSON does, bare, after 45 characters of words. FORM (with status) quotes the credential encoded: `base64`, `base64url`, `hex`, `url` (percent-encoded, every character) or `spaced` (a space between its characters); the credential is the x-api-key, the Authorization value without its scheme, or for Basic the `user:password` it decodes to",
  'error-after:N': "after N tokens, the protocol's error in the stream (Anthropic: overloaded_error event)",
  'error-words:N': "with error-after: the error's message is N characters of words",
  'stall-headers:MS|forever': 'wait before answering at all',
  'stall-after:N[:MS]': 'after N tokens send nothing for MS (default for ever)',
  'trickle-after:N[:MS]': 'after N tokens an unfinished line (`data: ` and then one byte every MS, default 100, for ever: never a line end): bytes that are no progress',
  'keepalive-after:N[:MS]': 'after N tokens a `: keep-alive` comment (Ollama: an empty line) every MS, default 200, for ever: bytes that are no progress',
  'hold-after:N': 'after N tokens send nothing until the test calls release() on the provider (replies held together are in progress at once, whatever the machine\'s speed); once released, holds no more',
  'reset-after:N': 'after N tokens (delivered) close the connection without ending the response',
  'rst-after:N': 'after N tokens reset the connection (TCP RST)',
  'cut-after:N': 'after N tokens end the response cleanly but without the end of the reply ([DONE], message_stop, done)',
  'finish:length': 'the reply ends because it hit its token limit',
  'no-done': 'OpenAI: end the stream after the finish reason without `data: [DONE]`',
  'no-final-eol': 'the body ends without the line ends of its last event ([DONE], message_stop, the done line)',
  'garbage-after:N': 'after N tokens an event that is not JSON',
  'huge-line': 'one line of 9 MiB before the answer',
  'data-lines:N:C[:CHAR]': 'before the answer, N `data:` lines of C characters CHAR each (percent-decoded, default €: 3 bytes in UTF-8) and no blank line (an event never dispatched; Ollama: one line of them, never ended), then nothing until the client closes',
  'long-line:BYTES[:MS]': 'before the answer, an unfinished line of BYTES bytes, then one byte more every MS (default 1000) until the client closes: a line held just under a bound',
  linger: 'after the end of the reply keep the response open, writing a line end every 100 ms, until the client closes it (a body that never ends)',
  'json-200': 'answer 200 with a JSON body instead of a stream',
  'html-200': 'answer 200 with an HTML page instead of a stream (a baseUrl that points at a web app or a proxy\'s login page)',
  batch: 'hold every write of the answer and send them as one when it ends (a fault after N tokens comes in the same read as they do)',
  'pad:N': 'Ollama: every token line carries N bytes more in a field clients ignore, so a few thousand tokens outgrow what the kernel buffers on loopback (the provider then waits for its client to read: `blocked` in the log)',
  'n:ANY': 'ignored: makes a model name unique (for times:K)',
  'call:NAME[:ARGS]': "after the text (say:, tokens:; none by default), a call of tool NAME with ARGS (percent-decoded text: JSON, or not for the raw-string case; default {\"city\":\"Paris\"}; empty: no arguments); repeat it for several calls. Once the conversation ends with the results of tool calls, the model answers `tool said: <results>` instead (an agent loop ends)",
  interleave: 'OpenAI: the argument pieces of several calls interleaved by index (call 0 starts, call 1 starts, a piece of each in turn)',
  'id-every': 'OpenAI: every piece of a call repeats its id, type and name',
  'whole-call': 'OpenAI: each call whole in one delta',
  'no-index': 'OpenAI: tool call deltas without `index` (with id-every, the id tells the calls apart)',
  'no-call-id': 'OpenAI, Anthropic: calls without an id',
  refusal: 'OpenAI: the answer comes as `delta.refusal` pieces (the model refused)',
  'error-null': 'OpenAI: every chunk carries `"error": null`',
  'encoding:gzip|br|deflate': 'the response body compressed so, with its Content-Encoding',
};

/**
 * What is wrong with the tool calls and results of a request's history, as each API refuses it,
 * or undefined: every tool result answers a call of the assistant message just before it (with
 * only other results between), and every call is answered there (Ollama: by the tool's name).
 */
export function toolHistoryProblem(protocol, body) {
  const messages = Array.isArray(body.messages) ? body.messages : [];
  if (protocol === 'anthropic') {
    for (let i = 0; i < messages.length; i++) {
      const m = messages[i];
      const blocks = Array.isArray(m.content) ? m.content : [];
      const uses = m.role === 'assistant' ? blocks.filter((b) => b.type === 'tool_use').map((b) => b.id) : [];
      const results = m.role === 'user' ? blocks.filter((b) => b.type === 'tool_result') : [];
      if (results.length > 0 && blocks.findIndex((b) => b.type !== 'tool_result') >= 0 && blocks.findIndex((b) => b.type !== 'tool_result') < results.length) return `messages.${i}: tool_result blocks must come first`;
      const before = messages[i - 1];
      const called = before?.role === 'assistant' && Array.isArray(before.content) ? before.content.filter((b) => b.type === 'tool_use').map((b) => b.id) : [];
      for (const r of results) if (!called.includes(r.tool_use_id)) return `messages.${i}: unexpected tool_use_id found in tool_result blocks: ${r.tool_use_id}`;
      if (uses.length > 0) {
        const next = messages[i + 1];
        const answered = next?.role === 'user' && Array.isArray(next.content) ? next.content.filter((b) => b.type === 'tool_result').map((b) => b.tool_use_id) : [];
        const missing = uses.filter((id) => !answered.includes(id));
        if (missing.length > 0) return `messages.${i}: tool_use ids were found without tool_result blocks immediately after: ${missing.join(', ')}`;
      }
    }
    return undefined;
  }
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i];
    if (m.role === 'assistant' && Array.isArray(m.tool_calls) && m.tool_calls.length > 0) {
      const key = (c) => (protocol === 'ollama' ? c.function?.name : c.id);
      const wanted = m.tool_calls.map(key);
      const answered = [];
      for (let j = i + 1; j < messages.length && messages[j].role === 'tool'; j++) answered.push(protocol === 'ollama' ? messages[j].tool_name : messages[j].tool_call_id);
      const missing = wanted.filter((k) => !answered.includes(k));
      if (missing.length > 0) return `messages.${i}: an assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'; missing: ${missing.join(', ')}`;
    }
    if (m.role === 'tool') {
      let j = i - 1;
      while (j >= 0 && messages[j].role === 'tool') j--;
      const calls = j >= 0 && messages[j].role === 'assistant' && Array.isArray(messages[j].tool_calls) ? messages[j].tool_calls : [];
      const ok = protocol === 'ollama' ? calls.some((c) => c.function?.name === m.tool_name) : calls.some((c) => c.id === m.tool_call_id);
      if (!ok) return `messages.${i}: messages with role 'tool' must be a response to a preceding message with 'tool_calls'`;
    }
  }
  return undefined;
}

/** The first tool a request offers, with its first required argument's name, unless it says none may be called. */
function toolsOffered(protocol, body) {
  const t = Array.isArray(body.tools) ? body.tools[0] : undefined;
  const choice = body.tool_choice;
  if (t === undefined || choice === 'none' || choice?.type === 'none') return undefined;
  const name = protocol === 'anthropic' ? t.name : t.function?.name;
  const schema = protocol === 'anthropic' ? t.input_schema : t.function?.parameters;
  return { name, required: Array.isArray(schema?.required) ? schema.required[0] : undefined };
}

/** The results a request ends with, as text, when its last message answers tool calls; else undefined. */
function endingResults(protocol, body) {
  const messages = Array.isArray(body.messages) ? body.messages : [];
  const last = messages[messages.length - 1];
  if (last === undefined) return undefined;
  if (protocol === 'anthropic') {
    const results = last.role === 'user' && Array.isArray(last.content) ? last.content.filter((b) => b.type === 'tool_result') : [];
    return results.length > 0 ? results.map((r) => (typeof r.content === 'string' ? r.content : JSON.stringify(r.content))).join('; ') : undefined;
  }
  if (last.role !== 'tool') return undefined;
  const out = [];
  for (let j = messages.length - 1; j >= 0 && messages[j].role === 'tool'; j--) out.unshift(String(messages[j].content));
  return out.join('; ');
}

const WORDS = 'the quick brown fox jumps over a lazy dog while seven bright stars hum softly above quiet hills'.split(' ');

/** Parses a model name into its scenario. */
export function scenarioOf(model) {
  const s = { model, say: undefined, tokens: undefined, rate: undefined, reasoning: 0, alternate: 0, reasoningField: 'reasoning_content', split: 0, eol: '\n', keepalive: false, rejectStreamOptions: false, rejectMaxTokens: false, usage: true, cached: 0, status: undefined, retryAfter: undefined, times: Infinity, echoKey: false, echoForm: undefined, errorAfter: undefined, errorWords: undefined, calls: [], interleave: false, idEvery: false, wholeCall: false, noIndex: false, noCallId: false, refusal: false, errorNull: false, encoding: undefined, stallHeaders: undefined, stallAfter: undefined, stallMs: Infinity, trickleAfter: undefined, trickleMs: 100, keepaliveAfter: undefined, keepaliveMs: 200, holdAfter: undefined, resetAfter: undefined, rstAfter: undefined, cutAfter: undefined, finish: 'stop', garbageAfter: undefined, hugeLine: false, dataLines: undefined, longLine: undefined, json200: false, html200: false, streamType: undefined, noDone: false, noFinalEol: false, batch: false, stamp: false, pad: 0, counts: undefined, linger: false };
  for (const d of String(model).split('+')) {
    const [k, ...rest] = d.split(':');
    const v = rest.join(':');
    switch (k) {
      case 'say': s.say = decodeURIComponent(v); break;
      case 'tokens': { const [n, r] = v.split('@'); s.tokens = Number(n); if (r !== undefined) s.rate = Number(r); break; }
      case 'reasoning': s.reasoning = Number(v); break;
      case 'alternate': s.alternate = Number(v); break;
      case 'reasoning-field': s.reasoningField = v; break;
      case 'split': s.split = Number(v); break;
      case 'eol': s.eol = v === 'crlf' ? '\r\n' : v === 'cr' ? '\r' : '\n'; break;
      case 'keepalive': s.keepalive = true; break;
      case 'reject-stream-options': s.rejectStreamOptions = true; break;
      case 'reject-max-tokens': s.rejectMaxTokens = true; break;
      case 'no-usage': s.usage = false; break;
      case 'cached': s.cached = Number(v); break;
      case 'counts': s.counts = JSON.parse(v); break;
      case 'status': s.status = Number(v); break;
      case 'retry-after': s.retryAfter = v; break;
      case 'times': s.times = Number(v); break;
      case 'echo-key': s.echoKey = true; s.echoForm = v === '' ? undefined : v; break;
      case 'error-after': s.errorAfter = Number(v); break;
      case 'error-words': s.errorWords = Number(v); break;
      case 'stall-headers': s.stallHeaders = v === 'forever' ? Infinity : Number(v); break;
      case 'stall-after': { const [n, ms] = v.split(':'); s.stallAfter = Number(n); s.stallMs = ms === undefined || ms === 'forever' ? Infinity : Number(ms); break; }
      case 'hold-after': s.holdAfter = Number(v); break;
      case 'trickle-after': { const [n, ms] = v.split(':'); s.trickleAfter = Number(n); if (ms !== undefined) s.trickleMs = Number(ms); break; }
      case 'keepalive-after': { const [n, ms] = v.split(':'); s.keepaliveAfter = Number(n); if (ms !== undefined) s.keepaliveMs = Number(ms); break; }
      case 'reset-after': s.resetAfter = Number(v); break;
      case 'rst-after': s.rstAfter = Number(v); break;
      case 'cut-after': s.cutAfter = Number(v); break;
      case 'finish': s.finish = v; break;
      case 'garbage-after': s.garbageAfter = Number(v); break;
      case 'huge-line': s.hugeLine = true; break;
      case 'data-lines': { const [n, c, ch] = v.split(':'); s.dataLines = { n: Number(n), chars: Number(c), char: ch === undefined ? '€' : decodeURIComponent(ch) }; break; }
      case 'long-line': { const [b, ms] = v.split(':'); s.longLine = { bytes: Number(b), ms: ms === undefined ? 1000 : Number(ms) }; break; }
      case 'linger': s.linger = true; break;
      case 'json-200': s.json200 = true; break;
      case 'html-200': s.html200 = true; break;
      case 'stream-type': s.streamType = decodeURIComponent(v); break;
      case 'no-done': s.noDone = true; break;
      case 'no-final-eol': s.noFinalEol = true; break;
      case 'batch': s.batch = true; break;
      case 'stamp': s.stamp = true; break;
      case 'pad': s.pad = Number(v); break;
      case 'call': {
        const [name, ...args] = rest;
        s.calls.push({ name, args: args.length === 0 ? '{"city":"Paris"}' : decodeURIComponent(args.join(':')) });
        break;
      }
      case 'interleave': s.interleave = true; break;
      case 'id-every': s.idEvery = true; break;
      case 'whole-call': s.wholeCall = true; break;
      case 'no-index': s.noIndex = true; break;
      case 'no-call-id': s.noCallId = true; break;
      case 'refusal': s.refusal = true; break;
      case 'error-null': s.errorNull = true; break;
      case 'encoding': s.encoding = v; break;
      default: // a plain model name, `echo` or `n:...`
    }
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// What each protocol's request says

/** The text of a message's content in any of the three protocols' shapes. */
function textOf(content) {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) return content.filter((p) => p?.type === 'text' && typeof p.text === 'string').map((p) => p.text).join('\n\n');
  return '';
}

function systemOf(protocol, body) {
  if (protocol === 'anthropic') return typeof body.system === 'string' ? body.system : Array.isArray(body.system) ? textOf(body.system) : undefined;
  const sys = (body.messages ?? []).filter((m) => m?.role === 'system' || m?.role === 'developer').map((m) => textOf(m.content));
  return sys.length > 0 ? sys.join('\n\n') : undefined;
}

function lastUserText(body) {
  const users = (body.messages ?? []).filter((m) => m?.role === 'user');
  const t = users.length > 0 ? textOf(users[users.length - 1].content) : '';
  return t !== '' ? t : 'Hello! How can I help you today?';
}

/** A deterministic token count of the prompt: its words. */
function promptTokens(protocol, body) {
  let words = 0;
  const count = (t) => {
    words += t.split(/\s+/).filter(Boolean).length;
  };
  count(systemOf(protocol, body) ?? '');
  for (const m of body.messages ?? []) if (m?.role !== 'system') count(textOf(m.content));
  return Math.max(words, 1);
}

/** The answer as tokens: pieces that keep their leading spaces, so that joined they are the text. */
function tokensOf(s, body) {
  if (s.tokens !== undefined) return Array.from({ length: s.tokens }, (_, i) => (i === 0 ? '' : ' ') + WORDS[i % WORDS.length]);
  const text = s.say ?? lastUserText(body);
  return text.match(/\s*\S+|\s+$/gu) ?? [text];
}

function reasoningTokens(n) {
  return Array.from({ length: n }, (_, i) => (i === 0 ? 'Let' : ' ' + ['me', 'think', 'about', 'this', 'step', 'by', 'step'][(i - 1) % 7]));
}

// ---------------------------------------------------------------------------------------------
// How each protocol says things

/** Python's json.dumps layout (`": "` and `", "`), as Anthropic's documentation prints its events. */
function pyJson(v) {
  if (v === null || typeof v !== 'object') return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(pyJson).join(', ')}]`;
  return `{${Object.entries(v).map(([k, x]) => `${JSON.stringify(k)}: ${pyJson(x)}`).join(', ')}}`;
}

/** A text in three pieces (some may be empty), as a stream cuts a call's arguments. */
function thirds(text) {
  const a = Math.ceil(text.length / 3);
  return [text.slice(0, a), text.slice(a, 2 * a), text.slice(2 * a)];
}

let serial = 0;
const rand = (n) => Array.from({ length: n }, () => 'ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz0123456789'[Math.floor(Math.random() * 58)]).join('');

/** OpenAI Chat Completions chunks (API reference, "The chat completion chunk object"). */
function openaiWire(s, body, eol) {
  const withUsage = body.stream_options?.include_usage === true && s.usage;
  const head = `data: {"id":"chatcmpl-${rand(29)}","object":"chat.completion.chunk","created":${Math.floor(Date.now() / 1000)},"model":${JSON.stringify(body.model)},"system_fingerprint":"fp_local","choices":[{"index":0,"delta":`;
  const tail = `,"logprobs":null,"finish_reason":null}]${withUsage ? ',"usage":null' : ''}${s.errorNull ? ',"error":null' : ''}}${eol}${eol}`;
  const toolDelta = (tc) => `${head}{"tool_calls":[${JSON.stringify(tc)}]}${tail}`;
  return {
    contentType: 'text/event-stream; charset=utf-8',
    headers: { 'x-request-id': `req_${rand(32)}`, 'openai-processing-ms': '12' },
    start: () => [`${head}{"role":"assistant","content":"","refusal":null}${tail}`],
    reasoning: (t) => `${head}{"content":null,${JSON.stringify(s.reasoningField)}:${JSON.stringify(t)}}${tail}`,
    token: (t) => `${head}{${s.refusal ? '"refusal"' : '"content"'}:${JSON.stringify(t)}}${tail}`,
    calls: (calls) => {
      const start = (c, i) => ({ ...(s.noIndex ? {} : { index: i }), ...(c.id !== undefined ? { id: c.id } : {}), type: 'function', function: { name: c.name, arguments: '' } });
      const piece = (c, i, text) => (s.idEvery ? { ...start(c, i), function: { name: c.name, arguments: text } } : { ...(s.noIndex ? {} : { index: i }), function: { arguments: text } });
      if (s.wholeCall) return calls.map((c, i) => toolDelta({ ...start(c, i), function: { name: c.name, arguments: c.args } }));
      const pieces = calls.map((c) => thirds(c.args));
      const out = [];
      if (s.interleave) {
        calls.forEach((c, i) => out.push(toolDelta(start(c, i))));
        for (let k = 0; k < 3; k++) calls.forEach((c, i) => pieces[i][k] !== '' && out.push(toolDelta(piece(c, i, pieces[i][k]))));
      } else {
        calls.forEach((c, i) => {
          out.push(toolDelta(start(c, i)));
          for (const p of pieces[i]) if (p !== '') out.push(toolDelta(piece(c, i, p)));
        });
      }
      return out;
    },
    end: (u) => {
      const out = [`${head}{}${tail.replace('"finish_reason":null', `"finish_reason":${JSON.stringify(s.finish)}`)}`];
      if (withUsage) {
        const usage = { prompt_tokens: u.input, completion_tokens: u.output, total_tokens: u.input + u.output, prompt_tokens_details: { cached_tokens: u.cached, audio_tokens: 0 }, completion_tokens_details: { reasoning_tokens: u.reasoning, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 } };
        out.push(`${head.slice(0, head.indexOf('"choices"'))}"choices":[],"usage":${JSON.stringify(usage)}}${eol}${eol}`);
      }
      if (!s.noDone) out.push(`data: [DONE]${eol}${eol}`);
      return out;
    },
    error: (message = 'The server had an error while processing your request. Sorry about that!') => `data: ${JSON.stringify({ error: { message, type: 'server_error', param: null, code: null } })}${eol}${eol}`,
    keepalive: `: keep-alive${eol}${eol}`,
    garbage: `data: {"id":"chatcmpl-broken","choices":[{${eol}${eol}`,
  };
}

/** Anthropic Messages stream events (docs: "Streaming Messages"). */
function anthropicWire(s, body, eol) {
  const ev = (name, data) => `event: ${name}${eol}data: ${pyJson(data)}${eol}${eol}`;
  let index = 0;
  let inThinking = false;
  let inText = false;
  const open = (block) => ev('content_block_start', { type: 'content_block_start', index, content_block: block });
  const close = () => ev('content_block_stop', { type: 'content_block_stop', index: index++ });
  return {
    contentType: 'text/event-stream; charset=utf-8',
    headers: { 'request-id': `req_${rand(24)}`, 'anthropic-organization-id': '00000000-0000-0000-0000-000000000000' },
    start: (u) => {
      const message = { id: `msg_${rand(24)}`, type: 'message', role: 'assistant', content: [], model: body.model, stop_reason: null, stop_sequence: null };
      if (s.usage) message.usage = { input_tokens: s.counts !== undefined ? u.input : u.input - u.cached, cache_creation_input_tokens: 0, cache_read_input_tokens: u.cached, output_tokens: 1 };
      return [ev('message_start', { type: 'message_start', message })];
    },
    reasoning: (t) => {
      let out = '';
      if (inText) {
        inText = false;
        out += close();
      }
      if (!inThinking) {
        inThinking = true;
        out += open({ type: 'thinking', thinking: '' });
      }
      return out + ev('content_block_delta', { type: 'content_block_delta', index, delta: { type: 'thinking_delta', thinking: t } });
    },
    token: (t) => {
      let out = '';
      if (inThinking) {
        inThinking = false;
        out += ev('content_block_delta', { type: 'content_block_delta', index, delta: { type: 'signature_delta', signature: `Eq${rand(40)}` } }) + close();
      }
      if (!inText) {
        inText = true;
        out += open({ type: 'text', text: '' }) + ev('ping', { type: 'ping' });
      }
      return out + ev('content_block_delta', { type: 'content_block_delta', index, delta: { type: 'text_delta', text: t } });
    },
    calls: (calls) => {
      let out = '';
      if (inText || inThinking) {
        out += close();
        inText = false;
        inThinking = false;
      }
      for (const c of calls) {
        out += open({ type: 'tool_use', ...(c.id !== undefined ? { id: c.id } : {}), name: c.name, input: {} });
        // the first delta of a tool_use block is an empty one, as the API sends it
        if (c.args !== '') for (const p of ['', ...thirds(c.args)]) out += ev('content_block_delta', { type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json: p } });
        out += close();
      }
      return [out];
    },
    end: (u) => {
      const delta = { type: 'message_delta', delta: { stop_reason: s.finish === 'length' ? 'max_tokens' : s.finish === 'tool_calls' ? 'tool_use' : 'end_turn', stop_sequence: null } };
      if (s.usage) delta.usage = { output_tokens: u.output };
      return [(inText || inThinking ? close() : '') + ev('message_delta', delta) + ev('message_stop', { type: 'message_stop' })];
    },
    error: (message = 'Overloaded') => ev('error', { type: 'error', error: { type: 'overloaded_error', message } }),
    keepalive: `: keep-alive${eol}${eol}`,
    garbage: `event: content_block_delta${eol}data: {"type": "content_block_delta", "index": ${eol}${eol}`,
  };
}

/** Ollama /api/chat lines (docs/api.md, "Generate a chat completion"). */
function ollamaWire(s, body) {
  const model = JSON.stringify(body.model);
  const at = () => new Date().toISOString().replace('Z', '000Z');
  const begin = Date.now();
  const pad = s.pad > 0 ? `,"pad":"${'x'.repeat(s.pad)}"` : '';
  return {
    contentType: 'application/x-ndjson',
    headers: {},
    start: () => [],
    reasoning: (t) => `{"model":${model},"created_at":"${at()}","message":{"role":"assistant","content":"","thinking":${JSON.stringify(t)}},"done":false}\n`,
    token: (t) => `{"model":${model},"created_at":"${at()}","message":{"role":"assistant","content":${JSON.stringify(t)}},"done":false${pad}}\n`,
    calls: (calls) => {
      const args = (text) => {
        if (text === '') return {};
        try {
          return JSON.parse(text);
        } catch {
          return text;
        }
      };
      return [`{"model":${model},"created_at":"${at()}","message":{"role":"assistant","content":"","tool_calls":${JSON.stringify(calls.map((c) => ({ function: { name: c.name, arguments: args(c.args) } })))}},"done":false}\n`];
    },
    end: (u) => {
      const ns = (Date.now() - begin) * 1e6;
      const counts = s.usage ? `,"total_duration":${ns + 1334875},"load_duration":1334875,"prompt_eval_count":${u.input},"prompt_eval_duration":342546000,"eval_count":${u.output},"eval_duration":${ns}` : '';
      return [`{"model":${model},"created_at":"${at()}","message":{"role":"assistant","content":""},"done_reason":${JSON.stringify(s.finish)},"done":true${counts}}\n`];
    },
    error: (message = 'an error was encountered while running the model: unexpected EOF') => `${JSON.stringify({ error: message })}\n`,
    keepalive: undefined, // NDJSON has no comments
    garbage: `{"model":${model},"created_at":\n`,
  };
}

/** The protocol's error body for an HTTP status (what each API answers for it). */
function errorBody(protocol, status, s, req) {
  const key = s.echoForm === undefined ? req.headers['x-api-key'] ?? req.headers.authorization ?? '' : encodedCredential(req, s.echoForm);
  const words = s.echoKey ? `Incorrect API key provided: ${key}. You can find your API key at https://platform.example/account/api-keys.` : status === 429 ? 'Rate limit reached for requests' : status === 529 ? 'Overloaded' : status >= 500 ? 'The server had an error while processing your request.' : 'Bad request';
  if (protocol === 'anthropic') {
    const type = { 400: 'invalid_request_error', 401: 'authentication_error', 403: 'permission_error', 404: 'not_found_error', 413: 'request_too_large', 429: 'rate_limit_error', 500: 'api_error', 529: 'overloaded_error' }[status] ?? 'api_error';
    return JSON.stringify({ type: 'error', error: { type, message: words }, request_id: `req_${rand(24)}` });
  }
  if (protocol === 'ollama') return JSON.stringify({ error: words });
  const type = status === 429 ? 'requests' : status >= 500 ? 'server_error' : 'invalid_request_error';
  return JSON.stringify({ error: { message: words, type, param: null, code: s.echoKey ? 'invalid_api_key' : status === 429 ? 'rate_limit_exceeded' : null } });
}

/** The credential a request carried (see `echo-key:FORM`), in FORM. */
function encodedCredential(req, form) {
  const auth = String(req.headers.authorization ?? '');
  const [scheme, value = ''] = auth.split(/\s+/, 2);
  const credential = req.headers['x-api-key'] ?? (/^basic$/i.test(scheme) ? Buffer.from(value, 'base64').toString('utf8') : value);
  const bytes = Buffer.from(credential, 'utf8');
  switch (form) {
    case 'base64': return bytes.toString('base64');
    case 'base64url': return bytes.toString('base64url');
    case 'hex': return bytes.toString('hex');
    case 'url': return [...bytes].map((b) => `%${b.toString(16).padStart(2, '0').toUpperCase()}`).join('');
    case 'spaced': return [...credential].join(' ');
    default: throw new Error(`echo-key:${form} is no form`);
  }
}

// ---------------------------------------------------------------------------------------------
// The server

const ROUTES = {
  'POST /v1/chat/completions': 'openai',
  'POST /chat/completions': 'openai',
  'POST /v1/messages': 'anthropic',
  'POST /api/chat': 'ollama',
};

/**
 * Starts the local provider. Returns `{url, port, requests, close, waitForRequest, held, release}`
 * (`held`: replies waiting at their `hold-after`; `release()` lets them and any later ones go on; `hold()` closes the gate again): `requests`
 * is the log, unless `log: false` (the benchmark): each `{protocol, path, headers, body, model,
 * system, attempt (of this model name), at (ms), remotePort, clientClosed, ended, blocked, written}`, with
 * `closed`, a promise of the response's close. `clientClosed` is true when the client closed
 * the connection before the response ended; `ended` when the reply was sent to its end;
 * `blocked` while a write waits for the client to read (the kernel's buffers are full);
 * `written` counts the tokens (reasoning included) written so far.
 */
export async function startProvider({ port = 0, host = '127.0.0.1', log = true } = {}) {
  const requests = [];
  const waiters = [];
  const counts = new Map();
  const sockets = new Set();
  /** The gate of `hold-after`: replies wait on it until release() opens it (for good, until hold() closes it again). */
  let open;
  let gate = new Promise((resolve) => (open = resolve));
  let holding = 0;
  const server = createServer({ keepAliveTimeout: 5000, noDelay: true }, (req, res) => {
    handle(req, res).catch((e) => {
      if (!res.headersSent) {
        res.writeHead(500, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: String(e?.message ?? e) }));
      } else res.destroy();
    });
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });

  async function handle(req, res) {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method === 'GET' && path === '/api/tags') return json(res, 200, { models: ['llama3.2', 'echo', 'tokens:100@50'].map((name) => ({ name, model: name, modified_at: '2024-09-12T21:17:29.110811Z', size: 0, digest: '0'.repeat(64), details: { format: 'gguf', family: 'local', parameter_size: '0B', quantization_level: 'none' } })) });
    if (req.method === 'GET' && (path === '/v1/models' || path === '/models')) return json(res, 200, { object: 'list', data: ['echo', 'tokens:100@50'].map((id) => ({ id, object: 'model', created: 1700000000, owned_by: 'local' })) });
    if ((req.method === 'GET' || req.method === 'HEAD') && path === '/') {
      res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' });
      return res.end('Ollama is running');
    }
    const protocol = ROUTES[`${req.method} ${path}`];
    if (protocol === undefined) return json(res, 404, { error: '404 page not found' });
    const raw = await readBody(req);
    let body;
    try {
      body = JSON.parse(raw);
    } catch {
      return json(res, 400, protocol === 'ollama' ? { error: 'invalid character in request body' } : protocol === 'anthropic' ? { type: 'error', error: { type: 'invalid_request_error', message: 'request body is not valid JSON' } } : { error: { message: 'We could not parse the JSON body of your request.', type: 'invalid_request_error', param: null, code: null } });
    }
    const s = scenarioOf(body.model ?? '');
    const n = (counts.get(s.model) ?? 0) + 1;
    counts.set(s.model, n);
    const faulty = n <= s.times;
    let markClosed;
    const entry = { protocol, path, headers: req.headers, body, model: s.model, system: systemOf(protocol, body), attempt: n, at: Date.now(), remotePort: req.socket.remotePort, clientClosed: false, ended: false, blocked: false, written: 0, closed: new Promise((r) => (markClosed = r)) };
    res.on('close', () => {
      if (!res.writableFinished) entry.clientClosed = true;
      markClosed();
    });
    if (log) {
      requests.push(entry);
      for (const w of [...waiters]) if (w.pred(entry)) w.resolve(entry);
    }
    await serve(protocol, s, body, faulty, req, res, entry);
  }

  async function serve(protocol, s, body, faulty, req, res, entry) {
    if (faulty && s.stallHeaders !== undefined) {
      if (s.stallHeaders === Infinity) return entry.closed;
      await sleep(s.stallHeaders);
    }
    if (protocol === 'openai' && s.rejectStreamOptions && body.stream_options !== undefined) {
      return json(res, 400, { error: { message: "Unrecognized request argument supplied: stream_options", type: 'invalid_request_error', param: null, code: null } });
    }
    if (protocol === 'openai' && s.rejectMaxTokens && body.max_tokens !== undefined) {
      return json(res, 400, { error: { message: "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.", type: 'invalid_request_error', param: 'max_tokens', code: 'unsupported_parameter' } });
    }
    if (faulty && s.status !== undefined) {
      const headers = { 'content-type': 'application/json' };
      if (s.retryAfter !== undefined) headers['retry-after'] = s.retryAfter.startsWith('date') ? new Date(Date.now() + Number(s.retryAfter.slice(4)) * 1000).toUTCString() : s.retryAfter;
      res.writeHead(s.status, headers);
      return res.end(errorBody(protocol, s.status, s, req));
    }
    if (s.html200) {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
      return res.end('<!doctype html>\n<html><head><title>Sign in</title></head>\n<body><form>Sign in to continue</form></body></html>\n');
    }
    if (s.json200) return json(res, 200, protocol === 'ollama' ? { error: 'not streaming' } : { error: { message: 'Streaming is not supported by this gateway', type: 'invalid_request_error' } });
    const eol = s.eol;
    // a history the API would refuse is refused here too, in its words
    const problem = toolHistoryProblem(protocol, body);
    if (problem !== undefined) return json(res, 400, protocol === 'ollama' ? { error: problem } : protocol === 'anthropic' ? { type: 'error', error: { type: 'invalid_request_error', message: problem } } : { error: { message: problem, type: 'invalid_request_error', param: 'messages', code: null } });
    // a conversation that ends with tool results is answered in words: the agent loop ends
    const results = endingResults(protocol, body);
    const plain = s.say === undefined && s.tokens === undefined && s.calls.length === 0 && s.reasoning === 0;
    const offered = toolsOffered(protocol, body);
    if (results === undefined && plain && offered !== undefined) s.calls = [{ name: offered.name, args: JSON.stringify(offered.required !== undefined ? { [offered.required]: lastUserText(body) } : {}) }];
    const calls = results !== undefined ? [] : s.calls.map((c) => ({ ...c, id: s.noCallId || protocol === 'ollama' ? undefined : `${protocol === 'anthropic' ? 'toolu_' : 'call_'}${rand(24)}` }));
    if (calls.length > 0 && s.finish === 'stop') s.finish = protocol === 'ollama' ? 'stop' : 'tool_calls';
    entry.calls = calls;
    const wire = protocol === 'openai' ? openaiWire(s, body, eol) : protocol === 'anthropic' ? anthropicWire(s, body, eol) : ollamaWire(s, body);
    res.writeHead(200, { 'content-type': s.streamType ?? wire.contentType, 'cache-control': 'no-cache', ...wire.headers, ...(s.encoding !== undefined ? { 'content-encoding': s.encoding } : {}) });
    // with `batch` (or an encoding: the body compressed whole), every write is held and sent as one when the response ends
    const held = s.batch || s.encoding !== undefined ? [] : undefined;
    const compress = { gzip: gzipSync, br: brotliCompressSync, deflate: deflateSync }[s.encoding] ?? ((b) => b);
    const end = () => {
      if (held !== undefined && held.length > 0 && !res.destroyed) res.write(compress(Buffer.from(held.join(''))));
      res.end();
    };
    const reasoning = reasoningTokens(s.reasoning);
    const tokens = results !== undefined ? tokensOf({ ...s, tokens: undefined, say: `tool said: ${results}` }, body) : calls.length > 0 && s.say === undefined && s.tokens === undefined ? [] : tokensOf(s, body);
    const input = promptTokens(protocol, body);
    const usage = s.counts !== undefined ? { input: s.counts, output: s.counts, cached: s.cached, reasoning: 0 } : { input, output: reasoning.length + tokens.length, cached: Math.min(s.cached, input), reasoning: reasoning.length };

    const write = async (text) => {
      if (res.destroyed) return false;
      if (held !== undefined) {
        held.push(text);
        return true;
      }
      if (s.keepalive && wire.keepalive !== undefined) res.write(wire.keepalive);
      if (s.split > 0) {
        const bytes = Buffer.from(text, 'utf8');
        for (let i = 0; i < bytes.length && !res.destroyed; i += s.split) {
          res.write(bytes.subarray(i, i + s.split));
          await new Promise((r) => setImmediate(r));
        }
      } else if (!res.write(text)) {
        entry.blocked = true;
        await new Promise((r) => {
          const done = () => {
            entry.blocked = false;
            res.off('drain', done).off('close', done);
            r();
          };
          res.on('drain', done).on('close', done);
        });
      }
      return !res.destroyed;
    };
    /** Waits until what was written is in the kernel, so a close after it does not drop it. */
    const flushed = () => new Promise((r) => res.write('', () => r()));

    for (const piece of wire.start(usage)) if (!(await write(piece))) return;
    if (s.hugeLine && !(await write(protocol === 'ollama' ? `{"pad":"${'x'.repeat(9 * 1024 * 1024)}"}\n` : `data: ${'x'.repeat(9 * 1024 * 1024)}${eol}${eol}`))) return;
    if (s.dataLines !== undefined) {
      const line = s.dataLines.char.repeat(s.dataLines.chars);
      for (let k = 0; k < s.dataLines.n && !res.destroyed; k++) if (!(await write(protocol === 'ollama' ? line : `data: ${line}${eol}`))) return;
      return entry.closed;
    }
    if (s.longLine !== undefined) {
      if (!(await write(protocol === 'ollama' ? `{"pad":"${'x'.repeat(s.longLine.bytes - 8)}` : `data: ${'x'.repeat(s.longLine.bytes - 6)}`))) return;
      while (!res.destroyed) {
        await sleep(s.longLine.ms);
        res.write('x');
      }
      return;
    }
    const started = performance.now();
    const interval = s.rate !== undefined && s.rate > 0 ? 1000 / s.rate : 0;
    const all = s.alternate > 0 ? Array.from({ length: s.alternate }, (_, i) => [i % 2 === 0 ? 'reasoning' : 'token', String.fromCharCode(97 + ((i >> 1) % 26))]) : [...reasoning.map((t) => ['reasoning', t]), ...tokens.map((t) => ['token', t])];
    for (let i = 0; i <= all.length; i++) {
      // the faults that come "after N tokens" (N may be 0: before the first)
      if (faulty && s.errorAfter === i) {
        await write(wire.error(s.errorWords === undefined ? undefined : 'the server had an error '.repeat(Math.ceil(s.errorWords / 24)).slice(0, s.errorWords)));
        return end();
      }
      if (faulty && s.garbageAfter === i) {
        const key = String(req.headers['x-api-key'] ?? req.headers.authorization ?? '').replace(/^Bearer /, '');
        await write(s.echoKey ? `the gateway refused this request from client ${key} as unknown\n` : wire.garbage);
        return end();
      }
      if (faulty && s.resetAfter === i) {
        await flushed();
        return req.socket.destroy();
      }
      if (faulty && s.rstAfter === i) {
        await flushed();
        return req.socket.resetAndDestroy();
      }
      if (faulty && s.cutAfter === i) return end();
      if (s.holdAfter === i) {
        holding++;
        await Promise.race([gate, entry.closed]);
        holding--;
      }
      if (faulty && s.trickleAfter === i) {
        res.write(protocol === 'ollama' ? '{"message":{"role":"assistant","content":"' : 'data: {"choices":[{"delta":{"content":"');
        while (!res.destroyed) {
          res.write('z');
          await sleep(s.trickleMs);
        }
        return;
      }
      if (faulty && s.keepaliveAfter === i) {
        while (!res.destroyed) {
          res.write(protocol === 'ollama' ? '\n' : `: keep-alive${eol}${eol}`);
          await sleep(s.keepaliveMs);
        }
        return;
      }
      if (faulty && s.stallAfter === i) {
        if (s.stallMs === Infinity) return entry.closed;
        await sleep(s.stallMs);
      }
      if (i === all.length) break;
      if (interval > 0) {
        const wait = started + (i + 1) * interval - performance.now();
        if (wait > 0) await sleep(wait);
      } else if (i % 32 === 31) {
        // the kernel takes megabytes on loopback without pushing back: let the rest of the process (the client, in tests) run
        await new Promise((r) => setImmediate(r));
      }
      const [kind, word] = all[i];
      const t = s.stamp ? `${i === 0 ? '' : ' '}t${Math.round((performance.timeOrigin + performance.now()) * 1000)}` : word;
      if (!(await write(kind === 'reasoning' ? wire.reasoning(t) : wire.token(t)))) return;
      entry.written = i + 1;
    }
    if (calls.length > 0) for (const piece of wire.calls(calls)) if (!(await write(piece))) return;
    const last = wire.end(usage);
    if (s.noFinalEol && last.length > 0) last[last.length - 1] = last[last.length - 1].replace(/[\r\n]+$/, '');
    for (const piece of last) if (!(await write(piece))) return;
    entry.ended = true;
    if (s.linger) {
      while (await write(eol)) await sleep(100);
      return;
    }
    end();
  }

  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, resolve);
  });
  const actual = server.address().port;
  return {
    url: `http://${host}:${actual}`,
    port: actual,
    requests,
    /** Replies waiting at their `hold-after` now. */
    get held() {
      return holding;
    },
    /** Lets every held reply go on, and any that comes later pass its hold. */
    release() {
      open();
    },
    /** Closes the gate again (after a release): replies reaching their `hold-after` wait for the next release(). */
    hold() {
      open();
      gate = new Promise((resolve) => (open = resolve));
    },
    /** The first logged request (past or future) that `pred` accepts. */
    waitForRequest(pred) {
      const found = requests.find(pred);
      if (found !== undefined) return Promise.resolve(found);
      return new Promise((resolve) => waiters.push({ pred, resolve }));
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise((r) => server.close(r));
    },
  };
}

function json(res, status, value) {
  const text = JSON.stringify(value);
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

async function readBody(req) {
  const parts = [];
  let size = 0;
  for await (const c of req) {
    size += c.length;
    if (size > 64 * 1024 * 1024) throw new Error('request body too large');
    parts.push(c);
  }
  return Buffer.concat(parts).toString('utf8');
}

// `node test/provider/server.mjs [--port 11434] [--host 127.0.0.1]`
if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  const arg = (name, fallback) => {
    const i = process.argv.indexOf(`--${name}`);
    return i > 0 && process.argv[i + 1] !== undefined ? process.argv[i + 1] : fallback;
  };
  const p = await startProvider({ port: Number(arg('port', '11434')), host: arg('host', '127.0.0.1'), log: false });
  console.log(`local provider listening on ${p.url} (OpenAI at /v1, Anthropic at /v1/messages, Ollama at /api/chat); the model name picks the reply: see SCENARIOS in test/provider/server.mjs`);
  const stop = () => p.close().then(() => process.exit(0));
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}
