// temporary experiment: rps and main-thread user/sys µs per request, baseline vs server
import { readFileSync, mkdtempSync, copyFileSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { api, token, EXAMPLE_PROVIDERS, SECRET, startProcess, BASELINE, SERVER, NODE_OLDEST } from './common.mjs';
import { buildRequest, runLoad } from './loadgen.mjs';
const dir = mkdtempSync(join(tmpdir(), 'exp-'));
copyFileSync(EXAMPLE_PROVIDERS, join(dir, 'providers.json'));
const server = process.env.EXP_SERVER ?? SERVER;
const srv = await startProcess({ script: server, node: NODE_OLDEST, cwd: dir, logFile: join(dir, 's.log'), nodeArgs: (process.env.EXP_NODE_ARGS ?? '').split(' ').filter(Boolean), env: { DATA_DIR: dir, AUTH_SECRET: SECRET, LOG_LEVEL: 'info', HOST: '127.0.0.1', ...JSON.parse(process.env.EXP_ENV ?? '{}') } });
const base = await startProcess({ script: BASELINE, node: NODE_OLDEST, nodeArgs: (process.env.EXP_NODE_ARGS ?? '').split(' ').filter(Boolean), logFile: join(dir, 'b.log') });
const ids = [];
for (let i = 0; i < 50; i++) {
  const r = await api(srv.port, 'POST', '/api/v1/chat-sessions', { auth: token('bench-user-0'), body: { projectId: 'p', providerId: '665f1c2a9b1e8a0012ab34c1', selectedModel: 'gpt-4o', name: `S ${i}` } });
  if (r.status !== 201) throw new Error(r.text);
  ids.push(JSON.parse(r.text).data._id);
}
const bufs = Array.from({ length: 50 }, (_, c) => ids.map((id) => buildRequest('GET', process.env.EXP_PATH ?? `/api/v1/chat-sessions/${id}`, { headers: { authorization: `Bearer ${token(`reader-${c}`)}` } })));
const req = (c, seq) => bufs[c][seq % bufs[c].length];
const ut = (pid) => { const f = readFileSync(`/proc/${pid}/task/${pid}/stat`, 'utf8'); const s = f.slice(f.lastIndexOf(')') + 2).split(' '); return [Number(s[11]) / 100, Number(s[12]) / 100, Number(s[7])]; };
async function one(p) {
  let a, b;
  const r = await runLoad({ port: p.port, connections: 50, warmupMs: 1000, durationMs: 3000, request: req, onWindowStart: () => { a = ut(p.pid); }, onWindowEnd: () => { b = ut(p.pid); } });
  const n = r.requests;
  return { rps: Math.round(n / 3), user: (1e6 * (b[0] - a[0]) / n).toFixed(1), sys: (1e6 * (b[1] - a[1]) / n).toFixed(1), flt: ((b[2] - a[2]) / n).toFixed(3) };
}
if (process.env.EXP_PERF) { await one(srv); await one(srv); const { spawn } = await import('node:child_process'); const pr = spawn('perf', ['record', '-F', '2999', '-g', '-o', process.env.EXP_PERF, '-p', String(srv.pid)], { stdio: 'inherit' }); await new Promise((r) => setTimeout(r, 500)); await one(srv); pr.kill('SIGINT'); await new Promise((r) => pr.on('exit', r)); }
if (process.env.EXP_STRACE) { const { spawn } = await import('node:child_process'); await one(srv); const pr = spawn('perf', ['record', '-e', process.env.EXP_EVENT ?? 'cpu-clock:u', '-F', '2999', '-g', '-t', String(srv.pid), '-o', process.env.EXP_STRACE], { stdio: 'inherit' }); await new Promise((r) => setTimeout(r, 500)); const x = await one(srv); console.log('strace window requests', x.rps * 3); pr.kill('SIGINT'); await new Promise((r) => pr.on('exit', r)); }
if (process.env.EXP_STRACE_BASE) { const { spawn } = await import('node:child_process'); await one(base); const pr = spawn('perf', ['record', '-e', process.env.EXP_EVENT ?? 'cpu-clock:u', '-F', '2999', '-g', '-t', String(base.pid), '-o', process.env.EXP_STRACE_BASE], { stdio: 'inherit' }); await new Promise((r) => setTimeout(r, 500)); const x = await one(base); console.log('strace base window requests', x.rps * 3); pr.kill('SIGINT'); await new Promise((r) => pr.on('exit', r)); }
const rounds = Number(process.env.EXP_ROUNDS ?? 3);
const ratios = [];
for (let i = 0; i < rounds; i++) {
  const x = await one(base); const y = await one(srv);
  ratios.push(y.rps / x.rps);
  console.log(`base ${x.rps}/s u${x.user} s${x.sys} f${x.flt} | srv ${y.rps}/s u${y.user} s${y.sys} f${y.flt} | ${(y.rps / x.rps).toFixed(2)}`);
}
ratios.sort(); console.log('median', ratios[Math.floor(ratios.length / 2)].toFixed(2));
await srv.stop(); await base.stop();
