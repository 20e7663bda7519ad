// The live feed (docs/DECISIONS.md, "Live events"): GET /api/v1/events, a session's own
// stream, Last-Event-ID, heartbeats, tickets, the final events, the limits, SIGTERM, CORS, on
// the engine of this run of the suite. Every wait is for a condition, never for a time.
import assert from 'node:assert/strict';
import { createCipheriv, createHmac, randomBytes } from 'node:crypto';
import { connect } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { createRequire } from 'node:module';
import { newSession, removeDir, runCli, SECRET, startServer, STORE, tokenFor } from './helpers.mjs';
import { startProvider } from './provider/server.mjs';
import { openEvents } from './sse.mjs';
import { BASE, MISSING } from './api-kit.mjs';

/** A metric's value from /metrics (0 when the series is absent). */
async function metric(server, series) {
  const text = (await server.request('GET', '/metrics', { keepAlive: false })).text;
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? 0 : Number(line.slice(series.length + 1));
}

/** Resolves once `cond()` (async) holds, asking again after each `step()` (or a short pause). */
async function eventually(cond, what, { step, tries = 1200 } = {}) {
  for (let i = 0; i < tries; i++) {
    if (await cond()) return;
    if (step !== undefined) await step(i);
    else await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`never happened: ${what}`);
}

/** A ticket sealed as the server seals them (an independent implementation), for tickets a client could not get. */
function sealTicket(payload) {
  const key = createHmac('sha256', SECRET).update('chat-session-api event ticket v1').digest();
  const iv = randomBytes(12);
  const c = createCipheriv('aes-256-gcm', key, iv);
  return Buffer.concat([iv, c.update(JSON.stringify(payload), 'utf8'), c.final(), c.getAuthTag()]).toString('base64url');
}

const stop = async (server) => {
  await server.stop();
  removeDir(server.dataDir);
};

