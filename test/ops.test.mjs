// docs/TEAM-DECISIONS.md, HTTP behaviour and Running it: the operations features, on the real process.
// GET /metrics (Prometheus text), RATE_LIMIT and TRUST_PROXY, CORS_ORIGIN, SIGHUP reload of
// providers.json with /healthz reporting it, and the JSON log (levels, request lines, and no
// token, secret or apiKey ever written anywhere).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { SECRET, SERVER, STORE, ServerProcess, failingWrite, journalOnly, newSession, removeDir, request, runCli, sign, startServer, storeEnv, tempDir } from './helpers.mjs';

const JOURNAL = 'sessions.journal';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitFor(cond, what, ms = 5000) {
  const start = Date.now();
  while (!(await cond())) {
    if (Date.now() - start > ms) throw new Error(`timed out waiting for ${what}`);
    await sleep(15);
  }
}

/** Stops a server and removes its data directory, whatever state it is in. */
async function dispose(s) {
  if (s === undefined) return;
  await s.stop();
  removeDir(s.dataDir);
}

// ---------------------------------------------------------------------------------------
// Prometheus text exposition format (0.0.4), checked line by line.

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const FLOAT = /^(?:[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]?Inf|NaN)$/;
const TYPES = ['counter', 'gauge', 'histogram', 'summary', 'untyped'];

/** Parses `{a="x",b="y"}` strictly (escapes \\ \" \n only); returns the labels in order. */
function parseLabels(text, where) {
  const labels = [];
  let i = 0;
  while (i < text.length) {
    const m = /^([a-zA-Z_][a-zA-Z0-9_]*)="/.exec(text.slice(i));
    assert.ok(m, `${where}: bad label syntax at "${text.slice(i)}"`);
    i += m[0].length;
    let value = '';
    for (;;) {
      assert.ok(i < text.length, `${where}: unterminated label value`);
      const c = text[i];
      if (c === '"') {
        i++;
        break;
      }
      if (c === '\\') {
        const e = text[i + 1];
        assert.ok(e === '\\' || e === '"' || e === 'n', `${where}: bad escape \\${e} in a label value`);
        value += e === 'n' ? '\n' : e;
        i += 2;
        continue;
      }
      assert.notEqual(c, '\n', `${where}: raw newline in a label value`);
      value += c;
      i++;
    }
    assert.ok(LABEL_NAME.test(m[1]) && !m[1].startsWith('__'), `${where}: label name ${m[1]}`);
    assert.equal(labels.some(([k]) => k === m[1]), false, `${where}: label ${m[1]} twice`);
    labels.push([m[1], value]);
    if (text[i] === ',') i++;
    else assert.equal(i, text.length, `${where}: expected , or } after a label`);
  }
  return labels;
}

function parseValue(v) {
  if (/^[+]?Inf$/.test(v)) return Infinity;
  if (v === '-Inf') return -Infinity;
  return Number(v);
}

/**
 * Validates a whole exposition: HELP/TYPE lines, metric and label syntax, numeric values,
 * families grouped and declared before their samples, no duplicate series, counters named
 * *_total and never negative, histograms with cumulative buckets ending at +Inf = _count.
 * Returns the samples: [{name, labels: {..}, value}].
 */
function validateExposition(text) {
  assert.ok(text.length > 0 && text.endsWith('\n'), 'the exposition ends with a newline');
  const families = new Map(); // name -> {type, help}
  const samples = [];
  const series = new Set();
  const finished = new Set();
  let current;
  const familyOf = (name) => {
    if (families.has(name)) return name;
    for (const suffix of ['_bucket', '_sum', '_count']) {
      if (name.endsWith(suffix)) {
        const base = name.slice(0, -suffix.length);
        const f = families.get(base);
        if (f !== undefined && (f.type === 'histogram' || (f.type === 'summary' && suffix !== '_bucket'))) return base;
      }
    }
    return undefined;
  };
  const lines = text.slice(0, -1).split('\n');
  lines.forEach((line, idx) => {
    const where = `line ${idx + 1} "${line}"`;
    assert.notEqual(line.trim(), '', `${where}: blank line`);
    assert.equal(line, line.trimEnd(), `${where}: trailing whitespace`);
    if (line.startsWith('#')) {
      const help = /^# HELP (\S+) (.*)$/.exec(line);
      const type = /^# TYPE (\S+) (\S+)$/.exec(line);
      if (help !== null) {
        assert.match(help[1], METRIC_NAME, where);
        assert.ok(help[2].trim().length > 0, `${where}: empty help`);
        assert.doesNotMatch(help[2].replace(/\\[\\n]/g, ''), /\\/, `${where}: bad escape in help`);
        const f = families.get(help[1]) ?? { help: undefined, type: undefined };
        assert.equal(f.help, undefined, `${where}: HELP twice`);
        assert.equal(finished.has(help[1]) || samples.some((s) => familyOf(s.name) === help[1]), false, `${where}: HELP after samples`);
        f.help = help[2];
        families.set(help[1], f);
        return;
      }
      if (type !== null) {
        assert.match(type[1], METRIC_NAME, where);
        assert.ok(TYPES.includes(type[2]), `${where}: unknown type ${type[2]}`);
        const f = families.get(type[1]) ?? { help: undefined, type: undefined };
        assert.equal(f.type, undefined, `${where}: TYPE twice`);
        assert.equal(samples.some((s) => familyOf(s.name) === type[1]), false, `${where}: TYPE after samples`);
        f.type = type[2];
        families.set(type[1], f);
        if (type[2] === 'counter') assert.match(type[1], /_total$/, `${where}: a counter is named *_total`);
        return;
      }
      assert.fail(`${where}: a comment that is neither HELP nor TYPE`);
    }
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: (-?\d+))?$/.exec(line);
    assert.ok(m, `${where}: not a sample line`);
    const [, name, labelText, valueText] = m;
    assert.match(valueText, FLOAT, `${where}: value`);
    const labels = parseLabels(labelText ?? '', where);
    const family = familyOf(name);
    assert.ok(family !== undefined, `${where}: sample of an undeclared family`);
    const f = families.get(family);
    assert.ok(f.type !== undefined && f.help !== undefined, `${where}: family ${family} has HELP and TYPE before its samples`);
    if (current !== family) {
      assert.equal(finished.has(family), false, `${where}: the samples of ${family} are not grouped together`);
      if (current !== undefined) finished.add(current);
      current = family;
    }
    const key = `${name}{${labels.map(([k, v]) => `${k}=${JSON.stringify(v)}`).sort().join(',')}}`;
    assert.equal(series.has(key), false, `${where}: duplicate series`);
    series.add(key);
    const value = parseValue(valueText);
    if (f.type === 'counter' || f.type === 'histogram') assert.ok(value >= 0, `${where}: negative`);
    if (f.type === 'gauge') assert.ok(Number.isFinite(value), `${where}: gauge not finite`);
    samples.push({ name, family, labels: Object.fromEntries(labels), value });
  });

  // histograms: per series (labels without le), buckets ascending and cumulative, +Inf = _count
  for (const [name, f] of families) {
    if (f.type !== 'histogram') continue;
    const groups = new Map();
    for (const s of samples.filter((x) => x.family === name)) {
      const { le, ...rest } = s.labels;
      const key = JSON.stringify(Object.entries(rest).sort());
      const g = groups.get(key) ?? { buckets: [], sum: undefined, count: undefined };
      if (s.name === `${name}_bucket`) {
        assert.ok(le !== undefined, `${name}_bucket without le`);
        assert.match(le, FLOAT);
        g.buckets.push([parseValue(le), s.value]);
      } else if (s.name === `${name}_sum`) g.sum = s.value;
      else if (s.name === `${name}_count`) g.count = s.value;
      else assert.fail(`${s.name} in histogram ${name}`);
      groups.set(key, g);
    }
    for (const [key, g] of groups) {
      assert.ok(g.buckets.length > 0 && g.sum !== undefined && g.count !== undefined, `${name}${key}: buckets, _sum and _count`);
      for (let i = 1; i < g.buckets.length; i++) {
        assert.ok(g.buckets[i][0] > g.buckets[i - 1][0], `${name}${key}: le ascending`);
        assert.ok(g.buckets[i][1] >= g.buckets[i - 1][1], `${name}${key}: buckets cumulative`);
      }
      assert.equal(g.buckets.at(-1)[0], Infinity, `${name}${key}: the last bucket is +Inf`);
      assert.equal(g.buckets.at(-1)[1], g.count, `${name}${key}: +Inf = _count`);
      assert.ok(g.count === 0 || g.sum > 0, `${name}${key}: sum`);
    }
  }
  return { families, samples };
}

