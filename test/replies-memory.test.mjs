// Memory with a thousand replies in progress and listeners that stop reading (issue 30, point
// 5), in a memory cgroup (the kernel's OOM killer as the ceiling). Made of counts, never of
// timings: the local provider holds every reply after its first token until all of them are in
// progress at once, then lets them go; the listeners have stopped reading by then.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { test } from 'node:test';
import { metric, waitFor } from './api-kit.mjs';
import { memoryCgroup, newSession, removeDir, startServer } from './helpers.mjs';
import { startProvider } from './provider/server.mjs';

const B = '/api/v1/chat-sessions';
const PROVIDER_ID = '6f00000000000000000000c1';
/**
 * Replies of a few tokens: their listeners stop reading, and what the server writes them fits in
 * the kernel's socket buffers. With the long ones, a thousand in all: REPLIES_MAX's default, the
 * most one instance takes in progress at once.
 */
const SMALL = 998;
const SMALL_TOKENS = 20;
/**
 * Replies long enough that their stopped listeners are cut off: some 150 bytes of event a token,
 * 15 MB in all, past the most Linux buffers for a connection whose reader stopped (tcp_wmem's 4
 * MiB on the sender's side and tcp_rmem's 6 MiB on the reader's; 4.3 MB was seen, but a reader
 * that read a little longer before it stopped lets its buffer grow, and 6 MB was once not enough
 * on PostgreSQL) and past EVENTS_BUFFER.
 */
const BIG = 2;
const BIG_TOKENS = 100_000;
const EVENTS_BUFFER = 256 * 1024;
/**
 * The ceiling, and the bound on the server's peak RSS. Measured here: an idle server 70-100 MiB
 * (the runtime, the code, sqlite's cache), and about 60 KiB more for each reply in progress with
 * its event stream (the listener's socket and response, the provider's request and its parser,
 * the reply's state), some 60 MiB for a thousand; the two cut streams hold EVENTS_BUFFER each
 * until they are cut; the live feed's window is capped by EVENTS_WINDOW_MEMORY (8 MiB here).
 * Twice that sum leaves room for the garbage collector's slack: 384 MiB, and the ceiling above it.
 * On PostgreSQL each token's event waits for the shared log's append; a reply holds at most 64
 * of them before it stops reading its provider (TOLD_AHEAD_MAX), so a server starved of CPU holds
 * no more (without that bound it peaked at 416 MiB beside the whole suite; with it 194-203, alone
 * or beside three busy loops).
 */
const RSS_BOUND = 384 * 1024 * 1024;
const CEILING = 512 * 1024 * 1024;

/** `fn(i)` for i = 0..n-1, `width` at a time. */
async function inParallel(n, width, fn) {
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < n) await fn(next++);
    }),
  );
}

/**
 * POST .../messages with Accept: text/event-stream on a raw socket, read until the reply's first
 * piece of text has come, then no more (the socket paused). `resume()` reads the rest; `ended`
 * resolves with everything read once the server has closed the answer.
 */
