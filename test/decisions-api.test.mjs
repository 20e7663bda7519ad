// docs/DECISIONS.md, "The API" and "Operating it": the decisions no other test pinned (null
// on create, the provider id, forks and branches, cursors, the list's q beside search, whole
// lists in pieces, /healthz, the event routes in the OpenAPI document, the purge's batches),
// against the real server over HTTP. On every engine.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { alice, assertError, BASE, create, freshUser, MISSING, metric, server, sharedServer, waitFor } from './api-kit.mjs';
import { newSession, removeDir, ROOT, sign, startServer, STORE } from './helpers.mjs';

sharedServer();

/** The status, headers and the sizes of the chunks of one raw GET (chunked or not), read to its end. */
function rawGet(port, path, token) {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const parts = [];
    socket.on('data', (d) => parts.push(d));
    socket.on('error', reject);
    socket.on('close', () => {
      const all = Buffer.concat(parts);
      const end = all.indexOf('\r\n\r\n');
      const head = all.subarray(0, end).toString('latin1');
      let body = all.subarray(end + 4);
      const chunks = [];
      if (/\r\ntransfer-encoding: chunked/i.test(head)) {
        let joined = Buffer.alloc(0);
        for (;;) {
          const eol = body.indexOf('\r\n');
          const size = parseInt(body.subarray(0, eol).toString('latin1'), 16);
          if (size === 0) break;
          chunks.push(size);
          joined = Buffer.concat([joined, body.subarray(eol + 2, eol + 2 + size)]);
          body = body.subarray(eol + 2 + size + 2);
        }
        body = joined;
      }
      resolve({ status: Number(head.split(' ')[1]), head, chunks, body: JSON.parse(body.toString('utf8')) });
    });
    socket.write(`GET ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\nConnection: close\r\n\r\n`);
  });
}

describe('Sessions, turns and conversations (docs/DECISIONS.md)', () => {
  test('[D-sessions-1] null is absent on create but for parentId and expiresAt; on update it is a type error but for two', async () => {
    const u = freshUser('nulls');
    const plain = await create(u, { name: 'n' });
    const nulls = await create(u, { name: 'n', mode: null, tags: null, metadata: null, instructions: null });
    const strip = ({ _id, createdAt, updatedAt, ...rest }) => rest;
    assert.deepEqual(strip(nulls), strip(plain));
    assert.equal((await create(u, { name: null })).name, '');
    const t = await u.post(`${BASE}/${plain._id}/turns`, { role: 'user', content: 'x', model: null, metadata: null, usage: null, status: null });
    assert.equal(t.status, 201, t.text);
    assert.deepEqual(Object.keys(t.body.data), ['_id', 'session', 'parentId', 'user', 'role', 'content', 'status', 'createdAt']);
    assert.equal(t.body.data.status, 'complete');
    const root = await u.post(`${BASE}/${plain._id}/turns`, { role: 'user', content: 'a root', parentId: null });
    assert.equal(root.body.data.parentId, null, 'parentId: null makes a root (leaving it out continues the head)');
    const never = await create(u, { expiresAt: null });
    assert.equal(never.expiresAt, null, 'expiresAt: null is kept: never, whatever RETENTION_DAYS says');
    // on update null is present
    const full = await create(u, { tags: ['t'], metadata: { k: 'v' }, instructions: 'Be brief.', expiresAt: '2999-01-01T00:00:00Z' });
    for (const [field, message] of [['name', 'name must be a string'], ['mode', 'mode must be a string'], ['tags', 'tags must be an array'], ['metadata', 'metadata must be an object']]) {
      assertError(await u.put(`${BASE}/${full._id}`, { [field]: null }), 400, message, field);
    }
    const cleared = (await u.put(`${BASE}/${full._id}`, { expiresAt: null, instructions: null })).body.data;
    assert.equal(cleared.expiresAt, null);
    assert.equal('instructions' in cleared, false);
    assert.deepEqual([cleared.tags, cleared.metadata], [['t'], { k: 'v' }]);
  });

  test('[D-sessions-4] a session may name a provider no providers file lists, and is kept as given', async () => {
    const r = await alice.post(BASE, newSession({ providerId: 'not-configured-anywhere' }));
    assert.equal(r.status, 201, r.text);
    assert.equal(r.body.data.provider, 'not-configured-anywhere');
    assert.equal((await alice.put(`${BASE}/${r.body.data._id}`, { provider: 'nor-this-one' })).body.data.provider, 'nor-this-one');
  });

  test("[D-conversations-7] [D-conversations-8] a fork's copies keep their user; a missing session's branch is []", async () => {
    const s = await create(alice);
    const bob = server.as('bob');
    const q = (await alice.post(`${BASE}/${s._id}/turns`, { role: 'user', content: 'by alice' })).body.data;
    await bob.post(`${BASE}/${s._id}/turns`, { role: 'assistant', content: 'by bob' });
    const before = new Date().toISOString();
    const f = (await server.as('carol').post(`${BASE}/${s._id}/fork`, {})).body.data;
    assert.ok(f.createdAt >= before && f.createdAt > s.createdAt, `${f.createdAt} is the time of the fork, not of the source (${s.createdAt})`);
    assert.equal(f.user, 'carol');
    const copies = (await alice.get(`${BASE}/${f._id}/turns`)).body.data;
    assert.deepEqual(copies.map((c) => [c.user, c.content]), [['alice', 'by alice'], ['bob', 'by bob']]);
    assert.equal(copies[0].createdAt, q.createdAt);
    for (const query of ['?branch=head', `?branch=${q._id}`, '?branch=head&limit=5', '']) {
      const r = await alice.get(`${BASE}/${MISSING}/turns${query}`);
      assert.deepEqual([r.status, r.body.data], [200, []], query);
    }
  });
});

