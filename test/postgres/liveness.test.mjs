// PostgreSQL liveness (issue 42, item 3): a reply is interrupted by another instance only once its
// own instance is gone, however quiet the reply, and then within INSTANCE_TIMEOUT; a turn a client
// streams itself keeps STREAMING_IDLE. Several real server processes on one schema, with short
// settings (the 10 s default is the bench's).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { waitFor } from '../api-kit.mjs';
import { newSession, removeDir, startServer, STORE } from '../helpers.mjs';
import { startProvider } from '../provider/server.mjs';

const PG = STORE === 'postgres' ? {} : { skip: `liveness is PostgreSQL's; this run tests STORE=${STORE}` };
const BASE = '/api/v1/chat-sessions';

describe('Liveness of the instances (STORE=postgres)', PG, () => {
  const schema = `liveness_${process.pid}`;
  const providerId = '6f00000000000000000000a2';
  let provider;
  const servers = [];
  // STREAMING_IDLE far shorter than the replies' silence: only liveness may keep them
  const start = async () => {
    const s = await startServer({ env: { DATABASE_SCHEMA: schema, DATABASE_POOL_SIZE: '4', INSTANCE_TIMEOUT: '2s', STREAMING_IDLE: '1s' }, providers: [{ _id: providerId, name: 'Local OpenAI', type: 'openai', baseUrl: `${provider.url}/v1` }] });
    servers.push(s);
    return s;
  };
  before(async () => {
    provider = await startProvider();
  });
  after(async () => {
    for (const s of servers) {
      await s.stop();
      removeDir(s.dataDir);
    }
    await provider?.close();
  });
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const turn = async (s, sid, id) => (await s.as('alice').get(`${BASE}/${sid}/turns/${id}`)).body.data;

  test('[D-hostile-6] "never while it is alive however quiet the reply": a silent reply outlives STREAMING_IDLE', async () => {
    const [a, b] = [await start(), await start()];
    const s = (await a.as('alice').post(BASE, newSession({ providerId, selectedModel: 'stall-after:2' }))).body.data;
    const r = await a.as('alice').post(`${BASE}/${s._id}/messages`, { content: 'quiet now', background: true });
    const replyId = r.body.data.reply._id;
    await waitFor(async () => (await turn(b, s._id, replyId)).content === 'quiet now', 'the words before the silence to be recorded');
    // three times INSTANCE_TIMEOUT and six STREAMING_IDLEs of silence: both instances sweep every
    // 200 ms meanwhile, and a third starts (a start sweeps too)
    await sleep(3000);
    await start();
    await sleep(3000);
    assert.equal((await turn(b, s._id, replyId)).status, 'streaming', 'still streaming: its instance lives');
    const busy = await b.as('alice').post(`${BASE}/${s._id}/messages`, { content: 'a second reply?' });
    assert.deepEqual([busy.status, busy.body.message], [409, 'A reply is already in progress'], 'two replies never run on one session');
    const cancelled = await b.as('alice').post(`${BASE}/${s._id}/turns/${replyId}/cancel`, {});
    assert.deepEqual([cancelled.status, cancelled.body.data?.status, cancelled.body.data?.content], [200, 'interrupted', 'quiet now']);
  });

  test('[D-hostile-7] "interrupted by another instance only once its own instance is gone": SIGKILL, then the sweep', async () => {
    const [a, b] = [await start(), await start()];
    const s = (await a.as('alice').post(BASE, newSession({ providerId, selectedModel: 'stall-after:3' }))).body.data;
    const r = await a.as('alice').post(`${BASE}/${s._id}/messages`, { content: 'then the instance dies', background: true });
    const replyId = r.body.data.reply._id;
    await waitFor(async () => (await turn(b, s._id, replyId)).content === 'then the instance', 'the words before the stall to be recorded');
    await a.kill();
    const killedAt = performance.now();
    await waitFor(async () => (await turn(b, s._id, replyId)).status === 'interrupted', 'the survivor to interrupt the reply');
    const t = await turn(b, s._id, replyId);
    assert.equal(t.content, 'then the instance', 'what was committed is kept');
    // measured, not asserted tightly: INSTANCE_TIMEOUT is 2 s here
    assert.ok(performance.now() - killedAt < 30_000);
    const next = await b.as('alice').post(`${BASE}/${s._id}/messages`, { content: 'a new start', model: 'say:again' });
    assert.deepEqual([next.status, next.body.data.reply.content], [201, 'again'], 'the session takes replies again');
  });

  test('[D-streaming-5] "Turns that clients stream themselves (the deltas route) keep STREAMING_IDLE"', async () => {
    const [b] = [await start()];
    const u = b.as('alice');
    const s = (await u.post(BASE, newSession({ providerId, selectedModel: 'echo' }))).body.data;
    const own = (await u.post(`${BASE}/${s._id}/turns`, { role: 'assistant', content: '', status: 'streaming' })).body.data;
    assert.equal((await u.post(`${BASE}/${s._id}/turns/${own._id}/deltas`, { text: 'typed by hand' })).status, 200);
    await waitFor(async () => (await turn(b, s._id, own._id)).status === 'interrupted', 'STREAMING_IDLE to pass');
    assert.equal((await turn(b, s._id, own._id)).content, 'typed by hand');
  });
});
