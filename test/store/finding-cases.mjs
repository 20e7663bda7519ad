// The store contract for finding and keeping (issue #14): tag lists, run in-process against
// each engine like cases.mjs. Every case works on a fresh store in a fresh temporary directory.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { kit, openOn } from './engines.mjs';
import { at, clock, NO_USAGE, session } from './fixtures.mjs';

const { chatSession, newObjectId, livenessAt, purgeExpired, pausedLike, eraseUser, PURGE_BATCH } = kit;

const turnAt = (ms, user = 'alice') => ({ _id: newObjectId(Date.UTC(2026, 0, 1) + ms), user, role: 'user', content: 'hi', createdAt: at(ms) });
const listOrder = (a, b) => (a.updatedAt !== b.updatedAt ? (a.updatedAt > b.updatedAt ? -1 : 1) : a._id > b._id ? -1 : 1);

async function walk(store, filter, limit) {
  const out = [];
  let after;
  for (;;) {
    const page = await store.listSessions(filter, after, limit);
    out.push(...page.items.map((r) => r.session));
    if (page.next === undefined) return out;
    after = page.next;
  }
}
async function whole(store, filter) {
  const out = [];
  for await (const chunk of store.scanSessions(filter)) out.push(...chunk.map((r) => r.session));
  return out;
}

