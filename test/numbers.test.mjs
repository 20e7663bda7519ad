// Numbers that cannot break the store (docs/DECISIONS.md, "Numbers"; issue #38), on every engine:
// a turn's counts enter as integers 0..2^53 - 1 (a request outside is 400 naming the field, a
// provider's is not recorded), and the totals made of them saturate there and stay exact below
// it, whatever is added and taken away, so no route, restart or export fails through a number.
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { crc32 } from 'node:zlib';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { assertError } from './api-kit.mjs';
import { forgetStore, newSession, removeDir, runCli, startServer, STORE, tempDir } from './helpers.mjs';
import { BASE, MAX, repairLines, storeTokens, throughExport, tokens, usageOf } from './numbers-kit.mjs';
import { startProvider } from './provider/server.mjs';

const AT_TOP = { inputTokens: MAX, outputTokens: MAX };

/** Posts a turn with `usage` (under the head, or as a new root with `root`) and answers it. */
async function turn(who, sid, usage, root = false) {
  const r = await who.post(`${BASE}/${sid}/turns`, { role: 'assistant', content: 'counted', usage, ...(root ? { parentId: null } : {}) });
  assert.equal(r.status, 201, r.text);
  return r.body.data;
}

async function session(who, over = {}) {
  const r = await who.post(BASE, newSession(over));
  assert.equal(r.status, 201, r.text);
  return r.body.data;
}

