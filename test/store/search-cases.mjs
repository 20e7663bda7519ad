// The store contract for search (issue #14 item 1), run in-process against each engine like
// cases.mjs: an engine's index answers what reading every name and turn would, in the same order.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { kit, openOn } from './engines.mjs';

const { chatSession, Indexer, newObjectId, indexedWordList, indexedWords, plainAscii, prepareSchema, QUEUED_WORDS_SQL, queuedTurnWords, registerSearchFunctions, setFaultPlan, textHolds, turnText, turnWordsSql, wordsOf } = kit;

const T0 = Date.UTC(2026, 0, 1);
const at = (ms) => new Date(T0 + ms).toISOString();
let clock = 0;
const FAR = { now: at(0), cutoff: undefined };
const VOCAB = ['apple', 'apricot', 'Banana', 'band', 'CHERRY', 'Straße', 'été', 'x1', 'deep-learning', 'zoo'];

function session(over = {}) {
  const t = at(over.ms ?? 0);
  return chatSession({ _id: newObjectId(T0 + clock++ * 1000), name: '', provider: 'prov', selectedModel: 'model', mode: 'Build', user: 'alice', project: 'proj', createdAt: t, updatedAt: t, archived: false, headTurnId: null, ...over });
}

/** A turn for appendTurn, saying `content`, at `ms`, under the head. */
const turn = (ms, content) => ({
  _id: newObjectId(T0 + 500_000 + clock++ * 1000),
  user: 'alice',
  role: 'user',
  content,
  createdAt: at(ms),
  status: 'complete',
});

/** What a search must answer, found by reading every name and turn (the engines may not do this). */
async function expected(store, ids, filter) {
  const hits = [];
  const ok = (words) => filter.words.every((q) => words.some((w) => w.startsWith(q)));
  for (const id of ids) {
    const r = await store.getSession(id);
    if (r === undefined) continue;
    const s = r.session;
    if (filter.user !== undefined ? s.user !== filter.user || (filter.project !== undefined && s.project !== filter.project) : s.project !== filter.project) continue;
    if (filter.archived !== 'all' && s.archived !== (filter.archived === 'true')) continue;
    if (typeof s.expiresAt === 'string' && s.expiresAt <= filter.live.now) continue;
    if (ok(indexedWords(s.name).split(' '))) hits.push({ at: s.updatedAt, doc: s._id, turn: null });
    for await (const chunk of store.scanTurns(id)) {
      for (const t of chunk) {
        const parsed = JSON.parse(t.json.toString('utf8'));
        if (ok(indexedWords(turnText(parsed.content)).split(' '))) hits.push({ at: t.createdAt, doc: t._id, turn: t._id });
      }
    }
  }
  hits.sort((a, b) => (a.at !== b.at ? (a.at > b.at ? -1 : 1) : a.doc > b.doc ? -1 : 1));
  return hits.map((h) => `${h.doc}:${h.turn ?? 'name'}`);
}

async function walk(store, filter, limit) {
  const out = [];
  let after;
  for (;;) {
    const page = await store.search(filter, after, limit);
    assert.ok(page.items.length <= limit);
    out.push(...page.items.map((h) => `${h.key.doc}:${h.turn === undefined ? 'name' : h.turn._id}`));
    if (page.next === undefined) return out;
    after = page.next;
  }
}

/** Writes a turn of `content` as the sqlite writer does, queued for its indexer to read as it is. */
function turnRows(db) {
  const insert = db.prepare('INSERT INTO turns (id, session, created_at, json) VALUES (?, ?, ?, ?)');
  const queue = db.prepare('INSERT INTO turns_unindexed (rowid, words, content_as_is) VALUES (?, NULL, 1)');
  const s = newObjectId();
  return (content) => {
    const id = newObjectId();
    queue.run(insert.run(id, s, at(0), Buffer.from(JSON.stringify({ _id: id, session: s, role: 'user', content, createdAt: at(0) }))).lastInsertRowid);
  };
}

