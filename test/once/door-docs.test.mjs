// The OpenAI door's code examples run as written (docs/openai.md, "From the SDKs", and the
// README's "Any OpenAI client"): each ```js block, its `http://localhost:3000` this test's
// server and `process.env.TOKEN` a token, run by Node against the example providers with the
// local provider in the example Ollama's place. The SDKs are the real ones (dev dependencies).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { ROOT, startServer } from '../helpers.mjs';
import { startProvider } from '../provider/server.mjs';

let provider;
let server;
let dir;

before(async () => {
  provider = await startProvider();
  const examples = JSON.parse(readFileSync(join(ROOT, 'examples', 'providers.json'), 'utf8'));
  server = await startServer({ providers: examples.map((p) => (p.type === 'ollama' ? { ...p, baseUrl: provider.url } : p)) });
  dir = mkdtempSync(join(tmpdir(), 'csa-door-docs-'));
  symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'));
});
after(async () => {
  await server?.stop();
  await provider?.close();
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

/** The ```js blocks of a document. */
function jsBlocks(doc) {
  return [...readFileSync(join(ROOT, doc), 'utf8').matchAll(/^```js\n([\s\S]*?)^```$/gm)].map((m) => m[1]);
}

/** Runs one block as a module of its own (not spawnSync: the local provider answers from this process): {code, stdout, stderr}. */
function run(code, i) {
  const file = join(dir, `block-${i}.mjs`);
  writeFileSync(file, code.replaceAll('http://localhost:3000', server.url));
  return new Promise((resolve) => {
    execFile(process.execPath, [file], { env: { PATH: process.env.PATH, TOKEN: server.as('alice').token }, encoding: 'utf8', timeout: 120_000 }, (err, stdout, stderr) => {
      resolve({ code: err === null ? 0 : (err.code ?? 1), stdout, stderr });
    });
  });
}

test('docs/openai.md and the README: "the `openai` SDK" and the AI SDK examples, Responses too, run as written', async () => {
  const blocks = [...jsBlocks('README.md'), ...jsBlocks('docs/openai.md')];
  assert.equal(blocks.length, 4, 'the README\'s example, and the three of docs/openai.md');
  const out = [];
  for (const [i, b] of blocks.entries()) out.push(await run(b, i));
  for (const [i, r] of out.entries()) assert.equal(r.code, 0, `block ${i}: ${r.stderr}`);
  assert.equal(out[0].stdout, 'Hello!\n', 'the local provider answers with the question\'s words');
  assert.equal(out[1].stdout, 'Hello!\n');
  assert.equal(out[2].stdout, 'tool said: {"city":"Weather in Paris?","tempC":21}\n', 'the tool loop ran to its answer');
  assert.equal(out[3].stdout, 'Hello! / And again.\n', 'a response, and one under it');
});
