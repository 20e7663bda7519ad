// Providers: apiKey and passwords in URLs never leave the server, in answers or in the log.
// The features beyond the spec's rows, as the features issue names them (its words, not the
// docs', are what the test names quote). Against the real server over HTTP.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { alice, nested, PROVIDERS, server, sharedServer, URL_SECRETS } from './api-kit.mjs';

sharedServer({ providers: PROVIDERS });

describe('h. Providers', () => {
  async function provider(id) {
    const r = await alice.get(`/api/v1/providers/${id}`);
    assert.equal(r.status, 200, r.text);
    return r.body.data;
  }

  test('"responses carry hasApiKey true|false"', async () => {
    const list = (await alice.get('/api/v1/providers')).body.data;
    const expected = {
      bbbbbbbbbbbbbbbbbbbbbbb1: true,
      bbbbbbbbbbbbbbbbbbbbbbb2: false,
      bbbbbbbbbbbbbbbbbbbbbbb3: false,
      bbbbbbbbbbbbbbbbbbbbbbb4: false, // a blank key is no key
      bbbbbbbbbbbbbbbbbbbbbbb5: false,
      bbbbbbbbbbbbbbbbbbbbbbb6: false,
    };
    assert.deepEqual(Object.fromEntries(list.map((p) => [p._id, p.hasApiKey])), expected);
    for (const [id, has] of Object.entries(expected)) {
      const p = await provider(id);
      assert.equal(p.hasApiKey, has, id);
      assert.equal(typeof p.hasApiKey, 'boolean');
      assert.equal('apiKey' in p, false);
    }
    assert.equal((await alice.get('/api/v1/providers')).text.includes('sk-keyed-secret-1'), false);
  });

  test('"credentials embedded in any URL field (https://user:pass@host) are masked as well as apiKey" — in arrays, nested objects, http and other schemes', async () => {
    const p = await provider('bbbbbbbbbbbbbbbbbbbbbbb5');
    assert.deepEqual(p.mirrors, ['https://***@m1.example/v1', 'http://***@m2.example:8080/']);
    assert.deepEqual(p.endpoints, [{ region: 'eu', url: 'https://***@eu.example' }]);
    assert.deepEqual(p.nested, { proxy: { url: 'http://***@proxy.example:3128' } });
    assert.equal(p.database, 'postgres://***@db.example:5432/app');
    assert.equal(p.cache, 'redis://***@cache.example:6379/0');
    assert.equal(p.cluster, 'mongodb+srv://***@cluster0.example/db?retryWrites=true');
    assert.equal(p.ftp, 'FTP://***@ftp.example/pub');
    assert.equal(p.git, 'https://***@git.example/repo.git', 'a token alone in the userinfo is a credential too');
    assert.equal(p.notes, 'primary https://***@a.example, fallback wss://***@b.example/ws', 'every URL inside a longer string');
    const texts = [(await alice.get('/api/v1/providers')).text, (await alice.get('/api/v1/providers/bbbbbbbbbbbbbbbbbbbbbbb5')).text];
    for (const t of texts) for (const secret of URL_SECRETS) assert.equal(t.includes(secret), false, `${secret} leaked`);
    for (const secret of URL_SECRETS) assert.equal(server.stdout.includes(secret), false, `${secret} in the log`);
  });

  test('"credentials embedded in any URL field ... are masked": a password holding an unencoded "@" (URL parsers split at the last "@") is masked whole', async () => {
    const raw = PROVIDERS[5].baseUrl;
    assert.equal(new URL(raw).hostname, 'host.example', 'a valid URL: WHATWG takes the last @');
    assert.equal(new URL(raw).password, 'p%40ss-secret-12');
    const p = await provider('bbbbbbbbbbbbbbbbbbbbbbb6');
    assert.equal(p.baseUrl, 'https://***@host.example/v1');
    assert.equal((await alice.get('/api/v1/providers')).text.includes('ss-secret-12'), false, 'no part of the password leaks');
  });

  test('masking touches only credentials: URLs without them, e-mail addresses and other values are returned as given', async () => {
    const p = await provider('bbbbbbbbbbbbbbbbbbbbbbb5');
    assert.equal(p.clean, 'https://api.clean.example/v1?x=1');
    assert.equal(p.contact, 'admin@example.com');
    assert.equal(p.port, 443);
    assert.deepEqual(p.tags, ['x', 1, null, true]);
    assert.equal((await provider('bbbbbbbbbbbbbbbbbbbbbbb1')).baseUrl, 'https://api.keyed.example/v1');
    assert.equal((await provider('bbbbbbbbbbbbbbbbbbbbbbb2')).baseUrl, 'http://127.0.0.1:11434');
  });
});
