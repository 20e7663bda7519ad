// Several instances of the service on one PostgreSQL database, the way an operator scales out
// or upgrades without downtime: requests spread over three server processes that share a
// schema. Runs on the postgres run of the suite (the others skip it with a line).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { waitFor } from '../api-kit.mjs';
import { newSession, removeDir, startServer, STORE, tempDir } from '../helpers.mjs';
import { startProvider } from '../provider/server.mjs';

const PG = STORE === 'postgres' ? {} : { skip: `several instances need STORE=postgres; this run tests STORE=${STORE}` };
const BASE = '/api/v1/chat-sessions';

describe('Several instances on one database (STORE=postgres)', PG, () => {
  const servers = [];
  const schema = `multi_${process.pid}`;
  before(async () => {
    for (let i = 0; i < 3; i++) servers.push(await startServer({ env: { DATABASE_SCHEMA: schema, DATABASE_POOL_SIZE: '4' } }));
  });
  after(async () => {
    for (const s of servers) {
      await s.stop();
      removeDir(s.dataDir);
    }
  });
  const as = (i, user = 'alice') => servers[i % servers.length].as(user);

  test('If-Match races across instances: of 30 conditional writes on one version, exactly one wins', async () => {
    const made = (await as(0).post(BASE, newSession({ name: 'raced' }))).body.data;
    const etag = (await as(1).get(`${BASE}/${made._id}`)).headers.etag;
    const answers = await Promise.all(
      Array.from({ length: 30 }, (_, i) => as(i).put(`${BASE}/${made._id}`, { name: `writer ${i}` }, { headers: { 'if-match': etag } })),
    );
    const won = answers.filter((r) => r.status === 200);
    assert.equal(won.length, 1, answers.map((r) => r.status).join(','));
    assert.ok(answers.every((r) => r.status === 200 || r.status === 412));
    for (let i = 0; i < 3; i++) assert.equal((await as(i).get(`${BASE}/${made._id}`)).body.data.name, won[0].body.data.name, `instance ${i} sees the winner`);
    // a delete racing turn appends on one version, through different instances
    const t = await as(2).post(BASE, newSession({ name: 'delete or turn' }));
    const racers = await Promise.all([
      as(0).del(`${BASE}/${t.body.data._id}`, { headers: { 'if-match': t.headers.etag } }),
      as(1).post(`${BASE}/${t.body.data._id}/turns`, { role: 'user', content: 'x' }, { headers: { 'if-match': t.headers.etag } }),
      as(2).put(`${BASE}/${t.body.data._id}`, { name: 'y' }, { headers: { 'if-match': t.headers.etag } }),
    ]);
    assert.equal(racers.filter((r) => r.status < 300).length, 1, racers.map((r) => r.status).join(','));
  });

  test('[D-postgres-10] a write answered by one instance is what every other reads right after, its ETag too', async () => {
    const made = (await as(0).post(BASE, newSession({ name: 'read after write' }))).body.data;
    for (let i = 0; i < 3; i++) assert.equal((await as(i).get(`${BASE}/${made._id}`)).status, 200); // each instance has read it
    for (let k = 0; k < 12; k++) {
      const w = await as(k).put(`${BASE}/${made._id}`, { name: `name ${k}` });
      assert.equal(w.status, 200);
      for (const i of [k + 1, k + 2]) {
        const r = await as(i).get(`${BASE}/${made._id}`);
        assert.equal(r.body.data.name, `name ${k}`, `instance ${i % 3} after a write through instance ${k % 3}`);
        assert.equal(r.headers.etag, w.headers.etag);
      }
    }
  });

  test('lists and cursors are the same from any instance, whole or paged through several', async () => {
    const user = `lister-${process.pid}`;
    await Promise.all(Array.from({ length: 45 }, (_, i) => as(i, user).post(BASE, newSession({ name: `s${i}`, projectId: 'shared-project' }))));
    const whole = [];
    for (let i = 0; i < 3; i++) whole.push((await as(i, user).get(BASE)).body.data);
    assert.equal(whole[0].length, 45);
    assert.deepEqual(whole[1], whole[0]);
    assert.deepEqual(whole[2], whole[0]);
    const paged = [];
    let cursor;
    for (let page = 0; ; page++) {
      const r = await as(page, user).get(`${BASE}?limit=7${cursor === undefined ? '' : `&cursor=${cursor}`}`);
      assert.equal(r.status, 200, r.text);
      paged.push(...r.body.data);
      if (r.body.nextCursor === null) break;
      cursor = r.body.nextCursor;
    }
    assert.deepEqual(paged, whole[0]);
    const project = await Promise.all([0, 1, 2].map((i) => as(i, user).get(`${BASE}?projectId=shared-project&limit=1000`)));
    assert.deepEqual(project[1].body, project[0].body);
    assert.deepEqual(project[2].body, project[0].body);
  });

  test('a session deleted through one instance is gone from all at once; turns through all three are all there', async () => {
    const s = (await as(0).post(BASE, newSession({ name: 'shared' }))).body.data;
    for (let i = 0; i < 9; i++) assert.equal((await as(i).post(`${BASE}/${s._id}/turns`, { role: 'user', content: `t${i}` })).status, 201);
    const turns = await Promise.all([0, 1, 2].map((i) => as(i).get(`${BASE}/${s._id}/turns`)));
    for (const r of turns) assert.deepEqual(r.body.data.map((t) => t.content), ['t0', 't1', 't2', 't3', 't4', 't5', 't6', 't7', 't8']);
    assert.equal((await as(1).del(`${BASE}/${s._id}`)).status, 200);
    for (let i = 0; i < 3; i++) {
      assert.equal((await as(i).get(`${BASE}/${s._id}`)).status, 404, `instance ${i}`);
      assert.deepEqual((await as(i).get(`${BASE}/${s._id}/turns`)).body.data, []);
    }
  });

  test('concurrent writes through every instance: none lost, and every instance counts the same sessions, turns and bytes', async () => {
    const user = `writer-${process.pid}`;
    const ids = (await Promise.all(Array.from({ length: 30 }, (_, i) => as(i, user).post(BASE, newSession({ name: `w${i}` }))))).map((r) => r.body.data._id);
    await Promise.all(ids.flatMap((id, i) => [as(i + 1, user).post(`${BASE}/${id}/turns`, { role: 'user', content: `a${i}` }), as(i + 2, user).post(`${BASE}/${id}/turns`, { role: 'assistant', content: `b${i}` })]));
    for (let i = 0; i < 3; i++) {
      const list = (await as(i, user).get(BASE)).body.data;
      assert.equal(list.length, 30);
      for (const id of ids) assert.equal((await as(i, user).get(`${BASE}/${id}/turns`)).body.data.length, 2);
    }
    const gauges = await Promise.all(servers.map(async (s) => (await s.request('GET', '/metrics')).text.match(/^chat_session_api_(sessions|turns|store_bytes) \d+$/gm).join('\n')));
    assert.equal(gauges[1], gauges[0]);
    assert.equal(gauges[2], gauges[0]);
  });
});

