// Replies from the model (docs/TEAM-DECISIONS.md, "Replies from the model"), on the real server
// and the local provider of test/provider/, which speaks each protocol as its documentation
// shows it. Each test names the provider's behaviour by the model it asks for (see SCENARIOS in
// test/provider/server.mjs). Run on every engine.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { connect } from 'node:net';
import { metric, waitFor } from './api-kit.mjs';
import { newSession, removeDir, runCli, startServer, STORE, tempDir } from './helpers.mjs';
import { startProvider } from './provider/server.mjs';
import { openEvents } from './sse.mjs';

const B = '/api/v1/chat-sessions';
const KEY = 'sk-test-secret-key-0123456789abcdef';
const ids = { openai: '6f0000000000000000000001', anthropic: '6f0000000000000000000002', ollama: '6f0000000000000000000003', listing: '6f0000000000000000000004', picky: '6f0000000000000000000005', crowded: '6f0000000000000000000006' };
const CROWDED = Array.from({ length: 25 }, (_, i) => `model-${i + 1}`);

let provider;
let server;
let alice;

function providersFor(url) {
  return [
    { _id: ids.openai, name: 'Local OpenAI', type: 'openai', baseUrl: `${url}/v1`, apiKey: KEY },
    { _id: ids.anthropic, name: 'Local Claude', type: 'anthropic', baseUrl: url, apiKey: KEY },
    { _id: ids.ollama, name: 'Local Ollama', type: 'ollama', baseUrl: url },
    { _id: ids.listing, name: 'A listing only', type: 'azure-something', baseUrl: url },
    { _id: ids.picky, name: 'Picky', type: 'openai', baseUrl: `${url}/v1`, models: ['echo'] },
    { _id: ids.crowded, name: 'Crowded', type: 'openai', baseUrl: `${url}/v1`, models: CROWDED },
  ];
}

before(async () => {
  provider = await startProvider();
  server = await startServer({ providers: providersFor(provider.url), env: { PROVIDER_IDLE_TIMEOUT: '1s' } });
  alice = server.as('alice');
});
after(async () => {
  await server?.stop();
  await provider?.close();
});

/** A session of alice's on `type`'s provider, asking `model` by default. */
async function session(type, model = 'echo', over = {}) {
  const r = await alice.post(B, newSession({ providerId: ids[type], selectedModel: model, ...over }));
  assert.equal(r.status, 201, r.text);
  return r.body.data;
}

const turn = async (sid, tid, who = alice) => (await who.get(`${B}/${sid}/turns/${tid}`)).body.data;
const textOf = (content) => (typeof content === 'string' ? content : content.filter((p) => p.type === 'text').map((p) => p.text).join(''));

