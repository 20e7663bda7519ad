// Several instances of the service on one PostgreSQL database, the way an operator scales out
// or upgrades without downtime: requests spread over three server processes that share a
// schema. Runs on the postgres run of the suite (the others skip it with a line).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { newSession, removeDir, startServer, STORE, tempDir } from './helpers.mjs';

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

  test('If-Match races across instances: of 30 conditional writes on one version, sent through three instances at once, exactly one wins', async () => {
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

  test('"GET on PostgreSQL is not cached": a write answered by one instance is what every other reads right after, its ETag too, again and again', async () => {
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

  test('lists and cursors are the same from any instance: the whole list from each, and a list paged with each page read through another instance', async () => {
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

  test('a session deleted through one instance is gone through all of them at once; turns recorded through all three are all there, in order', async () => {
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

describe('Moving between engines (export from one, import into another)', PG, () => {
  // on the postgres run, all three engines are at hand: the journal on this Node, sqlite on the
  // pinned Node 24, postgres on the run's database
  test('"export / import work for every engine and between engines (journal -> sqlite -> postgres and back give identical API answers)"', async () => {
    const { movesBetweenEngines } = await import('./engine-moves.mjs');
    await movesBetweenEngines(tempDir);
  });
});
