// What a delta costs the store, measured without a clock: the bytes the engine writes for it,
// from the engine's own accounts (sqlite: what the server process writes, its WAL frames and
// checkpoints, from /proc; PostgreSQL: the WAL it generates, from the database's insert
// position, on a cluster of its own so that no other test's writes are counted). The first
// deltas of a turn against those after its 2,000th: a store that rewrote the turn for each
// delta wrote more and more (its TOAST value, its overflow pages).
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { after, before, test } from 'node:test';
import { newSession, removeDir, startServer, STORE } from './helpers.mjs';
import { postgresMissing, startCluster, USERS } from './pg/cluster.mjs';

const B = '/api/v1/chat-sessions';
/** Deltas of 32 characters of base64: text that compresses as little as a model's (a store's compression cannot hide a rewrite). */
const piece = () => randomBytes(24).toString('base64');

let cluster;
let pool;
before(async () => {
  if (STORE !== 'postgres' || postgresMissing() !== undefined) return;
  // nothing else writes its WAL: no autovacuum, no timed checkpoint
  cluster = await startCluster({ settings: { autovacuum: 'off', checkpoint_timeout: "'1h'" } });
  const { Pool } = (await import('node:module')).createRequire(import.meta.url)('../dist/testkit.cjs');
  pool = new Pool(cluster.url(USERS.admin.user), { max: 1 });
});
after(async () => {
  await pool?.end();
  await cluster?.destroy();
});

/** The engine's count of bytes written so far. */
async function written(server) {
  if (STORE === 'postgres') return Number((await pool.query("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')")).rows[0][0]);
  return Number(/^wchar: (\d+)$/m.exec(readFileSync(`/proc/${server.child.pid}/io`, 'utf8'))[1]);
}

test(
  '[D-streaming-7] a delta after the 2,000th of a turn writes as many bytes as its first ones',
  { skip: STORE === 'postgres' && postgresMissing() !== undefined ? 'PostgreSQL is not installed' : process.platform !== 'linux' ? 'reads /proc' : false },
  async (t) => {
    const env = { EVENTS: 'off', FSYNC: 'off', BODY_LIMIT: '1mb', ...(STORE === 'postgres' ? { DATABASE_URL: cluster.url(USERS.admin.user), DATABASE_SCHEMA: 'cost' } : {}) };
    const s = await startServer({ env });
    try {
      const u = s.as('writer');
      const sid = (await u.post(B, newSession())).body.data._id;
      const tid = (await u.post(`${B}/${sid}/turns`, { role: 'assistant', content: '', status: 'streaming' })).body.data._id;
      let text = '';
      const deltas = async (n) => {
        const from = await written(s);
        for (let i = 0; i < n; i++) {
          const t = piece();
          const r = await u.post(`${B}/${sid}/turns/${tid}/deltas`, { text: t });
          assert.equal(r.status, 200, r.text);
          assert.equal(r.body.data.at, text.length);
          text += t;
        }
        return (await written(s)) - from;
      };
      await deltas(10);
      const first = await deltas(250);
      await deltas(1750);
      const late = await deltas(250);
      const perDelta = (b) => Math.round(b / 250);
      const said = `${perDelta(first)} bytes a delta at first, ${perDelta(late)} after 2,000 deltas (the turn: ${text.length} characters)`;
      assert.ok(late <= first * 1.25, said);
      // a rewrite would write the turn, 64 KB by now, for each delta; a delta writes a few pages (sqlite's are 4 KiB)
      assert.ok(perDelta(late) < text.length / 2, said);
      t.diagnostic(said);
      const got = (await u.get(`${B}/${sid}/turns/${tid}`)).body.data;
      assert.equal(got.content, text, 'every delta is in the turn');
      const ended = await u.put(`${B}/${sid}/turns/${tid}`, { status: 'complete' });
      assert.equal(ended.body.data.content, text, 'the end folds them into the turn');
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  },
);
