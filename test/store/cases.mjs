// The store contract: what every engine must do, run in-process against each (see
// contract.test.mjs). Behaviour only some engines have is gated by their capability flags
// (engines.mjs). Every case works on a fresh store in a fresh temporary directory.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { ENGINES, kit, openOn, openSnapshotOn } from './engines.mjs';
import { at, clock, NO_USAGE, REFUSED, session, usageOfItems } from './fixtures.mjs';

const { chatSession, newObjectId, versionOfSession, PreconditionFailed, SessionMoved, SessionNotFound, SessionNotVisible, SessionStillLive, StorageWriteFailed, PAGE_BYTE_BUDGET, PAGE_SCAN_BUDGET, SCAN_CHUNK, setFaultPlan, wholeListReply } = kit;
const CHILD = fileURLToPath(new URL('./child-writer.mjs', import.meta.url));

/** A turn for appendTurn, written by alice (the fixtures' owner): `createdAt` is `ms` after the fixed instant. */
const turnAt = (ms, content = 'hello', role = 'user') => ({
  _id: newObjectId(Date.UTC(2026, 0, 1) + ms),
  user: 'alice',
  role,
  content,
  createdAt: at(ms),
});

/** The session list order: updatedAt newest first, ties by _id descending. */
const listOrder = (a, b) => (a.updatedAt !== b.updatedAt ? (a.updatedAt > b.updatedAt ? -1 : 1) : a._id > b._id ? -1 : a._id < b._id ? 1 : 0);

/** Every item of a list, walked page by page. */
async function walk(store, filter, limit) {
  const out = [];
  let after;
  let pages = 0;
  for (;;) {
    const page = await store.listSessions(filter, after, limit);
    out.push(...page.items.map((r) => r.session));
    pages++;
    if (page.next === undefined) return { items: out, pages };
    after = page.next;
  }
}

async function scanned(store, filter) {
  const out = [];
  for await (const chunk of store.scanSessions(filter)) out.push(...chunk.map((r) => r.session));
  return out;
}

async function turnsOf(store, id) {
  const out = [];
  for await (const chunk of store.scanTurns(id)) out.push(...chunk.map((t) => JSON.parse(t.json.toString('utf8'))));
  return out;
}

/** Everything the store holds, as export writes it: each session's JSON and version, and its turns' JSON. */
async function everything(store) {
  const snap = await store.exportAll();
  const items = [];
  for await (const item of snap.items) items.push({ session: item.session.json, version: item.session.version, turns: item.turns.map((t) => t.json.toString('utf8')) });
  return { sessions: snap.sessions, turns: snap.turns, items };
}

