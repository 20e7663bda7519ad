// The store contract for conversations (docs/TEAM-DECISIONS.md, Conversations): turns as a
// tree, branch paths, a turn's edit and deletion, forks, usage after each, the same history
// giving the same versions on every engine, data of the first release, and SIGKILL. Run
// in-process against each engine, like cases.mjs.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { configFor, kit, openOn } from './engines.mjs';
import { usageOfItems } from './fixtures.mjs';

const { chatSession, newObjectId, versionOfSession, SessionNotFound, TurnNotFound, PreconditionFailed } = kit;
const FIXTURES = fileURLToPath(new URL('../fixtures/v1/', import.meta.url));
const CHILD = fileURLToPath(new URL('./child-tree-writer.mjs', import.meta.url));

// times ahead of the clock: a write that moves a session's updatedAt (an edit, a deletion) steps it by
// exactly a millisecond, so every history here is the same on every run
const BASE = Date.UTC(2100, 0, 1);
const at = (ms) => new Date(BASE + ms).toISOString();

let idClock = 0;
function session(over = {}) {
  const t = at(over.ms ?? 0);
  const { ms, ...rest } = over;
  return chatSession({ _id: newObjectId(BASE + idClock++ * 1000), name: '', provider: 'prov', selectedModel: 'model', mode: 'Build', user: 'alice', project: 'proj', createdAt: t, updatedAt: t, archived: false, ...rest });
}

/** A turn for appendTurn: createdAt `ms` after the fixed instant, under `parentId` (absent: the head), written by `user`. */
const turnAt = (ms, content = `turn at ${ms}`, extra = {}) => ({
  _id: extra._id ?? newObjectId(BASE + ms),
  user: extra.user ?? 'alice',
  role: 'user',
  content,
  ...(extra.parentId !== undefined ? { parentId: extra.parentId } : {}),
  status: 'complete',
  createdAt: at(ms),
});

const parse = (t) => JSON.parse(t.json.toString('utf8'));

async function listed(store, id, branch) {
  const out = [];
  for await (const chunk of store.scanTurns(id, branch)) out.push(...chunk.map(parse));
  return out;
}

async function paged(store, id, branch, limit) {
  const out = [];
  let after;
  for (;;) {
    const page = await store.listTurns(id, after, limit, branch);
    out.push(...page.items.map(parse));
    if (page.next === undefined) return out;
    after = page.next;
  }
}

/** Everything the store holds, as export writes it. */
async function everything(store) {
  const snap = await store.exportAll();
  const items = [];
  for await (const item of snap.items) items.push({ session: item.session.json, version: item.session.version, turns: item.turns.map((t) => t.json.toString('utf8')) });
  return { sessions: snap.sessions, turns: snap.turns, items };
}

async function usageFromData(store, user) {
  const all = await everything(store);
  return usageOfItems(all.items.filter((i) => JSON.parse(i.session).user === user));
}

async function checkAccounts(store, label) {
  for (const user of ['alice', 'bob']) assert.deepEqual(await store.usage(user), await usageFromData(store, user), `${label}: usage of ${user}`);
  const all = await everything(store);
  const stats = await store.stats();
  const { engine, ...figures } = stats;
  assert.deepEqual(figures, usageOfItems(all.items), `${label}: stats`);
  assert.deepEqual([stats.sessions, stats.turns], [all.sessions, all.turns], `${label}: stats against the export's counts`);
}

/**
 * A session with this tree (t2 and t3 siblings under t1, t5 a second root), made in this order:
 *   t1 ─ t2
 *      └ t3 ─ t4
 *   t5 ─ t6          (the head)
 */
async function tree(store, over = {}) {
  const s = await store.createSession(session(over));
  const id = s.session._id;
  const t = {};
  const add = async (name, ms, parentId) => {
    const r = await store.appendTurn(id, turnAt(ms, name, parentId === undefined ? { user: s.session.user } : { parentId, user: s.session.user }));
    t[name] = r._id;
    return r;
  };
  await add('t1', 10);
  await add('t2', 20);
  await add('t3', 30, t.t1);
  await add('t4', 40);
  await add('t5', 50, null);
  await add('t6', 60);
  return { id, t };
}

