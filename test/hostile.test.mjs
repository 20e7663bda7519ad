// Replies under hostile providers (issue 42): each attack a provider (a misbehaving local server,
// or a compromised one) or a user with a long history could make, on the real server and the
// local provider of test/provider/, whose switches (SCENARIOS) play the attacker. On every engine.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { newSession, removeDir, startServer } from './helpers.mjs';
import { startProvider } from './provider/server.mjs';

const B = '/api/v1/chat-sessions';
const OPENAI = '6f0000000000000000000001';
const KEY = 'sk-hostile-0123456789abcdef';

let provider;
let server;
let alice;

const providersFor = (url, more = []) => [{ _id: OPENAI, name: 'Local OpenAI', type: 'openai', baseUrl: `${url}/v1`, apiKey: KEY }, ...more];

before(async () => {
  provider = await startProvider({ log: false });
  server = await startServer({ providers: providersFor(provider.url) });
  alice = server.as('alice');
});
after(async () => {
  await server?.stop();
  if (server !== undefined) removeDir(server.dataDir);
  await provider?.close();
});

async function session(model, who = alice, over = {}) {
  const r = await who.post(B, newSession({ providerId: OPENAI, selectedModel: model, ...over }));
  assert.equal(r.status, 201, r.text);
  return r.body.data;
}

describe('Replies under hostile providers', () => {
  test('[D-hostile-1] "a cancel never answers a complete turn": 200 cancels raced with their replies\' ends', async () => {
    const s = await session('tokens:3');
    const seen = { interrupted: 0, lost: 0 };
    for (let i = 0; i < 200; i++) {
      const started = await alice.post(`${B}/${s._id}/messages`, { content: `race ${i}`, background: true });
      assert.equal(started.status, 202, started.text);
      const reply = started.body.data.reply;
      // sent at once, or a little later: the reply's end falls before, during or after the cancel
      if (i % 4 !== 0) await new Promise((r) => setTimeout(r, i % 4));
      const c = await alice.post(`${B}/${s._id}/turns/${reply._id}/cancel`, {});
      let recorded = (await alice.get(`${B}/${s._id}/turns/${reply._id}`)).body.data;
      for (let k = 0; recorded.status === 'streaming' && k < 500; k++) {
        await new Promise((r) => setTimeout(r, 10));
        recorded = (await alice.get(`${B}/${s._id}/turns/${reply._id}`)).body.data;
      }
      if (c.status === 200) {
        assert.equal(c.body.data.status, 'interrupted', `race ${i}: a 200 is the cancel's own end`);
        assert.deepEqual(recorded, c.body.data, `race ${i}: answered as recorded`);
        seen.interrupted++;
      } else {
        assert.deepEqual([c.status, c.body], [409, { success: false, message: 'Turn is not streaming' }], `race ${i}`);
        assert.equal(recorded.status, 'complete', `race ${i}: the end won`);
        seen.lost++;
      }
    }
    assert.equal(seen.interrupted + seen.lost, 200);
  });
});

