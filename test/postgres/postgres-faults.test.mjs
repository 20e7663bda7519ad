// The PostgreSQL engine when its database fails: restarted under load, down for a while, a
// backend killed mid-request. Never a 2xx for a write that did not commit, never a 500 or a
// crash for a database that is away: 503 Storage unavailable, /healthz says so, and service
// resumes by itself. These tests run a cluster of their own (they stop it); they run on the
// postgres run of the suite and skip on the others.
import assert from 'node:assert/strict';
import { createServer, connect } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { postgresMissing, startCluster, USERS, waitFor } from '../pg/cluster.mjs';
import { newSession, removeDir, runCli, startServer, STORE } from '../helpers.mjs';
import { startProvider } from '../provider/server.mjs';

const skip = STORE !== 'postgres' ? `about the postgres engine; this run tests STORE=${STORE}` : postgresMissing();
const BASE = '/api/v1/chat-sessions';

describe('PostgreSQL engine: the database fails', skip === undefined ? {} : { skip }, () => {
  let cluster;
  before(async () => {
    cluster = await startCluster();
    // the service creates its schema at start: its database user needs CREATE on the database (README)
    await cluster.psql(`GRANT CREATE ON DATABASE postgres TO ${USERS.scram.user}`);
  });
  after(async () => {
    await cluster?.destroy();
  });

  /** A server on the cluster, in a schema of its own. */
  const serve = (env = {}, providers = undefined) => startServer({ env: { DATABASE_URL: cluster.url(USERS.scram.user), DATABASE_SCHEMA: `f_${Math.random().toString(16).slice(2, 10)}`, ...env }, providers });

  test('[D-postgres-3] [D-postgres-4] the database restarted under load: 2xx writes kept, the rest 503, logged every 10 s', async () => {
    const s = await serve();
    try {
      const u = s.as('alice');
      const acked = new Map(); // session id -> turns acknowledged
      const statuses = new Map();
      const note = (r) => statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
      let stop = false;
      const worker = async (w) => {
        let mine;
        for (let i = 0; !stop; i++) {
          if (mine === undefined || i % 4 === 0) {
            const r = await u.post(BASE, newSession({ name: `w${w}-${i}` }));
            note(r);
            if (r.status === 201) {
              mine = r.body.data._id;
              acked.set(mine, 0);
            } else assert.equal(r.body.message, 'Storage unavailable', `${r.status} ${r.text}`);
          } else {
            const r = await u.post(`${BASE}/${mine}/turns`, { role: 'user', content: `t${i}` });
            note(r);
            if (r.status === 201) acked.set(mine, acked.get(mine) + 1);
            else assert.equal(r.body.message, 'Storage unavailable', `${r.status} ${r.text}`);
          }
        }
      };
      const workers = Array.from({ length: 6 }, (_, w) => worker(w));
      await waitFor(() => acked.size >= 20, { what: 'writes before the restart' });
      let probes503 = 0; // this test's own requests answered 503 (the workers' are in statuses)
      const health503 = async () => {
        const status = (await s.request('GET', '/healthz')).status;
        if (status === 503) probes503++;
        return status;
      };
      const awayFrom = Date.now();
      await cluster.stop();
      await waitFor(async () => (await health503()) === 503, { what: '/healthz to say the database is unreachable' });
      const health = await s.request('GET', '/healthz');
      probes503++;
      assert.deepEqual(health.body, { success: false, message: 'Storage unavailable' });
      assert.equal((await u.get(BASE)).status, 503, 'a read that needs the database');
      probes503++;
      await cluster.start();
      await waitFor(async () => (await health503()) === 200, { what: 'service to resume' });
      const awayMs = Date.now() - awayFrom;
      const resumedAt = acked.size;
      await waitFor(() => acked.size >= resumedAt + 10, { what: 'writes after the restart' });
      stop = true;
      await Promise.all(workers);
      assert.deepEqual([...statuses.keys()].filter((x) => x !== 201 && x !== 503), [], `every answer was 201 or 503: ${[...statuses]}`);
      assert.ok((statuses.get(503) ?? 0) > 0, 'some writes met the database down');
      // the outage in the log: a line every 10 s at most, each counting the requests it kept quiet
      const logs = s.logs();
      assert.deepEqual(logs.filter((l) => l.msg === 'request failed' || l.msg?.startsWith('store write failed')), [], 'no line per failed request or write group');
      const away = logs.filter((l) => l.msg?.startsWith('the database cannot be used'));
      const answered503 = (statuses.get(503) ?? 0) + probes503;
      assert.ok(away.length >= 1 && away.length <= 1 + Math.ceil(awayMs / 10_000), `${away.length} lines for ${awayMs} ms away`);
      assert.equal(away[0].level, 'error');
      assert.equal(typeof away[0].cause, 'string', 'the cause, as the database client said it');
      const told = away.reduce((n, l) => n + 1 + l.unloggedRequests, 0);
      assert.ok(told <= answered503 && away.length < answered503, `${away.length} lines telling of ${told} requests, ${answered503} answered 503`);
      for (const [id, turns] of acked) {
        assert.equal((await u.get(`${BASE}/${id}`)).status, 200, `acknowledged session ${id}`);
        const stored = (await u.get(`${BASE}/${id}/turns`)).body.data.length;
        // a turn whose COMMIT was under way when the connection broke got 503 and may have landed
        assert.ok(stored >= turns, `${id}: ${stored} turns stored, ${turns} acknowledged`);
      }
      assert.equal(s.child.exitCode, null, 'the server is still running');
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('[D-replies-10] PostgreSQL stopped mid-reply: the end is tried each second and recorded whole once it is back', async () => {
    const TOKENS = 300;
    const provider = await startProvider();
    const providerId = '6f00000000000000000000e1';
    const s = await serve({}, [{ _id: providerId, name: 'Local Ollama', type: 'ollama', baseUrl: provider.url }]).catch(async (e) => {
      await provider.close();
      throw e;
    });
    let down = false;
    try {
      const u = s.as('carol');
      const made = await u.post(BASE, newSession({ providerId, selectedModel: `tokens:${TOKENS}@150+hold-after:1` }));
      assert.equal(made.status, 201, made.text);
      // the waiting answer: it comes once the reply is recorded
      const answer = u.post(`${BASE}/${made.body.data._id}/messages`, { content: 'through a restart' });
      // a step below that fails leaves it unawaited: its failure is the step's, not an unhandled one
      answer.catch(() => undefined);
      await waitFor(() => provider.held === 1, { what: 'the reply in progress, its first token told' });
      await cluster.stop();
      down = true;
      await waitFor(async () => (await s.request('GET', '/healthz')).status === 503, { what: 'the database to be away' });
      // the rest of the reply comes while the database is away (two seconds of it: its writes every
      // 250 ms fail), and its end cannot be recorded yet
      provider.release();
      await waitFor(() => s.logs().some((l) => /the end of a reply cannot be recorded while the store is unavailable/.test(l.msg)), { what: 'the end to wait for the database' });
      await cluster.start();
      down = false;
      const r = await answer;
      assert.equal(r.status, 201, r.text);
      const reply = r.body.data.reply;
      assert.equal(reply.status, 'complete');
      assert.equal(reply.content.split(' ').length, TOKENS);
      const stored = (await u.get(`${BASE}/${made.body.data._id}/turns/${reply._id}`)).body.data;
      assert.deepEqual([stored.status, stored.content], ['complete', reply.content]);
      const untold = s.logs().filter((l) => /could not be told to the live feed/.test(l.msg));
      assert.equal(untold.filter((l) => l.turn === reply._id && /its listeners miss it/.test(l.msg)).length, 1, 'one warning for the reply');
      assert.ok(untold.every((l) => l.turn === reply._id), 'about this reply only');
      // its text's writes failed every 250 ms while the database was away: said once at most (none
      // when a starved server read the whole reply before its first write was due)
      assert.ok(s.logs().filter((l) => /could not be written yet/.test(l.msg)).length <= 1, 'one warning at most for the failed writes');
    } finally {
      // a cluster that does not start again must not skip the rest of the cleanup
      if (down) await cluster.start().catch(() => undefined);
      await s.stop();
      await provider.close();
      removeDir(s.dataDir);
    }
  });

  test('[D-replies-10] [D-replies-11] an end that finds its turn cancelled meanwhile answers it as recorded', async () => {
    const provider = await startProvider();
    const providerId = '6f00000000000000000000e2';
    const providers = [{ _id: providerId, name: 'Local Ollama', type: 'ollama', baseUrl: provider.url }];
    const way = await pathToDatabase(cluster.port);
    const schema = `f_${Math.random().toString(16).slice(2, 10)}`;
    const servers = [];
    try {
      const a = await serve({ DATABASE_URL: cluster.url(USERS.scram.user).replace(`:${cluster.port}/`, `:${way.port}/`), DATABASE_SCHEMA: schema }, providers);
      servers.push(a);
      const b = await serve({ DATABASE_SCHEMA: schema }, providers);
      servers.push(b);
      const made = await a.as('carol').post(BASE, newSession({ providerId, selectedModel: 'tokens:20+hold-after:1' }));
      assert.equal(made.status, 201, made.text);
      const sid = made.body.data._id;
      const answer = a.as('carol').post(`${BASE}/${sid}/messages`, { content: 'through a cut' });
      answer.catch(() => undefined); // awaited below; a failure before then must not leave it unhandled
      await waitFor(() => provider.held === 1, { what: 'the reply in progress' });
      way.cut();
      await waitFor(async () => (await a.request('GET', '/healthz')).status === 503, { what: 'the first instance to lose its database' });
      provider.release();
      await waitFor(() => a.logs().some((l) => /the end of a reply cannot be recorded while the store is unavailable/.test(l.msg)), { what: 'the end to wait for the database' });
      const turns = (await b.as('carol').get(`${BASE}/${sid}/turns`)).body.data;
      const replyId = turns[turns.length - 1]._id;
      // the second instance cannot tell the first (its listening connection is cut too): it waits 3 s and ends the turn itself
      const cancelled = await b.as('carol').post(`${BASE}/${sid}/turns/${replyId}/cancel`, {});
      assert.deepEqual([cancelled.status, cancelled.body.data?.status], [200, 'interrupted'], cancelled.text);
      way.restore();
      const r = await answer;
      assert.equal(r.status, 201, r.text);
      assert.deepEqual(r.body.data.reply, cancelled.body.data, 'the turn as recorded');
      const metrics = (await a.request('GET', '/metrics')).text;
      const counted = metrics.split('\n').filter((l) => l.startsWith('chat_session_api_replies_total{'));
      assert.deepEqual(counted, ['complete', 'error', 'interrupted'].map((status) => `chat_session_api_replies_total{status="${status}"} ${status === 'interrupted' ? 1 : 0}`));
    } finally {
      way.close();
      for (const s of servers) {
        await s.stop();
        removeDir(s.dataDir);
      }
      await provider.close();
    }
  });

  test('[D-replies-12] a text write committed but unanswered is settled by reading the turn back: every token once', async () => {
    const TOLD = 20;
    const provider = await startProvider();
    const providerId = '6f00000000000000000000e3';
    const way = await pathToDatabase(cluster.port);
    let s;
    try {
      s = await serve({ DATABASE_URL: cluster.url(USERS.scram.user).replace(`:${cluster.port}/`, `:${way.port}/`) }, [{ _id: providerId, name: 'Local Ollama', type: 'ollama', baseUrl: provider.url }]);
      const u = s.as('dora');
      // a second of text, then nothing until the cancel: until then only writes of its text commit
      // (the feed's appends are single statements, never a COMMIT), so the answer dropped is one of theirs
      const made = await u.post(BASE, newSession({ providerId, selectedModel: `tokens:40@20+hold-after:1+stall-after:${TOLD}:forever` }));
      assert.equal(made.status, 201, made.text);
      const sid = made.body.data._id;
      const answer = u.post(`${BASE}/${sid}/messages`, { content: 'once each' });
      answer.catch(() => undefined); // awaited below; a failure before then must not leave it unhandled
      await waitFor(() => provider.held === 1, { what: 'the reply in progress' });
      const dropped = way.dropNextCommitAnswer();
      provider.release();
      await dropped;
      const turns = (await u.get(`${BASE}/${sid}/turns`)).body.data;
      const replyId = turns[turns.length - 1]._id;
      // every token told is recorded before the cancel (written twice, the words would pass TOLD or lose their order)
      await waitFor(async () => (await u.get(`${BASE}/${sid}/turns/${replyId}`)).body.data.content.split(' ').length >= TOLD, { what: 'the told text recorded' });
      const cancelled = await u.post(`${BASE}/${sid}/turns/${replyId}/cancel`, {});
      assert.deepEqual([cancelled.status, cancelled.body.data?.status], [200, 'interrupted'], cancelled.text);
      const r = await answer;
      assert.equal(r.status, 201, r.text);
      assert.ok(s.logs().some((l) => /could not be written yet/.test(l.msg) && l.turn === replyId), 'a write of its text failed (the dropped answer was its)');
      const words = 'the quick brown fox jumps over a lazy dog while seven bright stars hum softly above quiet hills'.split(' ');
      const expected = Array.from({ length: TOLD }, (_, i) => words[i % words.length]).join(' ');
      const stored = (await u.get(`${BASE}/${sid}/turns/${replyId}`)).body.data;
      assert.equal(stored.content, expected, 'every token once, in order');
      assert.equal(r.body.data.reply.content, expected);
    } finally {
      way.close();
      await s?.stop();
      if (s !== undefined) removeDir(s.dataDir);
      await provider.close();
    }
  });

  test('[D-door-19] the lock connection falling silent: a new conversation key is answered still, without the lock', async () => {
    // (with no statement timeout its try waited for ever, and every new key's first request behind it)
    const provider = await startProvider();
    const way = await pathToDatabase(cluster.port);
    let s;
    try {
      s = await serve({ DATABASE_URL: cluster.url(USERS.scram.user).replace(`:${cluster.port}/`, `:${way.port}/`) }, [{ _id: '6f00000000000000000000e4', name: 'Local Ollama', type: 'ollama', baseUrl: provider.url }]);
      const ask = (key) => s.as('erin').post('/v1/chat/completions', { model: 'local-ollama/echo', messages: [{ role: 'user', content: `hello ${key}` }] }, { headers: { 'x-conversation-key': key } });
      assert.equal((await ask('first')).status, 200, 'the lock connection made');
      way.silenceLocks();
      const hung = new Promise((resolve) => setTimeout(() => resolve({ status: 'no answer in 60 s' }), 60_000).unref());
      const r = await Promise.race([ask('second'), hung]);
      assert.equal(r.status, 200, r.text);
      assert.ok(s.logs().some((l) => /a name could not be held among the instances/.test(l.msg)), 'the lock given up, logged');
    } finally {
      await s?.stop();
      way.close();
      await provider.close();
    }
  });

  test('a backend killed mid-request: that request gets 503, the connection is replaced, the next request is served', async () => {
    const s = await serve({ DATABASE_POOL_SIZE: '2' });
    try {
      const u = s.as('bob');
      const made = (await u.post(BASE, newSession({ name: 'before' }))).body.data;
      await cluster.psql(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '${USERS.scram.user}'`);
      const after = await u.get(`${BASE}/${made._id}`);
      assert.ok(after.status === 200 || after.status === 503, after.text);
      await waitFor(async () => (await u.get(`${BASE}/${made._id}`)).status === 200, { what: 'a new connection' });
      assert.equal((await u.post(BASE, newSession({ name: 'after' }))).status, 201);
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('the password in DATABASE_URL appears in no log line, error message or --help output', async () => {
    const secret = USERS.scram.password;
    // a wrong one: the start fails with one line that names the database but not the password
    const wrong = runCli([], { env: { PORT: '0', DATA_DIR: `/tmp/csa-pw-${process.pid}`, STORE: 'postgres', DATABASE_URL: cluster.url(USERS.scram.user, { password: 'Wr0ng-pw-and-secret' }) } });
    assert.equal(wrong.code, 1);
    assert.equal(wrong.stderr.trim().split('\n').length, 1, wrong.stderr);
    assert.match(wrong.stderr, /PostgreSQL scram_user@127\.0\.0\.1:\d+\/postgres/);
    assert.doesNotMatch(wrong.stderr + wrong.stdout, /Wr0ng-pw-and-secret/);
    removeDir(`/tmp/csa-pw-${process.pid}`);
    const help = runCli(['--help'], { env: { DATABASE_URL: cluster.url(USERS.scram.user) } });
    assert.doesNotMatch(help.stdout + help.stderr, new RegExp(secret));
    // a right one, and the database going away and coming back meanwhile
    const s = await serve({ LOG_LEVEL: 'debug' });
    try {
      await s.as('carol').post(BASE, newSession());
      await cluster.stop();
      await waitFor(async () => (await s.request('GET', '/healthz')).status === 503, { what: 'the outage seen' });
      await s.as('carol').get(BASE);
      await cluster.start();
      await waitFor(async () => (await s.request('GET', '/healthz')).status === 200, { what: 'service to resume' });
      const metrics = (await s.request('GET', '/metrics')).text;
      assert.doesNotMatch(s.stdout + s.stderr + metrics, new RegExp(secret));
      assert.ok(s.logs().some((l) => l.level === 'error'), 'the outage was logged (without the password)');
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });
});

/** A CommandComplete message of the PostgreSQL protocol for COMMIT: 'C', its length (4 + 7), the tag. */
const COMMIT_DONE = Buffer.concat([Buffer.from([0x43, 0, 0, 0, 11]), Buffer.from('COMMIT\0', 'latin1')]);

/**
 * A TCP path to the database on `port` that a test can cut (its connections reset, new ones
 * closed as they come, as when the database is away) and restore, for one instance while the
 * others keep theirs.
 */
async function pathToDatabase(port) {
  const open = new Set();
  let cut = false;
  /** Set: a connection that asked for an advisory lock (the door's name locks) gets no answer any more, and is not closed. */
  let silent = false;
  /** Set while the next COMMIT's answer is to be dropped: called once it was. */
  let dropCommit;
  const server = createServer((client) => {
    if (cut) return void client.destroy();
    const db = connect(port, '127.0.0.1');
    for (const s of [client, db]) {
      open.add(s);
      s.on('close', () => open.delete(s));
      s.on('error', () => undefined);
    }
    let locks = false;
    client.on('data', (d) => {
      if (d.includes('pg_try_advisory_lock')) locks = true;
      if (silent && locks) return;
      if (!db.write(d)) {
        client.pause();
        db.once('drain', () => client.resume());
      }
    });
    db.on('data', (d) => {
      if (silent && locks) return;
      // the answer to a COMMIT (CommandComplete "COMMIT") never reaches the client: the connection
      // is lost after the database committed, and the client cannot tell whether it did
      if (dropCommit !== undefined && d.includes(COMMIT_DONE)) {
        const dropped = dropCommit;
        dropCommit = undefined;
        client.destroy();
        db.destroy();
        dropped();
        return;
      }
      if (!client.write(d)) {
        db.pause();
        client.once('drain', () => db.resume());
      }
    });
    client.on('close', () => db.destroy());
    db.on('close', () => client.destroy());
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const reset = () => {
    for (const s of open) s.destroy();
  };
  return {
    port: server.address().port,
    cut() {
      cut = true;
      reset();
    },
    restore() {
      cut = false;
    },
    /** The connections that took advisory locks fall silent: what they send goes unanswered, they stay open. */
    silenceLocks() {
      silent = true;
    },
    /** The next COMMIT's answer is dropped with its connection; resolves once it was. */
    dropNextCommitAnswer() {
      return new Promise((resolve) => (dropCommit = resolve));
    },
    close() {
      server.close();
      reset();
    },
  };
}
