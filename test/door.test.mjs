// The OpenAI door (docs/TEAM-DECISIONS.md, "The OpenAI door"; docs/DECISIONS.md, "The OpenAI
// door"), driven by the real clients our users run: the `openai` SDK and Vercel's AI SDK
// (@ai-sdk/openai-compatible), pointed at /v1 of the built server, with the local provider of
// test/provider/ behind it on all three protocols; raw HTTP where a client hides what is checked
// (the frames, the headers). Every conversation is a session of the native API. Run on every engine.
import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import { after, before, describe, test } from 'node:test';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateText, jsonSchema, stepCountIs, streamText, tool } from 'ai';
import OpenAI from 'openai';
import { metric, waitFor } from './api-kit.mjs';
import { startServer, tokenFor } from './helpers.mjs';
import { startProvider } from './provider/server.mjs';

const B = '/api/v1/chat-sessions';
const ids = { openai: '6f0000000000000000000001', anthropic: '6f0000000000000000000002', ollama: '6f0000000000000000000003' };
const PROTOCOLS = ['openai', 'anthropic', 'ollama'];
/** The model id each protocol's provider answers for: `<slug>/<model>` (the slugs: the names made into one, and Ollama's own). */
const slug = { openai: 'local-openai', anthropic: 'local-claude', ollama: 'ollama' };
/** The slugs of providers that answer for any model (a model is then the local provider's switches). */
const anySlug = { openai: 'openai-any', anthropic: 'claude-any', ollama: 'ollama' };

let provider;
let server;
let alice;
/** An openai SDK client for `who`'s token (retries off unless asked: the tests count provider calls). */
const client = (token = alice.token, opts = {}) => new OpenAI({ baseURL: `${server.url}/v1`, apiKey: token, maxRetries: 0, ...opts });

before(async () => {
  provider = await startProvider();
  server = await startServer({
    providers: [
      { _id: ids.openai, name: 'Local OpenAI', type: 'openai', baseUrl: `${provider.url}/v1`, apiKey: 'sk-door-0123456789', models: ['echo', 'say:Hello%20there.'] },
      { _id: ids.anthropic, name: 'Local Claude', type: 'anthropic', baseUrl: provider.url, apiKey: 'sk-door-0123456789', models: ['claude-x', 'shared-model'] },
      { _id: ids.ollama, name: 'Local Ollama', slug: 'ollama', type: 'ollama', baseUrl: provider.url },
      { _id: '6f0000000000000000000004', name: 'Twin', type: 'openai', baseUrl: `${provider.url}/v1`, models: ['shared-model'] },
      { _id: '6f0000000000000000000005', name: 'twin!', type: 'openai', baseUrl: `${provider.url}/v1`, models: ['t'] },
      { _id: '6f0000000000000000000006', name: 'Listing only', type: 'azure-something', baseUrl: provider.url, models: ['never'] },
      // no models: they answer for any, the provider's switches included
      { _id: '6f0000000000000000000007', name: 'OpenAI any', type: 'openai', baseUrl: `${provider.url}/v1`, apiKey: 'sk-door-0123456789' },
      { _id: '6f0000000000000000000008', name: 'Claude any', type: 'anthropic', baseUrl: provider.url, apiKey: 'sk-door-0123456789' },
    ],
    env: { QUOTA_SESSIONS: '1000' },
  });
  alice = server.as('alice');
});
after(async () => {
  await server?.stop();
  await provider?.close();
});

const sessionsOf = async (who = alice) => (await who.get(B)).body.data;
const turnsOf = async (sid, who = alice) => (await who.get(`${B}/${sid}/turns`)).body.data;
const lastRequest = (model) => provider.requests.filter((q) => q.model === model).at(-1);

/** A raw POST to /v1/chat/completions: {status, headers, text}. */
function rawCompletion(body, { token = alice.token, headers = {} } = {}) {
  const payload = Buffer.from(JSON.stringify(body));
  const url = new URL('/v1/chat/completions', server.url);
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: url.hostname, port: url.port, method: 'POST', path: url.pathname, headers: { 'content-type': 'application/json', 'content-length': payload.length, ...(token ? { authorization: `Bearer ${token}` } : {}), ...headers }, agent: false }, (res) => {
      const parts = [];
      res.on('data', (c) => parts.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, text: Buffer.concat(parts).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(payload);
  });
}

/** The data frames of an event stream's text, parsed (`[DONE]` as the string). */
const framesOf = (text) => text.split('\n\n').filter((f) => f.startsWith('data: ')).map((f) => (f.slice(6) === '[DONE]' ? '[DONE]' : JSON.parse(f.slice(6))));

