// docs/DECISIONS.md, Limits, "Fair share": one user (or one address without a token) holds at
// most MAX_REQUESTS_PER_USER requests in flight and a quarter of BODY_MEMORY, and at the cap the
// connection closed to let a newcomer in is an idle one of whoever holds the most, so one user
// cannot lock out the rest (issue 31, item 1). The store only serves the requests here: run on
// every engine all the same. Every wait is for a state (a gauge, an answer, a close), never a time.
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { createRequire } from 'node:module';
import { EventEmitter } from 'node:events';
import { waitFor } from './api-kit.mjs';
import { newSession, refusesToStart, removeDir, runCli, startServer, tokenFor } from './helpers.mjs';
import { startProvider } from './provider/server.mjs';
import { openEvents } from './sse.mjs';

const { ConnectionGuard } = createRequire(import.meta.url)('../dist/testkit.cjs');

const B = '/api/v1/chat-sessions';
const STALLING = '6f00000000000000000000aa';
const REFUSED = { success: false, message: 'Too many requests in flight' };

/** A raw TCP client (from `localAddress`, another loopback address, when given): what it received and whether the server closed it. */
async function raw(port, localAddress) {
  const socket = connect({ port, host: '127.0.0.1', ...(localAddress === undefined ? {} : { localAddress }) });
  await new Promise((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  const c = { socket, chunks: [], closed: false };
  socket.on('data', (d) => c.chunks.push(d));
  socket.on('error', () => {});
  c.done = new Promise((resolve) => socket.on('close', () => resolve((c.closed = true))));
  c.text = () => Buffer.concat(c.chunks).toString('latin1');
  return c;
}

/** The status, headers and JSON body of the first raw answer in `text`. */
function parseAnswer(text) {
  const end = text.indexOf('\r\n\r\n');
  assert.ok(end > 0, `an HTTP answer, got ${JSON.stringify(text.slice(0, 200))}`);
  const [statusLine, ...lines] = text.slice(0, end).split('\r\n');
  const headers = {};
  for (const l of lines) {
    const i = l.indexOf(':');
    headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
  }
  const length = Number(headers['content-length'] ?? 0);
  const bodyText = text.slice(end + 4, end + 4 + length);
  return { status: Number(statusLine.split(' ')[1]), headers, body: bodyText === '' ? undefined : JSON.parse(bodyText) };
}

/** Every series of /metrics by its full name (asked from 127.0.0.1, on a connection of its own). */
async function metrics(s) {
  const out = {};
  for (const line of (await s.request('GET', '/metrics', { keepAlive: false })).text.split('\n')) {
    const m = /^(\S+) (\S+)$/.exec(line);
    if (m !== null && !line.startsWith('#')) out[m[1]] = Number(m[2]);
  }
  return out;
}

const busiest = async (s) => (await metrics(s)).chat_session_api_requests_in_flight_busiest;

/** The head of a create whose body announces `length` bytes; what follows is up to the caller. */
const CREATE = (token, length) => `POST ${B} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\n\r\n`;

/** Asserts the refusal of a request past its owner's share: 429, Retry-After, the envelope, and the connection closed. */
function assertRefused(r, what) {
  assert.equal(r.status, 429, `${what}: ${JSON.stringify(r.body ?? r.text)}`);
  assert.deepEqual(r.body ?? JSON.parse(r.text), REFUSED, what);
  assert.equal(r.headers['retry-after'], '1', what);
  assert.equal(r.headers.connection, 'close', what);
}

describe('Fair share per user (MAX_REQUESTS_PER_USER)', () => {
  test("[D-limits-3] [D-limits-5] a user holding all it may, another's requests are answered at once; the hoarder's get 429", async () => {
    const provider = await startProvider({ log: false });
    // MAX_CONNECTIONS 40: the share is a quarter, 10; the waits the hoarder's requests could end by are out of reach
    const s = await startServer({
      providers: [{ _id: STALLING, name: 'Local', type: 'openai', baseUrl: `${provider.url}/v1`, apiKey: 'sk-test-0123456789' }],
      env: { MAX_CONNECTIONS: '40', BODY_LIMIT: '2mb', BODY_TIMEOUT: '10m', WRITE_TIMEOUT: '10m', PROVIDER_IDLE_TIMEOUT: '10m', FSYNC: 'off' },
    });
    const held = [];
    const streams = [];
    const silent = [];
    try {
      const mallory = s.as('mallory');
      // a session of 16 MiB of turns, whose whole list no loopback buffer holds, and one whose model stalls
      const big = (await mallory.post(B, newSession())).body.data._id;
      const content = 'z'.repeat(1024 * 1024);
      for (let i = 0; i < 16; i++) assert.equal((await mallory.post(`${B}/${big}/turns`, { role: 'user', content })).status, 201);
      const stalls = (await mallory.post(B, newSession({ providerId: STALLING, selectedModel: 'stall-after:1' }))).body.data._id;
      const before = await metrics(s);
      assert.equal(before.chat_session_api_requests_over_share_total, 0);

      // whole lists it never reads: two are sent (each holds one of the store's few snapshot readers), the third is refused
      const unread = async () => {
        const c = await raw(s.port);
        c.socket.once('data', () => c.socket.pause()); // the head, then nothing
        c.socket.write(`GET ${B}/${big}/turns HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${mallory.token}\r\n\r\n`);
        await waitFor(() => c.chunks.length > 0, 'the head of its answer');
        return c;
      };
      for (let i = 0; i < 2; i++) held.push(await unread());
      assert.ok(held.every((c) => c.text().startsWith('HTTP/1.1 200')));
      assert.equal(await busiest(s), 2);
      const third = await unread();
      await third.done;
      assertRefused(parseAnswer(third.text()), 'a third whole list');
      // two event streams and a reply's event stream
      for (let i = 0; i < 2; i++) {
        const e = await openEvents(s.url, '/api/v1/events', { token: mallory.token });
        streams.push(e);
        await e.waitFor((x) => x.event === 'ready');
      }
      const reply = await openEvents(s.url, `${B}/${stalls}/messages`, { token: mallory.token, method: 'POST', json: { content: 'and then?' } });
      assert.equal(reply.status, 200, reply.text);
      streams.push(reply);
      await reply.waitFor((x) => x.event === 'turn.delta');
      assert.equal(await busiest(s), 5);
      // bodies that never finish, until the share is spent: the sixth is refused and its connection closed
      let refused;
      for (let i = 0; refused === undefined; i++) {
        assert.ok(i <= 5, 'the share holds');
        const c = await raw(s.port);
        c.socket.write(CREATE(mallory.token, 1000) + '{"projectId":');
        await waitFor(async () => c.closed || (await busiest(s)) === 6 + i, 'the body held, or refused');
        if (c.closed) refused = c;
        else held.push(c);
      }
      assert.equal(held.length, 7, '2 lists and 5 bodies, beside the 3 streams');
      assertRefused(parseAnswer(refused.text()), 'the 6th body');
      // whatever it asks now, on a new connection, is refused the same way
      assertRefused(await mallory.get(B, { keepAlive: false }), 'a list');
      assertRefused(await mallory.post(B, newSession(), { keepAlive: false }), 'a create');
      const another = await openEvents(s.url, '/api/v1/events', { token: mallory.token });
      assert.equal(another.status, 429);
      assert.deepEqual(JSON.parse(another.text), REFUSED);
      // and the rest of the connections it can open sit idle, past the cap and its headroom
      for (let i = 0; i < 40 + 8; i++) silent.push(await raw(s.port));
      await waitFor(async () => (await metrics(s)).chat_session_api_connections_evicted_total >= 8, 'the cap reached');

      // another user is answered: a list, a create, an event stream (each on a new connection)
      const bob = s.as('bob');
      const list = await bob.get(B, { keepAlive: false });
      assert.equal(list.status, 200, list.text);
      const made = await bob.post(B, newSession({ name: 'still served' }), { keepAlive: false });
      assert.equal(made.status, 201, made.text);
      const feed = await openEvents(s.url, `${B}/${made.body.data._id}/events`, { token: bob.token });
      streams.push(feed);
      assert.equal(feed.status, 200, feed.text);
      await feed.waitFor((x) => x.event === 'ready');
      assert.equal((await bob.put(`${B}/${made.body.data._id}`, { name: 'renamed' }, { keepAlive: false })).status, 200);
      await feed.waitFor((x) => x.event === 'session.updated');
      // a whole list too (the hoarder holds two of the store's snapshot readers, not all)
      const whole = await bob.get(`${B}/${big}/turns`, { keepAlive: false });
      assert.equal(whole.status, 200);
      assert.equal(whole.body.data.length, 16);

      // the hoarder's held requests were left alone; its refusals are counted
      assert.ok(held.every((c) => !c.closed), 'no request in flight was closed to make room');
      const after = await metrics(s);
      assert.equal(after.chat_session_api_requests_in_flight_busiest, 10);
      assert.equal(after.chat_session_api_requests_over_share_total, 5);
      assert.ok(after.chat_session_api_connections <= 40 + 8);
      assert.equal(after.chat_session_api_connections_refused_total, 0, 'a newcomer always found an idle connection to close');
      // what it holds: a few bytes of each body, a piece of each list; nothing grows with what it asks
      assert.ok(after.chat_session_api_request_body_bytes <= 5 * 20, `body bytes held: ${after.chat_session_api_request_body_bytes}`);
      const grewMiB = (after.process_resident_memory_bytes - before.process_resident_memory_bytes) / 2 ** 20;
      assert.ok(grewMiB < 64, `resident memory grew ${grewMiB.toFixed(1)} MiB while the user held its share`);
      const warned = s.logs().filter((l) => l.level === 'warn' && /MAX_REQUESTS_PER_USER/.test(l.msg));
      assert.equal(warned.length, 1, 'one warning, not one per refusal');
      assert.equal(warned[0].user, 'mallory');

      // once the hoarder lets go, it is served again
      for (const c of [...held, ...silent]) c.socket.destroy();
      for (const e of streams) await e.close();
      await waitFor(async () => (await busiest(s)) <= 1, 'its requests to end');
      assert.equal((await mallory.get(B, { keepAlive: false })).status, 200);
      assert.equal((await s.request('GET', '/healthz', { keepAlive: false })).status, 200);
    } finally {
      for (const c of [...held, ...silent]) c.socket.destroy();
      for (const e of streams) await e.close();
      await s.stop();
      await provider.close();
      removeDir(s.dataDir);
    }
  });

  test("[D-limits-5] one user's bodies hold a quarter of BODY_MEMORY at most: past it 429, another user's body is read", async () => {
    // a quarter of 4 MiB: 1 MiB; each held body has 400,000 bytes in
    const s = await startServer({ env: { BODY_MEMORY: '4mb', BODY_LIMIT: '512kb', BODY_TIMEOUT: '10m' } });
    const stalled = [];
    try {
      const token = tokenFor('mallory');
      const part = `{"projectId":"p","providerId":"665f1c2a9b1e8a0012ab34c1","selectedModel":"m","pad":"${'x'.repeat(400_000 - 80)}`;
      for (let i = 0; i < 2; i++) {
        const c = await raw(s.port);
        c.socket.write(CREATE(token, 500_000) + part);
        stalled.push(c);
        await waitFor(async () => (await metrics(s)).chat_session_api_request_body_bytes === part.length * (i + 1), `${i + 1} bodies held`);
      }
      const third = await raw(s.port);
      third.socket.write(CREATE(token, 500_000) + part);
      await third.done;
      assertRefused(parseAnswer(third.text()), 'the body past the share');
      assert.equal((await metrics(s)).chat_session_api_request_body_bytes, part.length * 2, 'what it took is given back');
      const bob = await s.as('bob').post(B, newSession({ pad: 'y'.repeat(400_000) }));
      assert.equal(bob.status, 201, bob.text);
      assert.ok(stalled.every((c) => !c.closed));
      assert.equal((await metrics(s)).chat_session_api_requests_over_share_total, 1);
    } finally {
      for (const c of stalled) c.socket.destroy();
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('[D-limits-4] requests without a token count against their address: past its share 429, another address served', async () => {
    const s = await startServer({ env: { MAX_REQUESTS_PER_USER: '2', EVENTS: 'off', WRITE_TIMEOUT: '10m' } });
    const hoard = [];
    try {
      const served = async () => (await metrics(s))['chat_session_api_http_requests_total{method="GET",route="/docs",status="200"}'] ?? 0;
      // requests of 127.0.0.2 in flight: all of them but the /metrics request of 127.0.0.1 counting them
      const held = async () => (await metrics(s)).chat_session_api_requests_in_flight - 1;
      // from 127.0.0.2, on two connections it never reads: pages (114 KB each) one after another,
      // each once the last was answered, until one waits in the server for the kernel's full buffers
      for (let k = 1; k <= 2; k++) {
        const c = await raw(s.port, '127.0.0.2');
        c.socket.pause();
        hoard.push(c);
        for (let i = 0; (await held()) < k; i++) {
          assert.ok(i < 500, 'the buffers fill');
          const n = await served();
          c.socket.write('GET /docs HTTP/1.1\r\nHost: x\r\n\r\n');
          await waitFor(async () => (await served()) > n, 'the page answered');
        }
      }
      assert.equal(await held(), 2);
      const late = await raw(s.port, '127.0.0.2');
      late.socket.write('GET /api/v1/openapi.json HTTP/1.1\r\nHost: x\r\n\r\n');
      await late.done;
      assertRefused(parseAnswer(late.text()), 'a request of the same address');
      assert.equal((await metrics(s)).chat_session_api_requests_over_share_total, 1);
      // 127.0.0.1 is another address, and a user is another owner
      assert.equal((await s.request('GET', '/api/v1/openapi.json', { keepAlive: false })).status, 200);
      assert.equal((await s.as('alice').get(B, { keepAlive: false })).status, 200);
    } finally {
      for (const c of hoard) c.socket.destroy();
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test("[D-limits-4] a user's streams and other requests together hold at most its share, streams leaving room", async () => {
    // MAX_STREAMS_PER_USER's default follows: one less, 3
    const s = await startServer({ env: { MAX_REQUESTS_PER_USER: '4', BODY_TIMEOUT: '10m' } });
    const streams = [];
    let body;
    try {
      const alice = s.as('alice');
      for (let i = 0; i < 3; i++) {
        const e = await openEvents(s.url, '/api/v1/events', { token: alice.token });
        streams.push(e);
        await e.waitFor((x) => x.event === 'ready');
      }
      const fourth = await openEvents(s.url, '/api/v1/events', { token: alice.token });
      assert.equal(fourth.status, 429);
      assert.deepEqual(JSON.parse(fourth.text), { success: false, message: 'Too many event streams' });
      assert.equal((await alice.get(B)).status, 200, 'room for a request beside its streams');
      body = await raw(s.port);
      body.socket.write(CREATE(alice.token, 100) + '{');
      await waitFor(async () => (await busiest(s)) === 4, 'a body held beside three streams');
      assertRefused(await alice.get(B, { keepAlive: false }), 'a request past the share');
      await streams.shift().close();
      await waitFor(async () => (await busiest(s)) === 3, 'the stream counted out');
      assert.equal((await alice.get(B)).status, 200);
    } finally {
      body?.socket.destroy();
      for (const e of streams) await e.close();
      await s.stop();
      removeDir(s.dataDir);
    }
  });
});

describe('Connections at the cap: whoever holds the most gives one up', () => {
  test('[D-limits-1] at the cap a newcomer closes an idle connection of the most-holding owners, a single one last', () => {
    const evicted = [];
    const guard = new ConnectionGuard(4, { refuse: () => assert.fail('nothing is refused while one is idle'), evicted: () => evicted.push(1) });
    const socket = (remoteAddress) => Object.assign(new EventEmitter(), { remoteAddress, destroyed: false, destroy() { this.destroyed = true; this.emit('close'); } });
    const open = (addr, owner) => {
      const sock = socket(addr);
      guard.onConnection(sock);
      const c = guard.of(sock);
      if (owner !== undefined) {
        // a request of `owner` came and went: the connection is its, idle on keep-alive
        guard.busy(c);
        guard.claim(c, owner);
        guard.idle(c);
      }
      return sock;
    };
    const bob = open('10.0.0.2', 'user:bob');
    const mallory = [open('10.0.0.1', 'user:mallory'), open('10.0.0.1', 'user:mallory'), open('10.0.0.1', 'user:mallory')];
    guard.busy(guard.of(mallory[2])); // one of them busy
    const late = open('10.0.0.3');
    assert.deepEqual([bob.destroyed, ...mallory.map((m) => m.destroyed)], [false, true, false, false], "mallory's oldest idle one went, not bob's older one");
    open('10.0.0.4');
    assert.deepEqual([bob.destroyed, ...mallory.map((m) => m.destroyed)], [false, true, true, false]);
    // now every owner holds one or two: mallory still the most, but its one left is busy
    const newest = open('10.0.0.5');
    assert.equal(bob.destroyed, true, 'with the owners even, the oldest idle goes');
    assert.equal(mallory[2].destroyed, false, 'a busy connection is never closed');
    assert.equal(late.destroyed, false);
    assert.equal(newest.destroyed, false);
    assert.equal(evicted.length, 3);
    assert.equal(guard.count, 4);
  });

  test("[D-limits-1] at the cap a flood of silent connections from one address closes its own, not another's", async () => {
    const s = await startServer({ env: { MAX_CONNECTIONS: '10' } });
    const flood = [];
    let slow;
    try {
      // a client of 127.0.0.2 whose headers are slow to come: idle, and the oldest connection
      slow = await raw(s.port, '127.0.0.2');
      slow.socket.write(`GET ${B} HTTP/1.1\r\nHost: x\r\n`);
      for (let i = 0; i < 30; i++) flood.push(await raw(s.port));
      await waitFor(() => flood.filter((c) => c.closed).length >= 21, 'the flood to close its own');
      assert.equal(slow.closed, false);
      slow.socket.write(`Authorization: Bearer ${tokenFor('alice')}\r\nConnection: close\r\n\r\n`);
      await slow.done;
      assert.equal(parseAnswer(slow.text()).status, 200);
      assert.deepEqual(
        flood.map((c) => c.closed),
        flood.map((_, i) => i < 21),
        'the flood lost its oldest: 30 + 1 connections into 10 slots',
      );
    } finally {
      slow?.socket.destroy();
      for (const c of flood) c.socket.destroy();
      await s.stop();
      removeDir(s.dataDir);
    }
  });
});

describe('The settings', () => {
  test('--help lists MAX_REQUESTS_PER_USER beside MAX_CONNECTIONS, with its default (a quarter of MAX_CONNECTIONS, from 2 to 64)', () => {
    const r = runCli(['--help']);
    assert.equal(r.code, 0);
    assert.match(r.stdout, /MAX_REQUESTS_PER_USER \/ --max-requests-per-user .*\[default: MAX_CONNECTIONS \/ 4, from 2 to 64\]/);
    assert.match(r.stdout, /MAX_STREAMS_PER_USER \/ --max-streams-per-user .*\[default: 16 \(below MAX_REQUESTS_PER_USER\)\]/);
  });

  test('a start refuses, in one line, a MAX_REQUESTS_PER_USER that is no number or not below MAX_CONNECTIONS', () => {
    const cases = [
      [{ MAX_REQUESTS_PER_USER: '0' }, /MAX_REQUESTS_PER_USER must be a whole number/],
      [{ MAX_REQUESTS_PER_USER: 'many' }, /MAX_REQUESTS_PER_USER/],
      [{ MAX_CONNECTIONS: '10', MAX_REQUESTS_PER_USER: '10' }, /MAX_REQUESTS_PER_USER must be below MAX_CONNECTIONS \(10\)/],
      [{ MAX_REQUESTS_PER_USER: '8', MAX_STREAMS_PER_USER: '8' }, /MAX_STREAMS_PER_USER must be below MAX_REQUESTS_PER_USER \(8\)/],
      // the default share of 100 connections is 25
      [{ MAX_CONNECTIONS: '100', MAX_STREAMS_PER_USER: '30' }, /MAX_STREAMS_PER_USER must be below MAX_REQUESTS_PER_USER \(25\)/],
    ];
    refusesToStart(cases);
  });
});
