// Recovery, proven on the real binary: a torn final record at every byte offset is dropped
// with a warning; damage anywhere else stops the start naming file and position; a kill at
// each step of compaction loses nothing; a failed write or fsync is never acknowledged.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { dump, waitFor } from './api-kit.mjs';
import { failingWrite, newSession, removeDir, runCli, SECRET, smallDisk, startServer, STORE, tempDir } from './helpers.mjs';

const JOURNAL = 'sessions.journal';
/** The blocks about the journal's own file run on the journal engine's run of the suite only. */
const JOURNAL_FILES = STORE === 'journal' ? {} : { skip: `about the journal engine's files; this run tests STORE=${STORE}` };

/** Starts a server on a copy of `dir` whose journal is replaced by `bytes`; returns what it shows. */
async function startOn(dir, bytes) {
  const copy = tempDir('csa-torn-');
  cpSync(dir, copy, { recursive: true });
  writeFileSync(join(copy, JOURNAL), bytes);
  const s = await startServer({ dataDir: copy });
  try {
    return { state: await dump(s), logs: s.logs(), size: statSync(join(copy, JOURNAL)).size };
  } finally {
    await s.stop();
    removeDir(copy);
  }
}

/**
 * Makes a conversation of alice's: turns a, b (under a) and c (under b), b edited, d under a (a
 * branch), c deleted, a fork at b, the head switched back to b. Returns `check(state, when)`,
 * which asserts what a dump shows of them.
 */
async function conversation(u) {
  const base = '/api/v1/chat-sessions';
  const id = (await u.post(base, newSession({ name: 'tree' }))).body.data._id;
  const turn = async (body) => {
    const r = await u.post(`${base}/${id}/turns`, body);
    assert.equal(r.status, 201, r.text);
    return r.body.data._id;
  };
  const a = await turn({ role: 'user', content: 'a' });
  const b = await turn({ role: 'assistant', content: 'b' });
  const c = await turn({ role: 'user', content: 'c' });
  assert.equal((await u.put(`${base}/${id}/turns/${b}`, { content: 'b edited' })).status, 200);
  const d = await turn({ role: 'assistant', content: 'd', parentId: a });
  assert.equal((await u.del(`${base}/${id}/turns/${c}`)).status, 200);
  const fork = await u.post(`${base}/${id}/fork`, { turnId: b });
  assert.equal(fork.status, 201, fork.text);
  assert.equal((await u.put(`${base}/${id}`, { headTurnId: b })).status, 200);
  return {
    check(state, when) {
      assert.equal(state[id]?.headTurnId, b, `the switched head ${when}`);
      assert.deepEqual(state[id].turns.map((t) => [t._id, t.parentId, t.content]), [[a, null, 'a'], [b, a, 'b edited'], [d, a, 'd']], `the tree ${when}`);
      const f = state[fork.body.data._id];
      assert.deepEqual(f?.forkedFrom, { session: id, turn: b }, `the fork ${when}`);
      assert.deepEqual(f.turns.map((t) => t.content), ['a', 'b edited'], `the fork's copies ${when}`);
      assert.equal(f.turns[1].parentId, f.turns[0]._id);
      assert.equal(f.headTurnId, f.turns[1]._id);
    },
  };
}

/** Runs `fn` over items with at most `n` at a time. */
async function parallel(items, n, fn) {
  const queue = [...items];
  await Promise.all(Array.from({ length: n }, async () => {
    while (queue.length > 0) await fn(queue.shift());
  }));
}

