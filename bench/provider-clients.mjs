// The provider clients' own costs (src/providers/, through dist/testkit.cjs), against the local
// provider (test/provider/server.mjs) in a process of its own so that only the clients' CPU is
// counted here:
//   per-token: the clients' CPU per token of one 32,000-token reply against 320 replies of 100
//     tokens, each protocol, tokens as fast as the provider writes them, rounds interleaved;
//   thousand: 1,000 replies at once, 100 tokens each at 50 tokens/s: every one complete, the
//     clients' CPU per token and peak RSS, the local provider's CPU and RSS, the delay of the
//     first token (p50, p99) and between tokens (p99) as this process sees them.
// Run alone: node bench/provider-clients.mjs [--rounds=N] [--only=per-token,thousand] [--replies=N]
// (npm run build first). Prints Markdown to stdout, progress to stderr.
import { spawn } from 'node:child_process';
import { Agent as HttpAgent, request as httpRequest } from 'node:http';
import { createRequire } from 'node:module';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { cpuSecondsOf, median, memoryOf } from './common.mjs';

const { streamReply, providerConfig } = createRequire(import.meta.url)('../dist/testkit.cjs');
const PROVIDER_SCRIPT = fileURLToPath(new URL('../test/provider/server.mjs', import.meta.url));

const opt = (name, fallback) => {
  const a = process.argv.find((x) => x.startsWith(`--${name}=`));
  return a === undefined ? fallback : a.slice(name.length + 3);
};
const ROUNDS = Number(opt('rounds', '5'));
const ONLY = opt('only', 'per-token,thousand').split(',');
const REPLIES = Number(opt('replies', '1000'));
const log = (...a) => console.error(...a);

