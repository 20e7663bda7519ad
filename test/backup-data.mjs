// A varied data set made through the API, and every answer a client could see about it:
// what the backup tests and the moves between engines compare before and after.
import assert from 'node:assert/strict';
import { newSession } from './helpers.mjs';

/** Creates a varied data set: two users, projects, modes, names, archived sessions, turns with model and metadata, updates and deletions. */
export async function populate(server) {
  const alice = server.as('alice');
  const bob = server.as('bob');
  const live = [];
  const deleted = [];
  const turnIdsOfDeleted = [];
  const make = async (u, over) => {
    const r = await u.post('/api/v1/chat-sessions', newSession(over));
    assert.equal(r.status, 201);
    return r.body.data;
  };
  for (let i = 0; i < 6; i++) {
    const s = await make(alice, { projectId: i % 2 === 0 ? 'p1' : 'p2', name: i === 0 ? '' : `alice ${i} "quoted" \\ ünïcødé 🚀`, mode: ['Build', 'Plan', 'Ask'][i % 3] });
    live.push(s._id);
  }
  for (let i = 0; i < 4; i++) {
    const s = await make(bob, { projectId: i < 2 ? 'p1' : 'p3', name: `bob ${i}`, selectedModel: 'claude-sonnet-4-5', providerId: '665f1c2a9b1e8a0012ab34c2' });
    live.push(s._id);
  }
  // turns, some with model and metadata
  for (const [k, id] of live.entries()) {
    for (let t = 0; t < (k % 4) + 1; t++) {
      const body = { role: ['user', 'assistant', 'system', 'tool'][t % 4], content: `turn ${t} of ${k}\nline two` };
      if (t % 2 === 1) body.model = 'gpt-4o';
      if (t === 2) body.metadata = { tokens: 12, nested: { a: [1, 'two', null, true] } };
      const r = await (k < 6 ? alice : bob).post(`/api/v1/chat-sessions/${id}/turns`, body);
      assert.equal(r.status, 201, JSON.stringify(r.body));
    }
  }
  // updates and archives
  assert.equal((await alice.put(`/api/v1/chat-sessions/${live[1]}`, { name: 'renamed', mode: 'Ask', selectedModel: 'gpt-4o-mini' })).status, 200);
  assert.equal((await alice.post(`/api/v1/chat-sessions/${live[2]}/archive`, {})).status, 200);
  assert.equal((await bob.post(`/api/v1/chat-sessions/${live[7]}/archive`, {})).status, 200);
  assert.equal((await alice.post(`/api/v1/chat-sessions/${live[3]}/archive`, {})).status, 200);
  assert.equal((await alice.post(`/api/v1/chat-sessions/${live[3]}/unarchive`, {})).status, 200);
  // deleted sessions, with turns
  for (let i = 0; i < 2; i++) {
    const s = await make(alice, { projectId: 'p1', name: `doomed ${i}` });
    for (let t = 0; t < 3; t++) turnIdsOfDeleted.push((await alice.post(`/api/v1/chat-sessions/${s._id}/turns`, { role: 'user', content: `doomed turn ${t}` })).body.data._id);
    assert.equal((await alice.del(`/api/v1/chat-sessions/${s._id}`)).status, 200);
    deleted.push(s._id);
  }
  return { live, deleted, turnIdsOfDeleted, users: ['alice', 'bob', 'carol'], projects: ['p1', 'p2', 'p3', 'nope'] };
}

/** Follows nextCursor from `path` (which has limit) to the end; returns every page's text. */
async function pages(u, path) {
  const out = [];
  let next = path;
  for (let guard = 0; guard < 100; guard++) {
    const r = await u.get(next);
    out.push({ path: next, status: r.status, text: r.text });
    if (r.status !== 200 || r.body.nextCursor === null) return out;
    next = `${path}&cursor=${encodeURIComponent(r.body.nextCursor)}`;
  }
  throw new Error(`paging ${path} did not end`);
}

/** Every response a client could see about the data set: status, ETag and exact body text. */
export async function capture(server, { live, deleted, users, projects }) {
  const out = [];
  for (const who of users) {
    const u = server.as(who);
    const lists = ['', '?archived=all', '?archived=true', '?archived=false', '?q=ALICE', '?q=bob&archived=all'];
    for (const p of projects) lists.push(`?projectId=${p}`, `?projectId=${p}&archived=all`, `?projectId=${p}&archived=true`);
    for (const q of lists) {
      const r = await u.get(`/api/v1/chat-sessions${q}`);
      out.push({ who, path: q, status: r.status, text: r.text });
      const sep = q === '' ? '?' : '&';
      for (const limit of [1, 2, 3]) out.push({ who, paged: await pages(u, `/api/v1/chat-sessions${q}${sep}limit=${limit}`) });
    }
  }
  const u = server.as('alice');
  for (const id of [...live, ...deleted, 'ffffffffffffffffffffffff']) {
    const r = await u.get(`/api/v1/chat-sessions/${id}`);
    out.push({ id, status: r.status, etag: r.headers.etag, text: r.text });
    const t = await u.get(`/api/v1/chat-sessions/${id}/turns`);
    out.push({ id, turns: t.status, text: t.text });
    out.push({ id, paged: await pages(u, `/api/v1/chat-sessions/${id}/turns?limit=2`) });
  }
  const m = (await server.request('GET', '/metrics')).text;
  out.push({ gauges: m.split('\n').filter((l) => /^chat_session_api_(sessions|turns) /.test(l)) });
  return out;
}

