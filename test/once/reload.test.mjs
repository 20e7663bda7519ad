// docs/TEAM-DECISIONS.md, HTTP behaviour and Running it: SIGHUP re-reads providers.json, and
// /healthz reports the reload.
import assert from 'node:assert/strict';
import { unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { sleep, waitFor, dispose } from '../api-kit.mjs';
import { startServer } from '../helpers.mjs';

describe('Reload: SIGHUP re-reads providers.json', () => {
  const P1 = { _id: 'cccccccccccccccccccccc01', name: 'One', apiKey: 'sk-reload-one-7f3a9c' };
  const P2 = { _id: 'cccccccccccccccccccccc02', name: 'Two' };
  const P3 = { _id: 'cccccccccccccccccccccc03', name: 'Three', apiKey: 'sk-reload-three-b81e44' };

  async function health(s) {
    const r = await s.request('GET', '/healthz');
    assert.equal(r.status, 200);
    return r.body.data.providers;
  }

  /** Sends SIGHUP and waits until the server logged the outcome of this reload. */
  async function hup(s) {
    const count = () => s.logs().filter((l) => /^providers reload/.test(l.msg)).length;
    const before = count();
    s.child.kill('SIGHUP');
    await waitFor(() => count() > before, 'the reload log line');
    return s.logs().filter((l) => /^providers reload/.test(l.msg)).at(-1);
  }

  test('SIGHUP re-reads providers.json; GET /healthz reports the providers\' count and load time, which change after a reload', async () => {
    const s = await startServer({ providers: [P1, P2] });
    try {
      const first = await health(s);
      assert.equal(first.count, 2);
      assert.match(first.loadedAt, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
      assert.ok(Math.abs(Date.parse(first.loadedAt) - Date.now()) < 60_000);
      await sleep(5);
      writeFileSync(join(s.dataDir, 'providers.json'), JSON.stringify([P1, P2, P3]));
      const line = await hup(s);
      assert.equal(line.msg, 'providers reloaded');
      assert.equal(line.count, 3);
      const second = await health(s);
      assert.equal(second.count, 3);
      assert.ok(Date.parse(second.loadedAt) > Date.parse(first.loadedAt), 'loadedAt moved');
      const list = await s.as('alice').get('/api/v1/providers');
      assert.deepEqual(list.body.data.map((p) => p.name), ['One', 'Three', 'Two']);
      assert.equal((await s.as('alice').get(`/api/v1/providers/${P3._id}`)).body.data.hasApiKey, true);
      assert.equal((await s.request('GET', '/healthz')).status, 200, 'still serving');
    } finally {
      await dispose(s);
    }
  });

  test('a bad file keeps the old list and logs why, never the apiKey; healthz keeps the old count and load time', async () => {
    const s = await startServer({ providers: [P1, P2] });
    try {
      const good = await health(s);
      const listBefore = (await s.as('alice').get('/api/v1/providers')).text;
      const badFiles = [
        ['[{"_id":"cccccccccccccccccccccc09","name":"Nine","apiKey":"sk-bad-json-5d2e11"', /not valid JSON/],
        [JSON.stringify([P1, { _id: 'short', name: 'X', apiKey: 'sk-bad-id-a90f37' }]), /entry 2 .*_id must be 24 hex characters/],
        [JSON.stringify([{ ...P3, name: '   ', apiKey: 'sk-bad-name-66c0de' }]), /entry 1 .*name must be a non-blank string/],
        [JSON.stringify({ providers: [{ ...P1, apiKey: 'sk-not-array-0b7d52' }] }), /JSON array/],
        [JSON.stringify([P1, { ...P2, _id: P1._id.toUpperCase(), apiKey: 'sk-dup-id-e3f104' }]), /repeats entry 1/],
      ];
      for (const [text, why] of badFiles) {
        writeFileSync(join(s.dataDir, 'providers.json'), text);
        const line = await hup(s);
        assert.equal(line.msg, 'providers reload failed; keeping the previous list');
        assert.equal(line.level, 'error');
        assert.match(line.reason, /providers\.json/);
        assert.match(line.reason, why);
        assert.equal(line.count, 2, 'says how many providers it keeps');
        assert.deepEqual(await health(s), good, 'healthz: same count, same load time');
        assert.equal((await s.as('alice').get('/api/v1/providers')).text, listBefore, 'the old list is served');
      }
      for (const key of ['sk-bad-json-5d2e11', 'sk-bad-id-a90f37', 'sk-bad-name-66c0de', 'sk-not-array-0b7d52', 'sk-dup-id-e3f104', P1.apiKey]) {
        assert.equal((s.stdout + s.stderr).includes(key), false, `${key} was logged`);
      }
    } finally {
      await dispose(s);
    }
  });

  test('a deleted providers file reloads as an empty list, and a file put back is picked up again', async () => {
    const s = await startServer({ providers: [P1, P2] });
    try {
      const first = await health(s);
      await sleep(5);
      unlinkSync(join(s.dataDir, 'providers.json'));
      const line = await hup(s);
      assert.equal(line.msg, 'providers reloaded');
      assert.equal(line.count, 0);
      const h = await health(s);
      assert.equal(h.count, 0);
      assert.ok(Date.parse(h.loadedAt) > Date.parse(first.loadedAt));
      assert.deepEqual((await s.as('alice').get('/api/v1/providers')).body, { success: true, data: [] });
      assert.equal((await s.as('alice').get(`/api/v1/providers/${P1._id}`)).status, 404);
      writeFileSync(join(s.dataDir, 'providers.json'), JSON.stringify([P3]));
      await hup(s);
      assert.equal((await health(s)).count, 1);
      assert.equal((await s.as('alice').get(`/api/v1/providers/${P3._id}`)).status, 200);
    } finally {
      await dispose(s);
    }
  });
});