describe('Torn final record', JOURNAL_FILES, () => {
  for (const kind of ['session put', 'turn', 'delete tombstone']) {
    test(`a torn or half-written last record (${kind}) is dropped at start at every byte offset, with a warning saying how many bytes`, async () => {
      const dir = tempDir();
      let s = await startServer({ dataDir: dir });
      const u = s.as('alice');
      const a = (await u.post('/api/v1/chat-sessions', newSession({ name: 'a' }))).body.data;
      const b = (await u.post('/api/v1/chat-sessions', newSession({ name: 'b' }))).body.data;
      await s.stop();
      const base = readFileSync(join(dir, JOURNAL));
      s = await startServer({ dataDir: dir });
      const before = await dump(s);
      const v = s.as('alice');
      if (kind === 'session put') await v.post('/api/v1/chat-sessions', newSession({ name: 'c' }));
      else if (kind === 'turn') await v.post(`/api/v1/chat-sessions/${a._id}/turns`, { role: 'user', content: 'hi' });
      else await v.del(`/api/v1/chat-sessions/${b._id}`);
      const after = await dump(s);
      await s.stop();
      const full = readFileSync(join(dir, JOURNAL));
      const lastLen = full.length - base.length;
      assert.ok(lastLen > 20, 'the op wrote one record');
      assert.ok(!full.subarray(base.length, full.length - 1).includes(0x0a), 'one line');
      try {
        const offsets = Array.from({ length: lastLen + 1 }, (_, k) => k);
        await parallel(offsets, 3, async (k) => {
          const r = await startOn(dir, full.subarray(0, base.length + k));
          if (k === lastLen) {
            assert.deepEqual(r.state, after, 'the whole record is replayed');
            return;
          }
          assert.deepEqual(r.state, before, `offset ${k}: the torn record is dropped, the rest intact`);
          assert.equal(r.size, base.length, `offset ${k}: the journal is cut back to its last intact record`);
          const warn = r.logs.find((l) => /interrupted final write/.test(l.msg));
          if (k === 0) assert.equal(warn, undefined);
          else {
            assert.equal(warn?.level, 'warn', `offset ${k}`);
            assert.equal(warn.droppedBytes, k, `offset ${k}: says how many bytes were dropped`);
          }
        });
      } finally {
        removeDir(dir);
      }
    });
  }

  test('a complete last line whose checksum does not match is dropped the same way (nothing intact follows it)', async () => {
    const dir = tempDir();
    const s = await startServer({ dataDir: dir });
    const u = s.as('alice');
    await u.post('/api/v1/chat-sessions', newSession({ name: 'keep' }));
    await u.post('/api/v1/chat-sessions', newSession({ name: 'rot' }));
    await s.stop();
    const full = readFileSync(join(dir, JOURNAL));
    const i = full.lastIndexOf('"rot"');
    full[i + 1] = 'R'.charCodeAt(0);
    try {
      const r = await startOn(dir, full);
      assert.deepEqual(Object.values(r.state).map((x) => x.name), ['keep']);
      assert.ok(r.logs.some((l) => /interrupted final write/.test(l.msg)));
    } finally {
      removeDir(dir);
    }
  });
});

