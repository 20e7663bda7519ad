// The live feed in a real browser (docs/DECISIONS.md, "Live events"): headless Chromium, driven
// over the DevTools pipe, loads a page from another origin (so CORS is exercised as a front end
// on its own host meets it), trades a token minted with the CLI for a ticket, opens an
// EventSource on a session's stream, and sees the turns recorded through the API arrive, a streaming turn with its deltas too; then,
// as a reloaded page does, comes back with a new ticket and lastEventId and gets what it missed.
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { after, before, describe, test } from 'node:test';
import { Browser, chromiumOrSkip } from '../chromium.mjs';
import { newSession, removeDir, runCli, SECRET, startServer } from '../helpers.mjs';

const PAGE = `<!doctype html><meta charset="utf-8"><title>live feed</title>
<script>
  // what a chat front end does: a ticket for the stream (EventSource cannot send a header), then the stream
  window.seen = [];
  window.follow = async (api, token, sessionId, lastEventId) => {
    const r = await fetch(api + '/api/v1/events/tickets', { method: 'POST', headers: { Authorization: 'Bearer ' + token } });
    if (r.status !== 201) return r.status;
    const { data } = await r.json();
    const from = lastEventId ? '&lastEventId=' + encodeURIComponent(lastEventId) : '';
    const es = new EventSource(api + '/api/v1/chat-sessions/' + sessionId + '/events?ticket=' + data.ticket + from);
    for (const type of ['ready', 'reset', 'turn.created', 'turn.delta', 'turn.updated', 'session.updated', 'end']) {
      es.addEventListener(type, (e) => window.seen.push({ type, id: e.lastEventId, data: JSON.parse(e.data) }));
    }
    es.onerror = () => window.seen.push({ type: 'error', readyState: es.readyState });
    window.es = es;
    return r.status;
  };
</script>`;

let api;
let page;
let pageUrl;
before(async () => {
  page = createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end(PAGE);
  });
  await new Promise((r) => page.listen(0, '127.0.0.1', r));
  pageUrl = `http://127.0.0.1:${page.address().port}`;
  api = await startServer({ env: { CORS_ORIGIN: pageUrl } });
});
after(async () => {
  await api.stop();
  removeDir(api.dataDir);
  await new Promise((r) => page.close(r));
});

describe('The live feed in a browser', () => {
  test('[D-openapi-10] in Chromium, an EventSource on another origin with a ticket gets turns, deltas, and resumes', async (t) => {
    if (!chromiumOrSkip(t, 'the live feed was not tried in a browser')) return;
    const minted = runCli(['token', '--sub', 'browser-user'], { env: { AUTH_SECRET: SECRET } });
    assert.equal(minted.code, 0, minted.stderr);
    const token = minted.stdout.trim();
    const made = await api.request('POST', '/api/v1/chat-sessions', { token, json: newSession({ name: 'watched in a browser' }) });
    assert.equal(made.status, 201);
    const id = made.body.data._id;

    const browser = await Browser.launch();
    try {
      const problems = [];
      browser.on((method, p) => {
        if (method === 'Runtime.exceptionThrown') problems.push(p.exceptionDetails.exception?.description ?? p.exceptionDetails.text);
        if (method === 'Log.entryAdded' && p.entry.level === 'error') problems.push(`${p.entry.source}: ${p.entry.text}`);
      });
      await Promise.all([browser.send('Page.enable'), browser.send('Runtime.enable'), browser.send('Log.enable')]);
      const seenOnPage = async (test, what) => {
        for (let i = 0; i < 400; i++) {
          const found = await browser.evaluate(`window.seen.find(${test}) ?? null`);
          if (found !== null) return found;
          await new Promise((r) => setTimeout(r, 25));
        }
        throw new Error(`the page never saw ${what}; it saw ${JSON.stringify(await browser.evaluate('window.seen'))}; problems: ${problems.join('; ')}`);
      };
      const follow = (lastEventId) => browser.evaluate(`window.follow(${JSON.stringify(api.url)}, ${JSON.stringify(token)}, ${JSON.stringify(id)}, ${JSON.stringify(lastEventId ?? '')})`);

      let loaded = browser.waitFor('Page.loadEventFired');
      await browser.send('Page.navigate', { url: pageUrl });
      await loaded;
      assert.equal(await follow(), 201, 'the ticket, through a CORS preflight');
      await seenOnPage(`(e) => e.type === 'ready'`, 'the stream open (ready)');

      const turns = [];
      for (const content of ['first turn', 'second turn']) {
        const r = await api.request('POST', `/api/v1/chat-sessions/${id}/turns`, { token, json: { role: 'user', content } });
        assert.equal(r.status, 201);
        turns.push(r.body.data);
        const seen = await seenOnPage(`(e) => e.type === 'turn.created' && e.data._id === ${JSON.stringify(r.body.data._id)}`, content);
        assert.deepEqual(seen.data, r.body.data, 'the turn as the API answered it');
      }
      // a reply that streams in: the turn, then its deltas, then its completion
      const streaming = (await api.request('POST', `/api/v1/chat-sessions/${id}/turns`, { token, json: { role: 'assistant', content: 'Stream', status: 'streaming' } })).body.data;
      await seenOnPage(`(e) => e.type === 'turn.created' && e.data._id === ${JSON.stringify(streaming._id)}`, 'the streaming turn');
      for (const text of ['ing in', ' a browser']) {
        const r = await api.request('POST', `/api/v1/chat-sessions/${id}/turns/${streaming._id}/deltas`, { token, json: { text } });
        assert.equal(r.status, 200, r.text);
      }
      await api.request('PUT', `/api/v1/chat-sessions/${id}/turns/${streaming._id}`, { token, json: { status: 'complete' } });
      const completed = await seenOnPage(`(e) => e.type === 'turn.updated'`, 'the turn completed');
      const deltas = await browser.evaluate(`window.seen.filter((e) => e.type === 'turn.delta').map((e) => e.data)`);
      assert.deepEqual(deltas, [
        { _id: streaming._id, session: id, text: 'ing in', at: 6 },
        { _id: streaming._id, session: id, text: ' a browser', at: 12 },
      ], 'each delta, in order, with where it goes');
      assert.equal(completed.data.content, 'Streaming in a browser');
      assert.equal(completed.data.status, 'complete');
      const last = await browser.evaluate('window.seen.at(-1).id');
      assert.ok(last !== '', 'the page knows the last event id');

      // a reload: the stream is gone; a turn is recorded meanwhile
      loaded = browser.waitFor('Page.loadEventFired');
      await browser.send('Page.reload');
      await loaded;
      const missed = (await api.request('POST', `/api/v1/chat-sessions/${id}/turns`, { token, json: { role: 'assistant', content: 'while you were away' } })).body.data;
      assert.equal(await follow(last), 201);
      await seenOnPage(`(e) => e.type === 'ready'`, 'the stream open again');
      const order = await browser.evaluate('window.seen.map((e) => e.type)');
      assert.deepEqual(order.filter((x) => x !== 'session.updated'), ['turn.created', 'ready'], 'what it missed, then ready');
      assert.deepEqual((await seenOnPage(`(e) => e.type === 'turn.created'`, 'the missed turn')).data, missed);
      assert.deepEqual(problems, []);
    } finally {
      await browser.close();
    }
  });
});
