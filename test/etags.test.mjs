// Safe concurrent edits: the ETag of a session and If-Match on its updates, deletes, archives and
// turn appends.
// The features beyond the spec's rows, as the features issue names them (its words, not the
// docs', are what the test names quote). Against the real server over HTTP.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, describe, test } from 'node:test';
import { addTurn, alice, assert404, assert412, BASE, create, freshUser, get, MISSING, server, sharedServer, turnsOf } from './api-kit.mjs';
import { newSession } from './helpers.mjs';

sharedServer();

describe('e. Safe concurrent edits (ETag / If-Match)', () => {
  const STRONG = /^"[^"]+"$/;

  test('"ETag on every single-session response (GET, POST create 201, PUT, archive, unarchive)"', async () => {
    const u = freshUser('etag');
    const c = await u.post(BASE, newSession());
    assert.equal(c.status, 201);
    const id = c.body.data._id;
    const answers = [['create', c]];
    answers.push(['get', await u.get(`${BASE}/${id}`)]);
    answers.push(['put', await u.put(`${BASE}/${id}`, { name: 'x' })]);
    answers.push(['get after put', await u.get(`${BASE}/${id}`)]);
    answers.push(['archive', await u.post(`${BASE}/${id}/archive`)]);
    answers.push(['unarchive', await u.post(`${BASE}/${id}/unarchive`)]);
    answers.push(['empty put', await u.put(`${BASE}/${id}`, {})]);
    for (const [what, r] of answers) {
      assert.ok(r.status === 200 || r.status === 201, what);
      assert.match(r.headers.etag ?? '', STRONG, `${what} carries a strong ETag`);
    }
    assert.equal(answers[1][1].headers.etag, c.headers.etag, 'GET gives the tag the create gave');
    assert.equal(answers[3][1].headers.etag, answers[2][1].headers.etag, 'GET gives the tag the PUT gave');
    const tags = [c, answers[2][1], answers[4][1], answers[5][1]].map((r) => r.headers.etag);
    assert.equal(new Set(tags).size, tags.length, 'every change gives a new tag');
    assert.equal(answers[6][1].headers.etag, answers[5][1].headers.etag, 'no change, same tag');
  });

  test("[D-sessions-7] the ETag digests the first release's ten fields and the newest turn: 22 characters of base64url", async () => {
    // clients keep tags across upgrades of the server: a new way of computing them would turn
    // every kept tag into a 412
    const u = freshUser('etag-digest');
    const tagOf = (text) => `"${createHash('sha256').update(text).digest('base64url').slice(0, 22)}"`;
    const v1 = ({ _id, name, provider, selectedModel, mode, user, project, createdAt, updatedAt, archived }) => JSON.stringify({ _id, name, provider, selectedModel, mode, user, project, createdAt, updatedAt, archived });
    const c = await u.post(BASE, newSession({ name: 'digest \u{1F600} é' }));
    assert.equal(c.headers.etag, tagOf(v1(c.body.data)), 'create');
    const id = c.body.data._id;
    const p = await u.put(`${BASE}/${id}`, { name: 'renamed' });
    assert.equal(p.headers.etag, tagOf(v1(p.body.data)), 'update');
    const t = await addTurn(u, id);
    const g = await u.get(`${BASE}/${id}`);
    assert.equal(g.headers.etag, tagOf(`${v1(g.body.data)}\n${t.createdAt}\n${t._id}`), 'with a turn');
  });

  test('"If-Match on PUT, DELETE, archive and turn append": the current tag passes', async () => {
    const u = freshUser('im');
    const s = await u.post(BASE, newSession());
    const id = s.body.data._id;
    let tag = s.headers.etag;
    const put = await u.put(`${BASE}/${id}`, { name: 'v1' }, { headers: { 'if-match': tag } });
    assert.equal(put.status, 200, put.text);
    tag = put.headers.etag;
    const arch = await u.post(`${BASE}/${id}/archive`, undefined, { headers: { 'if-match': tag } });
    assert.equal(arch.status, 200, arch.text);
    tag = arch.headers.etag;
    const un = await u.post(`${BASE}/${id}/unarchive`, undefined, { headers: { 'if-match': tag } });
    assert.equal(un.status, 200, un.text);
    tag = un.headers.etag;
    const turn = await u.post(`${BASE}/${id}/turns`, { role: 'user', content: 'c' }, { headers: { 'if-match': tag } });
    assert.equal(turn.status, 201, turn.text);
    tag = (await u.get(`${BASE}/${id}`)).headers.etag;
    const del = await u.del(`${BASE}/${id}`, { headers: { 'if-match': tag } });
    assert.equal(del.status, 200, del.text);
    assert404(await u.get(`${BASE}/${id}`));
  });

  test('"a stale tag gets 412 Chat session was modified and changes nothing (verify by reading back)"', async () => {
    const u = freshUser('stale-tag');
    const s = await u.post(BASE, newSession({ name: 'v0' }));
    const id = s.body.data._id;
    const stale = s.headers.etag;
    await addTurn(u, id);
    const current = await get(u, id);
    assert.notEqual(current.headers.etag, stale);
    const turnsBefore = await turnsOf(u, id);
    const h = { headers: { 'if-match': stale } };
    assert412(await u.put(`${BASE}/${id}`, { name: 'v1' }, h), 'PUT');
    assert412(await u.put(`${BASE}/${id}`, {}, h), 'an empty PUT checks the tag too');
    assert412(await u.del(`${BASE}/${id}`, h), 'DELETE');
    assert412(await u.post(`${BASE}/${id}/archive`, undefined, h), 'archive');
    assert412(await u.post(`${BASE}/${id}/turns`, { role: 'user', content: 'late' }, h), 'turn append');
    const after = await get(u, id);
    assert.deepEqual(after.body, current.body, 'the session is as it was');
    assert.equal(after.headers.etag, current.headers.etag);
    assert.deepEqual(await turnsOf(u, id), turnsBefore, 'no turn was recorded');
    // unarchive with a stale tag, on an archived session
    const arch = await u.post(`${BASE}/${id}/archive`);
    assert412(await u.post(`${BASE}/${id}/unarchive`, undefined, { headers: { 'if-match': current.headers.etag } }), 'unarchive');
    assert.equal((await get(u, id)).body.data.archived, true);
    // and idempotent archive with a stale tag is still a 412 (the tag is checked, not skipped)
    assert412(await u.post(`${BASE}/${id}/archive`, undefined, { headers: { 'if-match': current.headers.etag } }), 'archive again');
    assert.equal((await get(u, id)).headers.etag, arch.headers.etag);
  });

  test('"If-Match: * passes for an existing session"', async () => {
    const u = freshUser('star');
    const id = (await create(u))._id;
    const h = { headers: { 'if-match': '*' } };
    assert.equal((await u.put(`${BASE}/${id}`, { name: 'star' }, h)).status, 200);
    assert.equal((await u.post(`${BASE}/${id}/archive`, undefined, h)).status, 200);
    assert.equal((await u.post(`${BASE}/${id}/unarchive`, undefined, h)).status, 200);
    assert.equal((await u.post(`${BASE}/${id}/turns`, { role: 'user', content: 'c' }, h)).status, 201);
    assert.equal((await u.del(`${BASE}/${id}`, h)).status, 200);
  });

  test('[D-sessions-8] a list of tags with one matching passes; weak tags (W/"...") never match', async () => {
    const u = freshUser('list-tag');
    const c = await u.post(BASE, newSession());
    const id = c.body.data._id;
    let tag = c.headers.etag;
    const list = await u.put(`${BASE}/${id}`, { name: 'a' }, { headers: { 'if-match': `"nope", ${tag}, "other"` } });
    assert.equal(list.status, 200, list.text);
    tag = list.headers.etag;
    assert.equal((await u.put(`${BASE}/${id}`, { name: 'b' }, { headers: { 'if-match': `${tag},"x"` } })).status, 200, 'no space after the comma');
    tag = (await get(u, id)).headers.etag;
    assert412(await u.put(`${BASE}/${id}`, { name: 'c' }, { headers: { 'if-match': '"nope", "other"' } }), 'none matching');
    assert412(await u.put(`${BASE}/${id}`, { name: 'c' }, { headers: { 'if-match': `W/${tag}` } }), 'weak');
    assert412(await u.del(`${BASE}/${id}`, { headers: { 'if-match': `W/${tag}` } }), 'weak on DELETE');
    assert412(await u.put(`${BASE}/${id}`, { name: 'c' }, { headers: { 'if-match': tag.slice(1, -1) } }), 'unquoted');
    assert412(await u.put(`${BASE}/${id}`, { name: 'c' }, { headers: { 'if-match': '' } }), 'empty header');
    assert.equal((await get(u, id)).body.data.name, 'b');
    assert.equal((await u.put(`${BASE}/${id}`, { name: 'd' }, { headers: { 'if-match': `W/${tag}, ${tag}` } })).status, 200, 'a strong match beside a weak one');
  });

  test('"without If-Match the spec\'s last-writer-wins"', async () => {
    const u = freshUser('lww');
    const id = (await create(u))._id;
    const a = await u.put(`${BASE}/${id}`, { name: 'first' });
    const b = await u.put(`${BASE}/${id}`, { name: 'second' });
    assert.equal(a.status, 200);
    assert.equal(b.status, 200);
    assert.equal((await get(u, id)).body.data.name, 'second');
    const many = await Promise.all(Array.from({ length: 10 }, (_, i) => u.put(`${BASE}/${id}`, { name: `n${i}` })));
    assert.ok(many.every((r) => r.status === 200));
    const final = (await get(u, id)).body.data;
    const latest = many.map((r) => r.body.data).sort((x, y) => (x.updatedAt < y.updatedAt ? -1 : 1)).at(-1);
    assert.deepEqual(final, latest, 'the last write applied is what remains');
  });

  test('"two concurrent PUTs with the same If-Match: exactly one wins, the others get 412"', async () => {
    const u = freshUser('race');
    for (let round = 0; round < 5; round++) {
      const c = await u.post(BASE, newSession());
      const id = c.body.data._id;
      const h = { headers: { 'if-match': c.headers.etag } };
      const rs = await Promise.all(Array.from({ length: 8 }, (_, i) => u.put(`${BASE}/${id}`, { name: `writer ${i}` }, h)));
      const won = rs.filter((r) => r.status === 200);
      const lost = rs.filter((r) => r.status !== 200);
      assert.equal(won.length, 1, `round ${round}: ${rs.map((r) => r.status)}`);
      for (const r of lost) assert412(r);
      assert.equal((await get(u, id)).body.data.name, won[0].body.data.name, "the winner's write is the one kept");
    }
    // the same for turn appends, and for a PUT racing a DELETE
    const c = await u.post(BASE, newSession());
    const id = c.body.data._id;
    const h = { headers: { 'if-match': c.headers.etag } };
    const turns = await Promise.all(Array.from({ length: 6 }, (_, i) => u.post(`${BASE}/${id}/turns`, { role: 'user', content: `t${i}` }, h)));
    assert.equal(turns.filter((r) => r.status === 201).length, 1, turns.map((r) => r.status).join());
    assert.equal((await turnsOf(u, id)).length, 1);
    const tag = (await get(u, id)).headers.etag;
    const [put, del] = await Promise.all([u.put(`${BASE}/${id}`, { name: 'p' }, { headers: { 'if-match': tag } }), u.del(`${BASE}/${id}`, { headers: { 'if-match': tag } })]);
    // exactly one wins; the loser gets 412, or 404 when the DELETE won and the session is gone
    const statuses = `PUT ${put.status}, DELETE ${del.status}`;
    assert.ok((put.status === 200 && del.status === 412) || (del.status === 200 && put.status === 404), statuses);
  });

  test('"If-Match on a non-existent session -> 404"', async () => {
    const s = await create(alice);
    await alice.del(`${BASE}/${s._id}`);
    for (const id of [MISSING, s._id, 'nope']) {
      for (const tag of ['*', '"abc"', `W/"abc"`]) {
        const h = { headers: { 'if-match': tag } };
        assert404(await alice.put(`${BASE}/${id}`, { name: 'x' }, h), `PUT ${id} ${tag}`);
        assert404(await alice.put(`${BASE}/${id}`, {}, h), `empty PUT ${id} ${tag}`);
        assert404(await alice.del(`${BASE}/${id}`, h), `DELETE ${id} ${tag}`);
        assert404(await alice.post(`${BASE}/${id}/archive`, undefined, h), `archive ${id} ${tag}`);
        assert404(await alice.post(`${BASE}/${id}/unarchive`, undefined, h), `unarchive ${id} ${tag}`);
        assert404(await alice.post(`${BASE}/${id}/turns`, { role: 'user', content: 'c' }, h), `turn ${id} ${tag}`);
      }
    }
  });
});