export function contract(engine) {
  const caps = ENGINES[engine];
  const dirs = [];
  const fresh = () => {
    const d = mkdtempSync(join(tmpdir(), `csa-contract-${engine}-`));
    dirs.push(d);
    return d;
  };
  /** Runs `fn` on a fresh store and closes it (and its directory) afterwards. */
  const withStore = async (fn, extra) => {
    const dir = fresh();
    const store = await openOn(engine, dir, extra);
    try {
      return await fn(store, dir);
    } finally {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  };

  describe(`Store contract: ${engine}`, () => {
    test('list order: updatedAt newest first, ties by _id descending, on every list, page by page and whole', async () => {
      await withStore(async (store) => {
        const made = [];
        for (let i = 0; i < 30; i++) made.push(await store.createSession(session({ ms: (i % 4) * 10, archived: i % 5 === 0, project: i % 2 === 0 ? 'even' : 'odd' })));
        const all = made.map((r) => r.session);
        const expect = (pred) => all.filter(pred).sort(listOrder).map((s) => s._id);
        const cases = [
          [{ user: 'alice', archived: 'false' }, (s) => !s.archived],
          [{ user: 'alice', archived: 'true' }, (s) => s.archived],
          [{ user: 'alice', archived: 'all' }, () => true],
          [{ project: 'even', archived: 'false' }, (s) => s.project === 'even' && !s.archived],
          [{ project: 'odd', archived: 'all' }, (s) => s.project === 'odd'],
        ];
        for (const [filter, pred] of cases) {
          for (const limit of [1, 2, 7, 1000]) assert.deepEqual((await walk(store, filter, limit)).items.map((s) => s._id), expect(pred), `${JSON.stringify(filter)} limit ${limit}`);
          assert.deepEqual((await scanned(store, filter)).map((s) => s._id), expect(pred), `${JSON.stringify(filter)} whole`);
        }
      });
    });

    test('keyset paging across deletes: a page resumes strictly after its key, skipping and repeating nothing', async () => {
      await withStore(async (store) => {
        const ids = [];
        for (let i = 0; i < 12; i++) ids.push((await store.createSession(session({ ms: Math.floor(i / 3) }))).session._id);
        const filter = { user: 'alice', archived: 'false' };
        const first = await store.listSessions(filter, undefined, 4);
        const seen = first.items.map((r) => r.session._id);
        // the page's last item and the next one are deleted before the next page is read
        await store.deleteSession(seen[3]);
        const expected = (await scanned(store, filter)).map((s) => s._id);
        const nextOne = expected[expected.indexOf(seen[2]) + 1];
        await store.deleteSession(nextOne);
        let after = first.next;
        for (;;) {
          const page = await store.listSessions(filter, after, 4);
          seen.push(...page.items.map((r) => r.session._id));
          if (page.next === undefined) break;
          after = page.next;
        }
        const alive = new Set((await scanned(store, filter)).map((s) => s._id));
        assert.deepEqual(
          seen.filter((id) => alive.has(id)),
          [...alive],
          'every live session once, in order',
        );
        assert.equal(new Set(seen).size, seen.length, 'no repeats');
      });
    });

    test('every filter: project, user, owner-only, archived false|true|all, a name contains (case folded), together', async () => {
      await withStore(async (store) => {
        const rows = [
          { user: 'alice', project: 'p1', name: 'Über Plan', archived: false },
          { user: 'alice', project: 'p1', name: 'über plan 2', archived: true },
          { user: 'alice', project: 'p2', name: 'ÜBER THE TOP', archived: false },
          { user: 'bob', project: 'p1', name: 'Bob über', archived: false },
          { user: 'bob', project: 'p2', name: 'Straße', archived: false },
          { user: 'bob', project: 'p1', name: 'nothing', archived: true },
        ];
        const all = [];
        for (const [i, r] of rows.entries()) all.push((await store.createSession(session({ ...r, ms: i }))).session);
        const check = async (filter, pred) => {
          const want = all.filter(pred).sort(listOrder).map((s) => s._id);
          assert.deepEqual((await walk(store, filter, 2)).items.map((s) => s._id), want, JSON.stringify(filter));
          assert.deepEqual((await scanned(store, filter)).map((s) => s._id), want, `${JSON.stringify(filter)} whole`);
        };
        const arch = { false: (s) => !s.archived, true: (s) => s.archived, all: () => true };
        for (const a of ['false', 'true', 'all']) {
          await check({ project: 'p1', archived: a }, (s) => s.project === 'p1' && arch[a](s));
          await check({ user: 'bob', archived: a }, (s) => s.user === 'bob' && arch[a](s));
          await check({ project: 'p1', user: 'alice', archived: a }, (s) => s.project === 'p1' && s.user === 'alice' && arch[a](s));
          await check({ user: 'alice', archived: a, nameContains: 'über' }, (s) => s.user === 'alice' && arch[a](s) && s.name.toLowerCase().includes('über'));
          await check({ project: 'p1', archived: a, nameContains: 'über' }, (s) => s.project === 'p1' && arch[a](s) && s.name.toLowerCase().includes('über'));
          await check({ project: 'p2', user: 'bob', archived: a, nameContains: 'straße' }, (s) => s.project === 'p2' && s.user === 'bob' && arch[a](s));
        }
        await check({ user: 'nobody', archived: 'all' }, () => false);
        await check({ project: 'p1', user: 'carol', archived: 'all' }, () => false);
      });
    });

    test('[D-paging-2] a page ends exactly when its list has nothing after it: active and archived are two lists', async () => {
      await withStore(async (store) => {
        // an archived session older than active ones, and one newer
        await store.createSession(session({ ms: 0, archived: true }));
        await store.createSession(session({ ms: 1 }));
        await store.createSession(session({ ms: 2, archived: true }));
        await store.createSession(session({ ms: 3 }));
        const archived = await store.listSessions({ user: 'alice', archived: 'true' }, undefined, 2);
        assert.equal(archived.items.length, 2);
        assert.equal(archived.next, undefined, 'the archived list has nothing after its two');
        const first = await store.listSessions({ user: 'alice', archived: 'true' }, undefined, 1);
        assert.notEqual(first.next, undefined);
        const active = await store.listSessions({ project: 'proj', archived: 'false' }, undefined, 2);
        assert.equal(active.next, undefined, 'the active list has nothing after its two');
        const all = await store.listSessions({ user: 'alice', archived: 'all' }, undefined, 4);
        assert.equal(all.next, undefined);
        const three = await store.listSessions({ user: 'alice', archived: 'all' }, undefined, 3);
        assert.notEqual(three.next, undefined);
      });
    });

    test(`[D-paging-1] a page examines at most ${PAGE_SCAN_BUDGET} items, then ends early with a key; walking on finds the rest`, async () => {
      await withStore(async (store) => {
        const n = PAGE_SCAN_BUDGET + 300;
        const wanted = [];
        for (let i = 0; i < n; i++) {
          const match = i === 10 || i === n - 5;
          const s = (await store.createSession(session({ ms: i, name: match ? 'needle' : 'hay' }))).session;
          if (match) wanted.push(s._id);
        }
        const filter = { user: 'alice', archived: 'false', nameContains: 'needle' };
        const first = await store.listSessions(filter, undefined, 10);
        assert.equal(first.items.length, 1, 'the newest match, found within the budget');
        assert.notEqual(first.next, undefined, 'the page stopped at the budget: a key to resume from');
        const { items, pages } = await walk(store, filter, 10);
        assert.deepEqual(items.map((s) => s._id), wanted.slice().reverse());
        assert.ok(pages >= 2);
      });
    });

    test(`[D-paging-1] a page of turns ends once it holds ${PAGE_BYTE_BUDGET} bytes of JSON (one turn at least), with a key`, async () => {
      await withStore(async (store) => {
        const s = (await store.createSession(session())).session;
        const big = 'b'.repeat(Math.ceil(PAGE_BYTE_BUDGET * 0.4));
        for (let i = 0; i < 5; i++) await store.appendTurn(s._id, turnAt(100 + i, big));
        await store.appendTurn(s._id, turnAt(200, 'h'.repeat(PAGE_BYTE_BUDGET * 2)));
        await store.appendTurn(s._id, turnAt(300, 'small'));
        const first = await store.listTurns(s._id, undefined, 10);
        assert.equal(first.items.length, 3, 'three turns of 0.4 budget each pass the budget');
        assert.notEqual(first.next, undefined);
        const second = await store.listTurns(s._id, first.next, 10);
        assert.equal(second.items.length, 3, 'two more, and the one that passes it');
        const third = await store.listTurns(s._id, second.next, 10);
        assert.deepEqual(third.items.map((t) => JSON.parse(t.json.toString()).content), ['small']);
        assert.equal(third.next, undefined);
        const alone = await store.listTurns(s._id, second.items[1], 10);
        assert.equal(alone.items.length, 1, 'a turn larger than the budget is a page of its own');
      });
    });

    test(`[D-limits-14] a whole list yields to the event loop between chunks of ${SCAN_CHUNK} items, whatever a filter keeps`, async () => {
      await withStore(async (store) => {
        const n = SCAN_CHUNK * 4;
        for (let i = 0; i < n; i += 256) await Promise.all(Array.from({ length: 256 }, (_, k) => store.createSession(session({ ms: i + k, name: 'hay' }))));
        const s = (await store.createSession(session({ ms: n, name: 'many turns' }))).session;
        for (let i = 0; i < SCAN_CHUNK * 3; i += 256) await Promise.all(Array.from({ length: 256 }, (_, k) => store.appendTurn(s._id, turnAt(n + 1 + i + k))));
        const read = async (answer) => {
          let turns = 0;
          let done = false;
          const tick = () => {
            if (done) return;
            turns++;
            setImmediate(tick);
          };
          setImmediate(tick);
          let text = '';
          if ('stream' in answer) for await (const piece of answer.stream) text += piece;
          else text = answer.body.toString();
          done = true;
          return { data: JSON.parse(text).data, turns };
        };
        const none = await read(await wholeListReply(store.scanSessions({ user: 'alice', archived: 'false', nameContains: 'needle' }), (r) => r.json));
        assert.equal(none.data.length, 0);
        assert.ok(none.turns >= 2, `the event loop turned ${none.turns} times while ${n} sessions were examined`);
        const all = await read(await wholeListReply(store.scanTurns(s._id), (t) => t.json));
        assert.equal(all.data.length, SCAN_CHUNK * 3);
        assert.ok(all.turns >= 1, `the event loop turned ${all.turns} times while ${SCAN_CHUNK * 3} turns were sent`);
      });
    });

    test('N concurrent conditional writes on one version: exactly one wins, and the winner is what is stored', async () => {
      await withStore(async (store) => {
        const s = await store.createSession(session());
        const v = s.version;
        const n = 24;
        const results = await Promise.allSettled(
          Array.from({ length: n }, (_, i) => store.updateSession(s.session._id, { name: `writer ${i}` }, { guard: { ifMatch: `"${v}"` }, now: clock(100 + i) })),
        );
        const won = results.filter((r) => r.status === 'fulfilled');
        assert.equal(won.length, 1, 'exactly one wins');
        assert.ok(results.filter((r) => r.status === 'rejected').every((r) => r.reason instanceof PreconditionFailed));
        const now = await store.getSession(s.session._id);
        assert.equal(now.json, won[0].value.json);
        assert.equal(now.version, won[0].value.version);
        // the same for deletes and turn appends racing on one version
        const t = await store.createSession(session({ ms: 5 }));
        const racers = await Promise.allSettled([
          store.deleteSession(t.session._id, { guard: { ifMatch: `"${t.version}"` } }),
          store.appendTurn(t.session._id, turnAt(50), { guard: { ifMatch: `"${t.version}"` } }),
        ]);
        assert.equal(racers.filter((r) => r.status === 'fulfilled').length, 1);
      });
    });

    test('[D-house-5] a guard is checked at the serial point: the caller, If-Match, the fields read, gone for the purge', async () => {
      await withStore(async (store) => {
        const s = await store.createSession(session());
        const id = s.session._id;
        const before = await everything(store);
        const live = { now: at(1), cutoff: undefined };
        // another owner's session is not there to a caller; under ACCESS=shared it is, and a session past its expiry never
        await assert.rejects(store.updateSession(id, { name: 'x' }, { guard: { caller: { user: 'bob', live } } }), SessionNotVisible);
        await assert.rejects(store.deleteSession(id, { guard: { caller: { user: 'alice', live: { now: at(1), cutoff: at(2) } } } }), SessionNotFound);
        await assert.rejects(store.appendTurn(id, turnAt(3), { guard: { ifMatch: '"other"' } }), PreconditionFailed);
        await assert.rejects(store.deleteSession(id, { guard: { goneAt: live } }), SessionStillLive);
        assert.deepEqual(await everything(store), before, 'nothing changed');
        const shared = await store.updateSession(id, { name: 'shared' }, { guard: { caller: { user: 'bob', anyOwner: true, live }, ifMatch: '*' } });
        // a write decided from a read holds while the fields it read are as read, and is refused once one moved
        await assert.rejects(store.updateSession(id, { name: 'stale' }, { guard: { same: { name: s.session.name } } }), SessionMoved);
        await store.updateSession(id, { name: 'fresh' }, { guard: { same: { name: shared.session.name, instructions: undefined } } });
        assert.equal((await store.getSession(id)).session.name, 'fresh');
      });
    });

    test('[D-house-5] a write guarded by the fields it read holds though turns moved the version since the read', async () => {
      await withStore(async (store) => {
        const read = await store.createSession(session());
        const id = read.session._id;
        // what a reply's call is decided from; turns written meanwhile (another client's, a reply's) change none of it
        const same = { provider: read.session.provider, selectedModel: read.session.selectedModel, instructions: read.session.instructions };
        await store.appendTurn(id, turnAt(10));
        const moved = await store.getSession(id);
        assert.notEqual(moved.version, read.version);
        const [reply] = await store.appendTurns(id, [{ ...turnAt(20, '', 'assistant'), status: 'streaming' }], { guard: { same } });
        assert.equal((await store.getSession(id)).session.headTurnId, reply._id);
        // and a field it read that moved refuses it, with nothing written
        await store.updateSession(id, { selectedModel: 'another' });
        const before = await everything(store);
        await assert.rejects(store.appendTurns(id, [turnAt(30)], { guard: { same } }), SessionMoved);
        assert.deepEqual(await everything(store), before);
      });
    });

    test('a refused change leaves everything as it was, and the writes beside it in the same group go through', async () => {
      await withStore(async (store) => {
        const s = await store.createSession(session());
        await store.appendTurn(s.session._id, turnAt(10));
        const before = await everything(store);
        const id = s.session._id;
        const results = await Promise.allSettled([
          store.updateSession(id, { name: 'refused' }, { guard: REFUSED }),
          store.createSession(session({ ms: 20, name: 'beside' })),
          store.deleteSession(id, { guard: REFUSED }),
          store.appendTurn(id, turnAt(30), { guard: REFUSED }),
          store.updateSession('0123456789abcdef01234567', {}),
        ]);
        assert.deepEqual(results.map((r) => r.status), ['rejected', 'fulfilled', 'rejected', 'rejected', 'rejected']);
        assert.ok(results[4].reason instanceof SessionNotFound, 'a missing session is refused before the change runs');
        const after = await everything(store);
        assert.equal(after.sessions, before.sessions + 1);
        assert.deepEqual(after.items.find((i) => JSON.parse(i.session)._id === id), before.items[0], 'the refused session is as it was, version included');
      });
    });

    test('[D-postgres-5] a create whose id is taken is refused alone; the creates beside it go through', async () => {
      await withStore(async (store) => {
        const stored = await store.createSession(session({ name: 'first' }));
        const before = await everything(store);
        const results = await Promise.allSettled([
          store.createSession(session({ ms: 5, name: 'beside 1' })),
          store.createSession(session({ _id: stored.session._id, ms: 10, name: 'taken id' })),
          store.createSession(session({ ms: 15, name: 'beside 2' })),
        ]);
        assert.deepEqual(results.map((r) => r.status), ['fulfilled', 'rejected', 'fulfilled']);
        assert.match(results[1].reason.message, /duplicate session id/);
        const after = await everything(store);
        assert.equal(after.sessions, before.sessions + 2);
        assert.deepEqual(after.items.find((i) => JSON.parse(i.session)._id === stored.session._id), before.items[0], 'the stored session is as it was, version included');
        assert.deepEqual((await store.usage('alice')).sessions, 3);
      });
    });

    test("a turn becomes the head and raises its session's updatedAt, version and place; an older turn is refused", async () => {
      await withStore(async (store) => {
        const a = await store.createSession(session({ ms: 0 }));
        const b = await store.createSession(session({ ms: 5 }));
        const t = await store.appendTurn(a.session._id, turnAt(10));
        let list = await scanned(store, { user: 'alice', archived: 'false' });
        assert.deepEqual(list.map((s) => s._id), [a.session._id, b.session._id]);
        const raised = await store.getSession(a.session._id);
        assert.equal(raised.session.updatedAt, at(10));
        assert.equal(raised.session.headTurnId, t._id);
        assert.notEqual(raised.version, a.version, 'the version moves with a turn');
        // a turn stamped at or before the session's updatedAt would not move it: the serial point refuses it
        await store.updateSession(b.session._id, {}, { now: clock(100) });
        const before = await everything(store);
        await assert.rejects(store.appendTurn(b.session._id, turnAt(50)), /must be newer than its session's turns and not older than its updatedAt/);
        await assert.rejects(store.appendTurn(a.session._id, { ...turnAt(10), _id: '000000000000000000000000' }), /must be newer/);
        assert.deepEqual(await everything(store), before);
        list = await scanned(store, { user: 'alice', archived: 'false' });
        assert.deepEqual(list.map((s) => s._id), [b.session._id, a.session._id]);
      });
    });

    test('turns: oldest first, paged by their key, whole as a snapshot; an unknown session has none; delete removes them', async () => {
      await withStore(async (store) => {
        const s = await store.createSession(session());
        const id = s.session._id;
        for (let i = 0; i < 9; i++) await store.appendTurn(id, turnAt(10 + i, `t${i}`));
        const all = await turnsOf(store, id);
        assert.deepEqual(all.map((t) => t.content), ['t0', 't1', 't2', 't3', 't4', 't5', 't6', 't7', 't8']);
        const paged = [];
        let after;
        for (;;) {
          const page = await store.listTurns(id, after, 2);
          paged.push(...page.items.map((t) => JSON.parse(t.json.toString('utf8')).content));
          if (page.next === undefined) break;
          after = page.next;
        }
        assert.deepEqual(paged, all.map((t) => t.content));
        assert.deepEqual((await store.listTurns('0123456789abcdef01234567', undefined, 10)).items, []);
        const statsBefore = await store.stats();
        await store.deleteSession(id);
        assert.deepEqual(await turnsOf(store, id), []);
        assert.deepEqual((await store.listTurns(id, undefined, 10)).items, []);
        assert.equal(await store.getSession(id), undefined);
        const statsAfter = await store.stats();
        assert.equal(statsAfter.turns, statsBefore.turns - 9);
        assert.equal(statsAfter.sessions, statsBefore.sessions - 1);
      });
    });

    test('whole lists are snapshots: a list read slowly shows the store as of its start, whatever is written meanwhile', async () => {
      await withStore(async (store) => {
        const ids = [];
        for (let i = 0; i < 600; i++) ids.push((await store.createSession(session({ ms: i }))).session._id);
        const filter = { user: 'alice', archived: 'false' };
        const it = store.scanSessions(filter)[Symbol.asyncIterator]();
        const got = [];
        const first = await it.next();
        got.push(...first.value.map((r) => r.session._id));
        // meanwhile: the oldest session is changed (moving it to the front), one is deleted, one is made
        await store.updateSession(ids[0], { name: 'moved' }, { now: clock(10_000) });
        await store.deleteSession(ids[300]);
        await store.createSession(session({ ms: 20_000 }));
        for (let r = await it.next(); r.done !== true; r = await it.next()) got.push(...r.value.map((x) => x.session._id));
        assert.deepEqual(got, ids.slice().reverse(), 'the list as it was when reading began');
      });
    });

    test('[D-logs-4] stats: sessions, turns and the bytes of their JSON follow every write', async () => {
      await withStore(async (store) => {
        const a = await store.createSession(session({ name: 'ünïcødé' }));
        const b = await store.createSession(session({ ms: 1 }));
        await store.appendTurn(a.session._id, turnAt(5, 'x'.repeat(100)));
        await store.appendTurn(b.session._id, turnAt(6, '日本語'));
        await store.appendTurn(b.session._id, turnAt(7, 'bye'));
        await store.updateSession(a.session._id, { name: 'shorter' }, { now: clock(8) });
        await store.deleteSession(b.session._id);
        const all = await everything(store);
        const bytes = all.items.reduce((n, i) => n + Buffer.byteLength(i.session) + i.turns.reduce((m, t) => m + Buffer.byteLength(t), 0), 0);
        const stats = await store.stats();
        assert.deepEqual({ sessions: stats.sessions, turns: stats.turns, bytes: stats.bytes }, { sessions: 1, turns: 1, bytes });
        assert.ok(Array.isArray(stats.engine));
      });
    });

    test('[D-engines-3] [D-engines-2] usage (sessions, their turns, their bytes) follows every write and every import', async () => {
      await withStore(async (store) => {
        const usageNow = async (user) => {
          const all = await everything(store);
          return usageOfItems(all.items.filter((i) => JSON.parse(i.session).user === user));
        };
        const check = async (label) => {
          for (const user of ['alice', 'bob', 'nobody']) assert.deepEqual(await store.usage(user), await usageNow(user), `${label}: ${user}`);
        };
        const a = await store.createSession(session({ name: 'älice one' }));
        const b = await store.createSession(session({ ms: 1, user: 'bob' }));
        await check('created');
        // a turn written by bob into alice's session counts for alice, the session's owner
        await store.appendTurn(a.session._id, { ...turnAt(2, 'from bob'), user: 'bob' });
        await store.appendTurn(b.session._id, { ...turnAt(3, '日本語'), user: 'bob' });
        await check('turns');
        await store.updateSession(a.session._id, { name: 'a much longer name than before' }, { now: clock(4) });
        await check('updated');
        await store.deleteSession(b.session._id);
        await check('deleted');
        assert.deepEqual(await store.usage('bob'), NO_USAGE);
        // an import that hands a session to another owner moves it, turns and all
        const moved = { ...(await store.getSession(a.session._id)).session, user: 'bob' };
        await store.importAll([moved], []);
        await check('imported');
        assert.equal((await store.usage('bob')).turns, 1);
      });
    });

    test('the same history gives the same version (ETag) on every engine, as every release derived it', async () => {
      await withStore(async (store) => {
        // a fixed history: fixed ids and times
        const s = chatSession({ _id: '6b0000000000000000000001', name: 'fixed', provider: 'p', selectedModel: 'm', mode: 'Plan', user: 'u', project: 'pr', createdAt: at(0), updatedAt: at(0), archived: false });
        // the derivation, written out independently of the server's code: SHA-256, base64url, 22
        // characters, over the JSON of the first release's ten fields (the fields added since follow them)
        const tagOf = (text) => createHash('sha256').update(text).digest('base64url').slice(0, 22);
        const firstRelease = (json) => {
          const { _id, name, provider, selectedModel, mode, user, project, createdAt, updatedAt, archived } = JSON.parse(json);
          return JSON.stringify({ _id, name, provider, selectedModel, mode, user, project, createdAt, updatedAt, archived });
        };
        const created = await store.createSession(s);
        assert.equal(created.version, tagOf(firstRelease(created.json)));
        assert.equal(created.version, 'veRdDtNGoOHjJwV89GcsjY', 'the tag of this history in every release so far');
        await store.appendTurn(s._id, { _id: '6b0000000000000000000002', user: 'u', role: 'user', content: 'c', createdAt: at(5) });
        const after = await store.getSession(s._id);
        assert.equal(after.version, tagOf(`${firstRelease(after.json)}\n${at(5)}\n6b0000000000000000000002`), 'with a turn: the JSON, a newline, the newest turn\'s createdAt, a newline, its _id');
        assert.equal(after.version, 'JWqN48qdXeFVAgeFvYVEYy');
        assert.equal((await store.getSession(s._id)).version, versionOfSession(after.json, { createdAt: at(5), _id: '6b0000000000000000000002' }));
      });
    });

    test('acknowledged writes survive close and reopen: every session, turn and version is as acknowledged', async () => {
      const dir = fresh();
      let store = await openOn(engine, dir);
      const s = await store.createSession(session({ name: 'kept' }));
      await store.appendTurn(s.session._id, turnAt(3));
      await store.updateSession(s.session._id, { archived: true }, { now: clock(9) });
      const gone = await store.createSession(session({ ms: 1 }));
      await store.deleteSession(gone.session._id);
      const before = await everything(store);
      await store.close();
      store = await openOn(engine, dir);
      try {
        assert.deepEqual(await everything(store), before);
      } finally {
        await store.close();
      }
    });

    test('acknowledged writes survive SIGKILL of the writing process at a random moment, five times', async () => {
      const dir = fresh();
      const acked = new Map(); // id -> number of turns acknowledged
      for (let round = 0; round < 5; round++) {
        const child = spawn(process.execPath, [CHILD, engine, dir, String(round)], { stdio: ['ignore', 'pipe', 'inherit'] });
        let buffered = '';
        let lines = 0;
        const killAt = 20 + Math.floor(Math.random() * 60);
        await new Promise((resolve) => {
          child.stdout.on('data', (d) => {
            buffered += d;
            let nl;
            while ((nl = buffered.indexOf('\n')) >= 0) {
              const m = JSON.parse(buffered.slice(0, nl));
              buffered = buffered.slice(nl + 1);
              if (m.created !== undefined) acked.set(m.created, 0);
              if (m.turn !== undefined) acked.set(m.turn, acked.get(m.turn) + 1);
              if (++lines === killAt) child.kill('SIGKILL');
            }
          });
          child.on('exit', resolve);
        });
        const store = await openOn(engine, dir);
        try {
          for (const [id, turns] of acked) {
            assert.notEqual(await store.getSession(id), undefined, `round ${round}: acknowledged session ${id}`);
            const stored = (await turnsOf(store, id)).length;
            // a turn whose answer never arrived may or may not be there
            assert.ok(stored === turns || stored === turns + 1, `round ${round}: ${stored} turns of ${id}, ${turns} acknowledged`);
            acked.set(id, stored);
          }
        } finally {
          await store.close();
        }
      }
    });

    test('a failed write rejects and changes nothing; after reopening the store holds exactly what was acknowledged', async () => {
      const dir = fresh();
      setFaultPlan(`${caps.fault}:2,${caps.fault}:4`);
      let store;
      try {
        store = await openOn(engine, dir);
        const s = await store.createSession(session({ name: 'first' }));
        const before = await everything(store);
        await assert.rejects(store.updateSession(s.session._id, { name: 'lost' }, { now: clock(1) }), StorageWriteFailed);
        assert.deepEqual(await everything(store), before, 'nothing changed');
        await store.appendTurn(s.session._id, turnAt(2));
        await assert.rejects(store.createSession(session({ ms: 3, name: 'lost too' })), StorageWriteFailed);
        await store.updateSession(s.session._id, { name: 'kept' }, { now: clock(4) });
        const acknowledged = await everything(store);
        assert.equal(acknowledged.sessions, 1);
        await store.close();
        setFaultPlan(undefined);
        store = await openOn(engine, dir);
        assert.deepEqual(await everything(store), acknowledged);
      } finally {
        setFaultPlan(undefined);
        await store?.close();
      }
    });

    test('[D-live-15] each group is announced once, in commit order, after its commit; a failed or refused write never', async () => {
      const dir = fresh();
      setFaultPlan(`${caps.fault}:3`);
      let store;
      try {
        store = await openOn(engine, dir);
        const announced = [];
        const answered = new Set();
        store.onCommitted((changes) => {
          for (const c of changes) announced.push({ what: `${c.kind} ${c.session.name}`, answeredAlready: answered.has(`${c.kind} ${c.session.name}`) });
        });
        const track = (p, what) =>
          p.then((v) => {
            answered.add(what);
            return v;
          });
        const id = (await track(store.createSession(session({ name: 'a' })), 'create a')).session._id;
        await track(store.updateSession(id, { name: 'b' }, { now: clock(1) }), 'update b');
        await assert.rejects(store.updateSession(id, { name: 'lost' }, { now: clock(2) }), StorageWriteFailed);
        const results = await Promise.allSettled([
          track(store.updateSession(id, { name: 'c' }, { now: clock(3) }), 'update c'),
          store.appendTurn(id, turnAt(5), { guard: REFUSED }),
          track(store.appendTurn(id, turnAt(4)), 'turn c'),
        ]);
        assert.deepEqual(results.map((r) => r.status), ['fulfilled', 'rejected', 'fulfilled']);
        await track(store.deleteSession(id), 'delete c');
        assert.deepEqual(announced.map((a) => a.what), ['create a', 'update b', 'update c', 'turn c', 'delete c']);
        assert.deepEqual(announced.filter((a) => a.answeredAlready), [], 'no write was answered before its change was announced');
      } finally {
        setFaultPlan(undefined);
        await store?.close();
      }
    });

    test('export then import is the identity: the same sessions, versions and turns, and importing again changes nothing', async () => {
      await withStore(async (source) => {
        const ids = [];
        for (let i = 0; i < 20; i++) {
          const s = await source.createSession(session({ ms: i, user: i % 3 === 0 ? 'bob' : 'alice', project: `p${i % 4}`, name: `séance ${i}`, archived: i % 7 === 0 }));
          ids.push(s.session._id);
          for (let t = 0; t < i % 4; t++) await source.appendTurn(s.session._id, turnAt(100 + i * 10 + t, `turn ${t} of ${i}`, t % 2 === 0 ? 'user' : 'assistant'));
        }
        await source.deleteSession(ids[5]);
        const exported = await everything(source);
        const sessions = exported.items.map((i) => JSON.parse(i.session));
        const turns = exported.items.flatMap((i) => i.turns.map((t) => JSON.parse(t)));
        await withStore(async (target) => {
          const first = await target.importAll(sessions, turns);
          assert.deepEqual(first, { sessions: sessions.length, turns: turns.length, unchanged: 0 });
          assert.deepEqual(await everything(target), exported);
          for (const filter of [{ user: 'alice', archived: 'all' }, { project: 'p1', archived: 'false' }]) {
            assert.deepEqual(await scanned(target, filter), await scanned(source, filter));
          }
          const again = await target.importAll(sessions, turns);
          assert.deepEqual(again, { sessions: 0, turns: 0, unchanged: sessions.length + turns.length });
          assert.deepEqual(await everything(target), exported);
          const stats = await target.stats();
          const sourceStats = await source.stats();
          assert.deepEqual([stats.sessions, stats.turns, stats.bytes], [sourceStats.sessions, sourceStats.turns, sourceStats.bytes]);
        });
      });
    });

    test("[D-backup-3] import: the file's version wins, other records stay, a session is raised to its newest turn", async () => {
      await withStore(async (store) => {
        const keep = await store.createSession(session({ name: 'not in the file' }));
        const s = await store.createSession(session({ ms: 1, name: 'old name' }));
        const t = await store.appendTurn(s.session._id, turnAt(5, 'old text'));
        const turn = JSON.parse(t.json.toString('utf8'));
        const renamed = { ...s.session, name: 'new name' };
        const r = await store.importAll([renamed], [{ ...turn, content: 'new text' }, { ...turn, _id: newObjectId(Date.UTC(2026, 0, 1) + 50), content: 'added', createdAt: at(50) }]);
        assert.deepEqual(r, { sessions: 1, turns: 2, unchanged: 0 });
        const now = await store.getSession(s.session._id);
        assert.equal(now.session.name, 'new name');
        assert.equal(now.session.updatedAt, at(50), 'raised to its newest turn');
        assert.deepEqual((await turnsOf(store, s.session._id)).map((x) => x.content), ['new text', 'added']);
        assert.notEqual(await store.getSession(keep.session._id), undefined);
        const newest = (await turnsOf(store, s.session._id))[1];
        assert.equal(now.version, versionOfSession(now.json, { createdAt: newest.createdAt, _id: newest._id }), 'the version follows the imported newest turn');
        const stats = await store.stats();
        assert.deepEqual([stats.sessions, stats.turns], [2, 2]);
      });
    });

    test('a read-only snapshot beside the open store (what export reads while a server runs) sees every acknowledged write', async () => {
      await withStore(async (store, dir) => {
        const s = await store.createSession(session({ name: 'seen' }));
        await store.appendTurn(s.session._id, turnAt(1, 'seen too'));
        const snap = await openSnapshotOn(engine, dir);
        try {
          const all = await everything(snap);
          assert.equal(all.sessions, 1);
          assert.deepEqual(all.items[0].turns.map((x) => JSON.parse(x).content), ['seen too']);
          await assert.rejects(snap.createSession(session({ ms: 2 })), StorageWriteFailed, 'a snapshot takes no writes');
        } finally {
          await snap.close();
        }
      });
    });
  });

  return () => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  };
}
