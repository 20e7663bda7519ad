// The store never loses an acknowledged write: SIGKILL under concurrent load, again and again,
// and after each restart every acknowledged change is there exactly, nothing half-written.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { removeDir, startServer, tempDir } from './helpers.mjs';

const KILLS = Number(process.env.CRASH_KILLS ?? 20);
const WORKERS = 8;

/**
 * What the client knows of one session. Each session is driven by one worker, one request at
 * a time, so at a kill there is at most one request whose outcome is unknown (`pending`).
 */
class Model {
  constructor() {
    this.sessions = new Map(); // id -> {name, mode, turns: [content], deleted, archived}
    this.pendingCreates = new Set(); // names of creates that got no answer
    this.pending = new Map(); // id -> the op in flight at the kill
  }
}

function randomInt(n) {
  return Math.floor(Math.random() * n);
}

/** One worker: creates sessions and changes them until `stop.now`; records what was acknowledged. */
async function worker(u, model, w, round, stop) {
  const mine = [];
  let n = 0;
  while (!stop.now) {
    const live = mine.filter((id) => !model.sessions.get(id).deleted);
    const pick = randomInt(10);
    if (live.length === 0 || pick < 2) {
      const name = `w${w}-r${round}-s${n++}`;
      model.pendingCreates.add(name);
      let r;
      try {
        r = await u.post('/api/v1/chat-sessions', { projectId: `proj-${w % 3}`, providerId: 'p', selectedModel: 'm', name });
      } catch {
        return; // killed mid-request: the create may or may not have landed
      }
      model.pendingCreates.delete(name);
      assert.equal(r.status, 201, r.text);
      model.sessions.set(r.body.data._id, { name, mode: 'Build', turns: [], deleted: false, archived: false });
      mine.push(r.body.data._id);
      continue;
    }
    const id = live[randomInt(live.length)];
    const m = model.sessions.get(id);
    let op;
    if (pick < 5) op = { kind: 'update', name: `${m.name}+`, mode: ['Build', 'Plan', 'Ask'][randomInt(3)] };
    else if (pick < 8) op = { kind: 'turn', content: `t${m.turns.length}-${'x'.repeat(randomInt(200))}` };
    else if (pick < 9) op = { kind: 'archive' };
    else op = { kind: 'delete' };
    model.pending.set(id, op);
    let r;
    try {
      if (op.kind === 'update') r = await u.put(`/api/v1/chat-sessions/${id}`, { name: op.name, mode: op.mode });
      else if (op.kind === 'turn') r = await u.post(`/api/v1/chat-sessions/${id}/turns`, { role: 'user', content: op.content });
      else if (op.kind === 'archive') r = await u.post(`/api/v1/chat-sessions/${id}/${m.archived ? 'unarchive' : 'archive'}`, {});
      else r = await u.del(`/api/v1/chat-sessions/${id}`);
    } catch {
      return;
    }
    assert.ok(r.status === 200 || r.status === 201, `${op.kind}: ${r.status} ${r.text}`);
    model.pending.delete(id);
    if (op.kind === 'update') Object.assign(m, { name: op.name, mode: op.mode });
    else if (op.kind === 'turn') m.turns.push(op.content);
    else if (op.kind === 'archive') m.archived = !m.archived;
    else m.deleted = true;
  }
}

/** Checks the restarted server against the model, settling each unknown outcome by what is there. */
async function verify(server, model) {
  const u = server.as('crash');
  const listed = (await u.get('/api/v1/chat-sessions?archived=all')).body.data;
  const byId = new Map(listed.map((s) => [s._id, s]));
  for (const s of listed) {
    if (!model.sessions.has(s._id)) {
      // a create that was in flight at the kill: allowed, once, with exactly what was sent
      assert.ok(model.pendingCreates.has(s.name), `unexpected session ${s._id} ${s.name}`);
      model.pendingCreates.delete(s.name);
      model.sessions.set(s._id, { name: s.name, mode: 'Build', turns: [], deleted: false, archived: false });
      assert.equal(s.mode, 'Build');
      assert.equal(s.archived, false);
    }
  }
  model.pendingCreates.clear();
  for (const [id, m] of model.sessions) {
    const op = model.pending.get(id);
    const s = byId.get(id);
    if (m.deleted) {
      assert.equal(s, undefined, `deleted session ${id} came back`);
      continue;
    }
    if (op?.kind === 'delete' && s === undefined) {
      m.deleted = true; // the in-flight delete landed
      continue;
    }
    assert.ok(s !== undefined, `acknowledged session ${id} (${m.name}) is missing`);
    if (op?.kind === 'update' && s.name === op.name && s.mode === op.mode) Object.assign(m, { name: op.name, mode: op.mode });
    if (op?.kind === 'archive' && s.archived !== m.archived) m.archived = s.archived;
    assert.equal(s.name, m.name, `name of ${id}`);
    assert.equal(s.mode, m.mode, `mode of ${id}`);
    assert.equal(s.archived, m.archived, `archived of ${id}`);
    const turns = (await u.get(`/api/v1/chat-sessions/${id}/turns`)).body.data.map((t) => t.content);
    if (op?.kind === 'turn' && turns.length === m.turns.length + 1) m.turns.push(op.content);
    assert.deepEqual(turns, m.turns, `turns of ${id}`);
    const last = (await u.get(`/api/v1/chat-sessions/${id}/turns`)).body.data.at(-1);
    if (last !== undefined) assert.ok(last.createdAt <= s.updatedAt, 'a turn moved its session');
  }
  model.pending.clear();
}

describe('Crash safety (SIGKILL)', () => {
  test(`SIGKILL under load, ${KILLS} times: every acknowledged change is there, deleted stays deleted, nothing half-written`, async (t) => {
    const dataDir = tempDir('csa-crash-');
    const model = new Model();
    const env = {};
    try {
      for (let round = 0; round < KILLS; round++) {
        const server = await startServer({ dataDir, env });
        await verify(server, model);
        const u = server.as('crash');
        const stop = { now: false };
        const workers = Array.from({ length: WORKERS }, (_, w) => worker(u, model, w, round, stop));
        await new Promise((r) => setTimeout(r, 40 + randomInt(250)));
        await server.kill();
        stop.now = true;
        await Promise.all(workers);
      }
      const last = await startServer({ dataDir, env });
      try {
        await verify(last, model);
        assert.ok(model.sessions.size > 0);
        t.diagnostic(`${model.sessions.size} sessions`);
        assert.equal(last.logs().some((l) => l.level === 'error'), false, JSON.stringify(last.logs().filter((l) => l.level === 'error')));
      } finally {
        await last.stop();
      }
    } finally {
      removeDir(dataDir);
    }
  });
});