describe('Secrets scrubbed in their encodings', () => {
  // credentials whose encoded forms no generic rule (key-shaped tokens, long runs) would catch
  const KEYED = '6f0000000000000000000011';
  const IN_URL = '6f0000000000000000000012';
  const IN_HEADER = '6f0000000000000000000013';
  const secrets = { key: 'hk-Tq7-Zx9-Lm3', urlPass: 'pw-Rk8-Vb2', headerPass: 'Hq4-Nd6-Wy1' };
  let s;
  before(async () => {
    const basic = Buffer.from(`svc:${secrets.headerPass}`).toString('base64');
    s = await startServer({
      providers: [
        { _id: KEYED, name: 'Keyed', type: 'openai', baseUrl: `${provider.url}/v1`, apiKey: secrets.key },
        { _id: IN_URL, name: 'In the URL', type: 'openai', baseUrl: `${provider.url.replace('http://', `http://agent:${secrets.urlPass}@`)}/v1` },
        { _id: IN_HEADER, name: 'In a header', type: 'openai', baseUrl: `${provider.url}/v1`, headers: { authorization: `Basic ${basic}` } },
      ],
    });
  });
  after(async () => {
    await s?.stop();
    if (s !== undefined) removeDir(s.dataDir);
  });

  test('[D-providers-13] "Secrets scrubbed in their encodings": base64, base64url, hex, URL-encoded, spaced out', async () => {
    const u = s.as('alice');
    const forms = {
      base64: (x) => Buffer.from(x).toString('base64'),
      base64url: (x) => Buffer.from(x).toString('base64url'),
      hex: (x) => Buffer.from(x).toString('hex'),
      url: (x) => [...Buffer.from(x)].map((b) => `%${b.toString(16).padStart(2, '0').toUpperCase()}`).join(''),
      spaced: (x) => [...x].join(' '),
    };
    const credentials = { [KEYED]: secrets.key, [IN_URL]: `agent:${secrets.urlPass}`, [IN_HEADER]: `svc:${secrets.headerPass}` };
    for (const [providerId, credential] of Object.entries(credentials)) {
      const sess = (await u.post(B, newSession({ providerId, selectedModel: 'echo' }))).body.data;
      for (const [form, encode] of Object.entries(forms)) {
        const r = await u.post(`${B}/${sess._id}/messages`, { content: 'hi', model: `status:401+echo-key:${form}` });
        assert.equal(r.status, 201, r.text);
        const message = r.body.data.reply.error.message;
        assert.match(message, /^Provider "[^"]+" answered HTTP 401 Unauthorized: .*Incorrect API key provided: \*\*\*/, `${providerId} ${form}: ${message}`);
        for (const secret of [credential, encode(credential), ...Object.values(secrets)]) assert.ok(!message.includes(secret), `${providerId} ${form}: ${message}`);
      }
    }
    // what the provider could quote never reached an answer, a log line or the store
    const logs = JSON.stringify(s.logs());
    for (const secret of Object.values(secrets)) assert.ok(!logs.includes(secret), 'no log line holds a secret');
  });
});

describe('Idle means no progress; REPLY_MAX_DURATION', () => {
  const ANTHROPIC = '6f0000000000000000000021';
  const OLLAMA = '6f0000000000000000000022';
  let s;
  before(async () => {
    s = await startServer({
      providers: providersFor(provider.url, [
        { _id: ANTHROPIC, name: 'Local Claude', type: 'anthropic', baseUrl: provider.url, apiKey: KEY },
        { _id: OLLAMA, name: 'Local Ollama', type: 'ollama', baseUrl: provider.url },
      ]),
      env: { PROVIDER_IDLE_TIMEOUT: '1s', REPLY_MAX_DURATION: '3s' },
    });
  });
  after(async () => {
    await s?.stop();
    if (s !== undefined) removeDir(s.dataDir);
  });

  test('[D-providers-9] "comments and unfinished lines are not progress": a trickle or keep-alives end the reply', async () => {
    const u = s.as('alice');
    const cases = [];
    for (const providerId of [OPENAI, ANTHROPIC, OLLAMA]) for (const fault of ['trickle-after:2:50', 'keepalive-after:2:50']) cases.push({ providerId, fault });
    await Promise.all(cases.map(async ({ providerId, fault }) => {
      const sess = (await u.post(B, newSession({ providerId, selectedModel: `tokens:5+${fault}` }))).body.data;
      const started = performance.now();
      const r = await u.post(`${B}/${sess._id}/messages`, { content: 'hello' });
      const what = `${providerId} ${fault}`;
      assert.equal(r.status, 201, `${what}: ${r.text}`);
      const reply = r.body.data.reply;
      assert.equal(reply.status, 'error', what);
      assert.match(reply.error.message, /^Provider "[^"]+" sent no text, reasoning, tool call or usage for 1 s \(only keep-alives or an unfinished line\)$/, what);
      assert.equal(reply.content, 'the quick', `${what}: the text before is kept`);
      assert.ok(performance.now() - started < 20_000, `${what}: ended by the idle time, not held`);
      // the session takes a reply again: nothing is held streaming
      const next = await u.post(`${B}/${sess._id}/messages`, { content: 'again', model: 'say:fine' });
      assert.deepEqual([next.status, next.body.data.reply.status, next.body.data.reply.content], [201, 'complete', 'fine'], what);
    }));
  });

  test('[D-hostile-2] "ends a reply error whatever the provider sends": a steady reply is cut at REPLY_MAX_DURATION', async () => {
    const u = s.as('alice');
    const sess = (await u.post(B, newSession({ providerId: OPENAI, selectedModel: 'tokens:100000@20' }))).body.data;
    const r = await u.post(`${B}/${sess._id}/messages`, { content: 'go on for ever' });
    assert.equal(r.status, 201, r.text);
    const reply = r.body.data.reply;
    assert.equal(reply.status, 'error');
    assert.equal(reply.error.message, 'Provider "Local OpenAI" was still replying after 3 s, the longest a reply may take (REPLY_MAX_DURATION): the reply ends here');
    assert.ok(reply.content.startsWith('the quick brown fox') && reply.content.split(' ').length < 100_000, 'what came before is kept');
    assert.deepEqual((await u.get(`${B}/${sess._id}/turns/${reply._id}`)).body.data, reply, 'recorded so');
  });
});

describe('Bytes everywhere: what replies hold unfinished is bounded', () => {
  const OLLAMA = '6f0000000000000000000032';
  let s;
  before(async () => {
    // MEMORY_LIMIT 256 MiB: what all replies may hold unfinished is 16 MiB (the least it is)
    s = await startServer({
      providers: providersFor(provider.url, [{ _id: OLLAMA, name: 'Local Ollama', type: 'ollama', baseUrl: provider.url }]),
      env: { MEMORY_LIMIT: '256mb', PROVIDER_IDLE_TIMEOUT: '5s', BODY_LIMIT: '64kb' },
    });
  });
  after(async () => {
    await s?.stop();
    if (s !== undefined) removeDir(s.dataDir);
  });

  const held = async () => {
    const text = (await s.request('GET', '/metrics')).text;
    return { used: Number(/^chat_session_api_replies_held_bytes (\d+)$/m.exec(text)[1]), limit: Number(/^chat_session_api_replies_held_limit_bytes (\d+)$/m.exec(text)[1]) };
  };

  test('[D-providers-16] "counted in bytes as they arrive": an event of 120 lines of 65,536 "€" ends its reply at 8 MiB', async () => {
    const u = s.as('alice');
    for (const [providerId, words] of [[OPENAI, 'an event larger than 8388608 bytes'], [OLLAMA, 'a line longer than 8388608 bytes']]) {
      const sess = (await u.post(B, newSession({ providerId, selectedModel: 'data-lines:120:65536' }))).body.data;
      const r = await u.post(`${B}/${sess._id}/messages`, { content: 'hello' });
      assert.equal(r.status, 201, r.text);
      assert.equal(r.body.data.reply.status, 'error');
      assert.equal(r.body.data.reply.error.message, `Provider "${providerId === OPENAI ? 'Local OpenAI' : 'Local Ollama'}" sent a stream that cannot be read: ${words}`);
    }
    assert.equal((await held()).used, 0, 'nothing held once the replies ended');
  });

  test('[D-hostile-3] "what all replies hold unfinished is bounded in sum": 12 lines of 7 MB held at once', async () => {
    const u = s.as('alice');
    const { limit } = await held();
    assert.equal(limit, 16 * 1024 * 1024);
    let peak = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        peak = Math.max(peak, (await held()).used);
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    const answers = await Promise.all(Array.from({ length: 12 }, async (_, i) => {
      const sess = (await u.post(B, newSession({ providerId: i % 2 === 0 ? OPENAI : OLLAMA, selectedModel: 'long-line:7000000:100' }))).body.data;
      return u.post(`${B}/${sess._id}/messages`, { content: `flood ${i}` });
    }));
    sampling = false;
    await sampler;
    let bounded = 0;
    for (const r of answers) {
      if (r.status === 503) {
        // a new reply is refused while what is held nears the bound: nothing recorded
        assert.deepEqual([r.body.message, r.headers['retry-after']], ['Server is low on memory', '5']);
        bounded++;
        continue;
      }
      assert.equal(r.status, 201, r.text);
      const reply = r.body.data.reply;
      assert.equal(reply.status, 'error');
      if (/sent more than the replies in progress may hold unfinished together \(16 MiB, a share of MEMORY_LIMIT\)$/.test(reply.error.message)) bounded++;
      else assert.match(reply.error.message, /sent no text, reasoning, tool call or usage for 5 s/);
    }
    // two lines of 7 MB fit in 16 MiB, a third never does
    assert.ok(bounded >= 10, `${bounded} of 12 met the bound`);
    assert.ok(peak <= limit, `held ${peak} bytes at most`);
    assert.equal((await held()).used, 0);
    const after = (await u.post(B, newSession({ providerId: OPENAI, selectedModel: 'say:still%20here' }))).body.data;
    assert.equal((await u.post(`${B}/${after._id}/messages`, { content: 'and you?' })).body.data.reply.content, 'still here');
  });

  test('[D-hostile-4] "BODY_LIMIT counts the bytes of the turn as recorded": an unrecorded reply is held to it too', async () => {
    const r = await s.request('POST', '/v1/chat/completions', { token: s.as('alice').token, headers: { 'x-record': 'off' }, json: { model: 'local-openai/tokens:100000', messages: [{ role: 'user', content: 'a long one' }] } });
    assert.notEqual(r.status, 200, r.text);
    assert.match(r.body.error.message, /The reply grew past the largest a turn may be \(BODY_LIMIT, 65536 bytes\)/);
  });
});

describe('MEMORY_LIMIT refuses new replies before it is reached', () => {
  test('[D-hostile-3] "MEMORY_LIMIT also refuses new replies": 503 Server is low on memory, on both routes', async () => {
    const first = await startServer({ providers: providersFor(provider.url) });
    const sess = (await first.as('alice').post(B, newSession({ providerId: OPENAI, selectedModel: 'echo' }))).body.data;
    await first.stop();
    const s = await startServer({ dataDir: first.dataDir, providers: providersFor(provider.url), env: { MEMORY_LIMIT: '16mb' } });
    try {
      const u = s.as('alice');
      const r = await u.post(`${B}/${sess._id}/messages`, { content: 'hello' });
      assert.deepEqual([r.status, r.body.message, r.headers['retry-after']], [503, 'Server is low on memory', '5']);
      const door = await s.request('POST', '/v1/chat/completions', { token: u.token, json: { model: 'local-openai/echo', messages: [{ role: 'user', content: 'hi' }] } });
      assert.deepEqual([door.status, door.headers['retry-after']], [503, '5']);
      assert.deepEqual((await u.get(`${B}/${sess._id}/turns`)).body.data, [], 'nothing recorded');
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });
});

describe('REPLY_CONTEXT_MAX: what is sent to the provider is bounded', () => {
  test('[D-hostile-5] "a tool call and its results dropped together, the system message kept": the oldest turns left out', async () => {
    const p = await startProvider();
    const s = await startServer({ providers: providersFor(p.url), env: { BODY_LIMIT: '64kb', REPLY_CONTEXT_MAX: '256kb' } });
    try {
      const u = s.as('alice');
      const sess = (await u.post(B, newSession({ providerId: OPENAI, selectedModel: 'echo', instructions: 'Be brief.' }))).body.data;
      const say = async (role, content) => {
        const r = await u.post(`${B}/${sess._id}/turns`, { role, content });
        assert.equal(r.status, 201, r.text);
      };
      const big = (tag) => `${tag}:${'x'.repeat(60_000)}`;
      await say('system', 'You are a pirate.');
      for (let i = 0; i < 10; i++) {
        await say('user', big(`u${i}`));
        await say('assistant', big(`a${i}`));
      }
      // the cut falls between a tool call and its result: both go
      await say('user', big('question'));
      await say('assistant', [{ type: 'tool_call', id: 'call_cut', name: 'lookup', arguments: { q: big('args') } }]);
      await say('tool', [{ type: 'tool_result', toolCallId: 'call_cut', content: big('result') }]);
      await say('user', big('then'));
      await say('assistant', big('answer'));
      const r = await u.post(`${B}/${sess._id}/messages`, { content: big('last') });
      assert.equal(r.status, 201, r.text);
      assert.equal(r.body.data.reply.status, 'complete', r.body.data.reply.error?.message);
      const asked = p.requests.at(-1);
      const sent = asked.body.messages.map((m) => [m.role, typeof m.content === 'string' ? m.content.split(':')[0] : m.content]);
      assert.deepEqual(sent, [['system', 'Be brief.'], ['system', 'You are a pirate.'], ['user', 'then'], ['assistant', 'answer'], ['user', 'last']]);
      assert.ok(Buffer.byteLength(JSON.stringify(asked.body)) <= 256 * 1024, 'within REPLY_CONTEXT_MAX');
    } finally {
      await s.stop();
      removeDir(s.dataDir);
      await p.close();
    }
  });
});

describe('Parts in linear time', () => {
  test('[D-hostile-8] "adjacent pieces of one kind coalesce": 30,000 pieces alternating reasoning and text, read back', async () => {
    const sess = await session('alternate:30000');
    const r = await alice.post(`${B}/${sess._id}/messages`, { content: 'think aloud' });
    assert.equal(r.status, 201, r.text);
    const reply = r.body.data.reply;
    assert.equal(reply.status, 'complete');
    assert.equal(reply.content.length, 30_000, 'one part a piece: no two of one kind are adjacent');
    const letter = (i) => String.fromCharCode(97 + ((i >> 1) % 26));
    reply.content.forEach((p, i) => assert.deepEqual(p, { type: i % 2 === 0 ? 'reasoning' : 'text', text: letter(i) }, `part ${i}`));
    assert.deepEqual((await alice.get(`${B}/${sess._id}/turns/${reply._id}`)).body.data, reply, 'read back as recorded');
    // and pieces of one kind in a row are one part, however many
    const one = await session('reasoning:2000+tokens:2000');
    const both = (await alice.post(`${B}/${one._id}/messages`, { content: 'then answer' })).body.data.reply;
    assert.deepEqual(both.content.map((p) => p.type), ['reasoning', 'text']);
  });
});
