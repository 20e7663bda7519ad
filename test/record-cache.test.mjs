// GET by id through the sqlite engine's cache of hot sessions (issue 28, item 4), against the real
// server: what a client was answered by a write is what every later read gives, from any
// connection; deleted and expired sessions are gone at once; the cache stays within its share
// of the heap. On postgres (no cache) the same answers hold, and the sqlite-only gauges are skipped.
import assert from 'node:assert/strict';
import { existsSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { assert404, BASE, create, freshUser, metric, server, sharedServer } from './api-kit.mjs';
import { newSession, removeDir, request, startServer, STORE, tempDir } from './helpers.mjs';

// one user reads and writes from many connections at once here: more than its default share of requests in flight
sharedServer({ env: { FSYNC: 'off', MAX_REQUESTS_PER_USER: '128' } });

/** libfaketime, to step a server's wall clock (as test/clock.test.mjs does), or undefined. */
const FAKETIME = (() => {
  for (const base of ['/usr/lib', '/usr/local/lib']) {
    if (!existsSync(base)) continue;
    for (const sub of ['', ...readdirSync(base)]) {
      const lib = join(base, sub, 'faketime', 'libfaketimeMT.so.1');
      if (existsSync(lib)) return lib;
    }
  }
  return undefined;
})();

/** GET of a session on a connection of its own (no keep-alive): another client than the writer's. */
const getAlone = (who, id) => request(server.url, 'GET', `${BASE}/${id}`, { token: who.token, keepAlive: false });

describe('The cache of hot sessions and pages (sqlite; on postgres, which has none, the same answers)', () => {
  test('[D-sqlite-2] renames and appends read at once from many connections are never older than acknowledged', async () => {
    const u = freshUser('cache-fresh');
    const sessions = [];
    for (let i = 0; i < 6; i++) sessions.push((await create(u))._id);
    // readers on the side keep the sessions in the cache (and read them while groups commit)
    let reading = true;
    let sideReads = 0;
    const side = Array.from({ length: 4 }, (_, k) =>
      (async () => {
        for (let n = k; reading; n++) {
          const r = await u.get(`${BASE}/${sessions[n % sessions.length]}`);
          assert.equal(r.status, 200, r.text);
          sideReads++;
        }
      })(),
    );
    try {
      await Promise.all(
        sessions.map(async (id, k) => {
          for (let round = 0; round < 20; round++) {
            let want;
            if ((round + k) % 3 === 2) {
              const t = await u.post(`${BASE}/${id}/turns`, { role: 'user', content: `turn ${round}` });
              assert.equal(t.status, 201, t.text);
              const after = await u.get(`${BASE}/${id}`);
              want = { headTurnId: t.body.data._id, etag: after.headers.etag };
              assert.equal(after.body.data.headTurnId, t.body.data._id, 'the writer reads its own append');
            } else {
              const p = await u.put(`${BASE}/${id}`, { name: `round ${round} of ${k}` });
              assert.equal(p.status, 200, p.text);
              want = { name: `round ${round} of ${k}`, etag: p.headers.etag };
            }
            const reads = await Promise.all(Array.from({ length: 4 }, () => getAlone(u, id)));
            for (const r of reads) {
              assert.equal(r.status, 200, r.text);
              assert.equal(r.headers.etag, want.etag, `round ${round}: every connection reads the acknowledged version`);
              if (want.name !== undefined) assert.equal(r.body.data.name, want.name);
              else assert.equal(r.body.data.headTurnId, want.headTurnId);
            }
          }
        }),
      );
    } finally {
      reading = false;
      await Promise.all(side);
    }
    assert.ok(sideReads > 0);
    if (STORE === 'sqlite') assert.ok((await metric(server, 'chat_session_api_sqlite_record_cache_hits_total')) > 0, 'the reads went through the cache');
  });

  test('[D-sqlite-2] a kept session is 404 everywhere once its DELETE is answered; a deleted turn moves the head at once', async () => {
    const u = freshUser('cache-delete');
    const s = (await u.post(BASE, newSession())).body.data;
    for (let i = 0; i < 3; i++) assert.equal((await u.get(`${BASE}/${s._id}`)).status, 200);
    assert.equal((await u.del(`${BASE}/${s._id}`)).status, 200);
    for (const r of await Promise.all([u.get(`${BASE}/${s._id}`), getAlone(u, s._id), getAlone(u, s._id)])) assert404(r, 'deleted');

    const t = (await u.post(BASE, newSession())).body.data;
    const first = (await u.post(`${BASE}/${t._id}/turns`, { role: 'user', content: 'one' })).body.data;
    const second = (await u.post(`${BASE}/${t._id}/turns`, { role: 'user', content: 'two' })).body.data;
    assert.equal((await u.get(`${BASE}/${t._id}`)).body.data.headTurnId, second._id);
    assert.equal((await u.del(`${BASE}/${t._id}/turns/${second._id}`)).status, 200);
    const after = await getAlone(u, t._id);
    assert.equal(after.body.data.headTurnId, first._id, 'the head moved back with the deletion');
  });

  test('[D-sqlite-2] a session kept while live is 404 once its expiresAt has passed', async () => {
    const u = freshUser('cache-expiry');
    const expiresAt = new Date(Date.now() + 1500).toISOString();
    const s = (await u.post(BASE, newSession({ expiresAt }))).body.data;
    for (let i = 0; i < 3; i++) assert.equal((await u.get(`${BASE}/${s._id}`)).status, 200, 'live');
    // past its expiry by the clock both processes read (no timing is asserted: only the order of the two reads)
    while (Date.now() <= Date.parse(expiresAt) + 5) await new Promise((r) => setTimeout(r, 50));
    assert404(await u.get(`${BASE}/${s._id}`), 'expired');
    assert404(await getAlone(u, s._id), 'expired, another connection');
  });

  test('[D-sqlite-2] a kept page shows at once each create, rename, append, archive and delete of its sessions', async () => {
    const u = freshUser('cache-page');
    const page = async () => {
      const a = await u.get(`${BASE}?limit=50`);
      const b = await request(server.url, 'GET', `${BASE}?limit=50`, { token: u.token, keepAlive: false });
      assert.equal(a.status, 200, a.text);
      assert.equal(b.text, a.text, 'every connection reads the same page');
      return a.body.data;
    };
    const names = async () => (await page()).map((x) => x.name);
    const made = [];
    for (let i = 0; i < 4; i++) {
      made.push((await u.post(BASE, newSession({ name: `s${i}` }))).body.data);
      for (let k = 0; k < 2; k++) assert.deepEqual(await names(), made.map((x) => x.name).reverse(), 'a create is in the page at once');
    }
    assert.equal((await u.put(`${BASE}/${made[0]._id}`, { name: 'renamed' })).status, 200);
    assert.deepEqual(await names(), ['renamed', 's3', 's2', 's1'], 'a rename moves its session to the front');
    assert.equal((await u.post(`${BASE}/${made[1]._id}/turns`, { role: 'user', content: 'hi' })).status, 201);
    assert.deepEqual(await names(), ['s1', 'renamed', 's3', 's2'], 'an append raises its session');
    assert.equal((await u.post(`${BASE}/${made[2]._id}/archive`)).status, 200);
    assert.deepEqual(await names(), ['s1', 'renamed', 's3'], 'an archived session leaves the page');
    assert.equal((await u.del(`${BASE}/${made[3]._id}`)).status, 200);
    assert.deepEqual(await names(), ['s1', 'renamed'], 'a deleted session leaves the page');
    // another user's writes leave this page as it was, and it is the same page every time
    await create(freshUser('cache-page-other'));
    assert.deepEqual(await names(), ['s1', 'renamed']);
  });

  test('[D-sqlite-2] a kept page leaves a session out once its expiresAt has passed', async () => {
    const u = freshUser('cache-page-expiry');
    const expiresAt = new Date(Date.now() + 1500).toISOString();
    const kept = (await u.post(BASE, newSession({ name: 'kept' }))).body.data;
    const going = (await u.post(BASE, newSession({ name: 'going', expiresAt }))).body.data;
    for (let i = 0; i < 3; i++) assert.deepEqual((await u.get(`${BASE}?limit=10`)).body.data.map((x) => x._id), [going._id, kept._id], 'live');
    while (Date.now() <= Date.parse(expiresAt) + 5) await new Promise((r) => setTimeout(r, 50));
    assert.deepEqual((await u.get(`${BASE}?limit=10`)).body.data.map((x) => x._id), [kept._id], 'expired: out of the page');
  });

  test('[D-sqlite-2] with RETENTION_DAYS=1 and the clock stepped 2 days on, a kept page is empty, its session 404', { skip: FAKETIME === undefined && 'libfaketime not found (apt-get install faketime)' }, async () => {
    const clockDir = tempDir('csa-clock-');
    const offset = join(clockDir, 'offset');
    writeFileSync(offset, '+0\n');
    const s = await startServer({ env: { RETENTION_DAYS: '1', FSYNC: 'off', LD_PRELOAD: FAKETIME, FAKETIME_TIMESTAMP_FILE: offset, FAKETIME_NO_CACHE: '1', FAKETIME_DONT_FAKE_MONOTONIC: '1' } });
    try {
      const u = s.as('alice', { exp: undefined }); // no exp: valid whatever the server's clock says
      const made = (await u.post(BASE, newSession())).body.data;
      for (let i = 0; i < 3; i++) assert.deepEqual((await u.get(`${BASE}?limit=10`)).body.data.map((x) => x._id), [made._id], 'live');
      assert.equal((await u.get(`${BASE}/${made._id}`)).status, 200);
      writeFileSync(offset, `+${2 * 86_400}\n`);
      // the step is seen once the server's Date header shows it
      while (Date.parse((await s.request('GET', '/healthz')).headers.date) < Date.now() + 86_400_000) await new Promise((r) => setTimeout(r, 50));
      assert.deepEqual((await u.get(`${BASE}?limit=10`)).body.data, [], 'gone from the page');
      assert404(await u.get(`${BASE}/${made._id}`), 'gone by id');
    } finally {
      await s.stop();
      removeDir(s.dataDir);
      removeDir(clockDir);
    }
  });

  test('[D-limits-13] under a 64 MiB heap the cache stays within its 1 MiB and answers the last sessions read', { skip: STORE !== 'sqlite' && 'the cache is sqlite\'s' }, async () => {
    const s = await startServer({ nodeArgs: ['--max-old-space-size=64'], env: { FSYNC: 'off', MEMORY_LIMIT: 'off' } });
    try {
      const u = s.as('alice');
      assert.equal(await metric(s, 'chat_session_api_sqlite_record_cache_budget_bytes'), 1024 * 1024);
      const ids = [];
      for (let i = 0; i < 600; i += 8) {
        const made = await Promise.all(Array.from({ length: 8 }, (_, k) => u.post(BASE, newSession({ name: `${i + k} ${'n'.repeat(480)}`, selectedModel: 'm'.repeat(200) }))));
        for (const r of made) {
          assert.equal(r.status, 201, r.text);
          ids.push(r.body.data._id);
        }
      }
      for (const id of ids) assert.equal((await u.get(`${BASE}/${id}`)).status, 200);
      const bytes = await metric(s, 'chat_session_api_sqlite_record_cache_bytes');
      const kept = await metric(s, 'chat_session_api_sqlite_record_cache_sessions');
      assert.ok(bytes <= 1024 * 1024, `${bytes} bytes charged, within the budget`);
      assert.ok(kept > 0 && kept < ids.length, `${kept} of ${ids.length} sessions kept`);
      const hits = await metric(s, 'chat_session_api_sqlite_record_cache_hits_total');
      assert.equal((await u.get(`${BASE}/${ids.at(-1)}`)).status, 200);
      assert.equal(await metric(s, 'chat_session_api_sqlite_record_cache_hits_total'), hits + 1, 'the last one read is kept');
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });
});