describe('The OpenAI door', () => {
  test('[D-door-1] GET /v1/models lists the models of the providers that can reply, each as <slug>/<model>', async () => {
    const list = await client().models.list();
    const idsListed = list.data.map((m) => m.id);
    assert.deepEqual(idsListed, ['local-claude/claude-x', 'local-claude/shared-model', 'local-openai/echo', 'local-openai/say:Hello%20there.', '6f0000000000000000000004/shared-model', '6f0000000000000000000005/t']);
    assert.deepEqual(list.data[0], { id: 'local-claude/claude-x', object: 'model', created: list.data[0].created, owned_by: 'Local Claude' });
    assert.ok(Number.isInteger(list.data[0].created));
    // the SDK sends the id's / as %2F; a / answers too
    assert.equal((await client().models.retrieve('local-openai/echo')).id, 'local-openai/echo');
    const plain = await alice.get('/v1/models/local-openai/echo');
    assert.deepEqual([plain.status, plain.body.id], [200, 'local-openai/echo']);
    await assert.rejects(client().models.retrieve('local-openai/nope'), (e) => e instanceof OpenAI.NotFoundError);
    const raw = await alice.get('/v1/models');
    assert.ok(raw.headers['x-request-id'], 'x-request-id on every answer');
  });

  test('[D-door-2] a model is a slug and a model, or a bare name exactly one provider lists: several 400, none 404', async () => {
    const c = client();
    const ask = (model) => c.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }] });
    assert.equal((await ask('echo')).model, 'echo', 'a bare name one provider lists');
    assert.equal((await ask('ollama/any-model:7b')).choices[0].message.content, 'hi', 'a provider without models answers any');
    await assert.rejects(ask('shared-model'), (e) => e instanceof OpenAI.BadRequestError && /local-claude\/shared-model/.test(e.message) && /6f0000000000000000000004\/shared-model/.test(e.message));
    await assert.rejects(ask('nobody-lists-this'), (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found' && e.param === 'model');
    await assert.rejects(ask('local-openai/not-in-models'), (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found');
    await assert.rejects(ask('listing-only/never'), (e) => e instanceof OpenAI.NotFoundError, 'a provider that cannot reply has no models here');
  });

  for (const type of PROTOCOLS) {
    test(`[D-door-3] chat.completions.create waits on ${type}: the completion is recorded as a session`, async () => {
      const model = `${slug[type]}/${type === 'openai' ? 'echo' : type === 'anthropic' ? 'claude-x' : 'llama3'}`;
      const { data, response } = await client()
        .chat.completions.create({ model, messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello door' }] })
        .withResponse();
      assert.match(data.id, /^chatcmpl-[0-9a-f]{24}$/);
      assert.deepEqual([data.object, data.model, data.choices.length], ['chat.completion', model, 1]);
      assert.deepEqual(data.choices[0].message, { role: 'assistant', content: 'Hello door', refusal: null });
      assert.equal(data.choices[0].finish_reason, 'stop');
      assert.ok(data.usage.prompt_tokens > 0 && data.usage.total_tokens === data.usage.prompt_tokens + data.usage.completion_tokens);
      const sid = response.headers.get('x-session-id');
      assert.equal(response.headers.get('x-turn-id'), data.id.slice('chatcmpl-'.length));
      const session = (await alice.get(`${B}/${sid}`)).body.data;
      assert.deepEqual([session.name, session.provider, session.project, session.headTurnId], ['Hello door', ids[type], 'default', data.id.slice(9)]);
      const turns = await turnsOf(sid);
      assert.deepEqual(turns.map((t) => [t.role, t.content]), [['system', 'Be brief.'], ['user', 'Hello door'], ['assistant', 'Hello door']]);
      assert.equal(turns[2].stopReason, 'stop');
    });
  }

  test("[D-door-4] the stream is OpenAI's: role chunk, pieces, finish chunk, usage chunk with no choices, [DONE]", async () => {
    const r = await rawCompletion({ model: 'ollama/reasoning:2+say:One%20two%20three.', messages: [{ role: 'user', content: 'count' }], stream: true, stream_options: { include_usage: true } });
    assert.equal(r.status, 200);
    assert.match(r.headers['content-type'], /^text\/event-stream/);
    assert.ok(r.headers['x-session-id'] && r.headers['x-turn-id'] && r.headers['x-request-id']);
    const frames = framesOf(r.text);
    assert.equal(frames.at(-1), '[DONE]');
    const chunks = frames.slice(0, -1);
    assert.equal(new Set(chunks.map((c) => `${c.id} ${c.created} ${c.model}`)).size, 1, 'one id, created and model on every chunk');
    assert.equal(chunks[0].id, `chatcmpl-${r.headers['x-turn-id']}`);
    assert.deepEqual(chunks[0].choices[0].delta, { role: 'assistant', content: '', refusal: null });
    const deltas = chunks.slice(1, -2).map((c) => c.choices[0].delta);
    assert.equal(deltas.filter((d) => d.reasoning_content !== undefined).map((d) => d.reasoning_content).join(''), 'Let me');
    assert.equal(deltas.filter((d) => d.content !== undefined).map((d) => d.content).join(''), 'One two three.');
    assert.deepEqual(chunks.at(-2).choices, [{ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' }]);
    assert.deepEqual(chunks.at(-1).choices, []);
    assert.ok(chunks.at(-1).usage.completion_tokens > 0);
    assert.ok(chunks.slice(0, -1).every((c) => c.usage === null), 'the other chunks say usage: null');
  });

  test("[D-door-4] the stream is OpenAI's: the SDK's strict .stream() helper accumulates it, usage included", async () => {
    const s = client().chat.completions.stream({ model: 'local-openai/echo', messages: [{ role: 'user', content: 'stream helper words' }], stream_options: { include_usage: true } });
    const pieces = [];
    s.on('content', (d) => pieces.push(d));
    const final = await s.finalChatCompletion();
    assert.equal(final.choices[0].message.content, 'stream helper words');
    assert.equal(pieces.join(''), 'stream helper words');
    assert.ok(final.usage.total_tokens > 0);
  });

  test('[D-door-4] "a `: ping` comment every 15 s of silence" (EVENTS_HEARTBEAT): a provider that pauses keeps its stream', async () => {
    const s = await startServer({ providers: [{ _id: ids.ollama, name: 'Local Ollama', slug: 'ollama', type: 'ollama', baseUrl: provider.url }], env: { EVENTS_HEARTBEAT: '1s' } });
    try {
      const payload = Buffer.from(JSON.stringify({ model: 'ollama/tokens:3+stall-after:1:3500', messages: [{ role: 'user', content: 'x' }], stream: true }));
      const url = new URL('/v1/chat/completions', s.url);
      const text = await new Promise((resolve, reject) => {
        const req = httpRequest({ host: url.hostname, port: url.port, method: 'POST', path: url.pathname, headers: { 'content-type': 'application/json', 'content-length': payload.length, authorization: `Bearer ${s.as('alice').token}` } }, (res) => {
          let t = '';
          res.setEncoding('utf8');
          res.on('data', (c) => (t += c));
          res.on('end', () => resolve(t));
        });
        req.on('error', reject);
        req.end(payload);
      });
      const frames = text.split('\n\n').filter((f) => f !== '');
      const pings = frames.filter((f) => f === ': ping');
      assert.ok(pings.length >= 2, `pings during the pause: ${JSON.stringify(frames.map((f) => f.slice(0, 30)))}`);
      const firstPing = frames.indexOf(': ping');
      assert.ok(frames.slice(0, firstPing).some((f) => f.includes('"content":"the"')), 'after the first piece');
      assert.equal(frames.at(-1), 'data: [DONE]', 'and the stream ends as any other');
    } finally {
      await s.stop();
    }
  });

  for (const type of PROTOCOLS) {
    test(`[D-door-5] a tool loop through the door is one conversation: AI SDK generateText, streamText (${type})`, async () => {
      const ai = createOpenAICompatible({ name: 'door', baseURL: `${server.url}/v1`, apiKey: alice.token, includeUsage: true });
      const model = ai(`${slug[type]}/${type === 'anthropic' ? 'claude-x' : type === 'openai' ? 'echo' : 'llama3'}`);
      const calls = [];
      const tools = { get_weather: tool({ description: 'The weather in a city', inputSchema: jsonSchema({ type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }), execute: async ({ city }) => (calls.push(city), { city, tempC: 21 }) }) };
      const r = await generateText({ model, prompt: `Paris-${type}`, tools, stopWhen: stepCountIs(4) });
      assert.equal(r.text, `tool said: {"city":"Paris-${type}","tempC":21}`);
      assert.equal(r.steps.length, 2);
      assert.equal(r.steps[0].finishReason, 'tool-calls');
      const s = streamText({ model, prompt: `Lyon-${type}`, tools, stopWhen: stepCountIs(4) });
      let text = '';
      for await (const d of s.textStream) text += d;
      assert.equal(text, `tool said: {"city":"Lyon-${type}","tempC":21}`);
      assert.deepEqual(calls, [`Paris-${type}`, `Lyon-${type}`]);
      // the loop's steps are one conversation, one session: user, the call, its result, the answer
      for (const city of [`Paris-${type}`, `Lyon-${type}`]) {
        const mine = (await sessionsOf()).filter((x) => x.name === city);
        assert.equal(mine.length, 1, `${city}: one session`);
        const turns = await turnsOf(mine[0]._id);
        assert.deepEqual(turns.map((t) => t.role), ['user', 'assistant', 'tool', 'assistant'], city);
        assert.deepEqual(turns.slice(1).map((t) => t.parentId), turns.slice(0, -1).map((t) => t._id), `${city}: one path`);
      }
    });
  }

  for (const type of PROTOCOLS) {
    test(`[D-door-5] parallel tool calls answered by a tool message each go back to the model together (${type})`, async () => {
      const c = client();
      const model = `${anySlug[type]}/call:get_weather+call:get_time:%7B%7D`;
      const tools = ['get_weather', 'get_time'].map((name) => ({ type: 'function', function: { name, parameters: { type: 'object' } } }));
      const messages = [{ role: 'user', content: `two calls ${type}` }];
      const first = await c.chat.completions.create({ model, messages, tools });
      const calls = first.choices[0].message.tool_calls;
      assert.deepEqual(calls.map((x) => x.function.name), ['get_weather', 'get_time']);
      messages.push(first.choices[0].message, ...calls.map((x) => ({ role: 'tool', tool_call_id: x.id, content: `${x.function.name} done` })));
      // Anthropic wants every result of the calls in the one user message right after them
      const second = await c.chat.completions.create({ model, messages, tools });
      assert.equal(second.choices[0].message.content, 'tool said: get_weather done; get_time done');
      if (type === 'anthropic') {
        const sent = lastRequest(model.slice(anySlug[type].length + 1)).body.messages;
        assert.deepEqual(sent.at(-1).content.map((b) => b.type), ['tool_result', 'tool_result']);
      }
    });
  }

  test('[D-door-18] a provider refusing the request is a 400; its other refusals a 502 not to retry: the SDK asks once', async () => {
    // the SDK's own retries on (as users run it): it would try a 5xx twice more
    const c = client(alice.token, { maxRetries: 2 });
    const asked = (model) => provider.requests.filter((q) => q.model === model).length;
    await assert.rejects(c.chat.completions.create({ model: 'openai-any/status:400', messages: [{ role: 'user', content: 'too long' }] }), (e) => e instanceof OpenAI.BadRequestError && /answered HTTP 400/.test(e.message) && e.headers.get('x-session-id') !== null);
    assert.equal(asked('status:400'), 1);
    await assert.rejects(c.chat.completions.create({ model: 'openai-any/status:401', messages: [{ role: 'user', content: 'bad key' }] }), (e) => e instanceof OpenAI.InternalServerError && e.status === 502 && e.headers.get('x-should-retry') === 'false');
    assert.equal(asked('status:401'), 1);
    // a passing failure (429, 5xx) stays one the SDK may try again
    const s = await rawCompletion({ model: 'openai-any/status:503', messages: [{ role: 'user', content: 'busy' }] });
    assert.deepEqual([s.status, s.headers['x-should-retry']], [502, undefined]);
  });

  test('[D-tools-14] arguments parsing would change (a JSON string, a 20-digit number) are kept and sent back as their text', async () => {
    const c = client();
    const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }];
    for (const [args, kept] of [
      ['{"id": 12345678901234567890, "x": 1.50}', '{"id": 12345678901234567890, "x": 1.50}'],
      ['"hello"', '"hello"'],
      ['[1, 2]', '[1, 2]'],
      ['{"city": "Paris", "n": 1.5}', { city: 'Paris', n: 1.5 }],
    ]) {
      const r = await c.chat.completions.create({ model: `openai-any/call:f:${encodeURIComponent(args)}`, messages: [{ role: 'user', content: `args ${args}` }], tools }).withResponse();
      const call = r.data.choices[0].message.tool_calls[0];
      if (typeof kept === 'string') assert.equal(call.function.arguments, kept, 'the text as the model gave it');
      else assert.deepEqual(JSON.parse(call.function.arguments), kept);
      const turns = await turnsOf(r.response.headers.get('x-session-id'));
      assert.deepEqual(turns[1].content[0].arguments, kept, `${args}: as the turn keeps it`);
    }
  });

  test("[D-door-6] the door's errors are OpenAI's objects on every /v1 route; the SDK's error classes read them", async () => {
    const none = await server.request('GET', '/v1/models');
    assert.deepEqual([none.status, none.body.error.type, none.body.error.code], [401, 'authentication_error', 'invalid_api_key']);
    await assert.rejects(client('not.a.token').chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'x' }] }), (e) => e instanceof OpenAI.AuthenticationError && e.type === 'authentication_error');
    await assert.rejects(client().chat.completions.create({ model: 'echo', messages: [] }), (e) => e instanceof OpenAI.BadRequestError && e.param === 'messages' && e.type === 'invalid_request_error');
    await assert.rejects(client().chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'x' }], n: 2 }), (e) => e instanceof OpenAI.BadRequestError && e.param === 'n');
    await assert.rejects(client().chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'x' }], n: 0 }), (e) => e instanceof OpenAI.BadRequestError && e.param === 'n');
    await assert.rejects(client().chat.completions.create({ model: 'echo', messages: [{ role: 'wizard', content: 'x' }] }), (e) => e instanceof OpenAI.BadRequestError && e.param === 'messages[0].role');
    await assert.rejects(client().chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: ' ' }] }), (e) => e instanceof OpenAI.BadRequestError && e.param === 'messages[0].content');
    const unknown = await alice.get('/v1/engines');
    assert.equal(unknown.status, 404);
    assert.deepEqual(unknown.body, { error: { message: 'Invalid URL (GET /v1/engines)', type: 'invalid_request_error', param: null, code: 'unknown_url' } });
    assert.ok(unknown.headers['x-request-id']);
    const wrong = await alice.del('/v1/models');
    assert.deepEqual([wrong.status, wrong.body.error.type], [405, 'invalid_request_error']);
    const big = await rawCompletion({ model: 'echo', messages: [{ role: 'user', content: 'x'.repeat(1_100_000) }] });
    assert.deepEqual([big.status, JSON.parse(big.text).error.type], [413, 'invalid_request_error']);
    const other = await client().chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'fields OpenAI has that are ignored' }], logprobs: true, service_tier: 'auto', frequency_penalty: 0 });
    assert.equal(other.choices[0].message.content, 'fields OpenAI has that are ignored');
  });

  test('[D-door-6] "an exceeded quota" is 429 insufficient_quota with x-should-retry: false; the SDK does not retry it', async () => {
    const s = await startServer({ providers: [{ _id: ids.openai, name: 'Local OpenAI', type: 'openai', baseUrl: `${provider.url}/v1` }], env: { QUOTA_SESSIONS: '1' } });
    try {
      const c = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: s.as('bob').token, maxRetries: 2 });
      await c.chat.completions.create({ model: 'local-openai/echo', messages: [{ role: 'user', content: 'first' }] });
      const before = provider.requests.length;
      const raw = await s.as('bob').post('/v1/chat/completions', { model: 'local-openai/echo', messages: [{ role: 'user', content: 'second' }] });
      assert.equal(raw.status, 429);
      assert.equal(raw.headers['x-should-retry'], 'false');
      assert.deepEqual([raw.body.error.type, raw.body.error.code], ['insufficient_quota', 'insufficient_quota'], "OpenAI's own type and code");
      await assert.rejects(c.chat.completions.create({ model: 'local-openai/echo', messages: [{ role: 'user', content: 'third' }] }), (e) => e instanceof OpenAI.RateLimitError && e.code === 'insufficient_quota');
      assert.equal(provider.requests.length, before, 'nothing asked of the provider');
    } finally {
      await s.stop();
    }
  });

  test('[D-door-7] a client that closes its connection cancels the reply: recorded interrupted', async () => {
    const ac = new AbortController();
    const stream = await client().chat.completions.create({ model: 'ollama/tokens:200@20+n:stop-button', messages: [{ role: 'user', content: 'a long answer' }], stream: true }, { signal: ac.signal });
    let got = 0;
    try {
      for await (const c of stream) {
        if ((c.choices[0]?.delta?.content ?? '') !== '' && ++got === 3) ac.abort();
        if (got >= 3) break;
      }
    } catch (e) {
      assert.ok(e instanceof OpenAI.APIUserAbortError || e.name === 'AbortError', String(e));
    }
    const session = (await sessionsOf()).find((x) => x.name === 'a long answer');
    await waitFor(async () => (await turnsOf(session._id)).at(-1).status === 'interrupted', 'the reply to be recorded interrupted');
    const reply = (await turnsOf(session._id)).at(-1);
    assert.ok(reply.content.length > 0 && reply.content.length < 200 * 6, 'with the text so far');
    const asked = lastRequest('tokens:200@20+n:stop-button');
    await asked.closed;
    assert.equal(asked.clientClosed, true, "the provider's request is closed");
  });

  test('[D-door-8] requests not recorded (X-OpenWebUI-Task, X-Record: off) are answered and counted', async () => {
    const before = (await sessionsOf()).length;
    const counted = await metric(server, 'chat_session_api_replies_total\\{status="complete"\\}');
    const a = await client().chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'a title please' }] }, { headers: { 'X-OpenWebUI-Task': 'title_generation' } }).withResponse();
    assert.equal(a.data.choices[0].message.content, 'a title please');
    assert.equal(a.response.headers.get('x-session-id'), null, 'no session');
    assert.equal(a.response.headers.get('x-turn-id'), null);
    const b = await rawCompletion({ model: 'echo', messages: [{ role: 'user', content: 'not kept' }], stream: true }, { headers: { 'x-record': 'off' } });
    assert.equal(framesOf(b.text).filter((f) => f !== '[DONE]').flatMap((f) => f.choices.map((c) => c.delta.content ?? '')).join(''), 'not kept');
    assert.equal(b.headers['x-session-id'], undefined);
    assert.equal((await sessionsOf()).length, before, 'nothing recorded');
    assert.equal(await metric(server, 'chat_session_api_replies_total\\{status="complete"\\}'), counted + 2, 'counted');
  });

  test('[D-door-9] a token acts for end users only with the scope users:act: recorded as the user it names', async () => {
    const gateway = tokenFor('open-webui', { scope: 'sessions:write providers:read users:act' });
    const viaHeader = await client(gateway).chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'I am carol' }] }, { headers: { 'X-OpenWebUI-User-Id': 'carol' } }).withResponse();
    const sid = viaHeader.response.headers.get('x-session-id');
    assert.equal((await server.as('carol').get(`${B}/${sid}`)).body.data.user, 'carol');
    const viaUser = await client(gateway).chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'I am dave' }], user: 'dave' }).withResponse();
    assert.equal((await server.as('dave').get(`${B}/${viaUser.response.headers.get('x-session-id')}`)).body.data.user, 'dave');
    // without the scope: a header naming someone is refused, a `user` string is OpenAI's tag and ignored
    await assert.rejects(client().chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'x' }] }, { headers: { 'X-User-Id': 'carol' } }), (e) => e instanceof OpenAI.PermissionDeniedError);
    const tagged = await client().chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'tagged' }], user: 'someone' }).withResponse();
    assert.equal((await alice.get(`${B}/${tagged.response.headers.get('x-session-id')}`)).body.data.user, 'alice');
    // a token with no scope claim may do everything but act for others
    await assert.rejects(client().chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'x' }] }, { headers: { 'X-User-Id': 'eve' } }), (e) => e.status === 403);
  });

  test('[D-door-10] a retry is answered from the record: no second call, no second turns', async () => {
    const body = { model: 'ollama/n:retry-same', messages: [{ role: 'user', content: 'asked once' }] };
    const first = await rawCompletion(body, { headers: { 'idempotency-key': 'k-1' } });
    const calls = provider.requests.filter((q) => q.model === 'n:retry-same').length;
    const again = await rawCompletion(body, { headers: { 'idempotency-key': 'k-1', 'x-stainless-retry-count': '1' } });
    assert.equal(again.status, 200);
    assert.equal(JSON.parse(again.text).id, JSON.parse(first.text).id);
    assert.equal(again.headers['x-turn-id'], first.headers['x-turn-id']);
    assert.equal(provider.requests.filter((q) => q.model === 'n:retry-same').length, calls, 'no second call');
    assert.equal((await turnsOf(first.headers['x-session-id'])).length, 2, 'no second turns');
    // without a key, a body equal to one answered, said to be a retry
    const noKey = await rawCompletion(body, { headers: { 'x-stainless-retry-count': '2' } });
    assert.equal(JSON.parse(noKey.text).id, JSON.parse(first.text).id);
    // the same body not said to be a retry is a new request (a regenerate)
    const fresh = await rawCompletion(body);
    assert.notEqual(JSON.parse(fresh.text).id, JSON.parse(first.text).id);
    // streamed, a retry of a reply recorded whole comes whole
    const streamed = await rawCompletion({ ...body, stream: true }, { headers: { 'idempotency-key': 'k-1' } });
    assert.equal(framesOf(streamed.text).filter((f) => f !== '[DONE]').flatMap((f) => f.choices.map((c) => c.delta.content ?? '')).join(''), 'asked once');
  });

  test('[D-door-10] a retry while the first answer still streams is followed to its end: one call, one reply', async () => {
    const body = { model: 'ollama/tokens:30@60+n:retry-streaming', messages: [{ role: 'user', content: 'long enough' }] };
    const first = rawCompletion(body, { headers: { 'idempotency-key': 'k-streaming' } });
    await provider.waitForRequest((q) => q.model === 'tokens:30@60+n:retry-streaming');
    const again = await rawCompletion(body, { headers: { 'idempotency-key': 'k-streaming', 'x-stainless-retry-count': '1' } });
    const one = await first;
    assert.deepEqual([one.status, again.status], [200, 200]);
    assert.equal(JSON.parse(again.text).id, JSON.parse(one.text).id);
    assert.equal(JSON.parse(again.text).choices[0].message.content, JSON.parse(one.text).choices[0].message.content, 'the whole reply');
    assert.equal(provider.requests.filter((q) => q.model === 'tokens:30@60+n:retry-streaming').length, 1);
  });

  test('[D-door-10] a retry of a reply that failed asks again: "a new reply under the same user turn"', async () => {
    const body = { model: 'ollama/status:500+times:3+n:retry-failed', messages: [{ role: 'user', content: 'fails first' }] };
    const first = await rawCompletion(body, { headers: { 'idempotency-key': 'k-failed' } });
    assert.deepEqual([first.status, JSON.parse(first.text).error.type], [502, 'api_error']);
    const again = await rawCompletion(body, { headers: { 'idempotency-key': 'k-failed', 'x-stainless-retry-count': '1' } });
    assert.equal(again.status, 200, again.text);
    const turns = await turnsOf(first.headers['x-session-id']);
    assert.deepEqual(turns.map((t) => [t.role, t.status]), [['user', 'complete'], ['assistant', 'error'], ['assistant', 'complete']]);
    assert.equal(turns[1].parentId, turns[0]._id);
    assert.equal(turns[2].parentId, turns[0]._id, 'a new reply under the same user turn');
  });

  test('[D-door-11] X-Session-Id continues a session; an edited history, images too, "becomes a branch of the same session"', async () => {
    const c = client();
    const one = await c.chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'first question' }] }).withResponse();
    const sid = one.response.headers.get('x-session-id');
    const history = [{ role: 'user', content: 'first question' }, { role: 'assistant', content: one.data.choices[0].message.content }];
    await c.chat.completions.create({ model: 'echo', messages: [...history, { role: 'user', content: 'second question' }] }, { headers: { 'X-Session-Id': sid } });
    // the same path again with another last message: a sibling of the second question
    await c.chat.completions.create({ model: 'echo', messages: [...history, { role: 'user', content: 'second, edited' }] }, { headers: { 'X-Session-Id': sid } });
    const turns = await turnsOf(sid);
    assert.deepEqual(turns.map((t) => t.content), ['first question', 'first question', 'second question', 'second question', 'second, edited', 'second, edited']);
    assert.equal(turns[2].parentId, turns[1]._id);
    assert.equal(turns[4].parentId, turns[1]._id, 'the edit is a branch, never a rewrite');
    // the same words with another image: a branch too
    const image = (url) => [{ role: 'user', content: [{ type: 'text', text: 'what is this?' }, { type: 'image_url', image_url: { url } }] }];
    const pic = await c.chat.completions.create({ model: 'echo', messages: image('https://img.example/a.png') }).withResponse();
    const picSid = pic.response.headers.get('x-session-id');
    await c.chat.completions.create({ model: 'echo', messages: image('https://img.example/b.png') }, { headers: { 'X-Session-Id': picSid } });
    const picTurns = await turnsOf(picSid);
    assert.deepEqual(picTurns.map((t) => [t.role, t.parentId === null]), [['user', true], ['assistant', false], ['user', true], ['assistant', false]], 'two roots: the image made the difference');
    assert.deepEqual(picTurns[2].content[1], { type: 'file', name: 'b.png', mediaType: 'image/png', url: 'https://img.example/b.png' });
    await assert.rejects(c.chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'x' }] }, { headers: { 'X-Session-Id': 'ffffffffffffffffffffffff' } }), (e) => e instanceof OpenAI.NotFoundError);
    const bob = client(server.as('bob').token);
    await assert.rejects(bob.chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'x' }] }, { headers: { 'X-Session-Id': sid } }), (e) => e instanceof OpenAI.NotFoundError, "another user's session is not found");
  });

  test("[D-door-14] a client that sends back what it was given goes on in the caller's session holding that path", async () => {
    const c = client();
    const system = { role: 'system', content: 'You are terse.' };
    const first = await c.chat.completions.create({ model: 'echo', messages: [system, { role: 'user', content: 'rule three, first' }] }).withResponse();
    const sid = first.response.headers.get('x-session-id');
    const history = [system, { role: 'user', content: 'rule three, first' }, first.data.choices[0].message];
    const second = await c.chat.completions.create({ model: 'echo', messages: [...history, { role: 'user', content: 'rule three, second' }] }).withResponse();
    assert.equal(second.response.headers.get('x-session-id'), sid, 'no header: found by its path');
    const third = await c.chat.completions.create({ model: 'echo', messages: [...history, { role: 'user', content: 'rule three, second' }, second.data.choices[0].message, { role: 'user', content: 'rule three, third' }] }).withResponse();
    assert.equal(third.response.headers.get('x-session-id'), sid);
    assert.deepEqual((await turnsOf(sid)).map((t) => t.role), ['system', 'user', 'assistant', 'user', 'assistant', 'user', 'assistant']);
    // an earlier point of the path, with another last message: a branch of the same session
    const edited = await c.chat.completions.create({ model: 'echo', messages: [...history, { role: 'user', content: 'rule three, edited' }] }).withResponse();
    assert.equal(edited.response.headers.get('x-session-id'), sid);
    assert.equal((await turnsOf(sid)).length, 9);
    // a first message, even after the same system prompt, starts a new session
    const fresh = await c.chat.completions.create({ model: 'echo', messages: [system, { role: 'user', content: 'rule three, first' }] }).withResponse();
    assert.notEqual(fresh.response.headers.get('x-session-id'), sid);
    // now two sessions hold the path (the echo answered the same): the most recently updated of them
    const again = await c.chat.completions.create({ model: 'echo', messages: [...history, { role: 'user', content: 'rule three, once more' }] }).withResponse();
    assert.equal(again.response.headers.get('x-session-id'), fresh.response.headers.get('x-session-id'));
    // another user's session with the same path is not theirs to continue
    const bob = await client(server.as('bob').token).chat.completions.create({ model: 'echo', messages: [...history, { role: 'user', content: 'rule three, bob' }] }).withResponse();
    assert.notEqual(bob.response.headers.get('x-session-id'), sid);
  });

  test('[D-door-16] an assistant message with empty content (a reply of reasoning only) comes back and goes on', async () => {
    const c = client();
    const model = 'openai-any/reasoning:3+say:';
    const first = await c.chat.completions.create({ model, messages: [{ role: 'user', content: 'think only' }] }).withResponse();
    const said = first.data.choices[0].message;
    assert.deepEqual([said.content, said.reasoning_content], ['', 'Let me think']);
    const sid = first.response.headers.get('x-session-id');
    // sent back as the SDK gave it, and as the AI SDK sends a reply of reasoning alone
    for (const back of [said, { role: 'assistant', content: '' }]) {
      const next = await c.chat.completions.create({ model: 'openai-any/echo', messages: [{ role: 'user', content: 'think only' }, back, { role: 'user', content: 'and now?' }] }).withResponse();
      assert.equal(next.response.headers.get('x-session-id'), sid, 'found by its path: the blank reply matched');
    }
    // a blank assistant message no session holds is recorded blank
    const made = await c.chat.completions.create({ model: 'openai-any/echo', messages: [{ role: 'user', content: 'blank one' }, { role: 'assistant', content: [] }, { role: 'user', content: 'blank two' }] }).withResponse();
    assert.deepEqual((await turnsOf(made.response.headers.get('x-session-id'))).map((t) => [t.role, t.content]), [['user', 'blank one'], ['assistant', ''], ['user', 'blank two'], ['assistant', 'blank two']]);
    // none at all is still refused
    await assert.rejects(c.chat.completions.create({ model: 'openai-any/echo', messages: [{ role: 'user', content: 'x' }, { role: 'assistant' }, { role: 'user', content: 'y' }] }), (e) => e instanceof OpenAI.BadRequestError && /must have content or tool_calls/.test(e.message));
  });

  test('[D-door-17] requests into a session whose reply is going wait for its end: siblings, one session a key, no 409', async () => {
    const c = client();
    const key = { 'X-OpenWebUI-Chat-Id': 'chat-at-once' };
    const messages = [{ role: 'user', content: 'two models at once' }];
    provider.hold();
    try {
      // Open WebUI asks two models in one chat at once: the second arrives while the first is held
      const a = c.chat.completions.create({ model: 'openai-any/hold-after:1+tokens:3', messages }, { headers: key }).withResponse();
      await waitFor(() => provider.held === 1, 'the first reply held by its provider');
      const inFlight = await metric(server, 'chat_session_api_requests_in_flight');
      const b = c.chat.completions.create({ model: 'openai-any/echo', messages }, { headers: key }).withResponse();
      await waitFor(async () => (await metric(server, 'chat_session_api_requests_in_flight')) > inFlight, 'the second request in');
      provider.release();
      const [ra, rb] = await Promise.all([a, b]);
      const sid = ra.response.headers.get('x-session-id');
      assert.equal(rb.response.headers.get('x-session-id'), sid);
      const turns = await turnsOf(sid);
      assert.deepEqual(turns.map((t) => t.content), ['two models at once', 'the quick brown', 'two models at once']);
      assert.deepEqual(turns.slice(1).map((t) => t.parentId), [turns[0]._id, turns[0]._id], 'the second reply is a sibling of the first');
    } finally {
      provider.release();
    }
    // first requests of a new key at once: the first makes the session, the others find it
    const race = await Promise.all([1, 2, 3, 4].map(() => c.chat.completions.create({ model: 'openai-any/echo', messages: [{ role: 'user', content: 'key race' }] }, { headers: { 'X-Conversation-Key': 'chat-race' } }).withResponse()));
    const sids = new Set(race.map((r) => r.response.headers.get('x-session-id')));
    assert.equal(sids.size, 1, 'one session for the key');
    assert.deepEqual((await turnsOf([...sids][0])).map((t) => t.role), ['user', 'assistant', 'assistant', 'assistant', 'assistant']);
  });

  test("[D-door-15] X-Conversation-Key (or X-OpenWebUI-Chat-Id, metadata.conversation_key) names the caller's session", async () => {
    const c = client();
    const a = await c.chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'keyed one' }] }, { headers: { 'X-OpenWebUI-Chat-Id': 'chat-abc' } }).withResponse();
    const sid = a.response.headers.get('x-session-id');
    assert.deepEqual((await alice.get(`${B}/${sid}`)).body.data.metadata, { conversationKey: 'chat-abc' });
    // Open WebUI sends the whole chat each time: the same key, the same session
    const b = await c.chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'keyed one' }, a.data.choices[0].message, { role: 'user', content: 'keyed two' }] }, { headers: { 'X-Conversation-Key': 'chat-abc' } }).withResponse();
    assert.equal(b.response.headers.get('x-session-id'), sid);
    const viaMeta = await c.chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'keyed three' }], metadata: { conversation_key: 'chat-abc' } }).withResponse();
    assert.equal(viaMeta.response.headers.get('x-session-id'), sid, 'a new first message under the same key: a new root of that session');
    assert.deepEqual((await turnsOf(sid)).map((t) => t.content), ['keyed one', 'keyed one', 'keyed two', 'keyed two', 'keyed three', 'keyed three']);
    // the key is the caller's: bob's same key is another session
    const bob = await client(server.as('bob').token).chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'keyed one' }] }, { headers: { 'X-Conversation-Key': 'chat-abc' } }).withResponse();
    assert.notEqual(bob.response.headers.get('x-session-id'), sid);
    // a key over 200 characters
    await assert.rejects(c.chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'x' }] }, { headers: { 'X-Conversation-Key': 'k'.repeat(201) } }), (e) => e instanceof OpenAI.BadRequestError);
  });

  test("[D-sec-1] a lone surrogate in a session's name, metadata or key is 400; one in a first message is U+FFFD in its name", async () => {
    const lone = 'x\ud800y';
    const bob = server.as('bob');
    const bobs = (await bob.post(B, { projectId: 'p', providerId: ids.openai, selectedModel: 'echo' })).body.data._id;
    // (on PostgreSQL such a session with a conversation key failed its write and every write of its group, another user's too)
    const others = Array.from({ length: 10 }, (_, i) => bob.post(`${B}/${bobs}/turns`, { role: 'user', content: `bob ${i}` }));
    const refused = [
      await alice.post(B, { projectId: 'p', providerId: ids.openai, selectedModel: 'echo', name: lone, metadata: { conversationKey: 'k' } }),
      await alice.post(B, { projectId: 'p', providerId: ids.openai, selectedModel: 'echo', metadata: { conversationKey: lone } }),
      await alice.post(B, { projectId: 'p', providerId: ids.openai, selectedModel: 'echo', tags: [lone] }),
      await alice.post('/v1/chat/completions', { model: 'local-openai/echo', messages: [{ role: 'user', content: 'x' }], metadata: { conversation_key: lone } }),
      await alice.post('/v1/conversations', { metadata: { conversationKey: lone } }),
      // a provider without `models` answers for any model: its name is the new session's selectedModel
      await alice.post('/v1/chat/completions', { model: `openai-any/echo${lone}`, messages: [{ role: 'user', content: 'x' }] }, { headers: { 'x-conversation-key': 'k-model' } }),
      await alice.post('/v1/responses', { model: `openai-any/echo${lone}`, input: 'x' }),
    ];
    for (const r of refused) assert.equal(r.status, 400, r.text);
    assert.match(refused[0].body.message, /name must be well-formed Unicode/);
    assert.match(refused[3].body.error.message, /X-Conversation-Key must be well-formed Unicode/);
    assert.deepEqual((await Promise.all(others)).map((r) => r.status), Array(10).fill(201));
    // a message may hold one (a delta may end in half a pair): the name the door makes of it has U+FFFD there
    const r = await alice.post('/v1/chat/completions', { model: 'local-openai/echo', messages: [{ role: 'user', content: lone }] }, { headers: { 'x-conversation-key': 'k-lone' } });
    assert.equal(r.status, 200, r.text);
    const sid = r.headers['x-session-id'];
    assert.equal((await alice.get(`${B}/${sid}`)).body.data.name, 'x\ufffdy');
    assert.equal((await turnsOf(sid))[0].content, lone);
    const again = await alice.post('/v1/chat/completions', { model: 'local-openai/echo', messages: [{ role: 'user', content: 'again' }] }, { headers: { 'x-conversation-key': 'k-lone' } });
    assert.equal(again.headers['x-session-id'], sid, 'found again by its key');
  });

  test('[D-door-12] a provider failure after the stream started is an error frame, and no [DONE]', async () => {
    const r = await rawCompletion({ model: 'ollama/tokens:5+error-after:2', messages: [{ role: 'user', content: 'x' }], stream: true });
    const frames = framesOf(r.text);
    assert.notEqual(frames.at(-1), '[DONE]');
    assert.equal(frames.at(-1).error.type, 'api_error');
    assert.match(frames.at(-1).error.message, /Provider "Local Ollama"/);
  });

  test("[D-door-13] CORS_ORIGIN covers /v1: its preflight allows the door's headers", async () => {
    const origin = 'https://app.example';
    const s = await startServer({ providers: [{ _id: ids.openai, name: 'Local OpenAI', type: 'openai', baseUrl: `${provider.url}/v1` }], env: { CORS_ORIGIN: origin } });
    try {
      const pre = await s.request('OPTIONS', '/v1/chat/completions', { headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type, x-stainless-os, x-stainless-retry-count, idempotency-key, x-session-id' } });
      assert.equal(pre.status, 204);
      const allowed = pre.headers['access-control-allow-headers'].toLowerCase().split(/,\s*/);
      for (const h of ['authorization', 'content-type', 'x-stainless-os', 'x-stainless-retry-count', 'idempotency-key', 'x-session-id', 'x-openwebui-chat-id']) assert.ok(allowed.includes(h), `${h} in ${allowed}`);
      const r = await s.as('alice').post('/v1/chat/completions', { model: 'local-openai/echo', messages: [{ role: 'user', content: 'x' }] }, { headers: { origin } });
      const exposed = r.headers['access-control-expose-headers'].toLowerCase();
      for (const h of ['x-session-id', 'x-turn-id', 'x-request-id']) assert.ok(exposed.includes(h), `${h} exposed`);
    } finally {
      await s.stop();
    }
  });
});