async function startLocalProvider() {
  const child = spawn(process.execPath, [PROVIDER_SCRIPT, '--port', '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const line = await new Promise((resolve) => createInterface({ input: child.stdout }).once('line', resolve));
  return { url: /listening on (http:\/\/\S+)/.exec(line)[1], pid: child.pid, stop: () => child.kill('SIGTERM') };
}

/** Runs one reply to its end; its text's length (the text is not kept) and its token count. */
async function run(provider, model, onToken) {
  let chars = 0;
  let tokens = 0;
  for await (const e of streamReply({ provider, model, messages: [{ role: 'user', content: 'Benchmark' }] })) {
    if (e.kind === 'text') {
      chars += e.text.length;
      tokens++;
      onToken?.();
    }
  }
  return { chars, tokens };
}

const cpuMicros = () => {
  const u = process.cpuUsage();
  return u.user + u.system;
};

async function perToken(url) {
  const rows = [];
  for (const type of ['openai', 'anthropic', 'ollama']) {
    const provider = providerConfig({ name: 'bench', type, baseUrl: type === 'openai' ? `${url}/v1` : url });
    // warm-up: the JIT and the keep-alive pool
    for (let i = 0; i < 20; i++) await run(provider, 'tokens:100');
    await run(provider, 'tokens:32000');
    const short = [];
    const long = [];
    for (let round = 0; round < ROUNDS; round++) {
      let c = cpuMicros();
      let tokens = 0;
      for (let i = 0; i < 320; i++) tokens += (await run(provider, 'tokens:100')).tokens;
      short.push((cpuMicros() - c) / tokens);
      c = cpuMicros();
      const r = await run(provider, 'tokens:32000');
      long.push((cpuMicros() - c) / r.tokens);
      log(`per-token ${type} round ${round + 1}: ${short.at(-1).toFixed(2)} µs (100-token replies), ${long.at(-1).toFixed(2)} µs (32,000-token reply)`);
    }
    const s = median(short);
    const l = median(long);
    rows.push(`| ${type} | ${s.toFixed(2)} | ${l.toFixed(2)} | ${(l / s).toFixed(2)} |`);
  }
  return ['### Per token: one 32,000-token reply against 320 replies of 100 tokens', '', `Clients' CPU (user + system) per text token, median of ${ROUNDS} rounds.`, '', '| protocol | µs/token, 100-token replies | µs/token, 32,000-token reply | ratio |', '|---|---|---|---|', ...rows, ''].join('\n');
}

function percentile(sorted, q) {
  return sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

/** The floor: node:http alone reading the same NDJSON streams (no decoding, no events), one agent kept alive. */
async function bare(url, onToken) {
  const body = JSON.stringify({ model: 'tokens:100@50', messages: [{ role: 'user', content: 'Benchmark' }], stream: true });
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${url}/api/chat`, { method: 'POST', agent: bareAgent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
      let tokens = 0;
      res.on('data', (c) => {
        // a read holds one line per token at this rate (the final line ends with `"done":true`)
        for (let i = c.indexOf(10); i >= 0; i = c.indexOf(10, i + 1)) if (tokens++ < 100) onToken();
      });
      res.on('end', () => resolve({ tokens: Math.min(tokens, 100), chars: 0 }));
    });
    req.on('error', reject);
    req.end(body);
  });
}
const bareAgent = new HttpAgent({ keepAlive: true, maxFreeSockets: 1024 });

async function thousand(url, providerPid) {
  const rows = [];
  const base = memoryOf(process.pid).rssMiB;
  for (const type of ['node:http alone', 'openai', 'anthropic', 'ollama']) {
    const provider = type === 'node:http alone' ? undefined : providerConfig({ name: 'bench', type, baseUrl: type === 'openai' ? `${url}/v1` : url });
    const one = (model, onToken) => (provider === undefined ? bare(url, onToken ?? (() => {})) : run(provider, model, onToken));
    // warm-up: a connection in the pool for each reply to come, and the JIT
    await Promise.all(Array.from({ length: REPLIES }, () => one('tokens:1')));
    const providerCpu0 = cpuSecondsOf(providerPid);
    const cpu0 = cpuMicros();
    const start = performance.now();
    const firsts = [];
    const gaps = [];
    const results = await Promise.all(
      Array.from({ length: REPLIES }, async () => {
        const began = performance.now();
        let last = 0;
        const r = await one('tokens:100@50', () => {
          const now = performance.now();
          if (last === 0) firsts.push(now - began);
          else gaps.push(now - last);
          last = now;
        });
        return r;
      }),
    );
    const wall = performance.now() - start;
    const tokens = results.reduce((n, r) => n + r.tokens, 0);
    const complete = results.filter((r) => r.tokens === 100).length;
    const cpu = (cpuMicros() - cpu0) / tokens;
    const providerCpu = cpuSecondsOf(providerPid) - providerCpu0;
    firsts.sort((a, b) => a - b);
    gaps.sort((a, b) => a - b);
    const mine = memoryOf(process.pid);
    const theirs = memoryOf(providerPid);
    log(`thousand ${type}: ${complete}/${REPLIES} complete in ${(wall / 1000).toFixed(1)} s`);
    rows.push(`| ${type} | ${complete}/${REPLIES} | ${(wall / 1000).toFixed(2)} | ${cpu.toFixed(1)} | ${(mine.peakMiB - base).toFixed(0)} | ${providerCpu.toFixed(2)} | ${theirs.peakMiB.toFixed(0)} | ${percentile(firsts, 0.5).toFixed(1)} / ${percentile(firsts, 0.99).toFixed(1)} | ${percentile(gaps, 0.99).toFixed(1)} |`);
  }
  return [
    `### ${REPLIES.toLocaleString('en')} replies at once, 100 tokens each at 50 tokens/s`,
    '',
    `Through the clients in this process, from the local provider in its own, after a warm-up that leaves a kept-alive connection for each reply. The first row is the floor: node:http alone reading the same streams, nothing decoded. "Peak RSS over start" is this process's high-water mark so far less its RSS before the first row (${base.toFixed(0)} MiB, dist/testkit.cjs loaded): a row includes the rows above it.`,
    '',
    '| client | complete | wall s | µs CPU/token | peak RSS over start, MiB | provider CPU s | provider peak RSS MiB | first token ms p50 / p99 | between tokens ms p99 |',
    '|---|---|---|---|---|---|---|---|---|',
    ...rows,
    '',
  ].join('\n');
}

const provider = await startLocalProvider();
try {
  const out = [`## The provider clients (Node.js ${process.version}, ${new Date().toISOString().slice(0, 10)})`, ''];
  if (ONLY.includes('per-token')) out.push(await perToken(provider.url));
  if (ONLY.includes('thousand')) out.push(await thousand(provider.url, provider.pid));
  console.log(out.join('\n'));
} finally {
  provider.stop();
}
