// The rules every protocol shares, owned by streamReply (src/providers/call.ts): retries of
// transient failures before the first text only, Retry-After and its cap, the idle limit, the
// caller's abort closing the provider's request, failures worded with the provider's name and
// never with a credential; and a provider record read for calling (src/providers/config.ts).
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { collect, fresh, kit, localProvider, requestsFor, seenMessages, startProvider } from './kit.mjs';

const { ProviderFailed, ProviderUnusable, providerConfig, modelAllowed, canReply, parseProviders, scrubCredentials, DEFAULT_BASE_URLS, MAX_RETRIES, RETRY_AFTER_CAP_MS, DEFAULT_IDLE_TIMEOUT_MS } = kit;

const KEY = 'sk-live-0123456789abcdefXYZ';
const HELLO = [{ role: 'user', content: 'hello there' }];

describe('the rules streamReply owns, against the local provider', () => {
  let p;
  let openai;
  let anthropic;
  before(async () => {
    p = await startProvider();
    openai = localProvider(p, 'openai', { apiKey: KEY });
    anthropic = localProvider(p, 'anthropic', { apiKey: KEY });
  });
  after(async () => {
    await p.close();
    for (const m of seenMessages) assert.ok(!m.includes(KEY), `a message held the key: ${m}`);
  });

  const call = (provider, model, extra = {}) => ({ provider, model, messages: HELLO, retryBaseMs: 20, ...extra });

  test('"Transient failures before the first piece of text are tried again, at most twice." (HTTP 429, 500, 502, 503, 529)', async () => {
    assert.equal(MAX_RETRIES, 2);
    for (const status of [429, 500, 502, 503, 529]) {
      const model = fresh(`status:${status}+retry-after:0+times:2`);
      const r = await collect(call(openai, model));
      assert.equal(r.error, undefined, `${status}: ${r.error?.message}`);
      assert.equal(r.text, 'hello there');
      assert.equal(requestsFor(p, model).length, 3, `${status}: the first try and two more`);
    }
    const model = fresh('status:503+retry-after:0+times:3');
    const r = await collect(call(openai, model));
    assert.ok(r.error instanceof ProviderFailed);
    assert.equal(r.error.transient, true);
    assert.equal(r.error.status, 503);
    assert.equal(r.error.message, 'Provider "Local test provider" answered HTTP 503 Service Unavailable: server_error: The server had an error while processing your request. (tried 3 times)');
    assert.equal(requestsFor(p, model).length, 3, 'never a fourth try');
  });

  test('[D-providers-12] a refusal (400, 401, 403, 404, 422) is one ProviderFailed, not transient, not tried again', async () => {
    for (const status of [400, 401, 403, 404, 422]) {
      const model = fresh(`status:${status}`);
      const r = await collect(call(openai, model));
      assert.ok(r.error instanceof ProviderFailed);
      assert.equal(r.error.transient, false);
      assert.equal(r.error.status, status);
      assert.match(r.error.message, new RegExp(`^Provider "Local test provider" answered HTTP ${status} `));
      assert.equal(requestsFor(p, model).length, 1);
    }
  });

  test('a response cut or ended early before any text is tried again (cut after the head, a reset, an early end)', async () => {
    for (const fault of ['reset-after:0', 'rst-after:0', 'cut-after:0']) {
      const model = fresh(`${fault}+times:1`);
      const r = await collect(call(openai, model));
      assert.equal(r.error, undefined, `${fault}: ${r.error?.message}`);
      assert.equal(r.text, 'hello there');
      assert.equal(requestsFor(p, model).length, 2);
    }
  });

  test('[D-providers-8] a cut after the first piece is not tried again; a piece of reasoning counts as a first piece', async () => {
    const model = fresh('tokens:6+reset-after:3+times:1');
    const r = await collect(call(openai, model));
    assert.equal(r.text, 'the quick brown');
    assert.ok(r.error instanceof ProviderFailed);
    assert.equal(r.error.message, 'Provider "Local test provider" cut the connection before the reply was complete (connection reset)');
    assert.equal(requestsFor(p, model).length, 1, 'not tried again: the caller has the first pieces');
    // a reasoning piece counts as a piece: trying again would send it twice
    const m2 = fresh('reasoning:2+tokens:3+reset-after:1+times:1');
    const r2 = await collect(call(anthropic, m2));
    assert.equal(r2.reasoning, 'Let');
    assert.ok(r2.error instanceof ProviderFailed);
    assert.equal(requestsFor(p, m2).length, 1);
  });

  test('"The transient failures: connection refused" ... is tried again, then named with the address', async () => {
    const port = await new Promise((resolve) => {
      const s = createServer();
      s.listen(0, '127.0.0.1', () => {
        const { port } = s.address();
        s.close(() => resolve(port));
      });
    });
    const provider = providerConfig({ name: 'Gone', type: 'ollama', baseUrl: `http://127.0.0.1:${port}`, apiKey: KEY });
    const r = await collect({ provider, model: 'x', messages: HELLO, retryBaseMs: 5 });
    assert.ok(r.error instanceof ProviderFailed);
    assert.equal(r.error.transient, true);
    assert.equal(r.error.message, `Provider "Gone" could not be reached at 127.0.0.1:${port}: connection refused (tried 3 times)`);
  });

  test('"honouring Retry-After up to 10 s": "its Retry-After in seconds or as an HTTP date" is waited for', async () => {
    const model = fresh('status:429+retry-after:1+times:1');
    const r = await collect(call(openai, model, { retryBaseMs: 1 }));
    assert.equal(r.error, undefined);
    const [first, second] = requestsFor(p, model);
    assert.ok(second.at - first.at >= 900, `waited ${second.at - first.at} ms of the 1 s asked`);
    const dated = fresh('status:503+retry-after:date2+times:1');
    const r2 = await collect(call(openai, dated, { retryBaseMs: 1 }));
    assert.equal(r2.error, undefined);
    const [a, b] = requestsFor(p, dated);
    // an HTTP date has whole seconds: 2 s ahead is more than 1 s ahead
    assert.ok(b.at - a.at >= 900, `waited ${b.at - a.at} ms for a date 2 s ahead`);
  });

  test('"when it asks for more than 10 s the call fails at once, saying how long it asked"', async () => {
    assert.equal(RETRY_AFTER_CAP_MS, 10_000);
    const model = fresh('status:429+retry-after:3600');
    const r = await collect(call(openai, model));
    assert.ok(r.error instanceof ProviderFailed);
    assert.equal(r.error.transient, true);
    assert.equal(r.error.status, 429);
    assert.equal(r.error.message, 'Provider "Local test provider" answered HTTP 429 Too Many Requests: Rate limit reached for requests (it asks to wait 3600 s before trying again, longer than the 10 s a reply waits)');
    assert.equal(requestsFor(p, model).length, 1);
  });

  test('"without either, about 1 s and then 2 s, jittered between half and all of it" (retryBaseMs scales it)', async () => {
    const model = fresh('status:502+times:2');
    const r = await collect(call(openai, model, { retryBaseMs: 200 }));
    assert.equal(r.error, undefined);
    const [a, b, c] = requestsFor(p, model);
    // jittered between half and all of 200 ms, then of 400 ms
    assert.ok(b.at - a.at >= 90, `first wait ${b.at - a.at} ms`);
    assert.ok(c.at - b.at >= 190, `second wait ${c.at - b.at} ms`);
  });

  test('[D-providers-9] a stall before any answer ends the call, not retried; the provider sees its connection closed', async () => {
    assert.equal(DEFAULT_IDLE_TIMEOUT_MS, 60_000);
    const model = fresh('stall-headers:forever');
    const r = await collect(call(openai, model, { idleTimeoutMs: 150 }));
    assert.ok(r.error instanceof ProviderFailed);
    assert.equal(r.error.message, 'Provider "Local test provider" sent nothing for 150 ms');
    assert.equal(r.error.transient, false, 'not tried again: PROVIDER_IDLE_TIMEOUT ends the reply');
    const [entry] = requestsFor(p, model);
    await entry.closed;
    assert.equal(entry.clientClosed, true, 'the provider saw its connection closed');
    assert.equal(requestsFor(p, model).length, 1);
  });

  test('[D-providers-9] a stall between reads of the body ends the call after the text so far', async () => {
    const model = fresh('tokens:5+stall-after:2');
    const r = await collect(call(anthropic, model, { idleTimeoutMs: 2000 }));
    assert.equal(r.text, 'the quick');
    assert.equal(r.error.message, 'Provider "Local test provider" sent nothing for 2 s');
    const [entry] = requestsFor(p, model);
    await entry.closed;
    assert.equal(entry.clientClosed, true);
  });

  test('a pause shorter than idleTimeoutMs is only a pause', async () => {
    const r = await collect(call(openai, fresh('tokens:4+stall-after:2:200'), { idleTimeoutMs: 5000 }));
    assert.equal(r.error, undefined);
    assert.equal(r.text, 'the quick brown fox');
  });

  test('"time the caller spends with an event it was given is not counted (a slow consumer is not a silent provider)"', async () => {
    // the caller holds the first event far longer than the idle limit while the provider waits on backpressure
    const r = await collect(call(openai, fresh('tokens:20000'), { idleTimeoutMs: 800 }), {
      onEvent: async (e, out) => {
        if (out.events.length === 1) await new Promise((resolve) => setTimeout(resolve, 3000));
      },
    });
    assert.equal(r.error, undefined, r.error?.message);
    assert.equal(r.text.split(' ').length, 20000);
  });

  test("[D-providers-11] the caller's abort ends the iteration quietly and destroys the socket, never pooled again", async () => {
    const model = fresh('tokens:1000@50');
    const ac = new AbortController();
    const r = await collect(call(openai, model, { signal: ac.signal }), {
      onEvent: (e) => {
        if (e.kind === 'text') ac.abort();
      },
    });
    assert.equal(r.error, undefined, 'an abort is not a failure: the caller knows from its signal');
    assert.equal(r.text, 'the');
    const [entry] = requestsFor(p, model);
    await entry.closed;
    assert.equal(entry.clientClosed, true);
    assert.equal(entry.ended, false);
  });

  test('an abort while waiting for the answer ends the iteration at once; "A retry\'s wait is cut short the same way"', async () => {
    const stalled = fresh('stall-headers:forever');
    const ac = new AbortController();
    p.waitForRequest((r) => r.model === stalled).then(() => ac.abort());
    const r = await collect(call(openai, stalled, { signal: ac.signal }));
    assert.equal(r.error, undefined);
    assert.deepEqual(r.events, []);
    const [entry] = requestsFor(p, stalled);
    await entry.closed;
    assert.equal(entry.clientClosed, true);

    const refused = fresh('status:503+retry-after:9');
    const ac2 = new AbortController();
    p.waitForRequest((x) => x.model === refused).then(() => setImmediate(() => ac2.abort()));
    const r2 = await collect(call(openai, refused, { signal: ac2.signal }));
    assert.equal(r2.error, undefined);
    assert.equal(requestsFor(p, refused).length, 1, 'the 9 s wait was cut short, and nothing was sent again');
  });

  test('an already aborted signal sends nothing; "or breaking out of the iteration, destroys the request\'s socket"', async () => {
    const model = fresh('echo');
    const r = await collect(call(openai, model, { signal: AbortSignal.abort() }));
    assert.deepEqual(r.events, []);
    assert.equal(requestsFor(p, model).length, 0);

    const long = fresh('tokens:1000@50');
    const r2 = await collect(call(anthropic, long), { onEvent: () => false });
    assert.equal(r2.events.length, 1);
    const [entry] = requestsFor(p, long);
    await entry.closed;
    assert.equal(entry.clientClosed, true);
  });

  test('[D-providers-13] the key never appears in a message, whatever the provider echoes', async () => {
    for (const provider of [openai, anthropic, localProvider(p, 'ollama', { apiKey: KEY })]) {
      const r = await collect(call(provider, fresh('status:401+echo-key')));
      assert.ok(r.error instanceof ProviderFailed);
      assert.ok(!r.error.message.includes(KEY), r.error.message);
      assert.ok(!r.error.message.includes('0123456789abcdef'), r.error.message);
      assert.match(r.error.message, /^Provider "Local test provider" answered HTTP 401 Unauthorized: .*Incorrect API key provided: (Bearer )?\*\*\*/);
    }
    // a configured header's value is a secret too, even one sent in place of the key
    const custom = localProvider(p, 'anthropic', { headers: { 'x-api-key': 'hdr-secret-value-42' } });
    const r = await collect(call(custom, fresh('status:401+echo-key')));
    assert.ok(!r.error.message.includes('hdr-secret-value-42'), r.error.message);
  });

  test("[D-providers-2] configured headers follow the protocol's own and may replace them, but not the framing ones", async () => {
    const model = fresh('echo');
    const provider = localProvider(p, 'openai', { apiKey: KEY, headers: { 'X-Title': 'chat-session-api tests', authorization: 'Bearer from-headers', 'content-length': '1' } });
    const r = await collect(call(provider, model));
    assert.equal(r.error, undefined);
    const [entry] = requestsFor(p, model);
    assert.equal(entry.headers['x-title'], 'chat-session-api tests');
    assert.equal(entry.headers.authorization, 'Bearer from-headers');
    assert.equal(entry.headers['content-type'], 'application/json');
  });

  test('"a URL with credentials sends them as Basic authentication", and they are never quoted', async () => {
    const model = fresh('status:401+echo-key');
    const url = new URL(p.url);
    const withUser = providerConfig({ name: 'Behind a proxy', type: 'ollama', baseUrl: `http://proxyuser:pa%40ss-w0rd@${url.host}` });
    const r = await collect(call(withUser, model));
    const [req] = requestsFor(p, model);
    assert.equal(req.headers.authorization, `Basic ${Buffer.from('proxyuser:pa@ss-w0rd').toString('base64')}`);
    assert.ok(!r.error.message.includes(Buffer.from('proxyuser:pa@ss-w0rd').toString('base64')), r.error.message);
    assert.ok(!r.error.message.includes('pa@ss-w0rd'), r.error.message);
  });

  test('[D-providers-1] sequential calls to one provider reuse one connection of the pool', async () => {
    const ports = new Set();
    for (let i = 0; i < 5; i++) {
      const model = fresh('tokens:3');
      const r = await collect(call(openai, model));
      assert.equal(r.error, undefined);
      ports.add(requestsFor(p, model)[0].remotePort);
    }
    assert.equal(ports.size, 1);
  });

  test('many calls at once to one provider all complete', async () => {
    const results = await Promise.all(Array.from({ length: 200 }, (_, i) => collect(call(i % 2 ? openai : anthropic, fresh('tokens:20@200')))));
    for (const r of results) {
      assert.equal(r.error, undefined);
      assert.equal(r.text.split(' ').length, 20);
      assert.equal(r.usages.length, 1);
    }
  });

  test("[D-providers-16] an oversized line or event, a line that is not JSON, or a JSON 200 is the provider's failure", async () => {
    const garbage = fresh('tokens:3+garbage-after:1');
    const r = await collect(call(openai, garbage));
    assert.equal(r.error.message, 'Provider "Local test provider" sent a stream that cannot be read: an event that is not JSON');
    assert.equal(r.error.transient, false);
    const huge = fresh('huge-line+tokens:100@20');
    const r2 = await collect(call(anthropic, huge));
    assert.equal(r2.error.message, `Provider "Local test provider" sent a stream that cannot be read: a line longer than ${8 * 1024 * 1024} bytes`);
    const [entry] = requestsFor(p, huge);
    await entry.closed;
    assert.equal(entry.clientClosed, true, 'the rest of the stream is not read');
    const json = fresh('json-200');
    const r3 = await collect(call(openai, json));
    assert.equal(r3.error.message, 'Provider "Local test provider" answered with JSON instead of a stream: invalid_request_error: Streaming is not supported by this gateway');
    assert.equal(requestsFor(p, json).length, 1);
  });

  test('[D-providers-14] an HTML page is a failure saying so, not quoted, not retried; a text/html stream is read', async () => {
    const ollama = localProvider(p, 'ollama');
    for (const provider of [openai, anthropic, ollama]) {
      const model = fresh('html-200');
      const r = await collect(call(provider, model));
      assert.equal(r.error?.message, 'Provider "Local test provider" answered with an HTML page instead of a stream (is baseUrl the API\'s?)', provider.type);
      assert.equal(r.error.transient, false);
      assert.equal(requestsFor(p, model).length, 1, `${provider.type}: asked once`);
      // the label alone does not make a page: a stream a server sends as text/html is read
      const labelled = await collect(call(provider, fresh('say:read%20anyway+split:1+stream-type:text%2Fhtml;%20charset=utf-8')));
      assert.deepEqual([labelled.text, labelled.error], ['read anyway', undefined], provider.type);
    }
  });

  test('[D-providers-13] a line that is not JSON is scrubbed before it is cut to the 60 characters quoted', async () => {
    const key = '0123456789abcdef0123456789abcdef'; // a vLLM --api-key: no prefix, too short for the long-run rule
    const ollama = localProvider(p, 'ollama', { apiKey: key });
    const r = await collect(call(ollama, fresh('tokens:3+garbage-after:1+echo-key')));
    assert.equal(r.text, 'the');
    assert.match(r.error?.message ?? '', /^Provider "Local test provider" sent a stream that cannot be read: a line that is not JSON \(the gateway refused this request from client \*\*\*/);
    for (let i = 0; i + 8 <= key.length; i++) assert.ok(!r.error.message.includes(key.slice(i, i + 8)), `a piece of the key: ${r.error.message}`);
  });

  test('a stream that ends before the provider said it was done is transient: tried again only when no text came', async () => {
    const model = fresh('tokens:4+cut-after:2');
    const r = await collect(call(anthropic, model));
    assert.equal(r.text, 'the quick');
    assert.equal(r.error.message, 'Provider "Local test provider" closed the stream before the reply was complete');
    assert.equal(r.error.transient, true);
    assert.equal(requestsFor(p, model).length, 1);
  });
});

describe('scrubCredentials: "The provider\'s words are quoted only scrubbed."', () => {
  const scrub = (t, secrets = []) => scrubCredentials(t, secrets);

  test('"the configured key and every configured header value of 4 characters or more (raw, URL- and JSON-escaped)"', () => {
    assert.equal(scrub('bad key abc-123 given', ['abc-123']), 'bad key *** given');
    assert.equal(scrub('got "a\\"b" back', ['a"b']), 'got "***" back');
    assert.equal(scrub('url ?k=x%2By%2Fz', ['x+y/z']), 'url ?k=***');
    assert.equal(scrub('header was my-custom-header-value', ['my-custom-header-value']), 'header was ***');
    // a secret containing another is replaced whole
    assert.equal(scrub('v=longsecretvalue', ['secret', 'longsecretvalue']), 'v=***');
  });

  test('"Bearer/Basic values"', () => {
    assert.equal(scrub('Authorization: Bearer abc.def-123 was refused'), 'Authorization: Bearer *** was refused');
    assert.equal(scrub('Basic dXNlcjpwYXNz failed'), 'Basic *** failed');
  });

  test('"key-shaped tokens (sk-..., sk-ant-..., AIza..., JWTs) and runs of 40 or more letters and digits"', () => {
    assert.equal(scrub('Incorrect API key provided: sk-proj-********************abcd.'), 'Incorrect API key provided: ***.');
    assert.equal(scrub('key sk-ant-api03-AbCdEf123456 is invalid'), 'key *** is invalid');
    assert.equal(scrub('token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1In0.sig_nature-x expired'), 'token *** expired');
    assert.equal(scrub('id a1b2c3d4e5f6a7b8c9d0a1b2c3d4e5f6a7b8c9d0x9 leaked'), 'id *** leaked');
    assert.equal(scrub('AIzaSyA1234567890abcdefghijklmnopq is a Google key'), '*** is a Google key');
  });

  test('[D-providers-13] the values of credential-like names (key=, token=, api_key: ...) are scrubbed, max_tokens kept', () => {
    assert.equal(scrub('GET /v1?key=abc123&x=1'), 'GET /v1?key=***&x=1');
    assert.equal(scrub('token=t0k3n secret=s3cr3t password=hunter2'), 'token=*** secret=*** password=***');
    assert.equal(scrub('{"api_key": "zzz", "model": "m"}'), '{"api_key": "***", "model": "m"}');
    assert.equal(scrub('x-api-key: abcdef'), 'x-api-key: ***');
  });

  test('URL credentials', () => {
    assert.equal(scrub('cannot reach https://user:p%40ss@proxy.local:8080/v1'), 'cannot reach https://***@proxy.local:8080/v1');
  });

  test('ordinary words stay as they are', () => {
    for (const t of ['Rate limit reached for requests', 'model "llama3.2" not found, try pulling it first', 'Overloaded', 'max_tokens: 9000 > 4096, which is the maximum allowed', 'monkey=banana', 'model meta-llama/Meta-Llama-3.1-70B-Instruct-Turbo-Preview-2024 is not available', 'a key_value_store error']) {
      assert.equal(scrub(t), t);
    }
  });
});

describe('[D-providers-2] a provider record is read for calling by providerConfig', () => {
  test("without baseUrl the vendor's own API or a local Ollama; a trailing slash is dropped; a blank apiKey is none", () => {
    const c = providerConfig({ name: 'P', type: 'openai', baseUrl: 'http://h:1/v1/', apiKey: ' k ', headers: { 'X-A': 'b' }, models: ['m'] });
    assert.deepEqual({ ...c }, { name: 'P', type: 'openai', baseUrl: 'http://h:1/v1', apiKey: 'k', headers: { 'x-a': 'b' }, models: ['m'] });
    for (const type of ['openai', 'anthropic', 'ollama']) assert.equal(providerConfig({ name: 'P', type }).baseUrl, DEFAULT_BASE_URLS[type]);
    assert.equal(providerConfig({ name: 'P', type: 'ollama', apiKey: '  ' }).apiKey, undefined);
  });

  test('"Other types are listed as before but cannot reply": refused before any call', () => {
    assert.equal(canReply('openai'), true);
    assert.equal(canReply('gemini'), false);
    assert.throws(() => providerConfig({ name: 'G', type: 'gemini' }), (e) => e instanceof ProviderUnusable && e.message === 'Provider "G" is of type "gemini", which cannot reply (the types that can are openai, anthropic, ollama)');
    assert.throws(() => providerConfig({ name: 'N' }), /Provider "N" has no type, so it cannot reply/);
  });

  test('a bad baseUrl, headers or models field is refused before any call, without quoting the URL', () => {
    assert.throws(() => providerConfig({ name: 'U', type: 'ollama', baseUrl: 'ftp://user:pw@x' }), (e) => e instanceof ProviderUnusable && !e.message.includes('pw') && /not an http/.test(e.message));
    assert.throws(() => providerConfig({ name: 'U', type: 'ollama', baseUrl: 'not a url' }), ProviderUnusable);
    assert.throws(() => providerConfig({ name: 'U', type: 'ollama', baseUrl: 'http://h/?key=1' }), /query/);
    assert.throws(() => providerConfig({ name: 'H', type: 'ollama', headers: ['x'] }), ProviderUnusable);
    assert.throws(() => providerConfig({ name: 'H', type: 'ollama', headers: { 'x-a': 1 } }), ProviderUnusable);
    assert.throws(() => providerConfig({ name: 'H', type: 'ollama', headers: { 'x-a': 'a\r\nInjected: 1' } }), ProviderUnusable);
    assert.throws(() => providerConfig({ name: 'H', type: 'ollama', headers: { 'x-a': 'bell\u0007' } }), ProviderUnusable);
    assert.throws(() => providerConfig({ name: 'K', type: 'openai', apiKey: 'sk-abc\ndef' }), (e) => e instanceof ProviderUnusable && !e.message.includes('sk-abc'));
    assert.throws(() => providerConfig({ name: 'M', type: 'ollama', models: 'llama' }), ProviderUnusable);
  });

  test('"models (when present and non-empty, a model outside it is refused)"', () => {
    assert.equal(modelAllowed(providerConfig({ name: 'P', type: 'ollama', models: ['a'] }), 'a'), true);
    assert.equal(modelAllowed(providerConfig({ name: 'P', type: 'ollama', models: ['a'] }), 'b'), false);
    assert.equal(modelAllowed(providerConfig({ name: 'P', type: 'ollama', models: [] }), 'b'), true);
    assert.equal(modelAllowed(providerConfig({ name: 'P', type: 'ollama' }), 'b'), true);
  });

  test('the providers file keeps each record (key included) for calling, while its answers stay redacted', () => {
    const catalog = parseProviders(JSON.stringify([{ _id: '665F1C2A9B1E8A0012AB34C1', name: 'O', type: 'openai', apiKey: KEY, headers: { 'x-api-key': 'h' } }]), 'providers.json');
    const record = catalog.records.get('665f1c2a9b1e8a0012ab34c1');
    assert.equal(record.apiKey, KEY);
    assert.equal(providerConfig(record).apiKey, KEY);
    assert.ok(!catalog.listJson.includes(KEY));
    assert.ok(!catalog.json.get('665f1c2a9b1e8a0012ab34c1').includes(KEY));
  });
});

describe('scrubCredentials: secrets in their encodings (D-providers-13)', () => {
  const KEY2 = 'hk-Tq7-Zx9-Lm3';
  const scrub = (t) => scrubCredentials(t, [KEY2]);
  test('base64 and base64url whole and at each alignment inside a longer encoded text, hex, every byte escaped', () => {
    for (const before of ['', 'a', 'ab', 'abc', '{"key":"']) {
      for (const encoding of ['base64', 'base64url']) {
        const text = Buffer.from(`${before}${KEY2}"}`).toString(encoding);
        const out = scrub(`echoed ${text} back`);
        assert.ok(!out.includes(text), `${encoding} after ${JSON.stringify(before)}: ${out}`);
        assert.match(out, /\*\*\*/);
      }
    }
    const hex = Buffer.from(KEY2).toString('hex');
    assert.equal(scrub(`hex ${hex} and ${hex.toUpperCase()}`), 'hex *** and ***');
    assert.equal(scrub(`escaped ${hex.replace(/../g, '%$&')}`), 'escaped ***');
  });
  test('spaced out character by character, with any whitespace', () => {
    assert.equal(scrub(`the key h k - T q 7 -\tZ x 9 -\nL m 3 was refused`), 'the key *** was refused');
    assert.equal(scrub('short words stay: hk Tq7'), 'short words stay: hk Tq7');
  });
});
