// The Ollama /api/chat client against the local provider: the request as docs/api.md shows it
// (messages with images and tool calls, options by Modelfile names), the NDJSON lines read as
// they come (thinking apart from the answer, the counts of the last line as usage, an error
// line); and the local provider run alone as an Ollama-style server.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import { CONVERSATION, PNG, collect, fresh, kit, localProvider, requestsFor, startProvider } from './kit.mjs';

describe('Ollama /api/chat', () => {
  let p;
  let provider;
  before(async () => {
    p = await startProvider();
    provider = localProvider(p, 'ollama');
  });
  after(() => p.close());

  const reply = (model, extra = {}) => collect({ provider, model, messages: [{ role: 'user', content: 'Hello there, model' }], retryBaseMs: 10, ...extra });

  test("{baseUrl}/api/chat: streamed, the system text first, options in Ollama's names, no key when none is set", async () => {
    const model = fresh('echo');
    const r = await collect({ provider, model, system: 'You are terse.', messages: [{ role: 'user', content: 'Hi' }], options: { temperature: 0.2, topP: 0.9, maxTokens: 50, stop: ['END'] } });
    assert.equal(r.error, undefined);
    const [req] = requestsFor(p, model);
    assert.equal(req.path, '/api/chat');
    assert.equal(req.headers.authorization, undefined);
    assert.deepEqual(req.body, {
      model,
      messages: [
        { role: 'system', content: 'You are terse.' },
        { role: 'user', content: 'Hi' },
      ],
      stream: true,
      options: { temperature: 0.2, top_p: 0.9, num_predict: 50, stop: ['END'] },
    });
  });

  test('"Parts are mapped to each protocol\'s own shapes." ... "Ollama names the tool, found from its call"', async () => {
    const model = fresh('echo');
    const r = await collect({ provider, model, messages: CONVERSATION });
    assert.equal(r.error, undefined);
    const [req] = requestsFor(p, model);
    assert.deepEqual(req.body.messages, [
      { role: 'user', content: 'What is in this picture?\n\n[file: notes.pdf (application/pdf)]', images: [PNG] },
      { role: 'assistant', content: 'A cat.', tool_calls: [{ function: { name: 'lookup', arguments: { q: 'cat' } } }] },
      { role: 'tool', content: '{"found":true}', tool_name: 'lookup' },
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'And now?' },
    ]);
    assert.equal(req.body.options, undefined, 'no options object when none is given');
    assert.ok(!JSON.stringify(req.body).includes('thoughts'));
  });

  test('message.content is the answer, message.thinking reasoning, the eval counts usage, done_reason the finish', async () => {
    const r = await reply(fresh('reasoning:2+tokens:4'));
    assert.equal(r.error, undefined);
    assert.equal(r.reasoning, 'Let me');
    assert.equal(r.text, 'the quick brown fox');
    assert.deepEqual(r.usages, [{ inputTokens: 3, outputTokens: 6 }]);
    assert.equal(r.finishReason, 'stop');
    assert.equal((await reply(fresh('tokens:2+finish:length'))).finishReason, 'length');
  });

  test('no counts in the last line: no usage', async () => {
    const r = await reply(fresh('tokens:2+no-usage'));
    assert.equal(r.error, undefined);
    assert.deepEqual(r.usages, []);
  });

  test('lines cut anywhere between reads', async () => {
    const say = 'Grüße, 世界! 😀';
    for (const faults of ['split:1', 'split:7']) {
      const r = await reply(fresh(`say:${encodeURIComponent(say)}+reasoning:1+${faults}`));
      assert.equal(r.error, undefined, faults);
      assert.equal(r.text, say);
    }
  });

  test('an error field in a line ends the reply with that error', async () => {
    const model = fresh('tokens:4+error-after:2');
    const r = await reply(model);
    assert.equal(r.text, 'the quick');
    assert.ok(r.error instanceof kit.ProviderFailed);
    assert.equal(r.error.message, 'Provider "Local test provider" reported an error in the stream: an error was encountered while running the model: unexpected EOF');
    assert.equal(requestsFor(p, model).length, 1);
  });

  test('an HTTP error is quoted from its {"error": ...} body', async () => {
    const r = await reply(fresh('status:404'));
    assert.equal(r.error.message, 'Provider "Local test provider" answered HTTP 404 Not Found: Bad request');
    assert.equal(r.error.transient, false);
    const busy = fresh('status:503+retry-after:0+times:1');
    assert.equal((await reply(busy)).error, undefined);
    assert.equal(requestsFor(p, busy).length, 2);
  });

  test('"A key configured for Ollama is sent as Authorization: Bearer (a proxy in front of it)."', async () => {
    const model = fresh('echo');
    await collect({ provider: localProvider(p, 'ollama', { apiKey: 'proxy-token-123456' }), model, messages: [{ role: 'user', content: 'x' }] });
    assert.equal(requestsFor(p, model)[0].headers.authorization, 'Bearer proxy-token-123456');
  });
});

test('"node test/provider/server.mjs --port 11434 runs it alone as an Ollama-style server"', async () => {
  const script = fileURLToPath(new URL('../provider/server.mjs', import.meta.url));
  const child = spawn(process.execPath, [script, '--port', '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    const line = await new Promise((resolve, reject) => {
      createInterface({ input: child.stdout }).once('line', resolve);
      child.once('exit', (code) => reject(new Error(`exited with ${code}`)));
    });
    const url = /listening on (http:\/\/\S+)/.exec(line)?.[1];
    assert.ok(url, line);
    const tags = await (await fetch(`${url}/api/tags`)).json();
    assert.ok(tags.models.some((m) => m.name === 'llama3.2'));
    const r = await collect({ provider: kit.providerConfig({ name: 'Local Ollama', type: 'ollama', baseUrl: url }), model: 'llama3.2', messages: [{ role: 'user', content: 'Why is the sky blue?' }] });
    assert.equal(r.error, undefined);
    assert.equal(r.text, 'Why is the sky blue?');
    assert.equal(r.usages.length, 1);
  } finally {
    child.kill('SIGTERM');
  }
});
