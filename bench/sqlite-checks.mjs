// How long the sqlite engine's damage checks take (issue #28, point 6): the check of the
// write-ahead log and the file's header before SQLite opens them, on a 64 MiB log left by a
// killed writer (what a start after a crash reads), beside the whole start on the same files;
// and the full check (PRAGMA quick_check, as the background check runs it) per GiB of file.
// Page cache warm (a start after a crash reads what was just written). Needs Node 22.13+.
// Usage: node_modules/node/bin/node bench/sqlite-checks.mjs [SESSIONS TURNS] (default 100000 200000)
import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { logLines, median, ROOT, SECRET, SERVER, startProcess } from './common.mjs';
import { generateSqliteDir } from './datagen-sqlite.mjs';

const { DatabaseSync } = process.getBuiltinModule('node:sqlite');
const RUNS = 5;
const WAL_BYTES = 64 << 20;

const [sessions = '100000', turns = '200000'] = process.argv.slice(2);
const work = mkdtempSync(join(tmpdir(), 'csa-checks-'));
try {
  const dir = join(work, 'data');
  process.stderr.write(`generating ${sessions} sessions and ${turns} turns...\n`);
  await generateSqliteDir(dir, { sessions: Number(sessions), turns: Number(turns) });
  const file = join(dir, 'chat-sessions.db');
  const fileBytes = statSync(file).size;

  // the full check: as the background check runs it (its own read-only connection), best of RUNS
  const quick = [];
  for (let i = 0; i < RUNS; i++) {
    const db = new DatabaseSync(file, { readOnly: true });
    const t = performance.now();
    const r = db.prepare('PRAGMA quick_check(100)').all();
    quick.push(performance.now() - t);
    db.close();
    if (r[0]?.quick_check !== 'ok') throw new Error(`quick_check: ${JSON.stringify(r)}`);
  }

  // a 64 MiB log left by a writer killed before any checkpoint: transactions of 16 rows of 4 KiB
  process.stderr.write('writing a 64 MiB log...\n');
  const script = `const { DatabaseSync } = require('node:sqlite');
    const db = new DatabaseSync(${JSON.stringify(file)});
    db.exec('PRAGMA wal_autocheckpoint = 0; CREATE TABLE IF NOT EXISTS bench_scratch (x BLOB)');
    const ins = db.prepare('INSERT INTO bench_scratch VALUES (randomblob(4000))');
    const fs = require('node:fs');
    while ((fs.statSync(${JSON.stringify(`${file}-wal`)}, { throwIfNoEntry: false })?.size ?? 0) < ${WAL_BYTES}) {
      db.exec('BEGIN'); for (let i = 0; i < 16; i++) ins.run(); db.exec('COMMIT');
    }
    process.kill(process.pid, 'SIGKILL');`;
  spawnSync(process.execPath, ['-e', script]);
  const walBytes = statSync(`${file}-wal`).size;
  // each run in a process of its own, as at a start (nothing compiled yet): wall and CPU time of the call
  const check = [];
  const checkCpu = [];
  for (let i = 0; i < RUNS; i++) {
    const r = spawnSync(process.execPath, ['-e', `const kit = require(${JSON.stringify(join(ROOT, 'dist', 'testkit.cjs'))});
      const c = process.cpuUsage(); const t = performance.now(); kit.checkFiles(${JSON.stringify(file)});
      const u = process.cpuUsage(c); console.log(JSON.stringify({ ms: performance.now() - t, cpuMs: (u.user + u.system) / 1000 }));`], { encoding: 'utf8' });
    const m = JSON.parse(r.stdout);
    check.push(m.ms);
    checkCpu.push(m.cpuMs);
  }
  // the whole start on a copy of those files each time (a stop checkpoints the log away)
  const opened = [];
  const started = [];
  for (let i = 0; i < 3; i++) {
    const copy = join(work, `start-${i}`);
    cpSync(dir, copy, { recursive: true });
    const logFile = join(work, `start-${i}.log`);
    const s = await startProcess({ script: SERVER, node: process.execPath, cwd: copy, logFile, env: { DATA_DIR: copy, AUTH_SECRET: SECRET, STORE: 'sqlite', HOST: '127.0.0.1' } });
    started.push(s.startMs);
    opened.push(logLines(logFile, 'sqlite store opened')[0]?.ms ?? NaN);
    await s.stop();
    rmSync(copy, { recursive: true, force: true });
  }
  const mib = (b) => (b / 2 ** 20).toFixed(1);
  process.stdout.write(
    [
      `| what | size | time (median of the runs) |`,
      `|---|---:|---:|`,
      `| the log's and header's check before SQLite opens them (${RUNS} runs, each a process of its own) | ${mib(walBytes)} MiB log | ${median(check).toFixed(0)} ms (CPU ${median(checkCpu).toFixed(0)} ms) |`,
      `| the store's open on those files ("sqlite store opened" ms: the check, SQLite's replay of the log, the schema check; 3 starts) | | ${median(opened).toFixed(0)} ms |`,
      `| spawn to the first /healthz 200 on those files (3 starts) | | ${median(started).toFixed(0)} ms |`,
      `| PRAGMA quick_check (${RUNS} runs) | ${mib(fileBytes)} MiB file | ${median(quick).toFixed(0)} ms (${((fileBytes / 2 ** 20) / (median(quick) / 1000)).toFixed(0)} MiB/s) |`,
    ].join('\n') + '\n',
  );
} finally {
  rmSync(work, { recursive: true, force: true });
}