async function scrape(s) {
  const r = await s.request('GET', '/metrics');
  assert.equal(r.status, 200);
  return validateExposition(r.text).samples;
}

/** The value of one series; labels must match exactly the given ones (plus any not named when loose). */
function value(samples, name, labels = {}) {
  const hits = samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v) && Object.keys(s.labels).length === Object.keys(labels).length);
  assert.ok(hits.length <= 1, `${name} ${JSON.stringify(labels)} is one series`);
  return hits[0]?.value ?? 0;
}

function total(samples, name, pred = () => true) {
  return samples.filter((s) => s.name === name && pred(s.labels)).reduce((a, s) => a + s.value, 0);
}

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

  test('the whole exposition is valid, line by line: HELP/TYPE lines, metric name syntax, label syntax, numeric values, histograms', async () => {
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
      chat_session_api_commit_duration_seconds: 'histogram',
      chat_session_api_committed_writes_total: 'counter',
      ...{
        journal: { chat_session_api_journal_bytes: 'gauge', chat_session_api_compactions_total: 'counter' },
        sqlite: { chat_session_api_sqlite_file_bytes: 'gauge', chat_session_api_sqlite_wal_bytes: 'gauge' },
      }[STORE],
      process_resident_memory_bytes: 'gauge',
      nodejs_eventloop_delay_seconds: 'histogram',
    };
    for (const [name, type] of Object.entries(want)) assert.equal(families.get(name)?.type, type, name);
  });

  test('requests by route pattern and status: counters move after requests; the route label is the pattern like /api/v1/chat-sessions/:id, never a raw id', async () => {
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

  test('every request answered is counted, also those that match no route (404) or no method (405), under a fixed label, never the raw path', async () => {
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

  test('journal bytes equals the journal file size', async (t) => {
    if (journalOnly(t)) return;
    for (let i = 0; i < 3; i++) await alice.post('/api/v1/chat-sessions', newSession({ name: `size ${i}` }));
    const now = await scrape(s);
    assert.equal(value(now, 'chat_session_api_journal_bytes'), statSync(join(s.dataDir, JOURNAL)).size);
  });

  test('commit latency histogram (one per group commit, on every engine): its count grows by one per (sequential) write, its sum grows; committed writes count each write', async () => {
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

  test('event-loop delay: nodejs_eventloop_delay_seconds is a histogram without labels, sampled while the server runs (its count grows with no traffic), every sample in a bucket', async () => {
    const count = async () => value(await scrape(s), 'nodejs_eventloop_delay_seconds_count');
    const first = await count();
    await waitFor(async () => (await count()) > first, 'the event-loop delay to be sampled again');
    const now = await scrape(s);
    const series = now.filter((x) => x.family === 'nodejs_eventloop_delay_seconds');
    assert.ok(series.every((x) => x.name.endsWith('_sum') || x.name.endsWith('_count') || Object.keys(x.labels).join() === 'le'), 'only le labels');
    assert.equal(value(now, 'nodejs_eventloop_delay_seconds_bucket', { le: '+Inf' }), value(now, 'nodejs_eventloop_delay_seconds_count'));
    assert.ok(value(now, 'nodejs_eventloop_delay_seconds_sum') >= 0);
  });

  test('compactions counter counts journal compactions (and journal bytes still equals the file size after one)', async (t) => {
    if (journalOnly(t)) return;
    const c = await startServer({ env: { COMPACT_MIN_SIZE: '8kb' } });
    try {
      const u = c.as('alice');
      const id = (await u.post('/api/v1/chat-sessions', newSession())).body.data._id;
      assert.equal(value(await scrape(c), 'chat_session_api_compactions_total'), 0);
      for (let i = 0; i < 100; i++) await u.put(`/api/v1/chat-sessions/${id}`, { name: `rename ${i} ${'z'.repeat(200)}` });
      await waitFor(() => c.logs().some((l) => l.msg === 'journal compacted'), 'a compaction');
      // while one is under way the journal is two files: compare once it is one again
      await waitFor(() => !existsSync(join(c.dataDir, `${JOURNAL}.next`)), 'the journal to be one file');
      const now = await scrape(c);
      const n = value(now, 'chat_session_api_compactions_total');
      assert.ok(n >= 1, `compactions ${n}`);
      // log lines are written every few milliseconds: wait for them to catch up with the counter
      await waitFor(() => c.logs().filter((l) => l.msg === 'journal compacted').length >= n, 'the log lines');
      assert.equal(n, c.logs().filter((l) => l.msg === 'journal compacted').length, 'one per compaction logged');
      assert.equal(value(now, 'chat_session_api_journal_bytes'), statSync(join(c.dataDir, JOURNAL)).size);
    } finally {
      await dispose(c);
    }
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

// ---------------------------------------------------------------------------------------

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

  test('RATE_LIMIT=5/s: the 6th quick request by the same user gets 429 {success:false, message:"Too many requests"} with Retry-After (integer seconds >= 1); another user is not affected; after Retry-After seconds the user is served again', async () => {
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

  test('unauthenticated requests (no or bad token) are limited per client address: the 401s turn into 429 past the limit; a signed-in user at the same address is not affected', async () => {
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

  test('RATE_LIMIT=600/m works: one second\'s worth (10) of quick requests pass, the 11th gets 429 with Retry-After', async () => {
    const s = await startServer({ env: { RATE_LIMIT: '600/m' } });
    try {
      const alice = s.as('alice');
      const limited = await untilLimited(10, 10, () => alice.get('/api/v1/chat-sessions'), 200);
      assert.match(limited.headers['retry-after'] ?? '', /^[1-9]\d*$/);
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
  test('TRUST_PROXY=on takes the client address from the last X-Forwarded-For entry: two clients behind a proxy get separate buckets, and a spoofed first entry does not help', async () => {
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

  test('TRUST_PROXY=on only trusts an IP address as the last X-Forwarded-For entry: anything else counts against the socket address (so junk values cannot mint buckets)', async () => {
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

// ---------------------------------------------------------------------------------------

describe('CORS: CORS_ORIGIN', () => {
  const ORIGIN = 'https://chat.example.com';
  let s;
  let alice;
  before(async () => {
    s = await startServer({ env: { CORS_ORIGIN: ORIGIN } });
    alice = s.as('alice');
  });
  after(() => dispose(s));

  const list = (h) => (h ?? '').split(',').map((x) => x.trim().toLowerCase()).filter((x) => x !== '');
  const preflight = (srv, path, origin, method = 'PUT') =>
    srv.request('OPTIONS', path, { headers: { origin, 'access-control-request-method': method, 'access-control-request-headers': 'authorization, content-type, if-match' } });

  test('preflight OPTIONS with Origin and Access-Control-Request-Method answers 204 with Allow-Origin, Allow-Methods (the route\'s methods), Allow-Headers (Authorization, Content-Type, If-Match), Max-Age; no token needed', async () => {
    const cases = [
      ['/api/v1/chat-sessions/665f1c2a9b1e8a0012ab34c1', 'PUT', ['GET', 'PUT', 'DELETE'], ['POST']],
      ['/api/v1/chat-sessions', 'POST', ['GET', 'POST'], ['PUT', 'DELETE']],
      ['/api/v1/chat-sessions/665f1c2a9b1e8a0012ab34c1/turns', 'POST', ['GET', 'POST'], ['PUT', 'DELETE']],
      ['/api/v1/chat-sessions/665f1c2a9b1e8a0012ab34c1/archive', 'POST', ['POST'], ['GET', 'PUT', 'DELETE']],
      ['/api/v1/providers', 'GET', ['GET'], ['POST', 'PUT', 'DELETE']],
    ];
    for (const [path, method, allowed, notAllowed] of cases) {
      const r = await preflight(s, path, ORIGIN, method);
      assert.equal(r.status, 204, path);
      assert.equal(r.text, '');
      assert.equal(r.headers['access-control-allow-origin'], ORIGIN, path);
      const methods = list(r.headers['access-control-allow-methods']);
      for (const m of allowed) assert.ok(methods.includes(m.toLowerCase()), `${path}: ${m} in ${methods}`);
      for (const m of notAllowed) assert.equal(methods.includes(m.toLowerCase()), false, `${path}: ${m} not in ${methods}`);
      const headers = list(r.headers['access-control-allow-headers']);
      for (const h of ['authorization', 'content-type', 'if-match']) assert.ok(headers.includes(h), `${path}: ${h} in ${headers}`);
      assert.match(r.headers['access-control-max-age'] ?? '', /^[1-9]\d*$/);
      assert.ok(list(r.headers.vary).includes('origin'), `${path}: Vary: Origin`);
      assert.equal(r.headers['www-authenticate'], undefined, 'no authentication asked for');
    }
  });

  test('responses to an allowed origin carry Access-Control-Allow-Origin, expose ETag and X-Request-Id, and Vary: Origin (errors too, so the browser can read them)', async () => {
    const created = await alice.post('/api/v1/chat-sessions', newSession(), { headers: { origin: ORIGIN } });
    assert.equal(created.status, 201);
    const got = await alice.get(`/api/v1/chat-sessions/${created.body.data._id}`, { headers: { origin: ORIGIN } });
    const unauth = await s.request('GET', '/api/v1/chat-sessions', { headers: { origin: ORIGIN } });
    const missing = await alice.get('/api/v1/chat-sessions/ffffffffffffffffffffffff', { headers: { origin: ORIGIN } });
    assert.equal(unauth.status, 401);
    assert.equal(missing.status, 404);
    assert.ok(got.headers.etag);
    for (const r of [created, got, unauth, missing]) {
      assert.equal(r.headers['access-control-allow-origin'], ORIGIN);
      const exposed = list(r.headers['access-control-expose-headers']);
      assert.ok(exposed.includes('etag'), `ETag exposed: ${exposed}`);
      assert.ok(exposed.includes('x-request-id'), `X-Request-Id exposed: ${exposed}`);
      assert.ok(list(r.headers.vary).includes('origin'));
      assert.equal(r.headers['access-control-allow-credentials'], undefined, 'tokens travel in headers, not cookies');
    }
  });

  test('a disallowed origin gets no Access-Control-Allow-Origin (preflight or request); neither does a look-alike (other scheme, port or subdomain)', async () => {
    for (const origin of ['https://evil.example.com', 'http://chat.example.com', 'https://chat.example.com:8443', 'https://chat.example.com.evil.net', 'null']) {
      const p = await preflight(s, '/api/v1/chat-sessions', origin, 'POST');
      assert.equal(p.headers['access-control-allow-origin'], undefined, origin);
      assert.equal(p.headers['access-control-allow-methods'], undefined, origin);
      const r = await alice.get('/api/v1/chat-sessions', { headers: { origin } });
      assert.equal(r.status, 200);
      assert.equal(r.headers['access-control-allow-origin'], undefined, origin);
      assert.equal(r.headers['access-control-expose-headers'], undefined, origin);
    }
    // a request without Origin (curl, a server) is served as usual, without CORS headers
    const plain = await alice.get('/api/v1/chat-sessions');
    assert.equal(plain.headers['access-control-allow-origin'], undefined);
  });

  test('a 429 to an allowed origin carries Access-Control-Allow-Origin and exposes Retry-After, so a browser client can back off', async () => {
    const both = await startServer({ env: { CORS_ORIGIN: ORIGIN, RATE_LIMIT: '2/s' } });
    try {
      const u = both.as('u');
      let r;
      for (let i = 0; i < 8 && r?.status !== 429; i++) r = await u.get('/api/v1/chat-sessions', { headers: { origin: ORIGIN } });
      assert.equal(r.status, 429);
      assert.equal(r.headers['access-control-allow-origin'], ORIGIN);
      assert.ok(list(r.headers['access-control-expose-headers']).includes('retry-after'));
      const p = await preflight(both, '/api/v1/chat-sessions', ORIGIN, 'GET');
      assert.equal(p.status, 204, 'a preflight is not refused for the rate limit of the request it precedes');
    } finally {
      await dispose(both);
    }
  });

  test('CORS_ORIGIN as a comma-separated list allows each listed origin (echoed back exactly) and no other', async () => {
    const two = await startServer({ env: { CORS_ORIGIN: 'https://a.example.com, https://b.example.com:8443' } });
    try {
      for (const origin of ['https://a.example.com', 'https://b.example.com:8443']) {
        const p = await preflight(two, '/api/v1/chat-sessions', origin, 'POST');
        assert.equal(p.status, 204);
        assert.equal(p.headers['access-control-allow-origin'], origin);
        const r = await two.as('u').get('/api/v1/chat-sessions', { headers: { origin } });
        assert.equal(r.headers['access-control-allow-origin'], origin);
      }
      for (const origin of ['https://c.example.com', 'https://b.example.com']) {
        const r = await two.as('u').get('/api/v1/chat-sessions', { headers: { origin } });
        assert.equal(r.headers['access-control-allow-origin'], undefined, origin);
      }
    } finally {
      await dispose(two);
    }
  });

  test('CORS_ORIGIN=* allows any origin', async () => {
    const any = await startServer({ env: { CORS_ORIGIN: '*' } });
    try {
      for (const origin of ['https://x.example', 'http://localhost:5173']) {
        const p = await preflight(any, '/api/v1/chat-sessions/665f1c2a9b1e8a0012ab34c1', origin, 'DELETE');
        assert.equal(p.status, 204);
        assert.equal(p.headers['access-control-allow-origin'], '*');
        const r = await any.as('u').get('/api/v1/chat-sessions', { headers: { origin } });
        assert.equal(r.headers['access-control-allow-origin'], '*');
        assert.ok(list(r.headers['access-control-expose-headers']).includes('etag'));
      }
    } finally {
      await dispose(any);
    }
  });

  test('without CORS_ORIGIN: no CORS headers at all, and OPTIONS -> 405 Method not allowed', async () => {
    const none = await startServer();
    try {
      const p = await preflight(none, '/api/v1/chat-sessions', ORIGIN, 'POST');
      assert.equal(p.status, 405);
      assert.deepEqual(p.body, { success: false, message: 'Method not allowed' });
      assert.ok(p.headers.allow);
      const r = await none.as('u').get('/api/v1/chat-sessions', { headers: { origin: ORIGIN } });
      assert.equal(r.status, 200);
      for (const res of [p, r]) {
        const cors = Object.keys(res.headers).filter((h) => h.startsWith('access-control-'));
        assert.deepEqual(cors, [], 'no access-control-* header');
      }
    } finally {
      await dispose(none);
    }
  });
});

// ---------------------------------------------------------------------------------------

describe('Reload: SIGHUP re-reads providers.json', () => {
  const P1 = { _id: 'cccccccccccccccccccccc01', name: 'One', apiKey: 'sk-reload-one-7f3a9c' };
  const P2 = { _id: 'cccccccccccccccccccccc02', name: 'Two' };
  const P3 = { _id: 'cccccccccccccccccccccc03', name: 'Three', apiKey: 'sk-reload-three-b81e44' };

  async function health(s) {
    const r = await s.request('GET', '/healthz');
    assert.equal(r.status, 200);
    return r.body.data.providers;
  }

  /** Sends SIGHUP and waits until the server logged the outcome of this reload. */
  async function hup(s) {
    const count = () => s.logs().filter((l) => /^providers reload/.test(l.msg)).length;
    const before = count();
    s.child.kill('SIGHUP');
    await waitFor(() => count() > before, 'the reload log line');
    return s.logs().filter((l) => /^providers reload/.test(l.msg)).at(-1);
  }

  test('SIGHUP re-reads providers.json; GET /healthz reports the providers\' count and load time, which change after a reload', async () => {
    const s = await startServer({ providers: [P1, P2] });
    try {
      const first = await health(s);
      assert.equal(first.count, 2);
      assert.match(first.loadedAt, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
      assert.ok(Math.abs(Date.parse(first.loadedAt) - Date.now()) < 60_000);
      await sleep(5);
      writeFileSync(join(s.dataDir, 'providers.json'), JSON.stringify([P1, P2, P3]));
      const line = await hup(s);
      assert.equal(line.msg, 'providers reloaded');
      assert.equal(line.count, 3);
      const second = await health(s);
      assert.equal(second.count, 3);
      assert.ok(Date.parse(second.loadedAt) > Date.parse(first.loadedAt), 'loadedAt moved');
      const list = await s.as('alice').get('/api/v1/providers');
      assert.deepEqual(list.body.data.map((p) => p.name), ['One', 'Three', 'Two']);
      assert.equal((await s.as('alice').get(`/api/v1/providers/${P3._id}`)).body.data.hasApiKey, true);
      assert.equal((await s.request('GET', '/healthz')).status, 200, 'still serving');
    } finally {
      await dispose(s);
    }
  });

  test('a bad file keeps the old list and logs why (naming the file and the problem, never the apiKey); healthz keeps the old count and load time', async () => {
    const s = await startServer({ providers: [P1, P2] });
    try {
      const good = await health(s);
      const listBefore = (await s.as('alice').get('/api/v1/providers')).text;
      const badFiles = [
        ['[{"_id":"cccccccccccccccccccccc09","name":"Nine","apiKey":"sk-bad-json-5d2e11"', /not valid JSON/],
        [JSON.stringify([P1, { _id: 'short', name: 'X', apiKey: 'sk-bad-id-a90f37' }]), /entry 2 .*_id must be 24 hex characters/],
        [JSON.stringify([{ ...P3, name: '   ', apiKey: 'sk-bad-name-66c0de' }]), /entry 1 .*name must be a non-blank string/],
        [JSON.stringify({ providers: [{ ...P1, apiKey: 'sk-not-array-0b7d52' }] }), /JSON array/],
        [JSON.stringify([P1, { ...P2, _id: P1._id.toUpperCase(), apiKey: 'sk-dup-id-e3f104' }]), /repeats entry 1/],
      ];
      for (const [text, why] of badFiles) {
        writeFileSync(join(s.dataDir, 'providers.json'), text);
        const line = await hup(s);
        assert.equal(line.msg, 'providers reload failed; keeping the previous list');
        assert.equal(line.level, 'error');
        assert.match(line.reason, /providers\.json/);
        assert.match(line.reason, why);
        assert.equal(line.count, 2, 'says how many providers it keeps');
        assert.deepEqual(await health(s), good, 'healthz: same count, same load time');
        assert.equal((await s.as('alice').get('/api/v1/providers')).text, listBefore, 'the old list is served');
      }
      for (const key of ['sk-bad-json-5d2e11', 'sk-bad-id-a90f37', 'sk-bad-name-66c0de', 'sk-not-array-0b7d52', 'sk-dup-id-e3f104', P1.apiKey]) {
        assert.equal((s.stdout + s.stderr).includes(key), false, `${key} was logged`);
      }
    } finally {
      await dispose(s);
    }
  });

  test('a deleted providers file reloads as an empty list (healthz count 0, new load time), and a file put back is picked up again', async () => {
    const s = await startServer({ providers: [P1, P2] });
    try {
      const first = await health(s);
      await sleep(5);
      unlinkSync(join(s.dataDir, 'providers.json'));
      const line = await hup(s);
      assert.equal(line.msg, 'providers reloaded');
      assert.equal(line.count, 0);
      const h = await health(s);
      assert.equal(h.count, 0);
      assert.ok(Date.parse(h.loadedAt) > Date.parse(first.loadedAt));
      assert.deepEqual((await s.as('alice').get('/api/v1/providers')).body, { success: true, data: [] });
      assert.equal((await s.as('alice').get(`/api/v1/providers/${P1._id}`)).status, 404);
      writeFileSync(join(s.dataDir, 'providers.json'), JSON.stringify([P3]));
      await hup(s);
      assert.equal((await health(s)).count, 1);
      assert.equal((await s.as('alice').get(`/api/v1/providers/${P3._id}`)).status, 200);
    } finally {
      await dispose(s);
    }
  });
});

// ---------------------------------------------------------------------------------------

/** A port that was free a moment ago. */
function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

const quiet = new Set();
process.on('exit', () => {
  for (const c of quiet) c.kill('SIGKILL');
});

/**
 * Starts the server on a port chosen here, for log levels that do not print the "listening"
 * line the harness waits for; ready when /healthz answers.
 */
async function startOnFixedPort({ env = {}, providers } = {}) {
  const port = await freePort();
  const dataDir = tempDir();
  if (providers !== undefined) writeFileSync(join(dataDir, 'providers.json'), JSON.stringify(providers));
  const child = spawn(process.execPath, [SERVER], {
    cwd: dataDir,
    env: { PATH: process.env.PATH, HOME: process.env.HOME, PORT: String(port), HOST: '127.0.0.1', DATA_DIR: dataDir, AUTH_SECRET: SECRET, ...storeEnv(dataDir), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  quiet.add(child);
  child.on('exit', () => quiet.delete(child));
  const s = new ServerProcess(child, dataDir);
  s.port = port;
  s.url = `http://127.0.0.1:${port}`;
  const started = Date.now();
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`server exited: ${s.stderr}${s.stdout}`);
    try {
      if ((await request(s.url, 'GET', '/healthz', { keepAlive: false })).status === 200) return s;
    } catch {
      // not listening yet
    }
    if (Date.now() - started > 10_000) {
      child.kill('SIGKILL');
      throw new Error('server did not start');
    }
    await sleep(20);
  }
}

describe('Logs', () => {
  test('every stdout line is JSON with time, level and msg; nothing on stderr', async () => {
    const s = await startServer({ providers: null });
    try {
      const u = s.as('alice');
      const id = (await u.post('/api/v1/chat-sessions', newSession())).body.data._id;
      await u.get(`/api/v1/chat-sessions/${id}`);
      await u.get('/nope');
      await s.request('GET', '/api/v1/chat-sessions', { token: 'x.y.z' });
      s.child.kill('SIGHUP');
      await waitFor(() => s.logs().some((l) => l.msg === 'providers reloaded'), 'reload');
      await s.stop();
      const lines = s.stdout.split('\n');
      assert.equal(lines.pop(), '', 'ends with a newline');
      assert.ok(lines.length >= 8);
      for (const line of lines) {
        const l = JSON.parse(line);
        assert.equal(typeof l, 'object');
        assert.match(l.time, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/, line);
        assert.ok(['debug', 'info', 'warn', 'error'].includes(l.level), line);
        assert.equal(typeof l.msg, 'string', line);
        assert.notEqual(l.msg, '', line);
      }
      assert.equal(s.stderr, '');
    } finally {
      removeDir(s.dataDir);
    }
  });

  test('request lines carry reqId, method, route pattern, status, ms and user; a session id never appears in a request line', async () => {
    const s = await startServer();
    try {
      const u = s.as('alice');
      const ids = [];
      const sent = new Map(); // request id -> [method, route, status, user]
      let n = 0;
      const call = async (method, path, route, opts = {}, user = 'alice') => {
        const reqId = `req-${++n}`;
        const r = await s.request(method, path, { token: u.token, ...opts, headers: { 'x-request-id': reqId } });
        sent.set(reqId, [method, route, r.status, user]);
        return r;
      };
      for (let i = 0; i < 2; i++) ids.push((await call('POST', '/api/v1/chat-sessions', '/api/v1/chat-sessions', { json: newSession() })).body.data._id);
      await call('GET', `/api/v1/chat-sessions/${ids[0]}`, '/api/v1/chat-sessions/:id');
      await call('PUT', `/api/v1/chat-sessions/${ids[0]}`, '/api/v1/chat-sessions/:id', { json: { name: 'n' } });
      await call('POST', `/api/v1/chat-sessions/${ids[0]}/turns`, '/api/v1/chat-sessions/:id/turns', { json: { role: 'user', content: 'c' } });
      await call('GET', `/api/v1/chat-sessions/${ids[0]}/turns?limit=1`, '/api/v1/chat-sessions/:id/turns');
      await call('POST', `/api/v1/chat-sessions/${ids[1]}/archive`, '/api/v1/chat-sessions/:id/archive', { json: {} });
      await call('DELETE', `/api/v1/chat-sessions/${ids[1]}`, '/api/v1/chat-sessions/:id');
      await call('GET', `/api/v1/chat-sessions/${ids[1]}`, '/api/v1/chat-sessions/:id');
      await call('GET', '/api/v1/chat-sessions/eeeeeeeeeeeeeeeeeeeeeeee', '/api/v1/chat-sessions/:id');
      await call('GET', `/api/v1/chat-sessions/${ids[0]}`, '/api/v1/chat-sessions/:id', { token: 'bad.token.value' }, null);
      await call('GET', `/api/v1/providers/665f1c2a9b1e8a0012ab34c1`, '/api/v1/providers/:id');
      await call('GET', `/api/v1/chat-sessions?projectId=${ids[0]}`, '/api/v1/chat-sessions');
      await call('GET', `/api/v1/chat-sessions/${ids[0]}/nothing-here`, null, {}, null); // no route: never authenticated, so no user
      await waitFor(() => s.logs().filter((l) => l.msg === 'request').length >= n, 'the request lines');
      const lines = s.logs().filter((l) => l.msg === 'request');
      for (const [reqId, [method, route, status, user]] of sent) {
        const mine = lines.filter((l) => l.reqId === reqId);
        assert.equal(mine.length, 1, `${reqId}: one line per request`);
        const l = mine[0];
        assert.equal(l.level, 'info');
        assert.equal(l.method, method, reqId);
        assert.equal(l.route, route, reqId);
        assert.equal(l.status, status, reqId);
        assert.equal(typeof l.ms, 'number');
        assert.ok(l.ms >= 0 && l.ms < 10_000);
        assert.equal(l.user, user, reqId);
      }
      const text = s.stdout.split('\n').filter((x) => x.includes('"msg":"request"')).join('\n');
      for (const id of [...ids, 'eeeeeeeeeeeeeeeeeeeeeeee', '665f1c2a9b1e8a0012ab34c1']) assert.equal(text.includes(id), false, `${id} in a request line`);
    } finally {
      await dispose(s);
    }
  });

  test('request lines are written in place: users needing JSON escapes, non-ASCII users and users of the longest sub (200 characters) come out exactly; HEAD is logged as HEAD on the GET route', async () => {
    const s = await startServer();
    try {
      const users = ['plain-user', 'quote"back\\slash', 'tab\there', 'ünïcødé-用户-🙂', 'x'.repeat(200), '\u0001'.repeat(200)];
      const sent = new Map(); // request id -> user
      let n = 0;
      for (const name of users) {
        const reqId = `esc-${++n}`;
        const r = await s.request('GET', '/api/v1/chat-sessions', { token: s.as(name).token, headers: { 'x-request-id': reqId } });
        assert.equal(r.status, 200);
        sent.set(reqId, name);
      }
      const head = await s.request('HEAD', '/api/v1/chat-sessions', { token: s.as('alice').token, headers: { 'x-request-id': 'head-1' } });
      assert.equal(head.status, 200);
      await waitFor(() => s.logs().filter((l) => l.msg === 'request' && (l.reqId.startsWith('esc-') || l.reqId === 'head-1')).length >= n + 1, 'the request lines');
      const lines = s.logs().filter((l) => l.msg === 'request');
      for (const [reqId, user] of sent) {
        const mine = lines.filter((l) => l.reqId === reqId);
        assert.equal(mine.length, 1, reqId);
        assert.equal(mine[0].user, user, reqId);
        assert.equal(mine[0].route, '/api/v1/chat-sessions');
        assert.equal(mine[0].status, 200);
      }
      const h = lines.find((l) => l.reqId === 'head-1');
      assert.equal(h.method, 'HEAD');
      assert.equal(h.route, '/api/v1/chat-sessions');
      assert.equal(h.user, 'alice');
    } finally {
      await dispose(s);
    }
  });

  test('nothing ever logs a token, a secret or an apiKey: a full session of traffic (tokens, bad tokens, rotation secrets, providers with keys, errors, 500s, SIGHUP with a bad file holding a key) leaves none of them, in any form, in stdout or stderr', async () => {
    const rnd = () => randomBytes(12).toString('hex');
    const current = `current-secret-${rnd()}-${rnd()}`;
    const prev1 = `previous-one-${rnd()}-${rnd()}`;
    const prev2 = `previous-two-${rnd()}-${rnd()}`;
    const keys = {
      plain: `sk-live-${rnd()}`,
      slashy: `sk-proj/${rnd()}+${rnd()}==`,
      quoted: `sk-"quoted"\\${rnd()}`,
      nested: `nested-${rnd()}`,
      url: `urlpass${rnd()}`,
      query: `qkey${rnd()}`,
      reloaded: `sk-reloaded-${rnd()}`,
      badReload: `sk-bad-reload-${rnd()}`,
      badReload2: `sk-bad-reload2-${rnd()}`,
    };
    const providers = [
      { _id: 'dddddddddddddddddddddd01', name: 'Plain', apiKey: keys.plain },
      { _id: 'dddddddddddddddddddddd02', name: 'Slashy', apiKey: keys.slashy, note: `copied key ${keys.slashy}` },
      { _id: 'dddddddddddddddddddddd03', name: 'Quoted', apiKey: keys.quoted },
      { _id: 'dddddddddddddddddddddd04', name: 'Nested', config: { api_key: keys.nested, headers: { Authorization: `Bearer ${keys.nested}` } } },
      { _id: 'dddddddddddddddddddddd05', name: 'Url', baseUrl: `https://user:${keys.url}@proxy.example/v1?api_key=${keys.query}` },
    ];
    const s = await startServer({
      providers,
      env: {
        AUTH_SECRET: current,
        AUTH_PREVIOUS_SECRETS: `${prev1}, ${prev2}`,
        LOG_LEVEL: 'debug',
        CHAT_SESSION_API_FAULTS: STORE === 'journal' ? 'write:3,fsync:6' : failingWrite(3, 6),
      },
    });
    const tokens = [];
    const mint = (claims, secret, header) => {
      const t = sign(claims, { secret, ...(header ? { header } : {}) });
      tokens.push(t);
      return t;
    };
    try {
      const now = Math.floor(Date.now() / 1000);
      const alice = mint({ sub: 'alice', iat: now, exp: now + 600 }, current);
      const bob = mint({ sub: 'bob', exp: now + 600 }, prev1);
      const carol = mint({ sub: 'carol' }, prev2);
      const readOnly = mint({ sub: 'dave', scope: 'sessions:read' }, current);
      const bad = [
        mint({ sub: 'mallory', exp: now + 600 }, `wrong-secret-${rnd()}-${rnd()}`),
        mint({ sub: 'alice', exp: now - 3600 }, current), // expired, validly signed
        mint({ sub: 'alice', nbf: now + 3600 }, current),
        mint({ sub: '', exp: now + 600 }, current),
        mint({ sub: 'alice' }, current, { alg: 'none', typ: 'JWT' }),
        mint({ sub: 'alice' }, current, { alg: 'HS512', typ: 'JWT' }),
        mint({ sub: 'alice', aud: 'x' }, current).slice(0, -5),
      ];
      const call = (method, path, token, opts = {}) => s.request(method, path, { token, ...opts });
      const statuses = [];
      const note = (r) => statuses.push(r.status);
      // writes: the 3rd write fails (500), the 6th fsync (or commit) fails (500)
      const ids = [];
      for (const [i, t] of [alice, bob, carol, alice, bob, alice, carol].entries()) {
        const r = await call('POST', '/api/v1/chat-sessions', t, { json: newSession({ name: `s${i}` }) });
        note(r);
        if (r.status === 201) ids.push(r.body.data._id);
      }
      assert.ok(statuses.filter((x) => x === 500).length >= 2, `two injected failures: ${statuses}`);
      for (const id of ids) {
        note(await call('GET', `/api/v1/chat-sessions/${id}`, carol));
        note(await call('POST', `/api/v1/chat-sessions/${id}/turns`, bob, { json: { role: 'user', content: `token ${alice}` } }));
        note(await call('PUT', `/api/v1/chat-sessions/${id}`, readOnly, { json: { name: 'nope' } }));
        note(await call('GET', `/api/v1/chat-sessions/${id}/turns?limit=1`, alice));
      }
      for (const t of bad) {
        note(await call('GET', '/api/v1/chat-sessions', t));
        note(await call('GET', `/api/v1/chat-sessions?access_token=${encodeURIComponent(t)}`));
        note(await call('POST', '/api/v1/chat-sessions', t, { json: newSession() }));
      }
      note(await s.request('GET', '/api/v1/chat-sessions', { headers: { authorization: `Basic ${Buffer.from(`alice:${current}`).toString('base64')}` } }));
      note(await s.request('GET', '/api/v1/chat-sessions', { headers: { authorization: `Bearer ${alice} ${current}` } }));
      note(await s.request('GET', `/api/v1/chat-sessions/${alice}`, { token: alice }));
      note(await s.request('GET', `/no/such/${alice}`, { token: alice }));
      note(await s.request('POST', '/api/v1/chat-sessions', { token: alice, body: `{"projectId":"${alice}",`, headers: { 'content-type': 'application/json' } }));
      note(await s.request('POST', '/api/v1/chat-sessions', { token: alice, json: { projectId: 'p', providerId: keys.plain, selectedModel: 'm', mode: current } }));
      note(await call('GET', '/api/v1/providers', alice));
      for (const p of providers) note(await call('GET', `/api/v1/providers/${p._id}`, bob));
      note(await s.request('GET', '/metrics'));
      note(await s.request('GET', '/healthz'));
      assert.ok(statuses.includes(401) && statuses.includes(403) && statuses.includes(404) && statuses.includes(400) && statuses.includes(500), String(statuses));
      // a good reload with a new key, then bad ones holding keys
      const file = join(s.dataDir, 'providers.json');
      const reloads = () => s.logs().filter((l) => /^providers reload/.test(l.msg)).length;
      let seen = reloads();
      const hup = async () => {
        s.child.kill('SIGHUP');
        await waitFor(() => reloads() > seen, 'reload');
        seen = reloads();
      };
      writeFileSync(file, JSON.stringify([...providers, { _id: 'dddddddddddddddddddddd06', name: 'Reloaded', apiKey: keys.reloaded }]));
      await hup();
      note(await call('GET', '/api/v1/providers/dddddddddddddddddddddd06', alice));
      writeFileSync(file, `[{"_id":"dddddddddddddddddddddd07","name":"Bad","apiKey":"${keys.badReload}"}, {"apiKey":"${keys.badReload2}" oops}]`);
      await hup();
      writeFileSync(file, JSON.stringify([{ _id: 'dddddddddddddddddddddd08', name: '', apiKey: keys.badReload, other: keys.badReload2 }]));
      await hup();
      writeFileSync(file, JSON.stringify([{ _id: 'dddddddddddddddddddddd09', name: 'x', apiKey: keys.badReload }, { _id: 'dddddddddddddddddddddd09', name: 'y', apiKey: keys.badReload2 }]));
      await hup();
      assert.equal(s.logs().filter((l) => l.msg === 'providers reload failed; keeping the previous list').length, 3);
      assert.ok(s.logs().some((l) => l.msg === 'request failed' && l.level === 'error'), 'the 500s were logged');
      const { code } = await s.stop();
      assert.equal(code, 0);

      // start-up failures that involve secrets must not echo them either
      const short = `short-${rnd().slice(0, 8)}`;
      const failures = [
        runCli([], { env: { DATA_DIR: s.dataDir, PORT: '0', AUTH_SECRET: short } }),
        runCli([], { env: { DATA_DIR: s.dataDir, PORT: '0', AUTH_SECRET: current, AUTH_PREVIOUS_SECRETS: `${prev1},${short}` } }),
        runCli(['--auth-secret', short], { env: { DATA_DIR: s.dataDir, PORT: '0' } }),
      ];
      for (const f of failures) assert.notEqual(f.code, 0);
      const failureText = failures.map((f) => f.stdout + f.stderr).join('\n');
      assert.equal(failureText.includes(short), false, 'a rejected secret is not echoed');

      const everything = s.stdout + s.stderr + failureText;
      const forms = (x) => {
        const b = Buffer.from(x);
        return [x, JSON.stringify(x).slice(1, -1), b.toString('base64url'), b.toString('base64'), b.toString('hex'), encodeURIComponent(x)];
      };
      const needles = [];
      for (const t of tokens) needles.push(['token', t], ['token signature', t.split('.')[2] ?? t], ['token payload+signature', t.split('.').slice(1).join('.')]);
      for (const [name, x] of Object.entries({ current, prev1, prev2, short })) for (const f of forms(x)) needles.push([`secret ${name}`, f]);
      for (const [name, x] of Object.entries(keys)) for (const f of forms(x)) needles.push([`apiKey ${name}`, f]);
      const leaks = needles.filter(([, n]) => n.length >= 8 && everything.includes(n)).map(([what, n]) => `${what}: ${n}`);
      assert.deepEqual(leaks, [], 'leaked into the output');
      assert.ok(s.stdout.length > 2000, 'the server did log plenty');
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('LOG_LEVEL=warn drops request lines (and info lines) but keeps warnings and errors', async () => {
    const s = await startOnFixedPort({ env: { LOG_LEVEL: 'warn', CHAT_SESSION_API_FAULTS: failingWrite(2) } });
    try {
      const u = s.as('alice');
      assert.equal((await u.post('/api/v1/chat-sessions', newSession())).status, 201);
      assert.equal((await u.post('/api/v1/chat-sessions', newSession())).status, 500);
      for (let i = 0; i < 5; i++) await u.get('/api/v1/chat-sessions');
      await s.request('GET', '/api/v1/chat-sessions');
      assert.equal((await s.stop()).code, 0);
      const logs = s.logs();
      assert.ok(logs.every((l) => l.unparsed === undefined), 'every line is JSON');
      assert.deepEqual(logs.filter((l) => l.level === 'info' || l.level === 'debug'), []);
      assert.equal(logs.some((l) => l.msg === 'request'), false);
      assert.ok(logs.some((l) => l.level === 'warn' && /no providers file/.test(l.msg)), 'warnings still print');
      assert.ok(logs.some((l) => l.level === 'error' && l.msg === 'request failed'), 'errors still print');
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('log lines wait at most 20 ms to be written, but an error is written at once: after its 500 answer, a SIGKILL still finds it on stdout', async () => {
    const s = await startOnFixedPort({ env: { CHAT_SESSION_API_FAULTS: failingWrite(2) } });
    try {
      const u = s.as('alice');
      assert.equal((await u.post('/api/v1/chat-sessions', newSession())).status, 201);
      assert.equal((await u.post('/api/v1/chat-sessions', newSession())).status, 500);
      const closed = new Promise((resolve) => s.child.once('close', resolve)); // stdout read to its end
      await s.kill();
      await closed;
      assert.ok(
        s.logs().some((l) => l.level === 'error' && l.msg === 'request failed'),
        'the error line was written before the answer',
      );
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('LOG_LEVEL=silent prints nothing at all (stdout and stderr), even for warnings, errors, reloads and shutdown', async () => {
    const s = await startOnFixedPort({ env: { LOG_LEVEL: 'silent', CHAT_SESSION_API_FAULTS: failingWrite(2) } });
    try {
      const u = s.as('alice');
      await u.post('/api/v1/chat-sessions', newSession());
      assert.equal((await u.post('/api/v1/chat-sessions', newSession())).status, 500);
      await u.get('/api/v1/chat-sessions');
      await s.request('GET', '/nope');
      writeFileSync(join(s.dataDir, 'providers.json'), '[{"_id":"bad"}]');
      s.child.kill('SIGHUP');
      await sleep(150);
      assert.equal((await s.request('GET', '/healthz')).status, 200);
      assert.equal((await s.stop()).code, 0);
      assert.equal(s.stdout, '');
      assert.equal(s.stderr, '');
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });
});
