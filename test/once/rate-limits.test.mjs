// docs/TEAM-DECISIONS.md, HTTP behaviour and Running it: RATE_LIMIT per token or address, and
// TRUST_PROXY deciding which address a request comes from.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { sleep, waitFor, dispose } from '../api-kit.mjs';
import { SECRET, newSession, removeDir, request, runCli, startServer, tempDir } from '../helpers.mjs';
import { scrape, value } from '../prometheus.mjs';

describe('Rate limits: RATE_LIMIT and TRUST_PROXY', () => {
  /**
   * Requests one after the other until the first 429 (at most `burst` + 5). The bucket holds
   * `burst` tokens and refills one every 1000/rate ms, so when the first `burst` + 1 requests
   * came within that refill time, the (burst+1)-th must be the 429; on a slow machine a
   * refilled token may let one more through, and only "a 429 follows the burst" is checked.
   */
  async function untilLimited(burst, rate, call, ok) {
    const started = Date.now();
    const responses = [];
    let at;
    for (let i = 0; i < burst + 5; i++) {
      const r = await call(i);
      responses.push(r);
      if (i === burst) at = Date.now() - started;
      if (r.status === 429) break;
    }
    const statuses = responses.map((r) => r.status);
    assert.ok(statuses.slice(0, burst).every((x, i) => x === (typeof ok === 'function' ? ok(i) : ok)), `the first ${burst} pass: ${statuses}`);
    assert.equal(statuses.at(-1), 429, `a 429 follows the burst: ${statuses}`);
    if (at < 1000 / rate - 10) assert.equal(statuses.length, burst + 1, `request ${burst + 1} (after ${at} ms) is the one refused: ${statuses}`);
    return Object.assign(responses.at(-1), { index: responses.length - 1 });
  }

  test('RATE_LIMIT=5/s: the 6th quick request of a user gets 429 with Retry-After; others unaffected; then served', async () => {
    const s = await startServer({ env: { RATE_LIMIT: '5/s' } });
    try {
      const alice = s.as('alice');
      const bob = s.as('bob');
      // reads and writes alike: even requests list, odd ones create (the 6th is a write)
      const call = (i) => (i % 2 === 0 ? alice.get('/api/v1/chat-sessions') : alice.post('/api/v1/chat-sessions', newSession()));
      const limited = await untilLimited(5, 5, call, (i) => (i % 2 === 0 ? 200 : 201));
      assert.deepEqual(limited.body, { success: false, message: 'Too many requests' });
      assert.equal(limited.headers['content-type'], 'application/json; charset=utf-8');
      const retry = limited.headers['retry-after'];
      assert.match(retry ?? '', /^\d+$/, 'Retry-After is whole seconds');
      assert.ok(Number(retry) >= 1 && Number(retry) <= 2, `Retry-After ${retry}`);
      const b = [];
      for (let i = 0; i < 5; i++) b.push((await bob.get('/api/v1/chat-sessions')).status);
      assert.deepEqual(b, [200, 200, 200, 200, 200], 'another user has a bucket of their own');
      await sleep(Number(retry) * 1000);
      assert.equal((await alice.get('/api/v1/chat-sessions')).status, 200, 'served again after Retry-After');
      const m = await scrape(s);
      assert.equal(value(m, 'chat_session_api_rate_limited_total'), 1);
      const method = limited.index % 2 === 0 ? 'GET' : 'POST';
      assert.equal(value(m, 'chat_session_api_http_requests_total', { method, route: '/api/v1/chat-sessions', status: '429' }), 1);
      assert.equal((await alice.get('/api/v1/chat-sessions?archived=all')).body.data.length, Math.floor(limited.index / 2), 'the refused create stored nothing');
      await waitFor(() => s.logs().some((l) => l.msg === 'request' && l.status === 429 && l.user === 'alice'), 'the 429 request line');
    } finally {
      await dispose(s);
    }
  });

  test('[D-logs-3] requests without a valid token are limited per client address; a signed-in user there is not', async () => {
    const s = await startServer({ env: { RATE_LIMIT: '5/s' } });
    try {
      const limited = await untilLimited(5, 5, (i) => s.request('GET', '/api/v1/chat-sessions', i % 2 === 0 ? {} : { token: 'bad.token.here' }), 401);
      assert.deepEqual(limited.body, { success: false, message: 'Too many requests' });
      assert.match(limited.headers['retry-after'] ?? '', /^[1-9]\d*$/);
      assert.equal((await s.as('alice').get('/api/v1/chat-sessions')).status, 200);
    } finally {
      await dispose(s);
    }
  });

  test('/healthz and /metrics are not limited (and do not use up the address\'s budget)', async () => {
    const s = await startServer({ env: { RATE_LIMIT: '5/s' } });
    try {
      const statuses = [];
      for (let i = 0; i < 20; i++) {
        statuses.push((await s.request('GET', '/healthz')).status);
        statuses.push((await s.request('GET', '/metrics')).status);
      }
      assert.ok(statuses.every((x) => x === 200), String(statuses));
      assert.equal((await s.request('GET', '/api/v1/chat-sessions')).status, 401, 'the address still has its whole budget');
    } finally {
      await dispose(s);
    }
  });

  test('off by default: many quick requests never get 429', async () => {
    const s = await startServer();
    try {
      const alice = s.as('alice');
      const calls = [];
      for (let i = 0; i < 150; i++) calls.push(i % 3 === 0 ? s.request('GET', '/api/v1/chat-sessions') : alice.get('/api/v1/chat-sessions'));
      const statuses = (await Promise.all(calls)).map((r) => r.status);
      assert.equal(statuses.filter((x) => x === 429).length, 0);
      assert.equal(statuses.filter((x) => x === 200).length, 100);
    } finally {
      await dispose(s);
    }
  });

  test('RATE_LIMIT=600/m works: one second\'s worth (10) of quick requests pass, the rest get 429 with Retry-After', async () => {
    const s = await startServer({ env: { RATE_LIMIT: '600/m' } });
    try {
      // all at once, and counted against the time they took: the bucket holds 10 and gains one
      // each 100 ms, so however slow the machine, what passes is 10 plus what that time refilled
      const alice = s.as('alice');
      const started = Date.now();
      const answers = await Promise.all(Array.from({ length: 50 }, () => alice.get('/api/v1/chat-sessions')));
      const refilled = Math.ceil((Date.now() - started) / 100);
      const passed = answers.filter((r) => r.status === 200).length;
      assert.equal(passed + answers.filter((r) => r.status === 429).length, 50, 'each answer a 200 or a 429');
      assert.ok(passed >= 10 && passed <= 10 + refilled, `${passed} passed in ${refilled * 100} ms: the burst (10) and what that time refilled`);
      if (refilled < 40) assert.match(answers.find((r) => r.status === 429).headers['retry-after'] ?? '', /^[1-9]\d*$/);
    } finally {
      await dispose(s);
    }
  });

  test('bad RATE_LIMIT / TRUST_PROXY values stop the start with one clear line naming the setting', () => {
    const cases = [
      [{ RATE_LIMIT: 'fast' }, [], /RATE_LIMIT/],
      [{ RATE_LIMIT: '0/s' }, [], /RATE_LIMIT/],
      [{ RATE_LIMIT: '-5/s' }, [], /RATE_LIMIT/],
      [{ RATE_LIMIT: '5/h' }, [], /RATE_LIMIT/],
      [{ RATE_LIMIT: '5' }, [], /RATE_LIMIT/],
      [{ RATE_LIMIT: '/s' }, [], /RATE_LIMIT/],
      [{ RATE_LIMIT: '5/s/s' }, [], /RATE_LIMIT/],
      [{}, ['--rate-limit', 'lots'], /RATE_LIMIT/],
      [{ TRUST_PROXY: 'maybe' }, [], /TRUST_PROXY/],
    ];
    for (const [env, args, re] of cases) {
      const dir = tempDir();
      const r = runCli(args, { env: { DATA_DIR: dir, PORT: '0', AUTH_SECRET: SECRET, ...env }, cwd: dir });
      assert.equal(r.code, 2, JSON.stringify(env) + args);
      assert.match(r.stderr, re);
      assert.equal(r.stderr.trim().split('\n').length, 1, `one line: ${r.stderr}`);
      assert.equal(r.stdout, '');
      removeDir(dir);
    }
  });

  // one request a second, bucket of one: the second request from the same client within a second is refused
  test('[D-logs-3] TRUST_PROXY=on takes the last X-Forwarded-For entry: two clients behind a proxy, two buckets', async () => {
    const s = await startServer({ env: { RATE_LIMIT: '60/m', TRUST_PROXY: 'on' } });
    try {
      const from = (xff) => s.request('GET', '/api/v1/chat-sessions', { headers: { 'x-forwarded-for': xff } });
      assert.equal((await from('198.51.100.1')).status, 401);
      assert.equal((await from('198.51.100.1')).status, 429);
      assert.equal((await from('198.51.100.2')).status, 401, 'another client behind the proxy has its own bucket');
      assert.equal((await from('203.0.113.9, 198.51.100.1')).status, 429, 'a client-sent first entry does not change who it is');
      assert.equal((await from('198.51.100.1, 198.51.100.3')).status, 401, 'the proxy-appended last entry decides');
    } finally {
      await dispose(s);
    }
  });

  test("[D-logs-3] TRUST_PROXY=on trusts only an IP address as that entry; anything else counts as the socket's", async () => {
    const s = await startServer({ env: { RATE_LIMIT: '60/m', TRUST_PROXY: 'on' } });
    try {
      const from = (xff) => s.request('GET', '/api/v1/chat-sessions', { headers: { 'x-forwarded-for': xff } });
      assert.equal((await from('not-an-ip')).status, 401);
      assert.equal((await from(`junk-${'x'.repeat(2000)}`)).status, 429, 'the same bucket: the socket address');
      assert.equal((await from('2001:db8::1')).status, 401, 'an IPv6 literal is an address');
    } finally {
      await dispose(s);
    }
  });

  test('without TRUST_PROXY, X-Forwarded-For is ignored: every client of one address shares one bucket', async () => {
    const s = await startServer({ env: { RATE_LIMIT: '60/m' } });
    try {
      const from = (xff) => s.request('GET', '/api/v1/chat-sessions', { headers: { 'x-forwarded-for': xff } });
      assert.equal((await from('198.51.100.1')).status, 401);
      assert.equal((await from('198.51.100.2')).status, 429);
    } finally {
      await dispose(s);
    }
  });
});
