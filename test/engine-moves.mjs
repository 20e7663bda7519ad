// Moving a store between engines: export from one, import into another, and every answer a
// client can see (each session with its ETag, every list, filter and page, every turn) is the
// same. sqlite -> postgres -> sqlite.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { capture, populate } from './backup-data.mjs';
import { removeDir, ROOT, runCli, startServer } from './helpers.mjs';

const NODE24 = join(ROOT, 'node_modules', 'node', 'bin', 'node');

/** How to run each engine: its settings and its Node.js. */
function engine(name, dir) {
  if (name === 'sqlite') return { env: { STORE: 'sqlite', DATA_DIR: dir }, node: NODE24 };
  return { env: { STORE: 'postgres', DATA_DIR: dir, DATABASE_URL: process.env.CSA_TEST_DATABASE_URL, DATABASE_SCHEMA: `moves_${process.pid}` }, node: NODE24 };
}

export async function movesBetweenEngines(tempDir) {
  const work = tempDir('csa-moves-');
  const dirs = [];
  try {
    const order = ['sqlite', 'postgres', 'sqlite'];
    let data;
    let expected;
    let previous;
    for (const [i, name] of order.entries()) {
      const dir = join(work, `${i}-${name}`);
      dirs.push(dir);
      const e = engine(name, dir);
      if (previous !== undefined) {
        const file = join(work, `from-${i - 1}.ndjson`);
        const out = runCli(['export', '--out', file], { env: previous.env, node: previous.node });
        assert.equal(out.code, 0, out.stderr);
        const imp = runCli(['import', file], { env: e.env, node: e.node });
        assert.equal(imp.code, 0, `import into ${name}: ${imp.stderr}`);
      }
      const server = await startServer({ dataDir: dir, env: e.env, node: e.node });
      try {
        if (i === 0) data = await populate(server);
        const seen = await capture(server, data);
        if (expected === undefined) expected = seen;
        else assert.deepEqual(seen, expected, `${order[i - 1]} -> ${name}: every answer the same`);
      } finally {
        await server.stop();
      }
      previous = e;
    }
  } finally {
    removeDir(work);
  }
}