describe('Replies from the model', () => {
  for (const type of ['openai', 'anthropic', 'ollama']) {
    test(`"records the user turn", asks the provider, records the reply under it: ${type}, 201 once recorded`, async () => {
      const s = await session(type, 'say:Hello%20there%2C%20friend.');
      const r = await alice.post(`${B}/${s._id}/messages`, { content: 'Say hello.' });
      assert.equal(r.status, 201, r.text);
      const { turn: user, reply } = r.body.data;
      assert.deepEqual([user.role, user.content, user.parentId, user.status], ['user', 'Say hello.', null, 'complete']);
      assert.deepEqual([reply.role, reply.content, reply.parentId, reply.model, reply.status], ['assistant', 'Hello there, friend.', user._id, 'say:Hello%20there%2C%20friend.', 'complete']);
      assert.equal(typeof reply.usage.inputTokens, 'number');
      assert.equal(typeof reply.usage.outputTokens, 'number');
      const listed = (await alice.get(`${B}/${s._id}/turns`)).body.data;
      assert.deepEqual(listed, [user, reply], 'the turns as recorded');
      assert.equal((await alice.get(`${B}/${s._id}`)).body.data.headTurnId, reply._id, 'the reply is the head');
      const asked = provider.requests.filter((q) => q.protocol === type).at(-1);
      assert.equal(asked.model, 'say:Hello%20there%2C%20friend.');
    });
  }

  test('[D-replies-14] the model is sent the instructions and the path, without error turns or reasoning; options passed on', async () => {
    const s = await session('openai', 'echo', { instructions: 'Answer in French.' });
    await alice.post(`${B}/${s._id}/turns`, { role: 'user', content: 'an old question' });
    await alice.post(`${B}/${s._id}/turns`, { role: 'assistant', content: [{ type: 'reasoning', text: 'secret thoughts' }, { type: 'text', text: 'an old answer' }] });
    await alice.post(`${B}/${s._id}/turns`, { role: 'assistant', content: 'a failed try', status: 'error' });
    const r = await alice.post(`${B}/${s._id}/messages`, { content: 'a new question', options: { temperature: 0.2, maxTokens: 50, topP: 0.9, stop: 'END' } });
    assert.equal(r.status, 201, r.text);
    const q = provider.requests.filter((x) => x.protocol === 'openai').at(-1);
    assert.equal(q.system, 'Answer in French.');
    const sent = JSON.stringify(q.body.messages);
    assert.ok(!sent.includes('secret thoughts') && !sent.includes('a failed try'), sent);
    assert.ok(sent.includes('an old question') && sent.includes('an old answer') && sent.includes('a new question'), sent);
    assert.equal(q.body.temperature, 0.2);
    assert.equal(q.body.top_p, 0.9);
    assert.deepEqual(q.body.stop, ['END']);
    const none = await session('openai');
    await alice.post(`${B}/${none._id}/messages`, { content: 'no instructions' });
    assert.equal(provider.requests.filter((x) => x.protocol === 'openai').at(-1).system, undefined, 'no system message without instructions');
  });

  test("[D-replies-4] [D-replies-7] `Accept: text/event-stream`: the turns' events, deltas, the last turn.updated, then close", async () => {
    const s = await session('ollama', 'tokens:6');
    const follow = await openEvents(server.url, `${B}/${s._id}/events`, { token: alice.token });
    await follow.waitFor((e) => e.event === 'ready');
    const stream = await openEvents(server.url, `${B}/${s._id}/messages`, { token: alice.token, method: 'POST', json: { content: 'stream it' } });
    assert.equal(stream.status, 200, stream.text);
    await stream.finished;
    const kinds = stream.events.map((e) => e.event);
    assert.deepEqual(kinds, ['turn.created', 'turn.created', 'turn.delta', 'turn.delta', 'turn.delta', 'turn.delta', 'turn.delta', 'turn.delta', 'turn.updated']);
    const [user, begun] = [stream.events[0].data, stream.events[1].data];
    assert.deepEqual([user.role, user.content], ['user', 'stream it']);
    assert.deepEqual([begun.role, begun.status, begun.content], ['assistant', 'streaming', '']);
    const deltas = stream.events.filter((e) => e.event === 'turn.delta').map((e) => e.data);
    assert.equal(deltas.map((d) => d.text).join(''), stream.events.at(-1).data.content, 'the deltas make the recorded text');
    assert.deepEqual(deltas.map((d) => d.at), deltas.map((_, i) => deltas.slice(0, i).reduce((n, d) => n + d.text.length, 0)), 'each delta says where it goes');
    assert.equal(stream.events.at(-1).data.status, 'complete');
    // the same events, with the same ids, on the session's own stream
    await follow.waitFor((e) => e.event === 'turn.updated' && e.data._id === begun._id && e.data.status === 'complete');
    const theirs = new Map(follow.events.map((e) => [e.id, e.event]));
    for (const e of stream.events) assert.equal(theirs.get(e.id), e.event, `event ${e.id} is the session stream's ${e.event}`);
    await follow.close();
  });

  test("[D-replies-8] deleting the reply, its message or a turn above them ends the answer's stream with that event", async () => {
    for (const which of ['reply', 'message', 'ancestor']) {
      const s = await session('openai', `tokens:10+stall-after:3+n:${which}`);
      const first = (await alice.post(`${B}/${s._id}/turns`, { role: 'user', content: 'an earlier turn' })).body.data;
      const stream = await openEvents(server.url, `${B}/${s._id}/messages`, { token: alice.token, method: 'POST', json: { content: 'stream it' } });
      assert.equal(stream.status, 200, stream.text);
      await stream.until(() => stream.of('turn.delta').length === 3);
      const [user, reply] = stream.of('turn.created').map((e) => e.data);
      const gone = { reply, message: user, ancestor: first }[which];
      assert.equal((await alice.del(`${B}/${s._id}/turns/${gone._id}`)).status, 200);
      // a bound on a hang, not a timing: the stream closes as the deletion's event is told
      const closed = await Promise.race([stream.finished.then(() => true), new Promise((resolve) => setTimeout(resolve, 20_000, false))]);
      assert.ok(closed, `${which}: the stream closed`);
      assert.equal(stream.events.at(-1).event, 'turn.deleted', which);
      assert.ok(stream.events.at(-1).data.ids.includes(reply._id), which);
      assert.equal(stream.of('end').length, 0, `${which}: no end event`);
    }
  });

  test('"`background: true`: 202" at once with the reply still streaming; follow it by events or GET', async () => {
    const s = await session('openai', 'tokens:20@100');
    const r = await alice.post(`${B}/${s._id}/messages`, { content: 'in the background', background: true });
    assert.equal(r.status, 202, r.text);
    assert.equal(r.body.data.reply.status, 'streaming');
    assert.equal(r.body.data.reply.content, '');
    const done = await waitFor(async () => {
      const t = await turn(s._id, r.body.data.reply._id);
      return t.status === 'complete' ? t : undefined;
    }, 'the reply to end');
    assert.equal(textOf(done.content).split(' ').length, 20);
  });

  test("[D-live-5] a reply of 5,000 pieces replays from its first piece's Last-Event-ID, every piece once, in order", async () => {
    const N = 5_000;
    const s = await session('ollama', `tokens:${N}`);
    const live = await openEvents(server.url, `${B}/${s._id}/messages`, { token: alice.token, method: 'POST', json: { content: 'count' } });
    assert.equal(live.status, 200, live.text);
    await live.finished;
    const told = live.of('turn.delta');
    assert.equal(told.length, N);
    const back = await openEvents(server.url, `${B}/${s._id}/events`, { token: alice.token, headers: { 'last-event-id': told[0].id } });
    assert.equal(back.status, 200, back.text);
    await back.until(() => back.events.some((e) => e.event === 'ready'), 60_000, 'the replay to end with ready');
    await back.close();
    const replayed = back.of('turn.delta');
    assert.deepEqual(replayed.map((e) => [e.id, e.data.text]), told.slice(1).map((e) => [e.id, e.data.text]), 'every later piece once, in order');
    const ids = back.events.map((e) => Number(e.id));
    assert.ok(ids.every((id, i) => i === 0 || id >= ids[i - 1]), 'ids never go back');
    assert.equal(back.of('turn.updated').at(-1).data.status, 'complete');
  });

  test('"A client that goes away never stops a reply: the server finishes and records it"', async () => {
    const s = await session('anthropic', 'tokens:30@60');
    const stream = await openEvents(server.url, `${B}/${s._id}/messages`, { token: alice.token, method: 'POST', json: { content: 'then I leave' } });
    await stream.waitFor((e) => e.event === 'turn.delta');
    const replyId = stream.events[1].data._id;
    await stream.close();
    const done = await waitFor(async () => {
      const t = await turn(s._id, replyId);
      return t.status !== 'streaming' ? t : undefined;
    }, 'the reply to end without its client');
    assert.equal(done.status, 'complete');
    assert.equal(textOf(done.content).split(' ').length, 30);
    const asked = provider.requests.find((q) => q.model === 'tokens:30@60');
    assert.equal(asked.clientClosed, false, "the provider's request was not closed");
  });

  test("[D-replies-9] a cancel stops the provider's request, records the text interrupted and answers 200", async () => {
    const s = await session('ollama', 'stall-after:3');
    const r = await alice.post(`${B}/${s._id}/messages`, { content: 'go on and stall', background: true });
    const replyId = r.body.data.reply._id;
    // what the store has trails the text by a quarter of a second at most
    await waitFor(async () => textOf((await turn(s._id, replyId)).content).split(' ').length === 3, 'the three words before the stall to be recorded');
    const c = await alice.post(`${B}/${s._id}/turns/${replyId}/cancel`, {});
    assert.equal(c.status, 200, c.text);
    assert.equal(c.body.data.status, 'interrupted');
    assert.equal(textOf(c.body.data.content).split(' ').length, 3);
    assert.deepEqual(await turn(s._id, replyId), c.body.data, 'recorded before the answer');
    const asked = provider.requests.find((q) => q.model === 'stall-after:3' && q.body.messages.some((m) => m.content === 'go on and stall'));
    await asked.closed;
    assert.equal(asked.clientClosed, true, "the provider's request was closed");
    const again = await alice.post(`${B}/${s._id}/turns/${replyId}/cancel`, {});
    assert.deepEqual([again.status, again.body], [409, { success: false, message: 'Turn is not streaming' }]);
    const user = r.body.data.turn._id;
    assert.deepEqual([(await alice.post(`${B}/${s._id}/turns/${user}/cancel`, {})).status], [409]);
    assert.equal((await alice.post(`${B}/${s._id}/turns/0123456789abcdef01234567/cancel`, {})).status, 404);
  });

  test("[D-replies-11] a client's PUT that ends the streaming reply gets the waiting request 201 with the turn as left", async () => {
    const s = await session('openai', 'tokens:6+stall-after:3');
    const waiting = alice.post(`${B}/${s._id}/messages`, { content: 'go on' });
    let replyId;
    await waitFor(async () => {
      const reply = (await alice.get(`${B}/${s._id}/turns`)).body.data.find((t) => t.role === 'assistant');
      replyId = reply?._id;
      return reply !== undefined && textOf(reply.content).split(' ').length === 3;
    }, 'the three words before the stall to be recorded');
    const edited = await alice.put(`${B}/${s._id}/turns/${replyId}`, { status: 'complete' });
    assert.equal(edited.status, 200, edited.text);
    // the provider stays silent: the reply ends at the idle time, and finds its turn ended
    const r = await waiting;
    assert.equal(r.status, 201, r.text);
    assert.deepEqual(r.body.data.reply, edited.body.data, 'the turn as recorded');
    assert.deepEqual(await turn(s._id, replyId), edited.body.data);
  });

  test('"One reply at a time per session": a message or reply while one streams is 409, nothing recorded', async () => {
    const s = await session('openai', 'stall-after:1');
    const first = await alice.post(`${B}/${s._id}/messages`, { content: 'first', background: true });
    assert.equal(first.status, 202);
    const before = (await alice.get(`${B}/${s._id}/turns`)).body.data;
    for (const [path, body] of [['messages', { content: 'second' }], ['replies', {}]]) {
      const r = await alice.post(`${B}/${s._id}/${path}`, body);
      assert.deepEqual([r.status, r.body], [409, { success: false, message: 'A reply is already in progress' }], path);
    }
    assert.deepEqual((await alice.get(`${B}/${s._id}/turns`)).body.data, before, 'nothing recorded');
    await alice.post(`${B}/${s._id}/turns/${first.body.data.reply._id}/cancel`, {});
    // another session replies meanwhile: the rule is per session
    assert.equal((await alice.post(`${B}/${(await session('openai'))._id}/messages`, { content: 'elsewhere' })).status, 201);
  });

  test('"A turn posted (POST .../turns) under a turn that is still streaming" -> 409, nothing recorded; elsewhere allowed', async () => {
    // a reply that goes on making progress (the server's idle timeout is 1 s) for 100 s, until it is cancelled
    const s = await session('openai', 'tokens:2000@20');
    const root = (await alice.post(`${B}/${s._id}/turns`, { role: 'user', content: 'an earlier question' })).body.data;
    const first = await alice.post(`${B}/${s._id}/messages`, { content: 'first', background: true });
    assert.equal(first.status, 202);
    const { turn: user, reply } = first.body.data;
    const ids = async () => (await alice.get(`${B}/${s._id}/turns`)).body.data.map((t) => t._id);
    const before = await ids();
    for (const under of [{}, { parentId: reply._id }, { status: 'streaming', content: '' }]) {
      const r = await alice.post(`${B}/${s._id}/turns`, { role: 'user', content: 'typed meanwhile', ...under });
      assert.deepEqual([r.status, r.body], [409, { success: false, message: 'Turn is still streaming' }], JSON.stringify(under));
    }
    assert.deepEqual(await ids(), before, 'nothing recorded');
    assert.equal((await alice.get(`${B}/${s._id}`)).body.data.headTurnId, reply._id, 'the head is the reply still');
    // elsewhere in the tree turns are still allowed: under the user turn, under another, a new root
    for (const parentId of [user._id, root._id, null]) {
      const r = await alice.post(`${B}/${s._id}/turns`, { role: 'assistant', content: 'beside it', parentId });
      assert.equal(r.status, 201, r.text);
    }
    assert.equal((await alice.post(`${B}/${s._id}/turns/${reply._id}/cancel`, {})).status, 200);
    const after = await alice.post(`${B}/${s._id}/turns`, { role: 'user', content: 'once it ended', parentId: reply._id });
    assert.equal(after.status, 201, 'under the interrupted reply');
  });

  test('[D-replies-3] an unconfigured provider, a type that cannot reply or an unlisted model: 409, nothing recorded', async () => {
    const cases = [
      [{ providerId: '6f00000000000000000000ff', selectedModel: 'echo' }, /^Provider "6f00000000000000000000ff" is not configured/],
      [{ providerId: ids.listing, selectedModel: 'echo' }, /^Provider "A listing only" is of type "azure-something", which cannot reply/],
      [{ providerId: ids.picky, selectedModel: 'gpt-4o' }, /^Model "gpt-4o" is not one of provider "Picky"'s models: "echo"$/],
    ];
    for (const [over, message] of cases) {
      const s = (await alice.post(B, newSession(over))).body.data;
      const r = await alice.post(`${B}/${s._id}/messages`, { content: 'hello' });
      assert.equal(r.status, 409, r.text);
      assert.match(r.body.message, message);
      assert.deepEqual((await alice.get(`${B}/${s._id}/turns`)).body.data, [], 'nothing recorded');
    }
    const picky = (await alice.post(B, newSession({ providerId: ids.picky, selectedModel: 'gpt-4o' }))).body.data;
    assert.equal((await alice.post(`${B}/${picky._id}/messages`, { content: 'hello', model: 'echo' })).status, 201, 'a model the provider lists, asked by the message');
  });

  test('[D-papercuts-2] a model outside models is refused "naming the allowed ones": the first 20, then "and N more"', async () => {
    const s = await session('crowded', 'model-1');
    const r = await alice.post(`${B}/${s._id}/messages`, { content: 'hello', model: 'gpt-4o' });
    assert.equal(r.status, 409, r.text);
    const named = CROWDED.slice(0, 20).map((m) => `"${m}"`).join(', ');
    assert.equal(r.body.message, `Model "gpt-4o" is not one of provider "Crowded"'s models: ${named}, and 5 more`);
    assert.deepEqual((await alice.get(`${B}/${s._id}/turns`)).body.data, [], 'nothing recorded');
  });

  test('"a reply to an existing turn" (default the head): regenerating makes a sibling of the old reply', async () => {
    const s = await session('ollama', 'say:first');
    const m = (await alice.post(`${B}/${s._id}/messages`, { content: 'question' })).body.data;
    const again = await alice.post(`${B}/${s._id}/replies`, { parentId: m.turn._id, model: 'say:second' });
    assert.equal(again.status, 201, again.text);
    assert.equal(again.body.data.turn, null);
    const reply = again.body.data.reply;
    assert.deepEqual([reply.parentId, reply.content, reply.model], [m.turn._id, 'second', 'say:second']);
    const tree = (await alice.get(`${B}/${s._id}/turns`)).body.data;
    assert.deepEqual(tree.filter((t) => t.parentId === m.turn._id).map((t) => t.content), ['first', 'second'], 'siblings');
    const head = (await alice.post(`${B}/${s._id}/replies`, { model: 'say:third' })).body.data.reply;
    assert.equal(head.parentId, reply._id, 'default: a reply to the head');
    assert.equal((await alice.post(`${B}/${s._id}/replies`, { parentId: '0123456789abcdef01234567' })).body.message, 'parentId must be a turn of this session');
  });

  test('transient failures before the first piece are "tried again, at most twice", then the reply ends error', async () => {
    const s = await session('openai');
    const once = await alice.post(`${B}/${s._id}/messages`, { content: 'retry me', model: 'status:503+retry-after:0+times:1+n:a' });
    assert.equal(once.body.data.reply.status, 'complete', once.text);
    assert.equal(provider.requests.filter((q) => q.model === 'status:503+retry-after:0+times:1+n:a').length, 2);
    const always = await alice.post(`${B}/${s._id}/messages`, { content: 'never', model: 'status:500+retry-after:0+n:b' });
    const failed = always.body.data.reply;
    assert.equal(failed.status, 'error');
    assert.match(failed.error.message, /Local OpenAI/);
    assert.equal(provider.requests.filter((q) => q.model === 'status:500+retry-after:0+n:b').length, 3, 'tried three times in all');
  });

  test("a reply's error names the provider, never its key: in no answer, event, log line or export", async () => {
    const s = await session('openai');
    const follow = await openEvents(server.url, `${B}/${s._id}/events`, { token: alice.token });
    await follow.waitFor((e) => e.event === 'ready');
    const r = await alice.post(`${B}/${s._id}/messages`, { content: 'leak it', model: 'status:401+echo-key' });
    const reply = r.body.data.reply;
    assert.equal(reply.status, 'error');
    assert.match(reply.error.message, /Local OpenAI/);
    await follow.waitFor((e) => e.event === 'turn.updated' && e.data._id === reply._id);
    await follow.close();
    const exported = runCli(['export'], { env: { DATA_DIR: server.dataDir } });
    for (const [what, text] of [['answer', r.text], ['turn', JSON.stringify(await turn(s._id, reply._id))], ['events', follow.text], ['log', server.stdout + server.stderr], ['export', exported.stdout]]) {
      assert.ok(!text.includes(KEY), `${what} holds the key`);
    }
    assert.ok(provider.requests.some((q) => q.headers.authorization === `Bearer ${KEY}`), 'the key was sent to the provider');
  });

  test('"A provider that sends" nothing "for `PROVIDER_IDLE_TIMEOUT` (default `60s`) ends the reply with `error`"', async () => {
    const s = await session('anthropic', 'tokens:5+stall-after:2');
    const r = await alice.post(`${B}/${s._id}/messages`, { content: 'stall' });
    const reply = r.body.data.reply;
    assert.equal(reply.status, 'error', r.text);
    assert.match(reply.error.message, /Local Claude/);
    assert.equal(textOf(reply.content).split(' ').length, 2, 'what came before the stall is kept');
  });

  test('[D-providers-10] a provider that never ends its body keeps no socket for ever, on each protocol', async () => {
    for (const type of ['openai', 'anthropic', 'ollama']) {
      const model = `say:done%20here+linger+n:${type}`;
      const s = await session(type, model);
      const r = await alice.post(`${B}/${s._id}/messages`, { content: 'and then?' });
      assert.deepEqual([r.status, r.body.data.reply.status, r.body.data.reply.content], [201, 'complete', 'done here'], r.text);
      const asked = await provider.waitForRequest((q) => q.protocol === type && q.model === model);
      // a bound on a hang, not a timing: the idle time here is 1 s, and before the fix the close never came
      const closed = await Promise.race([asked.closed.then(() => true), new Promise((resolve) => setTimeout(resolve, 30_000, false))]);
      assert.ok(closed && asked.clientClosed, `${type}: the connection of a body that never ends is closed`);
    }
  });

  test('[D-providers-15] a last event without its line end still ends the reply complete with usage, on each protocol', async () => {
    for (const type of ['openai', 'anthropic', 'ollama']) {
      const s = await session(type, 'say:all%20of%20it+no-final-eol');
      const r = await alice.post(`${B}/${s._id}/messages`, { content: 'the end?' });
      const { reply } = r.body.data;
      assert.deepEqual([r.status, reply.status, reply.content, reply.error], [201, 'complete', 'all of it', undefined], `${type}: ${r.text}`);
      assert.equal(reply.usage.outputTokens, 3, type);
    }
  });

  test('reasoning text is "recorded as a `reasoning` part before the answer\'s `text` part" and told as its own deltas', async () => {
    for (const type of ['openai', 'anthropic', 'ollama']) {
      const s = await session(type, 'reasoning:3+tokens:2');
      const stream = await openEvents(server.url, `${B}/${s._id}/messages`, { token: alice.token, method: 'POST', json: { content: 'think first' } });
      await stream.finished;
      const final = stream.events.at(-1).data;
      assert.deepEqual(final.content.map((p) => p.type), ['reasoning', 'text'], type);
      assert.equal(final.content[1].text.split(' ').length, 2);
      const kinds = stream.events.filter((e) => e.event === 'turn.delta').map((e) => e.data.type ?? 'text');
      assert.ok(kinds.indexOf('text') > kinds.lastIndexOf('reasoning'), `${type}: reasoning first, then the answer`);
      const reasoning = stream.events.filter((e) => e.event === 'turn.delta' && e.data.type === 'reasoning').map((e) => e.data.text).join('');
      assert.equal(reasoning, final.content[0].text);
    }
  });

  test('"Scopes: sending needs `sessions:write`", the cancel too; another\'s session is 404 under ACCESS=owner', async () => {
    const s = await session('openai');
    const reader = server.as('alice', { scope: 'sessions:read' });
    assert.deepEqual([(await reader.post(`${B}/${s._id}/messages`, { content: 'hi' })).status, (await reader.post(`${B}/${s._id}/replies`, {})).status], [403, 403]);
    const owner = await startServer({ providers: providersFor(provider.url), env: { ACCESS: 'owner' } });
    try {
      const mine = (await owner.as('alice').post(B, newSession({ providerId: ids.openai, selectedModel: 'echo' }))).body.data;
      const bob = owner.as('bob');
      for (const r of [await bob.post(`${B}/${mine._id}/messages`, { content: 'not yours' }), await bob.post(`${B}/${mine._id}/replies`, {})]) {
        assert.deepEqual([r.status, r.body.message], [404, 'Chat session not found']);
      }
      assert.deepEqual((await owner.as('alice').get(`${B}/${mine._id}/turns`)).body.data, []);
    } finally {
      await owner.stop();
      removeDir(owner.dataDir);
    }
  });

  test("[D-finding-2] a reply's tokens and a client's turn usage count alike in /usage; a deleted turn takes its own", async () => {
    const tina = server.as('tina');
    const tokens = async () => {
      const u = (await tina.get('/api/v1/usage')).body.data;
      return [u.inputTokens, u.outputTokens, u.cachedTokens];
    };
    assert.deepEqual(await tokens(), [0, 0, 0]);
    const s = (await tina.post(B, newSession({ providerId: ids.openai, selectedModel: 'cached:3' }))).body.data;
    const r = await tina.post(`${B}/${s._id}/messages`, { content: 'count my tokens please' });
    assert.equal(r.status, 201, r.text);
    const usage = r.body.data.reply.usage;
    assert.ok(usage.inputTokens > 0 && usage.outputTokens > 0 && usage.cachedTokens === 3, JSON.stringify(usage));
    assert.deepEqual(await tokens(), [usage.inputTokens, usage.outputTokens, 3]);
    // a reply that reported none adds none
    const none = (await tina.post(B, newSession({ providerId: ids.openai, selectedModel: 'no-usage' }))).body.data;
    assert.equal((await tina.post(`${B}/${none._id}/messages`, { content: 'quiet' })).body.data.reply.usage, undefined);
    assert.deepEqual(await tokens(), [usage.inputTokens, usage.outputTokens, 3]);
    // the same usage recorded by a client: with the turn, then by an edit of another
    const mine = (await tina.post(B, newSession())).body.data;
    const posted = await tina.post(`${B}/${mine._id}/turns`, { role: 'assistant', content: 'by hand', usage });
    assert.equal(posted.status, 201, posted.text);
    assert.deepEqual(await tokens(), [2 * usage.inputTokens, 2 * usage.outputTokens, 6]);
    const plain = (await tina.post(`${B}/${mine._id}/turns`, { role: 'assistant', content: 'edited later', parentId: null })).body.data;
    assert.equal((await tina.put(`${B}/${mine._id}/turns/${plain._id}`, { usage: { inputTokens: 10, outputTokens: 1 } })).status, 200);
    assert.deepEqual(await tokens(), [2 * usage.inputTokens + 10, 2 * usage.outputTokens + 1, 6]);
    assert.equal((await tina.del(`${B}/${mine._id}/turns/${posted.body.data._id}`)).status, 200);
    assert.deepEqual(await tokens(), [usage.inputTokens + 10, usage.outputTokens + 1, 3]);
    assert.equal((await tina.del(`${B}/${s._id}`)).status, 200);
    assert.deepEqual(await tokens(), [10, 1, 0]);
  });

  test('[D-providers-6] token counts of 1e300, 1.5, -3 or 1e19 are not reported; the reply is recorded complete', async () => {
    const ursula = server.as('ursula');
    for (const type of ['openai', 'anthropic', 'ollama']) {
      for (const v of ['1e300', '1.5', '-3', '1e19']) {
        const s = (await ursula.post(B, newSession({ providerId: ids[type], selectedModel: `say:kept%20whole+counts:${v}` }))).body.data;
        const r = await ursula.post(`${B}/${s._id}/messages`, { content: 'count this' });
        assert.equal(r.status, 201, `${type} ${v}: ${r.text}`);
        const { reply } = r.body.data;
        // Anthropic's message_start also said output_tokens 1 and cache_read_input_tokens 0, sound counts that stay
        const usage = type === 'anthropic' ? { inputTokens: 0, outputTokens: 1, cachedTokens: 0 } : undefined;
        assert.deepEqual([reply.status, reply.content, reply.usage], ['complete', 'kept whole', usage], `${type} ${v}`);
        assert.deepEqual(await turn(s._id, reply._id, ursula), reply, `${type} ${v}: recorded as answered`);
      }
    }
    const u = (await ursula.get('/api/v1/usage')).body.data;
    assert.deepEqual([u.inputTokens, u.outputTokens, u.cachedTokens], [0, 4, 0]);
  });

  test('"`GET /api/v1/chat-sessions/:id/turns/:turnId` -> 200"; an unknown turn -> 404 `Turn not found`', async () => {
    const s = await session('openai');
    const t = (await alice.post(`${B}/${s._id}/turns`, { role: 'user', content: 'one turn' })).body.data;
    const r = await alice.get(`${B}/${s._id}/turns/${t._id}`);
    assert.deepEqual([r.status, r.body], [200, { success: true, data: t }]);
    const missing = await alice.get(`${B}/${s._id}/turns/0123456789abcdef01234567`);
    assert.deepEqual([missing.status, missing.body], [404, { success: false, message: 'Turn not found' }]);
    assert.equal((await alice.get(`${B}/0123456789abcdef01234567/turns/${t._id}`)).status, 404);
  });

  test('[D-sessions-5] a turn created streaming may have content "", any other status may not', async () => {
    const s = await session('openai');
    const r = await alice.post(`${B}/${s._id}/turns`, { role: 'assistant', content: '', status: 'streaming' });
    assert.equal(r.status, 201, r.text);
    assert.equal(r.body.data.content, '');
    const d = await alice.post(`${B}/${s._id}/turns/${r.body.data._id}/deltas`, { text: 'now words' });
    assert.equal(d.status, 200);
    assert.equal((await turn(s._id, r.body.data._id)).content, 'now words');
    for (const content of ['', '   ']) {
      assert.deepEqual((await alice.post(`${B}/${s._id}/turns`, { role: 'user', content })).body, { success: false, message: 'content is required' });
      assert.deepEqual((await alice.post(`${B}/${s._id}/messages`, { content })).body, { success: false, message: 'content is required' }, 'a message says something');
    }
  });

  test('"The system message is the session\'s `instructions`": kept, answered, removed by "" or null, at most 32 KiB', async () => {
    const s = await session('openai', 'echo', { instructions: 'Be terse.' });
    assert.equal(s.instructions, 'Be terse.');
    assert.equal((await alice.put(`${B}/${s._id}`, { instructions: 'Be kind.' })).body.data.instructions, 'Be kind.');
    assert.equal((await alice.put(`${B}/${s._id}`, { instructions: null })).body.data.instructions, undefined);
    const big = await alice.post(B, newSession({ instructions: 'é'.repeat(16 * 1024 + 1) }));
    assert.deepEqual([big.status, big.body.message], [400, 'instructions must be at most 32768 bytes of UTF-8']);
  });
});

describe('Bounds of replies', () => {
  test('"`REPLIES_MAX` replies in progress per instance"; one more gets 503 and nothing is recorded', async () => {
    const s = await startServer({ providers: providersFor(provider.url), env: { REPLIES_MAX: '1' } });
    try {
      const u = s.as('alice');
      const a = (await u.post(B, newSession({ providerId: ids.ollama, selectedModel: 'stall-after:1' }))).body.data;
      const b = (await u.post(B, newSession({ providerId: ids.ollama, selectedModel: 'echo' }))).body.data;
      const first = await u.post(`${B}/${a._id}/messages`, { content: 'hold the slot', background: true });
      assert.equal(first.status, 202);
      const r = await u.post(`${B}/${b._id}/messages`, { content: 'no room' });
      assert.deepEqual([r.status, r.body, r.headers['retry-after']], [503, { success: false, message: 'Too many replies in progress' }, '5']);
      assert.deepEqual((await u.get(`${B}/${b._id}/turns`)).body.data, []);
      await u.post(`${B}/${a._id}/turns/${first.body.data.reply._id}/cancel`, {});
      assert.equal((await u.post(`${B}/${b._id}/messages`, { content: 'room now' })).status, 201);
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('"A client that goes away never stops a reply": cut off as slow, the reply is recorded whole', async () => {
    const s = await startServer({ providers: providersFor(provider.url), env: { EVENTS_BUFFER: '64kb' } });
    const u = s.as('alice');
    // some 100,000 events of 150 bytes: well past what the kernel's buffers may hold (several MiB on loopback)
    const a = (await u.post(B, newSession({ providerId: ids.ollama, selectedModel: 'tokens:100000' }))).body.data;
    const sock = connect(s.port, '127.0.0.1');
    sock.on('error', () => undefined);
    try {
      await new Promise((r) => sock.once('connect', r));
      let got = '';
      sock.setEncoding('utf8');
      sock.on('data', (d) => (got += d));
      const body = JSON.stringify({ content: 'a long one' });
      sock.write(`POST ${B}/${a._id}/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${u.token}\r\nAccept: text/event-stream\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
      await waitFor(() => got.includes('event: turn.created'), 'the stream to begin');
      sock.pause();
      const reply = await waitFor(async () => {
        const turns = (await u.get(`${B}/${a._id}/turns`)).body.data;
        return turns.length === 2 && turns[1].status !== 'streaming' ? turns[1] : undefined;
      }, 'the reply to end', 180_000);
      assert.equal(reply.status, 'complete');
      assert.equal(textOf(reply.content).split(' ').length, 100000, 'recorded whole');
      assert.equal(await metric(s, 'chat_session_api_event_streams_ended_total{reason="slow"}'), 1, 'the stream was cut off as slow');
      sock.resume();
      await waitFor(() => got.endsWith('0\r\n\r\n'), 'the answer to end');
      assert.match(got, /event: end\ndata: \{"reason":"slow"\}\n\n\r\n0\r\n\r\n$/, 'the final event, then the end of the answer');
    } finally {
      sock.destroy();
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('[D-replies-6] quotas and RATE_LIMIT: a message past a quota is 403, a reply past QUOTA_BYTES ends error', async () => {
    const s = await startServer({ providers: providersFor(provider.url), env: { QUOTA_TURNS: '3', QUOTA_BYTES: '6kb' } });
    try {
      const u = s.as('alice');
      const a = (await u.post(B, newSession({ providerId: ids.ollama, selectedModel: 'echo' }))).body.data;
      assert.equal((await u.post(`${B}/${a._id}/messages`, { content: 'one' })).status, 201, 'two turns of three');
      const over = await u.post(`${B}/${a._id}/messages`, { content: 'two' });
      assert.deepEqual([over.status, over.body], [403, { success: false, message: 'Quota exceeded: turns (at most 3 per user)' }]);
      assert.equal((await u.get(`${B}/${a._id}/turns`)).body.data.length, 2, 'nothing recorded');
      // bytes: bob's reply of 3,000 words (some 16 KiB) passes 6 KiB on its way (slowly enough for its text
      // to be written as it comes: the end, a quarter of a second's text at most, is never refused)
      const bob = s.as('bob');
      const b = (await bob.post(B, newSession({ providerId: ids.ollama, selectedModel: 'tokens:3000@1500' }))).body.data;
      const r = await bob.post(`${B}/${b._id}/messages`, { content: 'a long one' });
      assert.equal(r.status, 201, r.text);
      assert.equal(r.body.data.reply.status, 'error');
      assert.match(r.body.data.reply.error.message, /^Quota exceeded: bytes/);
      assert.ok(textOf(r.body.data.reply.content).length > 0, 'what fitted is kept');
      assert.deepEqual(await turn(b._id, r.body.data.reply._id, bob), r.body.data.reply, 'recorded so');
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
    // the rate: one request a minute (a burst of one), spent on the session's create
    const limited = await startServer({ providers: providersFor(provider.url), env: { RATE_LIMIT: '1/m' } });
    try {
      const u = limited.as('alice');
      const a = (await u.post(B, newSession({ providerId: ids.ollama, selectedModel: 'echo' }))).body.data;
      const r = await u.post(`${B}/${a._id}/messages`, { content: 'too soon' });
      assert.deepEqual([r.status, r.body.message], [429, 'Too many requests']);
      assert.ok(Number(r.headers['retry-after']) > 0);
    } finally {
      await limited.stop();
      removeDir(limited.dataDir);
    }
  });

  test('[D-replies-7] with EVENTS=off an event-stream answer is 406 and nothing is recorded', async () => {
    const s = await startServer({ providers: providersFor(provider.url), env: { EVENTS: 'off' } });
    try {
      const u = s.as('alice');
      const a = (await u.post(B, newSession({ providerId: ids.ollama, selectedModel: 'echo' }))).body.data;
      const r = await s.request('POST', `${B}/${a._id}/messages`, { token: u.token, json: { content: 'stream?' }, headers: { accept: 'text/event-stream' } });
      assert.deepEqual([r.status, r.body.message], [406, 'Event streams are off (EVENTS=off): ask without Accept: text/event-stream']);
      assert.deepEqual((await u.get(`${B}/${a._id}/turns`)).body.data, []);
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('[D-hostile-7] a SIGKILL mid-reply keeps the text recorded so far, and "the next start marks the reply `interrupted`"', async () => {
    const dir = tempDir('csa-reply-crash-');
    // (PostgreSQL: a short INSTANCE_TIMEOUT; its default, 10 s, is the bench's)
    const env = STORE === 'postgres' ? { INSTANCE_TIMEOUT: '2s' } : {};
    const s = await startServer({ dataDir: dir, providers: providersFor(provider.url), env });
    try {
      const u = s.as('alice');
      const a = (await u.post(B, newSession({ providerId: ids.openai, selectedModel: 'stall-after:4' }))).body.data;
      const r = await u.post(`${B}/${a._id}/messages`, { content: 'then the power goes', background: true });
      const replyId = r.body.data.reply._id;
      await waitFor(async () => textOf((await u.get(`${B}/${a._id}/turns/${replyId}`)).body.data.content).split(' ').length === 4, 'the words before the stall to be recorded');
      await s.kill();
      const again = await startServer({ dataDir: dir, providers: providersFor(provider.url), env });
      try {
        if (STORE === 'postgres') await waitFor(async () => (await again.as('alice').get(`${B}/${a._id}/turns/${replyId}`)).body.data.status !== 'streaming', 'the reply of the instance gone to be interrupted');
        const t = (await again.as('alice').get(`${B}/${a._id}/turns/${replyId}`)).body.data;
        assert.equal(t.status, 'interrupted');
        assert.equal(textOf(t.content).split(' ').length, 4, 'what was committed is there');
        assert.equal((await again.as('alice').post(`${B}/${a._id}/messages`, { content: 'a new start', model: 'echo' })).status, 201, 'the session takes replies again');
      } finally {
        await again.stop();
      }
    } finally {
      await s.stop();
      removeDir(dir);
    }
  });
  test('[D-house-5] a message to a session that other writes keep busy is recorded, never decided again to a 500', async () => {
    // the reply's call is decided from the session as read; turns written meanwhile move its version, not the call
    const s = await session('openai');
    const root = (await alice.post(`${B}/${s._id}/turns`, { role: 'user', content: 'root' })).body.data;
    let busy = true;
    const writer = async () => {
      while (busy) assert.equal((await alice.post(`${B}/${s._id}/turns`, { role: 'user', content: 'meanwhile', parentId: root._id })).status, 201);
    };
    const writers = Array.from({ length: 8 }, writer);
    const statuses = [];
    try {
      for (let i = 0; i < 30; i++) statuses.push((await alice.post(`${B}/${s._id}/messages`, { content: `message ${i}`, parentId: root._id })).status);
    } finally {
      busy = false;
      await Promise.all(writers);
    }
    assert.deepEqual(statuses, statuses.map(() => 201));
  });
});
