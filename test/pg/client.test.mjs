// The PostgreSQL client's connection against a real server (test/pg/cluster.mjs): start-up
// over TCP and the unix socket, trust / md5 / SCRAM, TLS modes, pipelined queries, the
// statement cache, values, named errors, statement_timeout, and no password in any error.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { inspect } from 'node:util';
import { USERS, postgresMissing, startCluster, waitFor } from './cluster.mjs';

const { connect, parseDatabaseUrl, Listener, Pool, PgError, PgServerError } = createRequire(import.meta.url)('../../dist/testkit.cjs');

const missing = postgresMissing();
const PASSWORDS = [USERS.scram.password, USERS.md5.password, 'wrong-Pa55word-91xq'];
/** Every error the tests see, checked at the end for a password. */
const seen = [];

async function rejection(promise) {
  try {
    await promise;
  } catch (err) {
    seen.push(err);
    return err;
  }
  assert.fail('expected a rejection');
}

describe('PostgreSQL client: connection', { skip: missing }, () => {
  let cluster;
  const open = [];
  /** Connects with a DATABASE_URL; closed after the suite. */
  const conn = async (url, options = {}) => {
    const c = await connect(parseDatabaseUrl(url), options);
    open.push(c);
    return c;
  };

  before(async () => {
    cluster = await startCluster({ settings: { deadlock_timeout: "'100ms'" } });
  });
  after(async () => {
    await Promise.all(open.map((c) => c.close()));
    await cluster?.destroy();
  });

  test('connects over TCP and over the unix socket, with trust, md5 and SCRAM-SHA-256', async () => {
    for (const u of [USERS.trust, USERS.md5, USERS.scram]) {
      for (const url of [cluster.url(u.user), cluster.socketUrl(u.user)]) {
        const c = await conn(url);
        const r = await c.query('SELECT current_user, inet_server_addr() IS NULL AS unix');
        assert.deepEqual(r.rows, [[u.user, url.includes('?host=') ? 't' : 'f']], url);
        assert.ok(c.backendPid > 0);
        assert.match(c.parameter('server_version'), /^\d+/);
        await c.close();
      }
    }
    // the server really asked for each method: pg_hba says so, and pg_stat_activity shows no other
    const methods = await cluster.psql("SELECT rolname, left(rolpassword, 14) FROM pg_authid WHERE rolname IN ('md5_user','scram_user') ORDER BY 1");
    assert.match(methods, /md5_user\|md5/);
    assert.match(methods, /scram_user\|SCRAM-SHA-256\$/);
  });

  test('a wrong password is a named auth error (28P01) whose message holds no password', async () => {
    for (const u of [USERS.scram, USERS.md5]) {
      const err = await rejection(conn(cluster.url(u.user, { password: PASSWORDS[2] })));
      assert.ok(err instanceof PgServerError);
      assert.equal(err.kind, 'auth_failed');
      assert.equal(err.code, '28P01');
      assert.match(err.message, /password authentication failed/);
    }
    const none = await rejection(conn(cluster.url(USERS.scram.user, { password: null })));
    assert.equal(none.kind, 'auth_failed');
    assert.match(none.message, /none was given/);
  });

  test('SCRAM applies SASLprep to a non-ASCII password, as the server did when it was set', async () => {
    const raw = 'ｐä\u00ADss\u00A0wörd'; // fullwidth p, soft hyphen, no-break space
    await cluster.psql(`CREATE ROLE intl_user LOGIN PASSWORD '${raw}'`);
    const c = await conn(cluster.url('intl_user', { password: raw }));
    assert.deepEqual((await c.query('SELECT current_user')).rows, [['intl_user']]);
  });

  test('sslmode: disable is plaintext, require is TLS, verify-full checks the CA and the host name', async () => {
    const ssl = 'SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()';
    const plain = await conn(cluster.url(USERS.scram.user, { sslmode: 'disable' }));
    assert.deepEqual((await plain.query(ssl)).rows, [['f']]);
    const required = await conn(cluster.url(USERS.scram.user, { sslmode: 'require' }));
    assert.deepEqual((await required.query(ssl)).rows, [['t']]);
    const verified = await conn(cluster.url(USERS.scram.user, { host: 'localhost', sslmode: 'verify-full', sslrootcert: cluster.caFile }));
    assert.deepEqual((await verified.query(ssl)).rows, [['t']]);
    // on the unix socket sslmode does not apply (as in libpq)
    const local = await conn(`${cluster.socketUrl(USERS.scram.user)}&sslmode=require`);
    assert.deepEqual((await local.query('SELECT 1')).rows, [['1']]);
  });

  test('verify-full refuses a wrong host name, a missing CA and another CA', async () => {
    const wrongHost = await rejection(conn(cluster.url(USERS.scram.user, { host: '127.0.0.1', sslmode: 'verify-full', sslrootcert: cluster.caFile })));
    assert.equal(wrongHost.kind, 'tls_failed');
    assert.match(wrongHost.message, /altnames|host/i);
    const noCa = await rejection(conn(cluster.url(USERS.scram.user, { host: 'localhost', sslmode: 'verify-full' })));
    assert.equal(noCa.kind, 'tls_failed');
    assert.match(noCa.message, /certificate/i);
    const otherCa = await rejection(conn(cluster.url(USERS.scram.user, { host: 'localhost', sslmode: 'verify-full', sslrootcert: cluster.otherCaFile })));
    assert.equal(otherCa.kind, 'tls_failed');
    const noFile = await rejection(conn(cluster.url(USERS.scram.user, { host: 'localhost', sslmode: 'verify-full', sslrootcert: '/nonexistent/ca.crt' })));
    assert.equal(noFile.kind, 'config');
  });

  test('sslmode=require fails when the server does not offer TLS', async () => {
    await cluster.psql('ALTER SYSTEM SET ssl = off');
    await cluster.psql('SELECT pg_reload_conf()');
    try {
      await waitFor(async () => (await cluster.psql('SHOW ssl')) === 'off', { what: 'ssl off' });
      const err = await rejection(conn(cluster.url(USERS.scram.user, { sslmode: 'require' })));
      assert.equal(err.kind, 'tls_failed');
      assert.match(err.message, /does not accept TLS/);
    } finally {
      await cluster.psql('ALTER SYSTEM RESET ssl');
      await cluster.psql('SELECT pg_reload_conf()');
      await waitFor(async () => (await cluster.psql('SHOW ssl')) === 'on', { what: 'ssl on' });
    }
  });

  test('a connection cut during the TLS handshake (a server restarting) is connect_failed, unavailable, not tls_failed', async () => {
    // a server that accepts TLS, then resets the connection as a restarting PostgreSQL may
    const cutter = createServer((socket) => socket.once('data', () => socket.write('S', () => socket.resetAndDestroy())));
    await new Promise((r) => cutter.listen(0, '127.0.0.1', r));
    try {
      const err = await rejection(conn(`postgres://u@127.0.0.1:${cutter.address().port}/db?sslmode=require`));
      assert.equal(err.kind, 'connect_failed', err.message);
      assert.equal(err.unavailable, true);
    } finally {
      await new Promise((r) => cutter.close(r));
    }
  });

  test('nothing listening: connect_failed, both for a TCP port and a socket directory', async () => {
    const tcp = await rejection(conn(`postgres://u@127.0.0.1:1/db`));
    assert.equal(tcp.kind, 'connect_failed');
    assert.equal(tcp.unavailable, true);
    const sock = await rejection(conn('postgres://u@/db?host=/nonexistent-dir'));
    assert.equal(sock.kind, 'connect_failed');
  });

  test('values: NULL, empty string, unicode, 1 MiB of text both ways, many columns, no rows', async () => {
    const c = await conn(cluster.url(USERS.trust.user));
    const unicode = 'héllo wörld — 日本語 🎉 \u0301e';
    const r = await c.query('SELECT $1::text AS a, $2::text AS b, $3::text AS c, NULL::int AS d', [null, '', unicode]);
    assert.deepEqual(r.fields, ['a', 'b', 'c', 'd']);
    assert.deepEqual(r.rows, [[null, '', unicode, null]]);
    const big = 'x'.repeat(1024 * 1024 - 3) + 'é!'; // 1 MiB and a multi-byte character at the end
    const echoed = await c.query('SELECT $1::text AS v, length($1::text) AS n', [big]);
    assert.equal(echoed.rows[0][0], big);
    assert.equal(echoed.rows[0][1], String(big.length));
    const made = await c.query("SELECT repeat('ab', 524288) AS v");
    assert.equal(made.rows[0][0].length, 1024 * 1024);
    const wide = await c.query(`SELECT ${Array.from({ length: 50 }, (_, i) => `${i} AS c${i}`).join(', ')}`);
    assert.equal(wide.fields.length, 50);
    assert.equal(wide.rows[0][49], '49');
    const empty = await c.query('SELECT 1 AS one WHERE false');
    assert.deepEqual(empty.rows, []);
    assert.deepEqual(empty.fields, ['one']);
    assert.equal(empty.rowCount, 0);
  });

  test('command tags: rowCount of INSERT, UPDATE, DELETE, SELECT; statements without rows', async () => {
    const c = await conn(cluster.url(USERS.trust.user));
    await c.exec('CREATE TABLE tags (id int PRIMARY KEY, v text)');
    const ins = await c.query('INSERT INTO tags SELECT g, $1 FROM generate_series(1, 5) g', ['v']);
    assert.equal(ins.command, 'INSERT');
    assert.equal(ins.rowCount, 5);
    assert.deepEqual(ins.fields, []);
    assert.equal((await c.query("UPDATE tags SET v = 'w' WHERE id <= 3")).rowCount, 3);
    assert.equal((await c.query('DELETE FROM tags WHERE id = 1')).rowCount, 1);
    const sel = await c.query('SELECT id FROM tags ORDER BY id');
    assert.equal(sel.command, 'SELECT');
    assert.equal(sel.rowCount, 4);
    assert.equal((await c.query('BEGIN')).command, 'BEGIN');
    assert.equal(c.transactionStatus, 'transaction');
    await rejection(c.query('SELECT 1/0'));
    assert.equal(c.transactionStatus, 'failed');
    assert.equal((await c.query('ROLLBACK')).command, 'ROLLBACK');
    assert.equal(c.transactionStatus, 'idle');
  });

  test('pipelining: 300 queries in flight on one connection, one failing mid-way, the others answered in order', async () => {
    const c = await conn(cluster.url(USERS.scram.user));
    await c.exec('CREATE TABLE pipe (n int PRIMARY KEY)');
    const calls = [];
    for (let i = 0; i < 300; i++) {
      if (i === 150) calls.push(c.query('SELECT 1 / $1::int', ['0']));
      else if (i % 3 === 0) calls.push(c.query('INSERT INTO pipe VALUES ($1)', [String(i)]));
      else calls.push(c.query('SELECT $1::int * 2 AS twice, (SELECT count(*) FROM pipe) AS seen', [String(i)]));
    }
    assert.equal(c.inFlight, 300);
    const results = await Promise.allSettled(calls);
    for (let i = 0; i < 300; i++) {
      const r = results[i];
      if (i === 150) {
        assert.equal(r.status, 'rejected');
        seen.push(r.reason);
        assert.equal(r.reason.code, '22012'); // division_by_zero
        assert.equal(r.reason.kind, 'server');
      } else if (i % 3 === 0) {
        assert.equal(r.status, 'fulfilled', String(r.reason));
        assert.equal(r.value.rowCount, 1);
      } else {
        assert.equal(r.status, 'fulfilled', String(r.reason));
        // each SELECT sees exactly the INSERTs sent before it (150 was the failing one): answers matched in order
        const inserted = Math.floor(i / 3) + 1 - (i > 150 ? 1 : 0);
        assert.deepEqual(r.value.rows, [[String(i * 2), String(inserted)]], `query ${i}`);
      }
    }
    assert.equal(c.inFlight, 0);
  });

  test('statement cache: the same text is prepared once per connection, then only bound', async () => {
    const c = await conn(cluster.url(USERS.trust.user));
    const text = 'SELECT $1::int + 1 AS next';
    for (let i = 0; i < 20; i++) assert.deepEqual((await c.query(text, [String(i)])).rows, [[String(i + 1)]]);
    await Promise.all(Array.from({ length: 20 }, (_, i) => c.query(text, [String(i)])));
    const prepared = await c.query('SELECT count(*) FROM pg_prepared_statements WHERE statement = $1', [text]);
    assert.deepEqual(prepared.rows, [['1']]);
  });

  test('statement cache: a text that fails to parse fails the same way every time, also when pipelined', async () => {
    const c = await conn(cluster.url(USERS.trust.user));
    const calls = [c.query('SELEC 1'), c.query('SELEC 1'), c.query('SELECT 2 AS two')];
    const [a, b, ok] = await Promise.allSettled(calls);
    assert.equal(a.reason.code, '42601'); // syntax_error
    assert.equal(b.reason.code, '42601', 'the second was sent before the Parse failed: it reports the same cause');
    assert.deepEqual(ok.value.rows, [['2']]);
    assert.equal((await rejection(c.query('SELEC 1'))).code, '42601');
  });

  test('statement cache: bounded (least recently used closed), and a stale plan is prepared anew', async () => {
    const c = await conn(cluster.url(USERS.trust.user), { statementCacheSize: 3 });
    for (let i = 0; i < 10; i++) await c.query(`SELECT ${i} AS n`);
    const count = await c.query('SELECT count(*) FROM pg_prepared_statements');
    assert.ok(Number(count.rows[0][0]) <= 3, `${count.rows[0][0]} statements kept`);

    await c.exec('CREATE TABLE stale (a int); INSERT INTO stale VALUES (1)');
    assert.deepEqual((await c.query('SELECT * FROM stale')).rows, [['1']]);
    await c.exec('ALTER TABLE stale ADD COLUMN b int DEFAULT 2');
    const stale = await rejection(c.query('SELECT * FROM stale'));
    assert.equal(stale.code, '0A000'); // cached plan must not change result type
    const fresh = await c.query('SELECT * FROM stale');
    assert.deepEqual(fresh.fields, ['a', 'b']);
    assert.deepEqual(fresh.rows, [['1', '2']]);
  });

  test('unique violation is recognisable: kind, SQLSTATE 23505, constraint', async () => {
    const c = await conn(cluster.url(USERS.trust.user));
    await c.exec('CREATE TABLE uniq (id int PRIMARY KEY, email text UNIQUE)');
    await c.query('INSERT INTO uniq VALUES (1, $1)', ['a@example.com']);
    const err = await rejection(c.query('INSERT INTO uniq VALUES (2, $1)', ['a@example.com']));
    assert.ok(err instanceof PgError);
    assert.equal(err.kind, 'unique_violation');
    assert.equal(err.code, '23505');
    assert.equal(err.constraint, 'uniq_email_key');
    assert.equal(err.table, 'uniq');
    assert.equal(err.unavailable, false);
    assert.deepEqual((await c.query('SELECT count(*) FROM uniq')).rows, [['1']]);
  });

  test('serialization failure (40001) from two REPEATABLE READ transactions updating one row', async () => {
    const a = await conn(cluster.url(USERS.trust.user));
    const b = await conn(cluster.url(USERS.trust.user));
    await a.exec('CREATE TABLE counter (id int PRIMARY KEY, n int); INSERT INTO counter VALUES (1, 0)');
    await a.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    await b.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    await a.query('SELECT n FROM counter WHERE id = 1');
    await b.query('SELECT n FROM counter WHERE id = 1'); // both snapshots taken
    await a.query('UPDATE counter SET n = n + 1 WHERE id = 1');
    // handled from the start: it may fail before a's COMMIT is answered
    const blocked = rejection(b.query('UPDATE counter SET n = n + 1 WHERE id = 1')); // waits for a's row lock
    await a.query('COMMIT');
    const err = await blocked;
    assert.equal(err.kind, 'serialization_failure');
    assert.equal(err.code, '40001');
    await b.query('ROLLBACK');
  });

  test('deadlock (40P01) is recognisable', async () => {
    const a = await conn(cluster.url(USERS.trust.user));
    const b = await conn(cluster.url(USERS.trust.user));
    await a.exec('CREATE TABLE locks (id int PRIMARY KEY); INSERT INTO locks VALUES (1), (2)');
    await a.query('BEGIN');
    await b.query('BEGIN');
    await a.query('SELECT * FROM locks WHERE id = 1 FOR UPDATE');
    await b.query('SELECT * FROM locks WHERE id = 2 FOR UPDATE');
    const fromA = a.query('SELECT * FROM locks WHERE id = 2 FOR UPDATE');
    const fromB = b.query('SELECT * FROM locks WHERE id = 1 FOR UPDATE');
    const results = await Promise.allSettled([fromA, fromB]);
    const failed = results.filter((r) => r.status === 'rejected').map((r) => r.reason);
    seen.push(...failed);
    assert.equal(failed.length, 1);
    assert.equal(failed[0].kind, 'deadlock');
    await a.query('ROLLBACK');
    await b.query('ROLLBACK');
  });

  test('statement_timeout: a query past it fails with query_canceled and the connection stays usable', async () => {
    const c = await conn(cluster.url(USERS.trust.user), { statementTimeoutMs: 200 });
    assert.deepEqual((await c.query('SHOW statement_timeout')).rows, [['200ms']]);
    const slow = c.query('SELECT pg_sleep(30)');
    const next = c.query('SELECT $1::text AS after', ['still here']); // pipelined behind it
    const err = await rejection(slow);
    assert.equal(err.kind, 'query_canceled');
    assert.equal(err.code, '57014');
    assert.deepEqual((await next).rows, [['still here']]);
    assert.deepEqual((await c.query('SELECT 1')).rows, [['1']]);
  });

  test('a server that falls silent with a query in flight: it fails connection_lost after its timeout, never hangs', async () => {
    const c = await conn(cluster.url(USERS.trust.user), { statementTimeoutMs: 200 });
    const pid = c.backendPid;
    process.kill(pid, 'SIGSTOP'); // the backend freezes; its socket stays open and quiet
    try {
      const err = await rejection(c.query('SELECT 1'));
      assert.equal(err.kind, 'connection_lost');
      assert.match(err.message, /no answer for \d+ ms/);
      assert.equal(c.closed, true);
    } finally {
      process.kill(pid, 'SIGCONT');
    }
  });

  test('exec: several statements in one string; an error stops the rest; COPY FROM STDIN is refused, not hung', async () => {
    const c = await conn(cluster.url(USERS.trust.user));
    await c.exec("CREATE TABLE ex (n int); INSERT INTO ex VALUES (1); INSERT INTO ex VALUES (2); SELECT 'dropped'");
    assert.deepEqual((await c.query('SELECT count(*) FROM ex')).rows, [['2']]);
    const err = await rejection(c.exec('INSERT INTO ex VALUES (3); SELECT 1/0; INSERT INTO ex VALUES (4)'));
    assert.equal(err.code, '22012');
    assert.deepEqual((await c.query('SELECT count(*) FROM ex')).rows, [['2']], 'one implicit transaction: all or nothing');
    const copy = await rejection(c.exec('COPY ex FROM STDIN'));
    assert.equal(copy.code, '57014');
    assert.match(copy.message, /COPY/);
    await c.exec('');
    assert.deepEqual((await c.query('SELECT 1')).rows, [['1']]);
  });

  test('misuse is refused before anything is sent, and the connection stays usable', async () => {
    const c = await conn(cluster.url(USERS.trust.user));
    assert.equal((await rejection(c.query('SELECT $1::int', [42]))).kind, 'usage');
    assert.equal((await rejection(c.query('SELECT 1\0; DROP TABLE x'))).kind, 'usage');
    assert.deepEqual((await c.query('SELECT $1::int', ['42'])).rows, [['42']]);
  });

  test('a closed connection refuses queries with connection_lost; close() twice is fine', async () => {
    const c = await connect(parseDatabaseUrl(cluster.url(USERS.trust.user)));
    const inFlight = c.query('SELECT pg_sleep(0.05)');
    await c.close(); // after what is in flight
    assert.deepEqual((await inFlight).rows, [['']]);
    assert.equal(c.closed, true);
    assert.equal((await rejection(c.query('SELECT 1'))).kind, 'connection_lost');
    await c.close();
  });

  test('no password in any error, string or inspect output seen by these tests, nor in a connection, pool or listener', async () => {
    const c = await conn(cluster.url(USERS.scram.user));
    const pool = new Pool(cluster.url(USERS.md5.user), { max: 1 });
    await pool.query('SELECT 1');
    const listener = new Listener(cluster.url(USERS.scram.user), { onNotification: () => undefined });
    await listener.listen('x');
    const texts = [c, pool, listener].map((o) => inspect(o, { showHidden: true, depth: Infinity }));
    await pool.end();
    await listener.close();
    for (const err of seen) {
      texts.push(err.message, err.stack, String(err), inspect(err, { showHidden: true, depth: Infinity }), JSON.stringify(err));
    }
    assert.ok(seen.length >= 10, `${seen.length} errors seen`);
    for (const text of texts) for (const pw of PASSWORDS) assert.ok(!text.includes(pw), `password found in: ${text.slice(0, 300)}`);
  });
});
