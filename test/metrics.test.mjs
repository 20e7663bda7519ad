// docs/TEAM-DECISIONS.md, HTTP behaviour and Running it: GET /metrics in the Prometheus text format,
// the counters and histograms it keeps, and METRICS=off.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { waitFor, dispose } from './api-kit.mjs';
import { STORE, newSession, request, startServer } from './helpers.mjs';
import { validateExposition, scrape, value, total } from './prometheus.mjs';


const ROUTES = [
  '/healthz',
  '/metrics',
  '/api/v1/openapi.json',
  '/api/v1/chat-sessions',
  '/api/v1/chat-sessions/:id',
  '/api/v1/chat-sessions/:id/turns',
  '/api/v1/chat-sessions/:id/archive',
  '/api/v1/chat-sessions/:id/unarchive',
  '/api/v1/providers',
  '/api/v1/providers/:id',
];

describe('Metrics: GET /metrics', () => {
  let s;
  let alice;
  before(async () => {
    s = await startServer();
    alice = s.as('alice');
  });
  after(() => dispose(s));

  test('GET /metrics needs no token and answers Prometheus text format (content-type text/plain; version=0.0.4)', async () => {
    for (const opts of [{}, { token: 'not.a.token' }, { token: alice.token }]) {
      const r = await s.request('GET', '/metrics', opts);
      assert.equal(r.status, 200);
      assert.match(r.headers['content-type'], /^text\/plain; version=0\.0\.4(; charset=utf-8)?$/);
      assert.ok(r.text.startsWith('# HELP '));
    }
  });

  test('the whole exposition is valid, line by line: HELP and TYPE, names, labels, values, histograms', async () => {
    // traffic of many kinds first, so every family has samples
    const sess = (await alice.post('/api/v1/chat-sessions', newSession())).body.data;
    await alice.post(`/api/v1/chat-sessions/${sess._id}/turns`, { role: 'user', content: 'hi' });
    await alice.get('/api/v1/chat-sessions/ffffffffffffffffffffffff');
    await alice.post('/api/v1/chat-sessions', {});
    await s.request('GET', '/api/v1/chat-sessions');
    await alice.get('/api/v1/providers');
    await s.request('HEAD', '/healthz');
    const { families } = validateExposition((await s.request('GET', '/metrics')).text);
    const want = {
      chat_session_api_http_requests_total: 'counter',
      chat_session_api_http_request_duration_seconds: 'histogram',
      chat_session_api_sessions: 'gauge',
      chat_session_api_turns: 'gauge',
      chat_session_api_store_bytes: 'gauge',
      chat_session_api_store_tokens: 'gauge',
      chat_session_api_commit_duration_seconds: 'histogram',
      chat_session_api_committed_writes_total: 'counter',
      ...{
        sqlite: { chat_session_api_sqlite_file_bytes: 'gauge', chat_session_api_sqlite_wal_bytes: 'gauge', chat_session_api_sqlite_search_unindexed: 'gauge', chat_session_api_sqlite_search_index_batches_total: 'counter', chat_session_api_sqlite_search_merge_steps_total: 'counter' },
      }[STORE],
      process_resident_memory_bytes: 'gauge',
      nodejs_eventloop_delay_seconds: 'histogram',
    };
    for (const [name, type] of Object.entries(want)) assert.equal(families.get(name)?.type, type, name);
  });

  test('requests by route pattern and status: the route label is the pattern, never a raw id', async () => {
    const ids = [];
    for (let i = 0; i < 3; i++) ids.push((await alice.post('/api/v1/chat-sessions', newSession())).body.data._id);
    const before = await scrape(s);
    const key = (route, status, method = 'GET') => ({ method, route, status: String(status) });
    for (const id of ids) assert.equal((await alice.get(`/api/v1/chat-sessions/${id}`)).status, 200);
    for (const id of ['ffffffffffffffffffffffff', 'not-an-id']) assert.equal((await alice.get(`/api/v1/chat-sessions/${id}`)).status, 404);
    assert.equal((await alice.put(`/api/v1/chat-sessions/${ids[0]}`, { name: 'x' })).status, 200);
    assert.equal((await s.request('GET', `/api/v1/chat-sessions/${ids[1]}`)).status, 401);
    assert.equal((await alice.get(`/api/v1/chat-sessions/${ids[2]}/turns`)).status, 200);
    const after = await scrape(s);
    const delta = (k) => value(after, 'chat_session_api_http_requests_total', k) - value(before, 'chat_session_api_http_requests_total', k);
    assert.equal(delta(key('/api/v1/chat-sessions/:id', 200)), 3);
    assert.equal(delta(key('/api/v1/chat-sessions/:id', 404)), 2);
    assert.equal(delta(key('/api/v1/chat-sessions/:id', 401)), 1);
    assert.equal(delta(key('/api/v1/chat-sessions/:id', 200, 'PUT')), 1);
    assert.equal(delta(key('/api/v1/chat-sessions/:id/turns', 200)), 1);
    assert.equal(delta(key('/metrics', 200)), 1, 'the scrape before is counted too');
    for (const smp of after) {
      if (smp.labels.route === undefined) continue;
      assert.ok(ROUTES.includes(smp.labels.route), `route label ${smp.labels.route} is a pattern`);
      assert.doesNotMatch(JSON.stringify(smp.labels), /[0-9a-f]{24}|not-an-id/);
      if (smp.labels.status !== undefined) assert.match(smp.labels.status, /^[1-5]\d\d$/);
    }
  });

  test('[D-logs-1] every request answered is counted, also a 404 or 405, under a fixed label, never the raw path', async () => {
    const before = await scrape(s);
    const sent = [
      ['GET', '/no/such/path/ffffffffffffffffffffffff'],
      ['GET', '/wp-login.php'],
      ['PATCH', '/api/v1/chat-sessions'],
      ['DELETE', '/healthz'],
    ];
    for (const [method, path] of sent) await s.request(method, path, { token: alice.token });
    const after = await scrape(s);
    const grew = total(after, 'chat_session_api_http_requests_total') - total(before, 'chat_session_api_http_requests_total');
    assert.equal(grew, sent.length + 1, 'each request answered (and the scrape before) is counted');
    assert.equal(total(after, 'chat_session_api_http_requests_total', (l) => l.status === '404') - total(before, 'chat_session_api_http_requests_total', (l) => l.status === '404'), 2);
    for (const smp of after) assert.doesNotMatch(JSON.stringify(smp.labels), /wp-login|no\/such|ffffffffffffffffffffffff/);
  });

  test('latency histogram by route: buckets cumulative, +Inf equals _count, _count equals the requests answered on that route', async () => {
    for (let i = 0; i < 5; i++) await alice.get('/api/v1/chat-sessions');
    const after = await scrape(s); // validateExposition checked cumulative buckets and +Inf = _count
    for (const route of ['/api/v1/chat-sessions', '/api/v1/chat-sessions/:id']) {
      for (const method of ['GET', 'POST', 'PUT']) {
        const requests = total(after, 'chat_session_api_http_requests_total', (l) => l.route === route && l.method === method);
        const count = value(after, 'chat_session_api_http_request_duration_seconds_count', { method, route });
        const inf = value(after, 'chat_session_api_http_request_duration_seconds_bucket', { method, route, le: '+Inf' });
        assert.equal(count, requests, `${method} ${route}`);
        assert.equal(inf, count, `${method} ${route}`);
      }
    }
    assert.ok(value(after, 'chat_session_api_http_request_duration_seconds_count', { method: 'GET', route: '/api/v1/chat-sessions' }) >= 5);
    assert.ok(value(after, 'chat_session_api_http_request_duration_seconds_sum', { method: 'GET', route: '/api/v1/chat-sessions' }) > 0);
  });

  test('sessions and turns stored (gauges) match what was created and deleted', async () => {
    const before = await scrape(s);
    const a = (await alice.post('/api/v1/chat-sessions', newSession())).body.data._id;
    const b = (await s.as('bob').post('/api/v1/chat-sessions', newSession())).body.data._id;
    const c = (await alice.post('/api/v1/chat-sessions', newSession())).body.data._id;
    for (const id of [a, a, b, c, c]) assert.equal((await alice.post(`/api/v1/chat-sessions/${id}/turns`, { role: 'user', content: 't' })).status, 201);
    let now = await scrape(s);
    assert.equal(value(now, 'chat_session_api_sessions') - value(before, 'chat_session_api_sessions'), 3);
    assert.equal(value(now, 'chat_session_api_turns') - value(before, 'chat_session_api_turns'), 5);
    assert.equal((await alice.del(`/api/v1/chat-sessions/${c}`)).status, 200);
    await alice.post(`/api/v1/chat-sessions/${a}/archive`, {});
    now = await scrape(s);
    assert.equal(value(now, 'chat_session_api_sessions') - value(before, 'chat_session_api_sessions'), 2, 'archived sessions are still stored; deleted ones are not');
    assert.equal(value(now, 'chat_session_api_turns') - value(before, 'chat_session_api_turns'), 3, 'a deleted session takes its turns along');
    // and the absolute numbers agree with the API
    const all = new Set();
    for (const u of ['alice', 'bob']) for (const x of (await s.as(u).get('/api/v1/chat-sessions?archived=all')).body.data) all.add(x._id);
    assert.equal(value(now, 'chat_session_api_sessions'), all.size);
    let turns = 0;
    for (const id of all) turns += (await alice.get(`/api/v1/chat-sessions/${id}/turns`)).body.data.length;
    assert.equal(value(now, 'chat_session_api_turns'), turns);
  });

  test('commit latency histogram: one count per group commit on every engine; committed writes count each write', async () => {
    const before = await scrape(s);
    const id = (await alice.post('/api/v1/chat-sessions', newSession())).body.data._id;
    await alice.post(`/api/v1/chat-sessions/${id}/turns`, { role: 'user', content: 'x' });
    await alice.put(`/api/v1/chat-sessions/${id}`, { name: 'y' });
    await alice.del(`/api/v1/chat-sessions/${id}`);
    await alice.get('/api/v1/chat-sessions'); // reads do not fsync
    const after = await scrape(s);
    assert.equal(value(after, 'chat_session_api_commit_duration_seconds_count') - value(before, 'chat_session_api_commit_duration_seconds_count'), 4);
    assert.ok(value(after, 'chat_session_api_commit_duration_seconds_sum') > value(before, 'chat_session_api_commit_duration_seconds_sum'));
    assert.equal(value(after, 'chat_session_api_committed_writes_total') - value(before, 'chat_session_api_committed_writes_total'), 4);
  });

  test('process memory: process_resident_memory_bytes is a plausible gauge; process_start_time_seconds is this process\'s start', async () => {
    const now = await scrape(s);
    const rss = value(now, 'process_resident_memory_bytes');
    assert.ok(Number.isInteger(rss) && rss > 5 * 1024 * 1024 && rss < 8 * 1024 ** 3, `rss ${rss}`);
    const started = value(now, 'process_start_time_seconds');
    assert.ok(Math.abs(started - Date.now() / 1000) < 120, `start ${started}`);
  });

  test('event-loop delay: a histogram without labels, sampled while the server runs, every sample in a bucket', async () => {
    const count = async () => value(await scrape(s), 'nodejs_eventloop_delay_seconds_count');
    const first = await count();
    await waitFor(async () => (await count()) > first, 'the event-loop delay to be sampled again');
    const now = await scrape(s);
    const series = now.filter((x) => x.family === 'nodejs_eventloop_delay_seconds');
    assert.ok(series.every((x) => x.name.endsWith('_sum') || x.name.endsWith('_count') || Object.keys(x.labels).join() === 'le'), 'only le labels');
    assert.equal(value(now, 'nodejs_eventloop_delay_seconds_bucket', { le: '+Inf' }), value(now, 'nodejs_eventloop_delay_seconds_count'));
    assert.ok(value(now, 'nodejs_eventloop_delay_seconds_sum') >= 0);
  });

  test('METRICS=off removes it: GET /metrics -> 404 Not found (and the OpenAPI document no longer lists it)', async () => {
    const off = await startServer({ env: { METRICS: 'off' } });
    try {
      const r = await off.request('GET', '/metrics');
      assert.equal(r.status, 404);
      assert.deepEqual(r.body, { success: false, message: 'Not found' });
      assert.equal((await off.as('alice').get('/metrics')).status, 404);
      const doc = (await off.request('GET', '/api/v1/openapi.json')).body;
      assert.equal(doc.paths['/metrics'], undefined);
      assert.equal((await off.request('GET', '/healthz')).status, 200);
    } finally {
      await dispose(off);
    }
  });
});
