// The SIGKILL test of test/crash.test.mjs, looped far longer than the test suite does:
// `npm run crash-loop` (200 kills) or `node bench/crash-loop.mjs 1000`. Each kill lands at a
// random moment under concurrent creates, updates, archives, deletes and turn appends; after
// every restart the client's model of what was acknowledged must match the server exactly.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const kills = Number(process.argv[2] ?? 200);
if (!Number.isInteger(kills) || kills < 1) {
  process.stderr.write('usage: node bench/crash-loop.mjs [KILLS]\n');
  process.exit(2);
}
const test = join(fileURLToPath(new URL('..', import.meta.url)), 'test', 'crash.test.mjs');
const started = performance.now();
const r = spawnSync(process.execPath, ['--test', '--test-reporter=spec', test], {
  env: { ...process.env, CRASH_KILLS: String(kills) },
  stdio: 'inherit',
});
process.stderr.write(`${kills} kills in ${((performance.now() - started) / 1000).toFixed(0)} s: ${r.status === 0 ? 'every acknowledged write survived' : 'FAILED'}\n`);
process.exit(r.status ?? 1);
