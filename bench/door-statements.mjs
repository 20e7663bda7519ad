// What one request asks of PostgreSQL, path by path (issue 40): the statements PostgreSQL ran
// (pg_stat_statements: queries and writes; transaction control such as a snapshot read's BEGIN
// and COMMIT is not counted) per waiting request with a 2-token reply
// from the local provider, one request at a time, for the native API's message and the OpenAI
// door's rules. A count, not a time: it does not move with the machine's load, so a change of
// one statement per request shows where CPU figures would drown it.
// Usage (after node build.mjs): node_modules/node/bin/node bench/door-statements.mjs [--requests=40] [--top]
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startCluster } from '../test/pg/cluster.mjs';
import { api, NODE_24, ROOT, SECRET, SERVER, sleep, startProcess, token } from './common.mjs';
import { PROVIDER_ID } from './replies.mjs';

const arg = (name, def) => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? def;
const REQUESTS = Number(arg('requests', 40));
const TOP = process.argv.includes('--top');
const B = '/api/v1/chat-sessions';
const MODEL = 'tokens:2';
/** What the local provider answers to MODEL. */
const ANSWER = 'the quick';

const cluster = await startCluster({ settings: { shared_preload_libraries: "'pg_stat_statements'", 'pg_stat_statements.track_utility': 'off' } });
const dir = mkdtempSync(join(tmpdir(), 'csa-door-statements-'));
const provider = spawn(NODE_24, [join(ROOT, 'test', 'provider', 'server.mjs'), '--port', '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
let server;
try {
  await cluster.psql('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
  const url = await new Promise((resolve) => provider.stdout.on('data', (d) => /listening on (http:\/\/[\d.]+:\d+)/.exec(String(d)) && resolve(/listening on (http:\/\/[\d.]+:\d+)/.exec(String(d))[1])));
  writeFileSync(join(dir, 'providers.json'), JSON.stringify([{ _id: PROVIDER_ID, name: 'Local', type: 'openai', baseUrl: `${url}/v1`, apiKey: 'sk-local' }]));
  server = await startProcess({ script: SERVER, cwd: dir, node: NODE_24, env: { DATA_DIR: dir, AUTH_SECRET: SECRET, LOG_LEVEL: 'warn', HOST: '127.0.0.1', STORE: 'postgres', DATABASE_URL: cluster.url('postgres'), DATABASE_SCHEMA: 'door_statements' }, logFile: join(dir, 'server.log') });
  const auth = token('counted');
  const door = (messages, headers = {}) => api(server.port, 'POST', '/v1/chat/completions', { auth, body: { model: `local/${MODEL}`, messages }, headers });
  const emptySession = async () => (await api(server.port, 'POST', B, { auth, body: { projectId: 'default', providerId: PROVIDER_ID, selectedModel: MODEL, name: 'counted' } })).body.data._id;
  const firstExchange = async (i) => (await door([{ role: 'user', content: `question ${i}` }])).headers['x-session-id'];
  const ofDb = "dbid = (SELECT oid FROM pg_database WHERE datname = 'postgres')";
  /** Each path: what it needs made first (not counted), and its request. */
  const paths = [
    { name: 'native: POST .../messages to an empty session', before: emptySession, request: (id) => api(server.port, 'POST', `${B}/${id}/messages`, { auth, body: { content: 'hello' } }) },
    { name: 'native: a new conversation (POST /chat-sessions, then .../messages: both counted)', before: async () => undefined, request: async () => api(server.port, 'POST', `${B}/${await emptySession()}/messages`, { auth, body: { content: 'hello' } }) },
    { name: 'door, rule 1: X-Session-Id of an empty session', before: emptySession, request: (id) => door([{ role: 'user', content: 'hello' }], { 'x-session-id': id }) },
    { name: 'door, rule 2: X-Conversation-Key of a new conversation', before: async (i) => `key-${i}`, request: (key) => door([{ role: 'user', content: 'hello' }], { 'x-conversation-key': key }) },
    { name: 'door, rule 3: a conversation continued by its path', before: firstExchange, request: (_, i) => door([{ role: 'user', content: `question ${i}` }, { role: 'assistant', content: ANSWER }, { role: 'user', content: 'and then?' }]) },
    { name: 'door, rule 4: a new conversation', before: async () => undefined, request: () => door([{ role: 'user', content: 'hello' }]) },
  ];
  const rows = [];
  for (const p of paths) {
    const made = [];
    for (let i = 0; i < REQUESTS; i++) made.push(await p.before(i));
    // what the writes before left behind (the live feed's reads, a reply's end) settles first
    await sleep(1500);
    await cluster.psql('SELECT pg_stat_statements_reset()');
    for (let i = 0; i < REQUESTS; i++) {
      const r = await p.request(made[i], i);
      if (r.status >= 300) throw new Error(`${p.name}: answered ${r.status} ${r.text.slice(0, 300)}`);
      if (p.name.includes('rule 3') && r.headers['x-session-id'] !== made[i]) throw new Error(`${p.name}: recorded in ${r.headers['x-session-id']}, not in ${made[i]}`);
    }
    await sleep(1500);
    // the reset's own statement and the count's are left out
    const n = Number(await cluster.psql(`SELECT sum(calls) FROM pg_stat_statements WHERE ${ofDb} AND query NOT LIKE '%pg_stat_statements%'`));
    rows.push({ name: p.name, perRequest: n / REQUESTS });
    if (TOP) rows.at(-1).top = await cluster.psql(`SELECT round(calls::numeric / ${REQUESTS}, 2) || '  ' || left(regexp_replace(query, '\\s+', ' ', 'g'), 110) FROM pg_stat_statements WHERE ${ofDb} AND query NOT LIKE '%pg_stat_statements%' ORDER BY calls DESC, query`);
  }
  const out = [`PostgreSQL statements (queries and writes, not BEGIN or COMMIT) per waiting request (a ${MODEL} reply from the local provider), ${REQUESTS} requests one at a time per path:`, '', '| path | statements per request |', '|---|---:|'];
  for (const r of rows) out.push(`| ${r.name} | ${r.perRequest.toFixed(2)} |`);
  for (const r of rows.filter((x) => x.top !== undefined)) out.push('', `${r.name}, per request:`, '', '```', r.top, '```');
  process.stdout.write(`${out.join('\n')}\n`);
} finally {
  await server?.stop();
  provider.kill();
  await cluster.destroy();
  rmSync(dir, { recursive: true, force: true });
}
