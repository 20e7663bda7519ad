// Streaming turns (docs/DECISIONS.md, "Streaming turns"): a turn created with status streaming
// grows by text deltas, each durable when acknowledged, each a turn.delta on its session's
// stream; PUT status complete ends it; a turn a crash left streaming is interrupted at the next
// start (on PostgreSQL, once no delta came for STREAMING_IDLE). Real server, over HTTP, on the
// engine of this run of the suite; every wait is for a condition, never for a time.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { newSession, removeDir, startServer, STORE } from './helpers.mjs';
import { openEvents } from './sse.mjs';
import { assertError, BASE, MISSING } from './api-kit.mjs';

async function streamingTurn(who, sessionId, content = 'Once') {
  const r = await who.post(`${BASE}/${sessionId}/turns`, { role: 'assistant', content, status: 'streaming' });
  assert.equal(r.status, 201, r.text);
  assert.equal(r.body.data.status, 'streaming');
  return r.body.data;
}

const stop = async (server) => {
  await server.stop();
  removeDir(server.dataDir);
};

describe('Streaming turns', () => {
  let server;
  let alice;
  const opened = [];
  before(async () => {
    server = await startServer({ env: { BODY_LIMIT: '4kb' } });
    alice = server.as('alice');
  });
  after(async () => {
    for (const s of opened) await s.close();
    await stop(server);
  });
  const follow = async (path) => {
    const s = await openEvents(server.url, path, { token: alice.token });
    opened.push(s);
    assert.equal(s.status, 200, s.text);
    await s.waitFor((e) => e.event === 'ready');
    return s;
  };

  test("[D-streaming-1] a turn created streaming grows by deltas, each a turn.delta of its session's stream, then completes", async () => {
    const s = (await alice.post(BASE, newSession({ name: 'a story' }))).body.data;
    const own = await follow(`${BASE}/${s._id}/events`);
    const list = await follow('/api/v1/events');
    const turn = await streamingTurn(alice, s._id);
    const session = (await alice.get(`${BASE}/${s._id}`));
    const deltas = [' upon', ' a time', ', ', 'there was a ✨ turn.'];
    let at = 'Once'.length;
    for (const text of deltas) {
      const r = await alice.post(`${BASE}/${s._id}/turns/${turn._id}/deltas`, { text });
      assert.equal(r.status, 200, r.text);
      assert.deepEqual(r.body, { success: true, data: { _id: turn._id, session: s._id, at } });
      at += text.length;
    }
    const read = (await alice.get(`${BASE}/${s._id}/turns`)).body.data;
    assert.equal(read.length, 1);
    assert.deepEqual(read[0], { ...turn, content: `Once${deltas.join('')}` }, 'the turn with the text appended, nothing else changed');
    const after = await alice.get(`${BASE}/${s._id}`);
    assert.deepEqual(after.body.data, session.body.data, "a delta moves neither the session's updatedAt");
    assert.equal(after.headers.etag, session.headers.etag, 'nor its ETag');

    const done = await alice.put(`${BASE}/${s._id}/turns/${turn._id}`, { status: 'complete', usage: { inputTokens: 12, outputTokens: 9 } });
    assert.equal(done.status, 200, done.text);
    assert.equal(done.body.data.status, 'complete');
    assert.equal(done.body.data.content, `Once${deltas.join('')}`);
    await own.waitFor((e) => e.event === 'turn.updated');
    await list.waitFor((e) => e.event === 'turn.updated');
    const mine = own.events.filter((e) => e.event.startsWith('turn.'));
    assert.deepEqual(mine.map((e) => e.event), ['turn.created', ...deltas.map(() => 'turn.delta'), 'turn.updated']);
    let offset = 'Once'.length;
    mine.slice(1, -1).forEach((e, i) => {
      assert.deepEqual(e.data, { _id: turn._id, session: s._id, text: deltas[i], at: offset });
      offset += deltas[i].length;
    });
    assert.deepEqual(mine.at(-1).data, done.body.data);
    assert.deepEqual(list.events.filter((e) => e.event.startsWith('turn.')).map((e) => e.event), ['turn.created', 'turn.updated'], 'the lists\' feed is not woken by every token');

    assertError(await alice.post(`${BASE}/${s._id}/turns/${turn._id}/deltas`, { text: 'more' }), 409, 'Turn is not streaming', 'a delta after complete');
  });

  test('[D-streaming-2] a delta is appended to a string content, else to a last text part, else as a new text part', async () => {
    const s = (await alice.post(BASE, newSession())).body.data;
    const own = await follow(`${BASE}/${s._id}/events`);
    const parts = [{ type: 'reasoning', text: 'thinking' }, { type: 'text', text: 'An' }];
    const a = (await alice.post(`${BASE}/${s._id}/turns`, { role: 'assistant', content: parts, status: 'streaming' })).body.data;
    const r = await alice.post(`${BASE}/${s._id}/turns/${a._id}/deltas`, { text: 'swer' });
    assert.deepEqual(r.body.data, { _id: a._id, session: s._id, at: 2, part: 1 });
    const call = [{ type: 'tool_call', id: 'c1', name: 'search', arguments: { q: 'x' } }];
    const b = (await alice.post(`${BASE}/${s._id}/turns`, { role: 'assistant', content: call, status: 'streaming', parentId: null })).body.data;
    const r2 = await alice.post(`${BASE}/${s._id}/turns/${b._id}/deltas`, { text: 'Found it' });
    assert.deepEqual(r2.body.data, { _id: b._id, session: s._id, at: 0, part: 1 });
    const read = (await alice.get(`${BASE}/${s._id}/turns`)).body.data;
    assert.deepEqual(read[0].content, [parts[0], { type: 'text', text: 'Answer' }]);
    assert.deepEqual(read[1].content, [...call, { type: 'text', text: 'Found it' }]);
    const delta = await own.waitFor((e) => e.event === 'turn.delta' && e.data._id === b._id);
    assert.deepEqual(delta.data, { _id: b._id, session: s._id, text: 'Found it', at: 0, part: 1 });
  });

  test('[D-streaming-3] refused deltas: 409 not streaming, 400 bad text, 413 Turn too large, 404; nothing changes', async () => {
    const s = (await alice.post(BASE, newSession())).body.data;
    const done = (await alice.post(`${BASE}/${s._id}/turns`, { role: 'user', content: 'finished' })).body.data;
    const live = await streamingTurn(alice, s._id, 'x');
    const url = `${BASE}/${s._id}/turns/${live._id}/deltas`;
    assertError(await alice.post(`${BASE}/${s._id}/turns/${done._id}/deltas`, { text: 'a' }), 409, 'Turn is not streaming', 'complete');
    assertError(await alice.post(url, {}), 400, 'text is required', 'no text');
    assertError(await alice.post(url, { text: null }), 400, 'text is required', 'null');
    assertError(await alice.post(url, { text: '' }), 400, 'text must not be empty', 'empty');
    assertError(await alice.post(url, { text: 5 }), 400, 'text must be a string', 'a number');
    assertError(await alice.post(url, { text: 'é'.repeat(65_537) }), 413, 'Request body too large', 'past BODY_LIMIT as a body');
    assertError(await alice.post(`${BASE}/${s._id}/turns/${MISSING}/deltas`, { text: 'a' }), 404, 'Turn not found', 'unknown turn');
    assertError(await alice.post(`${BASE}/${MISSING}/turns/${live._id}/deltas`, { text: 'a' }), 404, 'Chat session not found', 'unknown session');
    // BODY_LIMIT is 4kb here: a turn grows to at most what one request could record
    const chunk = 'y'.repeat(1000);
    let accepted = 0;
    let last;
    for (let i = 0; i < 10; i++) {
      last = await alice.post(url, { text: chunk });
      if (last.status !== 200) break;
      accepted++;
    }
    assertError(last, 413, 'Turn too large', 'a turn past BODY_LIMIT');
    assert.ok(accepted >= 2, `deltas up to the limit were taken (${accepted})`);
    const read = (await alice.get(`${BASE}/${s._id}/turns`)).body.data;
    assert.equal(read[1].content, `x${chunk.repeat(accepted)}`, 'refused deltas changed nothing');
    assert.equal(read[1].status, 'streaming');
    assert.ok(Buffer.byteLength(JSON.stringify(read[1])) <= 4096);
  });

  test("[D-streaming-3] a delta's text of more than 65536 characters is 400", async () => {
    const big = await startServer({ env: { BODY_LIMIT: '1mb' } });
    try {
      const a = big.as('alice');
      const s = (await a.post(BASE, newSession())).body.data;
      const live = (await a.post(`${BASE}/${s._id}/turns`, { role: 'assistant', content: 'x', status: 'streaming' })).body.data;
      assertError(await a.post(`${BASE}/${s._id}/turns/${live._id}/deltas`, { text: 'z'.repeat(65_537) }), 400, 'text must be at most 65536 characters');
      assert.equal((await a.post(`${BASE}/${s._id}/turns/${live._id}/deltas`, { text: 'z'.repeat(65_536) })).status, 200);
    } finally {
      await stop(big);
    }
  });

  test(`"owner-only access" and scopes apply to deltas: another's session is 404, no sessions:write is 403`, async () => {
    const owner = await startServer({ env: { ACCESS: 'owner' } });
    try {
      const a = owner.as('alice');
      const b = owner.as('bob');
      const readOnly = owner.as('alice', { scope: 'sessions:read' });
      const s = (await a.post(BASE, newSession())).body.data;
      const live = (await a.post(`${BASE}/${s._id}/turns`, { role: 'assistant', content: 'x', status: 'streaming' })).body.data;
      assertError(await b.post(`${BASE}/${s._id}/turns/${live._id}/deltas`, { text: 'a' }), 404, 'Chat session not found');
      assertError(await readOnly.post(`${BASE}/${s._id}/turns/${live._id}/deltas`, { text: 'a' }), 403, 'Forbidden');
      assert.equal((await a.get(`${BASE}/${s._id}/turns`)).body.data[0].content, 'x');
    } finally {
      await stop(owner);
    }
  });
});