export function searchContract(engine) {
  describe(`Store contract, search: ${engine}`, () => {
    test('[D-search-7] [D-search-4] [D-search-8] every engine answers what reading every turn would, through every change', async () => {
      const dir = mkdtempSync(join(tmpdir(), `csa-search-${engine}-`));
      // sqlite indexes what a commit queued after it: held here, every name and turn is still queued when first searched
      setFaultPlan('hold:index');
      let store = await openOn(engine, dir);
      try {
        const ids = [];
        const pick = (i, k) => VOCAB[(i * 7 + k * 3) % VOCAB.length];
        for (let i = 0; i < 16; i++) {
          const s = (await store.createSession(session({ ms: i, name: `${pick(i, 0)} ${i}`, user: i % 5 === 0 ? 'bob' : 'alice', project: i % 3 === 0 ? 'p1' : 'p2', archived: i % 4 === 0, ...(i === 7 ? { expiresAt: at(-1) } : {}) }))).session;
          ids.push(s._id);
          const parts = i % 2 === 0;
          for (let k = 0; k < 3; k++) {
            const text = `${pick(i, k)} and ${pick(i + 1, k + 2)}; ${k}`;
            await store.appendTurn(s._id, turn(100 + i * 10 + k, parts ? [{ type: 'text', text }, { type: 'reasoning', text: pick(i, 9) }, { type: 'tool_call', id: 'c', name: 'zoo', arguments: {} }] : text));
          }
        }
        // a long session, so a walk reads its turns in several batches (every engine reads at most 64 at a time)
        const long = (await store.createSession(session({ ms: 50, name: 'long band' }))).session;
        ids.push(long._id);
        // one of them holds a word longer than any index keeps, which `zoo` starts: not a hit
        for (let k = 0; k < 70; k++) await store.appendTurn(long._id, turn(200 + k, k === 5 ? `zoo${'o'.repeat(66)} band` : `${pick(k, 1)} ${k % 9 === 0 ? 'zoo' : 'long'}`));
        // changes the index must follow
        await store.updateSession(ids[1], { name: 'renamed cherry' }, { now: T0 + 900 });
        const turns1 = [];
        for await (const chunk of store.scanTurns(ids[2])) turns1.push(...chunk);
        await store.updateTurn(ids[2], turns1[0]._id, { content: 'now about zoo band' });
        await store.deleteTurn(ids[3], (await store.scanTurns(ids[3])[Symbol.asyncIterator]().next()).value[1]._id);
        await store.deleteSession(ids[4]);
        const fork = await store.forkSession(ids[5], undefined, { _id: newObjectId(T0 + clock++ * 1000), owner: 'alice', name: `fork of ${(await store.getSession(ids[5])).session.name}`, at: at(950) });
        ids.push(fork.session._id);
        const imported = session({ ms: 960, name: 'imported apple' });
        await store.importAll([imported], [{ _id: newObjectId(T0 + 9_000_000), session: imported._id, user: 'alice', role: 'assistant', content: 'imported band cherry', parentId: null, createdAt: at(970), status: 'complete' }]);
        ids.push(imported._id);
        // an import whose turn is one already stored, with other text: the file's version wins, and only its words are found (regression: the journal kept the old words too)
        const [stored6] = (await store.scanTurns(ids[6])[Symbol.asyncIterator]().next()).value;
        const turn6 = JSON.parse(stored6.json.toString('utf8'));
        await store.importAll([(await store.getSession(ids[6])).session], [{ ...turn6, content: 'x1 alone now' }]);

        const filters = [];
        for (const words of [['ap'], ['apple'], ['band', 'ch'], ['strasse'], ['ete'], ['été'], ['x1'], ['deep', 'learning'], ['zoo'], ['a']]) {
          for (const scope of [{ user: 'alice' }, { user: 'bob' }, { project: 'p1' }, { user: 'alice', project: 'p2' }]) {
            for (const archived of ['false', 'true', 'all']) filters.push({ ...scope, archived, live: FAR, words: wordsOf(words.join(' ')) });
          }
        }
        const check = async (what) => {
          let found = 0;
          for (const f of filters) {
            const want = await expected(store, ids, f);
            found += want.length;
            for (const limit of [1, 4, 1000]) assert.deepEqual(await walk(store, f, limit), want, `${what} ${JSON.stringify(f)} limit ${limit}`);
          }
          assert.ok(found > 100, `${what}: the cases find something (${found})`);
        };
        await check('open');
        await store.close();
        store = await openOn(engine, dir, { SEARCH_WALK_FROM: '1' });
        await check('walked, before anything is indexed');
        await store.close();
        // the indexer runs from here on, beside the searches: each answer is the same whatever it has done yet
        setFaultPlan(undefined);
        store = await openOn(engine, dir);
        await check('reopened');
        assert.ok((await store.reindex()) > 0);
        await check('reindexed');
        // the same answers when every query walks the sessions instead of reading its index's matches
        await store.close();
        store = await openOn(engine, dir, { SEARCH_WALK_FROM: '1' });
        await check('walked');
      } finally {
        setFaultPlan(undefined);
        await store.close();
        rmSync(dir, { recursive: true, force: true });
      }
    });

    test('"A streaming turn\'s deltas are found once it is edited", by both plans, whether the index has taken the turn yet or not', async () => {
      for (const hold of [true, false]) {
        for (const walkFrom of ['5000', '1']) {
          const dir = mkdtempSync(join(tmpdir(), `csa-search-delta-${engine}-`));
          setFaultPlan(hold ? 'hold:index' : undefined);
          const store = await openOn(engine, dir, { SEARCH_WALK_FROM: walkFrom });
          try {
            const s = (await store.createSession(session({ ms: 1, name: 'chat' }))).session;
            const t = await store.appendTurn(s._id, { ...turn(10, 'alpha'), role: 'assistant', status: 'streaming' });
            await store.appendDelta(s._id, t._id, [{ kind: 'text', text: ' omega' }], 1 << 20);
            const found = async (q) => (await store.search({ user: 'alice', archived: 'false', live: FAR, words: wordsOf(q) }, undefined, 10)).items.map((h) => h.turn?._id ?? 'name');
            const what = `hold ${hold}, SEARCH_WALK_FROM ${walkFrom}`;
            assert.deepEqual(await found('alpha'), [t._id], `${what}: the text it was created with`);
            assert.deepEqual(await found('omega'), [], `${what}: a delta's text, before the edit`);
            await store.updateTurn(s._id, t._id, { status: 'complete' });
            assert.deepEqual(await found('omega'), [t._id], `${what}: after the edit that ends it`);
            assert.deepEqual(await found('alpha omega'), [t._id], what);
          } finally {
            setFaultPlan(undefined);
            await store.close();
            rmSync(dir, { recursive: true, force: true });
          }
        }
      }
    });

    test('[D-search-14] what was written while SEARCH was off is found once a start has it on again', async () => {
      const dir = mkdtempSync(join(tmpdir(), `csa-search-off-${engine}-`));
      let store = await openOn(engine, dir, { SEARCH: 'off' });
      try {
        const s = (await store.createSession(session({ ms: 1, name: 'quiet apple' }))).session;
        const t = await store.appendTurn(s._id, turn(10, 'banana bread'));
        const t2 = await store.appendTurn(s._id, turn(11, 'cherry'));
        await store.updateTurn(s._id, t2._id, { content: 'cherry band' });
        await store.close();
        store = await openOn(engine, dir);
        const found = async (q) => (await store.search({ user: 'alice', archived: 'false', live: FAR, words: wordsOf(q) }, undefined, 10)).items.map((h) => h.turn?._id ?? 'name');
        assert.deepEqual(await found('apple'), ['name']);
        assert.deepEqual(await found('bread'), [t._id]);
        assert.deepEqual(await found('band'), [t2._id]);
        assert.deepEqual(await found('ban'), [t2._id, t._id]);
        // and it stays found after a restart with search on
        await store.close();
        store = await openOn(engine, dir);
        assert.deepEqual((await store.search({ user: 'alice', archived: 'false', live: FAR, words: wordsOf('ban') }, undefined, 10)).items.length, 2);
      } finally {
        await store.close();
        rmSync(dir, { recursive: true, force: true });
      }
    });

    test('[D-search-2] ASCII text takes a shorter path to the same words as NFKC with upper then lower case', () => {
      const WORD = /[\p{L}\p{N}]+/gu;
      const general = (text) => [...new Set([...text.matchAll(WORD)].flatMap((m) => m[0].normalize('NFKC').toUpperCase().toLowerCase().replace(/ς/g, 'σ').match(WORD) ?? []))];
      let seed = 7;
      const random = () => (seed = (seed * 48271) % 2147483647) / 2147483647;
      const texts = ['Hello, World 42km café-crème', 'Straße ΣΊΣΥΦΟΣ ﬁne ½', 'MiXeD case_with_underscores and-dashes', ''];
      for (let i = 0; i < 2000; i++) texts.push(Array.from({ length: (random() * 40) | 0 }, () => String.fromCharCode((random() * 128) | 0)).join(''));
      for (const text of texts) assert.deepEqual(wordsOf(text), general(text), JSON.stringify(text));
      // a walking search checks a text without making its word list: the same answer as the list's
      texts.push(`x${'y'.repeat(70)} xy`, `${'a'.repeat(64)} b`, `${'a'.repeat(65)}`);
      for (const text of texts) {
        const words = indexedWords(text).split(' ');
        for (const q of [...words.map((w) => w.slice(0, 2)), 'a', 'x', 'xy', 'ss', 'e', 'q1', 'été']) {
          const query = wordsOf(q);
          if (query.length === 0) continue;
          assert.equal(textHolds(text, query), query.every((w) => words.some((x) => x.startsWith(w))), `${JSON.stringify(text)} ${q}`);
        }
      }
    });

    if (engine === 'sqlite') {
      test('[D-search-10] sqlite gives FTS5 plain ASCII text as it is, which its ascii tokenizer cuts into the same words', async () => {
        const { DatabaseSync } = await import('node:sqlite');
        const db = new DatabaseSync(':memory:');
        try {
          db.exec("CREATE VIRTUAL TABLE t USING fts5(words, tokenize = 'ascii'); CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')");
          let seed = 11;
          const random = () => (seed = (seed * 48271) % 2147483647) / 2147483647;
          const texts = ['Hello, World 42km', 'MiXeD case_with_underscores and-dashes', '', `${'a'.repeat(64)} b`, `${'a'.repeat(65)}`, `zoo${'o'.repeat(66)} band`, 'café', 'x\u0000y\u007fz'];
          for (let i = 0; i < 2000; i++) texts.push(Array.from({ length: (random() * 60) | 0 }, () => (random() < 0.1 ? 'Zq9'.repeat((random() * 30) | 0) : String.fromCharCode((random() * 128) | 0))).join(''));
          const insert = db.prepare('INSERT INTO t (rowid, words) VALUES (?, ?)');
          const plain = texts.filter((text) => plainAscii(text));
          plain.forEach((text, i) => insert.run(i + 1, text));
          const tokens = new Map();
          for (const row of db.prepare('SELECT term, doc FROM v').iterate()) tokens.set(row.doc, [...(tokens.get(row.doc) ?? []), row.term]);
          plain.forEach((text, i) => assert.deepEqual(new Set(tokens.get(i + 1) ?? []), new Set(indexedWordList(text)), JSON.stringify(text)));
          for (const text of texts) if (!plainAscii(text)) assert.ok(/[^\x00-\x7f]/.test(text) || /[a-z0-9]{65}/i.test(text), JSON.stringify(text));
          assert.ok(plain.length > 500 && plain.length < texts.length, `${plain.length} of ${texts.length} plain`);
        } finally {
          db.close();
        }
      });
    }

    if (engine === 'sqlite') {
      test("[D-search-10] sqlite's indexer goes on at once only while a whole batch of 1,024 waits", async () => {
        const { DatabaseSync } = await import('node:sqlite');
        const db = new DatabaseSync(':memory:');
        prepareSchema(db, ':memory:', true);
        const batches = [];
        const indexer = new Indexer(db, false, (message) => assert.fail(message), () => {}, (taken) => batches.push(taken));
        const turn = turnRows(db);
        const tick = () => new Promise((r) => setImmediate(r));
        try {
          indexer.schedule(); // at start: the queue is empty
          await tick();
          // a commit of 50 turns per turn of the thread's event loop, 40 of them
          for (let c = 0; c < 40; c++) {
            for (let i = 0; i < 50; i++) turn(`tern ${c} ${i}`);
            indexer.queued(50);
            await tick();
          }
          const during = [...batches];
          // what is left is indexed once the writer is idle
          for (let i = 0; i < 100 && db.prepare('SELECT count(*) AS n FROM turns_unindexed').get().n > 0; i++) await new Promise((r) => setTimeout(r, 10));
          assert.equal(db.prepare('SELECT count(*) AS n FROM turns_unindexed').get().n, 0);
          assert.equal(batches.reduce((a, b) => a + b, 0), 2000);
          assert.ok(during.includes(1024), `a whole batch once 1,024 gathered: ${during}`);
          // a pause of 5 ms in this loop (a busy machine) indexes what has gathered: a few such batches, not one per commit (the old rule: 19 of 20)
          assert.ok(during.filter((n) => n < 1024).length <= 5, `batches while commits kept coming: ${during}`);
        } finally {
          indexer.finish();
          db.close();
        }
      });

      test('[D-search-10] after a failed batch, what is queued is indexed as commits keep coming', async () => {
        const { DatabaseSync } = await import('node:sqlite');
        const dir = mkdtempSync(join(tmpdir(), 'csa-indexer-'));
        const db = new DatabaseSync(join(dir, 'db'));
        const other = new DatabaseSync(join(dir, 'db'));
        const failures = [];
        try {
          prepareSchema(db, join(dir, 'db'), true);
          const indexer = new Indexer(db, false, (message) => failures.push(message), () => {}, () => {});
          const turn = turnRows(db);
          const tick = () => new Promise((r) => setImmediate(r));
          const queued = () => db.prepare('SELECT count(*) AS n FROM turns_unindexed').get().n;
          try {
            indexer.schedule();
            await tick();
            // 3,000 queued at once, and the indexer's transaction cannot start: another writer holds the file
            for (let i = 0; i < 3000; i++) turn(`curlew ${i}`);
            other.exec('BEGIN IMMEDIATE');
            indexer.queued(3000);
            await tick();
            other.exec('ROLLBACK');
            assert.equal(failures.length, 1);
            assert.equal(queued(), 3000);
            // then a commit of 50 per turn of the event loop, 20 of them: the backlog goes in whole batches meanwhile
            for (let c = 0; c < 20; c++) {
              for (let i = 0; i < 50; i++) turn(`godwit ${c} ${i}`);
              indexer.queued(50);
              await tick();
            }
            assert.ok(queued() < 1024, `${queued()} still queued while commits kept coming`);
          } finally {
            indexer.finish();
          }
        } finally {
          other.close();
          db.close();
          rmSync(dir, { recursive: true, force: true });
        }
      });

      test("[D-search-10] for every kind of turn, sqlite's indexer gives FTS5 what parsing the turn in JavaScript gives", async () => {
        const { DatabaseSync } = await import('node:sqlite');
        const db = new DatabaseSync(':memory:');
        try {
          registerSearchFunctions(db);
          const fast = db.prepare(`SELECT ${turnWordsSql('j')} AS w FROM (SELECT ? AS j)`);
          const slow = db.prepare('SELECT csa_turn_words(?) AS w');
          let seed = 5;
          const random = () => (seed = (seed * 48271) % 2147483647) / 2147483647;
          const pieces = ['plain words', 'Quote " and \\ back', 'line\nbreak\ttab', '\u0000nul then café', 'nul\u0000', '\ud800 lone', 'emoji 😀', 'x'.repeat(70), '/slash', '\u0041BC', ''];
          const contents = [undefined, null, 42, [], [{ type: 'text', text: 'part one' }, { type: 'reasoning', text: 'why \u00e9' }, { type: 'tool_call', id: 'c', name: 'zoo', arguments: { content: 'not text' } }]];
          for (const p of pieces) contents.push(p, [{ type: 'text', text: p }]);
          for (let i = 0; i < 500; i++) contents.push(Array.from({ length: (random() * 40) | 0 }, () => (random() < 0.05 ? pieces[(random() * pieces.length) | 0] : String.fromCharCode((random() * (random() < 0.9 ? 128 : 0x2000)) | 0))).join(''));
          const turns = contents.map((content) => ({ _id: newObjectId(), session: newObjectId(), role: 'user', ...(content === undefined ? {} : { content }), metadata: { content: 'metadata, not the turn' }, createdAt: '2026-01-01T00:00:00.000Z' }));
          const compare = (what) => {
            for (const turn of turns) for (const json of [Buffer.from(JSON.stringify(turn)), JSON.stringify(turn)]) assert.equal(fast.get(json).w, slow.get(json).w, `${what}: ${JSON.stringify(turn)}`);
          };
          compare('this Node.js');
          // what a write queues with each turn (its content as it is, its words, or nothing) gives the indexer the same
          const queue = new DatabaseSync(':memory:');
          const queued = (turn, json, asIs) => {
            const words = queuedTurnWords(turn.content);
            if (words === true) asIs.push(turn.content);
            const { lastInsertRowid } = queue.prepare('INSERT INTO turns (id, session, created_at, json) VALUES (?, ?, ?, ?)').run(newObjectId(), turn.session, turn.createdAt, json);
            queue.prepare('INSERT INTO turns_unindexed (rowid, words, content_as_is) VALUES (?, ?, ?)').run(lastInsertRowid, words === true ? null : words, words === true ? 1 : 0);
            return queue.prepare(`SELECT ${QUEUED_WORDS_SQL} AS w FROM turns_unindexed u WHERE rowid = ?`).get(lastInsertRowid).w;
          };
          try {
            prepareSchema(queue, ':memory:', true);
            const compareQueued = (what) => {
              const asIs = [];
              for (const turn of turns) assert.equal(queued(turn, Buffer.from(JSON.stringify(turn)), asIs), slow.get(JSON.stringify(turn)).w, `${what}, queued: ${JSON.stringify(turn)}`);
              return asIs;
            };
            const asIs = compareQueued('this Node.js');
            assert.ok(asIs.includes('Quote " and \\ back') && asIs.includes('line\nbreak\ttab'), 'plain ASCII strings are queued to be read as they are');
            assert.ok(!asIs.includes('nul\u0000') && !asIs.includes('x'.repeat(70)), 'not a string with a NUL, nor one with a word over 64 characters');
            // and what was queued to be read as it is never reaches a JavaScript function
            for (const name of ['csa_turn_words', 'csa_plain_ascii']) {
              queue.function(name, () => {
                throw new Error('read the JavaScript way');
              });
            }
            assert.equal(queued({ ...turns[0], content: 'Quote " and \\ back, line\nbreak' }, Buffer.from(JSON.stringify({ ...turns[0], content: 'Quote " and \\ back, line\nbreak' })), []), 'Quote " and \\ back, line\nbreak');
          } finally {
            queue.close();
          }
          // as on a Node.js before 24.16, whose node:sqlite cuts a text it hands to a function at its first NUL
          db.function('csa_plain_ascii', { deterministic: true }, (text) => (plainAscii(String(text).split('\0')[0]) ? 1 : 0));
          compare('a text cut at its first NUL');
          // and plain ASCII text is read the SQL way: without the JavaScript function, it is still read
          const sqlOnly = new DatabaseSync(':memory:');
          try {
            registerSearchFunctions(sqlOnly);
            sqlOnly.function('csa_turn_words', () => {
              throw new Error('read the JavaScript way');
            });
            const plainTurn = JSON.stringify({ ...turns[0], content: 'Quote " and \\ back, line\nbreak' });
            assert.equal(sqlOnly.prepare(`SELECT ${turnWordsSql('j')} AS w FROM (SELECT ? AS j)`).get(plainTurn).w, 'Quote " and \\ back, line\nbreak');
          } finally {
            sqlOnly.close();
          }
        } finally {
          db.close();
        }
      });
    }

    test('a hit carries the session as stored and the turn whose text matched', async () => {
      const dir = mkdtempSync(join(tmpdir(), `csa-search-${engine}-`));
      const store = await openOn(engine, dir);
      try {
        const s = (await store.createSession(session({ ms: 1, name: 'walrus' }))).session;
        const t = await store.appendTurn(s._id, turn(5, 'tusk and walrus'));
        const page = await store.search({ user: 'alice', archived: 'false', live: FAR, words: ['walrus'] }, undefined, 10);
        const stored = await store.getSession(s._id);
        assert.deepEqual(
          page.items.map((h) => [h.key, h.session.json, h.turn?.json.toString('utf8')]),
          [
            [{ at: t.createdAt, doc: t._id }, stored.json, t.json.toString('utf8')],
            [{ at: stored.session.updatedAt, doc: s._id }, stored.json, undefined],
          ].sort((a, b) => (a[0].at !== b[0].at ? (a[0].at > b[0].at ? -1 : 1) : a[0].doc > b[0].doc ? -1 : 1)),
        );
        assert.equal(page.next, undefined);
      } finally {
        await store.close();
        rmSync(dir, { recursive: true, force: true });
      }
    });
  });
}
