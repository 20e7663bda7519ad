// The connection pool against a real server: pipelined one-off queries, transactions with
// logic between statements, the bounded wait queue, statement_timeout, and failures made for
// real: a backend terminated mid-query, a backend SIGKILLed mid-result (the server resets
// every session), the server restarted under load. Errors must be named, nothing may hang,
// nothing may go unhandled, and service must come back by itself.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { after, before, describe, test } from 'node:test';
import { USERS, postgresMissing, startCluster, waitFor } from './cluster.mjs';

const { Pool, PgError } = createRequire(import.meta.url)('../../dist/testkit.cjs');

const missing = postgresMissing();

async function rejection(promise) {
  try {
    await promise;
  } catch (err) {
    return err;
  }
  assert.fail('expected a rejection');
}

/** `promise`, or a rejection if it has not settled in 30 s: a query must never hang. */
function guard(promise, what) {
  let timer;
  const hung = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`HUNG for 30 s: ${what}`)), 30_000);
  });
  return Promise.race([promise, hung]).finally(() => clearTimeout(timer));
}

/** Records unhandled rejections and uncaught exceptions while `fn` runs. */
async function noneUnhandled(fn) {
  const seen = [];
  const record = (err) => seen.push(err);
  process.on('unhandledRejection', record);
  process.on('uncaughtException', record);
  try {
    await fn();
    await new Promise((r) => setTimeout(r, 50)); // let late rejections surface
  } finally {
    process.removeListener('unhandledRejection', record);
    process.removeListener('uncaughtException', record);
  }
  assert.deepEqual(seen, [], 'unhandled rejections or uncaught exceptions');
}

const pause = (ms) => new Promise((r) => setTimeout(r, ms));

