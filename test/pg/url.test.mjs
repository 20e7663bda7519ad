// DATABASE_URL parsing and the password's redaction, and the pure parts of authentication
// (SCRAM's proof and server check, md5, SASLprep), checked against node:crypto directly.
// None of this needs a server; the same code is exercised against PostgreSQL in client.test.mjs.
import assert from 'node:assert/strict';
import { createHash, createHmac, pbkdf2Sync } from 'node:crypto';
import { createRequire } from 'node:module';
import { test } from 'node:test';
import { inspect } from 'node:util';

const { parseDatabaseUrl, redactDatabaseUrl, describeTarget, ScramClient, md5Password, saslprep, PgError } =
  createRequire(import.meta.url)('../../dist/testkit.cjs');

const SECRET = 'pä$$:w/o@rd#1';
const URL_WITH_SECRET = `postgres://app:${encodeURIComponent(SECRET)}@db.example:6543/chat?sslmode=verify-full&sslrootcert=/etc/ca.pem&application_name=csa&connect_timeout=3`;

test('DATABASE_URL: user, password, host, port, database and the parameters libpq names', () => {
  const c = parseDatabaseUrl(URL_WITH_SECRET);
  assert.equal(c.user, 'app');
  assert.equal(c.password.reveal(), SECRET);
  assert.equal(c.host, 'db.example');
  assert.equal(c.port, 6543);
  assert.equal(c.database, 'chat');
  assert.equal(c.sslmode, 'verify-full');
  assert.equal(c.sslrootcert, '/etc/ca.pem');
  assert.equal(c.applicationName, 'csa');
  assert.equal(c.connectTimeoutMs, 3000);
  assert.equal(c.socketPath, undefined);
  assert.equal(describeTarget(c), 'app@db.example:6543/chat');
});

test('DATABASE_URL: defaults (port 5432, sslmode disable, database = user) and postgresql://', () => {
  const c = parseDatabaseUrl('postgresql://bob@localhost');
  assert.equal(c.port, 5432);
  assert.equal(c.sslmode, 'disable');
  assert.equal(c.database, 'bob');
  assert.equal(c.password, undefined);
});

test('DATABASE_URL: a unix-socket directory via ?host=/dir (and an empty host, as libpq allows)', () => {
  for (const url of ['postgres://u:p@/db?host=/run/pg&port=5433', 'postgres:///db?host=/run/pg/&port=5433&user=u', 'postgres://u@%2Frun%2Fpg:5433/db']) {
    const c = parseDatabaseUrl(url);
    assert.equal(c.socketPath, '/run/pg/.s.PGSQL.5433', url);
    assert.equal(c.database, 'db');
  }
});

test('DATABASE_URL: IPv6 literal host', () => {
  const c = parseDatabaseUrl('postgres://u@[::1]:5433/db');
  assert.equal(c.host, '::1');
  assert.equal(describeTarget(c), 'u@[::1]:5433/db');
});

test('DATABASE_URL: invalid ones are PgError "config" that never quote the password', () => {
  const bad = [
    `postgres://u:${SECRET}@[bad/db`, // unparseable: Node's own error would carry the input
    `mysql://u:${encodeURIComponent(SECRET)}@h/db`,
    `postgres://u:${encodeURIComponent(SECRET)}@h/db?sslmode=prefer`,
    `postgres://u:${encodeURIComponent(SECRET)}@h:99999/db`,
    `postgres://u:${encodeURIComponent(SECRET)}@h/db?options=-c%20x`,
    `postgres://u:${encodeURIComponent(SECRET)}@h/db?sslmode=require&sslrootcert=/x`,
    `postgres://u:${encodeURIComponent(SECRET)}@h1,h2/db`,
    `postgres://u:%E0%A4%A@h/db`,
  ];
  for (const url of bad) {
    const err = (() => {
      try {
        parseDatabaseUrl(url);
      } catch (e) {
        return e;
      }
      return undefined;
    })();
    assert.ok(err instanceof PgError, url);
    assert.equal(err.kind, 'config');
    for (const text of [err.message, err.stack, String(err), inspect(err, { showHidden: true, depth: 10 }), JSON.stringify(err)]) {
      assert.ok(!text.includes(SECRET) && !text.includes(encodeURIComponent(SECRET)), `password leaked for ${url}: ${text}`);
    }
  }
});

