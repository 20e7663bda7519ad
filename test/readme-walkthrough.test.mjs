// The README's walkthrough runs as written (docs/DECISIONS.md, "A fresh clone"): every console
// block, in order, typed into one bash session against a fresh `npm start`, prints what the
// README says it prints. See test/walkthrough.mjs for how run-to-run differences are matched.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
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
