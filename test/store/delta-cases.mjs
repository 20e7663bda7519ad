// The store contract for streaming turns' deltas and for usage's tokens, run in-process against
// each engine (contract.test.mjs): a delta is stored apart from its turn and every read folds it
// in, so each case checks what the store answers against the turn made again piece by piece,
// as a store that rewrote the turn would have it.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { ENGINES, kit, openOn } from './engines.mjs';
import { NO_USAGE, usageOfItems } from './fixtures.mjs';

const { appendPiece, chatSession, newObjectId, turnRecord, wordsOf, QuotaExceeded, TurnNotStreaming, TurnStillStreaming, TurnTooLarge } = kit;
const CHILD = fileURLToPath(new URL('./child-delta-writer.mjs', import.meta.url));

// ahead of the clock, so every history is the same on every run
const BASE = Date.UTC(2100, 6, 1);
const at = (ms) => new Date(BASE + ms).toISOString();
const FAR = { now: at(0), cutoff: undefined };

let idClock = 0;
const session = (over = {}) =>
  chatSession({ _id: newObjectId(BASE + idClock++ * 1000), name: 'deltas', provider: 'p', selectedModel: 'm', mode: 'Build', user: 'alice', project: 'proj', createdAt: at(0), updatedAt: at(0), archived: false, ...over });

/** A turn for appendTurn: `ms` after the fixed instant, streaming unless `over` says otherwise. */
const turnAt = (ms, content, over = {}) => ({ _id: newObjectId(BASE + ms), user: 'alice', role: 'assistant', content, status: 'streaming', createdAt: at(ms), ...over });

const json = (t) => t.json.toString('utf8');
const text = (kind, t) => ({ kind, text: t });

/** The turn `base` with `pieces` appended one by one (appendPiece), as JSON: what a store that rewrote the turn for each delta holds. */
function rewritten(base, pieces) {
  let turn = JSON.parse(base);
  for (const p of pieces) turn = turnRecord({ ...turn, content: appendPiece(turn.content, p).content });
  return JSON.stringify(turn);
}

async function everything(store) {
  const snap = await store.exportAll();
  const items = [];
  for await (const item of snap.items) items.push({ session: item.session.json, turns: item.turns.map((t) => t.json.toString('utf8')) });
  return items;
}

/** Usage and stats are what the store's data holds, to the byte and token. */
async function checkAccounts(store, label, users = ['alice', 'bob']) {
  const all = await everything(store);
  for (const user of users) assert.deepEqual(await store.usage(user), usageOfItems(all.filter((i) => JSON.parse(i.session).user === user)), `${label}: usage of ${user}`);
  const { engine, ...figures } = await store.stats();
  assert.deepEqual(figures, usageOfItems(all), `${label}: stats`);
}

/** Every way a store answers a turn: getTurn, a page, the whole list, a branch, export. */
async function answers(store, sid, tid) {
  const out = { get: json(await store.getTurn(sid, tid)) };
  out.page = json((await store.listTurns(sid, undefined, 100)).items.find((t) => t._id === tid));
  const whole = [];
  for await (const chunk of store.scanTurns(sid)) whole.push(...chunk);
  out.list = json(whole.find((t) => t._id === tid));
  out.branch = json((await store.listTurns(sid, undefined, 100, { turnId: tid })).items.at(-1));
  const branch = [];
  for await (const chunk of store.scanTurns(sid, 'head')) branch.push(...chunk);
  out.headBranch = json(branch.at(-1));
  out.export = (await everything(store)).find((i) => JSON.parse(i.session)._id === sid).turns.find((t) => JSON.parse(t)._id === tid);
  return out;
}