const names = (turns) => turns.map((x) => x.content);

export function treeContract(engine) {
  const dirs = [];
  const fresh = () => {
    const d = mkdtempSync(join(tmpdir(), `csa-tree-${engine}-`));
    dirs.push(d);
    return d;
  };
  const withStore = async (fn) => {
    const dir = fresh();
    const store = await openOn(engine, dir);
    try {
      return await fn(store, dir);
    } finally {
      await store.close();
    }
  };

  describe(`Store contract, conversations: ${engine}`, () => {
    test('"Turns form a tree": a turn goes under the head or a named parent, becomes the head; branches whole and paged', async () => {
      await withStore(async (store) => {
        const empty = await store.createSession(session({ ms: 1 }));
        assert.equal(empty.session.headTurnId, null, 'headTurnId null with no turns');
        assert.deepEqual(await listed(store, empty.session._id, 'head'), []);
        const { id, t } = await tree(store);
        const all = await listed(store, id);
        assert.deepEqual(names(all), ['t1', 't2', 't3', 't4', 't5', 't6'], 'the whole list: every turn, oldest first');
        assert.deepEqual(
          all.map((x) => x.parentId),
          [null, t.t1, t.t1, t.t3, null, t.t5],
        );
        for (const x of all) assert.deepEqual(Object.keys(x), ['_id', 'session', 'parentId', 'user', 'role', 'content', 'status', 'createdAt']);
        assert.equal((await store.getSession(id)).session.headTurnId, t.t6);
        assert.deepEqual(names(await listed(store, id, 'head')), ['t5', 't6']);
        assert.deepEqual(names(await listed(store, id, { turnId: t.t4 })), ['t1', 't3', 't4']);
        assert.deepEqual(names(await listed(store, id, { turnId: t.t2 })), ['t1', 't2']);
        assert.deepEqual(names(await listed(store, id, { turnId: t.t1 })), ['t1']);
        for (const limit of [1, 2, 5]) assert.deepEqual(names(await paged(store, id, { turnId: t.t4 }, limit)), ['t1', 't3', 't4'], `pages of ${limit}`);
        assert.deepEqual(names(await paged(store, id, 'head', 1)), ['t5', 't6']);
        // a turn that is not one of the session's
        const other = await store.createSession(session({ ms: 2 }));
        const foreign = await store.appendTurn(other.session._id, turnAt(70, 'elsewhere'));
        for (const turnId of [foreign._id, 'ffffffffffffffffffffffff', 'not an id']) {
          await assert.rejects(store.listTurns(id, undefined, 10, { turnId }), TurnNotFound);
          await assert.rejects(listed(store, id, { turnId }), TurnNotFound);
        }
      });
    });

    test('[D-engines-7] a branch deeper than the jump stride pages the same at every size; a cursor off the path resumes', async () => {
      await withStore(async (store) => {
        const s = await store.createSession(session());
        const id = s.session._id;
        const trunk = [];
        for (let i = 0; i < 100; i++) trunk.push((await store.appendTurn(id, turnAt(10 + i, `t${i}`)))._id);
        // a side branch from depth 40, 60 turns deep: the head, at depth 100
        let parent = trunk[40];
        const side = [];
        for (let i = 0; i < 60; i++) {
          const r = await store.appendTurn(id, turnAt(1000 + i, `s${i}`, { parentId: parent }));
          side.push(r._id);
          parent = r._id;
        }
        const head = await listed(store, id, 'head');
        assert.deepEqual(names(head), [...trunk.slice(0, 41).map((_, i) => `t${i}`), ...side.map((_, i) => `s${i}`)]);
        for (const limit of [1, 7, 31, 32, 33, 64, 100, 101, 1000]) {
          assert.deepEqual(names(await paged(store, id, 'head', limit)), names(head), `head, pages of ${limit}`);
          assert.deepEqual(names(await paged(store, id, { turnId: trunk[99] }, limit)), trunk.map((_, i) => `t${i}`), `trunk, pages of ${limit}`);
        }
        // a cursor, then the head moves to the trunk: the rest is the new path strictly after the key
        const first = await store.listTurns(id, undefined, 50, 'head');
        await store.updateSession(id, { headTurnId: trunk[99] });
        const rest = await store.listTurns(id, first.next, 1000, 'head');
        const cut = first.next;
        const expected = (await listed(store, id, 'head')).filter((t) => t.createdAt > cut.createdAt || (t.createdAt === cut.createdAt && t._id > cut._id));
        assert.deepEqual(rest.items.map(parse), expected);
        // a cursor whose turn is deleted: its branch went with it
        const page = await store.listTurns(id, undefined, 70, { turnId: trunk[99] });
        await store.deleteTurn(id, trunk[69]);
        await assert.rejects(store.listTurns(id, page.next, 10, { turnId: trunk[99] }), TurnNotFound);
        assert.deepEqual(names((await store.listTurns(id, page.next, 10, { turnId: trunk[68] })).items), [], 'nothing after it on a path that ends before');
      });
    });

    test("a turn's edit keeps its id, place, author, role and createdAt; the session's updatedAt and version move", async () => {
      await withStore(async (store) => {
        const { id, t } = await tree(store);
        const before = await store.getSession(id);
        const parts = [{ type: 'reasoning', text: 'think' }, { type: 'text', text: 'edited' }];
        const usage = { inputTokens: 10, outputTokens: 20, cachedTokens: 3, costUsd: 0.5 };
        const r = await store.updateTurn(id, t.t3, { content: parts, usage, status: 'error', metadata: { k: 1 } });
        const edited = parse(r.turn);
        assert.deepEqual(Object.keys(edited), ['_id', 'session', 'parentId', 'user', 'role', 'content', 'metadata', 'usage', 'status', 'createdAt']);
        assert.deepEqual([edited._id, edited.parentId, edited.createdAt, edited.role], [t.t3, t.t1, at(30), 'user']);
        assert.deepEqual(edited.content, parts);
        assert.deepEqual(edited.usage, usage);
        assert.equal(edited.status, 'error');
        const after = await store.getSession(id);
        assert.equal(after.json, r.session.json);
        assert.equal(after.version, r.session.version);
        assert.ok(after.session.updatedAt > before.session.updatedAt, 'updatedAt moves');
        assert.notEqual(after.version, before.version, 'the ETag moves');
        assert.equal(after.session.headTurnId, t.t6);
        assert.equal(after.version, versionOfSession(after.json, { createdAt: at(60), _id: t.t6 }), 'the newest turn stays');
        assert.deepEqual((await listed(store, id, { turnId: t.t4 }))[1], edited, 'its children follow the edited turn');
        // children of an edited turn still find it as their parent, also after another edit
        await store.updateTurn(id, t.t1, { content: 'root edited' });
        assert.deepEqual(names(await listed(store, id, { turnId: t.t4 })), ['root edited', parts, 't4']);
        // refused: an unknown turn, a failing check; nothing changes
        const snapshot = await everything(store);
        await assert.rejects(store.updateTurn(id, 'ffffffffffffffffffffffff', { content: 'x' }), TurnNotFound);
        await assert.rejects(store.updateTurn(id, t.t2, { content: 'x' }, { guard: { ifMatch: '"not-its-version"' } }), PreconditionFailed);
        await assert.rejects(store.updateTurn('ffffffffffffffffffffffff', t.t2, { content: 'x' }), SessionNotFound);
        assert.deepEqual(await everything(store), snapshot);
        await checkAccounts(store, 'after edits');
      });
    });

    test('[D-sessions-6] every write moves updatedAt strictly forward, a millisecond each while the clock is behind', async () => {
      await withStore(async (store) => {
        const future = Date.UTC(2100, 0, 1);
        const s = await store.createSession(session({ createdAt: new Date(future).toISOString(), updatedAt: new Date(future).toISOString() }));
        const id = s.session._id;
        const t = await store.appendTurn(id, { ...turnAt(0), _id: newObjectId(future + 5), createdAt: new Date(future + 5).toISOString() });
        const versions = new Set([s.version, (await store.getSession(id)).version]);
        for (let i = 0; i < 3; i++) {
          const r = await store.updateTurn(id, t._id, { status: i % 2 === 0 ? 'error' : 'complete' });
          assert.equal(r.session.session.updatedAt, new Date(future + 6 + i).toISOString());
          versions.add(r.session.version);
        }
        assert.equal(versions.size, 5, 'five states, five versions');
      });
    });

    test('deleting a turn removes its descendants and moves the head up; the version, usage and stats follow', async () => {
      await withStore(async (store) => {
        const { id, t } = await tree(store);
        const before = await store.getSession(id);
        // the head is not among them: it stays
        const r1 = await store.deleteTurn(id, t.t3);
        assert.deepEqual(names(await listed(store, id)), ['t1', 't2', 't5', 't6']);
        assert.equal(r1.session.headTurnId, t.t6);
        assert.ok(r1.session.updatedAt > before.session.updatedAt);
        const read = await store.getSession(id);
        assert.deepEqual([read.json, read.version], [r1.json, r1.version]);
        await checkAccounts(store, 'subtree without the head');
        // the head is among them: it moves to the deleted turn's parent
        await store.appendTurn(id, turnAt(70, 't7'));
        const r2 = await store.deleteTurn(id, t.t6);
        assert.equal(r2.session.headTurnId, t.t5);
        assert.equal(r2.version, versionOfSession(r2.json, { createdAt: at(50), _id: t.t5 }), 'the newest turn is what remains');
        // a root with the head below it: the head goes to null, the newest remaining turn is older
        const r3 = await store.deleteTurn(id, t.t5);
        assert.equal(r3.session.headTurnId, null);
        assert.equal(r3.version, versionOfSession(r3.json, { createdAt: at(20), _id: t.t2 }));
        assert.deepEqual(names(await listed(store, id)), ['t1', 't2']);
        await checkAccounts(store, 'subtrees with the head');
        const r4 = await store.deleteTurn(id, t.t1);
        assert.equal(r4.version, versionOfSession(r4.json, undefined), 'no turns left');
        assert.deepEqual(await listed(store, id), []);
        await checkAccounts(store, 'every turn deleted');
        const snapshot = await everything(store);
        await assert.rejects(store.deleteTurn(id, t.t1), TurnNotFound);
        await assert.rejects(store.deleteTurn('ffffffffffffffffffffffff', t.t1), SessionNotFound);
        assert.deepEqual(await everything(store), snapshot);
      });
    });

    test('a fork copies the path from the root to turnId (new ids, same contents); the source is unchanged', async () => {
      await withStore(async (store) => {
        const { id, t } = await tree(store);
        await store.updateTurn(id, t.t3, { content: [{ type: 'tool_call', id: 'c1', name: 'grep', arguments: { q: 'x' } }], usage: { inputTokens: 1, outputTokens: 2 } });
        const source = await everything(store);
        const build = (name, user = 'alice') => ({ _id: newObjectId(), owner: user, name, at: at(1000) });
        const f1 = await store.forkSession(id, t.t4, build('fork at t4', 'bob'));
        assert.deepEqual(f1.session.forkedFrom, { session: id, turn: t.t4 });
        assert.deepEqual(Object.keys(JSON.parse(f1.json)).slice(-2), ['headTurnId', 'forkedFrom']);
        const copies = await listed(store, f1.session._id);
        const originals = await listed(store, id, { turnId: t.t4 });
        assert.equal(copies.length, 3);
        for (const [i, c] of copies.entries()) {
          const o = originals[i];
          assert.notEqual(c._id, o._id, 'a new id');
          assert.equal(c.session, f1.session._id);
          assert.deepEqual({ ...c, _id: 0, session: 0, parentId: 0 }, { ...o, _id: 0, session: 0, parentId: 0 }, 'the same contents and createdAt');
          assert.equal(c.parentId, i === 0 ? null : copies[i - 1]._id, 'parents among the copies');
        }
        assert.equal(f1.session.headTurnId, copies[2]._id);
        assert.equal(f1.version, versionOfSession(f1.json, { createdAt: copies[2].createdAt, _id: copies[2]._id }));
        const f2 = await store.forkSession(id, undefined, build('fork at the head'));
        assert.deepEqual(f2.session.forkedFrom, { session: id, turn: t.t6 });
        assert.deepEqual(names(await listed(store, f2.session._id)), ['t5', 't6']);
        const empty = await store.createSession(session({ ms: 3 }));
        const f3 = await store.forkSession(empty.session._id, undefined, build('fork of nothing'));
        assert.deepEqual(f3.session.forkedFrom, { session: empty.session._id, turn: null });
        assert.equal(f3.session.headTurnId, null);
        await assert.rejects(store.forkSession(id, 'ffffffffffffffffffffffff', build('x')), TurnNotFound);
        await assert.rejects(store.forkSession('ffffffffffffffffffffffff', undefined, build('x')), SessionNotFound);
        const after = await everything(store);
        assert.deepEqual(after.items.find((i) => JSON.parse(i.session)._id === id), source.items.find((i) => JSON.parse(i.session)._id === id), 'the source is unchanged, version included');
        await checkAccounts(store, 'forks');
        assert.equal((await store.usage('bob')).turns, 3);
      });
    });

    test('[D-engines-6] [D-engines-1] writes of one group that build on each other decide as they would one after another', async () => {
      const run = async (store, together) => {
        const { id, t } = await tree(store);
        const a = newObjectId(BASE + 100);
        const b = newObjectId(BASE + 101);
        const c = newObjectId(BASE + 110);
        const writes = [
          () => store.appendTurn(id, turnAt(100, 'a', { _id: a })),
          () => store.appendTurn(id, turnAt(101, 'b', { _id: b, parentId: t.t1 })),
          () => store.updateTurn(id, a, { content: 'a edited' }),
          () => store.forkSession(id, undefined, { _id: newObjectId(), owner: 'alice', name: 'fork', at: at(2000) }),
          () => store.deleteTurn(id, t.t3),
          () => store.updateSession(id, { headTurnId: t.t2 }),
          () => store.appendTurn(id, turnAt(110, 'c', { _id: c })),
          () => store.deleteTurn(id, c),
          () => store.forkSession(id, a, { _id: newObjectId(), owner: 'alice', name: 'fork at a', at: at(2000) }),
        ];
        const results = together ? await Promise.all(writes.map((w) => w())) : await (async () => {
          const out = [];
          for (const w of writes) out.push(await w());
          return out;
        })();
        const shape = async (sid) => {
          const s = (await store.getSession(sid)).session;
          return { head: s.headTurnId === null ? null : (await listed(store, sid, 'head')).map((x) => x.content), turns: (await listed(store, sid)).map((x) => [x.content, x.parentId === null ? null : 'p']) };
        };
        return { source: await shape(id), fork: await shape(results[3].session._id), forkAtA: await shape(results[8].session._id) };
      };
      const serial = await withStore((store) => run(store, false));
      const together = await withStore((store) => run(store, true));
      assert.deepEqual(together, serial);
      assert.deepEqual(serial.source.head, ['t1', 't2']);
      assert.deepEqual(serial.fork.head, ['t1', 'b']);
      assert.deepEqual(serial.forkAtA.head, ['t5', 't6', 'a edited']);
    });

    test('export then import keeps trees, heads, forks, parts, usage and status; importing again changes nothing', async () => {
      await withStore(async (source) => {
        const { id, t } = await tree(source, { user: 'bob' });
        await source.updateTurn(id, t.t2, { content: [{ type: 'file', name: 'a.png', mediaType: 'image/png', url: 'https://x/a.png' }], usage: { inputTokens: 1, outputTokens: 1 }, status: 'interrupted' });
        const f = await source.forkSession(id, t.t4, { _id: newObjectId(), owner: 'alice', name: 'fork', at: at(2000) });
        await source.updateSession(id, { headTurnId: t.t2 });
        const exported = await everything(source);
        const sessions = exported.items.map((i) => JSON.parse(i.session));
        const turns = exported.items.flatMap((i) => i.turns.map((x) => JSON.parse(x)));
        await withStore(async (target) => {
          assert.deepEqual(await target.importAll(sessions, turns), { sessions: sessions.length, turns: turns.length, unchanged: 0 });
          assert.deepEqual(await everything(target), exported);
          for (const [sid, branch] of [[id, 'head'], [id, { turnId: t.t4 }], [f.session._id, 'head']]) assert.deepEqual(await listed(target, sid, branch), await listed(source, sid, branch));
          assert.deepEqual(await target.importAll(sessions, turns), { sessions: 0, turns: 0, unchanged: sessions.length + turns.length });
          await checkAccounts(target, 'imported');
          // and the imported trees take writes like any
          const r = await target.deleteTurn(id, t.t1);
          assert.equal(r.session.headTurnId, null);
          assert.deepEqual(names(await listed(target, id)), ['t5', 't6']);
        });
      });
    });

    test('a switched head, edits, a deleted subtree and a fork survive reopening and an import', async () => {
      const dir = fresh();
      let store = await openOn(engine, dir);
      let before;
      try {
        const { id, t } = await tree(store);
        await store.updateTurn(id, t.t2, { content: 'edited' });
        await store.deleteTurn(id, t.t4);
        await store.forkSession(id, t.t3, { _id: newObjectId(), owner: 'alice', name: 'fork', at: at(2000) });
        await store.updateSession(id, { headTurnId: t.t2 });
        const other = await store.createSession(session({ ms: 5 }));
        for (let i = 0; i < 20; i++) await store.updateSession(other.session._id, { name: `rename ${i} ${'x'.repeat(100)}` });
        before = await everything(store);
        assert.equal(JSON.parse(before.items.find((i) => JSON.parse(i.session)._id === id).session).headTurnId, t.t2);
      } finally {
        await store.close();
      }
      store = await openOn(engine, dir);
      try {
        assert.deepEqual(await everything(store), before, 'reopened');
        const sessions = before.items.map((i) => JSON.parse(i.session));
        const turns = before.items.flatMap((i) => i.turns.map((x) => JSON.parse(x)));
        const target = fresh();
        const other = await openOn(engine, target);
        try {
          await other.importAll(sessions, turns);
        } finally {
          await other.close();
        }
        const again = await openOn(engine, target);
        try {
          assert.deepEqual(await everything(again), before, 'imported into another store, reopened');
        } finally {
          await again.close();
        }
      } finally {
        await store.close();
      }
    });

    test('the same history gives the same JSON and versions on every engine', async () => {
      await withStore(async (store) => {
        // a session ahead of the clock: every write steps its updatedAt by exactly a millisecond
        const t0 = Date.UTC(2100, 0, 1);
        const iso = (ms) => new Date(t0 + ms).toISOString();
        const sid = '6c0000000000000000000001';
        await store.createSession(chatSession({ _id: sid, name: 'fixed', provider: 'p', selectedModel: 'm', mode: 'Ask', user: 'u', project: 'pr', createdAt: iso(0), updatedAt: iso(0), archived: false }));
        const turn = (n, ms, parentId) => ({ _id: `6c00000000000000000000a${n}`, user: 'u', role: n % 2 ? 'user' : 'assistant', content: `c${n}`, ...(parentId !== undefined ? { parentId } : {}), status: 'complete', createdAt: iso(ms) });
        await store.appendTurn(sid, turn(1, 10));
        await store.appendTurn(sid, turn(2, 20));
        await store.appendTurn(sid, turn(3, 30, '6c00000000000000000000a1'));
        await store.updateTurn(sid, '6c00000000000000000000a2', { content: [{ type: 'text', text: 'edited' }], usage: { inputTokens: 5, outputTokens: 6 } });
        await store.updateSession(sid, { headTurnId: '6c00000000000000000000a2' }, { now: t0 + 40 });
        const fork = await store.forkSession(sid, undefined, { _id: '6c0000000000000000000002', owner: 'v', at: iso(50) });
        const del = await store.deleteTurn(sid, '6c00000000000000000000a3');
        assert.equal(del.json, '{"_id":"6c0000000000000000000001","name":"fixed","provider":"p","selectedModel":"m","mode":"Ask","user":"u","project":"pr","createdAt":"2100-01-01T00:00:00.000Z","updatedAt":"2100-01-01T00:00:00.041Z","archived":false,"headTurnId":"6c00000000000000000000a2"}');
        assert.equal(del.version, '0u9-SY5M9M0Qf3JWUEbfum');
        const forkTurns = await listed(store, fork.session._id);
        assert.equal(fork.json, `{"_id":"6c0000000000000000000002","name":"fixed","provider":"p","selectedModel":"m","mode":"Ask","user":"v","project":"pr","createdAt":"2100-01-01T00:00:00.050Z","updatedAt":"2100-01-01T00:00:00.050Z","archived":false,"headTurnId":"${forkTurns[1]._id}","forkedFrom":{"session":"6c0000000000000000000001","turn":"6c00000000000000000000a2"}}`);
        assert.equal(fork.version, versionOfSession(fork.json, forkTurns[1]));
        assert.deepEqual(
          (await everything(store)).items.find((i) => JSON.parse(i.session)._id === sid).turns,
          [
            '{"_id":"6c00000000000000000000a1","session":"6c0000000000000000000001","parentId":null,"user":"u","role":"user","content":"c1","status":"complete","createdAt":"2100-01-01T00:00:00.010Z"}',
            '{"_id":"6c00000000000000000000a2","session":"6c0000000000000000000001","parentId":"6c00000000000000000000a1","user":"u","role":"assistant","content":[{"type":"text","text":"edited"}],"usage":{"inputTokens":5,"outputTokens":6},"status":"complete","createdAt":"2100-01-01T00:00:00.020Z"}',
          ],
        );
      });
    });

    test('[D-conversations-11] a store of the first release opens with parents in order, heads, and the ETags it answered', async () => {
      const dir = fresh();
      await installFixture(engine, dir);
      const answers = JSON.parse(readFileSync(join(FIXTURES, 'answers.json'), 'utf8'))[engine];
      for (let round = 0; round < 2; round++) {
        const store = await openOn(engine, dir);
        try {
          for (const [id, was] of Object.entries(answers.sessions)) {
            const now = await store.getSession(id);
            assert.equal(`"${now.version}"`, was.etag, `${id}: the ETag the first release answered (round ${round})`);
            const newest = was.turns[was.turns.length - 1];
            assert.deepEqual(JSON.parse(now.json), { ...was.session, headTurnId: newest?._id ?? null });
            const turns = await listed(store, id);
            assert.deepEqual(
              turns,
              was.turns.map((t, i) => {
                const { createdAt, ...rest } = t;
                const [_id, session, ...others] = Object.entries(rest);
                return Object.fromEntries([_id, session, ['parentId', i === 0 ? null : was.turns[i - 1]._id], ...others, ['status', 'complete'], ['createdAt', createdAt]]);
              }),
            );
            assert.deepEqual(await listed(store, id, 'head'), turns, 'the head path is the whole list');
          }
          await checkAccounts(store, `the first release's data (round ${round})`);
          // and it takes this release's writes
          if (round === 0) {
            const [id] = Object.keys(answers.sessions);
            const r = await store.appendTurn(id, { user: 'alice', role: 'user', content: 'after the upgrade', status: 'complete' });
            await store.deleteTurn(id, r._id);
            answers.sessions[id].etag = `"${(await store.getSession(id)).version}"`;
            answers.sessions[id].session.updatedAt = (await store.getSession(id)).session.updatedAt;
          }
        } finally {
          await store.close();
        }
      }
    });

    test('acknowledged appends, edits, deletions of turns and forks survive SIGKILL of the writer, three times', async () => {
      const dir = fresh();
      // what was acknowledged, and what was under way (it may or may not be there)
      const acked = { turns: new Map(), edits: new Map(), editing: new Map(), deleted: new Set(), deleting: new Set(), forks: new Map() };
      for (let round = 0; round < 3; round++) {
        const child = spawn(process.execPath, [CHILD, engine, dir, String(round)], { stdio: ['ignore', 'pipe', 'inherit'] });
        let buffered = '';
        let lines = 0;
        const killAt = 15 + Math.floor(Math.random() * 40);
        await new Promise((resolve) => {
          child.stdout.on('data', (d) => {
            buffered += d;
            let nl;
            while ((nl = buffered.indexOf('\n')) >= 0) {
              const m = JSON.parse(buffered.slice(0, nl));
              buffered = buffered.slice(nl + 1);
              if (m.turn !== undefined) acked.turns.set(m.turn, m.session);
              if (m.edit !== undefined) acked.edits.set(m.edit, m.content);
              if (m.editing !== undefined) acked.editing.set(m.editing, m.content);
              if (m.deleted !== undefined) for (const id of m.deleted) acked.deleted.add(id);
              if (m.deleting !== undefined) acked.deleting.add(m.deleting);
              if (m.fork !== undefined) acked.forks.set(m.fork, m.turns);
              if (++lines === killAt) child.kill('SIGKILL');
            }
          });
          child.on('exit', (code, signal) => resolve({ code, signal }));
        }).then((exit) => assert.equal(exit.signal, 'SIGKILL', `round ${round}: the writer ran until it was killed (exit ${exit.code})`));
        const store = await openOn(engine, dir);
        try {
          const bySession = new Map();
          const turnsOf = async (sid) => {
            if (!bySession.has(sid)) bySession.set(sid, await listed(store, sid));
            return bySession.get(sid);
          };
          for (const [id, sid] of acked.turns) {
            const has = (await turnsOf(sid)).find((x) => x._id === id);
            if (acked.deleted.has(id)) assert.equal(has, undefined, `round ${round}: deleted turn ${id}`);
            else if (!acked.deleting.has(id)) assert.ok(has, `round ${round}: acknowledged turn ${id}`);
            if (has !== undefined && acked.edits.has(id)) assert.equal(has.content, acked.edits.get(id), `round ${round}: edit of ${id}`);
            else if (has !== undefined && acked.editing.has(id)) assert.ok([acked.editing.get(id), has.content].includes(has.content));
            // a write under way when the process died is done or not: either way it is now settled
            if (has === undefined) acked.deleted.add(id);
            else if (acked.editing.has(id)) acked.edits.set(id, has.content);
          }
          for (const [fid, n] of acked.forks) assert.equal((await turnsOf(fid)).length, n, `round ${round}: fork ${fid}`);
          // and every tree is whole: parents in the session, heads among the turns
          for (const sid of bySession.keys()) {
            const turns = await turnsOf(sid);
            const ids = new Set(turns.map((x) => x._id));
            for (const x of turns) assert.ok(x.parentId === null || ids.has(x.parentId), `round ${round}: parent of ${x._id}`);
            const head = (await store.getSession(sid)).session.headTurnId;
            assert.ok(head === null || ids.has(head), `round ${round}: head of ${sid}`);
          }
          await checkAccounts(store, `after SIGKILL, round ${round}`);
        } finally {
          await store.close();
        }
      }
    });
  });

  return () => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  };
}

/** Puts the first release's data (test/fixtures/v1, made by that release) where the engine reads `dir`'s store. */
async function installFixture(engine, dir) {
  if (engine === 'sqlite') return copyFileSync(join(FIXTURES, 'chat-sessions.db'), join(dir, 'chat-sessions.db'));
  const config = configFor(engine, dir);
  const pool = new kit.Pool(config.databaseUrl, { max: 1 });
  try {
    await pool.exec(`DROP SCHEMA IF EXISTS "${config.databaseSchema}" CASCADE; ${readFileSync(join(FIXTURES, 'postgres.sql'), 'utf8').replaceAll('__SCHEMA__', `"${config.databaseSchema}"`)}`);
  } finally {
    await pool.end();
  }
}
