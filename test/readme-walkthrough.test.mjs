// The documents' walkthroughs run as written (docs/DECISIONS.md, "The documents"): every console
// block of the README and of each document under docs/, document by document, typed into one
// bash session against a fresh `npm start` of its own, prints what the document says it prints.
// See test/walkthrough.mjs for how run-to-run differences are matched.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { newSession, removeDir, ROOT, startServer } from './helpers.mjs';
import { openEvents } from './sse.mjs';
import { driftedTimes, matchOutput, parseWalkthrough, runWalkthrough, walkthroughDocuments } from './walkthrough.mjs';

function haveCurl(t) {
  if (spawnSync('curl', ['--version']).status === 0) return true;
  if (process.env.REQUIRE_CURL === '1') throw new Error('REQUIRE_CURL=1 but curl is not installed (apt-get install curl)');
  console.log('# SKIPPED: no curl on this machine (apt-get install curl); the documents\' walkthroughs were not run');
  t.skip('no curl');
  return false;
}

const read = (doc) => readFileSync(join(ROOT, doc), 'utf8');

/** Each walked document with its steps. */
function walked() {
  return walkthroughDocuments().map((doc) => ({ doc, text: read(doc), steps: parseWalkthrough(read(doc), doc) }));
}

test('the documents that show commands are walked: the front page, API, live events, OpenAI door, operating, replies, security', () => {
  assert.deepEqual(walkthroughDocuments(), ['README.md', 'docs/api.md', 'docs/live-events.md', 'docs/openai.md', 'docs/operating.md', 'docs/replies.md', 'docs/security.md']);
  const steps = walked().reduce((n, w) => n + w.steps.length, 0);
  assert.ok(steps >= 60, `${steps} steps found: the parser missed blocks`);
});

test('[D-docs-7] every console block of the README and of docs/, document by document, prints what it shows', { timeout: 600_000 }, async (t) => {
  if (!haveCurl(t)) return;
  for (const doc of walkthroughDocuments()) {
    await t.test(doc, { timeout: 240_000 }, async () => {
      const { failures } = await runWalkthrough(read(doc), { name: doc });
      const report = failures.map((f) => `${doc} line ${f.step.line}: ${f.step.command}\n--- the document prints\n${f.step.expected.text}\n--- this run printed\n${f.actual}\n`);
      assert.equal(report.join('\n'), '', `outputs that differ (node_modules/.bin/node test/walkthrough.mjs --write ${doc} updates them, for review)`);
    });
  }
});

test('[D-papercuts-3] "A document\'s outputs are one run\'s": a record\'s createdAt is the same wherever shown', () => {
  for (const { doc, steps } of walked()) {
    const drifted = driftedTimes(steps).map((d) => `${doc} line ${d.line}: ${d.id} was created at ${d.was}, and at ${d.now} here`);
    assert.deepEqual(drifted, [], `outputs of different runs (node_modules/.bin/node test/walkthrough.mjs --write ${doc} makes them one run's)`);
  }
  // what --write puts in place of the document's timestamps, the matched outputs' too
  const matched = matchOutput('{"createdAt":"2026-01-01T00:00:00.000Z",...,"updatedAt":"2026-01-01T00:00:00.000Z"}', '{"createdAt":"2027-02-03T04:05:06.789Z","n":1,"updatedAt":"2027-02-03T04:05:07.000Z"}', new Map());
  assert.deepEqual(matched.times, ['2027-02-03T04:05:06.789Z', '2027-02-03T04:05:07.000Z']);
});

