// The one entry the reply use case calls: stream a model's answer from a provider, whatever
// its wire protocol, with the rules all three share (retries before the first text, the idle
// limit, the caller's abort, failures worded once and without credentials).
import { STATUS_CODES } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { anthropicClient } from './anthropic.js';
import { ProviderFailed, StreamFailure } from './failure.js';
import { HeldTooMuch, type Holding } from './held.js';
import { ollamaClient } from './ollama.js';
import { openaiClient } from './openai.js';
import { scrubCredentials } from './scrub.js';
import { StreamDecodeError } from './stream-decoder.js';
import { ConnectionCut, Exchange, IdleTimeout } from './transport.js';

/** The call passed its `maxDurationMs` (REPLY_MAX_DURATION): it ends whatever the provider sends. */
class TookTooLong extends Error {
  override readonly name = 'TookTooLong';
}
import { errorWords, type ProviderConfig, type ReplyCall, type ReplyEvent, type ReplyType, type WireClient, type WireRequest } from './wire.js';

/** Transient failures before the first text are tried again at most this many times. */
export const MAX_RETRIES = 2;
/** A Retry-After longer than this is not waited for: the call fails at once. */
export const RETRY_AFTER_CAP_MS = 10_000;
export const DEFAULT_IDLE_TIMEOUT_MS = 60_000;
const DEFAULT_RETRY_BASE_MS = 1000;
/** How much of an error body is read, and how much of the provider's words a message quotes. */
const ERROR_BODY_LIMIT = 64 * 1024;
const QUOTE_LIMIT = 500;
/** How much of a line that cannot be read a message quotes. */
const SENT_QUOTE_LIMIT = 60;
/**
 * The longest a call works through what it has read without letting the event loop run: reads
 * that wait in the exchange's queue are taken at once, so a provider that sends fast could
 * otherwise keep the server from answering anyone for as long as its queue lasts.
 */
const BUSY_MS = 10;

/** The HTTP statuses that say the provider's trouble is passing. 529 is Anthropic's "overloaded". */
const TRANSIENT_STATUSES = new Set([429, 500, 502, 503, 529]);
const STATUS_TEXT: { readonly [status: number]: string } = { 529: 'Overloaded' };

/** Network failures worth another try, and how each is said. */
const NETWORK: { readonly [code: string]: { readonly words: string; readonly transient: boolean } } = {
  ECONNREFUSED: { words: 'connection refused', transient: true },
  ECONNRESET: { words: 'connection reset', transient: true },
  EPIPE: { words: 'connection reset', transient: true },
  ECONNABORTED: { words: 'connection aborted', transient: true },
  ETIMEDOUT: { words: 'connection timed out', transient: true },
  EHOSTUNREACH: { words: 'host unreachable', transient: true },
  ENETUNREACH: { words: 'network unreachable', transient: true },
  EAI_AGAIN: { words: 'name lookup failed for now', transient: true },
  ENOTFOUND: { words: 'host not found', transient: false },
};

const CLIENTS: { readonly [type in ReplyType]: WireClient } = { openai: openaiClient, anthropic: anthropicClient, ollama: ollamaClient };

/** Headers a provider's configured `headers` may not replace: they frame the request. */
const FRAMING_HEADERS = new Set(['content-length', 'transfer-encoding', 'connection']);

/**
 * A reply being streamed: iterate it once for its events. After the iteration ends normally,
 * `finishReason` is the reason the provider gave for the end, in OpenAI's words where one fits
 * (`stop`, `length`, `tool_calls`, `content_filter`; Anthropic's and Ollama's are mapped), else
 * as the provider said it; undefined when it gave none.
 */
export interface ReplyStream extends AsyncIterable<ReplyEvent> {
  readonly finishReason: string | undefined;
}

