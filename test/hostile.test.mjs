// Replies under hostile providers (issue 42): each attack a provider (a misbehaving local server,
// or a compromised one) or a user with a long history could make, on the real server and the
// local provider of test/provider/, whose switches (SCENARIOS) play the attacker. On every engine.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { newSession, removeDir, startServer } from './helpers.mjs';
import { startProvider } from './provider/server.mjs';

const B = '/api/v1/chat-sessions';
const OPENAI = '6f0000000000000000000001';
const KEY = 'sk-hostile-0123456789abcdef';

let provider;
let server;
let alice;

const providersFor = (url, more = []) => [{ _id: OPENAI, name: 'Local OpenAI', type: 'openai', baseUrl: `${url}/v1`, apiKey: KEY }, ...more];

before(async () => {
  provider = await startProvider({ log: false });
  server = await startServer({ providers: providersFor(provider.url) });
  alice = server.as('alice');
});
after(async () => {
  await server?.stop();
  if (server !== undefined) removeDir(server.dataDir);
  await provider?.close();
});

async function session(model, who = alice, over = {}) {
  const r = await who.post(B, newSession({ providerId: OPENAI, selectedModel: model, ...over }));
  assert.equal(r.status, 201, r.text);
  return r.body.data;
}

describe('Replies under hostile providers', () => {
  test('[D-hostile-1] "a cancel never answers a complete turn": 200 cancels raced with their replies\' ends', async () => {
    const s = await session('tokens:3');
    const seen = { interrupted: 0, lost: 0 };
    for (let i = 0; i < 200; i++) {
      const started = await alice.post(`${B}/${s._id}/messages`, { content: `race ${i}`, background: true });
      assert.equal(started.status, 202, started.text);
      const reply = started.body.data.reply;
      // sent at once, or a little later: the reply's end falls before, during or after the cancel
      if (i % 4 !== 0) await new Promise((r) => setTimeout(r, i % 4));
      const c = await alice.post(`${B}/${s._id}/turns/${reply._id}/cancel`, {});
      let recorded = (await alice.get(`${B}/${s._id}/turns/${reply._id}`)).body.data;
      for (let k = 0; recorded.status === 'streaming' && k < 500; k++) {
        await new Promise((r) => setTimeout(r, 10));
        recorded = (await alice.get(`${B}/${s._id}/turns/${reply._id}`)).body.data;
      }
      if (c.status === 200) {
        assert.equal(c.body.data.status, 'interrupted', `race ${i}: a 200 is the cancel's own end`);
        assert.deepEqual(recorded, c.body.data, `race ${i}: answered as recorded`);
        seen.interrupted++;
      } else {
        assert.deepEqual([c.status, c.body], [409, { success: false, message: 'Turn is not streaming' }], `race ${i}`);
        assert.equal(recorded.status, 'complete', `race ${i}: the end won`);
        seen.lost++;
      }
    }
    assert.equal(seen.interrupted + seen.lost, 200);
  });
});
