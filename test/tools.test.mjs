// Tools in replies (docs/DECISIONS.md, "Tools in replies"; docs/TEAM-DECISIONS.md, "Tools and
// reasoning in replies"): the client's tools offered to the model in each protocol's form, the
// calls read from each protocol's stream and recorded as tool_call parts, stopReason, and the
// tool turn that answers them, on the real server and the local provider of test/provider/,
// which answers with tool calls as each API does and refuses a history whose calls and results
// do not pair. Run on every engine.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { newSession, removeDir, runCli, startServer, tempDir } from './helpers.mjs';
import { startProvider } from './provider/server.mjs';
import { openEvents } from './sse.mjs';

const B = '/api/v1/chat-sessions';
const ids = { openai: '6f0000000000000000000001', anthropic: '6f0000000000000000000002', ollama: '6f0000000000000000000003' };
const PROTOCOLS = ['openai', 'anthropic', 'ollama'];
const WEATHER = { name: 'get_weather', description: 'The weather in a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } };

let provider;
let server;
let alice;

before(async () => {
  provider = await startProvider();
  server = await startServer({
    providers: [
      { _id: ids.openai, name: 'Local OpenAI', type: 'openai', baseUrl: `${provider.url}/v1`, apiKey: 'sk-tools-0123456789' },
      { _id: ids.anthropic, name: 'Local Claude', type: 'anthropic', baseUrl: provider.url, apiKey: 'sk-tools-0123456789' },
      { _id: ids.ollama, name: 'Local Ollama', type: 'ollama', baseUrl: provider.url },
    ],
  });
  alice = server.as('alice');
});
after(async () => {
  await server?.stop();
  await provider?.close();
});

async function session(type, model) {
  const r = await alice.post(B, newSession({ providerId: ids[type], selectedModel: model }));
  assert.equal(r.status, 201, r.text);
  return r.body.data;
}

/** A message (or a tool message) and the reply it gets, waited for. */
async function send(sid, body) {
  const r = await alice.post(`${B}/${sid}/messages`, body);
  assert.equal(r.status, 201, r.text);
  return r.body.data;
}

const lastRequest = (model) => provider.requests.filter((q) => q.model === model).at(-1);
const calls = (content) => (typeof content === 'string' ? [] : content.filter((p) => p.type === 'tool_call'));
const texts = (content) => (typeof content === 'string' ? content : content.filter((p) => p.type === 'text').map((p) => p.text).join(''));

describe('Tools in replies', () => {
  for (const type of PROTOCOLS) {
    test(`[D-tools-1] tools and toolChoice reach ${type} in its own form, as its API takes them`, async () => {
      const model = `say:ok+n:offer-${type}`;
      const s = await session(type, model);
      const choices = type === 'ollama' ? ['auto', 'none'] : ['auto', 'none', 'required', { name: 'get_weather' }];
      for (const toolChoice of choices) {
        await send(s._id, { content: 'weather?', tools: [WEATHER, { name: 'no-schema' }], toolChoice });
        const body = lastRequest(model).body;
        if (type === 'openai') {
          assert.deepEqual(body.tools, [{ type: 'function', function: WEATHER }, { type: 'function', function: { name: 'no-schema' } }]);
          assert.deepEqual(body.tool_choice, typeof toolChoice === 'string' ? toolChoice : { type: 'function', function: { name: 'get_weather' } });
        } else if (type === 'anthropic') {
          assert.deepEqual(body.tools, [{ name: WEATHER.name, description: WEATHER.description, input_schema: WEATHER.parameters }, { name: 'no-schema', input_schema: { type: 'object' } }]);
          assert.deepEqual(body.tool_choice, { auto: { type: 'auto' }, none: { type: 'none' }, required: { type: 'any' } }[toolChoice] ?? { type: 'tool', name: 'get_weather' });
        } else if (toolChoice === 'none') {
          assert.equal(body.tools, undefined, 'Ollama has no tool choice: none offers no tools');
        } else {
          assert.deepEqual(body.tools, [{ type: 'function', function: WEATHER }, { type: 'function', function: { name: 'no-schema' } }]);
          assert.equal(body.tool_choice, undefined);
        }
      }
      await send(s._id, { content: 'no tools now' });
      assert.equal(lastRequest(model).body.tools, undefined, 'a request without tools offers none');
    });
  }

  test('[D-tools-2] tools and toolChoice are checked: a clear 400 naming the field, nothing recorded', async () => {
    const s = await session('openai', 'echo');
    const cases = [
      [{ tools: [{ name: 'has space' }] }, /^tools\[0\]\.name must be 1-64 letters, digits, _ or -/],
      [{ tools: [{ name: 'x'.repeat(65) }] }, /^tools\[0\]\.name must be/],
      [{ tools: [{ description: 'no name' }] }, /^tools\[0\]\.name is required/],
      [{ tools: [{ name: 'a', parameters: [] }] }, /^tools\[0\]\.parameters must be/],
      [{ tools: [{ name: 'a', parameters: 'x' }] }, /^tools\[0\]\.parameters must be/],
      [{ tools: Array.from({ length: 129 }, (_, i) => ({ name: `t${i}` })) }, /^tools must have at most 128/],
      [{ tools: [{ name: 'a' }, { name: 'a' }] }, /^tools\[1\]\.name must be unique/],
      [{ tools: 'get_weather' }, /^tools must be/],
      [{ toolChoice: 'maybe', tools: [{ name: 'a' }] }, /^toolChoice must be one of/],
      [{ toolChoice: 'required' }, /^toolChoice needs tools$/],
      [{ toolChoice: { name: 'b' }, tools: [{ name: 'a' }] }, /^toolChoice\.name must name one of tools$/],
      [{ toolChoice: 3 }, /^toolChoice must be "auto", "none", "required" or \{"name": \.\.\.\}$/],
    ];
    for (const [extra, message] of cases) {
      const r = await alice.post(`${B}/${s._id}/messages`, { content: 'hi', ...extra });
      assert.equal(r.status, 400, `${JSON.stringify(extra).slice(0, 80)}: ${r.text}`);
      assert.match(r.body.message, message);
    }
    assert.deepEqual((await alice.get(`${B}/${s._id}/turns`)).body.data, [], 'nothing recorded');
    const reply = await alice.post(`${B}/${s._id}/replies`, { tools: [{ name: 'a b' }] });
    assert.equal(reply.status, 400, 'the replies route checks them the same');
  });

  for (const type of PROTOCOLS) {
    test(`[D-tools-3] ${type}'s call is recorded as a tool_call part, its arguments parsed, stopReason tool_calls`, async () => {
      const model = `say:Let%20me%20look.+call:get_weather+call:get_time:${encodeURIComponent('{"zone":"CET","h":[1,2]}')}`;
      const s = await session(type, model);
      const { reply } = await send(s._id, { content: 'weather and time?', tools: [WEATHER, { name: 'get_time' }] });
      assert.equal(reply.status, 'complete');
      assert.equal(reply.stopReason, 'tool_calls');
      assert.deepEqual(reply.content.map((p) => p.type), ['text', 'tool_call', 'tool_call'], 'the parts in the order they came');
      assert.equal(texts(reply.content), 'Let me look.');
      const [a, b] = calls(reply.content);
      assert.deepEqual([a.name, a.arguments, b.name, b.arguments], ['get_weather', { city: 'Paris' }, 'get_time', { zone: 'CET', h: [1, 2] }]);
      const sent = lastRequest(model).calls;
      if (type === 'ollama') assert.match(a.id, /^call_[0-9a-f]{24}$/, 'Ollama gives no id: one is made');
      else assert.deepEqual([a.id, b.id], sent.map((c) => c.id), "the provider's ids");
      assert.notEqual(a.id, b.id);
      assert.deepEqual((await alice.get(`${B}/${s._id}/turns/${reply._id}`)).body.data, reply, 'recorded so');
    });
  }

  test('[D-tools-3] a reply\'s tool calls and stopReason survive an export and an import; an unknown stopReason is refused', async () => {
    const s = await session('openai', 'say:Looking.+call:get_weather');
    const { reply } = await send(s._id, { content: 'weather?', tools: [WEATHER] });
    const dir = tempDir();
    try {
      const file = join(dir, 'backup.ndjson');
      const out = runCli(['export', '--out', file], { env: { DATA_DIR: server.dataDir } });
      assert.equal(out.code, 0, out.stderr);
      const imported = runCli(['import', file], { env: { DATA_DIR: join(dir, 'copy') } });
      assert.equal(imported.code, 0, imported.stderr);
      const copy = await startServer({ dataDir: join(dir, 'copy') });
      try {
        assert.deepEqual((await copy.as('alice').get(`${B}/${s._id}/turns/${reply._id}`)).body.data, reply);
      } finally {
        await copy.stop();
      }
      const bad = join(dir, 'bad.ndjson');
      const lines = readFileSync(file, 'utf8').split('\n').map((l) => l.replace('"stopReason":"tool_calls"', '"stopReason":"because"'));
      writeFileSync(bad, lines.join('\n'));
      const refused = runCli(['import', bad], { env: { DATA_DIR: join(dir, 'bad') } });
      assert.notEqual(refused.code, 0);
      assert.match(refused.stderr, /turn stopReason must be one of: stop, length, tool_calls, content_filter/);
    } finally {
      removeDir(dir);
    }
  });

  for (const [name, directives, types] of [
    ['interleaved by index', 'interleave', ['openai']],
    ['with the id repeated on every piece', 'id-every', ['openai']],
    ['with id but no index on every piece', 'id-every+no-index', ['openai']],
    ['each whole in one delta', 'whole-call', ['openai']],
    ['cut across reads byte by byte', 'split:7', PROTOCOLS],
    ['without ids', 'no-call-id', ['openai', 'anthropic']],
  ]) {
    test(`[D-tools-4] OpenAI's calls ${name} are recorded whole, in order (${types.join(', ')})`, async () => {
      for (const type of types) {
        const model = `call:first:${encodeURIComponent('{"a":"ü€😀","n":1}')}+call:second:${encodeURIComponent('{"b":[true,null]}')}+call:third+${directives}`;
        const s = await session(type, model);
        const { reply } = await send(s._id, { content: 'go', tools: [{ name: 'first' }, { name: 'second' }, { name: 'third' }] });
        const got = calls(reply.content);
        assert.deepEqual(got.map((c) => [c.name, c.arguments]), [['first', { a: 'ü€😀', n: 1 }], ['second', { b: [true, null] }], ['third', { city: 'Paris' }]], type);
        assert.equal(new Set(got.map((c) => c.id)).size, 3, `${type}: three ids`);
        if (directives.includes('no-call-id')) for (const c of got) assert.match(c.id, /^call_[0-9a-f]{24}$/);
        assert.equal(reply.stopReason, 'tool_calls');
      }
    });
  }

  test('[D-tools-5] arguments that are not JSON are kept as the raw string; no arguments are {}', async () => {
    for (const type of ['openai', 'anthropic']) {
      const s = await session(type, `call:shell:${encodeURIComponent('ls -la /tmp')}+call:ping:`);
      const { reply } = await send(s._id, { content: 'go', tools: [{ name: 'shell' }, { name: 'ping' }] });
      assert.deepEqual(calls(reply.content).map((c) => c.arguments), ['ls -la /tmp', {}], type);
    }
  });

  test('[D-sec-4] arguments nested past 32 levels are kept as their text; an object so deep (Ollama) fails the reply', async () => {
    // (thousands of levels deep, a parsed value overflowed the stack of what walks it: the reply's end went unrecorded)
    const deep = `{"a":${'['.repeat(40)}${']'.repeat(40)}}`;
    for (const type of ['openai', 'anthropic']) {
      const s = await session(type, `call:f:${deep}`);
      const { reply } = await send(s._id, { content: 'go', tools: [{ name: 'f' }] });
      assert.deepEqual(calls(reply.content).map((c) => c.arguments), [deep], type);
    }
    const s = await session('ollama', `call:f:${deep}`);
    const { reply } = await send(s._id, { content: 'go', tools: [{ name: 'f' }] });
    assert.equal(reply.status, 'error');
    assert.match(reply.error.message, /Provider "Local Ollama" sent a tool call whose arguments nest more than 32 levels deep/);
    // a client's own, 5,000 levels deep, through the door: kept as text, the conversation goes on
    const args = `{"a":${'['.repeat(5000)}${']'.repeat(5000)}}`;
    const r = await alice.post('/v1/chat/completions', { model: 'local-openai/echo', messages: [{ role: 'user', content: 'q' }, { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: args } }] }, { role: 'tool', tool_call_id: 'c1', content: 'r' }] });
    assert.equal(r.status, 200, r.text);
    const turns = (await alice.get(`${B}/${r.headers['x-session-id']}/turns`)).body.data;
    assert.equal(calls(turns[1].content)[0].arguments, args);
  });

  for (const type of PROTOCOLS) {
    test(`[D-tools-6] an agent loop on the messages route (${type}): a call, a tool message with its result, the answer`, async () => {
      const model = `call:get_weather+n:loop-${type}`;
      const s = await session(type, model);
      const first = await send(s._id, { content: 'What is the weather in Paris?', tools: [WEATHER] });
      assert.equal(first.reply.stopReason, 'tool_calls');
      const [call] = calls(first.reply.content);
      const second = await send(s._id, { role: 'tool', content: [{ type: 'tool_result', toolCallId: call.id, content: { tempC: 21, sky: 'clear' } }], tools: [WEATHER] });
      assert.deepEqual([second.turn.role, second.turn.parentId], ['tool', first.reply._id], 'the tool turn goes under the reply that called');
      assert.equal(second.reply.parentId, second.turn._id);
      assert.equal(second.reply.content, 'tool said: {"tempC":21,"sky":"clear"}', 'the provider got the result paired with its call (it refuses a history that is not)');
      assert.equal(second.reply.stopReason, 'stop');
      const sent = lastRequest(model).body;
      if (type === 'openai') assert.deepEqual(sent.messages.slice(-2).map((m) => m.role), ['assistant', 'tool']);
      if (type === 'anthropic') assert.deepEqual(sent.messages.at(-1).content, [{ type: 'tool_result', tool_use_id: call.id, content: '{"tempC":21,"sky":"clear"}' }]);
      if (type === 'ollama') assert.deepEqual(sent.messages.at(-1), { role: 'tool', content: '{"tempC":21,"sky":"clear"}', tool_name: 'get_weather' });
      const path = (await alice.get(`${B}/${s._id}/turns?branch=head`)).body.data;
      assert.deepEqual(path.map((t) => t.role), ['user', 'assistant', 'tool', 'assistant']);
    });
  }

  test('[D-tools-7] a result naming no call on the path is 400, nothing recorded; a tool message needs tool_result parts', async () => {
    const s = await session('openai', 'call:get_weather+n:path');
    const { reply } = await send(s._id, { content: 'weather?', tools: [WEATHER] });
    const before = (await alice.get(`${B}/${s._id}/turns`)).body.data;
    const result = (id) => ({ role: 'tool', content: [{ type: 'tool_result', toolCallId: id, content: 'sunny' }] });
    for (const [body, message] of [
      [result('call_nobody'), 'toolCallId must name a tool call on the path'],
      [{ ...result(calls(reply.content)[0].id), parentId: before[0]._id }, 'toolCallId must name a tool call on the path'],
      [{ ...result(calls(reply.content)[0].id), parentId: null }, 'toolCallId must name a tool call on the path'],
      [{ ...result(calls(reply.content)[0].id), parentId: '6f00000000000000000000ff' }, 'parentId must be a turn of this session'],
      [{ role: 'tool', content: 'sunny' }, 'content of a tool message must hold tool_result parts'],
      [{ role: 'tool', content: [{ type: 'text', text: 'sunny' }] }, 'content of a tool message must hold tool_result parts'],
      [{ role: 'assistant', content: 'me' }, 'role must be one of: user, tool'],
    ]) {
      const r = await alice.post(`${B}/${s._id}/messages`, body);
      assert.deepEqual([r.status, r.body.message], [400, message], JSON.stringify(body));
    }
    assert.deepEqual((await alice.get(`${B}/${s._id}/turns`)).body.data, before, 'nothing recorded');
  });

  test('[D-tools-8] text and reasoning stream as turn.delta; tool calls come whole in the closing turn.updated', async () => {
    const s = await session('anthropic', 'reasoning:3+say:Checking.+call:get_weather');
    const f = await openEvents(server.url, `${B}/${s._id}/messages`, { token: alice.token, method: 'POST', json: { content: 'weather?', tools: [WEATHER] } });
    await f.finished;
    const deltas = f.events.filter((e) => e.event === 'turn.delta');
    assert.deepEqual([...new Set(deltas.map((e) => e.data.type ?? 'text'))], ['reasoning', 'text']);
    assert.ok(deltas.every((e) => !('arguments' in e.data)), 'no delta carries a call');
    const last = f.events.at(-1);
    assert.equal(last.event, 'turn.updated');
    assert.deepEqual(last.data.content.map((p) => p.type), ['reasoning', 'text', 'tool_call']);
    assert.equal(last.data.stopReason, 'tool_calls');
  });

  test('[D-tools-9] stopReason is one of the four as the provider said it, absent when it said another or none', async () => {
    for (const type of PROTOCOLS) {
      const s = await session(type, 'say:a+b+c+finish:length');
      assert.equal((await send(s._id, { content: 'x' })).reply.stopReason, 'length', type);
      const t = await session(type, 'say:done');
      assert.equal((await send(t._id, { content: 'x' })).reply.stopReason, 'stop', type);
    }
    const o = await session('openai', 'say:odd+finish:weird_reason');
    const odd = (await send(o._id, { content: 'x' })).reply;
    assert.equal(odd.status, 'complete');
    assert.equal('stopReason' in odd, false, 'a reason none of the four is left out');
    const cut = await session('openai', 'tokens:3+error-after:2');
    const failed = (await send(cut._id, { content: 'x' })).reply;
    assert.deepEqual([failed.status, 'stopReason' in failed], ['error', false]);
  });

  test("[D-tools-10] OpenAI's refusal text is the reply's text, with stopReason content_filter", async () => {
    const s = await session('openai', `say:${encodeURIComponent("I can't help with that.")}+refusal`);
    const { reply } = await send(s._id, { content: 'something bad' });
    assert.deepEqual([reply.content, reply.stopReason, reply.status], ["I can't help with that.", 'content_filter', 'complete']);
  });

  test('[D-tools-11] a compressed provider answer is decoded: gzip, br and deflate, on every protocol', async () => {
    for (const type of PROTOCOLS) {
      for (const encoding of ['gzip', 'br', 'deflate']) {
        const s = await session(type, `say:squeezed%20words+encoding:${encoding}`);
        const { reply } = await send(s._id, { content: 'x' });
        assert.deepEqual([reply.status, reply.content], ['complete', 'squeezed words'], `${type} ${encoding}: ${JSON.stringify(reply.error)}`);
      }
    }
  });

  test('[D-tools-12] an error field that is null is no error in an otherwise good stream', async () => {
    const s = await session('openai', 'say:all%20good+error-null');
    const { reply } = await send(s._id, { content: 'x' });
    assert.deepEqual([reply.status, reply.content], ['complete', 'all good']);
  });

  test('[D-tools-13] calls nobody answered are left out of what the model is sent (the conversation moved on)', async () => {
    for (const type of PROTOCOLS) {
      const model = `call:get_weather+n:moved-on-${type}`;
      const s = await session(type, model);
      await send(s._id, { content: 'weather?', tools: [WEATHER] });
      // the user writes instead of answering the call: the provider would refuse the call left open
      const { reply } = await send(s._id, { content: 'never mind, hello', tools: [WEATHER] });
      assert.equal(reply.status, 'complete', `${type}: ${JSON.stringify(reply.error)}`);
      const sent = JSON.stringify(lastRequest(model).body.messages);
      assert.ok(!sent.includes('get_weather'), `${type}: ${sent}`);
    }
  });
});