/**
 * Streams a model's answer from `call.provider` (see ReplyCall in wire.ts for the input).
 *
 * Nothing is sent until the iteration starts. Iterate to the end, or abort, or break out: a
 * caller that just stops asking for events holds the provider's connection open. The iteration yields, as the provider sends them:
 * - `{kind:'text', text}`: a piece of the answer;
 * - `{kind:'reasoning', text}`: a piece of the model's reasoning (OpenAI-style
 *   `reasoning_content` / `reasoning`, Anthropic thinking blocks, Ollama `thinking`), never
 *   mixed into the answer;
 * - `{kind:'usage', usage}`: at most once, near the end, only when the provider reported its
 *   token counts (never estimated).
 *
 * It ends normally when the provider says the reply is complete; then `finishReason` is set.
 * It ends early, without an error, when `call.signal` aborts: the provider's request is closed
 * at once (the provider sees its connection closed); the caller knows from its own signal.
 * Otherwise it throws a ProviderFailed whose message names the provider and says what happened
 * in words that never hold a credential:
 * - connection refused or cut, HTTP 429, 500, 502, 503, 529, or an overloaded error event,
 *   before the first piece of text or reasoning are tried again, at most twice, after the
 *   provider's Retry-After (seconds, an HTTP date, or `retry-after-ms`) when it is at most 10 s
 *   (longer: the call fails at once), else after about 1 s and then 2 s (`retryBaseMs`);
 *   after the first piece, never (the caller has it);
 * - a provider that makes no progress (text, reasoning, a tool call's piece, usage: keep-alives
 *   and unfinished lines are none) for `idleTimeoutMs` (default 60 s) ends the call, and so
 *   does `maxDurationMs` (from the call's start, retries included) whatever the provider sends;
 * - a refusal (any other status), an error the provider reports in its stream, or a stream that
 *   cannot be read end it at once.
 * Breaking out of the iteration closes the provider's request as an abort does.
 */
export function streamReply(call: ReplyCall): ReplyStream {
  const state: { finishReason: string | undefined } = { finishReason: undefined };
  const events = run(call, state);
  return {
    [Symbol.asyncIterator]: () => events,
    get finishReason() {
      return state.finishReason;
    },
  };
}

