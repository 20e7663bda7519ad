// The OpenAI Chat Completions client against the local provider: the request as the API
// reference documents it, the chunks read as they come (reasoning apart from the answer, usage
// once), and what OpenAI-compatible servers trip over (stream_options refused, no usage, no
// [DONE], keep-alive comments, events cut anywhere, errors inside the stream).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { CONVERSATION, PNG, collect, fresh, kit, localProvider, requestsFor, seenMessages, startProvider } from './kit.mjs';

const KEY = 'sk-openai-test-0123456789abcdef';

describe('OpenAI Chat Completions', () => {
  let p;
  let provider;
  before(async () => {
    p = await startProvider();
    provider = localProvider(p, 'openai', { apiKey: KEY });
  });
  after(async () => {
    await p.close();
    for (const m of seenMessages) assert.ok(!m.includes(KEY), m);
  });

  const reply = (model, extra = {}) => collect({ provider, model, messages: [{ role: 'user', content: 'Hello there, model' }], retryBaseMs: 10, ...extra });

  test('Chat Completions, streamed, at {baseUrl}/chat/completions with a Bearer key and include_usage; its option names', async () => {
    const model = fresh('echo');
    const r = await collect({ provider, model, system: 'You are terse.', messages: [{ role: 'user', content: 'Hi' }], options: { temperature: 0.2, topP: 0.9, maxTokens: 50, stop: ['END'] } });
    assert.equal(r.error, undefined);
    const [req] = requestsFor(p, model);
    assert.equal(req.path, '/v1/chat/completions');
    assert.equal(req.headers.authorization, `Bearer ${KEY}`);
    assert.equal(req.headers['content-type'], 'application/json');
    assert.equal(req.headers.accept, 'text/event-stream');
    assert.deepEqual(req.body, {
      model,
      messages: [
        { role: 'system', content: 'You are terse.' },
        { role: 'user', content: 'Hi' },
      ],
      stream: true,
      stream_options: { include_usage: true },
      temperature: 0.2,
      top_p: 0.9,
      max_tokens: 50,
      stop: ['END'],
    });
  });

  test('no key, no Authorization header; a baseUrl without /v1 is called as given', async () => {
    const model = fresh('echo');
    const bare = kit.providerConfig({ name: 'llama.cpp', type: 'openai', baseUrl: p.url });
    const r = await collect({ provider: bare, model, messages: [{ role: 'user', content: 'Hi' }] });
    assert.equal(r.error, undefined);
    const [req] = requestsFor(p, model);
    assert.equal(req.path, '/chat/completions');
    assert.equal(req.headers.authorization, undefined);
    assert.equal(req.body.messages[0].role, 'user', 'no system message when there is no system text');
  });

  test("[D-providers-4] parts in OpenAI's shapes; reasoning parts are never sent; a system turn stays where it is", async () => {
    const model = fresh('echo');
    const r = await collect({ provider, model, system: 'You are helpful.', messages: CONVERSATION });
    assert.equal(r.error, undefined);
    const [req] = requestsFor(p, model);
    assert.deepEqual(req.body.messages, [
      { role: 'system', content: 'You are helpful.' },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'What is in this picture?' },
          { type: 'image_url', image_url: { url: `data:image/png;base64,${PNG}` } },
          { type: 'text', text: '[file: notes.pdf (application/pdf)]' },
        ],
      },
      { role: 'assistant', content: 'A cat.', tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'lookup', arguments: '{"q":"cat"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '{"found":true}' },
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'And now?' },
    ]);
    assert.ok(!JSON.stringify(req.body).includes('thoughts'), 'reasoning parts are never sent');
  });

  test('"an image by url is passed as its URL to OpenAI"; "Text parts of a turn are joined with a blank line."', async () => {
    const model = fresh('echo');
    await collect({
      provider,
      model,
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'one' }, { type: 'text', text: 'two' }] },
        { role: 'assistant', content: [{ type: 'tool_call', id: 'c', name: 'f', arguments: '{"raw":"json text"}' }] },
        { role: 'user', content: [{ type: 'file', name: 'a.jpg', mediaType: 'image/jpeg', url: 'https://example.com/a.jpg' }] },
      ],
    });
    const [req] = requestsFor(p, model);
    assert.deepEqual(req.body.messages, [
      { role: 'user', content: 'one\n\ntwo' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{"raw":"json text"}' } }] },
      { role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://example.com/a.jpg' } }] },
    ]);
  });

  test('[D-providers-5] the answer as it comes, reasoning_content as reasoning, usage once at the end, the finish reason', async () => {
    const r = await reply(fresh('reasoning:3+tokens:5+cached:1'));
    assert.equal(r.error, undefined);
    assert.equal(r.reasoning, 'Let me think');
    assert.equal(r.text, 'the quick brown fox jumps');
    assert.deepEqual(r.events.map((e) => e.kind), ['reasoning', 'reasoning', 'reasoning', 'text', 'text', 'text', 'text', 'text', 'usage']);
    assert.deepEqual(r.usages, [{ inputTokens: 3, outputTokens: 8, cachedTokens: 1, reasoningTokens: 3 }], 'the reasoning\'s count from completion_tokens_details');
    assert.equal(r.finishReason, 'stop');
  });

  test('"and reasoning (OpenRouter) deltas" are reasoning text too', async () => {
    const r = await reply(fresh('reasoning:2+reasoning-field:reasoning+tokens:2'));
    assert.equal(r.reasoning, 'Let me');
    assert.equal(r.text, 'the quick');
  });

  test('[D-providers-7] a 400 or 422 naming stream_options is tried again at once without it, then without usage', async () => {
    const model = fresh('reject-stream-options+tokens:3');
    const r = await reply(model);
    assert.equal(r.error, undefined);
    assert.equal(r.text, 'the quick brown');
    assert.deepEqual(r.usages, []);
    const [first, second] = requestsFor(p, model);
    assert.deepEqual(first.body.stream_options, { include_usage: true });
    assert.equal(second.body.stream_options, undefined);
    assert.equal(requestsFor(p, model).length, 2);
  });

  test('"A 400 asking for max_completion_tokens (OpenAI\'s reasoning models) is tried again with it in place of max_tokens."', async () => {
    const model = fresh('reject-max-tokens+tokens:2');
    const r = await reply(model, { options: { maxTokens: 20 } });
    assert.equal(r.error, undefined);
    const [, second] = requestsFor(p, model);
    assert.equal(second.body.max_tokens, undefined);
    assert.equal(second.body.max_completion_tokens, 20);
  });

  test('"only when the provider reported it": no usage event when it reported none', async () => {
    const r = await reply(fresh('no-usage+tokens:3'));
    assert.equal(r.error, undefined);
    assert.deepEqual(r.usages, []);
  });

  test('a finish by length is told: finishReason length', async () => {
    const r = await reply(fresh('tokens:3+finish:length'));
    assert.equal(r.finishReason, 'length');
  });

  test('[D-providers-16] a CRLF or a character cut between reads arrives whole, written byte by byte', async () => {
    const say = 'Grüße, 世界! 😀 ok';
    for (const faults of ['split:1', 'split:1+eol:crlf', 'split:2+eol:cr', 'split:3+keepalive', 'keepalive+eol:crlf']) {
      const r = await reply(fresh(`say:${encodeURIComponent(say)}+reasoning:2+${faults}`));
      assert.equal(r.error, undefined, `${faults}: ${r.error?.message}`);
      assert.equal(r.text, say, faults);
      assert.equal(r.reasoning, 'Let me', faults);
      assert.equal(r.usages.length, 1, faults);
    }
  });

  test('"An OpenAI-style stream that ends after its finish reason without data: [DONE] has still finished"', async () => {
    const r = await reply(fresh('tokens:2+no-done'));
    assert.equal(r.error, undefined);
    assert.equal(r.text, 'the quick');
    assert.equal(r.usages.length, 1);
  });

  test('an error the server sends inside the stream ends the reply with its message', async () => {
    const model = fresh('tokens:4+error-after:2');
    const r = await reply(model);
    assert.equal(r.text, 'the quick');
    assert.ok(r.error instanceof kit.ProviderFailed);
    assert.equal(r.error.message, 'Provider "Local test provider" reported an error in the stream: server_error: The server had an error while processing your request. Sorry about that!');
    assert.equal(requestsFor(p, model).length, 1);
  });

  test('a 404 for an unknown model is a refusal in the provider\'s words', async () => {
    const r = await reply(fresh('status:404'));
    assert.equal(r.error.message, 'Provider "Local test provider" answered HTTP 404 Not Found: invalid_request_error: Bad request');
    assert.equal(r.error.transient, false);
  });
});
