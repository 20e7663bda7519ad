// Retention (issue #14, item 3): the background purge, its metrics, an expired session's event
// stream, and the purge and erase-user commands, against the real server and CLI on the engine
// of this run of the suite. Expiries are set explicitly (in the past, or a moment ahead).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, describe, test } from 'node:test';
import { metric, waitFor } from './api-kit.mjs';
import { newSession, removeDir, SERVER, startServer, storeEnv } from './helpers.mjs';
import { openEvents } from './sse.mjs';

const BASE = '/api/v1/chat-sessions';
const PAST = '2001-01-01T00:00:00.000Z';
const servers = [];

after(async () => {
  for (const s of servers) {
    await s.stop();
    removeDir(s.dataDir);
  }
});

async function start(env = {}, dataDir) {
  const s = await startServer({ env, dataDir });
  servers.push(s);
  return s;
}

/** Runs a command of the CLI without blocking this process (a server may be running). */
function cli(args, dataDir) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [SERVER, ...args], { env: { PATH: process.env.PATH, HOME: process.env.HOME, ...storeEnv(dataDir), DATA_DIR: dataDir }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d) => (stderr += d));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

async function create(who, over) {
  const r = await who.post(BASE, newSession(over));
  assert.equal(r.status, 201, r.text);
  return r.body.data;
}

async function say(who, id, content) {
  const r = await who.post(`${BASE}/${id}/turns`, { role: 'user', content });
  assert.equal(r.status, 201, r.text);
}

describe('Retention: the background purge', () => {
  test('expired sessions are purged in the background with their turns: usage and /metrics follow, live ones stay', async () => {
    const s = await start({ PURGE_INTERVAL: '100ms' });
    const hana = s.as('hana');
    // made, given its turns, then expired by an update: no race with the clock on a slow machine
    const gone = await create(hana, { name: 'gone' });
    await say(hana, gone._id, 'one');
    await say(hana, gone._id, 'two');
    assert.equal((await hana.put(`${BASE}/${gone._id}`, { expiresAt: PAST })).status, 200);
    await create(hana, { name: 'kept' });
    assert.equal((await s.request('GET', '/metrics')).text.includes('# TYPE chat_session_api_purged_sessions_total counter'), true);
    await waitFor(async () => (await metric(s, 'chat_session_api_purged_sessions_total')) === 1, 'the purge of the expired session');
    assert.equal(await metric(s, 'chat_session_api_purged_turns_total'), 2);
    const usage = (await hana.get('/api/v1/usage')).body.data;
    assert.equal(usage.sessions, 1);
    assert.equal(usage.turns, 0);
    assert.deepEqual((await hana.get(BASE)).body.data.map((x) => x.name), ['kept']);
    // the log line may reach the test after the counter it follows
    await waitFor(() => s.logs().some((l) => l.msg === 'purged expired sessions' && l.sessions === 1 && l.turns === 2), 'the purge\'s log line');
  });

  test('PURGE_INTERVAL=off: nothing is purged (the sessions are still gone for the API), and the counters are not shown', async () => {
    const s = await start({ PURGE_INTERVAL: 'off' });
    const ivo = s.as('ivo');
    const gone = await create(ivo, { name: 'gone', expiresAt: PAST });
    assert.equal((await ivo.get(`${BASE}/${gone._id}`)).status, 404);
    assert.equal((await ivo.get('/api/v1/usage')).body.data.sessions, 1, 'its storage stays');
    assert.equal(await metric(s, 'chat_session_api_purged_sessions_total'), undefined);
  });
});

describe('Retention: an expired session\'s event stream', () => {
  test("[D-finding-10] an expired session's stream is 404; an open one ends `deleted` once the purge takes it", async () => {
    const s = await start({ PURGE_INTERVAL: '100ms' });
    const jo = s.as('jo');
    const past = await create(jo, { name: 'past', expiresAt: PAST });
    const refused = await openEvents(s.url, `${BASE}/${past._id}/events`, { token: jo.token });
    assert.equal(refused.status, 404);
    assert.equal(JSON.parse(refused.text).message, 'Chat session not found');
    const soon = await create(jo, { name: 'soon' });
    const stream = await openEvents(s.url, `${BASE}/${soon._id}/events`, { token: jo.token });
    assert.equal(stream.status, 200);
    assert.equal((await jo.put(`${BASE}/${soon._id}`, { expiresAt: PAST })).status, 200);
    await stream.finished;
    assert.deepEqual(stream.events.slice(-2).map((e) => e.event), ['session.deleted', 'end']);
    assert.deepEqual(stream.events.at(-1).data, { reason: 'deleted' });
  });
});