async function* run(call: ReplyCall, state: { finishReason: string | undefined }): AsyncGenerator<ReplyEvent, void, undefined> {
  const provider = call.provider;
  const client = CLIENTS[provider.type];
  const signal = call.signal;
  const idleMs = call.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS;
  const maxMs = call.maxDurationMs;
  const deadline = maxMs === undefined ? Infinity : performance.now() + maxMs;
  const secrets = secretsOf(provider);
  const adaptations = new Set<string>();
  let retries = 0;
  /** The request as built for the adaptations asked so far: built once, not again for a retry (a conversation may be megabytes). */
  let built: { readonly adaptations: number; readonly wire: WireRequest; readonly body: Buffer } | undefined;
  for (;;) {
    if (isAborted(signal)) return;
    if (performance.now() >= deadline) throw tried(tookTooLong(provider, maxMs as number), retries);
    if (built?.adaptations !== adaptations.size) {
      built = undefined; // (the last one goes before the next is made)
      const request = client.request(call, adaptations);
      built = { adaptations: adaptations.size, body: Buffer.from(JSON.stringify(request.body), 'utf8'), wire: { ...request, body: undefined } };
    }
    const { wire, body } = built;
    const url = new URL(provider.baseUrl + wire.path);
    const headers: Record<string, string> = { 'user-agent': 'chat-session-api', ...wire.headers };
    for (const [k, v] of Object.entries(provider.headers)) if (!FRAMING_HEADERS.has(k)) headers[k] = v;
    headers['content-type'] = 'application/json';
    headers['content-length'] = String(body.length);
    let exchange: Exchange;
    try {
      exchange = new Exchange(url, headers, body, idleMs);
    } catch (e) {
      // node:http refuses what it cannot send (providerConfig has checked the usual causes)
      throw new ProviderFailed(`${who(provider)} cannot be called: ${(e as { code?: string }).code ?? 'the request is invalid'}`, false);
    }
    const onAbort = (): void => exchange.close();
    signal?.addEventListener('abort', onAbort, { once: true });
    // whatever the provider sends, and whether or not the caller is reading: cut at the deadline
    const overdue = deadline === Infinity ? undefined : setTimeout(() => exchange.cut(new TookTooLong()), deadline - performance.now());
    let yielded = false;
    let responded = false;
    let finished = false;
    let failure: ProviderFailed;
    let retryAfterMs: number | undefined;
    /** What this attempt's reader holds unfinished: given back when the attempt ends. */
    let holding: Holding | undefined;
    try {
      const res = await exchange.response();
      responded = true;
      const status = res.statusCode ?? 0;
      const contentType = String(res.headers['content-type'] ?? '');
      // a web app or a proxy's sign-in page where the API should be is told by its first byte,
      // `<`, which no event stream or NDJSON starts with; not by its label: a stream that a
      // server labels text/html (a Flask app's default) is still read
      let sniffing = true;
      if (status !== 200 || /^application\/json/i.test(contentType)) {
        const text = (await exchange.readAll(ERROR_BODY_LIMIT)).toString('utf8');
        const words = providerWords(text, contentType);
        const adapt = status === 200 ? undefined : client.adaptation?.(status, words ?? '');
        if (adapt !== undefined && !adaptations.has(adapt)) {
          // not a failure: the same request again, changed the way this server asked
          adaptations.add(adapt);
          continue;
        }
        failure =
          status === 200
            ? new ProviderFailed(`${who(provider)} answered with JSON instead of a stream${quote(words, secrets)}`, false, status)
            : new ProviderFailed(`${who(provider)} answered HTTP ${status} ${STATUS_TEXT[status] ?? STATUS_CODES[status] ?? ''}`.trimEnd() + quote(words, secrets), TRANSIENT_STATUSES.has(status), status);
        if (failure.transient) retryAfterMs = retryAfter(res.headers);
      } else {
        holding = call.held?.holding();
        const reader = client.reader(holding);
        const out: ReplyEvent[] = [];
        let progress = 0;
        /** Since when the call has worked through reads that were waiting, without waiting itself. */
        let busySince = performance.now();
        for (;;) {
          if (performance.now() - busySince > BUSY_MS) {
            await new Promise((resolve) => setImmediate(resolve));
            busySince = performance.now();
          }
          const waits = !exchange.hasQueued;
          const chunk = await exchange.read();
          // a read that was waited for gave the event loop its turn already
          if (waits) busySince = performance.now();
          if (sniffing && chunk !== null) {
            const at = chunk.findIndex((b) => b !== 0x20 && b !== 0x09 && b !== 0x0a && b !== 0x0d);
            if (at >= 0) {
              sniffing = false;
              if (chunk[at] === 0x3c) throw new ProviderFailed(`${who(provider)} answered with an HTML page instead of a stream (is baseUrl the API's?)`, false, status);
            }
          }
          // a read may hold pieces of text and then the failure: the pieces are given first
          let failed: { readonly error: unknown } | undefined;
          try {
            if (chunk === null) reader.end(out);
            else reader.push(chunk, out);
          } catch (error) {
            failed = { error };
          }
          state.finishReason = reader.finishReason;
          // only progress holds the idle time off, not bytes: every event is progress, and so
          // are pieces the reader keeps for later (a tool call's arguments, usage)
          if (out.length > 0 || reader.progress !== progress) {
            progress = reader.progress;
            exchange.progress();
          }
          if (out.length > 0) {
            exchange.suspend();
            for (const event of out) {
              if (event.kind !== 'usage') yielded = true;
              yield event;
              // an abort while the caller held the event: nothing more of this read is given
              if (isAborted(signal)) return;
            }
            out.length = 0;
            exchange.resume();
          }
          if (failed !== undefined) throw failed.error;
          if (reader.done || chunk === null) {
            finished = true;
            exchange.finish();
            return;
          }
        }
      }
    } catch (e) {
      if (isAborted(signal)) return;
      failure = failureOf(e, provider, url, responded, idleMs, maxMs, secrets);
    } finally {
      holding?.release();
      clearTimeout(overdue);
      signal?.removeEventListener('abort', onAbort);
      if (!finished) exchange.close();
    }
    if (!failure.transient || yielded || retries >= MAX_RETRIES) throw tried(failure, retries);
    if (retryAfterMs !== undefined && retryAfterMs > RETRY_AFTER_CAP_MS) {
      throw tried(new ProviderFailed(`${failure.message} (it asks to wait ${seconds(retryAfterMs)} before trying again, longer than the ${seconds(RETRY_AFTER_CAP_MS)} a reply waits)`, true, failure.status), retries);
    }
    retries++;
    const base = call.retryBaseMs ?? DEFAULT_RETRY_BASE_MS;
    // jittered, so that many replies refused at once do not all come back at once
    const wait = retryAfterMs ?? base * 2 ** (retries - 1) * (0.5 + Math.random() / 2);
    if (performance.now() + wait >= deadline) throw tried(new ProviderFailed(`${failure.message} (no time is left to try again within REPLY_MAX_DURATION, ${duration(maxMs as number)})`, failure.transient, failure.status), retries);
    try {
      await sleep(wait, undefined, signal !== undefined ? { signal } : {});
    } catch {
      return; // aborted while waiting
    }
  }
}