describe('Numbers (issue #38)', () => {
  test('[D-numbers-2] two turns at 2^53 - 1: /metrics, /usage, later writes, a restart, an export and its import all work', async () => {
    let s = await startServer();
    const dir = s.dataDir;
    try {
      const alice = s.as('alice');
      const bob = s.as('bob');
      const theirs = await session(bob);
      await turn(bob, theirs._id, { inputTokens: 3, outputTokens: 4, cachedTokens: 1 });
      const mine = await session(alice);
      const t1 = await turn(alice, mine._id, AT_TOP);
      const t2 = await turn(alice, mine._id, AT_TOP);
      assert.deepEqual([t1.usage, t2.usage], [AT_TOP, AT_TOP], 'each turn keeps its own counts exactly');
      const m = await s.request('GET', '/metrics');
      assert.equal(m.status, 200, m.text);
      assert.deepEqual(await storeTokens(s), [MAX, MAX, 1], 'the store totals saturate');
      const u = await usageOf(alice);
      assert.deepEqual([u.sessions, u.turns, ...tokens(u)], [1, 2, MAX, MAX, 0], "alice's usage saturates");
      assert.deepEqual(tokens(await usageOf(bob)), [3, 4, 1], "another user's is untouched");
      // later writes to that session: a turn, edits, a fork, deletes
      await turn(alice, mine._id, { inputTokens: 1, outputTokens: 2 });
      assert.equal((await alice.put(`${BASE}/${mine._id}/turns/${t2._id}`, { usage: { inputTokens: 5, outputTokens: 6 } })).status, 200);
      assert.deepEqual(tokens(await usageOf(alice)), [MAX, MAX, 0], 't1 still holds 2^53 - 1');
      assert.equal((await alice.put(`${BASE}/${mine._id}/turns/${t1._id}`, { usage: { inputTokens: 7, outputTokens: 8 } })).status, 200);
      assert.deepEqual(tokens(await usageOf(alice)), [13, 16, 0], 'taken from a total at the top, it is counted again: exact');
      assert.deepEqual(await storeTokens(s), [16, 20, 1]);
      assert.equal((await alice.put(`${BASE}/${mine._id}/turns/${t1._id}`, { usage: AT_TOP })).status, 200);
      const fork = (await alice.post(`${BASE}/${mine._id}/fork`, {})).body.data;
      assert.deepEqual(tokens(await usageOf(alice)), [MAX, MAX, 0]);
      assert.equal((await alice.del(`${BASE}/${mine._id}`)).status, 200);
      assert.deepEqual(tokens(await usageOf(alice)), [MAX, MAX, 0], 'the fork holds a copy of t1');
      assert.equal((await alice.del(`${BASE}/${fork._id}/turns/${(await alice.get(`${BASE}/${fork._id}/turns`)).body.data[0]._id}`)).status, 200);
      assert.deepEqual([...tokens(await usageOf(alice)), ...(await storeTokens(s))], [0, 0, 0, 3, 4, 1], 'all of it given back, exactly');
      const again = await session(alice);
      await turn(alice, again._id, AT_TOP);
      await turn(alice, again._id, AT_TOP);
      await turn(alice, again._id, { inputTokens: 1, outputTokens: 1 });
      // a restart, with nothing to repair
      await s.stop();
      s = await startServer({ dataDir: dir });
      assert.deepEqual(repairLines(s), []);
      assert.deepEqual(tokens(await usageOf(s.as('alice'))), [MAX, MAX, 0]);
      assert.equal((await s.request('GET', '/metrics')).status, 200);
      assert.equal((await s.as('alice').post(`${BASE}/${again._id}/turns`, { role: 'user', content: 'after the restart' })).status, 201);
      const was = await usageOf(s.as('alice'));
      await s.stop();
      await throughExport(dir, async (fresh) => {
        const f = await startServer({ dataDir: fresh });
        try {
          assert.deepEqual(await usageOf(f.as('alice')), was, 'the import counts what the store counted');
          assert.deepEqual((await f.as('alice').get(`${BASE}/${again._id}/turns`)).body.data.map((t) => t.usage), [AT_TOP, AT_TOP, { inputTokens: 1, outputTokens: 1 }, undefined]);
        } finally {
          await f.stop();
        }
      });
    } finally {
      await s.stop();
      removeDir(dir);
    }
  });

  test('[D-numbers-1] "a request outside -> 400 naming the field": a count of 2^53, 1.5, -1 or 1e300, a negative cost', async () => {
    const s = await startServer();
    try {
      const alice = s.as('alice');
      const mine = await session(alice);
      const t = await turn(alice, mine._id, { inputTokens: 1, outputTokens: 1 });
      for (const field of ['inputTokens', 'outputTokens', 'cachedTokens', 'reasoningTokens']) {
        for (const bad of [2 ** 53, 1.5, -1, 1e300]) {
          const usage = { inputTokens: 1, outputTokens: 1, [field]: bad };
          const message = `usage.${field} must be an integer from 0 to 9007199254740991`;
          assertError(await alice.post(`${BASE}/${mine._id}/turns`, { role: 'user', content: 'x', usage }), 400, message, `POST ${field} ${bad}`);
          assertError(await alice.put(`${BASE}/${mine._id}/turns/${t._id}`, { usage }), 400, message, `PUT ${field} ${bad}`);
        }
      }
      assertError(await alice.post(`${BASE}/${mine._id}/turns`, { role: 'user', content: 'x', usage: { inputTokens: 1, outputTokens: 1, costUsd: -0.5 } }), 400, 'usage.costUsd must be a non-negative number');
      // 2^53 - 1 is the largest taken
      assert.equal((await alice.post(`${BASE}/${mine._id}/turns`, { role: 'user', content: 'x', usage: { inputTokens: MAX, outputTokens: 0, cachedTokens: MAX, costUsd: 1e300 } })).status, 201);
      assert.deepEqual((await usageOf(alice)).turns, 2, 'only the turns taken were written');
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test("[D-numbers-1] an import's turn with a count of 2^53 is refused, naming its line and the field", async () => {
    const dir = tempDir('csa-numbers-backup-');
    try {
      const file = join(dir, 'backup.ndjson');
      const header = { format: 'chat-session-api/export', version: 2, exportedAt: '2026-01-01T00:00:00.000Z', sessions: 1, turns: 1 };
      const sessionLine = { session: { _id: '6e0000000000000000000001', name: '', provider: 'p', selectedModel: 'm', mode: 'Build', user: 'alice', project: 'p', createdAt: '2026-01-01T00:00:00.000Z', updatedAt: '2026-01-01T00:00:01.000Z', archived: false, headTurnId: '6e00000000000000000000a1' } };
      const turnLine = { turn: { _id: '6e00000000000000000000a1', session: '6e0000000000000000000001', parentId: null, user: 'alice', role: 'assistant', content: 'c', usage: { inputTokens: 1, outputTokens: 2 ** 53 }, status: 'complete', createdAt: '2026-01-01T00:00:01.000Z' } };
      writeFileSync(file, [header, sessionLine, turnLine].map((l) => JSON.stringify(l)).join('\n') + '\n');
      const r = runCli(['import', file], { env: { DATA_DIR: dir } });
      assert.notEqual(r.code, 0);
      assert.match(r.stderr, /line 3: turn usage\.outputTokens must be an integer from 0 to 9007199254740991; nothing was imported/);
    } finally {
      forgetStore(dir);
      removeDir(dir);
    }
  });

  test('[D-numbers-2] totals saturate at 2^53 - 1 and stay exact below it for writes sent together', async () => {
    const s = await startServer();
    try {
      const alice = s.as('alice');
      const big = await session(alice);
      const small = await session(alice);
      const bigTurns = await Promise.all(Array.from({ length: 6 }, () => alice.post(`${BASE}/${big._id}/turns`, { role: 'assistant', content: 'big', usage: AT_TOP, parentId: null })));
      const smallTurns = await Promise.all(Array.from({ length: 6 }, (_, i) => alice.post(`${BASE}/${small._id}/turns`, { role: 'assistant', content: 'small', usage: { inputTokens: i, outputTokens: 10 * i }, parentId: null })));
      for (const r of [...bigTurns, ...smallTurns]) assert.equal(r.status, 201, r.text);
      assert.deepEqual(tokens(await usageOf(alice)), [MAX, MAX, 0]);
      // take the big ones away while more small ones and edits arrive
      const writes = [
        ...bigTurns.map((r) => alice.del(`${BASE}/${big._id}/turns/${r.body.data._id}`)),
        ...Array.from({ length: 4 }, () => alice.post(`${BASE}/${small._id}/turns`, { role: 'assistant', content: 'more', usage: { inputTokens: 100, outputTokens: 1 }, parentId: null })),
        alice.put(`${BASE}/${small._id}/turns/${smallTurns[0].body.data._id}`, { usage: { inputTokens: 1000, outputTokens: 0 } }),
      ];
      for (const r of await Promise.all(writes)) assert.equal(r.status < 300, true, r.text);
      // 1000 + 1..5, 4 x 100; 10 x (1..5), 4 x 1
      assert.deepEqual(tokens(await usageOf(alice)), [1415, 154, 0]);
      assert.deepEqual(await storeTokens(s), [1415, 154, 0]);
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test("[D-numbers-4] a journal holding a provider's 1e300 and 1.5 migrates, its turns' usage taken into range", async () => {
    const dir = tempDir('csa-numbers-journal-');
    const line = (record) => {
      const json = JSON.stringify(record);
      return `${crc32(Buffer.from(json)).toString(16).padStart(8, '0')} ${json}\n`;
    };
    const sid = '6e0000000000000000000002';
    const tid = '6e00000000000000000000b1';
    const at = '2026-11-27T12:28:32.238Z';
    writeFileSync(
      join(dir, 'sessions.journal'),
      line({ format: 'chat-session-api/journal', version: 2, createdAt: at }) +
        line({ put: { _id: sid, name: 'old', provider: 'p', selectedModel: 'm', mode: 'Build', user: 'alice', project: 'p', createdAt: at, updatedAt: at, archived: false, headTurnId: null } }) +
        line({ turn: { _id: tid, session: sid, parentId: null, user: 'alice', role: 'assistant', content: 'counted', usage: { inputTokens: 1e300, outputTokens: 1.5, cachedTokens: -2 }, status: 'complete', createdAt: at } }),
    );
    let s;
    try {
      let said;
      if (STORE === 'postgres') {
        const m = runCli(['migrate'], { env: { DATA_DIR: dir } });
        assert.equal(m.code, 0, m.stderr);
        said = m.stderr;
      }
      s = await startServer({ dataDir: dir });
      said ??= s.stdout;
      assert.equal(said.split('\n').filter((l) => l.includes('turns of the journal held usage out of range')).length, 1, said);
      assert.deepEqual((await s.as('alice').get(`${BASE}/${sid}/turns/${tid}`)).body.data.usage, { inputTokens: MAX, outputTokens: 1, cachedTokens: 0 });
      assert.deepEqual(tokens(await usageOf(s.as('alice'))), [MAX, 1, 0]);
    } finally {
      await s?.stop();
      forgetStore(dir);
      removeDir(dir);
    }
  });

  describe('a provider that reports 2^53 - 1 tokens', () => {
    const ids = { openai: '6f0000000000000000000001', anthropic: '6f0000000000000000000002', ollama: '6f0000000000000000000003' };
    let provider;
    before(async () => {
      provider = await startProvider();
    });
    after(async () => {
      await provider?.close();
    });

    test("[D-numbers-1] a provider's usage chunk of 2^53 - 1 on each protocol: recorded, counted, restarted, exported", async () => {
      const providers = [
        { _id: ids.openai, name: 'Local OpenAI', type: 'openai', baseUrl: `${provider.url}/v1`, apiKey: 'sk-test' },
        { _id: ids.anthropic, name: 'Local Claude', type: 'anthropic', baseUrl: provider.url, apiKey: 'sk-test' },
        { _id: ids.ollama, name: 'Local Ollama', type: 'ollama', baseUrl: provider.url },
      ];
      let s = await startServer({ providers });
      const dir = s.dataDir;
      try {
        const ursula = s.as('ursula');
        const expected = { openai: { ...AT_TOP, cachedTokens: 5 }, anthropic: { ...AT_TOP, cachedTokens: 5 }, ollama: AT_TOP };
        for (const type of ['openai', 'anthropic', 'ollama']) {
          const sid = (await session(ursula, { providerId: ids[type], selectedModel: `say:counted+counts:${MAX}+cached:5` }))._id;
          for (let i = 0; i < 2; i++) {
            const r = await ursula.post(`${BASE}/${sid}/messages`, { content: 'count this' });
            assert.equal(r.status, 201, `${type}: ${r.text}`);
            assert.deepEqual([r.body.data.reply.status, r.body.data.reply.usage], ['complete', expected[type]], type);
          }
        }
        assert.deepEqual(tokens(await usageOf(ursula)), [MAX, MAX, 20]);
        assert.deepEqual(await storeTokens(s), [MAX, MAX, 20]);
        await s.stop();
        s = await startServer({ dataDir: dir, providers });
        assert.deepEqual(repairLines(s), []);
        assert.deepEqual(tokens(await usageOf(s.as('ursula'))), [MAX, MAX, 20]);
        await s.stop();
        await throughExport(dir);
      } finally {
        await s.stop();
        removeDir(dir);
      }
    });
  });
});