describe('Live events', () => {
  let server;
  let alice;
  let bob;
  const opened = [];
  /** Opens an event stream as `who` (a server.as() client) and waits for its `ready`. */
  const follow = async (path, who, headers = {}, on = server) => {
    const s = await openEvents(on.url, path, { token: who.token, headers });
    opened.push(s);
    assert.equal(s.status, 200, s.text);
    await s.waitFor((e) => e.event === 'ready');
    return s;
  };
  before(async () => {
    server = await startServer({ env: { EVENTS_HEARTBEAT: '300ms', EVENTS_WINDOW: '40' } });
    alice = server.as('alice');
    bob = server.as('bob');
  });
  after(async () => {
    for (const s of opened) await s.close();
    await stop(server);
  });

  test("[D-live-1] each change's event carries the record as the API answers it, in order, after `ready`", async () => {
    const s = await follow('/api/v1/events', alice);
    assert.match(s.headers['content-type'], /^text\/event-stream/);
    assert.equal(s.headers['cache-control'], 'no-store');
    assert.equal(s.headers['x-accel-buffering'], 'no');
    assert.ok(s.headers['x-request-id']);
    assert.equal(s.events[0].event, 'ready');
    assert.deepEqual(s.events[0].data, {});
    const made = (await alice.post(BASE, newSession({ name: 'live one' }))).body.data;
    const renamed = (await alice.put(`${BASE}/${made._id}`, { name: 'live two' })).body.data;
    const turn = (await alice.post(`${BASE}/${made._id}/turns`, { role: 'user', content: 'hello there' })).body.data;
    const raised = (await alice.get(`${BASE}/${made._id}`)).body.data;
    assert.equal((await alice.del(`${BASE}/${made._id}`)).status, 200);
    await s.waitFor((e) => e.event === 'session.deleted');
    const events = s.events.slice(1);
    assert.deepEqual(
      events.map((e) => e.event),
      ['session.created', 'session.updated', 'turn.created', 'session.updated', 'session.deleted'],
    );
    assert.deepEqual(events[0].data, made, 'the session as the create answered it');
    assert.deepEqual(events[1].data, renamed);
    assert.deepEqual(events[2].data, turn, 'the turn as the append answered it');
    assert.deepEqual(events.at(-1).data, { _id: made._id });
    assert.deepEqual(events[3].data, raised, 'the session as its turn left it (the turn its head)');
    assert.equal(raised.headTurnId, turn._id);
    const ids = s.events.map((e) => Number(e.id));
    for (let i = 1; i < ids.length; i++) assert.ok(ids[i] > ids[i - 1], `ids increase: ${ids}`);
    assert.ok(ids.every(Number.isSafeInteger));
  });

  test("[D-live-2] a turn's edit, a deletion of turns, a head switch and a fork are each an event", async () => {
    const made = (await alice.post(BASE, newSession({ name: 'tree' }))).body.data;
    const list = await follow('/api/v1/events', alice);
    const own = await follow(`${BASE}/${made._id}/events`, alice);
    const say = async (content, over = {}) => (await alice.post(`${BASE}/${made._id}/turns`, { role: 'user', content, ...over })).body.data;
    const q = await say('question');
    const a1 = await say('answer 1', { role: 'assistant' });
    const a2 = await say('answer 2', { role: 'assistant', parentId: q._id });
    const q2 = await say('follow-up');
    // the appends' events may still be on their way (across PostgreSQL instances they come by
    // NOTIFY): the last of them, the session with q2 its head, is where this test starts counting
    const last = await own.waitFor((e) => e.event === 'session.updated' && e.data.headTurnId === q2._id);
    const from = Number(last.id);
    const edited = await alice.put(`${BASE}/${made._id}/turns/${a1._id}`, { content: 'answer 1, edited', usage: { inputTokens: 3, outputTokens: 4 } });
    assert.equal(edited.status, 200, edited.text);
    const afterEdit = (await alice.get(`${BASE}/${made._id}`)).body.data;
    const switched = (await alice.put(`${BASE}/${made._id}`, { headTurnId: a1._id })).body.data;
    assert.equal(switched.headTurnId, a1._id);
    const deleted = await alice.del(`${BASE}/${made._id}/turns/${a2._id}`);
    assert.equal(deleted.status, 200, deleted.text);
    const afterDelete = (await alice.get(`${BASE}/${made._id}`)).body.data;
    const fork = await alice.post(`${BASE}/${made._id}/fork`, { name: 'a fork' });
    assert.equal(fork.status, 201, fork.text);
    await list.waitFor((e) => e.event === 'session.created' && e.data._id === fork.body.data._id);
    await own.waitFor((e) => e.event === 'turn.deleted');
    const seen = own.events.filter((e) => Number(e.id) > from && e.event !== 'ready');
    assert.deepEqual(seen.map((e) => e.event), ['turn.updated', 'session.updated', 'session.updated', 'turn.deleted', 'session.updated']);
    assert.deepEqual(seen[0].data, edited.body.data, 'the turn as the edit answered it');
    assert.deepEqual(seen[1].data, afterEdit);
    assert.deepEqual(seen[2].data, switched);
    assert.equal(seen[3].data._id, a2._id);
    assert.equal(seen[3].data.session, made._id);
    assert.deepEqual([...seen[3].data.ids].sort(), [a2._id, q2._id].sort(), 'the turn and its descendants');
    assert.deepEqual(seen[4].data, afterDelete);
    assert.equal(afterDelete.headTurnId, a1._id, 'the head was not among them');
    const listed = list.events.filter((e) => Number(e.id) > from && e.event !== 'ready');
    assert.deepEqual(listed.map((e) => e.event), [...seen.map((e) => e.event), 'session.created'], 'the lists\' feed has the same, and the fork');
    assert.deepEqual(listed.at(-1).data, fork.body.data, 'the fork as its POST answered it');
    // (the source's own session.created may be there: "Events may repeat what that read already
    // showed", and on PostgreSQL this instance can read the create's event after the stream opened)
    assert.ok(!own.events.some((e) => e.event === 'session.created' && e.data._id === fork.body.data._id), "a fork is not an event of its source's stream");
  });

  test("[D-live-3] the lists' feed: own sessions, or with projectId the project's; a session's feed takes only it", async () => {
    const mine = await follow('/api/v1/events', alice);
    const project = await follow('/api/v1/events?projectId=shared-room', alice);
    const bobs = (await bob.post(BASE, newSession({ projectId: 'shared-room', name: 'bob in the room' }))).body.data;
    const own = await follow(`${BASE}/${bobs._id}/events`, alice);
    const elsewhere = (await bob.post(BASE, newSession({ projectId: 'elsewhere', name: 'bob elsewhere' }))).body.data;
    const alices = (await alice.post(BASE, newSession({ projectId: 'elsewhere', name: 'alice elsewhere' }))).body.data;
    await bob.post(`${BASE}/${bobs._id}/turns`, { role: 'user', content: 'in the room' });
    await mine.waitFor((e) => e.event === 'session.created' && e.data._id === alices._id);
    await project.waitFor((e) => e.event === 'turn.created' && e.data.session === bobs._id);
    await own.waitFor((e) => e.event === 'turn.created');
    const about = (c) => c.events.filter((e) => e.event !== 'ready').map((e) => e.data.session ?? e.data._id);
    assert.ok(!about(mine).includes(bobs._id) && !about(mine).includes(elsewhere._id), "another user's sessions are not in one's own feed");
    assert.ok(about(project).every((id) => id === bobs._id), `only the project's sessions: ${about(project)}`);
    assert.ok(about(own).every((id) => id === bobs._id) && own.of('turn.created').length === 1);
    const unknown = await openEvents(server.url, `${BASE}/${MISSING}/events`, { token: alice.token });
    assert.equal(unknown.status, 404);
    assert.deepEqual(JSON.parse(unknown.text), { success: false, message: 'Chat session not found' });
  });

  test("[D-live-3] under ACCESS=owner the project's feed is the caller's own sessions; another's session is 404", async () => {
    const owner = await startServer({ env: { ACCESS: 'owner' } });
    const streams = [];
    try {
      const a = owner.as('alice');
      const b = owner.as('bob');
      const project = await openEvents(owner.url, '/api/v1/events?projectId=room', { token: a.token });
      streams.push(project);
      await project.waitFor((e) => e.event === 'ready');
      const bobs = (await b.post(BASE, newSession({ projectId: 'room' }))).body.data;
      const alices = (await a.post(BASE, newSession({ projectId: 'room' }))).body.data;
      await project.waitFor((e) => e.event === 'session.created' && e.data._id === alices._id);
      assert.ok(!project.events.some((e) => e.data?._id === bobs._id), "bob's session of the project is not alice's to see");
      const other = await openEvents(owner.url, `${BASE}/${bobs._id}/events`, { token: a.token });
      assert.equal(other.status, 404);
      const ownStream = await openEvents(owner.url, `${BASE}/${bobs._id}/events`, { token: b.token });
      streams.push(ownStream);
      assert.equal(ownStream.status, 200);
    } finally {
      for (const s of streams) await s.close();
      await stop(owner);
    }
  });

  test('[D-live-4] [D-live-5] Last-Event-ID (or lastEventId) replays what followed, then `ready`', async () => {
    const first = await follow('/api/v1/events', alice);
    const made = (await alice.post(BASE, newSession({ name: 'replayed' }))).body.data;
    const seen = await first.waitFor((e) => e.event === 'session.created' && e.data._id === made._id);
    await first.close();
    await alice.put(`${BASE}/${made._id}`, { name: 'missed 1' });
    await alice.put(`${BASE}/${made._id}`, { name: 'missed 2' });
    const back = await follow('/api/v1/events', alice, { 'last-event-id': seen.id });
    const names = back.events.filter((e) => e.event === 'session.updated').map((e) => e.data.name);
    assert.deepEqual(names, ['missed 1', 'missed 2']);
    assert.equal(back.events.at(-1).event, 'ready', 'ready once the replay is done');
    assert.equal(back.events.at(-1).id, back.events.at(-2).id, "ready's id is where the stream stands");
    // a new EventSource cannot send the header: the query parameter
    const query = await follow(`/api/v1/events?lastEventId=${seen.id}`, alice);
    assert.deepEqual(query.events.filter((e) => e.event === 'session.updated').map((e) => e.data.name), ['missed 1', 'missed 2']);
    const both = await follow(`/api/v1/events?lastEventId=${seen.id}`, alice, { 'last-event-id': back.events.at(-1).id });
    assert.deepEqual(both.events.map((e) => e.event), ['ready'], 'the header wins');
  });

  test('[D-live-5] an id older than the window, from an earlier run, or never given gets `reset`', async () => {
    const s = await follow('/api/v1/events', alice);
    const made = (await alice.post(BASE, newSession({ name: 'window' }))).body.data;
    const early = await s.waitFor((e) => e.event === 'session.created' && e.data._id === made._id);
    // EVENTS_WINDOW=40: push the early id out of the window
    for (let i = 0; i < 45; i++) await alice.put(`${BASE}/${made._id}`, { name: `push ${i}` });
    await s.waitFor((e) => e.data?.name === 'push 44');
    for (const [lastEventId, reason] of [
      [early.id, 'gone'],
      [String(Number(s.lastEventId) + 1000), 'unknown'],
      ['99999999999999999999', 'unknown'],
    ]) {
      const r = await follow('/api/v1/events', alice, { 'last-event-id': lastEventId });
      assert.deepEqual(r.events.map((e) => e.event), ['reset', 'ready'], lastEventId);
      assert.deepEqual(r.events[0].data, { reason });
      assert.equal(r.events[0].id, s.lastEventId, 'the reset says where the stream stands now');
      await r.close();
    }
    // what the window still holds is replayed
    const recent = s.events.at(-3);
    const r = await follow('/api/v1/events', alice, { 'last-event-id': recent.id });
    assert.deepEqual(r.events.map((e) => e.data?.name ?? e.event), ['push 43', 'push 44', 'ready']);
  });

  test('[D-live-5] a Last-Event-ID that is no id is 400 on both routes, before the session is looked up', async () => {
    const made = (await alice.post(BASE, newSession({ name: 'bad ids' }))).body.data;
    for (const bad of ['not-an-id', '1795368503168004 1795368503168005', '1795368503168004, 1795368503168005', '-1', '1.5', '0x10']) {
      for (const path of ['/api/v1/events', `${BASE}/${made._id}/events`, `${BASE}/${MISSING}/events`]) {
        const r = await openEvents(server.url, path, { token: alice.token, headers: { 'last-event-id': bad } });
        assert.equal(r.status, 400, `${path} with ${bad}: ${r.text}`);
        assert.deepEqual(JSON.parse(r.text), { success: false, message: 'Last-Event-ID must be one event id (an integer)' }, `${path} with ${bad}`);
        await r.close();
      }
      if (bad.length > 32) continue; // the query's own limit answers first
      const q = await openEvents(server.url, `/api/v1/events?lastEventId=${encodeURIComponent(bad)}`, { token: alice.token });
      assert.equal(q.status, 400, q.text);
      assert.deepEqual(JSON.parse(q.text), { success: false, message: 'lastEventId must be one event id (an integer)' });
      await q.close();
    }
    // white space around one id is no mistake, and an empty header is no header
    for (const fine of [' 1 ', '']) {
      const r = await follow('/api/v1/events', alice, { 'last-event-id': fine });
      assert.equal(r.events.at(-1).event, 'ready', JSON.stringify(fine));
      await r.close();
    }
  });

  test('[D-http-4] a Last-Event-ID of two lines gets a 400 naming the header and what it must be', async () => {
    const s = await follow('/api/v1/events', alice);
    await alice.post(BASE, newSession({ name: 'two ids' }));
    await s.waitFor((e) => e.event === 'session.created' && e.data.name === 'two ids');
    const ids = [...new Set(s.events.map((e) => e.id))];
    assert.ok(ids.length >= 2, 'ready, then the create');
    for (const sep of ['\n', '\r\n']) {
      const answer = await new Promise((resolve) => {
        let out = '';
        const sock = connect(server.port, '127.0.0.1', () =>
          sock.write(`GET /api/v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${alice.token}\r\nLast-Event-ID: ${ids.join(sep)}\r\n\r\n`),
        );
        sock.on('data', (d) => (out += d));
        sock.on('close', () => resolve(out));
        sock.on('error', () => resolve(out));
      });
      assert.match(answer, /^HTTP\/1\.1 400 /, answer);
      assert.deepEqual(JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)), {
        success: false,
        message: 'Last-Event-ID must be one event id (an integer); this one holds a line break',
      });
    }
    await s.close();
  });

  test("[D-live-8] a quiet stream's heartbeat carries the newest event's id, even one it was not shown", async () => {
    const s = await follow('/api/v1/events', alice);
    const bobs = await follow('/api/v1/events', bob);
    await bob.post(BASE, newSession({ name: 'not for alice' }));
    const newest = (await bobs.waitFor((e) => e.event === 'session.created' && e.data.name === 'not for alice')).id;
    await s.until(() => s.comments.includes('heartbeat') && s.lastEventId === newest, 20_000, 'a heartbeat with the newest id');
    assert.ok(!s.events.some((e) => e.data?.name === 'not for alice'));
  });

  test('[D-live-9] a stream just opened gets its first heartbeat a whole interval after it asked, never at once', async () => {
    for (let i = 0; i < 5; i++) {
      const asked = performance.now();
      const s = await follow('/api/v1/events', alice);
      await s.until(() => s.comments.includes('heartbeat'), 20_000, 'a heartbeat');
      // a lower bound only: a slow machine makes it later, never sooner
      assert.ok(performance.now() - asked >= 300, `the first heartbeat came ${Math.round(performance.now() - asked)} ms after the stream was asked for`);
      await s.close();
    }
  });

  test('[D-live-10] after `session.deleted` comes `end` {"reason":"deleted"}, and the connection closes', async () => {
    const made = (await alice.post(BASE, newSession({ name: 'to delete' }))).body.data;
    const s = await follow(`${BASE}/${made._id}/events`, alice);
    await alice.del(`${BASE}/${made._id}`);
    await s.finished;
    assert.deepEqual(s.events.slice(-2).map((e) => e.event), ['session.deleted', 'end']);
    assert.deepEqual(s.events.at(-1).data, { reason: 'deleted' });
    assert.equal(s.events.at(-1).id, s.events.at(-2).id, 'the final event carries no id of its own');
  });

  test('[D-live-12] a ticket opens one stream as its user, once; a used, expired or forged one is 401', async () => {
    const before = Date.now();
    const r = await alice.post('/api/v1/events/tickets');
    assert.equal(r.status, 201, r.text);
    assert.deepEqual(Object.keys(r.body.data).sort(), ['expiresAt', 'ticket']);
    const expires = Date.parse(r.body.data.expiresAt);
    assert.ok(expires >= before + 59_000 && expires <= Date.now() + 60_000, r.body.data.expiresAt);
    assert.ok(!r.body.data.ticket.includes('alice'), 'the ticket does not show its user');
    const { ticket } = r.body.data;
    const s = await openEvents(server.url, `/api/v1/events?ticket=${ticket}`);
    opened.push(s);
    assert.equal(s.status, 200, s.text);
    await s.waitFor((e) => e.event === 'ready');
    const made = (await alice.post(BASE, newSession({ name: 'seen through a ticket' }))).body.data;
    await s.waitFor((e) => e.event === 'session.created' && e.data._id === made._id);
    const again = await openEvents(server.url, `/api/v1/events?ticket=${ticket}`);
    assert.equal(again.status, 401);
    assert.match(again.headers['www-authenticate'], /ticket already used/);
    const expired = sealTicket(['alice', null, null, Date.now() - 1000]);
    const late = await openEvents(server.url, `/api/v1/events?ticket=${expired}`);
    assert.equal(late.status, 401);
    assert.match(late.headers['www-authenticate'], /ticket expired/);
    const forged = `${ticket.slice(0, -4)}AAAA`;
    assert.equal((await openEvents(server.url, `/api/v1/events?ticket=${forged}`)).status, 401);
    // sealed with a key the server does not have
    const alien = Buffer.from(ticket, 'base64url');
    alien[20] ^= 1;
    assert.equal((await openEvents(server.url, `/api/v1/events?ticket=${alien.toString('base64url')}`)).status, 401);
  });

  test('[D-live-12] a ticket is taken only as ?ticket= on the event routes; a Bearer token never in a URL', async () => {
    const ticket = () => alice.post('/api/v1/events/tickets').then((r) => r.body.data.ticket);
    const made = (await alice.post(BASE, newSession())).body.data;
    for (const path of [BASE, `${BASE}/${made._id}`, `${BASE}/${made._id}/turns`, '/api/v1/providers']) {
      const r = await server.request('GET', `${path}?ticket=${await ticket()}`);
      assert.equal(r.status, 401, `${path} takes no ticket`);
    }
    assert.equal((await server.request('POST', `/api/v1/events/tickets?ticket=${await ticket()}`)).status, 401, 'a ticket does not buy a ticket');
    for (const q of [`ticket=${alice.token}`, `access_token=${alice.token}`, `token=${alice.token}`, `authorization=Bearer%20${alice.token}`]) {
      const r = await openEvents(server.url, `/api/v1/events?${q}`);
      assert.equal(r.status, 401, q.split('=')[0]);
    }
    // a session's stream takes a ticket too
    const s = await openEvents(server.url, `${BASE}/${made._id}/events?ticket=${await ticket()}`);
    opened.push(s);
    assert.equal(s.status, 200);
  });

  test(`a ticket carries its token's scopes: "Authentication comes before any validation" on the event routes`, async () => {
    const writer = server.as('alice', { scope: 'sessions:write' });
    assert.equal((await writer.post('/api/v1/events/tickets')).status, 403);
    assert.equal((await openEvents(server.url, '/api/v1/events', { token: writer.token })).status, 403);
    const reader = server.as('alice', { scope: 'sessions:read' });
    const r = await reader.post('/api/v1/events/tickets');
    assert.equal(r.status, 201);
    const s = await openEvents(server.url, `/api/v1/events?ticket=${r.body.data.ticket}`);
    opened.push(s);
    assert.equal(s.status, 200);
    assert.equal((await openEvents(server.url, `/api/v1/events?lastEventId=${'9'.repeat(40)}`)).status, 401);
    assert.equal((await openEvents(server.url, `/api/v1/events?lastEventId=${'9'.repeat(40)}`, { token: alice.token })).status, 400);
  });

  test("[D-live-11] a stream ends `expired` within a heartbeat of its token's exp plus the leeway", async () => {
    // exp 25 s ago: accepted (30 s of leeway) for about 5 s more
    const now = Math.floor(Date.now() / 1000);
    const token = tokenFor('carol', { exp: now - 25 });
    const s = await openEvents(server.url, '/api/v1/events', { token });
    opened.push(s);
    assert.equal(s.status, 200, s.text);
    const ticket = (await server.request('POST', '/api/v1/events/tickets', { token })).body.data;
    assert.ok(Date.parse(ticket.expiresAt) <= (now + 5) * 1000, 'a ticket lives no longer than its token');
    const t = await openEvents(server.url, `/api/v1/events?ticket=${ticket.ticket}`);
    opened.push(t);
    for (const stream of [s, t]) {
      await stream.finished;
      assert.deepEqual(stream.events.at(-1), { id: stream.lastEventId, event: 'end', data: { reason: 'expired' }, raw: '{"reason":"expired"}' });
    }
  });

  test('[D-live-12] with CORS_ORIGIN set, the event routes and the ticket route answer CORS like the others', async () => {
    const cors = await startServer({ env: { CORS_ORIGIN: 'http://app.example.test' } });
    try {
      const pre = await cors.request('OPTIONS', '/api/v1/events/tickets', { headers: { origin: 'http://app.example.test', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization' } });
      assert.equal(pre.status, 204);
      assert.equal(pre.headers['access-control-allow-origin'], 'http://app.example.test');
      assert.match(pre.headers['access-control-allow-methods'], /POST/);
      assert.match(pre.headers['access-control-allow-headers'], /Authorization/);
      const a = cors.as('alice');
      const t = await a.post('/api/v1/events/tickets', undefined, { headers: { origin: 'http://app.example.test' } });
      assert.equal(t.headers['access-control-allow-origin'], 'http://app.example.test');
      const s = await openEvents(cors.url, `/api/v1/events?ticket=${t.body.data.ticket}`, { headers: { origin: 'http://app.example.test' } });
      assert.equal(s.status, 200);
      assert.equal(s.headers['access-control-allow-origin'], 'http://app.example.test');
      await s.close();
    } finally {
      await stop(cors);
    }
  });

  test('an HTTP/1.0 client (no chunked encoding) gets the same events, delimited by the end of the connection', async () => {
    const made = (await alice.post(BASE, newSession({ name: 'old client' }))).body.data;
    const sock = connect(server.port, '127.0.0.1');
    let got = '';
    sock.setEncoding('utf8');
    sock.on('data', (d) => (got += d));
    const closed = new Promise((r) => sock.once('close', r));
    sock.write(`GET ${BASE}/${made._id}/events HTTP/1.0\r\nAuthorization: Bearer ${alice.token}\r\n\r\n`);
    await eventually(() => got.includes('event: ready'), 'the stream is open');
    await alice.del(`${BASE}/${made._id}`);
    await closed;
    assert.match(got, /^HTTP\/1\.1 200 OK\r\n/);
    assert.doesNotMatch(got, /transfer-encoding/i);
    // a heartbeat may fall anywhere in between on a slow machine: it is not what this pins; nor is
    // the session's own `session.created`, which on PostgreSQL can reach this instance's feed (by
    // its read after the commit) after the stream is ready
    const body = got.slice(got.indexOf('\r\n\r\n') + 4).replace(/: heartbeat\nid: \d+\n\n/g, '');
    assert.match(body, /^id: \d+\nevent: ready\ndata: \{\}\n\n(id: \d+\nevent: session\.created\ndata: [^\n]*\n\n)?id: \d+\nevent: session\.deleted\ndata: \{"_id":"[0-9a-f]{24}"\}\n\nevent: end\ndata: \{"reason":"deleted"\}\n\n$/);
  });

  test('HEAD on an event route answers the head of the stream and ends', async () => {
    const r = await server.request('HEAD', '/api/v1/events', { token: alice.token });
    assert.equal(r.status, 200);
    assert.match(r.headers['content-type'], /^text\/event-stream/);
    assert.equal(r.text, '');
  });
});

describe('Live events: limits, slow consumers, shutdown', () => {
  test('[D-live-13] past MAX_STREAMS_PER_USER 429, past MAX_STREAMS 503; a closed stream frees its place', async () => {
    const server = await startServer({ env: { MAX_STREAMS_PER_USER: '2', MAX_STREAMS: '3' } });
    const streams = [];
    try {
      const open = async (who) => {
        const s = await openEvents(server.url, '/api/v1/events', { token: tokenFor(who) });
        if (s.status === 200) streams.push(s);
        return s;
      };
      assert.equal((await open('alice')).status, 200);
      assert.equal((await open('alice')).status, 200);
      const third = await open('alice');
      assert.equal(third.status, 429);
      assert.deepEqual(JSON.parse(third.text), { success: false, message: 'Too many event streams' });
      assert.equal((await open('bob')).status, 200);
      const full = await open('carol');
      assert.equal(full.status, 503);
      assert.deepEqual(JSON.parse(full.text), { success: false, message: 'Server is busy' });
      assert.equal(await metric(server, 'chat_session_api_event_streams'), 3);
      await streams.shift().close();
      await eventually(async () => (await metric(server, 'chat_session_api_event_streams')) === 2, 'the closed stream is counted out');
      assert.equal((await open('carol')).status, 200);
      assert.equal(await metric(server, 'chat_session_api_event_streams_ended_total{reason="client"}'), 1);
    } finally {
      for (const s of streams) await s.close();
      await stop(server);
    }
  });

  test('[D-live-13] a stream holds its connection as a request in flight: MAX_CONNECTIONS never closes it', async () => {
    const server = await startServer({ env: { MAX_CONNECTIONS: '6', MAX_STREAMS: '2', MAX_REQUESTS_PER_USER: '4' } });
    const sockets = [];
    const streams = [];
    try {
      const a = server.as('alice');
      for (let i = 0; i < 2; i++) {
        const s = await openEvents(server.url, '/api/v1/events', { token: a.token });
        streams.push(s);
        await s.waitFor((e) => e.event === 'ready');
      }
      // a flood of idle connections: the cap closes the oldest idle ones, never a stream
      for (let i = 0; i < 12; i++) {
        const sock = connect(server.port, '127.0.0.1');
        sock.on('error', () => undefined);
        sockets.push(sock);
        await new Promise((r) => sock.once('connect', r));
      }
      await eventually(async () => (await metric(server, 'chat_session_api_connections_evicted_total')) >= 6, 'idle connections evicted');
      const made = (await a.post(BASE, newSession({ name: 'still live' }))).body.data;
      for (const s of streams) await s.waitFor((e) => e.event === 'session.created' && e.data._id === made._id);
      assert.ok(streams.every((s) => !s.ended));
    } finally {
      for (const s of sockets) s.destroy();
      for (const s of streams) await s.close();
      await stop(server);
    }
  });

  test('[D-live-11] a stream whose unsent bytes pass EVENTS_BUFFER ends `slow`, and nothing more is held for it', async () => {
    const server = await startServer({ env: { EVENTS_BUFFER: '64kb' } });
    const a = server.as('alice');
    const made = (await a.post(BASE, newSession({ name: 'firehose' }))).body.data;
    const sock = connect(server.port, '127.0.0.1');
    sock.on('error', () => undefined);
    try {
      await new Promise((r) => sock.once('connect', r));
      let got = '';
      sock.setEncoding('utf8');
      sock.on('data', (d) => (got += d));
      sock.write(`GET /api/v1/chat-sessions/${made._id}/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${a.token}\r\n\r\n`);
      await eventually(() => got.includes('event: ready'), 'the stream is open');
      // the client stops reading: the kernel's buffers fill, then the server's; each event is
      // smaller than EVENTS_BUFFER, so only the backlog can pass it
      sock.pause();
      const content = 'x'.repeat(16 * 1024);
      let sent = 0;
      await eventually(async () => (await metric(server, 'chat_session_api_event_streams_ended_total{reason="slow"}')) === 1, 'the slow stream is cut off', {
        step: async () => {
          await Promise.all(Array.from({ length: 16 }, () => a.post(`${BASE}/${made._id}/turns`, { role: 'assistant', content })));
          sent += 16;
        },
        tries: 2000,
      });
      await eventually(() => server.logs().some((l) => l.level === 'warn' && /EVENTS_BUFFER/.test(l.msg)), 'the cut is logged');
      // nothing more is queued for it: what it reads now ends with the final event
      await a.post(`${BASE}/${made._id}/turns`, { role: 'assistant', content: 'after the cut' });
      sock.resume();
      await eventually(() => got.endsWith('0\r\n\r\n'), 'the answer ends');
      assert.match(got, /event: end\ndata: \{"reason":"slow"\}\n\n\r\n0\r\n\r\n$/, 'the final event, then the end of the answer');
      assert.ok(!got.includes('after the cut'));
      assert.ok((got.match(/event: turn\.created/g) ?? []).length < sent, 'the stream was cut before it had every turn');
      await eventually(async () => (await metric(server, 'chat_session_api_event_streams')) === 0, 'the stream is counted out once its connection is done');
    } finally {
      sock.destroy();
      await stop(server);
    }
  });

  test('[D-live-11] SIGTERM ends every stream with `end` `shutdown`, then the server drains as usual', async () => {
    const server = await startServer();
    const streams = [];
    for (const who of ['alice', 'bob', 'carol']) {
      const s = await openEvents(server.url, '/api/v1/events', { token: tokenFor(who) });
      await s.waitFor((e) => e.event === 'ready');
      streams.push(s);
    }
    const { code } = await server.stop('SIGTERM');
    assert.equal(code, 0);
    for (const s of streams) {
      await s.finished;
      assert.deepEqual(s.events.at(-1).data, { reason: 'shutdown' });
      assert.equal(s.events.at(-1).event, 'end');
    }
    assert.ok(!server.logs().some((l) => /drain period/.test(l.msg ?? '')), 'no stream was left for the drain period to cut');
    removeDir(server.dataDir);
  });

  test("[D-live-18] EVENTS=off removes the three routes; --help lists the live feed's settings", async () => {
    const server = await startServer({ env: { EVENTS: 'off' } });
    try {
      const a = server.as('alice');
      const made = (await a.post(BASE, newSession())).body.data;
      assert.equal((await a.get('/api/v1/events')).status, 404);
      assert.equal((await a.get(`${BASE}/${made._id}/events`)).status, 404);
      assert.equal((await a.post('/api/v1/events/tickets')).status, 404);
      const doc = (await server.request('GET', '/api/v1/openapi.json')).body;
      assert.equal(doc.paths['/api/v1/events'], undefined);
      assert.equal(doc.paths['/api/v1/chat-sessions/{id}/events'], undefined);
      assert.equal(doc.paths['/api/v1/events/tickets'], undefined);
    } finally {
      await stop(server);
    }
    const help = runCli(['--help']).stdout;
    for (const s of ['EVENTS', 'EVENTS_WINDOW', 'EVENTS_WINDOW_MEMORY', 'EVENTS_HEARTBEAT', 'EVENTS_BUFFER', 'MAX_STREAMS', 'MAX_STREAMS_PER_USER']) assert.match(help, new RegExp(`${s} / --`), s);
    const bad = runCli([], { env: { MAX_CONNECTIONS: '10', MAX_STREAMS: '10' } });
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /MAX_STREAMS must be below MAX_CONNECTIONS/);
  });

  test('[D-live-7] past EVENTS_WINDOW_MEMORY the oldest events go, and an id among them gets `reset`', async (t) => {
    if (STORE === 'postgres') {
      t.skip('the window of STORE=postgres is in the database');
      return;
    }
    const server = await startServer({ env: { EVENTS_WINDOW_MEMORY: '100kb' } });
    try {
      const a = server.as('alice');
      const s = await openEvents(server.url, '/api/v1/events', { token: a.token });
      await s.waitFor((e) => e.event === 'ready');
      const made = (await a.post(BASE, newSession({ name: 'heavy' }))).body.data;
      const early = await s.waitFor((e) => e.event === 'session.created');
      for (let i = 0; i < 4; i++) await a.post(`${BASE}/${made._id}/turns`, { role: 'assistant', content: `${i}`.repeat(40 * 1024) });
      await s.until(() => s.of('turn.created').length === 4, 20_000, 'four turns');
      await s.close();
      const r = await openEvents(server.url, '/api/v1/events', { token: a.token, headers: { 'last-event-id': early.id } });
      await r.waitFor((e) => e.event === 'ready');
      assert.deepEqual(r.events.map((e) => e.event), ['reset', 'ready']);
      assert.deepEqual(r.events[0].data, { reason: 'gone' });
      // the newest events are kept
      const recent = s.of('turn.created').at(-2);
      const q = await openEvents(server.url, '/api/v1/events', { token: a.token, headers: { 'last-event-id': recent.id } });
      await q.waitFor((e) => e.event === 'ready');
      assert.ok(!q.events.some((e) => e.event === 'reset'));
      assert.deepEqual(q.of('turn.created').map((e) => e.id), [s.of('turn.created').at(-1).id], 'what followed is replayed');
      await r.close();
      await q.close();
    } finally {
      await stop(server);
    }
  });

  test("[D-live-5] [D-live-7] event ids increase across a restart; sqlite's window does not survive it, PostgreSQL's does", async () => {
    const server = await startServer();
    const a = server.as('alice');
    const s = await openEvents(server.url, '/api/v1/events', { token: a.token });
    await s.waitFor((e) => e.event === 'ready');
    const made = (await a.post(BASE, newSession({ name: 'before' }))).body.data;
    const before = await s.waitFor((e) => e.event === 'session.created');
    await s.close();
    await server.stop();
    const again = await startServer({ dataDir: server.dataDir });
    try {
      const b = again.as('alice');
      const t = await openEvents(again.url, '/api/v1/events', { token: b.token, headers: { 'last-event-id': before.id } });
      await t.waitFor((e) => e.event === 'ready');
      assert.deepEqual(t.events.map((e) => e.event), STORE === 'postgres' ? ['ready'] : ['reset', 'ready']);
      await b.put(`${BASE}/${made._id}`, { name: 'after' });
      const next = await t.waitFor((e) => e.event === 'session.updated');
      assert.ok(Number(next.id) > Number(before.id), `${next.id} > ${before.id}`);
      await t.close();
    } finally {
      await stop(again);
    }
  });
});

