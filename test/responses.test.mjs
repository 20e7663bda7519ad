// OpenAI's stateful API over sessions and turns (docs/TEAM-DECISIONS.md, "Responses and
// conversations"; docs/DECISIONS.md, "Responses and conversations"), driven by the real clients:
// the `openai` SDK (responses.create, its strict responses.stream accumulator, retrieve,
// inputItems, conversations) and Vercel's @ai-sdk/openai, which calls Responses by default, with
// the local provider of test/provider/ behind the server on all three protocols. Every response is
// a turn the native API shows. Run on every engine.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, jsonSchema, stepCountIs, streamText, tool } from 'ai';
import OpenAI from 'openai';
import { metric, waitFor } from './api-kit.mjs';
import { startServer } from './helpers.mjs';
import { startProvider } from './provider/server.mjs';

const B = '/api/v1/chat-sessions';
const ids = { openai: '6f0000000000000000000001', anthropic: '6f0000000000000000000002', ollama: '6f0000000000000000000003' };
const PROTOCOLS = ['openai', 'anthropic', 'ollama'];
const slug = { openai: 'local-openai', anthropic: 'local-claude', ollama: 'local-ollama' };
const WEATHER = { type: 'function', name: 'get_weather', description: 'The weather in a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }, strict: false };

let provider;
let server;
let alice;
const client = (token = alice.token) => new OpenAI({ baseURL: `${server.url}/v1`, apiKey: token, maxRetries: 0 });
const turnId = (respId) => respId.slice('resp_'.length);

before(async () => {
  provider = await startProvider();
  server = await startServer({
    providers: [
      { _id: ids.openai, name: 'Local OpenAI', type: 'openai', baseUrl: `${provider.url}/v1`, apiKey: 'sk-resp-0123456789' },
      { _id: ids.anthropic, name: 'Local Claude', type: 'anthropic', baseUrl: provider.url, apiKey: 'sk-resp-0123456789' },
      { _id: ids.ollama, name: 'Local Ollama', type: 'ollama', baseUrl: provider.url },
    ],
  });
  alice = server.as('alice');
});
after(async () => {
  await server?.stop();
  await provider?.close();
});

/** The session a response's turn is in, and its path (the native API's view). */
async function nativeOf(respId) {
  const r = await alice.get(`${B}?limit=1000`);
  for (const s of r.body.data) {
    const t = await alice.get(`${B}/${s._id}/turns/${turnId(respId)}`);
    if (t.status === 200) return { session: s, turn: t.body.data, turns: (await alice.get(`${B}/${s._id}/turns`)).body.data };
  }
  return undefined;
}

describe("OpenAI's stateful API: Responses and conversations", () => {
  test('[D-responses-1] "a response is a reply turn": responses.create waits, retrieve reads it back, the native API shows it', async () => {
    const c = client();
    const r = await c.responses.create({ model: 'local-openai/echo', input: 'Hello responses', instructions: 'Be kind.', metadata: { run: 'one' } });
    assert.match(r.id, /^resp_[0-9a-f]{24}$/);
    assert.deepEqual([r.object, r.status, r.model, r.output_text, r.previous_response_id, r.instructions], ['response', 'completed', 'local-openai/echo', 'Hello responses', null, 'Be kind.']);
    assert.deepEqual(r.metadata, { run: 'one' });
    assert.deepEqual(r.output.map((o) => [o.type, o.id, o.role]), [['message', `msg_${turnId(r.id)}`, 'assistant']]);
    assert.ok(r.usage.input_tokens > 0 && r.usage.total_tokens === r.usage.input_tokens + r.usage.output_tokens);
    assert.equal(typeof r.usage.input_tokens_details.cached_tokens, 'number');
    assert.equal(typeof r.usage.output_tokens_details.reasoning_tokens, 'number');
    assert.deepEqual(await c.responses.retrieve(r.id), r);
    const native = await nativeOf(r.id);
    assert.deepEqual(native.turns.map((t) => [t.role, t.content]), [['user', 'Hello responses'], ['assistant', 'Hello responses']]);
    assert.equal(provider.requests.filter((q) => q.protocol === 'openai').at(-1).system, 'Be kind.', 'instructions are the system message of this response');
  });

  test('[D-responses-2] previous_response_id continues under that reply; a second response to the same parent is a branch', async () => {
    const c = client();
    const first = await c.responses.create({ model: 'local-openai/echo', input: 'root question' });
    const second = await c.responses.create({ model: 'local-openai/echo', input: 'follow-up', previous_response_id: first.id });
    assert.equal(second.previous_response_id, first.id);
    const sent = provider.requests.filter((q) => q.protocol === 'openai').at(-1).body.messages;
    assert.deepEqual(sent.map((m) => [m.role, m.content]), [['user', 'root question'], ['assistant', 'root question'], ['user', 'follow-up']], 'the model is sent the path');
    const sibling = await c.responses.create({ model: 'local-openai/echo', input: 'another follow-up', previous_response_id: first.id });
    const { turns } = await nativeOf(sibling.id);
    const byId = new Map(turns.map((t) => [t._id, t]));
    assert.equal(byId.get(byId.get(turnId(sibling.id)).parentId).parentId, turnId(first.id), 'the sibling\'s input goes under the first response');
    assert.equal(byId.get(byId.get(turnId(second.id)).parentId).parentId, turnId(first.id));
    assert.equal(turns.length, 6, 'one session: both branches');
    const items = await c.responses.inputItems.list(second.id);
    assert.deepEqual(items.data.map((i) => [i.type, i.role, i.content[0].text]), [['message', 'user', 'follow-up']]);
    await assert.rejects(c.responses.create({ model: 'local-openai/echo', input: 'x', previous_response_id: 'resp_ffffffffffffffffffffffff' }), (e) => e instanceof OpenAI.BadRequestError && e.param === 'previous_response_id');
  });

  test('[D-responses-3] the strict stream accumulator takes every event: reasoning streams as a `reasoning` item', async () => {
    const s = client().responses.stream({ model: 'local-openai/reasoning:3+say:Streamed%20words%20here.', input: 'stream please' });
    const types = [];
    let seq = -1;
    for await (const e of s) {
      types.push(e.type);
      assert.equal(e.sequence_number, seq + 1, 'sequence numbers go up by one');
      seq = e.sequence_number;
    }
    const final = await s.finalResponse();
    assert.deepEqual(final.output.map((o) => o.type), ['reasoning', 'message']);
    assert.equal(final.output_text, 'Streamed words here.');
    assert.equal(final.output[0].content[0].text, 'Let me think');
    assert.deepEqual(types.slice(0, 2), ['response.created', 'response.in_progress']);
    assert.equal(types.at(-1), 'response.completed');
    for (const t of ['response.output_item.added', 'response.content_part.added', 'response.reasoning_text.delta', 'response.output_text.delta', 'response.output_text.done', 'response.content_part.done', 'response.output_item.done']) assert.ok(types.includes(t), t);
  });

  for (const type of PROTOCOLS) {
    test(`[D-responses-4] function calls are fc_<turn id>_<n> items and their output answers them (${type})`, async () => {
      const c = client();
      const model = `${slug[type]}/call:get_weather+n:resp-${type}`;
      const s = c.responses.stream({ model, input: `weather for ${type}?`, tools: [WEATHER] });
      for await (const e of s) void e;
      const called = await s.finalResponse();
      const fc = called.output.find((o) => o.type === 'function_call');
      assert.deepEqual([fc.name, JSON.parse(fc.arguments), fc.status], ['get_weather', { city: 'Paris' }, 'completed']);
      assert.match(fc.id, new RegExp(`^fc_${turnId(called.id)}_0$`));
      const answered = await c.responses.create({ model, previous_response_id: called.id, input: [{ type: 'function_call_output', call_id: fc.call_id, output: '{"tempC":21}' }], tools: [WEATHER] });
      assert.equal(answered.output_text, 'tool said: {"tempC":21}', 'the provider got the result paired with its call');
      const { turns } = await nativeOf(answered.id);
      assert.deepEqual(turns.map((t) => t.role), ['user', 'assistant', 'tool', 'assistant']);
    });
  }

  test('[D-responses-5] with `store: false` nothing is recorded: answered and counted; it may continue a stored response', async () => {
    const c = client();
    const before = (await alice.get(B)).body.data.length;
    const counted = await metric(server, 'chat_session_api_replies_total\\{status="complete"\\}');
    const r = await c.responses.create({ model: 'local-openai/echo', input: 'not kept', store: false, instructions: 'Be brief.', metadata: { run: 'off' } });
    assert.equal(r.output_text, 'not kept');
    assert.deepEqual([r.store, r.instructions, r.metadata], [false, 'Be brief.', { run: 'off' }], 'the response says it is not stored');
    await assert.rejects(c.responses.retrieve(r.id), (e) => e instanceof OpenAI.NotFoundError);
    const kept = await c.responses.create({ model: 'local-openai/echo', input: 'kept' });
    const off = await c.responses.create({ model: 'local-openai/echo', input: 'off the record', previous_response_id: kept.id, store: false });
    assert.equal(off.output_text, 'off the record');
    assert.deepEqual(provider.requests.filter((q) => q.protocol === 'openai').at(-1).body.messages.map((m) => m.content), ['kept', 'kept', 'off the record']);
    assert.equal((await alice.get(B)).body.data.length, before + 1, 'only the stored one made a session');
    assert.equal((await nativeOf(kept.id)).turns.length, 2);
    assert.equal(await metric(server, 'chat_session_api_replies_total\\{status="complete"\\}'), counted + 3);
  });

  test('[D-responses-6] [D-sec-2] a background response answers at once in_progress; GET follows it; cancel stops it', async () => {
    const c = client();
    const bg = await c.responses.create({ model: 'local-ollama/tokens:400@40+n:bg', input: 'a long one', background: true });
    assert.deepEqual([bg.status, bg.background], ['in_progress', true]);
    await waitFor(async () => (await c.responses.retrieve(bg.id)).output_text.length > 0, 'some text to come');
    const cancelled = await c.responses.cancel(bg.id);
    assert.equal(cancelled.status, 'cancelled');
    assert.ok(cancelled.output.find((o) => o.type === 'message').content[0].text.length > 0, 'with what it said');
    assert.equal((await c.responses.retrieve(bg.id)).status, 'cancelled');
    await assert.rejects(c.responses.cancel(bg.id), (e) => e.status === 409, 'a response not in progress');
    // one not stored could never be read back nor cancelled: refused, nothing asked of the provider
    const asked = provider.requests.length;
    await assert.rejects(c.responses.create({ model: 'local-ollama/tokens:400@40+n:bg3', input: 'x', background: true, store: false }), (e) => e instanceof OpenAI.BadRequestError && e.param === 'background');
    assert.equal(provider.requests.length, asked);
    const done = await c.responses.create({ model: 'local-ollama/say:quick+n:bg2', input: 'quick', background: true });
    await waitFor(async () => (await c.responses.retrieve(done.id)).status === 'completed', 'the background response to complete');
    assert.equal((await c.responses.retrieve(done.id)).output_text, 'quick');
  });

  test('[D-responses-7] "a conversation is a session" (its items list is the session\'s current path): create, respond, list', async () => {
    const c = client();
    const conv = await c.conversations.create({ items: [{ type: 'message', role: 'user', content: 'first words' }], metadata: { topic: 'tests' } });
    assert.match(conv.id, /^conv_[0-9a-f]{24}$/);
    assert.deepEqual([conv.object, conv.metadata], ['conversation', { topic: 'tests' }]);
    const r = await c.responses.create({ model: 'local-openai/echo', input: 'in the conversation', conversation: conv.id });
    assert.deepEqual(r.conversation, { id: conv.id });
    const later = await c.responses.create({ model: 'local-openai/echo', input: 'at its head', conversation: conv.id });
    const items = await c.conversations.items.list(conv.id, { order: 'asc' });
    assert.deepEqual(items.data.map((i) => [i.type, i.role, i.content[0].text]), [
      ['message', 'user', 'first words'],
      ['message', 'user', 'in the conversation'],
      ['message', 'assistant', 'in the conversation'],
      ['message', 'user', 'at its head'],
      ['message', 'assistant', 'at its head'],
    ]);
    const page = await c.conversations.items.list(conv.id, { limit: 2 });
    assert.deepEqual(page.data.map((i) => i.id), [`msg_${turnId(later.id)}`, items.data[3].id], 'newest first by default');
    assert.equal(page.has_more, true);
    const next = await c.conversations.items.list(conv.id, { limit: 2, after: page.last_id });
    assert.deepEqual(next.data.map((i) => i.id), [items.data[2].id, items.data[1].id]);
    const added = await c.conversations.items.create(conv.id, { items: [{ type: 'message', role: 'user', content: 'added by hand' }] });
    assert.equal(added.data[0].content[0].text, 'added by hand');
    assert.equal((await c.conversations.items.retrieve(added.data[0].id, { conversation_id: conv.id })).id, added.data[0].id);
    assert.deepEqual((await c.conversations.update(conv.id, { metadata: { topic: 'renamed' } })).metadata, { topic: 'renamed' });
    const sid = conv.id.slice('conv_'.length);
    assert.equal((await alice.get(`${B}/${sid}`)).body.data.metadata.topic, 'renamed', 'the session\'s metadata');
    const gone = await c.conversations.delete(conv.id);
    assert.deepEqual([gone.id, gone.deleted], [conv.id, true]);
    assert.equal((await alice.get(`${B}/${sid}`)).status, 404);
    await assert.rejects(c.conversations.retrieve(conv.id), (e) => e instanceof OpenAI.NotFoundError);
    // items are a list: an empty one begins an empty conversation; a string is no item
    const empty = await c.conversations.create({ items: [] });
    assert.deepEqual((await c.conversations.items.list(empty.id)).data, []);
    await assert.rejects(c.conversations.create({ items: 'x' }), (e) => e instanceof OpenAI.BadRequestError && e.param === 'items');
    await assert.rejects(c.conversations.items.create(empty.id, { items: 'x' }), (e) => e instanceof OpenAI.BadRequestError && e.param === 'items');
  });

  test('[D-responses-7] a conversation whose items are refused (a quota) leaves no session behind, and no quota used', async () => {
    const s = await startServer({ providers: [{ _id: ids.openai, name: 'Local OpenAI', type: 'openai', baseUrl: `${provider.url}/v1` }], env: { QUOTA_TURNS: '3', QUOTA_SESSIONS: '2' } });
    try {
      const bob = s.as('bob');
      const four = [1, 2, 3, 4].map((n) => ({ type: 'message', role: 'user', content: `m${n}` }));
      for (let i = 0; i < 3; i++) assert.equal((await bob.post('/v1/conversations', { items: four })).status, 429);
      assert.deepEqual((await bob.get(B)).body.data, [], 'no session left by the refused ones');
      assert.equal((await bob.get('/api/v1/usage')).body.data.sessions, 0);
      assert.equal((await bob.post('/v1/conversations', { items: four.slice(0, 3) })).status, 200, 'the quota of sessions is whole');
    } finally {
      await s.stop();
    }
  });

  test("[D-sec-3] background responses count in their user's share of replies (MAX_REQUESTS_PER_USER): past it 429", async () => {
    const s = await startServer({ providers: [{ _id: ids.openai, name: 'Local OpenAI', type: 'openai', baseUrl: `${provider.url}/v1` }], env: { MAX_REQUESTS_PER_USER: '3' } });
    try {
      const bob = s.as('bob');
      const slow = { model: 'local-openai/tokens:100000@2', input: 'go on', background: true };
      const held = [];
      for (let i = 0; i < 3; i++) {
        const r = await bob.post('/v1/responses', slow);
        assert.equal(r.status, 200, r.text);
        held.push(r.body.id);
      }
      // each answered at once: no request of bob's is in flight, yet a fourth reply is past his share
      const over = await bob.post('/v1/responses', slow);
      assert.equal(over.status, 429, over.text);
      assert.equal(over.headers['retry-after'], '5');
      assert.match(over.body.error.message, /Too many replies in progress for one user/);
      assert.equal((await bob.post('/v1/chat/completions', { model: 'local-openai/echo', messages: [{ role: 'user', content: 'x' }] })).status, 429);
      assert.deepEqual((await bob.get(B)).body.data.length, 3, 'no session left by the refused ones');
      // another user is not refused; bob is again once one of his ends
      assert.equal((await s.as('alice').post('/v1/chat/completions', { model: 'local-openai/echo', messages: [{ role: 'user', content: 'x' }] })).status, 200);
      assert.equal((await bob.post(`/v1/responses/${held[0]}/cancel`, {})).status, 200);
      assert.equal((await bob.post('/v1/chat/completions', { model: 'local-openai/echo', messages: [{ role: 'user', content: 'x' }] })).status, 200);
      for (const id of held.slice(1)) await bob.post(`/v1/responses/${id}/cancel`, {});
    } finally {
      await s.stop();
    }
  });

  test('[D-door-17] a response into a conversation whose response is going waits for its end, then goes on from it', async () => {
    const c = client();
    const conv = await c.conversations.create({});
    provider.hold();
    try {
      const a = c.responses.create({ model: 'local-openai/hold-after:1+tokens:3', input: 'first at once', conversation: conv.id });
      await waitFor(() => provider.held === 1, 'the first response held by its provider');
      const inFlight = await metric(server, 'chat_session_api_requests_in_flight');
      const b = c.responses.create({ model: 'local-openai/echo', input: 'second at once', conversation: conv.id });
      await waitFor(async () => (await metric(server, 'chat_session_api_requests_in_flight')) > inFlight, 'the second request in');
      provider.release();
      const [ra, rb] = await Promise.all([a, b]);
      assert.deepEqual([ra.status, rb.status], ['completed', 'completed']);
      const items = await c.conversations.items.list(conv.id, { order: 'asc' });
      assert.deepEqual(items.data.map((i) => i.content[0].text), ['first at once', 'the quick brown', 'second at once', 'second at once'], 'the second goes on at the head the first left');
    } finally {
      provider.release();
    }
  });

  test('[D-responses-8] "Deleting a response or an item deletes that turn and what grew under it"', async () => {
    const c = client();
    const a = await c.responses.create({ model: 'local-openai/echo', input: 'one' });
    const b = await c.responses.create({ model: 'local-openai/echo', input: 'two', previous_response_id: a.id });
    const deleted = await c.responses.delete(a.id);
    void deleted;
    await assert.rejects(c.responses.retrieve(b.id), (e) => e instanceof OpenAI.NotFoundError, 'what grew under it is gone too');
    const conv = await c.conversations.create({ items: [{ type: 'message', role: 'user', content: 'keep me' }, { type: 'message', role: 'user', content: 'drop me' }] });
    await c.responses.create({ model: 'local-openai/echo', input: 'under the dropped', conversation: conv.id });
    const items = await c.conversations.items.list(conv.id, { order: 'asc' });
    await c.conversations.items.delete(items.data[1].id, { conversation_id: conv.id });
    const left = await c.conversations.items.list(conv.id, { order: 'asc' });
    assert.deepEqual(left.data.map((i) => i.content[0].text), ['keep me']);
  });

  test('[D-responses-3] a response cut by max_output_tokens ends response.incomplete; a provider failure response.failed', async () => {
    const c = client();
    const cut = c.responses.stream({ model: 'local-openai/say:a+b+c+finish:length', input: 'x', max_output_tokens: 3 });
    const types = [];
    for await (const e of cut) types.push(e.type);
    assert.equal(types.at(-1), 'response.incomplete');
    const got = await c.responses.retrieve((await cut.finalResponse()).id);
    assert.deepEqual([got.status, got.incomplete_details, got.max_output_tokens], ['incomplete', { reason: 'max_output_tokens' }, 3]);
    assert.deepEqual(got.output.map((i) => [i.type, i.status]), [['message', 'incomplete']], 'its message is incomplete too');
    assert.equal(provider.requests.filter((q) => q.protocol === 'openai').at(-1).body.max_tokens, 3, 'passed on as the protocol\'s max tokens');
    const failed = await c.responses.create({ model: 'local-openai/tokens:3+error-after:1', input: 'x' });
    assert.deepEqual([failed.status, failed.error.code], ['failed', 'server_error']);
    assert.match(failed.error.message, /Provider "Local OpenAI"/);
  });

  test('[D-responses-9] "Ids are the caller\'s own": another user\'s response or conversation is 404', async () => {
    const mine = await client().responses.create({ model: 'local-openai/echo', input: 'private' });
    const conv = await client().conversations.create({});
    const bob = client(server.as('bob').token);
    await assert.rejects(bob.responses.retrieve(mine.id), (e) => e instanceof OpenAI.NotFoundError);
    await assert.rejects(bob.responses.create({ model: 'local-openai/echo', input: 'x', previous_response_id: mine.id }), (e) => e.status === 400);
    await assert.rejects(bob.conversations.retrieve(conv.id), (e) => e instanceof OpenAI.NotFoundError);
    await assert.rejects(bob.responses.create({ model: 'local-openai/echo', input: 'x', conversation: conv.id }), (e) => e instanceof OpenAI.NotFoundError);
    await assert.rejects(client().responses.create({ model: 'local-openai/echo', input: 'x', conversation: conv.id, previous_response_id: mine.id }), (e) => e instanceof OpenAI.BadRequestError);
  });

  test('[D-responses-10] @ai-sdk/openai generateText and streamText, a tool loop (input items may reference earlier items)', async () => {
    const ai = createOpenAI({ baseURL: `${server.url}/v1`, apiKey: alice.token });
    const g = await generateText({ model: ai.responses('local-openai/echo'), prompt: 'ai sdk hello' });
    assert.equal(g.text, 'ai sdk hello');
    const tools = { get_weather: tool({ description: 'w', inputSchema: jsonSchema({ type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }), execute: async ({ city }) => ({ city, tempC: 21 }) }) };
    const loop = await generateText({ model: ai.responses('local-claude/claude-x'), prompt: 'Oslo', tools, stopWhen: stepCountIs(4) });
    assert.equal(loop.text, 'tool said: {"city":"Oslo","tempC":21}');
    assert.equal(loop.steps.length, 2);
    const s = streamText({ model: ai.responses('local-ollama/llama3'), prompt: 'streamed through the ai sdk' });
    let text = '';
    for await (const d of s.textStream) text += d;
    assert.equal(text, 'streamed through the ai sdk');
  });

  test('[D-responses-11] a turn\'s `usage.reasoningTokens` is recorded from OpenAI\'s completion_tokens_details', async () => {
    const r = await client().responses.create({ model: 'local-openai/reasoning:4+say:done', input: 'think first' });
    assert.equal(r.usage.output_tokens_details.reasoning_tokens, 4);
    const { turn } = await nativeOf(r.id);
    assert.equal(turn.usage.reasoningTokens, 4);
  });
  test("[D-house-5] a conversation's metadata is updated while items are added to it, never decided again to a 500", async () => {
    // the conversation key it keeps is read first; items added meanwhile move its version, not its metadata
    const conv = await alice.post('/v1/conversations', { metadata: { topic: 'busy' } });
    assert.equal(conv.status, 200, conv.text);
    let busy = true;
    const adder = async () => {
      while (busy) assert.equal((await alice.post(`/v1/conversations/${conv.body.id}/items`, { items: [{ type: 'message', role: 'user', content: 'meanwhile' }] })).status, 200);
    };
    const adders = Array.from({ length: 8 }, adder);
    const statuses = [];
    try {
      for (let i = 0; i < 40; i++) statuses.push((await alice.post(`/v1/conversations/${conv.body.id}`, { metadata: { topic: `topic ${i}` } })).status);
    } finally {
      busy = false;
      await Promise.all(adders);
    }
    assert.deepEqual(statuses, statuses.map(() => 200));
    assert.equal((await alice.get(`/v1/conversations/${conv.body.id}`)).body.metadata.topic, 'topic 39');
  });
});