describe('Paging and finding (docs/DECISIONS.md)', () => {
  test('[D-paging-5] a cursor of another list is 400, a forged one 400, and a new secret makes every cursor invalid', async () => {
    const first = await startServer();
    const user = 'cursor-rotation';
    try {
      const u = first.as(user);
      for (let i = 0; i < 3; i++) assert.equal((await u.post(BASE, newSession({ projectId: 'rot' }))).status, 201);
      const cursor = (await u.get(`${BASE}?limit=1`)).body.nextCursor;
      assert.equal(typeof cursor, 'string');
      assertError(await u.get(`${BASE}?projectId=rot&limit=1&cursor=${encodeURIComponent(cursor)}`), 400, 'cursor belongs to another list or query');
      const [payload, sig] = cursor.split('.');
      assertError(await u.get(`${BASE}?limit=1&cursor=${encodeURIComponent(`${payload}.${sig.slice(0, -2)}AA`)}`), 400, 'Invalid cursor');
      assert.equal((await u.get(`${BASE}?limit=1&cursor=${encodeURIComponent(cursor)}`)).status, 200, 'the cursor is good before the rotation');
      await first.stop();
      // the new secret signs; the old one still verifies tokens, yet no cursor signed under it passes
      const NEW = 'rotated-secret-0123456789abcdef0123456789abcd';
      const rotated = await startServer({ dataDir: first.dataDir, env: { AUTH_SECRET: NEW, AUTH_PREVIOUS_SECRETS: 'test-secret-0123456789abcdef0123456789abcdef' } });
      try {
        const v = rotated.as(user);
        assertError(await v.get(`${BASE}?limit=1&cursor=${encodeURIComponent(cursor)}`), 400, 'Invalid cursor');
        const again = await rotated.request('GET', `${BASE}?limit=1`, { token: sign({ sub: user }, { secret: NEW }) });
        assert.equal(again.status, 200, 'the list starts again');
        assert.equal((await v.get(`${BASE}?limit=1&cursor=${encodeURIComponent(again.body.nextCursor)}`)).status, 200);
      } finally {
        await rotated.stop();
      }
    } finally {
      await first.stop();
      removeDir(first.dataDir);
    }
  });

  test(`[D-search-18] the list's q stays a substring: q=ode finds "Kubernetes node"`, async () => {
    const u = freshUser('q-substring');
    const s = await create(u, { name: 'Kubernetes node' });
    assert.deepEqual((await u.get(`${BASE}?q=ode`)).body.data.map((x) => x._id), [s._id], 'the list finds a substring');
    assert.deepEqual((await u.get(`${BASE}?q=ERNETES%20NO`)).body.data.map((x) => x._id), [s._id], 'across a word boundary, case ignored');
    assert.deepEqual((await u.get('/api/v1/search?q=ode')).body.data, [], 'search finds words by their start only');
    assert.deepEqual((await u.get('/api/v1/search?q=node')).body.data.map((h) => h.session._id), [s._id]);
  });

  test('[D-paging-4] [D-limits-14] a whole list is one snapshot, streamed in pieces of about 64 KiB as the client reads', async () => {
    const u = freshUser('pieces');
    const small = await create(u);
    const whole = await rawGet(server.port, `${BASE}/${small._id}/turns`, u.token);
    assert.equal(whole.status, 200);
    assert.match(whole.head, /\r\ncontent-length: \d+/i, 'a list under 256 KiB is sent whole');
    for (let i = 0; i < 20; i++) assert.equal((await u.post(`${BASE}/${small._id}/turns`, { role: 'user', content: `${i}`.padEnd(20 * 1024, 's') })).status, 201);
    const large = await create(u);
    for (let i = 0; i < 4; i++) assert.equal((await u.post(`${BASE}/${large._id}/turns`, { role: 'user', content: `${i}`.padEnd(100 * 1024, 'l') })).status, 201);
    for (const [s, itemMax] of [[small, 21 * 1024], [large, 101 * 1024]]) {
      const r = await rawGet(server.port, `${BASE}/${s._id}/turns`, u.token);
      assert.equal(r.status, 200);
      assert.match(r.head, /\r\ntransfer-encoding: chunked/i);
      assert.deepEqual(r.body.data, (await u.get(`${BASE}/${s._id}/turns?limit=100`)).body.data);
      const middle = r.chunks.slice(1, -1); // the envelope's opening and closing are pieces of their own
      const turn = r.body.data.map((t) => Buffer.byteLength(JSON.stringify(t)));
      if (itemMax < 64 * 1024) {
        // gathered: each piece reaches 64 KiB (the last may be short), and passes it by less than one turn
        assert.ok(middle.slice(0, -1).every((n) => n >= 64 * 1024 && n < 64 * 1024 + itemMax), `pieces of ${middle} bytes`);
      } else {
        assert.deepEqual(middle.filter((n) => n !== 1), turn, 'each large turn goes on its own, as kept (the commas between them apart)');
      }
    }
  });

  test('[D-finding-9] 250 expired sessions go in three batches, each one or two group commits; the unexpired stay', async () => {
    const first = await startServer({ env: { PURGE_INTERVAL: 'off' } });
    try {
      const u = first.as('batches');
      const past = new Date(Date.now() - 60_000).toISOString();
      for (let i = 0; i < 250; i++) assert.equal((await u.post(BASE, newSession({ expiresAt: past }))).status, 201);
      const kept = (await u.post(BASE, newSession({ name: 'kept' }))).body.data;
      await first.stop();
      const s = await startServer({ dataDir: first.dataDir, env: { PURGE_INTERVAL: '100ms' } });
      try {
        await waitFor(async () => (await metric(s, 'chat_session_api_purged_sessions_total')) === 250, 'the purge of the 250');
        const commits = await metric(s, 'chat_session_api_commit_duration_seconds_count');
        assert.ok(commits >= 3 && commits <= 6, `${commits} commits for 250 deletes in batches of 100 (a batch is one group, or two when its first delete found the writer idle)`);
        assert.equal(await metric(s, 'chat_session_api_committed_writes_total'), 250);
        assert.deepEqual((await s.as('batches').get(BASE)).body.data.map((x) => x._id), [kept._id]);
      } finally {
        await s.stop();
      }
    } finally {
      await first.stop();
      removeDir(first.dataDir);
    }
  });
});

