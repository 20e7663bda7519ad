// The spec (docs/spec/api-v1.md), providers, and the providers decisions of docs/TEAM-DECISIONS.md.
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { EXAMPLE_PROVIDERS, removeDir, startServer } from '../helpers.mjs';

const PROVIDERS = [
  { _id: 'aaaaaaaaaaaaaaaaaaaaaaa1', name: 'Zeta', apiKey: 'sk-zeta-secret-1', baseUrl: 'https://api.zeta.example/v1', extra: { nested: true } },
  { _id: 'AAAAAAAAAAAAAAAAAAAAAAA2', name: 'alpha', apiKey: 'sk-alpha-secret-2' },
  { _id: 'aaaaaaaaaaaaaaaaaaaaaaa3', name: 'Beta', baseUrl: 'https://user:hunter2@proxy.example/v1?api_key=sk-in-url&x=1' },
  { _id: 'aaaaaaaaaaaaaaaaaaaaaaa4', name: 'Beta', apiKey: '' },
  { _id: 'aaaaaaaaaaaaaaaaaaaaaaa5', name: 'Émile', config: { api_key: 'sk-nested-secret', headers: { Authorization: 'Bearer sk-zeta-secret-1' } } },
  { _id: 'aaaaaaaaaaaaaaaaaaaaaaa6', name: 'Zz headers', headers: { 'x-api-key': 'xak-header-secret', authorization: 'Bearer tok-in-header', 'Content-Type': 'application/json' }, client_secret: 'cs-secret-value' },
];
const SECRETS = ['sk-zeta-secret-1', 'sk-alpha-secret-2', 'hunter2', 'sk-in-url', 'sk-nested-secret', 'xak-header-secret', 'tok-in-header', 'cs-secret-value'];

let server;
let alice;
before(async () => {
  server = await startServer({ providers: PROVIDERS });
  alice = server.as('alice');
});
after(async () => {
  await server.stop();
  removeDir(server.dataDir);
});

describe('Endpoints table (providers)', () => {
  test('GET /api/v1/providers | none | 200 {success: true, data: [<provider>, ...]} by name, without apiKey', async () => {
    const r = await alice.get('/api/v1/providers');
    assert.equal(r.status, 200);
    assert.equal(r.body.success, true);
    assert.deepEqual(
      r.body.data.map((p) => p.name),
      ['Beta', 'Beta', 'Zeta', 'Zz headers', 'alpha', 'Émile'],
    );
    for (const p of r.body.data) assert.equal('apiKey' in p, false);
  });

  test('GET /api/v1/providers/:id | none | 200 {success: true, data: <provider>} without apiKey', async () => {
    const r = await alice.get('/api/v1/providers/aaaaaaaaaaaaaaaaaaaaaaa1');
    assert.equal(r.status, 200);
    assert.equal(r.body.success, true);
    assert.equal(r.body.data.name, 'Zeta');
    assert.equal('apiKey' in r.body.data, false);
    assert.deepEqual(r.body.data.extra, { nested: true }, 'other fields are returned as given');
  });
});

describe('Errors table (providers)', () => {
  test('Provider get: no provider with that identifier | 404 | Provider not found', async () => {
    const r = await alice.get('/api/v1/providers/bbbbbbbbbbbbbbbbbbbbbbbb');
    assert.equal(r.status, 404);
    assert.deepEqual(r.body, { success: false, message: 'Provider not found' });
  });

  test('Provider get: :id is not a valid record identifier | 400 | Invalid provider ID', async () => {
    for (const id of ['xyz', 'aaaaaaaaaaaaaaaaaaaaaaa', 'aaaaaaaaaaaaaaaaaaaaaaa1a', 'gggggggggggggggggggggggg', '%20']) {
      const r = await alice.get(`/api/v1/providers/${id}`);
      assert.equal(r.status, 400, id);
      assert.deepEqual(r.body, { success: false, message: 'Invalid provider ID' });
    }
  });

  test('Auth 1: every endpoint of the providers group requires an authenticated user', async () => {
    for (const path of ['/api/v1/providers', '/api/v1/providers/aaaaaaaaaaaaaaaaaaaaaaa1', '/api/v1/providers/xyz']) {
      const r = await server.request('GET', path);
      assert.equal(r.status, 401, path);
      assert.deepEqual(r.body, { success: false, message: 'Unauthorized' });
    }
  });
});