/** A function, not a property test, so that the type checker does not narrow it across awaits. */
function isAborted(signal: AbortSignal | undefined): boolean {
  return signal?.aborted === true;
}

/** How messages name the provider. */
function who(p: ProviderConfig): string {
  return `Provider ${JSON.stringify(p.name)}`;
}

/**
 * Every configured value that must never be quoted: the key, header values, URL credentials,
 * and the Basic forms of credentials (`user:password` as node:http sends it for a URL that holds
 * them, and what a configured `Basic` header's value decodes to).
 */
function secretsOf(p: ProviderConfig): string[] {
  const out: string[] = [];
  if (p.apiKey !== undefined) out.push(p.apiKey);
  // short header values (`1`, `true`) are not credentials, and masking them would garble messages
  for (const v of Object.values(p.headers)) {
    const value = v.trim();
    if (value.length < 4) continue;
    out.push(value);
    const scheme = /^(\S+)\s+(\S+)$/.exec(value);
    if (scheme === null) continue;
    const credential = scheme[2] as string;
    out.push(credential);
    if (/^basic$/i.test(scheme[1] as string)) {
      const pair = Buffer.from(credential, 'base64').toString('utf8');
      const colon = pair.indexOf(':');
      if (colon > 0 && !pair.includes('\uFFFD')) out.push(pair, pair.slice(colon + 1));
    }
  }
  const url = new URL(p.baseUrl);
  if (url.password !== '') out.push(decodeURIComponent(url.password), url.password);
  if (url.username !== '') out.push(decodeURIComponent(url.username), url.username);
  if (url.username !== '' || url.password !== '') out.push(`${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`);
  return out;
}

/** The provider's own words in an error body: its JSON error message, or short plain text (not an HTML page). */
function providerWords(text: string, contentType: string): string | undefined {
  const t = text.trim();
  if (t === '') return undefined;
  if (t.startsWith('{') || t.startsWith('[') || /json/i.test(contentType)) {
    try {
      return errorWords(JSON.parse(t));
    } catch {
      // not JSON after all: read as text
    }
  }
  if (/html/i.test(contentType) || t.startsWith('<')) return undefined;
  return t;
}

/** `: <the provider's words>`, scrubbed of credentials, on one line, not too long; empty when there are none. */
function quote(words: string | undefined, secrets: readonly string[]): string {
  if (words === undefined) return '';
  let s = scrubCredentials(words, secrets).replace(/[\u0000-\u001f\u007f]+/g, ' ').replace(/\s+/g, ' ').trim();
  if (s === '') return '';
  if (s.length > QUOTE_LIMIT) s = `${s.slice(0, QUOTE_LIMIT)}...`;
  return `: ${s}`;
}

/** ` (<what the provider sent>)`, scrubbed and then cut to 60 characters: the order matters. */
function sentQuote(sent: string | undefined, secrets: readonly string[]): string {
  if (sent === undefined) return '';
  const s = scrubCredentials(sent, secrets);
  return ` (${s.length > SENT_QUOTE_LIMIT ? `${s.slice(0, SENT_QUOTE_LIMIT)}...` : s})`;
}