describe('Operating it (docs/DECISIONS.md)', () => {
  test('[D-logs-1] /healthz also gives version, store and providers {count, loadedAt}, without a token', async () => {
    const r = await server.request('GET', '/healthz');
    assert.equal(r.status, 200);
    const { version } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
    assert.deepEqual(Object.keys(r.body.data), ['status', 'version', 'store', 'providers']);
    assert.equal(r.body.data.version, version);
    assert.equal(r.body.data.store, STORE);
    assert.equal(r.body.data.providers.count, 3);
    assert.match(r.body.data.providers.loadedAt, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
  });

  test('[D-openapi-9] the event routes answer text/event-stream, event by event; the ticket is their own security scheme', async () => {
    const doc = (await server.request('GET', '/api/v1/openapi.json')).body;
    const eventRoutes = ['/api/v1/events', '/api/v1/chat-sessions/{id}/events'];
    for (const path of eventRoutes) {
      const op = doc.paths[path].get;
      const body = op.responses['200'].content['text/event-stream'];
      assert.ok(body, `${path} answers text/event-stream`);
      for (const kind of ['session.created', 'session.updated', 'session.deleted', 'turn.created', 'turn.updated', 'turn.deleted', 'turn.delta', 'ready', 'reset', 'end']) {
        assert.ok(body.schema.description.includes(`\`${kind}\``), `${path} describes ${kind}`);
      }
      assert.deepEqual(op.security.map((s) => Object.keys(s)[0]), ['bearerAuth', 'eventTicket'], path);
    }
    assert.equal(doc.components.securitySchemes.eventTicket.in, 'query');
    for (const [path, ops] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(ops)) {
        if (eventRoutes.includes(path)) continue;
        assert.ok(!JSON.stringify(op.security ?? []).includes('eventTicket'), `${method} ${path} takes no ticket`);
      }
    }
    // and the ticket opens a stream where the document says it does
    const ticket = (await alice.post('/api/v1/events/tickets')).body.data.ticket;
    const socket = connect(server.port, '127.0.0.1');
    const head = await new Promise((resolve, reject) => {
      let got = '';
      socket.on('data', (d) => {
        got += d;
        if (got.includes('\r\n\r\n')) resolve(got);
      });
      socket.on('error', reject);
      socket.write(`GET /api/v1/events?ticket=${encodeURIComponent(ticket)} HTTP/1.1\r\nHost: x\r\n\r\n`);
    });
    socket.destroy();
    assert.match(head, /^HTTP\/1\.1 200 /);
    assert.match(head, /content-type: text\/event-stream/i);
  });
});
