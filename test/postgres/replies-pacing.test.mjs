// A reply whose text the shared event log cannot take as fast as the provider sends it (issue
// 30, point 5: memory stays bounded). On PostgreSQL every piece of a reply is logged by an
// append to the schema's event log before listeners get it; when those appends lag (PostgreSQL
// starved of CPU, a lock), the pieces would wait in memory without end. A reply holds at most
// 64 unlogged and then stops reading its provider. Made of states, never timings: the test holds
// the event log's head row locked, so no append can commit until it lets go.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { test } from 'node:test';
import { metric, waitFor } from '../api-kit.mjs';
import { newSession, removeDir, startServer, STORE } from '../helpers.mjs';
import { startProvider } from '../provider/server.mjs';
import { openEvents } from '../sse.mjs';

const PG = STORE === 'postgres' ? {} : { skip: `the shared event log is PostgreSQL's; this run tests STORE=${STORE}` };
const B = '/api/v1/chat-sessions';
const PROVIDER_ID = '6f00000000000000000000d1';
/** Tokens of 2 KiB lines each (`pad`): some 40 MB, more than loopback's socket buffers and the server's read-ahead hold. */
const TOKENS = 20_000;
const TOLD_AHEAD_MAX = 64;

/**
 * Runs `fn` with a reply paced by the shared log: the event log's head row held locked (no
 * append commits), the reply waiting with 64 pieces unlogged and its provider blocked on a full
 * socket. `fn` gets the server, the session, the reply's stream, the provider's request and
 * `unlock()`; whatever happens, the lock, server, provider and schema are let go after.
 */
async function whilePaced(name, fn) {
  const schema = `${name}_${process.pid}`;
  const provider = await startProvider();
  const s = await startServer({
    env: { DATABASE_SCHEMA: schema, BODY_LIMIT: '4mb' },
    providers: [{ _id: PROVIDER_ID, name: 'Local Ollama', type: 'ollama', baseUrl: provider.url }],
  }).catch(async (e) => {
    await provider.close();
    throw e;
  });
  const { Pool } = createRequire(import.meta.url)('../../dist/testkit.cjs');
  const pool = new Pool(process.env.CSA_TEST_DATABASE_URL, { max: 1 });
  let unlock = () => undefined;
  let holding = Promise.resolve();
  try {
    const u = s.as('pacer');
    const model = `tokens:${TOKENS}+pad:2048+hold-after:1`;
    const made = await u.post(B, newSession({ providerId: PROVIDER_ID, selectedModel: model }));
    assert.equal(made.status, 201, made.text);
    const sid = made.body.data._id;
    const stream = await openEvents(s.url, `${B}/${sid}/messages`, { token: u.token, method: 'POST', json: { content: 'go on' } });
    assert.equal(stream.status, 200, stream.text);
    // the first piece is logged and told; the provider holds the rest
    await stream.waitFor((e) => e.event === 'turn.delta');
    const call = await provider.waitForRequest((r) => r.model === model);
    assert.equal(await metric(s, 'chat_session_api_events_unlogged'), 0);

    // every append takes the event log's head row first: held here, none commits
    let locked;
    const isLocked = new Promise((resolve) => (locked = resolve));
    const released = new Promise((resolve) => (unlock = resolve));
    holding = pool.withConnection(async (c) => {
      await c.exec('BEGIN');
      await c.query(`SELECT last FROM "${schema}".event_head FOR UPDATE`);
      locked();
      await released;
      await c.exec('ROLLBACK');
    });
    // a holder that fails before it holds the lock fails the test here, rather than leave it waiting with its server and schema
    await Promise.race([isLocked, holding]);
    provider.release();

    // the reply told 64 pieces, none can be logged: it stopped reading, so the provider's writes
    // fill the socket and wait (without the bound it would read all 20,000 and hold them)
    await waitFor(async () => call.blocked && (await metric(s, 'chat_session_api_events_unlogged')) === TOLD_AHEAD_MAX, 'the reply to wait with 64 pieces unlogged and its provider blocked', 60_000);
    await fn({
      s,
      u,
      sid,
      stream,
      call,
      unlock: async () => {
        unlock();
        await holding;
      },
    });
  } finally {
    unlock();
    await holding.catch(() => undefined);
    await s.stop();
    await provider.close();
    await pool.exec(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => undefined);
    await pool.end();
    removeDir(s.dataDir);
  }
}

/** The reply's stream to its end, which comes after the reply's last turn.updated (a generous bound: a reply that never ends fails the test rather than hang the suite). */
const ended = (stream) => stream.until(() => stream.ended, 120_000, 'the reply to end once appends commit again');

test('[D-replies-5] while the log cannot commit, a reply holds 64 unlogged pieces and its provider waits; then whole', PG, async () => {
  await whilePaced('pacing', async ({ s, u, sid, stream, call, unlock }) => {
    assert.equal(await metric(s, 'chat_session_api_events_unlogged'), TOLD_AHEAD_MAX);
    assert.equal(call.ended, false);
    assert.ok(call.written < TOKENS, `the provider wrote ${call.written} of ${TOKENS} tokens`);
    assert.equal(await metric(s, 'chat_session_api_replies_in_progress'), 1);

    await unlock();
    await ended(stream);
    const deltas = stream.of('turn.delta');
    assert.equal(deltas.length, TOKENS, 'every piece is a turn.delta of its own (none merged, none lost)');
    const updated = stream.of('turn.updated').at(-1);
    assert.equal(updated.data.status, 'complete');
    assert.equal(deltas.map((e) => e.data.text).join(''), updated.data.content);
    const reply = (await u.get(`${B}/${sid}/turns/${updated.data._id}`)).body.data;
    assert.equal(reply.status, 'complete');
    assert.equal(reply.content.split(' ').length, TOKENS);
    assert.equal(await metric(s, 'chat_session_api_events_unlogged'), 0);
  });
});

test('[D-replies-5] a cancel while pieces wait closes the provider at once, answered once the log has the pieces', PG, async () => {
  await whilePaced('pacing_cancel', async ({ s, u, sid, stream, call, unlock }) => {
    const replyId = stream.of('turn.delta')[0].data._id;
    let answered = false;
    const cancel = u.post(`${B}/${sid}/turns/${replyId}/cancel`, {}).then((r) => {
      answered = true;
      return r;
    });
    // the lock is still held: the close did not wait for the log
    await waitFor(() => call.clientClosed, 'the provider to see its connection closed', 60_000);
    assert.equal(call.ended, false);
    // the end's commit takes the log's head row too: no answer can come before the lock goes
    assert.equal(answered, false);
    assert.equal(await metric(s, 'chat_session_api_events_unlogged'), TOLD_AHEAD_MAX);

    await unlock();
    const r = await cancel;
    assert.equal(r.status, 200, r.text);
    assert.equal(r.body.data.status, 'interrupted');
    await ended(stream);
    const deltas = stream.of('turn.delta');
    assert.equal(deltas.length, TOLD_AHEAD_MAX + 1, 'the first piece, and the 64 that waited');
    assert.equal(r.body.data.content, deltas.map((e) => e.data.text).join(''), 'every piece told is recorded');
    const last = stream.events.at(-1);
    assert.deepEqual([last.event, last.data.status], ['turn.updated', 'interrupted']);
    assert.equal(await metric(s, 'chat_session_api_events_unlogged'), 0);
    assert.equal(await metric(s, 'chat_session_api_replies_in_progress'), 0);
  });
});