export function deltaContract(engine) {
  const dirs = [];
  const fresh = () => {
    const d = mkdtempSync(join(tmpdir(), `csa-delta-${engine}-`));
    dirs.push(d);
    return d;
  };
  const withStore = async (fn, extra = {}) => {
    const dir = fresh();
    const store = await openOn(engine, dir, extra);
    try {
      return await fn(store, dir);
    } finally {
      await store.close();
    }
  };
  const streaming = async (store, content = '', over = {}) => {
    const s = await store.createSession(session(over));
    const t = await store.appendTurn(s.session._id, turnAt(10, content));
    return { sid: s.session._id, tid: t._id, base: json(t), version: (await store.getSession(s.session._id)).version };
  };

  describe(`Store contract, deltas and tokens: ${engine}`, () => {
    test("[D-streaming-8] a streaming turn reads with its text so far everywhere, its session's updatedAt and ETag still", async () => {
      await withStore(async (store) => {
        const { sid, tid, base, version } = await streaming(store, 'Once upon');
        const pieces = [];
        const places = [];
        for (const [i, p] of [text('text', ' a time'), text('reasoning', 'who "speaks"?'), text('reasoning', ' 日本語 \ud83d'), text('reasoning', '\ude00!'), text('text', ' there was\na "walrus"')].entries()) {
          const d = await store.appendDelta(sid, tid, [p], 1_000_000);
          assert.equal(d._id, tid);
          pieces.push(p);
          places.push(...d.places);
          const expected = rewritten(base, pieces);
          for (const [how, got] of Object.entries(await answers(store, sid, tid))) assert.equal(got, expected, `after delta ${i}: ${how}`);
        }
        let content = JSON.parse(base).content;
        assert.deepEqual(places, pieces.map((p) => { const r = appendPiece(content, p); content = r.content; return r.place; }), 'where each went, as appendPiece places it');
        assert.deepEqual(places.slice(0, 3), [{ at: 9 }, { at: 0, part: 1 }, { at: 13, part: 1 }]);
        const hit = (await store.search({ user: 'alice', archived: 'false', live: FAR, words: wordsOf('upon') }, undefined, 10)).items.find((h) => h.turn?._id === tid);
        assert.equal(json(hit.turn), rewritten(base, pieces), 'a search hit shows the text so far');
        assert.equal((await store.search({ user: 'alice', archived: 'false', live: FAR, words: wordsOf('walrus') }, undefined, 10)).items.length, 0, '"Search still finds a streaming turn by its text before its deltas until that edit"');
        assert.equal((await store.getSession(sid)).version, version, 'the version');
        await checkAccounts(store, 'after the deltas', ['alice']);
      });
    });

    test("[D-streaming-9] a reply's end folds the deltas in for good: later deltas are refused, search finds the text", async () => {
      await withStore(async (store) => {
        const { sid, tid, base } = await streaming(store);
        const pieces = [text('reasoning', 'thinking'), text('text', 'The answer'), text('text', ' is a walrus')];
        for (const p of pieces) await store.appendDelta(sid, tid, [p], 1_000_000, { quiet: true });
        const usage = { inputTokens: 40, outputTokens: 12, cachedTokens: 8 };
        // the turn as the edit finds it is the turn with its deltas: the edit writes it whole
        const end = await store.updateTurn(sid, tid, { status: 'complete', usage }, { uncharged: true });
        const expected = JSON.stringify(turnRecord({ ...JSON.parse(rewritten(base, pieces)), usage, status: 'complete' }));
        assert.equal(json(end.turn), expected);
        for (const [how, got] of Object.entries(await answers(store, sid, tid))) assert.equal(got, expected, how);
        await assert.rejects(store.appendDelta(sid, tid, [text('text', 'more')], 1_000_000), TurnNotStreaming);
        assert.deepEqual((await store.search({ user: 'alice', archived: 'false', live: FAR, words: wordsOf('walrus') }, undefined, 10)).items.map((h) => h.turn?._id), [tid]);
        const u = await store.usage('alice');
        assert.deepEqual([u.inputTokens, u.outputTokens, u.cachedTokens], [40, 12, 8]);
        await checkAccounts(store, 'after the end', ['alice']);
        // an edit that keeps it streaming folds them in too, and deltas go on after it
        const again = await streaming(store, 'x');
        await store.appendDelta(again.sid, again.tid, [text('text', 'yz')], 1_000_000);
        await store.updateTurn(again.sid, again.tid, { metadata: { k: 'v' } });
        const d = await store.appendDelta(again.sid, again.tid, [text('text', '!')], 1_000_000);
        assert.deepEqual(d.places, [{ at: 3 }]);
        assert.equal(JSON.parse(json(await store.getTurn(again.sid, again.tid))).content, 'xyz!');
        await checkAccounts(store, 'after an edit that keeps it streaming', ['alice']);
      });
    });

    test('deltas and the end that arrive together share one group and keep their order', async () => {
      await withStore(async (store) => {
        const { sid, tid, base } = await streaming(store);
        const pieces = Array.from({ length: 20 }, (_, i) => text(i % 7 === 3 ? 'reasoning' : 'text', `piece ${i} `));
        const sent = pieces.map((p) => store.appendDelta(sid, tid, [p], 1_000_000));
        const end = store.updateTurn(sid, tid, { status: 'complete' });
        const late = assert.rejects(store.appendDelta(sid, tid, [text('text', 'too late')], 1_000_000), TurnNotStreaming);
        const places = (await Promise.all(sent)).flatMap((d) => d.places);
        let content = '';
        assert.deepEqual(places, pieces.map((p) => { const r = appendPiece(content, p); content = r.content; return r.place; }));
        assert.equal(json((await end).turn), JSON.stringify(turnRecord({ ...JSON.parse(rewritten(base, pieces)), status: 'complete' })));
        await late;
        await checkAccounts(store, 'after a group of deltas and its end', ['alice']);
      });
    });

    test("[D-streaming-3] Turn too large counts a turn's deltas: exactly the limit passes, one byte more is refused", async () => {
      await withStore(async (store) => {
        const { sid, tid, base } = await streaming(store, 'start');
        await store.appendDelta(sid, tid, [text('text', 'é'.repeat(50))], 1_000_000);
        const now = Buffer.byteLength(rewritten(base, [text('text', 'é'.repeat(50))]));
        const limit = now + 10;
        await assert.rejects(store.appendDelta(sid, tid, [text('text', '"'.repeat(6))], limit), TurnTooLarge, 'six quotes are twelve bytes of JSON');
        await store.appendDelta(sid, tid, [text('text', '"'.repeat(5))], limit);
        assert.equal((await store.getTurn(sid, tid)).json.length, limit);
        await assert.rejects(store.appendDelta(sid, tid, [text('text', 'x')], limit), TurnTooLarge);
        await checkAccounts(store, 'after refused deltas', ['alice']);
      });
    });

    test('[D-streaming-6] QUOTA_BYTES refuses the delta that would pass it, counted from the turn with its deltas', async () => {
      await withStore(
        async (store) => {
          const { sid, tid } = await streaming(store, 'hi');
          const used = (await store.usage('alice')).bytes;
          await store.appendDelta(sid, tid, [text('text', 'x'.repeat(100_000 - used - 10))], 1_000_000);
          assert.equal((await store.usage('alice')).bytes, 100_000 - 10);
          await store.appendDelta(sid, tid, [text('text', 'x'.repeat(10))], 1_000_000);
          await assert.rejects(store.appendDelta(sid, tid, [text('text', 'x')], 1_000_000), QuotaExceeded);
          await checkAccounts(store, 'at the quota', ['alice']);
        },
        { QUOTA_BYTES: '100000' },
      );
    });

    test("a fork copies a streaming turn's text so far; a delete gives back its deltas' bytes; export imports it as it was", async () => {
      const exported = await withStore(async (store) => {
        const { sid, tid, base } = await streaming(store, 'so far');
        const pieces = [text('text', ' and on'), text('reasoning', 'hmm')];
        for (const p of pieces) await store.appendDelta(sid, tid, [p], 1_000_000);
        const f = await store.forkSession(sid, tid, { _id: newObjectId(BASE + 900_000), owner: 'bob', at: at(900_000) });
        const copy = JSON.parse(json((await store.listTurns(f.session._id, undefined, 10)).items[0]));
        assert.deepEqual(copy.content, JSON.parse(rewritten(base, pieces)).content);
        await checkAccounts(store, 'after the fork');
        const all = await everything(store);
        const kept = await streaming(store, 'kept');
        await store.appendDelta(kept.sid, kept.tid, [text('text', ' more')], 1_000_000);
        await store.deleteTurn(kept.sid, kept.tid);
        await checkAccounts(store, 'after deleting a turn with deltas');
        await store.deleteSession(sid);
        await checkAccounts(store, 'after deleting a session with deltas');
        return all;
      });
      await withStore(async (store) => {
        const sessions = exported.map((i) => JSON.parse(i.session));
        const turns = exported.flatMap((i) => i.turns.map((t) => JSON.parse(t)));
        assert.deepEqual(await store.importAll(sessions, turns), { sessions: 2, turns: 2, unchanged: 0 });
        assert.deepEqual(await everything(store), exported);
        await checkAccounts(store, 'imported');
        assert.deepEqual(await store.importAll(sessions, turns), { sessions: 0, turns: 0, unchanged: 4 });
        // an import over a streaming turn that took deltas since compares what it reads, and replaces it
        const sid = sessions[0]._id;
        const tid = turns.find((t) => t.session === sid)._id;
        await store.appendDelta(sid, tid, [text('text', ' later')], 1_000_000);
        assert.deepEqual(await store.importAll(sessions, turns), { sessions: 0, turns: 1, unchanged: 3 });
        assert.deepEqual(await everything(store), exported);
        await checkAccounts(store, 'imported over deltas');
      });
    });

    test('"under a turn that is still streaming": isStreaming sees committed turns and the group\'s earlier writes', async () => {
      const run = (together) =>
        withStore(async (store) => {
          const s = await store.createSession(session());
          const sid = s.session._id;
          const a = (await store.appendTurn(sid, turnAt(10, '')))._id;
          const b = (await store.appendTurn(sid, turnAt(11, 'done', { status: 'complete' })))._id;
          const c = newObjectId(BASE + 12);
          // a write that asks, then is refused either way, recording nothing: under `id` while it
          // streams (TurnStillStreaming), else for its second turn's parent, which is none
          const ask = (id) => () =>
            store
              .appendTurns(sid, [{ user: 'alice', role: 'user', content: 'q', parentId: id }, { user: 'alice', role: 'user', content: 'q', parentId: 'ffffffffffffffffffffffff' }], { refuse: { streamingParent: true } })
              .then(
                () => assert.fail('recorded'),
                (e) => {
                  if (e instanceof TurnStillStreaming) return [true];
                  if (e.code === 'invalid') return [false];
                  throw e;
                },
              );
          const writes = [
            ask(a),
            ask(b),
            () => store.updateTurn(sid, a, { status: 'complete' }),
            ask(a),
            () => store.appendTurn(sid, turnAt(12, '', { _id: c })),
            ask(c),
            () => store.deleteTurn(sid, c),
            ask(c),
          ];
          if (!together) {
            const out = [];
            for (const w of writes) out.push(await w());
            return out.filter(Array.isArray).flat();
          }
          return (await Promise.all(writes.map((w) => w()))).filter(Array.isArray).flat();
        });
      const expected = [true, false, false, true, false];
      assert.deepEqual(await run(false), expected, 'one write after the other');
      assert.deepEqual(await run(true), expected, 'in one group');
    });

    test("[D-finding-2] a turn's usage counts, an edit changes it, deletes give it back, a fork's copies count for its owner", async () => {
      await withStore(async (store) => {
        const s = await store.createSession(session());
        const sid = s.session._id;
        const a = await store.appendTurn(sid, turnAt(10, 'q', { role: 'user', status: 'complete' }));
        const first = turnAt(20, 'a', { status: 'complete', usage: { inputTokens: 100, outputTokens: 20, cachedTokens: 60, costUsd: 0.5 } });
        const b = await store.appendTurns(sid, [first, turnAt(30, 'b', { status: 'complete', usage: { inputTokens: 7, outputTokens: 3 }, parentId: first._id })]);
        let u = await store.usage('alice');
        assert.deepEqual([u.inputTokens, u.outputTokens, u.cachedTokens], [107, 23, 60]);
        await store.updateTurn(sid, b[1]._id, { usage: { inputTokens: 9, outputTokens: 4, cachedTokens: 1 } });
        await store.updateTurn(sid, a._id, { usage: { inputTokens: 1, outputTokens: 1 } });
        u = await store.usage('alice');
        assert.deepEqual([u.inputTokens, u.outputTokens, u.cachedTokens], [110, 25, 61]);
        await checkAccounts(store, 'after edits of usage');
        await store.forkSession(sid, b[1]._id, { _id: newObjectId(BASE + 800_000), owner: 'bob', at: at(800_000) });
        u = await store.usage('bob');
        assert.deepEqual([u.sessions, u.turns, u.inputTokens, u.outputTokens, u.cachedTokens], [1, 3, 110, 25, 61]);
        await checkAccounts(store, 'after a fork');
        await store.deleteTurn(sid, b[0]._id);
        u = await store.usage('alice');
        assert.deepEqual([u.inputTokens, u.outputTokens, u.cachedTokens], [1, 1, 0]);
        await checkAccounts(store, 'after deleting turns');
        await store.deleteSession(sid);
        assert.deepEqual(await store.usage('alice'), NO_USAGE);
        await checkAccounts(store, 'after deleting the session');
      });
    });

    test(
      '[D-streaming-10] two stores on one schema append to one turn: every delta once, where it was answered',
      { skip: ENGINES[engine].instances === true ? false : `several instances need STORE=postgres; this run tests STORE=${engine}` },
      async () => {
        const dir = fresh();
        const one = await openOn(engine, dir);
        const two = await openOn(engine, dir);
        try {
          const { sid, tid, base } = await streaming(one, 'start');
          const pieces = [];
          for (let i = 0; i < 10; i++) {
            const p = text(i % 4 === 1 ? 'reasoning' : 'text', ` ${i}`);
            await (i % 2 === 0 ? one : two).appendDelta(sid, tid, [p], 1_000_000);
            pieces.push(p);
          }
          assert.equal(json(await two.getTurn(sid, tid)), rewritten(base, pieces));
          // together: the order is the commit order, and each answer says where its piece went
          const together = Array.from({ length: 16 }, (_, i) => ({ store: i % 2 === 0 ? one : two, p: text('text', `<${i}>`) }));
          const answered = await Promise.all(together.map(({ store, p }) => store.appendDelta(sid, tid, [p], 1_000_000).then((d) => ({ p, at: d.places[0].at }))));
          const content = JSON.parse(json(await one.getTurn(sid, tid))).content;
          const last = content[content.length - 1].text;
          for (const { p, at } of answered) assert.equal(last.slice(at, at + p.text.length), p.text, `${p.text} is where its answer said`);
          assert.equal(last.length, answered.reduce((n, a) => Math.max(n, a.at + a.p.text.length), 0));
          await checkAccounts(two, 'after deltas through two instances', ['alice']);
        } finally {
          await one.close();
          await two.close();
        }
      },
    );

    test('"each acknowledged append is durable": deltas acknowledged before SIGKILL are there, in order, three times', async () => {
      const dir = fresh();
      for (let round = 0; round < 3; round++) {
        const child = spawn(process.execPath, [CHILD, engine, dir, String(round)], { stdio: ['ignore', 'pipe', 'inherit'] });
        let buffered = '';
        let lines = 0;
        const acked = [];
        let turn;
        const killAt = 20 + Math.floor(Math.random() * 60);
        const exit = await new Promise((resolve) => {
          child.stdout.on('data', (d) => {
            buffered += d;
            let nl;
            while ((nl = buffered.indexOf('\n')) >= 0) {
              const m = JSON.parse(buffered.slice(0, nl));
              buffered = buffered.slice(nl + 1);
              if (m.turn !== undefined) turn = m;
              if (m.acked !== undefined) acked.push(m.acked);
              if (++lines === killAt) child.kill('SIGKILL');
            }
          });
          child.on('exit', (code, signal) => resolve({ code, signal }));
        });
        assert.equal(exit.signal, 'SIGKILL', `round ${round}: the writer ran until it was killed (exit ${exit.code})`);
        const store = await openOn(engine, dir);
        try {
          const got = JSON.parse(json(await store.getTurn(turn.session, turn.turn))).content;
          const said = acked.join('');
          assert.ok(got.startsWith(said), `round ${round}: ${acked.length} acknowledged deltas are there`);
          assert.ok(said.length + 20 >= got.length, `round ${round}: at most the delta under way besides them`);
          await checkAccounts(store, `after SIGKILL, round ${round}`, ['alice']);
        } finally {
          await store.close();
        }
      }
    });
  });

  return () => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  };
}
