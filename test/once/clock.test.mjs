// docs/DECISIONS.md, Operating and Sessions and turns: what a step of the wall clock does to
// rate limits and timestamps. The server runs under libfaketime (Debian's faketime package),
// whose offset is read from a file on every clock call, so a test steps the clock of the
// running process; the monotonic clock is left alone, as a real step of the clock leaves it.
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { newSession, removeDir, startServer, tempDir, tokenFor } from '../helpers.mjs';

function findLibfaketime() {
  const dirs = ['/usr/lib', '/usr/local/lib'];
  for (const base of dirs) {
    if (!existsSync(base)) continue;
    for (const sub of ['', ...readdirSync(base)]) {
      const lib = join(base, sub, 'faketime', 'libfaketimeMT.so.1');
      if (existsSync(lib)) return lib;
    }
  }
  return undefined;
}

const LIB = findLibfaketime();
const REQUIRED = process.env.REQUIRE_FAKETIME === '1';
const SKIP = LIB === undefined && !REQUIRED ? 'libfaketime not found: apt-get install faketime (REQUIRE_FAKETIME=1 makes this a failure)' : false;
if (SKIP) process.stderr.write(`\n*** SKIPPING the clock-step tests: ${SKIP} ***\n\n`);

const DAY = 86_400_000;

/** A server whose wall clock the test moves; `set('-600')` steps it (libfaketime offsets). */
async function serverWithClock(env = {}) {
  assert.ok(LIB !== undefined, 'libfaketime is required (REQUIRE_FAKETIME=1): apt-get install faketime');
  const clockDir = tempDir('csa-clock-');
  const file = join(clockDir, 'offset');
  writeFileSync(file, '+0\n');
  const s = await startServer({
    env: { LD_PRELOAD: LIB, FAKETIME_TIMESTAMP_FILE: file, FAKETIME_NO_CACHE: '1', FAKETIME_DONT_FAKE_MONOTONIC: '1', ...env },
  });
  /** Steps the server's clock to real time + `offsetMs` and waits until its Date header shows it. */
  const set = async (offsetMs) => {
    writeFileSync(file, `${offsetMs >= 0 ? '+' : ''}${offsetMs / 1000}\n`);
    const started = Date.now();
    for (;;) {
      const date = Date.parse((await s.request('GET', '/healthz')).headers.date);
      if (Math.abs(date - (Date.now() + offsetMs)) < 60_000) return;
      if (Date.now() - started > 15_000) throw new Error(`the server's clock did not move to ${offsetMs} ms`);
      await new Promise((r) => setTimeout(r, 50));
    }
  };
  return { s, set, cleanup: () => removeDir(clockDir) };
}

describe('A step of the wall clock', { skip: SKIP }, () => {
  test('[D-logs-3] the wall clock stepped back 600 s, or a day forward and back, locks nobody out of a rate limit', async () => {
    const { s, set, cleanup } = await serverWithClock({ RATE_LIMIT: '100/s' });
    try {
      const token = tokenFor('alice', { exp: undefined }); // no exp: valid whatever the server's clock says
      const list = () => s.request('GET', '/api/v1/chat-sessions', { token });
      assert.equal((await list()).status, 200);
      await set(-600_000);
      const back = await list();
      assert.equal(back.status, 200, `after the clock stepped back 600 s: ${back.status} Retry-After ${back.headers['retry-after']}`);
      await set(DAY);
      assert.equal((await list()).status, 200);
      await set(0);
      const home = await list();
      assert.equal(home.status, 200, `after a day forward and back: ${home.status} Retry-After ${home.headers['retry-after']}`);
    } finally {
      await s.stop();
      removeDir(s.dataDir);
      cleanup();
    }
  });

  test('[D-sessions-6] a record changed while the clock ran a day ahead creeps on a millisecond a change until it passes', async () => {
    const { s, set, cleanup } = await serverWithClock();
    try {
      const u = s.as('alice', { exp: undefined });
      await set(DAY);
      const ahead = (await u.post('/api/v1/chat-sessions', newSession({ name: 'ahead' }))).body.data;
      assert.ok(Date.parse(ahead.createdAt) > Date.now() + DAY - 60_000, 'made while the clock was a day ahead');
      await set(0);
      const renamed = (await u.put(`/api/v1/chat-sessions/${ahead._id}`, { name: 'renamed' })).body.data;
      assert.equal(Date.parse(renamed.updatedAt), Date.parse(ahead.updatedAt) + 1, 'it does not go back in time: a millisecond on');
      const turn = (await u.post(`/api/v1/chat-sessions/${ahead._id}/turns`, { role: 'user', content: 'hi' })).body.data;
      assert.ok(turn.createdAt >= renamed.updatedAt, 'its turns keep their order after it');
      const fresh = (await u.post('/api/v1/chat-sessions', newSession({ name: 'fresh' }))).body.data;
      assert.ok(Math.abs(Date.parse(fresh.createdAt) - Date.now()) < 60_000, `a new session has the clock's time: ${fresh.createdAt}`);
      assert.deepEqual((await u.get('/api/v1/chat-sessions')).body.data.map((x) => x.name), ['renamed', 'fresh']);
      await set(DAY + 3_600_000);
      const later = (await u.put(`/api/v1/chat-sessions/${ahead._id}`, { name: 'later' })).body.data;
      assert.ok(Date.parse(later.updatedAt) > Date.parse(turn.createdAt), 'once the clock has passed it, it follows the clock again');
      assert.ok(Math.abs(Date.parse(later.updatedAt) - (Date.now() + DAY + 3_600_000)) < 60_000);
    } finally {
      await s.stop();
      removeDir(s.dataDir);
      cleanup();
    }
  });
});