describe('Providers decisions', () => {
  test('Provider ids must be 24 hex characters (case-insensitive)', async () => {
    const upper = await alice.get('/api/v1/providers/AAAAAAAAAAAAAAAAAAAAAAA1');
    assert.equal(upper.status, 200);
    assert.equal(upper.body.data.name, 'Zeta');
    const mixed = await alice.get('/api/v1/providers/aaaaaaaaaaaaaaaaaaaaaaa2');
    assert.equal(mixed.body.data.name, 'alpha');
  });

  test('Sort by name in code-point order (MongoDB\'s default), ties by _id', async () => {
    const r = await alice.get('/api/v1/providers');
    const beta = r.body.data.filter((p) => p.name === 'Beta').map((p) => p._id);
    assert.deepEqual(beta, ['aaaaaaaaaaaaaaaaaaaaaaa3', 'aaaaaaaaaaaaaaaaaaaaaaa4']);
    // uppercase before lowercase before non-ASCII: code-point order, not locale order
    assert.deepEqual(r.body.data.map((p) => p.name).slice(2), ['Zeta', 'Zz headers', 'alpha', 'Émile']);
  });

  test('Responses add hasApiKey: true|false', async () => {
    const r = await alice.get('/api/v1/providers');
    const by = Object.fromEntries(r.body.data.map((p) => [p._id, p.hasApiKey]));
    assert.deepEqual(by, {
      aaaaaaaaaaaaaaaaaaaaaaa1: true,
      aaaaaaaaaaaaaaaaaaaaaaa2: true,
      aaaaaaaaaaaaaaaaaaaaaaa3: false,
      aaaaaaaaaaaaaaaaaaaaaaa4: false,
      aaaaaaaaaaaaaaaaaaaaaaa5: false,
      aaaaaaaaaaaaaaaaaaaaaaa6: false,
    });
  });

  test('apiKey never appears in any response; credentials inside URL fields (https://user:pass@host) are masked', async () => {
    const list = await alice.get('/api/v1/providers');
    const texts = [list.text];
    for (const p of PROVIDERS) texts.push((await alice.get(`/api/v1/providers/${p._id}`)).text);
    for (const t of texts) for (const secret of SECRETS) assert.equal(t.includes(secret), false, `${secret} leaked`);
    const beta = list.body.data.find((p) => p._id === 'aaaaaaaaaaaaaaaaaaaaaaa3');
    assert.equal(beta.baseUrl, 'https://***@proxy.example/v1?api_key=***&x=1');
    const emile = list.body.data.find((p) => p._id === 'aaaaaaaaaaaaaaaaaaaaaaa5');
    assert.deepEqual(emile.config, { headers: { Authorization: '***' } });
  });

  test('fields named like credentials (x-api-key, authorization, client_secret, token...) keep their name, not value', async () => {
    const r = await alice.get('/api/v1/providers/aaaaaaaaaaaaaaaaaaaaaaa6');
    // every value under headers is masked, whatever the header's name (docs/DECISIONS.md, Providers)
    assert.deepEqual(r.body.data.headers, { 'x-api-key': '***', authorization: '***', 'Content-Type': '***' });
    assert.equal(r.body.data.client_secret, '***');
  });

  test('apiKey never appears in any log line', async () => {
    await alice.get('/api/v1/providers');
    for (const secret of SECRETS) assert.equal(server.stdout.includes(secret), false, `${secret} in the log`);
  });

  test('SIGHUP reloads providers.json; a bad reload keeps the old list', async () => {
    const s = await startServer({ providers: [{ _id: 'cccccccccccccccccccccccc', name: 'One' }] });
    try {
      const u = s.as('alice');
      writeFileSync(join(s.dataDir, 'providers.json'), JSON.stringify([{ _id: 'cccccccccccccccccccccccc', name: 'One' }, { _id: 'dddddddddddddddddddddddd', name: 'Two' }]));
      s.child.kill('SIGHUP');
      await waitFor(async () => (await u.get('/api/v1/providers')).body.data.length === 2);
      writeFileSync(join(s.dataDir, 'providers.json'), '[{"_id":"bad","name":"x","apiKey":"sk-must-not-log"}]');
      s.child.kill('SIGHUP');
      await waitFor(() => s.logs().some((l) => l.msg === 'providers reload failed; keeping the previous list'));
      assert.equal((await u.get('/api/v1/providers')).body.data.length, 2);
      assert.equal(s.stdout.includes('sk-must-not-log'), false);
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('A missing file means no providers (logged)', async () => {
    const s = await startServer({ providers: null });
    try {
      assert.deepEqual((await s.as('a').get('/api/v1/providers')).body, { success: true, data: [] });
      assert.ok(s.logs().some((l) => l.level === 'warn' && /no providers file/.test(l.msg)));
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('The example examples/providers.json (what a fresh clone serves) loads and lists without keys', async () => {
    const example = JSON.parse(readFileSync(EXAMPLE_PROVIDERS, 'utf8'));
    const s = await startServer({ providers: example });
    try {
      const r = await s.as('a').get('/api/v1/providers');
      assert.equal(r.body.data.length, example.length);
      for (const p of example) if (p.apiKey) assert.equal(r.text.includes(p.apiKey), false);
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });
});

async function waitFor(cond, ms = 5000) {
  const start = Date.now();
  while (!(await cond())) {
    if (Date.now() - start > ms) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 20));
  }
}