describe('Retention: the purge and erase-user commands', () => {
  test('[D-finding-11] purge --dry-run lists beside a running server; purge and erase-user wait for the directory', async () => {
    const s = await start({ PURGE_INTERVAL: 'off' });
    const kai = s.as('kai');
    const lea = s.as('lea');
    const old = await create(kai, { name: 'old' });
    await say(kai, old._id, 'hello');
    // expired by an update once it holds its turn: no race with the clock on a slow machine
    const soon = new Date(Date.now() - 1).toISOString();
    assert.equal((await kai.put(`${BASE}/${old._id}`, { expiresAt: soon })).status, 200);
    const mine = await create(kai, { name: 'mine' });
    await say(kai, mine._id, 'a');
    await say(kai, mine._id, 'b');
    assert.equal((await kai.post(`${BASE}/${mine._id}/turns`, { role: 'assistant', content: 'c', usage: { inputTokens: 12, outputTokens: 7, cachedTokens: 3 } })).status, 201);
    const archived = await create(kai, { name: 'archived' });
    assert.equal((await kai.put(`${BASE}/${archived._id}`, { archived: true })).status, 200);
    const other = await create(lea, { name: 'lea' });

    await waitFor(async () => (await kai.get(`${BASE}/${old._id}`)).status === 404, 'the session to expire');
    const dry = await cli(['purge', '--dry-run'], s.dataDir);
    assert.equal(dry.code, 0, dry.stderr);
    assert.equal(dry.stdout, `${old._id}\texpired ${soon}\n1 expired sessions (1 turns) would be purged\n`);

    for (const args of [['purge'], ['erase-user', '--user', 'kai']]) {
      const r = await cli(args, s.dataDir);
      assert.notEqual(r.code, 0);
      assert.match(r.stderr, new RegExp(`in use by process ${s.child.pid}\\b`));
      assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    }
    assert.equal((await kai.get('/api/v1/usage')).body.data.sessions, 3, 'nothing was deleted');
    await s.stop();

    const purged = await cli(['purge'], s.dataDir);
    assert.equal(purged.code, 0, purged.stderr);
    assert.equal(purged.stdout, `${old._id}\texpired ${soon}\npurged 1 expired sessions and 1 turns\n`);
    const again = await cli(['purge', '--dry-run'], s.dataDir);
    assert.equal(again.stdout, '0 expired sessions (0 turns) would be purged\n');

    const erased = await cli(['erase-user', '--user', 'kai'], s.dataDir);
    assert.equal(erased.code, 0, erased.stderr);
    const lines = erased.stdout.trim().split('\n');
    assert.deepEqual(lines.slice(0, -1).sort(), [mine._id, archived._id].sort());
    // what went: the sessions, turns, bytes and tokens the usage of kai held
    assert.match(lines.at(-1), /^erased 2 sessions and 3 turns of user kai \(\d+ bytes; tokens: 12 input, 7 output, 3 cached\)$/);

    const t = await start({ PURGE_INTERVAL: 'off' }, s.dataDir);
    assert.deepEqual((await t.as('kai').get('/api/v1/usage')).body.data, { sessions: 0, turns: 0, bytes: 0, inputTokens: 0, outputTokens: 0, cachedTokens: 0 });
    assert.equal((await t.as('kai').get(`${BASE}/${mine._id}`)).status, 404);
    assert.equal((await t.as('lea').get(`${BASE}/${other._id}`)).status, 200, "another user's session stays");
  });

  test('erase-user without --user is a usage error', async () => {
    const s = await start({ PURGE_INTERVAL: 'off' });
    await s.stop();
    const r = await cli(['erase-user'], s.dataDir);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /erase-user needs --user <user id>/);
  });
});
