// The README's walkthrough runs as written (docs/DECISIONS.md, "A fresh clone"): every console
// block, in order, typed into one bash session against a fresh `npm start`, prints what the
// README says it prints. See test/walkthrough.mjs for how run-to-run differences are matched.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { newSession, removeDir, startServer } from './helpers.mjs';
import { openEvents } from './sse.mjs';
import { parseWalkthrough, README, runWalkthrough } from './walkthrough.mjs';

function haveCurl(t) {
  if (spawnSync('curl', ['--version']).status === 0) return true;
  if (process.env.REQUIRE_CURL === '1') throw new Error('REQUIRE_CURL=1 but curl is not installed (apt-get install curl)');
  console.log('# SKIPPED: no curl on this machine (apt-get install curl); the README walkthrough was not run');
  t.skip('no curl');
  return false;
}

test('"The README\'s walkthrough is run by a test": every console block, in order, prints what the README prints', { timeout: 180_000 }, async (t) => {
  if (!haveCurl(t)) return;
  const text = readFileSync(README, 'utf8');
  const { steps, failures } = await runWalkthrough(text);
  assert.ok(steps.length >= 30, `${steps.length} steps found: the parser missed blocks`);
  const report = failures.map((f) => `README.md line ${f.step.line}: ${f.step.command}\n--- the README prints\n${f.step.expected.text}\n--- this run printed\n${f.actual}\n`);
  assert.equal(report.join('\n'), '', 'outputs that differ (node test/walkthrough.mjs --write updates them, for review)');
});

test('"The README\'s walkthrough ... creates what it uses": $H is set before any command uses it, no session is used after its delete, and the reader is told to use their own ids', () => {
  const text = readFileSync(README, 'utf8');
  const steps = parseWalkthrough(text);
  const firstH = steps.findIndex((s) => s.command.includes('"$H"'));
  const setH = steps.findIndex((s) => /^H="Authorization: Bearer \$TOKEN"$/.test(s.command));
  assert.ok(setH !== -1 && setH < firstH, '$H is defined before its first use');
  const setToken = steps.findIndex((s) => /^TOKEN=\$\(node dist\/server\.js token --sub alice\)$/.test(s.command));
  assert.ok(setToken !== -1 && setToken < setH, '$TOKEN before $H');
  const deleted = new Set();
  for (const s of steps) {
    for (const id of s.command.match(/chat-sessions\/[0-9a-f]{24}/g) ?? []) assert.ok(!deleted.has(id), `README.md line ${s.line} uses ${id} after deleting it`);
    const del = /-X DELETE -H "\$H" localhost:3000\/api\/v1\/(chat-sessions\/[0-9a-f]{24})$/m.exec(s.command);
    if (del && s.expected.text.includes('"success":true')) deleted.add(del[1]);
  }
  assert.equal(deleted.size, 1, 'the walkthrough deletes one session');
  assert.match(text, /yours will differ, so use\s+the ones your server answers/);
  assert.match(text, /send that string back as `cursor`/, 'cursors are explained');
});

test('"the first `curl` keeps the id of the last event it saw": each `LAST=$(...)` of the README, on a stream that prints several ids, keeps one, the last, from which a resume misses nothing; and the walkthrough runs each (issue 31, item 7: it captured two or three ids)', async (t) => {
  if (!haveCurl(t)) return;
  const steps = parseWalkthrough(readFileSync(README, 'utf8'));
  const recipes = steps.filter((s) => s.command.startsWith('LAST=$(curl '));
  assert.equal(recipes.length, 2, 'both recipes are steps of the walkthrough');
  for (const r of recipes) {
    assert.ok(steps.slice(steps.indexOf(r) + 1).some((s) => s.command.includes('-H "Last-Event-ID: $LAST"')), `README.md line ${r.line}: a later step resumes from $LAST`);
  }
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
      assert.match(run.stdout, /^\d+$/, `README.md line ${r.line} keeps one id (got ${JSON.stringify(run.stdout)}; ${run.stderr})`);
      const resumed = await openEvents(server.url, path, { token: alice.token, headers: { 'last-event-id': run.stdout } });
      assert.equal(resumed.status, 200, resumed.text);
      const ready = await resumed.waitFor((e) => e.event === 'ready');
      assert.deepEqual(resumed.events.map((e) => e.event), ['ready'], `README.md line ${r.line}: the last id seen, so nothing is replayed`);
      assert.equal(ready.id, run.stdout);
      await resumed.close();
    }
  } finally {
    await server.stop();
    removeDir(server.dataDir);
  }
});
