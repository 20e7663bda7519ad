// A varied data set made through the API, and every answer a client could see about it:
// what the backup tests and the moves between engines compare before and after.
import assert from 'node:assert/strict';
import { newSession } from './helpers.mjs';

/**
 * Creates a varied data set: two users, projects, modes, names, archived sessions, turns with
 * model and metadata, updates and deletions; and conversations: branches (a regenerated answer,
 * a second root), a switched head, edited turns, deleted subtrees, typed parts, usage and
 * status, forks (one of another user's session, one of a fork).
 */
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
  // conversations: a tree with a regenerated answer and a second root, edits, a subtree deleted, the head switched
  const tree = await make(alice, { projectId: 'p1', name: 'a conversation' });
  live.push(tree._id);
  const say = async (u, body) => {
    const r = await u.post(`/api/v1/chat-sessions/${tree._id}/turns`, body);
    assert.equal(r.status, 201, r.text);
    return r.body.data;
  };
  const q = await say(alice, { role: 'user', content: 'Fix the failing test.' });
  const a1 = await say(alice, { role: 'assistant', content: [{ type: 'reasoning', text: 'It fails on null.' }, { type: 'text', text: 'Here is a fix.' }], model: 'gpt-4o', usage: { inputTokens: 120, outputTokens: 40 } });
  const call = await say(alice, { role: 'assistant', content: [{ type: 'tool_call', id: 'call_1', name: 'run_tests', arguments: { only: ['a.test.ts'], watch: false } }], status: 'streaming' });
  // finished before its result is posted under it (a turn under one still streaming is refused)
  assert.equal((await alice.put(`/api/v1/chat-sessions/${tree._id}/turns/${call._id}`, { status: 'complete', metadata: { edited: true } })).status, 200);
  await say(bob, { role: 'tool', content: [{ type: 'tool_result', toolCallId: 'call_1', content: { passed: 3, failed: 1 }, isError: true }] });
  const a2 = await say(alice, { role: 'assistant', content: 'A second answer.', parentId: q._id, usage: { inputTokens: 120, outputTokens: 55, cachedTokens: 100, costUsd: 0.0012 } });
  const doomed = await say(alice, { role: 'user', content: [{ type: 'file', name: 'log.txt', mediaType: 'text/plain', data: 'aGVsbG8=' }, { type: 'file', name: 'spec', mediaType: 'application/pdf', url: 'https://example.com/spec.pdf' }] });
  await say(alice, { role: 'assistant', content: 'below the doomed turn' });
  await say(alice, { role: 'user', content: 'a second root', parentId: null });
  assert.equal((await alice.put(`/api/v1/chat-sessions/${tree._id}/turns/${a1._id}`, { content: [{ type: 'text', text: 'Here is a better fix.' }] })).status, 200);
  assert.equal((await alice.del(`/api/v1/chat-sessions/${tree._id}/turns/${doomed._id}`)).status, 200);
  assert.equal((await alice.put(`/api/v1/chat-sessions/${tree._id}`, { headTurnId: a2._id })).status, 200);
  // forks: bob's of alice's conversation at a turn, alice's of that fork at its head, one of an archived session
  const fork = (await bob.post(`/api/v1/chat-sessions/${tree._id}/fork`, { turnId: call._id, name: 'bob forks' })).body.data;
  const forkOfFork = (await alice.post(`/api/v1/chat-sessions/${fork._id}/fork`, {})).body.data;
  await alice.post(`/api/v1/chat-sessions/${forkOfFork._id}/turns`, { role: 'user', content: 'only in the second fork' });
  const archivedFork = (await bob.post(`/api/v1/chat-sessions/${live[7]}/fork`, {})).body.data;
  live.push(fork._id, forkOfFork._id, archivedFork._id);
  const branches = [[tree._id, q._id], [tree._id, a1._id], [tree._id, call._id], [fork._id, 'head']];
  // deleted sessions, with turns
  for (let i = 0; i < 2; i++) {
    const s = await make(alice, { projectId: 'p1', name: `doomed ${i}` });
    for (let t = 0; t < 3; t++) turnIdsOfDeleted.push((await alice.post(`/api/v1/chat-sessions/${s._id}/turns`, { role: 'user', content: `doomed turn ${t}` })).body.data._id);
    assert.equal((await alice.del(`/api/v1/chat-sessions/${s._id}`)).status, 200);
    deleted.push(s._id);
  }
  return { live, deleted, turnIdsOfDeleted, branches, users: ['alice', 'bob', 'carol'], projects: ['p1', 'p2', 'p3', 'nope'] };
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
export async function capture(server, { live, deleted, branches, users, projects }) {
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
    const head = await u.get(`/api/v1/chat-sessions/${id}/turns?branch=head`);
    out.push({ id, head: head.status, text: head.text });
  }
  for (const [id, turn] of branches ?? []) {
    const r = await u.get(`/api/v1/chat-sessions/${id}/turns?branch=${turn}`);
    out.push({ id, branch: turn, status: r.status, text: r.text });
    out.push({ id, branch: turn, paged: await pages(u, `/api/v1/chat-sessions/${id}/turns?branch=${turn}&limit=1`) });
  }
  const m = (await server.request('GET', '/metrics')).text;
  out.push({ gauges: m.split('\n').filter((l) => /^chat_session_api_(sessions|turns) /.test(l)) });
  return out;
}