function seconds(ms: number): string {
  return ms < 1000 ? `${Math.round(ms)} ms` : `${Math.round(ms / 100) / 10} s`;
}

/** A duration as a setting says it: ms, s, or whole minutes and hours when it is some. */
function duration(ms: number): string {
  if (ms >= 3_600_000 && ms % 3_600_000 === 0) return `${ms / 3_600_000} h`;
  if (ms >= 60_000 && ms % 60_000 === 0) return `${ms / 60_000} min`;
  return seconds(ms);
}

function tookTooLong(p: ProviderConfig, maxMs: number): ProviderFailed {
  return new ProviderFailed(`${who(p)} was still replying after ${duration(maxMs)}, the longest a reply may take (REPLY_MAX_DURATION): the reply ends here`, false);
}

/** A failure whose message says how many times the call was made, when more than once. */
function tried(f: ProviderFailed, retries: number): ProviderFailed {
  return retries === 0 ? f : new ProviderFailed(`${f.message} (tried ${retries + 1} times)`, f.transient, f.status);
}

/** A thrown error of one attempt, as a ProviderFailed. */
function failureOf(e: unknown, p: ProviderConfig, url: URL, responded: boolean, idleMs: number, maxMs: number | undefined, secrets: readonly string[]): ProviderFailed {
  if (e instanceof ProviderFailed) return e;
  if (e instanceof TookTooLong) return tookTooLong(p, maxMs as number);
  if (e instanceof HeldTooMuch) return new ProviderFailed(`${who(p)} ${e.message}`, false);
  if (e instanceof IdleTimeout) {
    return new ProviderFailed(e.sentBytes ? `${who(p)} sent no text, reasoning, tool call or usage for ${seconds(idleMs)} (only keep-alives or an unfinished line)` : `${who(p)} sent nothing for ${seconds(idleMs)}`, false);
  }
  if (e instanceof StreamFailure) return new ProviderFailed(`${who(p)} ${scrubCredentials(e.message, secrets)}`, e.transient);
  if (e instanceof StreamDecodeError) return new ProviderFailed(`${who(p)} sent a stream that cannot be read: ${scrubCredentials(e.message, secrets)}${sentQuote(e.sent, secrets)}`, false);
  if (e instanceof ConnectionCut) return new ProviderFailed(`${who(p)} cut the connection before the reply was complete`, true);
  const code = typeof (e as { code?: unknown } | null)?.code === 'string' ? (e as { code: string }).code : '';
  const known = NETWORK[code];
  if (responded) return new ProviderFailed(`${who(p)} cut the connection before the reply was complete${known !== undefined ? ` (${known.words})` : ''}`, known?.transient ?? true);
  if (known !== undefined) return new ProviderFailed(`${who(p)} could not be reached at ${url.host}: ${known.words}`, known.transient);
  if (/^(CERT_|UNABLE_TO_|DEPTH_ZERO|SELF_SIGNED|ERR_TLS|ERR_SSL)/.test(code)) return new ProviderFailed(`${who(p)} could not be reached at ${url.host}: TLS failed (${code})`, false);
  return new ProviderFailed(`${who(p)} could not be reached at ${url.host}${code !== '' ? `: ${code}` : ''}`, false);
}

/** The wait a response asks for before a retry (`retry-after-ms`, or `Retry-After` in seconds or as an HTTP date), if it gives one. */
function retryAfter(headers: { readonly [name: string]: string | string[] | undefined }): number | undefined {
  const ms = headers['retry-after-ms'];
  if (typeof ms === 'string' && /^\s*\d+(\.\d+)?\s*$/.test(ms)) return Number(ms);
  const v = headers['retry-after'];
  if (typeof v !== 'string') return undefined;
  if (/^\s*\d+(\.\d+)?\s*$/.test(v)) return Number(v) * 1000;
  const at = Date.parse(v);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}
