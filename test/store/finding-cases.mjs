// The store contract for finding and keeping (issue #14): tag lists, run in-process against
// each engine like cases.mjs. Every case works on a fresh store in a fresh temporary directory.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { kit, openOn } from './engines.mjs';

const { chatSession, newObjectId } = kit;

const at = (ms) => new Date(Date.UTC(2026, 0, 1) + ms).toISOString();
let idClock = 0;
function session(over = {}) {
  const t = at(over.ms ?? 0);
  return chatSession({
    _id: newObjectId(Date.UTC(2026, 0, 1) + idClock++ * 1000),
    name: '',
    provider: 'prov',
    selectedModel: 'model',
    mode: 'Build',
    user: 'alice',
    project: 'proj',
    createdAt: t,
    updatedAt: t,
    archived: false,
    ...over,
  });
}
const turnAt = (ms) => (current) => ({ _id: newObjectId(Date.UTC(2026, 0, 1) + ms), session: current.session._id, user: current.session.user, role: 'user', content: 'hi', createdAt: at(ms) });
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
    test('tag lists: a tag reads the list of its sessions in list order (user, project, owner-only, archived false|true|all), more tags must all match, page by page and whole, after a reopen too', async () => {
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

    test("tag lists follow every write: a turn moves its session to the front, archive moves it between halves, new tags move it between lists, delete removes it", async () => {
      await withStore(async (store, reopen) => {
        const a = (await store.createSession(session({ ms: 0, tags: ['x'] }))).session;
        const b = (await store.createSession(session({ ms: 1, tags: ['x', 'y'] }))).session;
        const ids = async (filter) => (await walk(store, { user: 'alice', archived: 'false', ...filter }, 10)).map((s) => s._id);
        assert.deepEqual(await ids({ tags: ['x'] }), [b._id, a._id]);
        await store.appendTurn(a._id, turnAt(100));
        assert.deepEqual(await ids({ tags: ['x'] }), [a._id, b._id], 'a turn raises its session in the tag list');
        await store.updateSession(b._id, (cur) => chatSession({ ...cur.session, archived: true, updatedAt: at(200) }));
        assert.deepEqual(await ids({ tags: ['x'] }), [a._id]);
        assert.deepEqual(await ids({ tags: ['y'], archived: 'true' }), [b._id]);
        await store.updateSession(a._id, (cur) => chatSession({ ...cur.session, tags: ['Z'], updatedAt: at(300) }));
        assert.deepEqual(await ids({ tags: ['x'] }), []);
        assert.deepEqual(await ids({ tags: ['z'] }), [a._id]);
        await store.deleteSession(a._id, () => {});
        assert.deepEqual(await ids({ tags: ['z'] }), []);
        store = await reopen();
        assert.deepEqual((await walk(store, { user: 'alice', archived: 'all', tags: ['y'] }, 10)).map((s) => s._id), [b._id]);
        assert.deepEqual((await walk(store, { user: 'alice', archived: 'all', tags: ['z'] }, 10)).map((s) => s._id), []);
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
  });
}
