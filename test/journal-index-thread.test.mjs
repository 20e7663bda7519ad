// The journal's search index lives on a thread of its own (src/store/journal/word-thread.ts):
// what a write acknowledged is found by the next search, a lost thread is started again and fed
// from memory, and the thread's heap counts in the low-memory guard. Against the real server.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { metric, waitFor } from './api-kit.mjs';
import { newSession, rng, startServer, STORE } from './helpers.mjs';

const JOURNAL = STORE === 'journal' ? {} : { skip: `about the journal engine's index thread; this run tests STORE=${STORE}` };
const SEARCH = '/api/v1/search';

/** A word no other test text holds. */
function wordOf(random, n) {
  let w = 'w';
  for (let i = 0; i < 10; i++) w += String.fromCharCode(97 + Math.floor(random() * 26));
  return `${w}${n}`;
}

/** Searches until the answer is not a 503 (the index thread being started again), at most `tries` times. */
async function searchPastRestart(u, q, tries = 200) {
  for (let i = 0; i < tries; i++) {
    const r = await u.get(`${SEARCH}?q=${q}`);
    if (r.status !== 503) return r;
    assert.deepEqual(r.body, { success: false, message: 'Storage unavailable' });
  }
  throw new Error(`still 503 after ${tries} searches`);
}

