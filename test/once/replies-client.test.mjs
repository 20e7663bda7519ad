// The streaming client of docs/replies.md ("A streaming client in JavaScript") as written: the
// walkthrough runs it once against the local provider's plain answer; here it meets what the
// walkthrough's model never sends (reasoning before the answer, a provider's failure) on each
// protocol, and must print the reply's text alone.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { newSession, ROOT, startServer } from '../helpers.mjs';
import { startProvider } from '../provider/server.mjs';

const IDS = { openai: '6f0000000000000000000001', anthropic: '6f0000000000000000000002', ollama: '6f0000000000000000000003' };
let provider;
let server;
let dir;

before(async () => {
  provider = await startProvider();
  server = await startServer({
    providers: [
      { _id: IDS.openai, name: 'Local OpenAI', type: 'openai', baseUrl: `${provider.url}/v1`, apiKey: 'sk-test-0123456789abcdef0123' },
      { _id: IDS.anthropic, name: 'Local Claude', type: 'anthropic', baseUrl: provider.url, apiKey: 'sk-ant-test-0123456789abcdef' },
      { _id: IDS.ollama, name: 'Local Ollama', type: 'ollama', baseUrl: provider.url },
    ],
  });
  dir = mkdtempSync(join(tmpdir(), 'csa-replies-client-'));
});
after(async () => {
  await server?.stop();
  await provider?.close();
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

/** The block docs/replies.md tells the reader to save as stream.mjs. */
function client() {
  const m = /^<!-- walkthrough: file stream\.mjs -->\n```js\n([\s\S]*?)^```$/m.exec(readFileSync(join(ROOT, 'docs', 'replies.md'), 'utf8'));
  assert.ok(m, 'docs/replies.md saves stream.mjs');
  return m[1];
}

/** Runs the client as the reader does (node stream.mjs SESSION "text", the token in $TOKEN): {code, stdout, stderr}. */
function run(file, session, content) {
  return new Promise((resolve) => {
    execFile(process.execPath, [file, session, content], { env: { PATH: process.env.PATH, TOKEN: server.as('alice').token }, encoding: 'utf8', timeout: 120_000 }, (err, stdout, stderr) => {
      resolve({ code: err === null ? 0 : (err.code ?? 1), stdout, stderr });
    });
  });
}

test('docs/replies.md\'s streaming client prints the reply only: "the reply is the one whose role is assistant"', async () => {
  const code = client();
  assert.ok(code.trim().split('\n').length <= 22, `${code.trim().split('\n').length} lines`);
  const file = join(dir, 'stream.mjs');
  writeFileSync(file, code.replaceAll('http://localhost:3000', server.url));
  const alice = server.as('alice');
  for (const type of ['openai', 'anthropic', 'ollama']) {
    // reasoning, then the answer; the message's own words are not the reply's
    const s = (await alice.post('/api/v1/chat-sessions', newSession({ providerId: IDS[type], selectedModel: 'reasoning:4+say:The%20answer%20is%2042.' }))).body.data;
    const r = await run(file, s._id, 'What is the answer?');
    assert.equal(r.code, 0, `${type}: ${r.stderr}`);
    assert.equal(r.stdout, 'The answer is 42.\n(complete)\n', type);
    const turns = (await alice.get(`/api/v1/chat-sessions/${s._id}/turns`)).body.data;
    assert.equal(turns[1].content[0].type, 'reasoning', `${type}: the reply had reasoning, which the client left out`);
  }
  // a provider that fails: the reply ends error, and the client says so
  const failing = (await alice.post('/api/v1/chat-sessions', newSession({ providerId: IDS.openai, selectedModel: 'say:Half+error-after:1' }))).body.data;
  const r = await run(file, failing._id, 'Go on.');
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /^Half\n\(error: Provider "Local OpenAI" .+\)\n$/);
  // a refused request is an error with the server's answer
  const refused = await run(file, '0123456789abcdef01234567', 'Anyone?');
  assert.notEqual(refused.code, 0);
  assert.match(refused.stderr, /404 \{"success":false,"message":"Chat session not found"\}/);
});
