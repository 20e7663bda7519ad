// A throwaway PostgreSQL cluster for tests: initdb in a temporary directory, users for each
// authentication method (scram-sha-256, md5, trust), TLS with a self-signed CA made by
// openssl, a unix socket in that directory and a free loopback TCP port. The server is
// spawned directly (its PID is ours to stop, kill and restart); as root, it runs as the
// `postgres` user, since initdb and postgres refuse to run as root.
import { execFile, spawn, spawnSync } from 'node:child_process';
import { appendFileSync, chmodSync, chownSync, closeSync, existsSync, mkdtempSync, openSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** The users the cluster has, one per authentication method; `admin` is the superuser. */
export const USERS = Object.freeze({
  admin: { user: 'postgres', password: undefined },
  trust: { user: 'trust_user', password: undefined },
  scram: { user: 'scram_user', password: 'Scr4m-pw-7f3e9a' },
  md5: { user: 'md5_user', password: 'Md5-pw-c41d8b' },
});

/**
 * The directory holding initdb, postgres and psql: $PG_BIN if set (only it), else Debian's
 * /usr/lib/postgresql/<newest>/bin, else PATH.
 */
export function findPostgresBin() {
  const candidates = [];
  if (process.env.PG_BIN) {
    candidates.push(process.env.PG_BIN);
  } else {
    try {
      const versions = readdirSync('/usr/lib/postgresql').filter((v) => /^\d+$/.test(v)).sort((a, b) => Number(b) - Number(a));
      for (const v of versions) candidates.push(`/usr/lib/postgresql/${v}/bin`);
    } catch {
      // no Debian layout
    }
    for (const dir of (process.env.PATH ?? '').split(':')) if (dir) candidates.push(dir);
  }
  return candidates.find((dir) => existsSync(join(dir, 'initdb')) && existsSync(join(dir, 'postgres')) && existsSync(join(dir, 'psql')));
}

function findOpenssl() {
  const r = spawnSync('openssl', ['version'], { encoding: 'utf8' });
  return r.status === 0;
}

let skipReason;
/**
 * undefined when PostgreSQL and openssl are here; otherwise the reason to skip, said once on
 * stderr. With REQUIRE_POSTGRES=1 (CI) their absence throws instead.
 */
export function postgresMissing() {
  if (skipReason !== undefined) return skipReason || undefined;
  const missing = [];
  if (findPostgresBin() === undefined) missing.push('PostgreSQL (initdb, postgres, psql under /usr/lib/postgresql/*/bin, $PG_BIN or PATH)');
  if (!findOpenssl()) missing.push('openssl');
  if (missing.length === 0) {
    skipReason = '';
    return undefined;
  }
  const what = `${missing.join(' and ')} not found`;
  if (process.env.REQUIRE_POSTGRES === '1') throw new Error(`${what}, and REQUIRE_POSTGRES=1 makes that a failure (apt-get install -y postgresql openssl)`);
  const reason = `${what}: PostgreSQL client tests SKIPPED (apt-get install -y postgresql openssl)`;
  console.error(`\n*** ${reason} ***\n`);
  skipReason = reason;
  return reason;
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/** uid and gid of the `postgres` user when running as root; undefined otherwise. */
function serverIdentity() {
  if (process.getuid?.() !== 0) return undefined;
  const line = readFileSync('/etc/passwd', 'utf8').split('\n').find((l) => l.startsWith('postgres:'));
  if (line === undefined) throw new Error('running as root and there is no postgres user to run the server as');
  const [, , uid, gid] = line.split(':');
  return { uid: Number(uid), gid: Number(gid) };
}

function run(file, args, opts = {}) {
  const r = spawnSync(file, args, { encoding: 'utf8', ...opts });
  if (r.status !== 0) throw new Error(`${file} ${args.join(' ')} failed (${r.status ?? r.signal}): ${r.stderr}${r.error ?? ''}`);
  return r.stdout;
}

function makeCertificates(dir) {
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  const ca = (name, cn) =>
    run('openssl', ['req', '-x509', ...ec, '-keyout', join(dir, `${name}.key`), '-out', join(dir, `${name}.crt`), '-days', '7',
      '-subj', `/CN=${cn}`, '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign']);
  ca('ca', 'chat-session-api test CA');
  ca('other-ca', 'some other CA');
  // the server's name is localhost only, so verify-full to 127.0.0.1 must fail the host name check
  writeFileSync(join(dir, 'server.ext'), 'subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n');
  run('openssl', ['req', '-new', ...ec, '-keyout', join(dir, 'server.key'), '-out', join(dir, 'server.csr'), '-subj', '/CN=localhost']);
  run('openssl', ['x509', '-req', '-in', join(dir, 'server.csr'), '-CA', join(dir, 'ca.crt'), '-CAkey', join(dir, 'ca.key'),
    '-CAcreateserial', '-out', join(dir, 'server.crt'), '-days', '7', '-extfile', join(dir, 'server.ext')]);
}

const HBA = `
local all postgres   trust
local all trust_user trust
local all md5_user   md5
local all all        scram-sha-256
host  all postgres   127.0.0.1/32 trust
host  all trust_user 127.0.0.1/32 trust
host  all md5_user   127.0.0.1/32 md5
host  all all        127.0.0.1/32 scram-sha-256
`;

/**
 * Starts a fresh cluster. `settings` are extra postgresql.conf lines (name -> value).
 * Returns the handle described at each property; `destroy()` in the test's `after`.
 */
export async function startCluster({ settings = {} } = {}) {
  const bin = findPostgresBin();
  if (bin === undefined) throw new Error('PostgreSQL not found');
  const identity = serverIdentity();
  const dir = mkdtempSync(join(tmpdir(), 'pgtest-'));
  const dataDir = join(dir, 'data');
  const spawnAs = { cwd: dir, env: { ...process.env, LC_ALL: 'C', LANG: 'C' }, ...(identity ?? {}) };
  if (identity) chownSync(dir, identity.uid, identity.gid);

  run(join(bin, 'initdb'), ['-D', dataDir, '-U', 'postgres', '--no-sync', '-E', 'UTF8', '--no-locale', '-A', 'trust'], spawnAs);
  makeCertificates(dataDir);
  for (const f of ['ca.key', 'other-ca.key', 'server.key', 'server.crt', 'ca.crt']) {
    if (identity) chownSync(join(dataDir, f), identity.uid, identity.gid);
    if (f.endsWith('.key')) chmodSync(join(dataDir, f), 0o600);
  }
  writeFileSync(join(dataDir, 'pg_hba.conf'), HBA);
  // the harness's settings in a file of their own, so that ALTER SYSTEM (postgresql.auto.conf) stays the tests'
  appendFileSync(join(dataDir, 'postgresql.conf'), "\ninclude 'cluster.conf'\n");
  if (identity) chownSync(join(dataDir, 'pg_hba.conf'), identity.uid, identity.gid);

  const logFile = join(dir, 'server.log');
  let port = await freePort();
  const conf = () =>
    Object.entries({
      listen_addresses: "'127.0.0.1'",
      port,
      unix_socket_directories: `'${dir}'`,
      fsync: 'off',
      synchronous_commit: 'off',
      full_page_writes: 'off',
      max_connections: 60,
      shared_buffers: "'32MB'",
      ssl: 'on',
      ssl_cert_file: "'server.crt'",
      ssl_key_file: "'server.key'",
      log_min_messages: 'warning',
      ...settings,
    })
      .map(([k, v]) => `${k} = ${v}`)
      .join('\n');

  let child;
  let exited;

  const psql = (sql, { user = 'postgres', database = 'postgres' } = {}) =>
    new Promise((resolve, reject) => {
      execFile(join(bin, 'psql'), ['-X', '-A', '-t', '-q', '-v', 'ON_ERROR_STOP=1', '-h', dir, '-p', String(port), '-U', user, '-d', database, '-c', sql],
        { encoding: 'utf8', env: { ...process.env, PGCONNECT_TIMEOUT: '5', PGCLIENTENCODING: 'UTF8' } },
        (err, stdout, stderr) => (err ? reject(new Error(`psql: ${stderr || err.message}`)) : resolve(stdout.trim())));
    });

  const logTail = () => {
    try {
      return readFileSync(logFile, 'utf8').split('\n').slice(-30).join('\n');
    } catch {
      return '';
    }
  };

  const onExit = () => {
    if (child && child.exitCode === null && child.signalCode === null) {
      try {
        process.kill(child.pid, 'SIGQUIT'); // immediate shutdown: the postmaster takes its backends down
      } catch {
        // gone
      }
    }
  };
  process.on('exit', onExit);

  async function start() {
    writeFileSync(join(dataDir, 'cluster.conf'), `${conf()}\n`);
    const log = openSync(logFile, 'a');
    child = spawn(join(bin, 'postgres'), ['-D', dataDir], { ...spawnAs, stdio: ['ignore', log, log] });
    closeSync(log);
    exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
    const deadline = Date.now() + 60_000;
    for (;;) {
      if (child.exitCode !== null || child.signalCode !== null) throw new Error(`postgres exited at start:\n${logTail()}`);
      try {
        await psql('SELECT 1');
        return;
      } catch (err) {
        if (Date.now() > deadline) throw new Error(`postgres did not accept connections in 60 s: ${err.message}\n${logTail()}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  }

  /** Stops the server: SIGINT is a fast shutdown (sessions get 57P01); SIGKILL in the end. */
  async function stop(signal = 'SIGINT') {
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    child.kill(signal);
    const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    await exited;
    clearTimeout(timer);
  }

  // the first start may lose its port to another process between freePort() and bind: retry
  for (let attempt = 1; ; attempt++) {
    try {
      await start();
      break;
    } catch (err) {
      if (attempt === 3) throw err;
      port = await freePort();
    }
  }

  await psql(`
    CREATE ROLE trust_user LOGIN;
    SET password_encryption = 'scram-sha-256';
    CREATE ROLE scram_user LOGIN PASSWORD '${USERS.scram.password}';
    SET password_encryption = 'md5';
    CREATE ROLE md5_user LOGIN PASSWORD '${USERS.md5.password}';
    GRANT ALL ON SCHEMA public TO trust_user, scram_user, md5_user;
    GRANT pg_signal_backend TO trust_user, scram_user;
  `);

  return {
    host: '127.0.0.1',
    get port() {
      return port;
    },
    socketDir: dir,
    dataDir,
    /** The CA that signed the server's certificate (for localhost only), and an unrelated one. */
    caFile: join(dataDir, 'ca.crt'),
    otherCaFile: join(dataDir, 'other-ca.crt'),
    get pid() {
      return child?.pid;
    },
    /**
     * A DATABASE_URL over TCP for one of USERS' names (its password filled in unless
     * `password` is given; `null` leaves it out). Other options become query parameters.
     */
    url(user = USERS.trust.user, { password, host = '127.0.0.1', database = 'postgres', ...params } = {}) {
      const known = Object.values(USERS).find((u) => u.user === user);
      const pw = password === undefined ? known?.password : password;
      const auth = pw == null ? encodeURIComponent(user) : `${encodeURIComponent(user)}:${encodeURIComponent(pw)}`;
      const q = new URLSearchParams(params).toString();
      return `postgres://${auth}@${host}:${port}/${database}${q ? `?${q}` : ''}`;
    },
    /** A DATABASE_URL over the unix socket. */
    socketUrl(user = USERS.trust.user, { password, database = 'postgres' } = {}) {
      const known = Object.values(USERS).find((u) => u.user === user);
      const pw = password === undefined ? known?.password : password;
      const auth = pw == null ? encodeURIComponent(user) : `${encodeURIComponent(user)}:${encodeURIComponent(pw)}`;
      return `postgres://${auth}@/${database}?host=${encodeURIComponent(dir)}&port=${port}`;
    },
    /** Runs SQL with psql as the superuser; resolves its unaligned, tuples-only output. */
    psql,
    stop,
    start,
    /** Stop and start the same data directory on the same port. */
    async restart() {
      await stop();
      await start();
    },
    /** Sends a signal to the postmaster without waiting (SIGKILL: see `stop` to wait). */
    signal(name) {
      child?.kill(name);
    },
    /** Whether the server accepts connections right now. */
    async accepting() {
      try {
        await psql('SELECT 1');
        return true;
      } catch {
        return false;
      }
    },
    logTail,
    async destroy() {
      await stop();
      process.removeListener('exit', onExit);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Polls `check` (sync or async) until it returns a truthy value, which it resolves; throws after `timeoutMs`. */
export async function waitFor(check, { timeoutMs = 30_000, intervalMs = 50, what = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}
