// Search: q on the session list matches the name case-insensitively, as plain text, combined with
// projectId, archived and paging.
// The features beyond the spec's rows, as the features issue names them (its words, not the
// docs', are what the test names quote). Against the real server over HTTP.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { assert400, BASE, bob, create, EMOJI, freshUser, ids, listOrder, sharedServer, unique, walk, withParams } from './api-kit.mjs';

sharedServer();

describe('c. Search', () => {
  test('[D-paging-6] q on the session list matches the name case-insensitively, as a substring', async () => {
    const u = freshUser('q');
    const names = ['Alpha Planning', 'alphabet soup', 'ALPHA', 'beta', 'the alPHa team', ''];
    const made = {};
    for (const name of names) made[name] = await create(u, { name });
    const expect = ['Alpha Planning', 'alphabet soup', 'ALPHA', 'the alPHa team'];
    for (const q of ['alpha', 'ALPHA', 'AlPhA', 'lph']) {
      const r = await u.get(withParams(BASE, { q }));
      assert.equal(r.status, 200);
      assert.deepEqual(new Set(r.body.data.map((s) => s.name)), new Set(expect), q);
      assert.deepEqual(ids(r.body.data), ids([...r.body.data].sort(listOrder)), 'in list order');
    }
    assert.deepEqual((await u.get(withParams(BASE, { q: 'planning' }))).body.data.map((s) => s.name), ['Alpha Planning']);
    assert.deepEqual((await u.get(withParams(BASE, { q: 'alpha planning' }))).body.data.map((s) => s.name), ['Alpha Planning'], 'a space inside q');
    assert.deepEqual((await u.get(`${BASE}?q=alpha+planning`)).body.data.map((s) => s.name), ['Alpha Planning'], '+ is a space in a query string');
    assert.deepEqual((await u.get(withParams(BASE, { q: 'gamma' }))).body.data, []);
    assert.equal((await u.get(`${BASE}?q=`)).body.data.length, names.length, 'q= is absent: everything');
  });

  test('"q ... matches the name case-insensitively (also non-ASCII)"', async () => {
    const u = freshUser('q-intl');
    for (const name of ['Émile Zola', 'ÉMILE', 'émile', 'Emile (no accent)', 'ПРИВЕТ мир', 'Ωmega ΣΟΦΙΑ', '日本語のメモ', `party ${EMOJI} time`, 'STRASSE']) await create(u, { name });
    const names = async (q) => new Set((await u.get(withParams(BASE, { q }))).body.data.map((s) => s.name));
    assert.deepEqual(await names('émile'), new Set(['Émile Zola', 'ÉMILE', 'émile']));
    assert.deepEqual(await names('ÉMILE'), new Set(['Émile Zola', 'ÉMILE', 'émile']));
    assert.deepEqual(await names('привет'), new Set(['ПРИВЕТ мир']));
    assert.deepEqual(await names('МИР'), new Set(['ПРИВЕТ мир']));
    assert.deepEqual(await names('σοφια'), new Set(['Ωmega ΣΟΦΙΑ']));
    assert.deepEqual(await names('ωMEGA'), new Set(['Ωmega ΣΟΦΙΑ']));
    assert.deepEqual(await names('本語'), new Set(['日本語のメモ']));
    assert.deepEqual(await names(EMOJI), new Set([`party ${EMOJI} time`]));
    assert.deepEqual(await names('strasse'), new Set(['STRASSE']));
  });

  test('"q" is plain text: no wildcards, no regular expressions', async () => {
    const u = freshUser('q-literal');
    for (const name of ['100% done', 'a.b', 'axb', 'snake_case', 'snakeXcase', '(paren)', 'back\\slash', 'star*', '[x]']) await create(u, { name });
    const names = async (q) => (await u.get(withParams(BASE, { q }))).body.data.map((s) => s.name).sort();
    assert.deepEqual(await names('%'), ['100% done']);
    assert.deepEqual(await names('.'), ['a.b']);
    assert.deepEqual(await names('a.b'), ['a.b']);
    assert.deepEqual(await names('_'), ['snake_case']);
    assert.deepEqual(await names('('), ['(paren)']);
    assert.deepEqual(await names('\\'), ['back\\slash']);
    assert.deepEqual(await names('.*'), []);
    assert.deepEqual(await names('*'), ['star*']);
    assert.deepEqual(await names('[x]'), ['[x]']);
    assert.deepEqual(await names('^a'), []);
  });

  test('"q ... combined with projectId rule"', async () => {
    const project = unique('q-proj');
    const u = freshUser('q-rule');
    const a = await create(u, { projectId: project, name: 'Shared Report' });
    const b = await create(bob, { projectId: project, name: 'report draft' });
    await create(bob, { projectId: project, name: 'notes' });
    const mineElsewhere = await create(u, { projectId: unique('q-other'), name: 'report elsewhere' });
    const withProject = await u.get(withParams(BASE, { projectId: project, q: 'REPORT' }));
    assert.deepEqual(new Set(ids(withProject.body.data)), new Set([a._id, b._id]), "with projectId: that project's sessions of every user, filtered");
    const own = await u.get(withParams(BASE, { q: 'report' }));
    assert.deepEqual(new Set(ids(own.body.data)), new Set([a._id, mineElsewhere._id]), "without projectId: the caller's own, filtered");
    const emptyProject = await u.get(withParams(BASE, { projectId: '', q: 'report' }));
    assert.deepEqual(new Set(ids(emptyProject.body.data)), new Set([a._id, mineElsewhere._id]), 'projectId= is absent');
  });

  test('"q ... combined ... with paging" (and with archived, and its 500-character limit)', async () => {
    const u = freshUser('q-page');
    const match = [];
    for (let i = 0; i < 12; i++) {
      match.push(await create(u, { name: `Needle ${i}` }));
      await create(u, { name: `hay ${i}` });
    }
    const whole = (await u.get(`${BASE}?q=needle`)).body.data;
    assert.equal(whole.length, 12);
    for (const limit of [1, 5, 12]) assert.deepEqual(ids((await walk(u, `${BASE}?q=needle`, limit)).items), ids(whole));
    await u.post(`${BASE}/${match[0]._id}/archive`);
    assert.equal((await u.get(`${BASE}?q=needle`)).body.data.length, 11);
    assert.deepEqual(ids((await u.get(`${BASE}?q=NEEDLE&archived=true`)).body.data), [match[0]._id]);
    assert.equal((await walk(u, `${BASE}?q=needle&archived=all`, 5)).items.length, 12);
    assert.equal((await u.get(withParams(BASE, { q: 'x'.repeat(500) }))).status, 200);
    assert.equal((await u.get(withParams(BASE, { q: EMOJI.repeat(500) }))).status, 200);
    assert400(await u.get(withParams(BASE, { q: 'x'.repeat(501) })), 'q must be at most 500 characters');
    assert400(await u.get(`${BASE}?q=a&q=b`), 'q must be given at most once');
  });
});