describe('PostgreSQL client: pool', { skip: missing }, () => {
  let cluster;
  const pools = [];
  const pool = (options = {}, urlParams = {}) => {
    const p = new Pool(cluster.url(USERS.scram.user, urlParams), options);
    pools.push(p);
    return p;
  };

  before(async () => {
    cluster = await startCluster();
    await cluster.psql(`
      CREATE TABLE account (id int PRIMARY KEY, balance int NOT NULL);
      CREATE TABLE ledger (id serial PRIMARY KEY, account int NOT NULL, amount int NOT NULL);
      CREATE TABLE oncall (doctor text PRIMARY KEY, on_call boolean NOT NULL);
      CREATE TABLE load (id serial PRIMARY KEY, worker int NOT NULL);
      GRANT ALL ON ALL TABLES IN SCHEMA public TO scram_user;
      GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO scram_user;
    `);
  });
  after(async () => {
    await Promise.all(pools.map((p) => p.end()));
    await cluster?.destroy();
  });

  test('pool.query: 500 concurrent one-off queries share at most `max` connections, pipelined, all answered right', async () => {
    const p = pool({ max: 3 });
    const results = await Promise.all(Array.from({ length: 500 }, (_, i) => p.query('SELECT $1::int + 1 AS n, pg_backend_pid() AS pid', [String(i)])));
    results.forEach((r, i) => assert.equal(r.rows[0][0], String(i + 1)));
    const pids = new Set(results.map((r) => r.rows[0][1]));
    assert.ok(pids.size >= 1 && pids.size <= 3, `${pids.size} backends`);
    assert.equal(p.stats().connections, pids.size);
    assert.equal(p.stats().inFlight, 0);
  });

  test('[D-postgres-9] queries made together join the connection being gathered, up to pipelineDepth', async () => {
    const p = pool({ max: 4, pipelineDepth: 8 });
    // four connections open and idle
    await Promise.all(Array.from({ length: 4 }, () => p.query('SELECT pg_sleep(0.05)')));
    assert.equal(p.stats().connections, 4);
    const together = await Promise.all(Array.from({ length: 8 }, (_, i) => p.query('SELECT $1::int AS n, pg_backend_pid() AS pid', [String(i)])));
    assert.deepEqual(together.map((r) => r.rows[0][0]), Array.from({ length: 8 }, (_, i) => String(i)));
    assert.equal(new Set(together.map((r) => r.rows[0][1])).size, 1, 'eight queries made together went to one backend');
    // past the depth, the next one goes to another connection
    const more = await Promise.all(Array.from({ length: 9 }, () => p.query('SELECT pg_backend_pid()')));
    assert.equal(new Set(more.map((r) => r.rows[0][0])).size, 2, 'nine made together: eight on one backend, the ninth on another');
  });

  test('reserveNow: a connection of its own at once, undefined when the caller would wait; done gives it back once', async () => {
    const p = pool({ max: 2 });
    const a = p.reserveNow();
    const b = p.reserveNow();
    assert.ok(a !== undefined && b !== undefined);
    assert.equal(p.reserveNow(), undefined, 'both connections are held');
    const [x, y] = await Promise.all([a.session.query('SELECT pg_backend_pid()'), b.session.query('SELECT pg_backend_pid()')]);
    assert.notEqual(x.rows[0][0], y.rows[0][0], 'a connection each');
    a.done();
    a.done();
    assert.deepEqual({ ...p.stats(), inFlight: undefined }, { connections: 2, reserved: 1, inFlight: undefined, waiting: 0 });
    // a connection with one-off queries in flight is not handed out at once
    const busy = p.query('SELECT pg_sleep(0.1)');
    assert.equal(p.reserveNow(), undefined);
    await busy;
    const c = p.reserveNow();
    assert.ok(c !== undefined);
    await assert.rejects(a.session.query('SELECT 1'), /session has ended/);
    c.done();
    b.done();
  });

  test("[D-postgres-6] servedBy tells the backends of the pool's own connections from any other", async () => {
    const p = pool({ max: 2 });
    const other = pool({ max: 1 });
    const [a, b] = await Promise.all([p.query('SELECT pg_backend_pid(), pg_sleep(0.05)'), p.query('SELECT pg_backend_pid(), pg_sleep(0.05)')]);
    const theirs = Number((await other.query('SELECT pg_backend_pid()')).rows[0][0]);
    assert.ok(p.servedBy(Number(a.rows[0][0])) && p.servedBy(Number(b.rows[0][0])));
    assert.equal(p.servedBy(theirs), false);
    assert.equal(other.servedBy(theirs), true);
  });

  test('pipelineDepth bounds the queries in flight per connection; the rest wait in the queue', async () => {
    const p = pool({ max: 1, pipelineDepth: 4 });
    const calls = Array.from({ length: 10 }, (_, i) => p.query('SELECT $1::int AS n', [String(i)]));
    assert.deepEqual({ ...p.stats(), reserved: undefined }, { connections: 1, reserved: undefined, inFlight: 4, waiting: 6 });
    const results = await Promise.all(calls);
    assert.deepEqual(results.map((r) => r.rows[0][0]), Array.from({ length: 10 }, (_, i) => String(i)));
  });

  test('the wait queue is bounded: one caller past maxWaiting fails at once with pool_queue_full', async () => {
    const p = pool({ max: 1, maxWaiting: 2, pipelineDepth: 1 });
    let release;
    const held = p.withConnection(() => new Promise((r) => (release = r)));
    await waitFor(() => p.stats().reserved === 1, { what: 'the session to hold the connection' });
    const queued = [p.query('SELECT 1'), p.query('SELECT 2')];
    assert.equal(p.stats().waiting, 2);
    const full = await rejection(p.query('SELECT 3'));
    assert.ok(full instanceof PgError);
    assert.equal(full.kind, 'pool_queue_full');
    assert.equal(full.unavailable, true);
    assert.equal(p.stats().waiting, 2, 'the refused caller did not join the queue');
    release();
    await held;
    assert.deepEqual((await Promise.all(queued)).map((r) => r.rows[0][0]), ['1', '2']);
  });

  test('a caller waiting longer than acquireTimeoutMs fails with acquire_timeout and leaves the queue', async () => {
    const p = pool({ max: 1, acquireTimeoutMs: 100 });
    let release;
    const held = p.withConnection(() => new Promise((r) => (release = r)));
    await waitFor(() => p.stats().reserved === 1, { what: 'the session to hold the connection' });
    const err = await rejection(p.query('SELECT 1'));
    assert.equal(err.kind, 'acquire_timeout');
    assert.equal(p.stats().waiting, 0);
    release();
    await held;
    assert.deepEqual((await p.query('SELECT 1')).rows, [['1']]);
  });

  test('transaction with logic between statements: SELECT ... FOR UPDATE, decide, then write (20 concurrent withdrawals)', async () => {
    const p = pool({ max: 4 });
    await p.query('INSERT INTO account VALUES (1, 100)');
    const withdraw = () =>
      p.transaction(async (tx) => {
        const r = await tx.query('SELECT balance FROM account WHERE id = $1 FOR UPDATE', ['1']);
        const balance = Number(r.rows[0][0]);
        if (balance < 10) return false;
        // group-commit shape: statements pipelined inside the transaction
        await Promise.all([
          tx.query('UPDATE account SET balance = $2 WHERE id = $1', ['1', String(balance - 10)]),
          tx.query('INSERT INTO ledger (account, amount) VALUES ($1, $2)', ['1', '-10']),
        ]);
        return true;
      });
    const outcomes = await Promise.all(Array.from({ length: 20 }, withdraw));
    assert.equal(outcomes.filter(Boolean).length, 10);
    assert.deepEqual((await p.query('SELECT balance FROM account WHERE id = 1')).rows, [['0']]);
    assert.deepEqual((await p.query('SELECT count(*), sum(amount) FROM ledger WHERE account = 1')).rows, [['10', '-100']]);
  });

  test('transaction: a throw rolls back and rethrows; a failed statement left unawaited fails the COMMIT', async () => {
    const p = pool({ max: 2 });
    const boom = new Error('changed my mind');
    const thrown = await rejection(
      p.transaction(async (tx) => {
        await tx.query('INSERT INTO ledger (account, amount) VALUES (2, 1)');
        throw boom;
      }),
    );
    assert.equal(thrown, boom);
    assert.deepEqual((await p.query('SELECT count(*) FROM ledger WHERE account = 2')).rows, [['0']]);

    let unawaited;
    const rolledBack = await rejection(
      p.transaction(async (tx) => {
        unawaited = tx.query('INSERT INTO ledger (account, amount) VALUES (2, NULL)'); // not null violation
        unawaited.catch(() => undefined);
        await tx.query('INSERT INTO ledger (account, amount) VALUES (2, 1)').catch(() => undefined);
      }),
    );
    assert.equal(rolledBack.code, '25P02');
    assert.equal((await rejection(unawaited)).code, '23502');
    assert.deepEqual((await p.query('SELECT count(*) FROM ledger WHERE account = 2')).rows, [['0']]);
  });

  test('serialization failure is recognisable through pool.transaction (SERIALIZABLE write skew)', async () => {
    const p = pool({ max: 2 });
    await p.query("INSERT INTO oncall VALUES ('alice', true), ('bob', true)");
    let arrived = 0;
    let bothRead;
    const barrier = new Promise((r) => (bothRead = r));
    const goOffCall = (doctor) =>
      p.transaction(
        async (tx) => {
          const r = await tx.query('SELECT count(*) FROM oncall WHERE on_call');
          if (++arrived === 2) bothRead();
          await barrier;
          if (Number(r.rows[0][0]) >= 2) await tx.query('UPDATE oncall SET on_call = false WHERE doctor = $1', [doctor]);
        },
        { isolation: 'serializable' },
      );
    const results = await Promise.allSettled([goOffCall('alice'), goOffCall('bob')]);
    const failures = results.filter((r) => r.status === 'rejected').map((r) => r.reason);
    assert.equal(failures.length, 1, 'exactly one of the two may commit');
    assert.equal(failures[0].kind, 'serialization_failure');
    assert.deepEqual((await p.query('SELECT count(*) FROM oncall WHERE on_call')).rows, [['1']]);
  });

  test('a session that leaves a transaction open is not reused; a session handle stops working after release', async () => {
    const p = pool({ max: 1 });
    let handle;
    let pid;
    await p.withConnection(async (s) => {
      handle = s;
      pid = (await s.query('SELECT pg_backend_pid()')).rows[0][0];
      await s.query('BEGIN');
    });
    assert.equal(p.stats().connections, 0, 'the connection was closed, not returned');
    assert.equal((await rejection(handle.query('SELECT 1'))).kind, 'usage');
    assert.notEqual((await p.query('SELECT pg_backend_pid()')).rows[0][0], pid, 'a fresh connection');
    await waitFor(async () => (await cluster.psql(`SELECT count(*) FROM pg_stat_activity WHERE pid = ${pid}`)) === '0', { what: 'the old session to end' });
  });

  test('statementTimeoutMs: a query past it fails with query_canceled; the same connection serves the next query', async () => {
    const p = pool({ max: 1, statementTimeoutMs: 150 });
    const pid = (await p.query('SELECT pg_backend_pid()')).rows[0][0];
    const err = await rejection(p.query('SELECT pg_sleep(30)'));
    assert.equal(err.kind, 'query_canceled');
    assert.deepEqual((await p.query('SELECT pg_backend_pid()')).rows, [[pid]]);
  });

  test('database unreachable: ping() and queries fail with connect_failed (unavailable), never hang', async () => {
    const p = new Pool('postgres://nobody@127.0.0.1:1/none', { max: 2 });
    pools.push(p);
    await noneUnhandled(async () => {
      const err = await rejection(guard(p.ping(), 'ping'));
      assert.equal(err.kind, 'connect_failed');
      assert.equal(err.unavailable, true);
      const errs = await Promise.all(Array.from({ length: 20 }, () => rejection(guard(p.query('SELECT 1'), 'query'))));
      assert.ok(errs.every((e) => e.kind === 'connect_failed'));
      assert.equal(p.stats().connections, 0);
    });
  });

  test('end(): waiting callers and later calls fail with pool_closed', async () => {
    const p = new Pool(cluster.url(USERS.scram.user), { max: 1, pipelineDepth: 1 });
    let release;
    const held = p.withConnection(() => new Promise((r) => (release = r)));
    await waitFor(() => p.stats().reserved === 1, { what: 'the session' });
    const waiting = p.query('SELECT 1');
    const ended = p.end();
    assert.equal((await rejection(waiting)).kind, 'pool_closed');
    assert.equal((await rejection(p.query('SELECT 1'))).kind, 'pool_closed');
    release();
    await held;
    await ended;
  });

  test('a backend terminated mid-query: it fails admin_shutdown, those behind connection_lost; the connection replaced', async () => {
    const p = pool({ max: 1 });
    await noneUnhandled(async () => {
      // handled from the start: they fail while the test still waits for psql
      const slow = rejection(guard(p.query('SELECT pg_sleep(60) AS marker_terminate'), 'terminated query'));
      const behind = [rejection(guard(p.query('SELECT 1'), 'query behind')), rejection(guard(p.query('SELECT 2'), 'query behind'))]; // pipelined on the same connection
      const pid = await waitFor(() => cluster.psql("SELECT pid FROM pg_stat_activity WHERE query LIKE '%marker_terminate' AND state = 'active' AND pid <> pg_backend_pid()"), { what: 'the query to run' });
      await cluster.psql(`SELECT pg_terminate_backend(${pid})`);
      const err = await slow;
      assert.equal(err.kind, 'admin_shutdown');
      assert.equal(err.code, '57P01');
      assert.equal(err.unavailable, true);
      for (const q of behind) {
        const e = await q;
        assert.equal(e.kind, 'connection_lost');
        assert.match(e.message, /administrator command/);
      }
      assert.equal(p.stats().connections, 0, 'the broken connection left the pool at once');
      const next = await guard(p.query('SELECT pg_backend_pid()'), 'next query');
      assert.notEqual(next.rows[0][0], pid);
    });
  });

  test('a backend SIGKILLed mid-result (the server resets every session): errors are named, service resumes by itself', { timeout: 120_000 }, async () => {
    const p = pool({ max: 3, acquireTimeoutMs: 5_000 });
    const other = pool({ max: 1 });
    await other.query('SELECT 1'); // an idle session, which the reset ends too
    await noneUnhandled(async () => {
      // rows of 64 KiB arriving over seconds: the kill lands while data flows, typically mid-message
      const big = rejection(guard(p.query("SELECT repeat('x', 65536) || pg_sleep(0.002)::text AS marker_kill FROM generate_series(1, 3000)"), 'killed query'));
      const pid = await waitFor(() => cluster.psql("SELECT pid FROM pg_stat_activity WHERE query LIKE '%marker_kill%' AND state = 'active' AND pid <> pg_backend_pid()"), { what: 'the query to run' });
      process.kill(Number(pid), 'SIGKILL');
      const err = await big;
      assert.ok(err instanceof PgError);
      assert.equal(err.unavailable, true, `${err.kind}: ${err.message}`);
      const errors = [];
      await waitFor(
        async () => {
          try {
            await guard(Promise.all([p.query('SELECT 1'), other.query('SELECT 1')]), 'query after the reset');
            return true;
          } catch (e) {
            errors.push(e);
            return false;
          }
        },
        { timeoutMs: 60_000, intervalMs: 100, what: 'service to resume' },
      );
      for (const e of errors) assert.ok(e instanceof PgError && e.unavailable, `${e.kind}: ${e.message}`);
    });
  });

  test('the server restarted under load (over TLS): errors are named, none hangs, nothing unhandled, service resumes by itself', { timeout: 180_000 }, async () => {
    // over TLS, so that a TLS socket breaking mid-stream is covered too
    const p = pool({ max: 4, acquireTimeoutMs: 5_000, statementTimeoutMs: 5_000 }, { sslmode: 'require' });
    await noneUnhandled(async () => {
      const counts = { before: 0, after: 0 };
      let phase = 'before';
      let stop = false;
      const errors = [];
      const once = (w) => {
        if (w % 3 === 0) {
          return p.transaction(async (tx) => {
            const r = await tx.query('SELECT count(*) FROM load WHERE worker = $1', [String(w)]);
            await tx.query('INSERT INTO load (worker) VALUES ($1)', [String(w)]);
            return r;
          });
        }
        if (w % 3 === 1) return p.query('INSERT INTO load (worker) VALUES ($1)', [String(w)]);
        return p.query('SELECT count(*) FROM load');
      };
      const worker = async (w) => {
        while (!stop) {
          try {
            await guard(once(w), `worker ${w}`);
            counts[phase]++;
          } catch (err) {
            errors.push(err);
            if (!(err instanceof PgError)) return; // a hang or a bug: reported below
            await pause(10);
          }
        }
      };
      const workers = Array.from({ length: 8 }, (_, w) => worker(w));
      await waitFor(() => counts.before >= 100, { what: 'load before the restart' });
      await cluster.restart();
      phase = 'after';
      await waitFor(() => counts.after >= 100, { timeoutMs: 60_000, what: 'service to resume after the restart' });
      stop = true;
      await Promise.all(workers);
      for (const e of errors) assert.ok(e instanceof PgError && e.unavailable, `not a named "unavailable" error: ${e.kind ?? ''} ${e.message}`);
      const kinds = new Set(errors.map((e) => e.kind));
      assert.ok(errors.length > 0, 'the restart was felt');
      console.error(`restart under load: ${counts.before} before, ${counts.after} after, errors by kind: ${[...kinds].join(', ')}`);
    });
  });
});