const PG = STORE === 'postgres' ? {} : { skip: `events across instances need STORE=postgres; this run tests STORE=${STORE}` };

describe('Live events across instances (STORE=postgres)', PG, () => {
  const servers = [];
  const streams = [];
  const schema = `live_${process.pid}`;
  const providerId = '6f00000000000000000000c1';
  let provider;
  before(async () => {
    provider = await startProvider();
    const providers = [{ _id: providerId, name: 'Local Ollama', type: 'ollama', baseUrl: provider.url }];
    for (let i = 0; i < 2; i++) servers.push(await startServer({ env: { DATABASE_SCHEMA: schema, DATABASE_POOL_SIZE: '4', EVENTS_HEARTBEAT: '500ms' }, providers }));
  });
  after(async () => {
    for (const s of streams) await s.close();
    for (const s of servers) await stop(s);
    await provider?.close();
  });
  const open = async (i, path, token, headers = {}) => {
    const s = await openEvents(servers[i].url, path, { token, headers });
    streams.push(s);
    assert.equal(s.status, 200, s.text);
    await s.waitFor((e) => e.event === 'ready');
    return s;
  };

  test("[D-live-16] a change through one instance reaches every instance's streams; an id replays on either", async () => {
    const alice = tokenFor('alice');
    const onA = await open(0, '/api/v1/events', alice);
    const onB = await open(1, '/api/v1/events', alice);
    const made = (await servers[1].request('POST', BASE, { token: alice, json: newSession({ name: 'made on B' }) })).body.data;
    const a = await onA.waitFor((e) => e.event === 'session.created' && e.data._id === made._id);
    const b = await onB.waitFor((e) => e.event === 'session.created' && e.data._id === made._id);
    assert.equal(a.id, b.id, 'one id on every instance');
    assert.deepEqual(a.data, made);
    await onA.close();
    await servers[0].request('PUT', `${BASE}/${made._id}`, { token: alice, json: { name: 'renamed on A' } });
    // resume on the other instance from the id seen on the first
    const resumed = await open(1, '/api/v1/events', alice, { 'last-event-id': a.id });
    assert.deepEqual(resumed.events.map((e) => e.data?.name ?? e.event), ['renamed on A', 'ready']);
  });

  test('[D-live-16] writes racing through two instances reach each stream once, in one order, ids up by one', async () => {
    const user = `racer-${process.pid}`;
    const token = tokenFor(user);
    const onA = await open(0, '/api/v1/events', token);
    const onB = await open(1, '/api/v1/events', token);
    const n = 60;
    await Promise.all(Array.from({ length: n }, (_, i) => servers[i % 2].request('POST', BASE, { token, json: newSession({ name: `race ${i}` }) })));
    const all = (s) => s.events.filter((e) => e.event === 'session.created');
    await onA.until(() => all(onA).length === n, 20_000, `${n} events on A`);
    await onB.until(() => all(onB).length === n, 20_000, `${n} events on B`);
    const ids = all(onA).map((e) => Number(e.id));
    for (let i = 1; i < ids.length; i++) assert.equal(ids[i], ids[i - 1] + 1, `contiguous: ${ids}`);
    assert.deepEqual(all(onB).map((e) => [e.id, e.data._id]), all(onA).map((e) => [e.id, e.data._id]), 'the same events in the same order on both');
    assert.equal(new Set(all(onA).map((e) => e.data._id)).size, n);
  });

  test("[D-live-16] [D-postgres-7] two replies' text, one per instance, reach every stream once, in order", async () => {
    const user = `replier-${process.pid}`;
    const token = tokenFor(user);
    const sessions = [];
    for (let i = 0; i < 2; i++) sessions.push((await servers[i].request('POST', BASE, { token, json: newSession({ providerId, selectedModel: 'tokens:60@300' }) })).body.data);
    const follow = (i, s) => open(i, `${BASE}/${s._id}/events`, token);
    const watching = [];
    for (const s of sessions) watching.push([await follow(0, s), await follow(1, s)]);
    const asked = sessions.map((s, i) => servers[i].request('POST', `${BASE}/${s._id}/messages`, { token, json: { content: `generated on instance ${i}` } }));
    const racing = Array.from({ length: 40 }, (_, i) => servers[i % 2].request('POST', BASE, { token, json: newSession({ name: `meanwhile ${i}` }) }));
    const replies = (await Promise.all(asked)).map((r) => {
      assert.equal(r.status, 201, r.text);
      assert.equal(r.body.data.reply.status, 'complete');
      return r.body.data.reply;
    });
    await Promise.all(racing);
    const seen = (s) => s.events.filter((e) => e.event.startsWith('turn.')).map((e) => [e.id, e.event, JSON.stringify(e.data)]);
    for (const [k, [onA, onB]] of watching.entries()) {
      const reply = replies[k];
      const ended = (e) => e.event === 'turn.updated' && e.data._id === reply._id && e.data.status === 'complete';
      await onA.waitFor(ended);
      await onB.waitFor(ended);
      assert.deepEqual(seen(onB), seen(onA), `session ${k}: the same events in the same order on both instances`);
      const ids = seen(onA).map(([id]) => Number(id));
      for (let i = 1; i < ids.length; i++) assert.ok(ids[i] > ids[i - 1], `session ${k}: ids increase: ${ids}`);
      const text = onA.events.filter((e) => e.event === 'turn.delta' && e.data._id === reply._id).map((e) => e.data.text).join('');
      assert.equal(text, reply.content, `session ${k}: every piece of the reply's text, once`);
      // resume from the middle of the reply's text, on each instance
      const middle = seen(onA)[Math.floor(ids.length / 2)];
      for (const i of [0, 1]) {
        const resumed = await open(i, `${BASE}/${sessions[k]._id}/events`, token, { 'last-event-id': middle[0] });
        assert.deepEqual(seen(resumed), seen(onA).slice(Math.floor(ids.length / 2) + 1), `session ${k}, resumed on instance ${i}`);
      }
    }
  });

  test('[D-live-12] a ticket minted on one instance opens one stream on the other, once, then neither', async () => {
    const alice = tokenFor('alice');
    const { ticket } = (await servers[0].request('POST', '/api/v1/events/tickets', { token: alice })).body.data;
    const s = await openEvents(servers[1].url, `/api/v1/events?ticket=${ticket}`);
    streams.push(s);
    assert.equal(s.status, 200, s.text);
    for (const i of [0, 1]) assert.equal((await openEvents(servers[i].url, `/api/v1/events?ticket=${ticket}`)).status, 401, `instance ${i}`);
  });

  test("[D-live-6] an instance that missed events another trimmed sends `reset` gone; a reply's stream closes", async () => {
    const provider = await startProvider({ log: false });
    const providerId = '6f00000000000000000000d7';
    const gapSchema = `gap_${process.pid}`;
    const start = () => startServer({ providers: [{ _id: providerId, name: 'Local Ollama', type: 'ollama', baseUrl: provider.url }], env: { DATABASE_SCHEMA: gapSchema, DATABASE_POOL_SIZE: '4' } });
    const [a, b] = [await start(), await start()];
    const { Pool } = createRequire(import.meta.url)('../dist/testkit.cjs');
    const pool = new Pool(process.env.CSA_TEST_DATABASE_URL, { max: 1 });
    try {
      const token = tokenFor('gap');
      const lists = await openEvents(b.url, '/api/v1/events', { token });
      streams.push(lists);
      await lists.waitFor((e) => e.event === 'ready');
      const session = (await b.request('POST', BASE, { token, json: newSession({ providerId, selectedModel: 'tokens:5+hold-after:1' }) })).body.data;
      const reply = await openEvents(b.url, `${BASE}/${session._id}/messages`, { token, method: 'POST', json: { content: 'say it' } });
      streams.push(reply);
      assert.equal(reply.status, 200, reply.text);
      await reply.waitFor((e) => e.event === 'turn.delta');
      await lists.waitFor((e) => e.event === 'session.updated' && e.data._id === session._id);
      // the second instance stands still while the first writes and the log is trimmed past what
      // the second has read, as the first's trim does when the second lags by more than the window
      b.child.kill('SIGSTOP');
      let made;
      try {
        for (let i = 0; i < 3; i++) made = (await a.request('POST', BASE, { token, json: newSession({ name: `while B stood still ${i}` }) })).body.data;
        const r = await pool.query(`DELETE FROM "${gapSchema}".events WHERE id < (SELECT last FROM "${gapSchema}".event_head)`);
        assert.ok(r.rowCount >= 2, 'events the second instance had not read were trimmed');
      } finally {
        b.child.kill('SIGCONT');
      }
      const reset = await lists.waitFor((e) => e.event === 'reset');
      assert.deepEqual(reset.data, { reason: 'gone' });
      const next = await lists.waitFor((e) => e.event === 'session.created' && e.data._id === made._id);
      assert.ok(lists.events.indexOf(next) > lists.events.indexOf(reset), 'the stream goes on live after its reset');
      assert.equal(lists.events.filter((e) => e.event === 'session.created' && e.data.name?.startsWith('while B')).length, 1, 'what was trimmed is not made up');
      await reply.finished;
      const last = reply.events[reply.events.length - 1];
      assert.deepEqual([last.event, last.data], ['reset', { reason: 'gone' }], 'the reply\'s stream closes after its reset, with nothing more');
      assert.match((await b.request('GET', '/metrics')).text, /^chat_session_api_event_streams_ended_total\{reason="gone"\} 1$/m);
      // the log is written out in batches: its line may come a moment after the events
      await eventually(async () => b.logs().some((l) => l.level === 'warn' && /missed events another instance trimmed/.test(l.msg)), 'the instance says it lagged');
      provider.release();
    } finally {
      await pool.end();
      for (const s of [a, b]) await stop(s);
      await provider.close();
    }
  });

  test('[D-live-17] an import on PostgreSQL sends `reset` to every stream of the instances beside it', async () => {
    const alice = tokenFor('alice');
    const onA = await open(0, '/api/v1/events', alice);
    const onB = await open(1, '/api/v1/events', alice);
    const made = (await servers[0].request('POST', BASE, { token: alice, json: newSession({ name: 'to export' }) })).body.data;
    await onB.waitFor((e) => e.event === 'session.created' && e.data._id === made._id);
    const dir = servers[0].dataDir;
    const file = `${dir}/export.ndjson`;
    const exported = runCli(['export', '--out', file], { env: { DATA_DIR: dir, DATABASE_SCHEMA: schema } });
    assert.equal(exported.code, 0, exported.stderr);
    const edited = (await import('node:fs')).readFileSync(file, 'utf8').replace('"to export"', '"imported"');
    (await import('node:fs')).writeFileSync(file, edited);
    const imported = runCli(['import', file], { env: { DATA_DIR: `${dir}-import`, DATABASE_SCHEMA: schema } });
    assert.equal(imported.code, 0, imported.stderr);
    removeDir(`${dir}-import`);
    for (const s of [onA, onB]) {
      const r = await s.waitFor((e) => e.event === 'reset');
      assert.deepEqual(r.data, { reason: 'import' });
    }
  });
});