async function listenThenStop(port, token, session) {
  const socket = connect(port, '127.0.0.1');
  socket.on('error', () => undefined);
  await new Promise((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  let got = '';
  let stopped = false;
  socket.setEncoding('utf8');
  const firstPiece = new Promise((resolve, reject) => {
    socket.on('data', (d) => {
      got += d;
      if (stopped) return; // reading again after resume(): not to be paused a second time
      if (!got.startsWith('HTTP/1.1 200') && got.includes('\r\n\r\n')) reject(new Error(`the stream was refused: ${got}`));
      else if (got.includes('event: turn.delta')) {
        stopped = true;
        socket.pause();
        resolve();
      }
    });
    socket.once('close', () => reject(new Error(`the stream closed before the reply's first piece: ${got}`)));
  });
  const ended = new Promise((resolve) => socket.once('close', () => resolve(got)));
  const body = JSON.stringify({ content: 'say it' });
  socket.write(`POST ${B}/${session}/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\nAccept: text/event-stream\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
  await firstPiece;
  return {
    ended,
    resume: () => socket.resume(),
    destroy: () => socket.destroy(),
    /** Closes once the answer is read to its end (the server ends it; the socket may stay open, kept alive). */
    closeAtEnd: () => socket.on('data', () => got.endsWith('0\r\n\r\n') && socket.end()),
  };
}

/** The server's resident memory at its highest so far (VmHWM), in bytes. */
const peakRss = (pid) => Number(/^VmHWM:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) * 1024;

test('"memory stays bounded with a thousand replies in progress and slow listeners": all recorded whole, unkilled', async (t) => {
  const cgroup = memoryCgroup(t, CEILING);
  if (cgroup === undefined) return;
  const provider = await startProvider({ log: false });
  // a server that does not start must not leave the provider (and the test process) running
  const s = await startServer({
    cgroup,
    providers: [{ _id: PROVIDER_ID, name: 'Local Ollama', type: 'ollama', baseUrl: provider.url }],
    // a thousand event streams: MAX_STREAMS (half of MAX_CONNECTIONS by default) past them
    // the held replies wait at the provider for as long as the thousand take to open on a loaded
    // machine: no idle timeout may end them first (STREAMING_IDLE past it, as PostgreSQL asks)
    env: { MAX_CONNECTIONS: '3000', MAX_STREAMS: '2000', EVENTS_BUFFER: String(EVENTS_BUFFER), EVENTS_WINDOW_MEMORY: '8mb', FSYNC: 'off', PROVIDER_IDLE_TIMEOUT: '60m', STREAMING_IDLE: '120m' },
  }).catch(async (e) => {
    await provider.close();
    cgroup.release();
    throw e;
  });
  const listeners = [];
  try {
    const n = SMALL + BIG;
    const sessions = new Array(n);
    // one user each: no user's stream limit is what is tested
    await inParallel(n, 16, async (i) => {
      const u = s.as(`listener-${i}`);
      const model = `tokens:${i < BIG ? BIG_TOKENS : SMALL_TOKENS}+hold-after:1`;
      const r = await u.post(B, newSession({ providerId: PROVIDER_ID, selectedModel: model }));
      assert.equal(r.status, 201, r.text);
      sessions[i] = { id: r.body.data._id, u };
    });
    await inParallel(n, 50, async (i) => {
      listeners[i] = await listenThenStop(s.port, sessions[i].u.token, sessions[i].id);
    });
    // every reply has told its first piece and waits at the provider: all in progress at once
    await waitFor(async () => provider.held === n && (await metric(s, 'chat_session_api_replies_in_progress')) === n, 'a thousand replies in progress', 120_000);
    provider.release();
    await waitFor(async () => (await metric(s, 'chat_session_api_replies_total{status="complete"}')) === n, 'every reply to complete', 120_000);
    assert.equal(s.child.exitCode, null, 'the server is alive');
    assert.equal(s.child.signalCode, null, 'the server was not killed');
    // the feed trails the store (on PostgreSQL its events come back through the shared log): the
    // replies' last events may reach their streams after the replies are recorded. Every stream
    // ends once its reply's last event has reached it, cut as slow or done: counted, not timed
    const ended = async () => {
      const text = (await s.request('GET', '/metrics', { keepAlive: false })).text;
      const by = Object.fromEntries([...text.matchAll(/^chat_session_api_event_streams_ended_total\{reason="(\w+)"\} (\d+)$/gm)].map((m) => [m[1], Number(m[2])]));
      return { by, all: Object.values(by).reduce((a, b) => a + b, 0) };
    };
    await waitFor(async () => (await ended()).all >= n, 'every listener\'s stream to end', 120_000).catch(() => undefined);
    const { by } = await ended();
    assert.deepEqual(by, { slow: BIG, done: SMALL }, 'the listeners of the long replies were cut off as slow, and only they; every other stream ended after its last event');
    const peak = peakRss(s.child.pid);
    t.diagnostic(`peak RSS ${(peak / 2 ** 20).toFixed(0)} MiB`);
    assert.ok(peak < RSS_BOUND, `peak RSS ${(peak / 2 ** 20).toFixed(0)} MiB, bound ${RSS_BOUND / 2 ** 20} MiB`);
    // recorded whole, whatever their listeners did
    await inParallel(n, 16, async (i) => {
      const turns = (await sessions[i].u.get(`${B}/${sessions[i].id}/turns`)).body.data;
      const reply = turns[1];
      assert.equal(reply.status, 'complete');
      assert.equal(reply.content.split(' ').length, i < BIG ? BIG_TOKENS : SMALL_TOKENS);
    });
    // reading again, a cut listener gets the final event saying why; the others their reply to its end
    for (const l of listeners) {
      l.closeAtEnd();
      l.resume();
    }
    for (let i = 0; i < BIG; i++) assert.match(await listeners[i].ended, /event: end\ndata: \{"reason":"slow"\}\n\n\r\n0\r\n\r\n$/);
    for (let i = BIG; i < BIG + 10; i++) {
      const got = await listeners[i].ended;
      assert.match(got, /event: turn\.updated\ndata: \{[^\n]*"status":"complete"[^\n]*\}\n\n\r\n0\r\n\r\n$/);
      assert.equal((got.match(/event: turn\.delta/g) ?? []).length, SMALL_TOKENS);
    }
    // SIGTERM in this state (a thousand streams ended, most listeners still connected) ends the
    // server cleanly; stop() fails if it does not exit
    assert.deepEqual(await s.stop(), { code: 0, signal: null }, 'the server exits 0 after SIGTERM');
  } finally {
    for (const l of listeners) l?.destroy();
    await s.stop();
    await provider.close();
    cgroup.release();
    removeDir(s.dataDir);
  }
});