export function findingContract(engine) {
  const withStore = async (fn) => {
    const dir = mkdtempSync(join(tmpdir(), `csa-finding-${engine}-`));
    let store = await openOn(engine, dir);
    try {
      return await fn(store, async () => {
        await store.close();
        store = await openOn(engine, dir);
        return store;
      });
    } finally {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  };

  describe(`Store contract, finding and keeping: ${engine}`, () => {
    test('[D-finding-6] a tag reads its own list, in list order, on every list; more tags must all match; paged and whole', async () => {
      await withStore(async (store, reopen) => {
        const tagsOf = (i) => [i % 2 === 0 ? 'Even' : 'odd', ...(i % 3 === 0 ? ['three'] : [])];
        const made = [];
        for (let i = 0; i < 24; i++) {
          made.push((await store.createSession(session({ ms: (i % 4) * 10, archived: i % 5 === 0, user: i % 7 === 0 ? 'bob' : 'alice', project: i % 4 < 2 ? 'p1' : 'p2', tags: tagsOf(i) }))).session);
        }
        const has = (s, tags) => tags.every((t) => s.tags.map((x) => x.toLowerCase()).includes(t));
        const cases = [
          [{ user: 'alice', archived: 'false', tags: ['even'] }, (s) => s.user === 'alice' && !s.archived && has(s, ['even'])],
          [{ user: 'alice', archived: 'all', tags: ['even', 'three'] }, (s) => s.user === 'alice' && has(s, ['even', 'three'])],
          [{ user: 'alice', archived: 'true', tags: ['odd'] }, (s) => s.user === 'alice' && s.archived && has(s, ['odd'])],
          [{ project: 'p1', archived: 'all', tags: ['three'] }, (s) => s.project === 'p1' && has(s, ['three'])],
          [{ project: 'p2', user: 'alice', archived: 'false', tags: ['odd'] }, (s) => s.project === 'p2' && s.user === 'alice' && !s.archived && has(s, ['odd'])],
          [{ user: 'alice', archived: 'false', tags: ['none'] }, () => false],
        ];
        const check = async (st, what) => {
          for (const [filter, pred] of cases) {
            const expected = made.filter(pred).sort(listOrder).map((s) => s._id);
            for (const limit of [1, 3, 1000]) assert.deepEqual((await walk(st, filter, limit)).map((s) => s._id), expected, `${what} ${JSON.stringify(filter)} limit ${limit}`);
            assert.deepEqual((await whole(st, filter)).map((s) => s._id), expected, `${what} ${JSON.stringify(filter)} whole`);
          }
        };
        await check(store, 'open');
        await check(await reopen(), 'reopened');
      });
    });

    test('tag lists follow every write: a turn, an archive, new tags and a delete move a session between them', async () => {
      await withStore(async (store, reopen) => {
        const a = (await store.createSession(session({ ms: 0, tags: ['x'] }))).session;
        const b = (await store.createSession(session({ ms: 1, tags: ['x', 'y'] }))).session;
        const ids = async (filter) => (await walk(store, { user: 'alice', archived: 'false', ...filter }, 10)).map((s) => s._id);
        assert.deepEqual(await ids({ tags: ['x'] }), [b._id, a._id]);
        await store.appendTurn(a._id, turnAt(100));
        assert.deepEqual(await ids({ tags: ['x'] }), [a._id, b._id], 'a turn raises its session in the tag list');
        await store.updateSession(b._id, { archived: true }, { now: clock(200) });
        assert.deepEqual(await ids({ tags: ['x'] }), [a._id]);
        assert.deepEqual(await ids({ tags: ['y'], archived: 'true' }), [b._id]);
        await store.updateSession(a._id, { tags: ['Z'] }, { now: clock(300) });
        assert.deepEqual(await ids({ tags: ['x'] }), []);
        assert.deepEqual(await ids({ tags: ['z'] }), [a._id]);
        await store.deleteSession(a._id);
        assert.deepEqual(await ids({ tags: ['z'] }), []);
        store = await reopen();
        assert.deepEqual((await walk(store, { user: 'alice', archived: 'all', tags: ['y'] }, 10)).map((s) => s._id), [b._id]);
        assert.deepEqual((await walk(store, { user: 'alice', archived: 'all', tags: ['z'] }, 10)).map((s) => s._id), []);
      });
    });


    test('[D-finding-8] a page with gone sessions among its rows still holds `limit` live ones, in list order', async () => {
      await withStore(async (store) => {
        const made = [];
        // every third session gone by its own expiry, every fifth (without one) by RETENTION_DAYS: updated before the cutoff
        for (let i = 0; i < 30; i++) {
          const ms = i % 5 === 0 ? i : 40 * 86_400_000 + i;
          made.push((await store.createSession(session({ ms, ...(i % 3 === 0 ? { expiresAt: at(45 * 86_400_000) } : {}) }))).session);
        }
        const now = Date.UTC(2026, 0, 1) + 50 * 86_400_000;
        for (const days of [undefined, 30]) {
          const live = livenessAt(now, days);
          const expected = made
            .filter((s) => (s.expiresAt !== undefined ? false : days === undefined || s.updatedAt > live.cutoff))
            .sort(listOrder)
            .map((s) => s._id);
          for (const archived of ['false', 'all']) {
            const filter = { user: 'alice', archived, live };
            for (const limit of [1, 2, 5, 7, 100]) assert.deepEqual((await walk(store, filter, limit)).map((s) => s._id), expected, `days ${days} ${archived} limit ${limit}`);
            const first = await store.listSessions(filter, undefined, 5);
            assert.equal(first.items.length, 5, 'the first page is full');
            assert.deepEqual((await whole(store, filter)).map((s) => s._id), expected, `days ${days} ${archived} whole`);
          }
        }
      });
    });
    test('export and import carry tags, metadata and expiresAt: an imported store lists by tag the same', async () => {
      let exported;
      await withStore(async (store) => {
        await store.createSession(session({ ms: 0, tags: ['Keep'], metadata: { k: 'v' }, expiresAt: at(9_999_999_999) }));
        await store.createSession(session({ ms: 1, expiresAt: null }));
        const snap = await store.exportAll();
        exported = [];
        for await (const item of snap.items) exported.push(item.session.session);
      });
      await withStore(async (store) => {
        await store.importAll(exported, []);
        const listed = await walk(store, { user: 'alice', archived: 'false', tags: ['keep'] }, 10);
        assert.deepEqual(listed.map((s) => [s.tags, s.metadata, s.expiresAt]), [[['Keep'], { k: 'v' }, at(9_999_999_999)]]);
        const never = (await walk(store, { user: 'alice', archived: 'false' }, 10)).find((s) => s.tags === undefined);
        assert.equal(never.expiresAt, null);
      });
    });
    test('expired sessions are found by their own expiry and by RETENTION_DAYS; the purge deletes them, usage follows', async () => {
      await withStore(async (store, reopen) => {
        const now = Date.UTC(2026, 0, 1) + 100 * 86_400_000;
        const own = await store.createSession(session({ ms: 0, expiresAt: at(50 * 86_400_000) })); // gone at day 50
        await store.appendTurn(own.session._id, turnAt(1));
        await store.appendTurn(own.session._id, turnAt(2));
        const idle = await store.createSession(session({ ms: 3 })); // no own expiry: RETENTION_DAYS decides
        await store.appendTurn(idle.session._id, turnAt(4));
        const kept = await store.createSession(session({ ms: 5, expiresAt: null }));
        const later = await store.createSession(session({ ms: 6, expiresAt: at(5000 * 86_400_000) })); // years from now
        const ids = (list) => list.map((e) => e.session._id).sort();
        assert.deepEqual(ids(await store.expiredSessions(livenessAt(now, undefined), 10)), [own.session._id]);
        const withDays = await store.expiredSessions(livenessAt(now, 30), 10);
        assert.deepEqual(ids(withDays), [own.session._id, idle.session._id].sort());
        assert.deepEqual(withDays.map((e) => [e.session._id, e.turns]).sort(), [[own.session._id, 2], [idle.session._id, 1]].sort());
        assert.equal((await store.expiredSessions(livenessAt(now, 30), 1)).length, 1);
        const before = await store.usage('alice');
        // the purge reads the wall clock: day 100 of 2026 is long past, so both are gone with 30 days
        const purged = await purgeExpired(store, 30);
        assert.deepEqual(purged, { sessions: 2, turns: 3 });
        store = await reopen();
        assert.equal(await store.getSession(own.session._id), undefined);
        assert.equal(await store.getSession(idle.session._id), undefined);
        assert.deepEqual((await store.listTurns(own.session._id, undefined, 10)).items, []);
        assert.ok(await store.getSession(kept.session._id));
        assert.ok(await store.getSession(later.session._id));
        const after = await store.usage('alice');
        assert.equal(after.sessions, before.sessions - 2);
        assert.equal(after.turns, before.turns - 3);
        assert.deepEqual(await store.expiredSessions(livenessAt(now, 30), 10), []);
        // a second purge (another instance's, say) finds nothing and deletes nothing
        assert.deepEqual(await purgeExpired(store, 30), { sessions: 0, turns: 0 });
      });
    });

    test('the purge goes in batches until every expired session is gone, and a session deleted meanwhile is skipped', async () => {
      await withStore(async (store) => {
        const n = PURGE_BATCH + 7;
        for (let i = 0; i < n; i++) await store.createSession(session({ ms: i, expiresAt: at(i) }));
        const first = (await store.expiredSessions(livenessAt(Date.now(), undefined), 1))[0];
        await store.deleteSession(first.session._id);
        const seen = [];
        const purged = await purgeExpired(store, undefined, (e) => seen.push(e.session._id));
        assert.equal(purged.sessions, n - 1);
        assert.equal(new Set(seen).size, n - 1);
        assert.equal(seen.includes(first.session._id), false);
        assert.deepEqual(await store.expiredSessions(livenessAt(Date.now(), undefined), 10), []);
      });
    });

    test('[D-finding-9] the background purge waits after every full batch as long as it took', async () => {
      await withStore(async (store) => {
        const n = 2 * PURGE_BATCH + 3;
        for (let i = 0; i < n; i++) await store.createSession(session({ ms: i, expiresAt: at(i) }));
        const waits = [];
        const purged = await purgeExpired(store, undefined, undefined, () => false, (ms) => {
          waits.push(ms);
          return Promise.resolve();
        });
        assert.equal(purged.sessions, n);
        // after the two full batches; the last, short one ends the run
        assert.equal(waits.length, 2);
        for (const ms of waits) assert.ok(ms > 0 && Number.isFinite(ms), `a batch's duration: ${ms}`);
        // a timer counts from the event loop's clock, which can lag a few ms behind performance.now(): 30 ms asked, at least 20 seen
        await new Promise((resolve) => setImmediate(resolve));
        const started = performance.now();
        await pausedLike(30);
        assert.ok(performance.now() - started >= 20, `paused ${performance.now() - started} ms`);
      });
    });

    test('erase-user deletes every session one user owns (archived and expired ones too) with all their turns, and nobody else\'s', async () => {
      await withStore(async (store) => {
        const a = await store.createSession(session({ ms: 0 }));
        await store.appendTurn(a.session._id, turnAt(1));
        await store.createSession(session({ ms: 2, archived: true, project: 'other' }));
        await store.createSession(session({ ms: 3, expiresAt: at(3) }));
        const bob = await store.createSession(session({ ms: 4, user: 'bob' }));
        await store.appendTurn(bob.session._id, turnAt(5, 'bob'));
        const erased = [];
        const held = await store.usage('alice');
        assert.deepEqual(await eraseUser(store, 'alice', (id) => erased.push(id)), held, 'what went: all the user held');
        assert.deepEqual([held.sessions, held.turns], [3, 1]);
        assert.equal(erased.length, 3);
        assert.deepEqual(await store.usage('alice'), NO_USAGE);
        assert.equal((await store.usage('bob')).turns, 1);
        assert.deepEqual(await eraseUser(store, 'alice', () => assert.fail('nothing is left')), NO_USAGE);
      });
    });
  });
}