describe('Damage that is not a torn tail', JOURNAL_FILES, () => {
  async function damagedRefusal(mutate) {
    const dir = tempDir();
    const s = await startServer({ dataDir: dir });
    const u = s.as('alice');
    for (const name of ['one', 'two', 'three', 'four']) await u.post('/api/v1/chat-sessions', newSession({ name }));
    await s.stop();
    const file = join(dir, JOURNAL);
    const damaged = mutate(readFileSync(file));
    writeFileSync(file, damaged);
    const r = runCli([], { env: { DATA_DIR: dir, PORT: '0', AUTH_SECRET: SECRET } });
    const untouched = readFileSync(file).equals(damaged);
    removeDir(dir);
    return { ...r, untouched };
  }

  const lineStart = (buf, n) => {
    let at = 0;
    for (let i = 1; i < n; i++) at = buf.indexOf(0x0a, at) + 1;
    return at;
  };

  test('a checksum mismatch in the middle stops the start with a message naming file, line and byte offset, and what to do; nothing is changed', async () => {
    let offset;
    const r = await damagedRefusal((buf) => {
      offset = lineStart(buf, 3);
      const i = buf.indexOf('"two"', offset);
      buf[i + 1] = 'T'.charCodeAt(0);
      return buf;
    });
    assert.equal(r.code, 1);
    assert.match(r.stderr, new RegExp(`sessions\\.journal: damaged record at line 3 \\(byte offset ${offset}\\): checksum mismatch`));
    assert.match(r.stderr, /2 more line\(s\) follow it \(2 intact\)/);
    assert.match(r.stderr, /import/);
    assert.match(r.stderr, new RegExp(`truncate -s ${offset}`));
    assert.ok(r.untouched, 'the journal was not modified');
  });

  test('a broken line (not JSON, not a journal line) in the middle stops the start', async () => {
    const r = await damagedRefusal((buf) => {
      const at = lineStart(buf, 2);
      return Buffer.concat([buf.subarray(0, at), Buffer.from('this is not a record\n'), buf.subarray(at)]);
    });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /damaged record at line 2 .*not a journal line/);
    assert.ok(r.untouched);
  });

  test('a lost newline that merges two records in the middle stops the start', async () => {
    const r = await damagedRefusal((buf) => {
      const nl = lineStart(buf, 3) - 1;
      return Buffer.concat([buf.subarray(0, nl), buf.subarray(nl + 1)]);
    });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /damaged record at line 2/);
  });

  test('a damaged header with records after it stops the start; "Damage at the header never suggests cutting the file there, which would keep nothing"', async () => {
    const r = await damagedRefusal((buf) => {
      buf[12] = 'X'.charCodeAt(0);
      return buf;
    });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /damaged record at line 1 \(byte offset 0\)/);
    // cutting the file at its header would throw away every record: a backup is the way back
    assert.doesNotMatch(r.stderr, /truncate/);
    assert.match(r.stderr, /restore from a backup/);
  });

  test('"A journal with Windows line endings (CRLF), as a copy through a text-mode tool leaves, is not damaged: the start stops with one line saying how to convert it back" (never `truncate -s 0`), nothing is changed, and after the conversion every record is there (regression)', async () => {
    const dir = tempDir();
    try {
      const s = await startServer({ dataDir: dir });
      const u = s.as('alice');
      for (const name of ['one', 'two']) {
        const id = (await u.post('/api/v1/chat-sessions', newSession({ name }))).body.data._id;
        await u.post(`/api/v1/chat-sessions/${id}/turns`, { role: 'user', content: `line one\r\nline two of ${name}` });
      }
      const before = await dump(s);
      await s.stop();
      const file = join(dir, JOURNAL);
      const crlf = Buffer.from(readFileSync(file, 'latin1').replace(/\n/g, '\r\n'), 'latin1');
      writeFileSync(file, crlf);
      const r = runCli([], { env: { DATA_DIR: dir, PORT: '0', AUTH_SECRET: SECRET } });
      assert.equal(r.code, 1);
      const lines = r.stderr.split('\n').filter((l) => l !== '');
      assert.equal(lines.length, 1, r.stderr);
      assert.match(lines[0], /sessions\.journal: the journal has Windows line endings \(CRLF\).*its records are intact\. Nothing was changed\./);
      assert.doesNotMatch(r.stderr, /truncate/);
      assert.ok(readFileSync(file).equals(crlf), 'the journal was not modified');
      // the advice, as given
      const command = /`(sed -i [^`]+)`/.exec(lines[0])[1];
      assert.equal(spawnSync('bash', ['-c', command], { cwd: dir }).status, 0, command);
      const again = await startServer({ dataDir: dir });
      try {
        assert.deepEqual(await dump(again), before);
      } finally {
        await again.stop();
      }
    } finally {
      removeDir(dir);
    }
  });

  test('a file that is not a journal at all stops the start (and is not wiped)', async () => {
    const r = await damagedRefusal(() => Buffer.from('{"some":"json"}\n{"other":1}\n'));
    assert.equal(r.code, 1);
    assert.match(r.stderr, /sessions\.journal: damaged record at line 1/);
    assert.ok(r.untouched);
  });

  test('a one-line file that is not a journal stops the start and is not wiped (regression)', async () => {
    const r = await damagedRefusal(() => Buffer.from(`${JSON.stringify({ big: 'x'.repeat(30_000) })}\n`));
    assert.equal(r.code, 1);
    assert.match(r.stderr, /sessions\.journal: damaged record at line 1 \(byte offset 0\)/);
    assert.ok(r.untouched);
    const noNewline = await damagedRefusal(() => Buffer.from('some other file without a newline'));
    assert.equal(noNewline.code, 1);
    assert.ok(noNewline.untouched);
  });

  test('a journal whose header write was interrupted (a prefix of it, or zeros) starts afresh', async () => {
    for (const bytes of [Buffer.from('1a2b3c4d {"format":"chat-ses'), Buffer.from('1a2b'), Buffer.alloc(40)]) {
      const dir = tempDir();
      writeFileSync(join(dir, JOURNAL), bytes);
      const s = await startServer({ dataDir: dir });
      try {
        assert.ok(s.logs().some((l) => /no intact header; starting it afresh/.test(l.msg)), String(bytes));
        assert.equal((await s.as('alice').post('/api/v1/chat-sessions', newSession())).status, 201);
      } finally {
        await s.stop();
        removeDir(dir);
      }
    }
  });

  test('two damaged lines at the end are more than one interrupted write: the start stops', async () => {
    const r = await damagedRefusal((buf) => Buffer.concat([buf, Buffer.from('garbage one\ngarbage two\n')]));
    assert.equal(r.code, 1);
    assert.match(r.stderr, /1 more line\(s\) follow it \(0 intact\)/);
    assert.ok(r.untouched);
  });
});

describe('Compaction', JOURNAL_FILES, () => {
  test('the journal is rewritten when dead records outweigh live ones, so it stays within a small multiple of the live data', async () => {
    const s = await startServer({ env: { COMPACT_MIN_SIZE: '8kb' } });
    try {
      const u = s.as('alice');
      const ids = [];
      for (let i = 0; i < 5; i++) ids.push((await u.post('/api/v1/chat-sessions', newSession({ name: `s${i}` }))).body.data._id);
      for (let i = 0; i < 600; i++) await u.put(`/api/v1/chat-sessions/${ids[i % 5]}`, { name: `s${i % 5}-v${i}` });
      // the last write may have started a compaction, which ends after its answer (the journal is
      // one file again then): read the figures once the file and the gauge agree
      let bytes;
      let live;
      let compactions;
      for (let tries = 0; ; tries++) {
        await waitFor(() => !existsSync(join(s.dataDir, `${JOURNAL}.next`)), 'the last compaction to finish');
        const metrics = (await s.request('GET', '/metrics')).text;
        bytes = Number(/chat_session_api_journal_bytes (\d+)/.exec(metrics)[1]);
        live = Number(/chat_session_api_journal_live_bytes (\d+)/.exec(metrics)[1]);
        compactions = Number(/chat_session_api_compactions_total (\d+)/.exec(metrics)[1]);
        if (statSync(join(s.dataDir, JOURNAL)).size === bytes) break;
        assert.ok(tries < 500, `the journal file (${statSync(join(s.dataDir, JOURNAL)).size} bytes) and the gauge (${bytes}) never agree`);
        await new Promise((r) => setTimeout(r, 10));
      }
      assert.ok(compactions >= 5, `compactions ${compactions}`);
      assert.ok(bytes <= 2 * live + 8 * 1024, `journal ${bytes} bytes for ${live} live bytes`);
      const state = await dump(s);
      await s.stop();
      const again = await startServer({ dataDir: s.dataDir });
      try {
        assert.deepEqual(await dump(again), state);
      } finally {
        await again.stop();
      }
    } finally {
      removeDir(s.dataDir);
    }
  });

  test('"A failed directory fsync after the compaction\'s rename refuses nothing: either name holds a whole journal": writes go on, and after a kill every acknowledged write is there (regression)', async () => {
    const s = await startServer({ env: { COMPACT_MIN_SIZE: '4kb', CHAT_SESSION_API_FAULTS: 'dirsync:1' } });
    const u = s.as('alice');
    const acked = new Map();
    try {
      const ids = [];
      for (let i = 0; i < 4; i++) {
        const r = await u.post('/api/v1/chat-sessions', newSession({ name: `s${i}` }));
        ids.push(r.body.data._id);
        acked.set(r.body.data._id, `s${i}`);
      }
      for (let i = 0; i < 300; i++) {
        const id = ids[i % ids.length];
        const r = await u.put(`/api/v1/chat-sessions/${id}`, { name: `n${i}` });
        assert.equal(r.status, 200, r.text);
        acked.set(id, `n${i}`);
      }
      await waitFor(() => s.logs().some((l) => /fsync of the data directory failed after a compaction/.test(l.msg)), 'the failure');
    } finally {
      await s.kill();
    }
    const again = await startServer({ dataDir: s.dataDir });
    try {
      const state = await dump(again);
      for (const [id, name] of acked) assert.equal(state[id]?.name, name, `acknowledged ${id}`);
    } finally {
      await again.stop();
      removeDir(s.dataDir);
    }
  });

  test('"compaction in pieces" keeps every tree: parents, heads, edits, deleted turns and forks spread over several pieces of a journal on a small disk are the same after the compaction and after a restart', async (t) => {
    // a small file system makes small pieces (an eighth of the free space, at least 64 KiB)
    const disk = smallDisk(t, '3m');
    if (disk === undefined) return;
    const s = await startServer({ dataDir: disk.dir, env: { COMPACT_MIN_SIZE: '4kb', BODY_LIMIT: '1mb' } });
    try {
      const u = s.as('alice');
      const big = (c) => `${c}${'.'.repeat(20_000)}`;
      const other = (await u.post('/api/v1/chat-sessions', newSession({ name: 'other' }))).body.data._id;
      const renames = async (n) => {
        for (let i = 0; i < n; i++) assert.equal((await u.put(`/api/v1/chat-sessions/${other}`, { name: `${i}${'n'.repeat(480)}` })).status, 200);
      };
      const id = (await u.post('/api/v1/chat-sessions', newSession({ name: 'tree' }))).body.data._id;
      const turn = async (body) => {
        const r = await u.post(`/api/v1/chat-sessions/${id}/turns`, body);
        assert.equal(r.status, 201, r.text);
        return r.body.data._id;
      };
      const a = await turn({ role: 'user', content: big('a') });
      const b = await turn({ role: 'assistant', content: big('b') });
      await renames(150);
      const c = await turn({ role: 'assistant', content: big('c'), parentId: a });
      const d = await turn({ role: 'user', content: big('d'), parentId: b });
      assert.equal((await u.put(`/api/v1/chat-sessions/${id}/turns/${a}`, { content: big('a edited') })).status, 200);
      await renames(150);
      assert.equal((await u.del(`/api/v1/chat-sessions/${id}/turns/${c}`)).status, 200);
      const fork = await u.post(`/api/v1/chat-sessions/${id}/fork`, { turnId: d });
      assert.equal(fork.status, 201, fork.text);
      assert.equal((await u.put(`/api/v1/chat-sessions/${id}`, { headTurnId: b })).status, 200);
      const e = await turn({ role: 'user', content: big('e') });
      await renames(150);
      await waitFor(async () => !existsSync(join(disk.dir, `${JOURNAL}.next`)) && /chat_session_api_compactions_total [1-9]/.test((await s.request('GET', '/metrics')).text), 'a compaction to finish');
      const before = await dump(s);
      const tree = before[id];
      assert.equal(tree.headTurnId, e, 'the head is the turn appended last');
      assert.deepEqual(tree.turns.map((x) => [x._id, x.parentId, x.content.slice(0, 8)]), [
        [a, null, 'a edited'],
        [b, a, 'b.......'],
        [d, b, 'd.......'],
        [e, b, 'e.......'],
      ]);
      const copies = before[fork.body.data._id].turns;
      assert.deepEqual(copies.map((x) => x.content[0]), ['a', 'b', 'd']);
      assert.equal(copies[0].content.slice(0, 8), 'a edited');
      assert.equal(before[fork.body.data._id].headTurnId, copies[2]._id);
      await s.stop();
      const again = await startServer({ dataDir: disk.dir });
      try {
        assert.deepEqual(await dump(again), before, 'after a restart');
        assert.ok(!again.logs().some((l) => l.level !== 'info'), JSON.stringify(again.logs().filter((l) => l.level !== 'info')));
      } finally {
        await again.stop();
      }
    } finally {
      await s.stop();
      disk.release();
    }
  });

  for (const step of ['compact-start', 'compact-piece', 'compact-moved', 'compact-cut', 'compact-before-rename', 'compact-after-rename', 'compact-done']) {
    test(`"So a kill at any step loses nothing: the next start replays the two files and the compaction goes on from where it stopped": a kill during compaction (at ${step}) loses nothing, and the next start goes on with the compaction until the journal is one file again`, async () => {
      const dir = tempDir();
      const s = await startServer({ dataDir: dir, env: { COMPACT_MIN_SIZE: '4kb', CHAT_SESSION_API_FAULTS: `crash:${step}` } });
      const u = s.as('alice');
      const names = new Map();
      let pending;
      let tree;
      try {
        // a conversation first (before any compaction): a branch, an edit, a deleted turn, a fork, a switched head
        tree = await conversation(u);
        for (let i = 0; i < 6; i++) {
          const r = await u.post('/api/v1/chat-sessions', newSession({ name: `s${i}` }));
          names.set(r.body.data._id, r.body.data.name);
          for (let k = 0; k < 3; k++) assert.equal((await u.post(`/api/v1/chat-sessions/${r.body.data._id}/turns`, { role: 'user', content: `turn ${k}` })).status, 201);
        }
        // a session and its turns deleted: its tombstone is carried over by the compaction
        const gone = (await u.post('/api/v1/chat-sessions', newSession({ name: 'gone' }))).body.data._id;
        await u.post(`/api/v1/chat-sessions/${gone}/turns`, { role: 'user', content: 'gone' });
        assert.equal((await u.del(`/api/v1/chat-sessions/${gone}`)).status, 200);
        const ids = [...names.keys()];
        for (let i = 0; i < 2000; i++) {
          const id = ids[i % ids.length];
          pending = { id, name: `${names.get(id)}.${i}` };
          const r = await u.put(`/api/v1/chat-sessions/${id}`, { name: pending.name });
          assert.equal(r.status, 200);
          names.set(id, pending.name);
          pending = undefined;
        }
        assert.fail('the server should have crashed at the crash point');
      } catch (e) {
        if (e instanceof assert.AssertionError) throw e;
      }
      const { signal } = await s.exit;
      assert.equal(signal, 'SIGKILL');
      const check = async (server, when) => {
        const state = await dump(server);
        tree.check(state, when);
        for (const [id, name] of names) {
          const got = state[id]?.name;
          if (pending?.id === id && got === pending.name) continue; // the write in flight may have landed
          assert.equal(got, name, `${id} ${when}`);
          assert.deepEqual(state[id].turns.map((t) => t.content), ['turn 0', 'turn 1', 'turn 2'], `${id}'s turns ${when}`);
        }
        assert.equal(Object.keys(state).length, names.size + 2, `no session more or less ${when}`);
      };
      const again = await startServer({ dataDir: dir, env: { COMPACT_MIN_SIZE: '4kb' } });
      try {
        await check(again, `after a kill at ${step}`);
        assert.equal(existsSync(join(dir, `${JOURNAL}.compact`)), false, 'no temp file left');
        // the compaction goes on by itself (at start, or at the next write)
        await again.as('alice').put(`/api/v1/chat-sessions/${[...names.keys()][0]}`, { name: names.get([...names.keys()][0]) });
        await waitFor(() => !existsSync(join(dir, `${JOURNAL}.next`)), 'the journal to be one file again');
        assert.ok(!again.logs().some((l) => l.level === 'error' || /dropped turns/.test(l.msg)), JSON.stringify(again.logs().filter((l) => l.level !== 'info')));
      } finally {
        await again.stop();
      }
      const third = await startServer({ dataDir: dir });
      try {
        await check(third, 'after the compaction finished');
      } finally {
        await third.stop();
        removeDir(dir);
      }
    });
  }
});