test('the password never shows in inspect, toString or JSON of a parsed configuration', () => {
  const c = parseDatabaseUrl(URL_WITH_SECRET);
  for (const text of [inspect(c, { showHidden: true, depth: Infinity }), JSON.stringify(c), String(c.password), `${c.password}`]) {
    assert.ok(!text.includes(SECRET), text);
  }
  assert.match(inspect(c), /\[redacted\]/);
});

test('redactDatabaseUrl replaces the password, in the authority or as a parameter', () => {
  const r = redactDatabaseUrl(URL_WITH_SECRET);
  assert.ok(!r.includes(encodeURIComponent(SECRET)));
  assert.match(r, /^postgres:\/\/app:\*\*\*@db\.example:6543\/chat\?sslmode=verify-full/);
  assert.match(redactDatabaseUrl('postgres://u@h/db?password=hunter2'), /password=\*\*\*/);
  assert.equal(redactDatabaseUrl(`postgres://u:${SECRET}@[bad`), '[unparseable DATABASE_URL]');
});

test('md5 answer: "md5" + md5(md5(password + user) + salt)', () => {
  const salt = Buffer.from([1, 2, 3, 4]);
  const inner = createHash('md5').update('secretalice').digest('hex');
  const expected = `md5${createHash('md5').update(inner).update(salt).digest('hex')}`;
  assert.equal(md5Password('alice', 'secret', salt), expected);
});

test('SCRAM-SHA-256: the proof is RFC 5802\'s, and the server signature is checked', async () => {
  const scram = new ScramClient();
  const first = scram.clientFirst();
  assert.match(first, /^n,,n=,r=[A-Za-z0-9+/=]{24}$/);
  const clientNonce = first.slice('n,,n=,r='.length);
  const salt = Buffer.from('0123456789abcdef');
  const serverFirst = `r=${clientNonce}SERVERPART,s=${salt.toString('base64')},i=4096`;
  const final = await scram.clientFinal(serverFirst, 'pencil');

  // the same computation, written out independently
  const salted = pbkdf2Sync('pencil', salt, 4096, 32, 'sha256');
  const hmac = (k, s) => createHmac('sha256', k).update(s).digest();
  const clientKey = hmac(salted, 'Client Key');
  const authMessage = `n=,r=${clientNonce},${serverFirst},c=biws,r=${clientNonce}SERVERPART`;
  const signature = hmac(createHash('sha256').update(clientKey).digest(), authMessage);
  const proof = Buffer.from(clientKey.map((b, i) => b ^ signature[i])).toString('base64');
  assert.equal(final, `c=biws,r=${clientNonce}SERVERPART,p=${proof}`);

  const serverSignature = hmac(hmac(salted, 'Server Key'), authMessage).toString('base64');
  assert.throws(() => scram.verifyServerFinal(`v=${Buffer.alloc(32).toString('base64')}`), (e) => e.kind === 'auth_failed');
  assert.equal(scram.serverVerified, false);
  scram.verifyServerFinal(`v=${serverSignature}`);
  assert.equal(scram.serverVerified, true);
});

test('SCRAM-SHA-256: a server nonce that does not extend ours is refused', async () => {
  const scram = new ScramClient();
  await assert.rejects(scram.clientFinal('r=someoneElsesNonce,s=c2FsdA==,i=4096', 'pw'), (e) => e.kind === 'auth_failed');
});

test('SASLprep: ASCII unchanged; soft hyphen dropped, non-ASCII space mapped, NFKC applied', () => {
  assert.equal(saslprep('plain Pass!'), 'plain Pass!');
  assert.equal(saslprep('pa\u00ADss'), 'pass');
  assert.equal(saslprep('a\u00A0b'), 'a b');
  assert.equal(saslprep('\uFF50\uFF41\uFF53\uFF53'), 'pass'); // fullwidth letters
  assert.equal(saslprep('\u2168'), 'IX'); // roman numeral nine
  assert.equal(saslprep('bad\u0007'), 'bad\u0007'); // prohibited: the raw password, as PostgreSQL does
});
