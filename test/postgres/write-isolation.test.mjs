// One write whose data PostgreSQL refuses fails alone: the writes committed in the same group
// (other users' too) are committed one by one and answered as if it had not been there. The
// refused data is made as an earlier release could have left it: a session's JSON holding half of
// a surrogate pair alone (refused by the index of conversation keys once the session has one).
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { describe, test } from 'node:test';
import { metric } from '../api-kit.mjs';
import { forgetStore, newSession, removeDir, startServer, STORE, storeEnv } from '../helpers.mjs';
import { waitFor } from '../pg/cluster.mjs';

const POSTGRES = STORE === 'postgres' ? {} : { skip: `about the postgres engine; this run tests STORE=${STORE}` };
const B = '/api/v1/chat-sessions';

/** A connection to the schema of `dir`, as a program other than the server would hold one. */
function poolOn(dir) {
  const { Pool } = createRequire(import.meta.url)('../../dist/testkit.cjs');
  const { DATABASE_URL, DATABASE_SCHEMA } = storeEnv(dir);
  return { pool: new Pool(DATABASE_URL, { max: 1 }), S: `"${DATABASE_SCHEMA}"` };
}

describe('PostgreSQL: a write the database refuses fails alone', POSTGRES, () => {
  test('[D-postgres-11] a group holding a write PostgreSQL refuses commits its other writes one by one; that one is 500', async () => {
    let s = await startServer();
    const dir = s.dataDir;
    const { pool, S } = poolOn(dir);
    try {
      const poisoned = (await s.as('alice').post(B, newSession({ name: 'plain' }))).body.data._id;
      const bob = s.as('bob');
      const first = (await bob.post(B, newSession({ name: 'first' }))).body.data._id;
      const second = (await bob.post(B, newSession({ name: 'second' }))).body.data._id;
      await s.stop();
      // what an earlier release let in: a name that is half of a surrogate pair alone
      await pool.query(`UPDATE ${S}.sessions SET json = replace(json, '"name":"plain"', '"name":"\\ud800"') WHERE id = $1`, [poisoned]);
      s = await startServer({ dataDir: dir });
      const alice = s.as('alice');
      const bob2 = s.as('bob');
      const idle = await metric(s, 'chat_session_api_requests_in_flight');
      // bob's first session locked from outside: the writer's group waits on it, and the writes after it queue up as one group
      let release;
      const held = pool.withConnection(async (c) => {
        await c.query('BEGIN');
        await c.query(`SELECT id FROM ${S}.sessions WHERE id = $1 FOR UPDATE`, [first]);
        await new Promise((r) => (release = r));
        await c.query('COMMIT');
      });
      await waitFor(() => release !== undefined, { what: 'the lock' });
      const blocked = bob2.post(`${B}/${first}/turns`, { role: 'user', content: 'waits for the lock' });
      await waitFor(async () => (await metric(s, 'chat_session_api_requests_in_flight')) >= idle + 1, { what: 'the first write in' });
      const keyed = s.request('PUT', `${B}/${poisoned}`, { token: alice.token, json: { metadata: { conversationKey: 'k' } } });
      const others = Array.from({ length: 5 }, (_, i) => bob2.post(`${B}/${second}/turns`, { role: 'user', content: `bob ${i}` }));
      await waitFor(async () => (await metric(s, 'chat_session_api_requests_in_flight')) >= idle + 7, { what: 'the group queued' });
      release();
      await held;
      assert.equal((await blocked).status, 201);
      const refused = await keyed;
      assert.equal(refused.status, 500, refused.text);
      assert.equal(refused.body.message, 'Storage write failed');
      assert.deepEqual((await Promise.all(others)).map((r) => r.status), Array(5).fill(201), 'the writes grouped with it are committed');
      assert.equal((await bob2.get(`${B}/${second}/turns`)).body.data.length, 5);
      assert.match(s.stdout, /each is committed by itself/);
      assert.equal((await s.request('GET', '/healthz')).status, 200);
    } finally {
      await pool.end();
      await s.stop();
      forgetStore(dir);
      removeDir(dir);
    }
  });
});