describe('The journal\'s search index thread', JOURNAL, () => {
  test('"What a write acknowledged is found by the next search": a turn appended and at once searched for is found, a hundred times over, and /metrics says how far the thread is behind', async () => {
    const s = await startServer();
    try {
      const u = s.as('alice');
      const id = (await u.post('/api/v1/chat-sessions', newSession())).body.data._id;
      const random = rng(7);
      for (let i = 0; i < 100; i++) {
        const word = wordOf(random, i);
        const t = await u.post(`/api/v1/chat-sessions/${id}/turns`, { role: 'user', content: `say ${word} once` });
        assert.equal(t.status, 201);
        const r = await u.get(`${SEARCH}?q=${word}`);
        assert.equal(r.status, 200);
        assert.deepEqual(r.body.data.map((h) => h.turnId), [t.body.data._id], word);
      }
      assert.equal(typeof (await metric(s, 'chat_session_api_journal_search_unindexed')), 'number');
    } finally {
      await s.stop();
    }
  });

  test('"A search index thread that stops is started again and fed from memory": the thread lost as it takes its third change (emptying the index, the name, the first turn), every name and turn written before and after is found, searches in between answer 503, and the loss is logged', async () => {
    const s = await startServer({ env: { CHAT_SESSION_API_FAULTS: 'lose:index-thread:3' } });
    try {
      // the first feed (of an empty store: the index emptied, its first change) is done before the name and the turn come
      await waitFor(() => s.logs().some((l) => l.msg === 'search index fed from memory'), 'the first feed\'s log line');
      const u = s.as('alice');
      const random = rng(11);
      const words = [];
      let id;
      for (let i = 0; i < 6; i++) {
        const word = wordOf(random, i);
        words.push(word);
        if (i === 0) id = (await u.post('/api/v1/chat-sessions', newSession({ name: `about ${word}` }))).body.data._id;
        else assert.equal((await u.post(`/api/v1/chat-sessions/${id}/turns`, { role: 'user', content: `turn of ${word}` })).status, 201);
      }
      for (const [i, word] of words.entries()) {
        const r = await searchPastRestart(u, word);
        assert.equal(r.status, 200);
        assert.equal(r.body.data.length, 1, word);
        assert.equal(r.body.data[0].turnId === null, i === 0, 'the name, then the turns');
      }
      const lost = s.logs().filter((l) => l.msg === 'the search index thread stopped; it is started again and fed from memory, searches answer 503 meanwhile');
      assert.equal(lost.length, 1, 'lost once: the planned loss is the first thread\'s only');
      assert.equal(lost[0].level, 'error');
      // fed at the start and again after the loss (the line may reach the pipe after the answers did)
      await waitFor(() => s.logs().filter((l) => l.msg === 'search index fed from memory').length === 2, 'the second feed\'s log line');
    } finally {
      await s.stop();
    }
  });

  test('"The search index thread\'s heap counts in the low-memory guard": under a small heap (--max-old-space-size=48), turns of words never seen before fill the index thread\'s heap first; writes are refused with 503 before it runs out, the thread is never lost, and what was accepted is found', async () => {
    const s = await startServer({ nodeArgs: ['--max-old-space-size=48'], env: { FSYNC: 'off', MEMORY_LIMIT: 'off' } });
    try {
      const u = s.as('alice');
      const id = (await u.post('/api/v1/chat-sessions', newSession())).body.data._id;
      const random = rng(5);
      let accepted = 0;
      let refusal;
      const firsts = [];
      // each turn ~150 new words: ~15 KB of the index thread's heap, ~1.6 KB of JSON off the main thread's
      for (let i = 0; i < 20_000 && refusal === undefined; i++) {
        const words = Array.from({ length: 150 }, (_, k) => wordOf(random, `${i}x${k}`));
        const r = await u.post(`/api/v1/chat-sessions/${id}/turns`, { role: 'user', content: words.join(' ') }, { keepAlive: true });
        if (r.status === 201) {
          accepted++;
          firsts.push(words[0]);
        } else refusal = r;
      }
      assert.ok(refusal !== undefined, 'refused before 20,000 turns');
      assert.deepEqual({ status: refusal.status, body: refusal.body }, { status: 503, body: { success: false, message: 'Server is low on memory' } });
      assert.ok(accepted > 100, `accepted ${accepted} turns first`);
      for (const word of [firsts[0], firsts[Math.floor(accepted / 2)], firsts[accepted - 1]]) {
        const r = await u.get(`${SEARCH}?q=${word}`);
        assert.equal(r.status, 200);
        assert.equal(r.body.data.length, 1, word);
      }
      assert.deepEqual(s.logs().filter((l) => /search index thread stopped/.test(l.msg)), [], 'the index thread was never lost');
      assert.equal(s.child.exitCode, null);
    } finally {
      await s.stop();
    }
  });

  test('"A change too long for the ring travels in a message of its own": a turn of 5 MiB (the ring holds 4) is found, one deleted at once is not, and the turns after each are found', async () => {
    const s = await startServer({ env: { BODY_LIMIT: '8mb', MEMORY_LIMIT: 'off' } });
    try {
      const u = s.as('alice');
      const id = (await u.post('/api/v1/chat-sessions', newSession())).body.data._id;
      const random = rng(13);
      const [kept, gone, after, last] = [0, 1, 2, 3].map((i) => wordOf(random, i));
      const filler = ' and so on'.repeat(520_000);
      const turns = `/api/v1/chat-sessions/${id}/turns`;
      const k = await u.post(turns, { role: 'user', content: `${kept}${filler}` });
      assert.equal(k.status, 201);
      const g = await u.post(turns, { role: 'assistant', content: `${gone}${filler}` });
      assert.equal(g.status, 201);
      // its removal comes after it, however far behind the thread is (in the ring it would be taken first)
      assert.equal((await u.del(`${turns}/${g.body.data._id}`)).status, 200);
      const a = await u.post(turns, { role: 'user', content: `then ${after}` });
      assert.equal(a.status, 201);
      assert.deepEqual((await u.get(`${SEARCH}?q=${kept}`)).body.data.map((h) => h.turnId), [k.body.data._id]);
      assert.deepEqual((await u.get(`${SEARCH}?q=${gone}`)).body.data, []);
      assert.deepEqual((await u.get(`${SEARCH}?q=${after}`)).body.data.map((h) => h.turnId), [a.body.data._id]);
      const l = await u.post(turns, { role: 'assistant', content: `and ${last}` });
      assert.deepEqual((await u.get(`${SEARCH}?q=${last}`)).body.data.map((h) => h.turnId), [l.body.data._id]);
    } finally {
      await s.stop();
    }
  });
});