describe('Quotas across instances (STORE=postgres)', PG, () => {
  // every quota at once: each round's own user, and a quota the round's load passes only by racing
  const servers = [];
  const schema = `multi_quotas_${process.pid}`;
  before(async () => {
    const env = { DATABASE_SCHEMA: schema, DATABASE_POOL_SIZE: '4', QUOTA_SESSIONS: '3', QUOTA_TURNS: '4', QUOTA_BYTES: '8kb' };
    for (let i = 0; i < 2; i++) servers.push(await startServer({ env }));
  });
  after(async () => {
    for (const s of servers) {
      await s.stop();
      removeDir(s.dataDir);
    }
  });
  const as = (i, user) => servers[i % servers.length].as(user);
  const refusal = (quota, limit) => ({ status: 403, body: { success: false, message: `Quota exceeded: ${quota} (at most ${limit} per user)` } });
  const ROUNDS = 12;
  /** Sends `count` writes at once, alternating between the two instances; the answers, the refusals checked against `quota`. */
  const race = async (count, write, quota, limit) => {
    const answers = await Promise.all(Array.from({ length: count }, (_, i) => write(i)));
    for (const r of answers) if (r.status !== 201) assert.deepEqual({ status: r.status, body: r.body }, refusal(quota, limit));
    return answers.filter((r) => r.status === 201).length;
  };

  test('[D-limits-12] QUOTA_SESSIONS=3: 8 creates at once over two instances give 3 sessions, the rest a 403 each', async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const user = `creator-${round}`;
      const made = await race(8, (i) => as(i, user).post(BASE, newSession({ name: `s${i}` })), 'sessions', 3);
      assert.equal(made, 3, `round ${round}`);
      for (let i = 0; i < 2; i++) assert.equal((await as(i, user).get(BASE)).body.data.length, 3, `round ${round}, instance ${i}`);
    }
  });

  test('[D-limits-12] QUOTA_TURNS and QUOTA_BYTES hold across instances where the writes share no session', async () => {
    for (const [quota, limit, content, expected] of [['turns', 4, 'short', 4], ['bytes', 8192, 'y'.repeat(2000), 3]]) {
      for (let round = 0; round < ROUNDS; round++) {
        const user = `${quota}-writer-${round}`;
        const sessions = [];
        for (let i = 0; i < 2; i++) sessions.push((await as(i, user).post(BASE, newSession({ name: `s${i}` }))).body.data._id);
        // each instance writes to a session of its own: their groups lock no session in common
        const made = await race(8, (i) => as(i, user).post(`${BASE}/${sessions[i % 2]}/turns`, { role: 'user', content: `${i} ${content}` }), quota, limit);
        assert.equal(made, expected, `${quota}, round ${round}`);
        const stored = await Promise.all(sessions.map(async (id) => (await as(1, user).get(`${BASE}/${id}/turns`)).body.data.length));
        assert.equal(stored[0] + stored[1], expected, `${quota}, round ${round}: what is stored`);
      }
    }
  });
});

