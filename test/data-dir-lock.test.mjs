// shared/DECISIONS.md, Durability: one server per data directory. Taking over a stale lock is
// a check (the holder is gone) then an act (replace the file); a test-only pause holds one
// starter between the two while another starts, which is how two servers came to share one
// directory (issue #16, item 10).
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { waitFor } from './api-kit.mjs';
import { newSession, removeDir, SECRET, SERVER, ServerProcess, startServer, tempDir } from './helpers.mjs';

/** The pid of a process that has exited: a lock naming it is stale. */
function deadPid() {
  return spawnSync(process.execPath, ['-e', '']).pid;
}

const linux = process.platform === 'linux';
const strace = spawnSync('strace', ['-V']).status === 0;
if (!strace) process.stderr.write('\n*** SKIPPING the no-AF_UNIX lock test: strace is not installed (apt-get install strace) ***\n\n');

describe('One server per data directory', { skip: linux ? false : 'the exclusive takeover uses a Linux abstract socket' }, () => {
  test('[D-datadir-3] a second starter arriving while the first is between its check and its act refuses to start', async () => {
    const dir = tempDir();
    const pauseDir = tempDir('csa-pause-');
    writeFileSync(join(dir, 'lock'), JSON.stringify({ pid: deadPid(), host: hostname(), startedAt: '2020-01-01T00:00:00.000Z' }));
    const first = startServer({ dataDir: dir, env: { CHAT_SESSION_API_PAUSE: `lock-takeover:${pauseDir}` } });
    first.catch(() => {}); // judged below
    const servers = [];
    try {
      await waitFor(() => readdirSync(pauseDir).some((f) => f.startsWith('paused-')), 'the first starter to pause before replacing the stale lock');
      const second = await startServer({ dataDir: dir }).then(
        (s) => (servers.push(s), { served: true }),
        (e) => ({ served: false, message: e.message }),
      );
      writeFileSync(join(pauseDir, 'resume'), '');
      const a = await first;
      servers.push(a);
      assert.equal(second.served, false, 'two servers were serving one data directory');
      assert.match(second.message, /data directory .* is in use by (process \d+|another process)/);
      // the one that holds it serves and writes
      assert.equal((await a.as('alice').post('/api/v1/chat-sessions', newSession())).status, 201);
      assert.equal(JSON.parse(readFileSync(join(dir, 'lock'), 'utf8')).pid, a.child.pid);
    } finally {
      writeFileSync(join(pauseDir, 'resume'), '');
      for (const s of servers) await s.stop();
      removeDir(dir);
      removeDir(pauseDir);
    }
  });

  test('the directory stays held by its server even when its lock file is removed', async () => {
    const s = await startServer();
    try {
      unlinkSync(join(s.dataDir, 'lock'));
      await assert.rejects(startServer({ dataDir: s.dataDir }), /is in use by another process, which its lock file does not name/);
      assert.ok(!existsSync(join(s.dataDir, 'lock')), 'the refused starter wrote no lock');
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('[D-datadir-3] without AF_UNIX (a sandbox) the server warns, and the lock file alone keeps other servers out', { skip: strace ? false : 'strace is not installed' }, async () => {
    const dir = tempDir();
    // the server's first socket() tries its address (a start that cannot have it makes nothing); the second is the guard's: strace fails it as a seccomp filter would
    const child = spawn('strace', ['-f', '-qq', '-o', '/dev/null', '-e', 'trace=socket', '-e', 'inject=socket:error=EPERM:when=2', process.execPath, SERVER], {
      env: { PATH: process.env.PATH, PORT: '0', HOST: '127.0.0.1', DATA_DIR: dir, AUTH_SECRET: SECRET },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.unref();
    child.stdout.unref();
    child.stderr.unref();
    const s = new ServerProcess(child, dir);
    let pid;
    try {
      await s.listening(20_000);
      pid = JSON.parse(readFileSync(join(dir, 'lock'), 'utf8')).pid;
      const warn = s.logs().find((l) => l.level === 'warn' && /socket name/.test(l.msg));
      assert.equal(warn?.code, 'EPERM');
      await assert.rejects(startServer({ dataDir: dir }), new RegExp(`in use by process ${pid}\\b`));
    } finally {
      // the server, not strace: a signal to strace would leave the server running
      if (pid === undefined && existsSync(join(dir, 'lock'))) pid = JSON.parse(readFileSync(join(dir, 'lock'), 'utf8')).pid;
      if (pid !== undefined) process.kill(pid, 'SIGTERM');
      else child.kill('SIGKILL');
      await s.exit;
      removeDir(dir);
    }
  });
});
