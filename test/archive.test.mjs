// Archive: archive and unarchive, the archived filter of the lists, and what archiving does to
// updatedAt and the ETag.
// The features beyond the spec's rows, as the features issue names them (its words, not the
// docs', are what the test names quote). Against the real server over HTTP.
import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import { addTurn, alice, assert400, assert404, BASE, bob, clockPast, create, freshUser, get, ids, listOrder, MISSING, sharedServer, turnsOf, unique, withParams } from './api-kit.mjs';
import { newSession } from './helpers.mjs';

sharedServer();

describe('d. Archive', () => {
  test('"POST /api/v1/chat-sessions/:id/archive and /unarchive ... the record shows archived true|false"', async () => {
    const u = freshUser('arch');
    const s = await create(u);
    assert.equal(s.archived, false);
    const a = await u.post(`${BASE}/${s._id}/archive`);
    assert.equal(a.status, 200, a.text);
    assert.deepEqual({ ...a.body.data, updatedAt: 0 }, { ...s, archived: true, updatedAt: 0 });
    assert.equal((await get(u, s._id)).body.data.archived, true, 'an archived session is still readable by id');
    const un = await u.post(`${BASE}/${s._id}/unarchive`);
    assert.equal(un.status, 200);
    assert.equal(un.body.data.archived, false);
    assert.equal((await get(u, s._id)).body.data.archived, false);
    // a body, if any, changes nothing
    const withBody = await u.post(`${BASE}/${s._id}/archive`, { archived: false, name: 'ignored' });
    assert.equal(withBody.status, 200);
    assert.equal(withBody.body.data.archived, true);
    assert.equal(withBody.body.data.name, '');
    for (const id of [MISSING, 'nope']) {
      assert404(await u.post(`${BASE}/${id}/archive`), `archive ${id}`);
      assert404(await u.post(`${BASE}/${id}/unarchive`), `unarchive ${id}`);
    }
  });

  test('"archived sessions are left out of lists unless archived=true (only archived) or archived=all (both)"', async () => {
    const u = freshUser('arch-list');
    const project = unique('arch-proj');
    const made = [];
    for (let i = 0; i < 6; i++) made.push(await create(u, { projectId: project }));
    const archived = [made[1], made[3], made[4]];
    for (const s of archived) await u.post(`${BASE}/${s._id}/archive`);
    const active = made.filter((s) => !archived.includes(s));
    for (const list of [BASE, `${BASE}?projectId=${project}`]) {
      const sep = list.includes('?') ? '&' : '?';
      const def = (await u.get(list)).body.data;
      assert.deepEqual(new Set(ids(def)), new Set(ids(active)), `${list} default`);
      assert.ok(def.every((s) => s.archived === false));
      assert.deepEqual(ids((await u.get(`${list}${sep}archived=false`)).body.data), ids(def), 'archived=false is the default');
      assert.deepEqual(ids((await u.get(`${list}${sep}archived=`)).body.data), ids(def), 'archived= is absent');
      const only = (await u.get(`${list}${sep}archived=true`)).body.data;
      assert.deepEqual(new Set(ids(only)), new Set(ids(archived)));
      assert.ok(only.every((s) => s.archived === true));
      const both = (await u.get(`${list}${sep}archived=all`)).body.data;
      assert.deepEqual(new Set(ids(both)), new Set(ids(made)));
      assert.deepEqual(ids(both), ids([...both].sort(listOrder)));
    }
  });

  test('"bad archived value -> 400"', async () => {
    for (const archived of ['yes', 'no', 'TRUE', 'True', 'FALSE', 'All', '1', '0', 'only', 'both', 'none', ' true', 'true ']) {
      assert400(await alice.get(withParams(BASE, { archived })), 'archived must be one of: false, true, all', archived);
    }
    assert400(await alice.get(`${BASE}?archived=true&archived=false`), 'archived must be given at most once');
  });

  test('"archive bumps updatedAt" (and the ETag; unarchive too), moving the session to the front of archived=all', async () => {
    const u = freshUser('arch-bump');
    const s = await create(u);
    const later = await create(u);
    const before = await get(u, s._id);
    await clockPast(later.updatedAt);
    const a = await u.post(`${BASE}/${s._id}/archive`);
    assert.ok(a.body.data.updatedAt > before.body.data.updatedAt);
    assert.notEqual(a.headers.etag, before.headers.etag);
    assert.deepEqual(ids((await u.get(`${BASE}?archived=all`)).body.data), [s._id, later._id]);
    await clockPast(a.body.data.updatedAt); // timestamps follow the clock: within one ms they tie
    const un = await u.post(`${BASE}/${s._id}/unarchive`);
    assert.ok(un.body.data.updatedAt > a.body.data.updatedAt);
    assert.notEqual(un.headers.etag, a.headers.etag);
    assert.equal((await get(u, s._id)).headers.etag, un.headers.etag);
  });

  test('[D-sessions-9] archiving twice, or unarchiving twice, changes nothing: same record, updatedAt and ETag', async () => {
    const u = freshUser('arch-twice');
    const s = await create(u);
    const first = await u.post(`${BASE}/${s._id}/archive`);
    const second = await u.post(`${BASE}/${s._id}/archive`);
    assert.equal(second.status, 200);
    assert.deepEqual(second.body, first.body);
    assert.equal(second.headers.etag, first.headers.etag);
    const concurrent = await Promise.all(Array.from({ length: 5 }, () => u.post(`${BASE}/${s._id}/archive`)));
    for (const r of concurrent) assert.deepEqual(r.body, first.body);
    const un1 = await u.post(`${BASE}/${s._id}/unarchive`);
    const un2 = await u.post(`${BASE}/${s._id}/unarchive`);
    assert.deepEqual(un2.body, un1.body);
    assert.equal(un2.headers.etag, un1.headers.etag);
    // unarchiving a session that was never archived changes nothing either
    const fresh = await u.post(BASE, newSession());
    const noop = await u.post(`${BASE}/${fresh.body.data._id}/unarchive`);
    assert.deepEqual(noop.body, fresh.body);
    assert.equal(noop.headers.etag, fresh.headers.etag);
  });

  test('"delete stays a real delete (an archived session can be deleted and is gone)"', async () => {
    const u = freshUser('arch-del');
    const s = await create(u);
    await addTurn(u, s._id);
    await u.post(`${BASE}/${s._id}/archive`);
    const r = await u.del(`${BASE}/${s._id}`);
    assert.deepEqual(r.body, { success: true, message: 'Chat session deleted' });
    assert404(await u.get(`${BASE}/${s._id}`));
    assert404(await u.post(`${BASE}/${s._id}/unarchive`), 'unarchive cannot bring it back');
    assert404(await u.post(`${BASE}/${s._id}/archive`));
    for (const archived of ['false', 'true', 'all']) assert.deepEqual((await u.get(`${BASE}?archived=${archived}`)).body.data, []);
    assert.deepEqual(await turnsOf(u, s._id), []);
  });

  test('"a session archived by one user while another lists the project (shared mode) disappears from the other\'s default list"', async () => {
    const project = unique('arch-shared');
    const s = await create(alice, { projectId: project });
    const other = await create(alice, { projectId: project });
    assert.deepEqual(new Set(ids((await bob.get(`${BASE}?projectId=${project}`)).body.data)), new Set([s._id, other._id]));
    const r = await bob.post(`${BASE}/${s._id}/archive`);
    assert.equal(r.status, 200, 'shared mode: any user may archive by id');
    assert.deepEqual(ids((await alice.get(`${BASE}?projectId=${project}`)).body.data), [other._id]);
    assert.deepEqual(ids((await bob.get(`${BASE}?projectId=${project}`)).body.data), [other._id]);
    assert.deepEqual(ids((await alice.get(`${BASE}?projectId=${project}&archived=true`)).body.data), [s._id]);
    assert.ok(!ids((await alice.get(BASE)).body.data).includes(s._id), "and from the owner's own list");
  });

  test('[D-sessions-10] archived sessions still take updates and turns; archiving only hides them from lists', async () => {
    const u = freshUser('arch-use');
    const s = await create(u);
    await u.post(`${BASE}/${s._id}/archive`);
    await addTurn(u, s._id);
    assert.equal((await turnsOf(u, s._id)).length, 1);
    const put = await u.put(`${BASE}/${s._id}`, { name: 'still archived' });
    assert.equal(put.body.data.archived, true);
    assert.deepEqual((await u.get(BASE)).body.data, [], 'neither a turn nor an update unarchives it');
  });
});