describe('Replies across instances (STORE=postgres)', PG, () => {
  const schema = `multi_replies_${process.pid}`;
  const providerId = '6f00000000000000000000a1';
  let provider;
  const servers = [];
  const start = async () => {
    const s = await startServer({ env: { DATABASE_SCHEMA: schema, DATABASE_POOL_SIZE: '4' }, providers: [{ _id: providerId, name: 'Local Ollama', type: 'ollama', baseUrl: provider.url }] });
    servers.push(s);
    return s;
  };
  before(async () => {
    provider = await startProvider();
  });
  after(async () => {
    for (const s of servers) {
      await s.stop();
      removeDir(s.dataDir);
    }
    await provider?.close();
  });
  const words = (t) => (t.content === '' ? 0 : t.content.split(' ').length);

  test('[D-door-19] first requests of one conversation key at two instances at once make one session, holding both', async () => {
    const [a, b] = [await start(), await start()];
    const keys = Array.from({ length: 8 }, (_, i) => `key-${process.pid}-${i}`);
    const ask = (s, key, j) => s.as('alice').post('/v1/chat/completions', { model: 'local-ollama/echo', messages: [{ role: 'user', content: `hello ${j}` }] }, { headers: { 'x-conversation-key': key } });
    const answers = await Promise.all(keys.flatMap((key) => [ask(a, key, 0), ask(b, key, 1)]));
    for (const r of answers) assert.equal(r.status, 200, r.text);
    for (let i = 0; i < keys.length; i++) {
      const [x, y] = [answers[2 * i], answers[2 * i + 1]];
      assert.equal(x.headers['x-session-id'], y.headers['x-session-id'], `${keys[i]}: one session`);
      const turns = (await a.as('alice').get(`${BASE}/${x.headers['x-session-id']}/turns`)).body.data;
      assert.deepEqual(turns.filter((t) => t.role === 'user').map((t) => t.content).sort(), ['hello 0', 'hello 1']);
    }
  });

  test('[D-replies-9] a cancel through another instance stops the reply where it is generated, recorded interrupted', async () => {
    const [a, b, c] = [await start(), await start(), await start()];
    const s = (await a.as('alice').post(BASE, newSession({ providerId, selectedModel: 'stall-after:3' }))).body.data;
    const r = await a.as('alice').post(`${BASE}/${s._id}/messages`, { content: 'generated on the first', background: true });
    assert.equal(r.status, 202, r.text);
    const replyId = r.body.data.reply._id;
    await waitFor(async () => words((await b.as('alice').get(`${BASE}/${s._id}/turns/${replyId}`)).body.data) === 3, 'the words before the stall to be recorded');
    const busy = await c.as('alice').post(`${BASE}/${s._id}/messages`, { content: 'through the third' });
    assert.deepEqual([busy.status, busy.body], [409, { success: false, message: 'A reply is already in progress' }]);
    const cancelled = await b.as('alice').post(`${BASE}/${s._id}/turns/${replyId}/cancel`, {});
    assert.equal(cancelled.status, 200, cancelled.text);
    assert.equal(cancelled.body.data.status, 'interrupted');
    assert.equal(words(cancelled.body.data), 3);
    const asked = provider.requests.find((q) => q.model === 'stall-after:3' && JSON.stringify(q.body).includes('generated on the first'));
    await asked.closed;
    assert.equal(asked.clientClosed, true, "the first instance closed the provider's request");
    for (const x of [a, b, c]) assert.deepEqual((await x.as('alice').get(`${BASE}/${s._id}/turns/${replyId}`)).body.data, cancelled.body.data);
    const metrics = (await a.request('GET', '/metrics')).text;
    assert.match(metrics, /^chat_session_api_replies_in_progress 0$/m, 'the generating instance let it go');
  });

  test('[D-replies-9] with its instance killed, a reply is ended interrupted by a cancel through another', async () => {
    const a = await start();
    const b = await start();
    const s = (await a.as('alice').post(BASE, newSession({ providerId, selectedModel: 'stall-after:2' }))).body.data;
    const r = await a.as('alice').post(`${BASE}/${s._id}/messages`, { content: 'then the instance dies', background: true });
    const replyId = r.body.data.reply._id;
    await waitFor(async () => words((await b.as('alice').get(`${BASE}/${s._id}/turns/${replyId}`)).body.data) === 2, 'the words before the stall to be recorded');
    await a.kill();
    const cancelled = await b.as('alice').post(`${BASE}/${s._id}/turns/${replyId}/cancel`, {});
    assert.equal(cancelled.status, 200, cancelled.text);
    assert.equal(cancelled.body.data.status, 'interrupted');
    assert.equal(words(cancelled.body.data), 2, 'what was committed is there');
    const next = await b.as('alice').post(`${BASE}/${s._id}/messages`, { content: 'a new start', model: 'say:again' });
    assert.equal(next.status, 201, next.text);
    assert.equal(next.body.data.reply.content, 'again');
  });
});

describe('Moving between engines (export from one, import into another)', PG, () => {
  // on the postgres run both engines are at hand: sqlite, and postgres on the run's database
  test('"export / import work for every engine and between engines (sqlite -> postgres and back give identical API answers)"', async () => {
    const { movesBetweenEngines } = await import('../engine-moves.mjs');
    await movesBetweenEngines(tempDir);
  });
});
