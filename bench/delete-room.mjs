// What a delete writes to the sqlite engine's log (issue #31, item 4): the room a full disk must
// keep for it, which sizes the reserve (src/store/sqlite/reserve.ts). For each shape, two
// sessions of N turns of B bytes, their turns appended in turns (so the deleted session's rows
// share their pages with the other's, the worst case for what a delete rewrites); the server is
// stopped (its log checkpointed and removed), started again, and one delete made: the log's size
// afterwards is what that delete wrote. Then the same for deleting the newer half of the other
// session's chain (DELETE .../turns/:turnId takes the turn's descendants).
// Usage: node_modules/node/bin/node bench/delete-room.mjs   (a few minutes; the Node.js 24 of node_modules)
import { copyFileSync, existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { api, EXAMPLE_PROVIDERS, SECRET, SERVER, startProcess, token } from './common.mjs';

const SHAPES = [
  { turns: 100, bytes: 1024 },
  { turns: 1000, bytes: 1024 },
  { turns: 100, bytes: 16 * 1024 },
  { turns: 1000, bytes: 16 * 1024 },
];
const auth = token('alice');
const body = (name) => ({ projectId: 'p', providerId: '665f1c2a9b1e8a0012ab34c1', selectedModel: 'm', name });

async function start(dir) {
  return startProcess({ script: SERVER, cwd: dir, env: { DATA_DIR: dir, AUTH_SECRET: SECRET, STORE: 'sqlite', PURGE_INTERVAL: 'off' }, node: process.execPath, logFile: join(dir, 'server.log') });
}

const walOf = (dir) => (existsSync(join(dir, 'chat-sessions.db-wal')) ? statSync(join(dir, 'chat-sessions.db-wal')).size : 0);
const MiB = (n) => `${(n / 1048576).toFixed(2)} MiB`;

console.log('| turns of each session | bytes a turn | data of the deleted session | log written by DELETE session | log written by DELETE turn (the newer half of the other) |');
console.log('|---:|---:|---:|---:|---:|');
for (const { turns, bytes } of SHAPES) {
  const dir = mkdtempSync(join(tmpdir(), 'csa-delete-room-'));
  try {
    copyFileSync(EXAMPLE_PROVIDERS, join(dir, 'providers.json'));
    let p = await start(dir);
    const ids = [];
    for (const name of ['gone', 'beside']) ids.push((await api(p.port, 'POST', '/api/v1/chat-sessions', { auth, body: body(name) })).body.data._id);
    const content = 'w '.repeat(bytes / 2);
    const middle = [];
    for (let i = 0; i < turns; i++) {
      for (const id of ids) {
        const r = await api(p.port, 'POST', `/api/v1/chat-sessions/${id}/turns`, { auth, body: { role: 'user', content } });
        if (r.status !== 201) throw new Error(`append: ${r.status} ${r.text}`);
        if (id === ids[1] && i === turns / 2) middle.push(r.body.data._id);
      }
    }
    const measure = async (method, path) => {
      await p.stop();
      p = await start(dir);
      const before = walOf(dir);
      const r = await api(p.port, method, path, { auth });
      if (r.status !== 200) throw new Error(`${method} ${path}: ${r.status} ${r.text}`);
      return walOf(dir) - before;
    };
    const session = await measure('DELETE', `/api/v1/chat-sessions/${ids[0]}`);
    const turn = await measure('DELETE', `/api/v1/chat-sessions/${ids[1]}/turns/${middle[0]}`);
    await p.stop();
    console.log(`| ${turns} | ${bytes} | ${MiB(turns * bytes)} | ${MiB(session)} | ${MiB(turn)} |`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
