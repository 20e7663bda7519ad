// What the provider clients' tests share: the clients from dist/testkit.cjs, the local
// provider, and a reader that runs a reply to its end and keeps what it yielded.
import { createRequire } from 'node:module';
import { startProvider } from '../provider/server.mjs';

export const kit = createRequire(import.meta.url)('../../dist/testkit.cjs');
export { startProvider };

/** A provider record of `type` pointing at the local provider `p` (OpenAI's under /v1, as configured for OpenAI itself). */
export function localProvider(p, type, extra = {}) {
  return kit.providerConfig({ _id: '665f1c2a9b1e8a0012ab34c9', name: 'Local test provider', type, baseUrl: type === 'openai' ? `${p.url}/v1` : p.url, ...extra });
}

/**
 * Runs a reply to its end: `{events, text, reasoning, usages, finishReason, error}`. Every
 * error message seen is also kept in `seenMessages`, which the tests check for keys at the end.
 */
export async function collect(call, { onEvent } = {}) {
  const stream = kit.streamReply(call);
  const out = { events: [], text: '', reasoning: '', usages: [], finishReason: undefined, error: undefined };
  try {
    for await (const e of stream) {
      out.events.push(e);
      if (e.kind === 'text') out.text += e.text;
      else if (e.kind === 'reasoning') out.reasoning += e.text;
      else if (e.kind === 'usage') out.usages.push(e.usage);
      if (onEvent !== undefined && (await onEvent(e, out)) === false) break;
    }
  } catch (e) {
    out.error = e;
    seenMessages.push(String(e?.message));
  }
  out.finishReason = stream.finishReason;
  return out;
}

export const seenMessages = [];

/** A model name no other test uses (the local provider counts requests per exact name for `times:K`). */
let unique = 0;
export function fresh(model) {
  return `${model}+n:${process.pid}-${++unique}`;
}

/** The requests the local provider logged for one model name. */
export function requestsFor(p, model) {
  return p.requests.filter((r) => r.model === model);
}

/** A tiny PNG's bytes in base64 (what a `file` part's `data` holds). */
export const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';

/**
 * A history with every part type: an image and a PDF from the user, an assistant turn with
 * reasoning, text and a tool call, the tool's result, a system turn in the middle, an
 * assistant turn of reasoning only (nothing left to send), and the user's last question.
 */
export const CONVERSATION = [
  {
    role: 'user',
    content: [
      { type: 'text', text: 'What is in this picture?' },
      { type: 'file', name: 'cat.png', mediaType: 'image/png', data: PNG },
      { type: 'file', name: 'notes.pdf', mediaType: 'application/pdf', data: 'JVBERi0xLjQK' },
    ],
  },
  {
    role: 'assistant',
    content: [
      { type: 'reasoning', text: 'private thoughts' },
      { type: 'text', text: 'A cat.' },
      { type: 'tool_call', id: 'call_1', name: 'lookup', arguments: { q: 'cat' } },
    ],
  },
  { role: 'tool', content: [{ type: 'tool_result', toolCallId: 'call_1', content: { found: true } }] },
  { role: 'system', content: 'Be brief.' },
  { role: 'assistant', content: [{ type: 'reasoning', text: 'only thoughts' }] },
  { role: 'user', content: 'And now?' },
];