describe('Streaming turns and crashes', () => {
  test('[D-streaming-4] a SIGKILL loses no acknowledged delta, and the next start marks the turn interrupted', async () => {
    const first = await startServer();
    const a = first.as('alice');
    const s = (await a.post(BASE, newSession())).body.data;
    const turn = await streamingTurn(a, s._id, 'start');
    const acknowledged = [];
    for (let i = 0; i < 40; i++) {
      const text = ` d${i}`;
      const r = await a.post(`${BASE}/${s._id}/turns/${turn._id}/deltas`, { text });
      assert.equal(r.status, 200, r.text);
      acknowledged.push(text);
    }
    // one more on its way as the process dies: it may or may not be there, never half
    const inFlight = a.post(`${BASE}/${s._id}/turns/${turn._id}/deltas`, { text: ' last' }).catch(() => undefined);
    await first.kill();
    await inFlight;
    // on PostgreSQL the next instance takes a turn as left once no delta came for STREAMING_IDLE
    const again = await startServer({ dataDir: first.dataDir, env: STORE === 'postgres' ? { STREAMING_IDLE: '1ms' } : {} });
    try {
      const b = again.as('alice');
      const read = (await b.get(`${BASE}/${s._id}/turns`)).body.data[0];
      const kept = `start${acknowledged.join('')}`;
      assert.ok(read.content === kept || read.content === `${kept} last`, `every acknowledged delta is there, whole: ${read.content.slice(-40)}`);
      assert.equal(read.status, 'interrupted');
      assertError(await b.post(`${BASE}/${s._id}/turns/${turn._id}/deltas`, { text: 'late' }), 409, 'Turn is not streaming');
      // the interruption is an edit like any other: the session moved
      assert.ok((await b.get(`${BASE}/${s._id}`)).body.data.updatedAt > s.updatedAt);
    } finally {
      await stop(again);
    }
  });

  test('[D-streaming-5] an instance that starts beside one streaming a turn does not cut it', { skip: STORE === 'postgres' ? false : `several instances need STORE=postgres; this run tests STORE=${STORE}` }, async () => {
    const schema = `streaming_${process.pid}`;
    const one = await startServer({ env: { DATABASE_SCHEMA: schema } });
    let two;
    try {
      const a = one.as('alice');
      const s = (await a.post(BASE, newSession())).body.data;
      const turn = await streamingTurn(a, s._id, 'still');
      two = await startServer({ env: { DATABASE_SCHEMA: schema } });
      const b = two.as('alice');
      assert.equal((await b.get(`${BASE}/${s._id}/turns`)).body.data[0].status, 'streaming', 'a start beside a live instance leaves its turn alone');
      assert.equal((await b.post(`${BASE}/${s._id}/turns/${turn._id}/deltas`, { text: ' going' })).status, 200, 'deltas go through any instance');
      assert.equal((await a.post(`${BASE}/${s._id}/turns/${turn._id}/deltas`, { text: ' on' })).status, 200);
      assert.equal((await a.get(`${BASE}/${s._id}/turns`)).body.data[0].content, 'still going on');
    } finally {
      if (two !== undefined) await stop(two);
      await stop(one);
    }
  });
});
