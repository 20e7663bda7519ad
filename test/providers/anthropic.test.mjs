// The Anthropic Messages client against the local provider: the request as the Messages API
// documents it (x-api-key, anthropic-version, max_tokens, a top-level system), and the
// stream's events: text and thinking blocks, ping, message_delta's usage, and the error event.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { CONVERSATION, PNG, collect, fresh, kit, localProvider, requestsFor, seenMessages, startProvider } from './kit.mjs';

const KEY = 'sk-ant-api03-test-0123456789abcdef';

describe('Anthropic Messages', () => {
  let p;
  let provider;
  before(async () => {
    p = await startProvider();
    provider = localProvider(p, 'anthropic', { apiKey: KEY });
  });
  after(async () => {
    await p.close();
    for (const m of seenMessages) assert.ok(!m.includes(KEY), m);
  });

  const reply = (model, extra = {}) => collect({ provider, model, messages: [{ role: 'user', content: 'Hello there, model' }], retryBaseMs: 10, ...extra });

  test('Messages, streamed, at {baseUrl}/v1/messages with x-api-key and anthropic-version; options in its own names', async () => {
    const model = fresh('echo');
    const r = await collect({ provider, model, system: 'You are terse.', messages: [{ role: 'user', content: 'Hi' }], options: { temperature: 0.2, topP: 0.9, maxTokens: 50, stop: ['END'] } });
    assert.equal(r.error, undefined);
    const [req] = requestsFor(p, model);
    assert.equal(req.path, '/v1/messages');
    assert.equal(req.headers['x-api-key'], KEY);
    assert.equal(req.headers['anthropic-version'], '2023-06-01');
    assert.equal(req.headers.authorization, undefined);
    assert.deepEqual(req.body, { model, max_tokens: 50, messages: [{ role: 'user', content: [{ type: 'text', text: 'Hi' }] }], stream: true, system: 'You are terse.', temperature: 0.2, top_p: 0.9, stop_sequences: ['END'] });
  });

  test("[D-providers-3] Anthropic's max_tokens defaults to 4096", async () => {
    assert.equal(kit.ANTHROPIC_DEFAULT_MAX_TOKENS, 4096);
    const model = fresh('echo');
    await reply(model);
    assert.equal(requestsFor(p, model)[0].body.max_tokens, 4096);
    assert.equal(requestsFor(p, model)[0].body.system, undefined, 'no system when there is none');
  });

  test('[D-providers-4] every system turn joins the top-level system in order, after the instructions; parts as blocks', async () => {
    const model = fresh('echo');
    const r = await collect({ provider, model, system: 'You are helpful.', messages: CONVERSATION });
    assert.equal(r.error, undefined);
    const [req] = requestsFor(p, model);
    assert.equal(req.body.system, 'You are helpful.\n\nBe brief.');
    assert.deepEqual(req.body.messages, [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'What is in this picture?' },
          { type: 'image', source: { type: 'base64', media_type: 'image/png', data: PNG } },
          { type: 'text', text: '[file: notes.pdf (application/pdf)]' },
        ],
      },
      { role: 'assistant', content: [{ type: 'text', text: 'A cat.' }, { type: 'tool_use', id: 'call_1', name: 'lookup', input: { q: 'cat' } }] },
      // the tool turn and the user turn after it are one user message
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'call_1', content: '{"found":true}' }, { type: 'text', text: 'And now?' }] },
    ]);
    assert.ok(!JSON.stringify(req.body).includes('thoughts'));
  });

  test('tool_result blocks first in a user message, turns of a side in a row one; images by https only; no empty text', async () => {
    const model = fresh('echo');
    await collect({
      provider,
      model,
      messages: [
        { role: 'user', content: [{ type: 'text', text: '' }, { type: 'text', text: 'see' }, { type: 'tool_result', toolCallId: 't1', content: 'ok', isError: true }] },
        { role: 'user', content: [{ type: 'file', name: 'a.png', mediaType: 'image/png', url: 'https://example.com/a.png' }, { type: 'file', name: 'b.tiff', mediaType: 'image/tiff', data: 'AAAA' }] },
      ],
    });
    const [req] = requestsFor(p, model);
    // user turns in a row are one message
    assert.deepEqual(req.body.messages, [
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 't1', content: 'ok', is_error: true },
          { type: 'text', text: 'see' },
          { type: 'image', source: { type: 'url', url: 'https://example.com/a.png' } },
          { type: 'text', text: '[file: b.tiff (image/tiff)]' },
        ],
      },
    ]);
  });

  test('the answer from text_delta, thinking_delta as reasoning, message_start and message_delta counts as usage', async () => {
    const r = await reply(fresh('reasoning:3+tokens:5+cached:2'));
    assert.equal(r.error, undefined);
    assert.equal(r.reasoning, 'Let me think');
    assert.equal(r.text, 'the quick brown fox jumps');
    assert.deepEqual(r.events.map((e) => e.kind), ['reasoning', 'reasoning', 'reasoning', 'text', 'text', 'text', 'text', 'text', 'usage']);
    // input_tokens leaves the cached part out; inputTokens is the whole prompt
    assert.deepEqual(r.usages, [{ inputTokens: 3, outputTokens: 8, cachedTokens: 2 }]);
    assert.equal(r.finishReason, 'stop');
  });

  test('"max_tokens is length"', async () => {
    const r = await reply(fresh('tokens:3+finish:length'));
    assert.equal(r.finishReason, 'length');
  });

  test('"an error event after a 200 ends the reply with that error" (overloaded_error), after the text so far, not tried again', async () => {
    const model = fresh('tokens:5+error-after:2');
    const r = await reply(model);
    assert.equal(r.text, 'the quick');
    assert.ok(r.error instanceof kit.ProviderFailed);
    assert.equal(r.error.message, 'Provider "Local test provider" reported an error in the stream: overloaded_error: Overloaded');
    assert.equal(r.error.transient, true);
    assert.deepEqual(r.usages, []);
    assert.equal(requestsFor(p, model).length, 1);
  });

  test('the text that came in the same read as the error event is given before the failure (regression)', async () => {
    // the error once threw before the pieces decoded from the same read were yielded: they were lost
    const model = fresh('tokens:5+error-after:3+batch');
    const r = await reply(model);
    assert.equal(r.text, 'the quick brown');
    assert.equal(r.error.message, 'Provider "Local test provider" reported an error in the stream: overloaded_error: Overloaded');
  });

  test('an overloaded, api or rate-limit error event before any text is tried again', async () => {
    const model = fresh('tokens:3+error-after:0+times:1');
    const r = await reply(model);
    assert.equal(r.error, undefined);
    assert.equal(r.text, 'the quick brown');
    assert.equal(requestsFor(p, model).length, 2);
  });

  test('"HTTP 429, 500, 502, 503 and 529" ... with Retry-After are tried again (429 and 529 here)', async () => {
    for (const status of [429, 529]) {
      const model = fresh(`status:${status}+retry-after:0+times:1`);
      const r = await reply(model);
      assert.equal(r.error, undefined, `${status}`);
      assert.equal(requestsFor(p, model).length, 2);
    }
  });

  test('no counts reported, no usage event', async () => {
    const r = await reply(fresh('no-usage+tokens:2'));
    assert.equal(r.error, undefined);
    assert.deepEqual(r.usages, []);
  });

  test('events cut anywhere, CRLF line ends, keep-alive comments', async () => {
    const say = 'Grüße, 世界! 😀';
    for (const faults of ['split:1', 'split:1+eol:crlf', 'split:5+keepalive+eol:cr']) {
      const r = await reply(fresh(`say:${encodeURIComponent(say)}+reasoning:2+${faults}`));
      assert.equal(r.error, undefined, `${faults}: ${r.error?.message}`);
      assert.equal(r.text, say, faults);
      assert.equal(r.reasoning, 'Let me', faults);
    }
  });

  test('an HTTP error body is quoted in the provider\'s words', async () => {
    const r = await reply(fresh('status:400'));
    assert.equal(r.error.message, 'Provider "Local test provider" answered HTTP 400 Bad Request: invalid_request_error: Bad request');
  });
});