describe('Failed writes (fault injection)', () => {
  const N = 8;
  /** A fixed sequence of writes; returns the model of what was acknowledged. */
  async function run(u) {
    const acked = new Map();
    const results = [];
    const note = (r) => results.push(r.status);
    let r = await u.post('/api/v1/chat-sessions', newSession({ name: 'first' }));
    note(r);
    if (r.status === 201) acked.set(r.body.data._id, { name: 'first', turns: [], archived: false });
    const first = r.body.data?._id;
    r = await u.post('/api/v1/chat-sessions', newSession({ name: 'second' }));
    note(r);
    if (r.status === 201) acked.set(r.body.data._id, { name: 'second', turns: [], archived: false });
    const second = r.body.data?._id;
    const ops = [
      [first, () => u.put(`/api/v1/chat-sessions/${first}`, { name: 'first-renamed' }), (m) => (m.name = 'first-renamed')],
      [first, () => u.post(`/api/v1/chat-sessions/${first}/turns`, { role: 'user', content: 'q' }), (m) => m.turns.push('q')],
      [second, () => u.post(`/api/v1/chat-sessions/${second}/archive`, {}), (m) => (m.archived = true)],
      [first, () => u.post(`/api/v1/chat-sessions/${first}/turns`, { role: 'assistant', content: 'a' }), (m) => m.turns.push('a')],
      [second, () => u.del(`/api/v1/chat-sessions/${second}`), (m) => (m.deleted = true)],
      [first, () => u.put(`/api/v1/chat-sessions/${first}`, { name: 'first-final' }), (m) => (m.name = 'first-final')],
    ];
    for (const [id, call, apply] of ops) {
      if (id === undefined) {
        results.push('skipped');
        continue;
      }
      r = await call();
      note(r);
      if (r.status >= 200 && r.status < 300) apply(acked.get(id));
    }
    return { acked, results };
  }

  for (const kind of STORE === 'journal' ? ['write', 'fsync'] : ['commit']) {
    test(`a failing ${STORE} ${kind} at the k-th operation (k = 1..${N}) gets a 5xx, never a 2xx; reads keep being served; after restart the API shows exactly what was acknowledged`, async () => {
      for (let k = 1; k <= N; k++) {
        const code = k % 2 === 0 ? 'ENOSPC' : 'EIO';
        const s = await startServer({ env: { CHAT_SESSION_API_FAULTS: `${kind}:${k}:${code}` } });
        try {
          const u = s.as('alice');
          const { acked, results } = await run(u);
          const failed = results.filter((x) => x === 500).length;
          assert.equal(failed, 1, `k=${k}: exactly one 500 (${results})`);
          assert.equal(results.indexOf(500), k - 1, `k=${k}: the k-th write failed (${results})`);
          assert.ok(results.every((x) => x === 500 || x === 'skipped' || (x >= 200 && x < 300) || x === 404), `k=${k}: ${results}`);
          assert.equal((await u.get('/api/v1/chat-sessions?archived=all')).status, 200, 'reads keep being served');
          const failLog = s.logs().find((l) => /store write failed/.test(l.msg));
          assert.ok(failLog, 'the failure is logged');
          const leaked = JSON.stringify(s.logs().filter((l) => l.msg === 'request failed'));
          assert.equal(leaked.includes(s.dataDir), false, 'the answer leaks no path');
          await s.kill();
          const again = await startServer({ dataDir: s.dataDir });
          try {
            const state = await dump(again);
            const expected = {};
            for (const [id, m] of acked) if (!m.deleted) expected[id] = m;
            assert.deepEqual(Object.keys(state).sort(), Object.keys(expected).sort(), `k=${k}: the same sessions`);
            for (const [id, m] of Object.entries(expected)) {
              assert.equal(state[id].name, m.name, `k=${k}: name`);
              assert.equal(state[id].archived, m.archived, `k=${k}: archived`);
              assert.deepEqual(state[id].turns.map((t) => t.content), m.turns, `k=${k}: turns`);
            }
          } finally {
            await again.stop();
          }
        } finally {
          await s.stop();
          removeDir(s.dataDir);
        }
      }
    });
  }

  test('the 500 for a failed write says "Storage write failed" and nothing else', async () => {
    const s = await startServer({ env: { CHAT_SESSION_API_FAULTS: `${STORE === 'journal' ? 'fsync' : 'commit'}:1:EIO` } });
    try {
      const r = await s.as('alice').post('/api/v1/chat-sessions', newSession());
      assert.equal(r.status, 500);
      assert.deepEqual(r.body, { success: false, message: 'Storage write failed' });
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });
});

describe('Write path', () => {
  test('Concurrent writes share an fsync (group commit): 64 concurrent creates take far fewer than 64 fsyncs, and each got its 201', async () => {
    const s = await startServer();
    try {
      const u = s.as('alice');
      const fsyncs = async () => Number(/chat_session_api_commit_duration_seconds_count (\d+)/.exec((await s.request('GET', '/metrics')).text)[1]);
      const before = await fsyncs();
      const answers = await Promise.all(Array.from({ length: 64 }, (_, i) => u.post('/api/v1/chat-sessions', newSession({ name: `c${i}` }))));
      const used = (await fsyncs()) - before;
      assert.ok(answers.every((r) => r.status === 201));
      assert.ok(used >= 1 && used < 64, `${used} fsyncs for 64 creates`);
      assert.equal((await u.get('/api/v1/chat-sessions')).body.data.length, 64);
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('A write that fails to persist changes nothing in memory and answers 500 (a create, an update, a turn, a delete)', async () => {
    // writes 2, 3, 4 and 5 fail: the first create is the session the others try to change
    const s = await startServer({ env: { CHAT_SESSION_API_FAULTS: failingWrite(2, 3, 4, 5) } });
    try {
      const u = s.as('alice');
      const kept = (await u.post('/api/v1/chat-sessions', newSession({ name: 'kept' }))).body.data;
      const before = await u.get(`/api/v1/chat-sessions/${kept._id}`);
      assert.equal((await u.post('/api/v1/chat-sessions', newSession({ name: 'lost' }))).status, 500);
      assert.equal((await u.put(`/api/v1/chat-sessions/${kept._id}`, { name: 'renamed' })).status, 500);
      assert.equal((await u.post(`/api/v1/chat-sessions/${kept._id}/turns`, { role: 'user', content: 'x' })).status, 500);
      assert.equal((await u.del(`/api/v1/chat-sessions/${kept._id}`)).status, 500);
      const after = await u.get(`/api/v1/chat-sessions/${kept._id}`);
      assert.deepEqual(after.body, before.body, 'the session is as it was');
      assert.equal(after.headers.etag, before.headers.etag);
      assert.deepEqual((await u.get(`/api/v1/chat-sessions/${kept._id}/turns`)).body.data, []);
      assert.deepEqual((await u.get('/api/v1/chat-sessions')).body.data.map((x) => x.name), ['kept']);
      assert.equal((await u.put(`/api/v1/chat-sessions/${kept._id}`, { name: 'now it works' })).status, 200, 'the next write goes through');
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });
});

describe('One owner per data directory', () => {
  test('a stale lock left by a dead process is taken over', async () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'lock'), JSON.stringify({ pid: 999_999, host: (await import('node:os')).hostname(), startedAt: '2020-01-01T00:00:00.000Z' }));
    const s = await startServer({ dataDir: dir });
    try {
      assert.ok(s.logs().some((l) => l.msg === 'took over a stale data directory lock' && l.pid === 999_999));
      assert.equal(JSON.parse(readFileSync(join(dir, 'lock'), 'utf8')).pid, s.child.pid);
    } finally {
      await s.stop();
      removeDir(dir);
    }
  });

  test('an unreadable (half-written) lock file is treated as stale', async () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'lock'), '{"pid":');
    const s = await startServer({ dataDir: dir });
    try {
      assert.ok(s.logs().some((l) => l.msg === 'took over a stale data directory lock'));
    } finally {
      await s.stop();
      removeDir(dir);
    }
  });
});
