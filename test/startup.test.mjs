// Start-up failures and the CLI's refusals (docs/DECISIONS.md, "Running" and "Authentication"):
// each is one line on stderr naming what to fix, never a stack trace, and nothing is half done.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import { createServer as createNetServer } from 'node:net';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import { describe, test } from 'node:test';
import { ROOT, SECRET, SERVER, STORE, removeDir, runCli, startServer, storeEnv, tempDir } from './helpers.mjs';

const NAME = 'chat-session-api';
const { crc32 } = createRequire(import.meta.url)('../dist/testkit.cjs');

/** Starts the server the way a user would and waits for it to end (it must fail fast). */
function start(env, nodeArgs = []) {
  const dir = tempDir();
  const r = spawnSync(process.execPath, [...nodeArgs, SERVER], {
    cwd: dir,
    env: { PATH: process.env.PATH, PORT: '0', HOST: '127.0.0.1', DATA_DIR: join(dir, 'data'), AUTH_SECRET: SECRET, ...storeEnv(join(dir, 'data')), ...env },
    encoding: 'utf8',
    timeout: 30_000,
  });
  removeDir(dir);
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** One line on stderr, no stack. */
function assertOneLine(stderr, re) {
  const lines = stderr.split('\n').filter((l) => l !== '');
  assert.equal(lines.length, 1, `one line on stderr, got:\n${stderr}`);
  assert.match(lines[0], re);
  assert.doesNotMatch(stderr, /\n\s+at /, 'no stack trace');
}

describe('[D-running-4] start-up failures are one line on stderr in every case', () => {
  test("a HOST that does not resolve or is not this machine's (exit 1)", () => {
    const unresolvable = start({ HOST: 'no-such-host.invalid' });
    assert.equal(unresolvable.code, 1);
    assertOneLine(unresolvable.stderr, new RegExp(`^${NAME}: HOST no-such-host\\.invalid does not resolve to an address \\((ENOTFOUND|EAI_AGAIN|EAI_FAIL|EAI_NONAME), getaddrinfo\\)$`));
    // 192.0.2.0/24 is reserved for documentation: never an address of this machine
    const foreign = start({ HOST: '192.0.2.1' });
    assert.equal(foreign.code, 1);
    assertOneLine(foreign.stderr, new RegExp(`^${NAME}: HOST 192\\.0\\.2\\.1 is not an address of this machine \\(EADDRNOTAVAIL, listen\\)$`));
  });

  test('a DATA_DIR that is a file (exit 2), for every command', () => {
    const dir = tempDir();
    try {
      const file = join(dir, 'not-a-dir');
      writeFileSync(file, 'x');
      const line = `${NAME}: DATA_DIR ${file} is not a directory\n`;
      for (const args of [[], ['export'], ['import', join(dir, 'backup.ndjson')], ['token', '--sub', 'a']]) {
        const r = runCli(args, { env: { DATA_DIR: file, AUTH_SECRET: SECRET, PORT: '0' }, cwd: dir });
        assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
        assert.equal(r.stderr, line, args.join(' '));
      }
    } finally {
      removeDir(dir);
    }
  });

  /** A data directory whose journal (of the retired engine, which a start migrates) was written by a future release (format version 99). */
  function futureJournal() {
    const dir = tempDir();
    const header = JSON.stringify({ format: 'chat-session-api/journal', version: 99, createdAt: '2026-01-01T00:00:00.000Z' });
    writeFileSync(join(dir, 'sessions.journal'), `${crc32(Buffer.from(header)).toString(16).padStart(8, '0')} ${header}\n`);
    return dir;
  }

  test('a journal of an unsupported version (exit 1, the file left as it was)', (t) => {
    if (STORE !== 'sqlite') return t.skip('a start migrates a journal into sqlite (with postgres the directory is refused)');
    const dir = futureJournal();
    try {
      const before = readFileSync(join(dir, 'sessions.journal'), 'utf8');
      const r = runCli([], { env: { DATA_DIR: dir, AUTH_SECRET: SECRET, PORT: '0' }, cwd: dir });
      assert.equal(r.code, 1);
      assertOneLine(r.stderr, new RegExp(`^${NAME}: .*sessions\\.journal: journal format version 99 is not supported by this release`));
      assert.equal(readFileSync(join(dir, 'sessions.journal'), 'utf8'), before);
    } finally {
      removeDir(dir);
    }
  });

  test('no space for the lock or the store (ENOSPC writing the lock: exit 1, naming the data directory)', () => {
    const r = start({}, ['--require', join(ROOT, 'test', 'fixtures', 'enospc-lock.cjs')]);
    assert.equal(r.code, 1);
    assertOneLine(r.stderr, new RegExp(`^${NAME}: no space left for the data directory .*data \\(ENOSPC, write\\); free some and start again$`));
  });

  test('LOG_LEVEL=debug adds the stack of an unexpected one', (t) => {
    if (STORE !== 'sqlite') return t.skip('the unexpected failure it provokes is the journal reader\'s, on the way to sqlite');
    const dir = futureJournal(); // a plain Error from the journal reader: not one of the named failures
    try {
      const r = runCli([], { env: { DATA_DIR: dir, AUTH_SECRET: SECRET, PORT: '0', LOG_LEVEL: 'debug' }, cwd: dir });
      assert.equal(r.code, 1);
      const [first, ...rest] = r.stderr.trimEnd().split('\n');
      assert.match(first, /journal format version 99 is not supported/);
      assert.match(rest.join('\n'), /^Error: .*\n\s+at /, 'the stack follows the line');
    } finally {
      removeDir(dir);
    }
    const named = start({ HOST: 'no-such-host.invalid', LOG_LEVEL: 'debug' });
    assert.equal(named.code, 1);
    assertOneLine(named.stderr, /does not resolve/); // a named failure stays one line even then
  });
});

describe('A start that fails leaves a new data directory as it found it (issue 31, item 9)', () => {
  test('[D-running-5] with its port taken, a start fails in one line and leaves the folder as it was', async () => {
    const holder = createNetServer();
    await new Promise((resolve) => holder.listen(0, '127.0.0.1', resolve));
    const port = holder.address().port;
    const dir = tempDir();
    try {
      const absent = join(dir, 'absent');
      const seeded = join(dir, 'seeded');
      mkdirSync(seeded);
      writeFileSync(join(seeded, 'providers.json'), '[]', { mode: 0o600 });
      for (const dataDir of [absent, seeded]) {
        const before = existsSync(dataDir) ? readdirSync(dataDir).sort() : null;
        // no AUTH_SECRET: a start that got further would generate one into the folder
        const r = spawnSync(process.execPath, [SERVER], {
          cwd: dir,
          env: { PATH: process.env.PATH, PORT: String(port), HOST: '127.0.0.1', DATA_DIR: dataDir, ...storeEnv(dataDir) },
          encoding: 'utf8',
          timeout: 30_000,
        });
        assert.equal(r.status, 1, r.stderr);
        assertOneLine(r.stderr, new RegExp(`^${NAME}: the address is already in use \\(PORT/HOST\\): .*EADDRINUSE`));
        assert.deepEqual(existsSync(dataDir) ? readdirSync(dataDir).sort() : null, before, `${dataDir}: nothing created`);
      }
    } finally {
      await new Promise((resolve) => holder.close(resolve));
      removeDir(dir);
    }
  });
});

describe('[D-running-6] an explicitly configured PROVIDERS_FILE must exist', () => {
  test('a missing one stops the start (exit 1); the default one may be missing (no providers)', async () => {
    const dir = tempDir();
    try {
      const missing = join(dir, 'providers-typo.json');
      const r = runCli([], { env: { DATA_DIR: join(dir, 'data'), PROVIDERS_FILE: missing, AUTH_SECRET: SECRET, PORT: '0' }, cwd: dir });
      assert.equal(r.code, 1);
      assert.equal(r.stderr, `${NAME}: providers file ${missing} (PROVIDERS_FILE) does not exist\n`);
      assert.equal(existsSync(join(dir, 'data', 'chat-sessions.db')), false, 'nothing was created');
      const s = await startServer({ providers: null });
      try {
        assert.deepEqual((await s.as('a').get('/api/v1/providers')).body.data, []);
      } finally {
        await s.stop();
        removeDir(s.dataDir);
      }
    } finally {
      removeDir(dir);
    }
  });

  test('a reload that finds it gone keeps the old list', async () => {
    const dir = tempDir();
    const file = join(dir, 'providers.json');
    writeFileSync(file, JSON.stringify([{ _id: 'aaaaaaaaaaaaaaaaaaaaaaa1', name: 'Kept' }]));
    const s = await startServer({ providers: null, env: { PROVIDERS_FILE: file } });
    try {
      unlinkSync(file);
      const failed = new Promise((resolve) => {
        const check = () => (s.logs().some((l) => l.msg === 'providers reload failed; keeping the previous list') ? resolve() : setTimeout(check, 20));
        check();
      });
      s.child.kill('SIGHUP');
      await failed;
      const list = (await s.as('a').get('/api/v1/providers')).body.data;
      assert.deepEqual(list.map((p) => p.name), ['Kept']);
    } finally {
      await s.stop();
      removeDir(s.dataDir);
      removeDir(dir);
    }
  });
});

describe('The CLI', () => {
  test('[D-running-7] export into a reader that goes away ends quietly, exit 141 as SIGPIPE would', async () => {
    const dir = tempDir();
    try {
      // enough sessions that the export is still writing when the reader is gone
      const lines = [JSON.stringify({ format: 'chat-session-api/export', version: 1, exportedAt: '2026-01-01T00:00:00.000Z', sessions: 5000, turns: 0 })];
      for (let i = 0; i < 5000; i++) {
        const id = `6b000000${i.toString(16).padStart(16, '0')}`;
        lines.push(JSON.stringify({ session: { _id: id, name: `s${i}`.padEnd(400, '.'), provider: 'p', selectedModel: 'm', mode: 'Build', user: 'u', project: 'p', createdAt: '2026-01-01T00:00:00.000Z', updatedAt: '2026-01-01T00:00:00.000Z', archived: false } }));
      }
      writeFileSync(join(dir, 'backup.ndjson'), lines.join('\n') + '\n');
      const imported = runCli(['import', join(dir, 'backup.ndjson')], { env: { DATA_DIR: join(dir, 'data') } });
      assert.equal(imported.code, 0, imported.stderr);
      // the reader takes one line and closes the pipe: the export meets EPIPE on a later write
      const child = spawn(process.execPath, [SERVER, 'export'], { env: { PATH: process.env.PATH, DATA_DIR: join(dir, 'data'), ...storeEnv(join(dir, 'data')) }, stdio: ['ignore', 'pipe', 'pipe'] });
      let stderr = '';
      child.stderr.on('data', (d) => (stderr += d));
      const firstLine = await new Promise((resolve) => {
        let got = '';
        child.stdout.on('data', (d) => {
          got += d;
          if (got.includes('\n')) {
            child.stdout.destroy();
            resolve(got.slice(0, got.indexOf('\n')));
          }
        });
        child.stdout.on('end', () => resolve(got)); // no line at all: the assertions below say why
      });
      const code = await new Promise((resolve) => child.on('exit', (c) => resolve(c)));
      assert.match(firstLine, /^\{"format":"chat-session-api\/export"/);
      assert.equal(stderr, '');
      assert.equal(code, 141);
    } finally {
      removeDir(dir);
    }
  });

  test('[D-running-8] a repeated option is refused: `repeated option --sub: give it once`, exit 2', () => {
    const cases = [
      [['token', '--sub', 'a', '--sub', 'b'], '--sub'],
      [['token', '--sub=a', '--sub', 'b'], '--sub'],
      [['token', '--sub', 'a', '--ttl', '1h', '--ttl=2h'], '--ttl'],
      [['token', '--sub', 'a', '--scope', 'sessions:read', '--scope', 'providers:read'], '--scope'],
      [['--port', '1', '--port', '2'], '--port'],
      [['export', '--out', 'a', '--out', 'b'], '--out'],
    ];
    for (const [args, flag] of cases) {
      const r = runCli(args, { env: { AUTH_SECRET: SECRET } });
      assert.equal(r.code, 2, args.join(' '));
      assert.equal(r.stderr, `${NAME}: repeated option ${flag}: give it once\n`, args.join(' '));
      assert.equal(r.stdout, '');
    }
  });

  test('[D-security-2] token refuses what the server would: a --sub over 200 characters, an unknown or empty --scope', async () => {
    const env = { AUTH_SECRET: SECRET };
    const long = runCli(['token', '--sub', 'a'.repeat(201)], { env });
    assert.equal(long.code, 2);
    assert.equal(long.stderr, `${NAME}: --sub must be at most 200 characters (got 201)\n`);
    for (const scope of ['', '   ']) {
      const r = runCli(['token', '--sub', 'a', '--scope', scope], { env });
      assert.equal(r.code, 2, JSON.stringify(scope));
      assert.match(r.stderr, /--scope needs at least one of: sessions:read, sessions:write, providers:read/);
    }
    const unknown = runCli(['token', '--sub', 'a', '--scope', 'sessions:read admin'], { env });
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /unknown scope\(s\) admin/);
    // what it does print, the server accepts
    const s = await startServer();
    try {
      const edge = runCli(['token', '--sub', 'b'.repeat(200), '--scope', 'providers:read'], { env });
      assert.equal(edge.code, 0, edge.stderr);
      assert.equal((await s.request('GET', '/api/v1/providers', { token: edge.stdout.trim() })).status, 200);
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('[D-security-3] AUTH_PREVIOUS_SECRETS_FILE holds previous keys, one a line; not with AUTH_PREVIOUS_SECRETS', async () => {
    const dir = tempDir();
    try {
      const old1 = 'old-key-one-0123456789abcdef0123456789abcdef';
      const old2 = 'old-key-two-0123456789abcdef0123456789abcdef';
      const file = join(dir, 'previous-secrets');
      writeFileSync(file, `${old1}\n\n${old2}\n`, { mode: 0o600 });
      chmodSync(file, 0o600);
      const s = await startServer({ env: { AUTH_PREVIOUS_SECRETS_FILE: file } });
      try {
        for (const key of [SECRET, old1, old2]) {
          const t = runCli(['token', '--sub', 'rot'], { env: { AUTH_SECRET: key } }).stdout.trim();
          assert.equal((await s.request('GET', '/api/v1/providers', { token: t })).status, 200, key);
        }
        const other = runCli(['token', '--sub', 'rot'], { env: { AUTH_SECRET: 'not-a-key-we-know-0123456789abcdef0123456789' } }).stdout.trim();
        assert.equal((await s.request('GET', '/api/v1/providers', { token: other })).status, 401);
        assert.equal(s.logs().some((l) => /readable by others/.test(l.msg ?? '')), false);
      } finally {
        await s.stop();
        removeDir(s.dataDir);
      }
      const both = runCli([], { env: { AUTH_SECRET: SECRET, AUTH_PREVIOUS_SECRETS: old1, AUTH_PREVIOUS_SECRETS_FILE: file } });
      assert.equal(both.code, 2);
      assert.equal(both.stderr, `${NAME}: AUTH_PREVIOUS_SECRETS and AUTH_PREVIOUS_SECRETS_FILE are both set; set one of them\n`);
      writeFileSync(file, 'short\n');
      const short = runCli([], { env: { AUTH_SECRET: SECRET, AUTH_PREVIOUS_SECRETS_FILE: file, PORT: '0', DATA_DIR: join(dir, 'd') } });
      assert.equal(short.code, 2);
      assert.equal(short.stderr, `${NAME}: AUTH_PREVIOUS_SECRETS_FILE line 1 must be at least 32 bytes (got 5)\n`);
      const missing = runCli([], { env: { AUTH_SECRET: SECRET, AUTH_PREVIOUS_SECRETS_FILE: join(dir, 'nope'), PORT: '0', DATA_DIR: join(dir, 'd') } });
      assert.equal(missing.code, 2);
      assert.match(missing.stderr, /AUTH_PREVIOUS_SECRETS_FILE: cannot read .*nope \(ENOENT\)/);
      assert.match(runCli(['--help']).stdout, /AUTH_PREVIOUS_SECRETS_FILE \/ --auth-previous-secrets-file/);
    } finally {
      removeDir(dir);
    }
  });
});

test('the harness: a server that does not exit after its signal is killed and the stop fails, saying so', async () => {
  const s = await startServer();
  try {
    // a stopped process takes its SIGTERM only once continued: it cannot exit by itself
    s.child.kill('SIGSTOP');
    await assert.rejects(s.stop('SIGTERM', { waitMs: 500 }), /^Error: the server did not exit within 0\.5 s after SIGTERM; it was killed \(SIGKILL\)$/);
    assert.deepEqual(await s.exit, { code: null, signal: 'SIGKILL' });
  } finally {
    await s.kill();
    removeDir(s.dataDir);
  }
});
