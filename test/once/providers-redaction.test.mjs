// Providers: apiKey and passwords in URLs never leave the server, in answers or in the log.
// The features beyond the spec's rows, as the features issue names them (its words, not the
// docs', are what the test names quote). Against the real server over HTTP.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { alice, PROVIDERS, server, sharedServer, URL_SECRETS } from '../api-kit.mjs';
import { removeDir, rng, startServer } from '../helpers.mjs';

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

  test('credentials in any URL field (https://user:pass@host) are masked, in arrays, nested objects, every scheme', async () => {
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

  test('a URL password holding an unencoded "@" is masked whole', async () => {
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

describe('[D-security-8] redaction by a rule on names, not by a list of names', () => {
  /** Starts a server on `providers` and answers the list's text, each entry's text, the entries and the log. */
  async function answersFor(providers) {
    const s = await startServer({ providers });
    try {
      const who = s.as('alice');
      const list = await who.get('/api/v1/providers');
      assert.equal(list.status, 200, list.text);
      const texts = [list.text];
      for (const p of providers) texts.push((await who.get(`/api/v1/providers/${p._id}`)).text);
      return { texts, entries: new Map(list.body.data.map((p) => [p._id, p])), log: s.stdout + s.stderr };
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  }

  function assertHidden({ texts, log }, secrets) {
    for (const secret of secrets) {
      for (const t of texts) assert.equal(t.includes(secret), false, `${secret} leaked in ${t.slice(0, 2000)}`);
      assert.equal(log.includes(secret), false, `${secret} in the log`);
    }
  }

  test('[D-security-8] every field whose name looks like a credential is masked at any depth, the names found in the wild', async () => {
    const entry = {
      _id: 'cccccccccccccccccccccc01',
      name: 'In the wild',
      'X-Goog-Api-Key': 'goog-secret-1',
      'Ocp-Apim-Subscription-Key': 'apim-secret-2',
      'x-auth-token': 'xauth-secret-3',
      Cookie: 'session=cookie-secret-4',
      aws_secret_access_key: 'aws-secret-5',
      'X-Api-Secret': 'xapi-secret-6',
      secret_key: 'secretkey-secret-7',
      'X-Token': 'xtoken-secret-8',
      password: 90817263,
      nested: { deeper: [{ apiKey2: 'nested-secret-10' }] },
      credentials: { user: 'cred-user-11', pass: 'cred-pass-12' },
      signingKeys: ['signing-secret-13', 'signing-secret-14'],
      notes: 'the maps key is goog-secret-1, the password 90817263',
    };
    const answers = await answersFor([entry]);
    const p = answers.entries.get(entry._id);
    for (const name of ['X-Goog-Api-Key', 'Ocp-Apim-Subscription-Key', 'x-auth-token', 'Cookie', 'aws_secret_access_key', 'X-Api-Secret', 'secret_key', 'X-Token', 'password']) {
      assert.equal(p[name], '***', name);
    }
    assert.deepEqual(p.nested, { deeper: [{ apiKey2: '***' }] });
    assert.equal(p.credentials, '***', 'an object under a credential name: masked whole');
    assert.equal(p.signingKeys, '***', 'an array under a credential name: masked whole');
    assert.equal(p.notes, 'the maps key is ***, the password ***', 'copies elsewhere are masked too');
    assertHidden(answers, ['goog-secret-1', 'apim-secret-2', 'xauth-secret-3', 'cookie-secret-4', 'aws-secret-5', 'xapi-secret-6', 'secretkey-secret-7', 'xtoken-secret-8', '90817263', 'nested-secret-10', 'cred-user-11', 'cred-pass-12', 'signing-secret-13', 'signing-secret-14']);
  });

  test('[D-security-8] pass, otp and salt are credential words; connection strings and Bearer or Basic in text are masked', async () => {
    const entry = {
      _id: 'cccccccccccccccccccccc04',
      name: 'Odd fields',
      proxyPass: 'proxy-pass-secret-1',
      otp: 'otp-secret-2',
      salt: 'salt-secret-3',
      connection: 'Server=db.example;User Id=app;Password=conn-secret-4;Encrypt=true',
      odbc: 'DRIVER={PG};PWD=odbc-secret-5',
      notes: 'call it with Authorization: Bearer bearer-secret-6, or Basic YmFzaWMtc2VjcmV0LTc=',
      legacy: 'send Authorization: Token token-secret-8 or authorization: ApiKey apikey-secret-9',
      plain: 'ratio=3; mode=fast',
    };
    const answers = await answersFor([entry]);
    const p = answers.entries.get(entry._id);
    assert.equal(p.proxyPass, '***');
    assert.equal(p.otp, '***');
    assert.equal(p.salt, '***');
    assert.equal(p.connection, 'Server=db.example;User Id=app;Password=***;Encrypt=true');
    assert.equal(p.odbc, 'DRIVER={PG};PWD=***');
    assert.equal(p.notes, 'call it with Authorization: Bearer ***, or Basic ***');
    assert.equal(p.legacy, 'send Authorization: Token *** or authorization: ApiKey ***', 'any scheme after Authorization:');
    assert.equal(p.plain, 'ratio=3; mode=fast', 'pairs not named like credentials are kept');
    assertHidden(answers, ['proxy-pass-secret-1', 'otp-secret-2', 'salt-secret-3', 'conn-secret-4', 'odbc-secret-5', 'bearer-secret-6', 'YmFzaWMtc2VjcmV0LTc', 'token-secret-8', 'apikey-secret-9']);
  });

  test('[D-security-8] a connection string of pairs separated by spaces (libpq) has its password masked too', async () => {
    // (the value of a first pair ran to the next `;`, so host=db took the password after it as its own;
    // a credential's still does: a password may hold spaces and `=`)
    const entry = { _id: 'cccccccccccccccccccccc05', name: 'Pairs', database: 'host=db.example port=5432 user=app password=pq-secret-1 dbname=chats', ado: 'Server=db;Password=a b=pq-secret-2;Encrypt=true', note: 'ratio=3 mode=fast' };
    const answers = await answersFor([entry]);
    const p = answers.entries.get(entry._id);
    assert.equal(p.database, 'host=db.example port=5432 user=app password=***');
    assert.equal(p.ado, 'Server=db;Password=***;Encrypt=true');
    assert.equal(p.note, 'ratio=3 mode=fast', 'pairs not named like credentials are kept');
    assertHidden(answers, ['pq-secret-1', 'pq-secret-2']);
  });

  test('"every value under a provider\'s headers is masked", whatever the header is called, at any depth (the header names stay)', async () => {
    const entry = {
      _id: 'cccccccccccccccccccccc02',
      name: 'Headers',
      headers: { 'X-Custom': 'custom-header-value-1', 'X-Org': 'acme-org-2', 'X-Retries': 3, 'X-Flag': true },
      endpoints: [{ url: 'https://eu.example', extraHeaders: { 'X-Region-Secret': 'region-secret-3' } }],
      defaultHeaders: [{ name: 'X-Other', value: 'other-value-4' }],
    };
    const answers = await answersFor([entry]);
    const p = answers.entries.get(entry._id);
    assert.deepEqual(p.headers, { 'X-Custom': '***', 'X-Org': '***', 'X-Retries': '***', 'X-Flag': true });
    assert.deepEqual(p.endpoints, [{ url: 'https://eu.example', extraHeaders: { 'X-Region-Secret': '***' } }]);
    assert.deepEqual(p.defaultHeaders, [{ name: '***', value: '***' }]);
    assertHidden(answers, ['custom-header-value-1', 'acme-org-2', 'region-secret-3', 'other-value-4']);
  });

  test("[D-security-8] names are matched by word, so words that only contain a credential's letters are shown", async () => {
    const entry = {
      _id: 'cccccccccccccccccccccc03',
      name: 'Not credentials',
      maxTokens: 4096,
      max_tokens: 8192,
      contextTokens: 128000,
      tokensPerMinute: 90000,
      tokenLimit: 2000,
      keepAlive: '5m',
      authorUrl: 'https://example.com/about',
      author: 'Ada',
      tokenizer: 'cl100k_base',
      keyboardLayout: 'us',
      privateEndpoint: false,
      authRequired: true,
      secret: null,
      token: '',
    };
    const answers = await answersFor([entry]);
    const { hasApiKey, ...rest } = answers.entries.get(entry._id);
    assert.equal(hasApiKey, false);
    assert.deepEqual(rest, { ...entry, _id: entry._id });
  });

  test('[D-security-8] generated names with a credential word in any style are masked; names without one are not', async () => {
    const seed = 31;
    const random = rng(seed);
    const pick = (list) => list[Math.floor(random() * list.length)];
    const credentialWords = ['key', 'secret', 'token', 'password', 'passcode', 'auth', 'cookie', 'credential', 'signature', 'private', 'authorization', 'passwd'];
    const otherWords = ['x', 'my', 'azure', 'openai', 'aws', 'proxy', 'client', 'upstream', 'goog', 'vendor', 'org', 'service', 'backup', 'old', 'primary', 'access', 'api', 'session', 'v2', 'v'];
    const plainWords = ['model', 'url', 'region', 'timeout', 'retries', 'author', 'keep', 'alive', 'organization', 'deployment', 'version', 'base', 'path', 'monitor', 'tokenizer', 'keyboard'];
    const styles = [
      (ws) => ws.map((w, i) => (i === 0 ? w : w[0].toUpperCase() + w.slice(1))).join(''), // camelCase
      (ws) => ws.map((w) => w[0].toUpperCase() + w.slice(1)).join(''), // PascalCase
      (ws) => ws.join('_'),
      (ws) => ws.join('-'),
      (ws) => ws.join('_').toUpperCase(),
      (ws) => ws.map((w) => w[0].toUpperCase() + w.slice(1)).join('-'), // Header-Case
      (ws) => ws.join('.'),
      (ws) => ws.join(''), // all run together: a credential word ends the name or stands alone
    ];
    const name = (middle) => {
      const ws = [];
      for (let i = Math.floor(random() * 3); i > 0; i--) ws.push(pick(otherWords));
      ws.push(middle);
      const style = pick(styles);
      // run together, the credential word must end the name (`apikey`): nothing after it
      if (style !== styles[7]) for (let i = Math.floor(random() * 2); i > 0; i--) ws.push(pick(otherWords));
      let n = style(ws);
      if (random() < 0.3) n += String(1 + Math.floor(random() * 9));
      return n;
    };
    const secrets = [];
    const expected = []; // [entry index, path, field name, expected value]
    const entries = Array.from({ length: 4 }, (_, i) => ({ _id: `dddddddddddddddddddddd0${i}`, name: `Generated ${i}`, nested: { inner: [{}] } }));
    const seen = new Set();
    for (let i = 0; i < 240; i++) {
      const credential = i % 3 !== 2;
      const n = credential ? name(pick(credentialWords)) : name(pick(plainWords));
      if (seen.has(n.toLowerCase()) || /^api[-_]?key$/i.test(n)) continue;
      seen.add(n.toLowerCase());
      const kind = pick(['string', 'string', 'number', 'object', 'array']);
      const marker = `gen-${seed}-${i}-${Math.floor(random() * 1e9)}`;
      const number = 100000000 + i * 1000 + Math.floor(random() * 1000);
      const value = { string: marker, number, object: { v: marker }, array: [marker, 1] }[kind];
      const e = i % entries.length;
      const where = pick(['top', 'nested', 'deep']);
      const target = where === 'top' ? entries[e] : where === 'nested' ? entries[e].nested : entries[e].nested.inner[0];
      target[n] = value;
      if (credential) secrets.push(kind === 'number' ? String(number) : marker);
      expected.push([e, where, n, credential ? '***' : value]);
    }
    assert.ok(expected.length > 200, 'enough distinct names');
    const answers = await answersFor(entries);
    for (const [e, where, n, want] of expected) {
      const p = answers.entries.get(entries[e]._id);
      const got = where === 'top' ? p[n] : where === 'nested' ? p.nested[n] : p.nested.inner[0][n];
      assert.deepEqual(got, want, `${n} (${where}, seed ${seed})`);
    }
    assertHidden(answers, secrets);
  });
});