test('[D-docs-7] each walkthrough sets $TOKEN and $H before use, uses no deleted session, and says to use your ids', () => {
  let deletes = 0;
  for (const { doc, text, steps } of walked()) {
    const firstH = steps.findIndex((s) => s.command.includes('"$H"'));
    const setH = steps.findIndex((s) => /^H="Authorization: Bearer \$TOKEN"$/.test(s.command));
    assert.ok(setH !== -1 && setH < firstH, `${doc}: $H is defined before its first use`);
    const setToken = steps.findIndex((s) => /^TOKEN=\$\(node dist\/server\.js token --sub alice\)$/.test(s.command));
    assert.ok(setToken !== -1 && setToken < setH, `${doc}: $TOKEN before $H`);
    const path = steps.findIndex((s) => s.command === 'export PATH="$PWD/node_modules/.bin:$PATH"');
    assert.ok(path !== -1 && path < setToken, `${doc}: the project's Node.js is put first in the PATH before its first command`);
    const deleted = new Set();
    for (const s of steps) {
      for (const id of s.command.match(/chat-sessions\/[0-9a-f]{24}/g) ?? []) assert.ok(!deleted.has(id), `${doc} line ${s.line} uses ${id} after deleting it`);
      const del = /-X DELETE -H "\$H" localhost:3000\/api\/v1\/(chat-sessions\/[0-9a-f]{24})$/m.exec(s.command);
      if (del && s.expected.text.includes('"success":true')) deleted.add(del[1]);
    }
    deletes += deleted.size;
    assert.match(text, /yours will\s+differ, so use\s+the ones your server\s+answers/, `${doc} tells the reader to use their own ids`);
  }
  assert.ok(deletes >= 1, 'a walkthrough deletes a session (the check above saw it)');
  assert.match(read('docs/api.md'), /send that string back as `cursor`/, 'cursors are explained');
});

test('each LAST=$(...) of the documents keeps one id, the last, from which a resume misses nothing', async (t) => {
  if (!haveCurl(t)) return;
  const recipes = [];
  for (const { doc, steps } of walked()) {
    for (const r of steps.filter((s) => s.command.startsWith('LAST=$(curl '))) {
      assert.ok(steps.slice(steps.indexOf(r) + 1).some((s) => s.command.includes('-H "Last-Event-ID: $LAST"')), `${doc} line ${r.line}: a later step resumes from $LAST`);
      recipes.push({ doc, ...r });
    }
  }
  assert.equal(recipes.length, 2, 'both recipes (the lists\' feed, a session\'s stream) are steps of a walkthrough');
  const server = await startServer();
  try {
    const alice = server.as('alice');
    const session = (await alice.post('/api/v1/chat-sessions', newSession({ name: 'recipe' }))).body.data;
    const before = await openEvents(server.url, '/api/v1/events', { token: alice.token });
    const old = (await before.waitFor((e) => e.event === 'ready')).id;
    await before.close();
    for (let i = 1; i <= 3; i++) assert.equal((await alice.put(`/api/v1/chat-sessions/${session._id}`, { name: `recipe ${i}` })).status, 200);
    for (const r of recipes) {
      const command = r.command.replace(/localhost:3000/g, `127.0.0.1:${server.port}`).replace(/[0-9a-f]{24}/g, session._id);
      const path = new URL(/127\.0\.0\.1:\d+(\S+)/.exec(command)[1], server.url).pathname;
      // the stream prints several ids, as when events come within the second: curl resumes from
      // before the three renames, which are replayed before `ready`
      const script = `H="Authorization: Bearer ${alice.token}"\ncurl() { command curl -H "Last-Event-ID: ${old}" "$@"; }\n${command}\nprintf '%s' "$LAST"`;
      const run = spawnSync('bash', ['--noprofile', '--norc', '-c', script], { encoding: 'utf8', timeout: 30_000 });
      assert.match(run.stdout, /^\d+$/, `${r.doc} line ${r.line} keeps one id (got ${JSON.stringify(run.stdout)}; ${run.stderr})`);
      const resumed = await openEvents(server.url, path, { token: alice.token, headers: { 'last-event-id': run.stdout } });
      assert.equal(resumed.status, 200, resumed.text);
      const ready = await resumed.waitFor((e) => e.event === 'ready');
      assert.deepEqual(resumed.events.map((e) => e.event), ['ready'], `${r.doc} line ${r.line}: the last id seen, so nothing is replayed`);
      assert.equal(ready.id, run.stdout);
      await resumed.close();
    }
  } finally {
    await server.stop();
    removeDir(server.dataDir);
  }
});
