// Paging on the session list and the turns list: limit, nextCursor, walking every page, and cursors
// that are forged, tampered, stale or from another list.
// The features beyond the spec's rows, as the features issue names them (its words, not the
// docs', are what the test names quote). Against the real server over HTTP.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { addTurn, alice, assert400, assertBadRequest, BASE, bob, create, createWithTies, firstCursor, freshUser, ids, listOrder, MISSING, PROVIDERS, server, sharedServer, turnsOf, unique, walk, withParams } from './api-kit.mjs';
import { removeDir, startServer } from './helpers.mjs';

sharedServer();

describe('b. Paging on the session list and the turns list', () => {
  test('"limit (1-1000; 0, 1001, -1, 1.5, \\"abc\\" -> 400; \\"\\" is treated as absent)"', async () => {
    const u = freshUser('limit');
    const s = await create(u);
    await addTurn(u, s._id);
    const msg = 'limit must be an integer from 1 to 1000';
    for (const list of [BASE, `${BASE}/${s._id}/turns`]) {
      for (const limit of ['0', '1001', '-1', '1.5', 'abc', '1e2', '0x10', ' 1', '1 ', '+1', '10000000000000000000000', 'NaN', 'Infinity', '٣']) {
        assert400(await u.get(withParams(list, { limit })), msg, `${list} limit=${JSON.stringify(limit)}`);
      }
      assert400(await u.get(`${list}?limit=1&limit=2`), 'limit must be given at most once');
      const empty = await u.get(`${list}?limit=`);
      assert.equal(empty.status, 200);
      assert.deepEqual(Object.keys(empty.body), ['success', 'data'], 'limit= is absent: no nextCursor');
      for (const limit of ['1', '1000', '%31']) {
        const r = await u.get(`${list}?limit=${limit}`);
        assert.equal(r.status, 200, `limit=${limit}`);
        assert.deepEqual(Object.keys(r.body), ['success', 'data', 'nextCursor']);
      }
    }
  });

  test('"nextCursor beside data only when limit is given, a string or null on the last page"', async () => {
    const u = freshUser('next');
    const s = await create(u);
    for (let i = 0; i < 5; i++) await create(u);
    for (let i = 0; i < 6; i++) await addTurn(u, s._id, { role: 'user', content: `t${i}` });
    for (const list of [BASE, `${BASE}/${s._id}/turns`]) {
      const whole = await u.get(list);
      assert.deepEqual(Object.keys(whole.body), ['success', 'data'], 'no limit: no nextCursor key');
      assert.equal(whole.body.data.length, 6);
      for (const [limit, pages] of [
        [1, 6],
        [2, 3],
        [4, 2],
        [5, 2],
        [6, 1], // an exactly full last page says null: no empty page after it
        [7, 1],
        [1000, 1],
      ]) {
        const w = await walk(u, list, limit);
        assert.equal(w.pages, pages, `${list} limit=${limit}`);
        assert.deepEqual(w.items, whole.body.data);
      }
    }
    const empty = await freshUser('empty').get(`${BASE}?limit=5`);
    assert.deepEqual(empty.body, { success: true, data: [], nextCursor: null });
  });

  test('walking all pages yields the whole list in order, no skip, no repeat, with many sessions sharing an updatedAt', async () => {
    const u = freshUser('walk');
    const project = unique('walk-proj');
    const made = await createWithTies(u, 60, { projectId: project, name: 'walk' });
    // a few of another user in the same project, and some archived, so filters skip items mid-page
    await Promise.all(Array.from({ length: 10 }, () => create(bob, { projectId: project, name: 'walk' })));
    for (const s of made.slice(0, 12)) assert.equal((await u.post(`${BASE}/${s._id}/archive`)).status, 200);
    const lists = [BASE, `${BASE}?projectId=${project}`, `${BASE}?archived=true`, `${BASE}?archived=all`, `${BASE}?projectId=${project}&archived=all&q=WALK`];
    for (const list of lists) {
      const whole = (await u.get(list)).body.data;
      assert.deepEqual(ids(whole), ids([...whole].sort(listOrder)), `${list}: the whole list is in order`);
      const ties = whole.length - new Set(whole.map((s) => s.updatedAt)).size;
      if (list === `${BASE}?archived=all`) assert.ok(ties > 0, 'the list really has ties');
      for (const limit of [1, 2, 3, 7, 13, whole.length, 1000]) {
        const w = await walk(u, list, limit);
        assert.equal(new Set(ids(w.items)).size, w.items.length, `${list} limit=${limit}: no repeats`);
        assert.deepEqual(ids(w.items), ids(whole), `${list} limit=${limit}: the whole list, in order`);
      }
    }
  });

  test('walking all pages of 1,300 sessions: in order, through updates, deletions and a restart', async () => {
    const own = await startServer({ providers: PROVIDERS });
    try {
      const u = own.as('long-list');
      const made = [];
      for (let i = 0; i < 1300; i += 50) {
        made.push(...(await Promise.all(Array.from({ length: 50 }, (_, k) => create(u, { projectId: 'long-proj', name: `n${i + k}` })))));
      }
      // updates move sessions from everywhere in the list to its front; deletions leave holes
      for (let i = 0; i < 1300; i += 37) assert.equal((await u.put(`${BASE}/${made[i]._id}`, { name: `moved ${i}` })).status, 200);
      for (let i = 5; i < 1300; i += 101) assert.equal((await u.del(`${BASE}/${made[i]._id}`)).status, 200);
      const check = async (u, what) => {
        const whole = (await u.get(BASE)).body.data;
        assert.equal(whole.length, 1300 - 14, `${what}: every session but the deleted`);
        assert.deepEqual(ids(whole), ids([...whole].sort(listOrder)), `${what}: the whole list is in order`);
        assert.deepEqual(ids((await u.get(`${BASE}?projectId=long-proj`)).body.data), ids(whole), `${what}: the project list`);
        for (const limit of [97, 512, 1000]) {
          const w = await walk(u, BASE, limit);
          assert.deepEqual(ids(w.items), ids(whole), `${what}: limit=${limit}, the whole list, in order`);
        }
        return whole;
      };
      // a cursor on the newest session, which then moves (an update) or goes (a delete): the next
      // page still starts right after where that session was
      for (const change of ['update', 'delete']) {
        const first = await u.get(`${BASE}?limit=1`);
        const [top] = first.body.data;
        if (change === 'update') assert.equal((await u.put(`${BASE}/${top._id}`, { name: 'moved again' })).status, 200);
        else assert.equal((await u.del(`${BASE}/${top._id}`)).status, 200);
        const next = await u.get(`${BASE}?limit=1000&cursor=${encodeURIComponent(first.body.nextCursor)}`);
        const whole = (await u.get(BASE)).body.data;
        const rest = whole.filter((x) => x._id !== top._id);
        assert.deepEqual(ids(next.body.data), ids(rest).slice(0, 1000), `after the ${change} of the cursor's session`);
      }
      const before = await check(u, 'before the restart');
      assert.equal((await own.stop()).code, 0);
      const again = await startServer({ dataDir: own.dataDir, providers: PROVIDERS });
      try {
        assert.deepEqual(await check(again.as('long-list'), 'after the restart'), before);
      } finally {
        await again.stop();
      }
    } finally {
      await own.stop();
      removeDir(own.dataDir);
    }
  });

  test('"walking all pages" of the turns list yields exactly the whole list, oldest first', async () => {
    const s = await create(alice);
    for (let i = 0; i < 5; i++) await addTurn(alice, s._id, { role: 'user', content: `s${i}` });
    await Promise.all(Array.from({ length: 20 }, (_, i) => addTurn(alice, s._id, { role: 'assistant', content: `c${i}` })));
    const whole = await turnsOf(alice, s._id);
    assert.equal(whole.length, 25);
    for (const limit of [1, 2, 4, 24, 25, 26]) {
      const w = await walk(alice, `${BASE}/${s._id}/turns`, limit);
      assert.deepEqual(ids(w.items), ids(whole), `limit=${limit}`);
    }
  });

  test('"a forged cursor, a tampered cursor, garbage -> 400 never 500"', async () => {
    const u = freshUser('forge');
    const s = await create(u);
    for (let i = 0; i < 3; i++) await create(u);
    for (let i = 0; i < 3; i++) await addTurn(u, s._id);
    for (const list of [BASE, `${BASE}/${s._id}/turns`]) {
      const good = await firstCursor(u, list);
      const [payload, sig] = good.split('.');
      const decoded = Buffer.from(payload, 'base64url').toString();
      const flip = (str, i) => str.slice(0, i) + (str[i] === 'A' ? 'B' : 'A') + str.slice(i + 1);
      const forgedPayload = Buffer.from(decoded.replace(/"[0-9a-f]{24}"/, `"${'f'.repeat(24)}"`)).toString('base64url');
      const bad = [
        ['garbage', 'abc'],
        ['a lone dot', '.'],
        ['two dots', '..'],
        ['two words', 'a.b'],
        ['no payload', '.abc'],
        ['no signature', 'abc.'],
        ['signature cut short', good.slice(0, -1)],
        ['a character appended to the signature', `${good}x`],
        ['a second dot and more', `${good}.x`],
        ['padding appended to the signature', `${good}=`],
        ['payload edited (first character)', flip(good, 0)],
        ['signature edited (last character)', flip(good, good.length - 1)],
        ['signature edited (4th character)', `${payload}.${flip(sig, 3)}`],
        ['forged payload, old signature', `${forgedPayload}.${sig}`],
        ['forged payload, no signature', forgedPayload],
        ['hand-made payload', Buffer.from(JSON.stringify(['x', '2020-01-01T00:00:00.000Z', MISSING])).toString('base64url')],
        ['not JSON, old signature', `${Buffer.from('not json').toString('base64url')}.${sig}`],
        ['zero signature', `${payload}.${'A'.repeat(sig.length)}`],
        ['10000 characters', 'x'.repeat(10_000)],
        ['emoji', '😀.😀'],
        ['NUL', '\u0000'],
        ['raw JSON', '{"updatedAt":"2020-01-01T00:00:00.000Z","_id":"0123456789abcdef01234567"}'],
        ['[]', '[]'],
        ['null', 'null'],
        ['undefined', 'undefined'],
        ['-1', '-1'],
      ];
      const accepted = [];
      for (const [what, cursor] of bad) {
        for (const params of [{ limit: 2, cursor }, { cursor }]) {
          const r = await u.get(withParams(list, params));
          assert.notEqual(r.status, 500, `${what}: never a 500`);
          if (r.status !== 400 || r.body?.success !== false) accepted.push(`${what}${params.limit ? '' : ' (no limit)'}: ${r.status}`);
        }
      }
      assert.deepEqual(accepted, [], `${list}: every bad cursor is refused with 400`);
      assertBadRequest(await u.get(`${list}?limit=2&cursor=%E0%A4%A`), 'bad percent-encoding');
      assertBadRequest(await u.get(withParams(list, { limit: 2 }) + `&cursor=${encodeURIComponent(good)}&cursor=${encodeURIComponent(good)}`), 'cursor twice');
      // the good one still works
      assert.equal((await u.get(withParams(list, { limit: 2, cursor: good }))).status, 200);
    }
    assert.equal((await server.request('GET', '/healthz')).status, 200);
  });

  test('a cursor from another list (turns, project, user, q or archived filter) -> 400', async () => {
    const u = freshUser('other-list');
    const v = freshUser('other-list');
    const p1 = unique('ol-proj');
    const p2 = unique('ol-proj');
    const s = await create(u, { projectId: p1, name: 'alpha' });
    const s2 = await create(u, { projectId: p1, name: 'alpha two' });
    for (let i = 0; i < 3; i++) {
      await create(u, { projectId: p1, name: 'alpha' });
      await create(u, { projectId: p2, name: 'alpha' });
      await create(v, { projectId: p1, name: 'alpha' });
      await addTurn(u, s._id);
      await addTurn(u, s2._id);
    }
    await u.post(`${BASE}/${s._id}/archive`);
    await u.post(`${BASE}/${s2._id}/archive`);
    const cursors = {
      own: await firstCursor(u, BASE),
      ownOfV: await firstCursor(v, BASE),
      proj1: await firstCursor(u, `${BASE}?projectId=${p1}`),
      proj2: await firstCursor(u, `${BASE}?projectId=${p2}`),
      q: await firstCursor(u, `${BASE}?q=alpha`),
      archivedAll: await firstCursor(u, `${BASE}?archived=all`),
      archivedTrue: await firstCursor(u, `${BASE}?archived=true`),
      turns: await firstCursor(u, `${BASE}/${s._id}/turns`),
      turns2: await firstCursor(u, `${BASE}/${s2._id}/turns`),
    };
    const uses = [
      ['turns cursor on the session list', u, BASE, cursors.turns],
      ['session cursor on the turns list', u, `${BASE}/${s._id}/turns`, cursors.own],
      ['project cursor on the turns list', u, `${BASE}/${s._id}/turns`, cursors.proj1],
      ["another session's turns cursor", u, `${BASE}/${s._id}/turns`, cursors.turns2],
      ['another projectId', u, `${BASE}?projectId=${p2}`, cursors.proj1],
      ['a project cursor on the own list', u, BASE, cursors.proj1],
      ['the own-list cursor on a project list', u, `${BASE}?projectId=${p1}`, cursors.own],
      ["another user's own list", u, BASE, cursors.ownOfV],
      ["my own list's cursor used by another user", v, BASE, cursors.own],
      ['another q', u, `${BASE}?q=alph`, cursors.q],
      ['a q cursor without q', u, BASE, cursors.q],
      ['the unfiltered cursor with q', u, `${BASE}?q=alpha`, cursors.own],
      ['archived=all cursor on the default list', u, BASE, cursors.archivedAll],
      ['archived=all cursor on archived=true', u, `${BASE}?archived=true`, cursors.archivedAll],
      ['archived=true cursor on archived=all', u, `${BASE}?archived=all`, cursors.archivedTrue],
      ['default cursor on archived=true', u, `${BASE}?archived=true`, cursors.own],
    ];
    for (const [what, who, list, cursor] of uses) {
      assertBadRequest(await who.get(withParams(list, { limit: 2, cursor })), what);
    }
    // the same list is the same list: archived absent, archived=false and archived= are one list;
    // in shared mode a project's list is the same for every user
    assert.equal((await u.get(withParams(`${BASE}?archived=false`, { limit: 2, cursor: cursors.own }))).status, 200);
    assert.equal((await u.get(withParams(`${BASE}?archived=`, { limit: 2, cursor: cursors.own }))).status, 200);
    assert.equal((await v.get(withParams(`${BASE}?projectId=${p1}`, { limit: 2, cursor: cursors.proj1 }))).status, 200);
  });

  test('"a stale cursor whose item has since been deleted still continues correctly"', async () => {
    const u = freshUser('stale');
    for (let i = 0; i < 9; i++) await create(u);
    const whole = (await u.get(BASE)).body.data;
    // delete the last item of page 1: page 2 is still the next three
    let p1 = await u.get(`${BASE}?limit=3`);
    assert.equal((await u.del(`${BASE}/${whole[2]._id}`)).status, 200);
    let p2 = await u.get(withParams(BASE, { limit: 3, cursor: p1.body.nextCursor }));
    assert.equal(p2.status, 200, p2.text);
    assert.deepEqual(ids(p2.body.data), ids(whole.slice(3, 6)));
    // delete the cursor's item and the one after it
    p1 = await u.get(`${BASE}?limit=2`); // whole[0], whole[1]
    await u.del(`${BASE}/${whole[1]._id}`);
    await u.del(`${BASE}/${whole[3]._id}`);
    p2 = await u.get(withParams(BASE, { limit: 3, cursor: p1.body.nextCursor }));
    assert.deepEqual(ids(p2.body.data), ids([whole[4], whole[5], whole[6]]));
    // the cursor's item was updated meanwhile (moved to the front): the walk still continues after it
    const p = await u.get(`${BASE}?limit=2`); // whole[0], whole[4]
    await u.put(`${BASE}/${whole[4]._id}`, { name: 'moved' });
    const next = await u.get(withParams(BASE, { limit: 10, cursor: p.body.nextCursor }));
    assert.deepEqual(ids(next.body.data), ids([whole[5], whole[6], whole[7], whole[8]]));
    assert.equal(next.body.nextCursor, null);
    // every remaining item deleted: an empty last page
    const last = await u.get(`${BASE}?limit=1`);
    for (const s of (await u.get(`${BASE}?archived=all`)).body.data) await u.del(`${BASE}/${s._id}`);
    assert.deepEqual((await u.get(withParams(BASE, { limit: 1, cursor: last.body.nextCursor }))).body, { success: true, data: [], nextCursor: null });
    // a turns cursor of a session deleted since: that list is now empty
    const s = await create(u);
    for (let i = 0; i < 3; i++) await addTurn(u, s._id);
    const tc = await firstCursor(u, `${BASE}/${s._id}/turns`);
    await u.del(`${BASE}/${s._id}`);
    assert.deepEqual((await u.get(withParams(`${BASE}/${s._id}/turns`, { limit: 1, cursor: tc }))).body, { success: true, data: [], nextCursor: null });
  });

  test('[D-paging-4] a cursor given without limit returns the rest of the list, without nextCursor', async () => {
    const u = freshUser('whole');
    const s = await create(u);
    for (let i = 0; i < 29; i++) await create(u);
    for (let i = 0; i < 30; i++) await addTurn(u, s._id, { role: 'user', content: `t${i}` });
    for (const list of [BASE, `${BASE}/${s._id}/turns`]) {
      const whole = await u.get(list);
      assert.deepEqual(Object.keys(whole.body), ['success', 'data']);
      assert.equal(whole.body.data.length, 30);
      const first = await u.get(`${list}?limit=10`);
      const rest = await u.get(withParams(list, { cursor: first.body.nextCursor }));
      assert.equal(rest.status, 200);
      assert.deepEqual(Object.keys(rest.body), ['success', 'data']);
      assert.deepEqual(ids([...first.body.data, ...rest.body.data]), ids(whole.body.data));
    }
  });
});
