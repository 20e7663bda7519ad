// One source of truth: the OpenAPI document, which this file walks and calls.
// The features beyond the spec's rows, as the features issue names them (its words, not the
// docs', are what the test names quote). Against the real server over HTTP.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { addTurn, alice, ALL_SCOPES, assert403, assertError, create, EMOJI, get, ids, MISSING, PROVIDERS, server, sharedServer, unique, withParams } from '../api-kit.mjs';
import { tokenFor } from '../helpers.mjs';
import { startProvider } from '../provider/server.mjs';
import { openEvents } from '../sse.mjs';

// the sessions these tests make name the example OpenAI provider: here it is the local provider, so a message's reply is answered
const provider = await startProvider({ log: false });
// and the OpenAI door's example asks for the example's local Ollama model, here the local provider too
sharedServer({
  providers: [
    ...PROVIDERS,
    { _id: '665f1c2a9b1e8a0012ab34c1', name: 'Local', type: 'openai', baseUrl: `${provider.url}/v1` },
    { _id: '665f1c2a9b1e8a0012ab34c3', name: 'Local Ollama', type: 'ollama', baseUrl: provider.url, models: ['llama3.1:8b'] },
  ],
});

/** The OpenAI door's routes answer errors in OpenAI's shape: `{error: {message, type, param, code}}`. */
const isDoor = (path) => path.startsWith('/v1/');
const messageOf = (path, body) => (isDoor(path) ? body.error?.message : body.message);
after(() => provider.close());

describe('i. One source of truth: the OpenAPI document', () => {
  let doc;
  before(async () => {
    const r = await server.request('GET', '/api/v1/openapi.json');
    assert.equal(r.status, 200);
    doc = r.body;
  });

  function resolve(schema) {
    let s = schema;
    for (let i = 0; s && s.$ref !== undefined; i++) {
      assert.ok(i < 10, 'no $ref loops');
      assert.match(s.$ref, /^#\/components\/schemas\//);
      s = doc.components.schemas[s.$ref.slice('#/components/schemas/'.length)];
      assert.ok(s, `$ref ${schema.$ref} resolves`);
    }
    return s;
  }

  /** A small JSON Schema check (the keywords this document uses); returns the problems found. */
  function check(schema, value, path = '$', out = []) {
    const s = resolve(schema);
    const typeOk = (t) =>
      ({
        string: typeof value === 'string',
        integer: Number.isInteger(value),
        number: typeof value === 'number',
        boolean: typeof value === 'boolean',
        null: value === null,
        array: Array.isArray(value),
        object: typeof value === 'object' && value !== null && !Array.isArray(value),
      })[t];
    if (s.type !== undefined && ![].concat(s.type).some(typeOk)) out.push(`${path}: not ${JSON.stringify(s.type)}`);
    if ('const' in s && JSON.stringify(value) !== JSON.stringify(s.const)) out.push(`${path}: not ${JSON.stringify(s.const)}`);
    if (s.enum !== undefined && !s.enum.includes(value)) out.push(`${path}: not one of ${s.enum}`);
    if (typeof value === 'string') {
      if (s.pattern !== undefined && !new RegExp(s.pattern, 'u').test(value)) out.push(`${path}: does not match ${s.pattern}`);
      if (s.format === 'date-time' && !/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/.test(value)) out.push(`${path}: not a date-time`);
      if (s.maxLength !== undefined && [...value].length > s.maxLength) out.push(`${path}: too long`);
    }
    if (typeof value === 'number') {
      if (s.minimum !== undefined && value < s.minimum) out.push(`${path}: below minimum`);
      if (s.maximum !== undefined && value > s.maximum) out.push(`${path}: above maximum`);
    }
    if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
      for (const k of s.required ?? []) if (!(k in value)) out.push(`${path}: missing ${k}`);
      for (const [k, ps] of Object.entries(s.properties ?? {})) if (k in value) check(ps, value[k], `${path}.${k}`, out);
      if (s.additionalProperties === false) for (const k of Object.keys(value)) if (!(k in (s.properties ?? {}))) out.push(`${path}: unexpected ${k}`);
    }
    if (Array.isArray(value) && s.items !== undefined) value.forEach((v, i) => check(s.items, v, `${path}[${i}]`, out));
    return out;
  }

  function operations() {
    const out = [];
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(item)) {
        if (['get', 'put', 'post', 'delete', 'patch', 'head', 'options'].includes(method)) out.push({ path, method: method.toUpperCase(), op });
      }
    }
    return out;
  }

  /** A minimal valid body from a requestBody schema: its required properties (enums: the first member); the door's, its example. */
  function minimalBody(op) {
    const schema = op.requestBody?.content?.['application/json']?.schema;
    if (schema === undefined) return undefined;
    const s = resolve(schema);
    // the door's bodies have no minimal form a request takes without a model it serves: their examples
    if (['createChatCompletion', 'createResponse', 'createConversation', 'updateConversation', 'addConversationItems'].includes(op.operationId)) return structuredClone(s.examples[0]);
    const body = {};
    for (const name of s.required ?? []) {
      const p = resolve(s.properties[name]);
      body[name] = p.enum !== undefined ? p.enum[0] : p.type === 'object' ? {} : p.type === 'integer' ? 1 : 'x';
    }
    return body;
  }

  function needsToken(op) {
    return Array.isArray(op.security) && op.security.length > 0;
  }

  /** Real ids for {id} and {turnId}: a fresh session (with a turn) for chat-session paths, a real provider otherwise. */
  async function concretePath(path) {
    // a query parameter the document marks required (search's q) gets a value
    const required = Object.values(doc.paths[path] ?? {}).flatMap((op) => op.parameters ?? []).filter((p) => p.in === 'query' && p.required === true);
    if (required.length > 0) return `${path}?${required.map((p) => `${p.name}=x`).join('&')}`;
    if (!path.includes('{')) return path;
    if (path === '/v1/models/{model}') return '/v1/models/local-ollama%2Fllama3.1:8b';
    if (path.startsWith('/v1/responses/{id}')) {
      // a cancel stops a response in progress: a long one, in the background
      const cancel = path.endsWith('/cancel');
      const r = await alice.post('/v1/responses', { model: cancel ? 'local/tokens:4000@50' : 'local/echo', input: 'for the walk', background: cancel });
      assert.equal(r.status, 200, r.text);
      return path.replace('{id}', r.body.id);
    }
    if (path.startsWith('/v1/conversations/{id}')) {
      const c = await alice.post('/v1/conversations', { items: [{ type: 'message', role: 'user', content: 'walked' }] });
      const out = path.replace('{id}', c.body.id);
      return out.includes('{item}') ? out.replace('{item}', (await alice.get(`/v1/conversations/${c.body.id}/items`)).body.data[0].id) : out;
    }
    const id = path.startsWith('/api/v1/providers/') ? PROVIDERS[0]._id : (await create(alice))._id;
    // a turn's deltas go to a streaming turn, and a cancel stops one
    const body = path.endsWith('/deltas') || path.endsWith('/cancel') ? { role: 'assistant', content: 'so far', status: 'streaming' } : undefined;
    const turn = path.startsWith('/api/v1/providers/') ? undefined : await addTurn(alice, id, body);
    const out = path.replace(/\{id\}/g, id).replace(/\{turnId\}/g, turn?._id);
    assert.ok(!out.includes('{'), `every path parameter of ${path} is known to this test`);
    return out;
  }

  test('"GET /api/v1/openapi.json is OpenAPI 3.1" (no token needed; every $ref resolves; every operation documented)', async () => {
    const r = await server.request('GET', '/api/v1/openapi.json');
    assert.equal(r.status, 200);
    assert.match(r.headers['content-type'], /^application\/json/);
    assert.match(doc.openapi, /^3\.1\.\d+$/);
    assert.equal(typeof doc.info.title, 'string');
    assert.equal(typeof doc.info.version, 'string');
    assert.equal(doc.components.securitySchemes.bearerAuth.type, 'http');
    assert.equal(doc.components.securitySchemes.bearerAuth.scheme, 'bearer');
    const refs = JSON.stringify(doc).match(/"\$ref":"[^"]+"/g) ?? [];
    for (const ref of refs) resolve({ $ref: JSON.parse(`{${ref}}`).$ref });
    const opIds = new Set();
    for (const { path, method, op } of operations()) {
      assert.equal(typeof op.operationId, 'string', `${method} ${path}`);
      assert.ok(!opIds.has(op.operationId), `operationId ${op.operationId} is unique`);
      opIds.add(op.operationId);
      assert.ok(Object.keys(op.responses).length > 0);
      for (const status of Object.keys(op.responses)) assert.match(status, /^[1-5]\d\d$/);
      const params = (path.match(/\{(\w+)\}/g) ?? []).map((p) => p.slice(1, -1));
      for (const name of params) assert.ok(op.parameters?.some((p) => p.in === 'path' && p.name === name && p.required === true), `${method} ${path} documents {${name}}`);
    }
  });

  test('a test walks the document and calls every path and method: a listed status, 2xx in the documented envelope', async () => {
    const ops = operations();
    // deletes last, so that nothing else depends on what they remove
    ops.sort((a, b) => (a.method === 'DELETE') - (b.method === 'DELETE'));
    assert.ok(ops.length >= 14, `${ops.length} operations`);
    for (const { path, method, op } of ops) {
      const concrete = await concretePath(path);
      const json = minimalBody(op);
      if (method === 'GET' && op.responses['200']?.content?.['text/event-stream'] !== undefined) {
        // an event stream never ends by itself: it is open once its `ready` event is in
        const events = await openEvents(server.url, concrete, { token: alice.token });
        assert.equal(events.status, 200, `${method} ${path}: ${events.text}`);
        assert.match(events.headers['content-type'], /^text\/event-stream/);
        await events.waitFor((e) => e.event === 'ready');
        await events.close();
        assert.equal((await server.request(method, concrete)).status, 401, `${method} ${path} without a token`);
        continue;
      }
      const r = await server.request(method, concrete, { token: needsToken(op) ? alice.token : undefined, json });
      const what = `${method} ${path} -> ${r.status} ${r.text.slice(0, 200)}`;
      assert.ok(Object.hasOwn(op.responses, String(r.status)), `${what}: status not documented (${Object.keys(op.responses)})`);
      assert.ok(r.status >= 200 && r.status < 300, `${what}: a minimal valid request succeeds`);
      const documented = op.responses[String(r.status)];
      const [mediaType, media] = Object.entries(documented.content ?? {})[0] ?? [];
      assert.ok(mediaType, `${what}: the success answer documents its content`);
      assert.ok(r.headers['content-type'].startsWith(mediaType), `${what}: content-type ${r.headers['content-type']} vs ${mediaType}`);
      const body = mediaType === 'application/json' ? r.body : r.text;
      const problems = check(media.schema, body);
      assert.deepEqual(problems, [], `${what}: the body matches the documented schema`);
      for (const header of Object.keys(documented.headers ?? {})) assert.ok(r.headers[header.toLowerCase()], `${what}: documented header ${header}`);
      // security as documented: without a token, 401 exactly when the document asks for one
      const anon = await server.request(method, await concretePath(path), { json });
      if (needsToken(op)) {
        assert.equal(anon.status, 401, `${method} ${path} without a token`);
        assert.ok(op.responses['401'], `${method} ${path} documents 401`);
      } else {
        assert.ok(anon.status >= 200 && anon.status < 300, `${method} ${path} needs no token`);
      }
    }
  });

  test('[D-openapi-6] every body schema has one example, which matches it and which its route accepts', async () => {
    let bodies = 0;
    for (const { path, method, op } of operations()) {
      const ref = op.requestBody?.content?.['application/json']?.schema;
      if (ref === undefined) continue;
      bodies++;
      const schema = resolve(ref);
      assert.ok(Array.isArray(schema.examples) && schema.examples.length === 1, `${op.operationId}: one example`);
      const [example] = schema.examples;
      assert.deepEqual(check(schema, example), [], `${op.operationId}: the example matches its schema`);
      const r = await server.request(method, await concretePath(path), { token: alice.token, json: example });
      assert.ok(r.status >= 200 && r.status < 300, `${method} ${path} with its example: ${r.status} ${r.text}`);
    }
    assert.ok(bodies >= 6, `${bodies} bodies`);
  });

  test('every route the server answers (archive, turns, healthz, metrics, openapi...) appears in the document', async () => {
    const expected = [
      ['get', '/healthz'],
      ['get', '/metrics'],
      ['get', '/api/v1/openapi.json'],
      ['get', '/api/v1/chat-sessions'],
      ['post', '/api/v1/chat-sessions'],
      ['get', '/api/v1/chat-sessions/{id}'],
      ['put', '/api/v1/chat-sessions/{id}'],
      ['delete', '/api/v1/chat-sessions/{id}'],
      ['get', '/api/v1/chat-sessions/{id}/turns'],
      ['post', '/api/v1/chat-sessions/{id}/turns'],
      ['post', '/api/v1/chat-sessions/{id}/archive'],
      ['post', '/api/v1/chat-sessions/{id}/unarchive'],
      ['put', '/api/v1/chat-sessions/{id}/turns/{turnId}'],
      ['delete', '/api/v1/chat-sessions/{id}/turns/{turnId}'],
      ['post', '/api/v1/chat-sessions/{id}/fork'],
      ['get', '/api/v1/providers'],
      ['get', '/api/v1/providers/{id}'],
    ];
    for (const [method, path] of expected) assert.ok(doc.paths[path]?.[method], `${method.toUpperCase()} ${path} is documented`);
    // per documented path, the methods the server answers (its 405 Allow) are exactly the documented ones
    for (const [path, item] of Object.entries(doc.paths)) {
      const concrete = path.replace(/\{\w+\}/g, MISSING);
      const r = await server.request('PATCH', concrete, { token: alice.token });
      assert.equal(r.status, 405, `PATCH ${path}`);
      const allowed = new Set(r.headers.allow.split(',').map((m) => m.trim().toLowerCase()));
      allowed.delete('head'); // HEAD is GET without a body
      assert.deepEqual(allowed, new Set(Object.keys(item).filter((k) => k !== 'parameters')), `${path}: Allow vs documented methods`);
    }
    // and nearby paths that are not documented are not answered
    for (const path of [
      `/api/v1/chat-sessions/${MISSING}/turns/${MISSING}`,
      `/api/v1/chat-sessions/${MISSING}/restore`,
      `/api/v1/chat-sessions/${MISSING}/archived`,
      '/api/v1/chat-sessions/search',
      '/api/v1/turns',
      '/api/v1/users',
      '/api/v1/openapi.yaml',
      '/api/v1/healthz',
      '/api/v1/metrics',
      '/openapi.json',
      '/readyz',
      '/api/v1/providers/reload',
    ]) {
      const documented = Object.keys(doc.paths).some((p) => new RegExp(`^${p.replace(/[.]/g, '\\.').replace(/\{\w+\}/g, '[^/]+')}$`).test(path));
      if (documented) continue; // e.g. /chat-sessions/search is {id}=search: a documented route
      for (const method of ['GET', 'POST']) {
        const r = await server.request(method, path, { token: alice.token, json: method === 'POST' ? {} : undefined });
        assertError(r, 404, 'Not found', `${method} ${path}`);
      }
    }
  });

  test('"a request violating a documented constraint (e.g. maxLength, enum) gets the documented 400"', async () => {
    let tried = 0;
    for (const { path, method, op } of operations()) {
      const base = minimalBody(op);
      const bodySchema = op.requestBody ? resolve(op.requestBody.content['application/json'].schema) : undefined;
      for (const [name, raw] of Object.entries(bodySchema?.properties ?? {})) {
        const p = resolve(raw);
        const violations = [];
        if (p.maxLength !== undefined) violations.push(['maxLength', 'x'.repeat(p.maxLength + 1)], ['maxLength (code points)', EMOJI.repeat(p.maxLength + 1)]);
        if (p.enum !== undefined) violations.push(['enum', 'not-a-member'], ['enum (case)', String(p.enum[0]).toUpperCase() === p.enum[0] ? String(p.enum[0]).toLowerCase() : String(p.enum[0]).toUpperCase()]);
        if (p.type === 'string') violations.push(['type', 12345]);
        if (p.type === 'object') violations.push(['type', ['array']]);
        for (const [kind, value] of violations) {
          const concrete = await concretePath(path);
          const r = await server.request(method, concrete, { token: alice.token, json: { ...base, [name]: value } });
          const what = `${method} ${path} body.${name} violating ${kind}`;
          assert.ok(op.responses['400'], `${what}: 400 is documented`);
          assert.equal(r.status, 400, `${what}: ${r.status} ${r.text}`);
          if (isDoor(path)) assert.equal(r.body.error.param, name, `${what}: param names the field`);
          else assert.equal(r.body.success, false);
          assert.ok(messageOf(path, r.body).startsWith(name), `${what}: the message names the field: ${r.text}`);
          const errSchema = op.responses['400'].content['application/json'].schema;
          assert.deepEqual(check(errSchema, r.body), [], `${what}: the documented error shape`);
          tried++;
        }
      }
      for (const param of (op.parameters ?? []).filter((x) => x.in === 'query')) {
        const p = resolve(param.schema);
        const violations = [];
        if (p.maxLength !== undefined) violations.push(['maxLength', 'x'.repeat(p.maxLength + 1)]);
        if (p.enum !== undefined) violations.push(['enum', 'not-a-member']);
        if (p.minimum !== undefined) violations.push(['minimum', String(p.minimum - 1)]);
        if (p.maximum !== undefined) violations.push(['maximum', String(p.maximum + 1)]);
        if (p.type === 'integer') violations.push(['type', '1.5'], ['type', 'abc']);
        for (const [kind, value] of violations) {
          const concrete = await concretePath(path);
          const r = await server.request(method, withParams(concrete, { [param.name]: value }), { token: alice.token });
          const what = `${method} ${path}?${param.name} violating ${kind}`;
          assert.ok(op.responses['400'], `${what}: 400 is documented`);
          assert.equal(r.status, 400, `${what}: ${r.status} ${r.text}`);
          assert.ok(messageOf(path, r.body).startsWith(param.name), `${what}: ${r.text}`);
          tried++;
        }
      }
    }
    assert.ok(tried >= 30, `${tried} violations tried`);
  });

  test('the document\'s security is the server\'s: each operation\'s bearerAuth scope is exactly the scope the server requires', async () => {
    for (const { path, method, op } of operations()) {
      if (!needsToken(op)) continue;
      const scopes = op.security.flatMap((req) => req.bearerAuth ?? []);
      assert.equal(scopes.length, 1, `${method} ${path} names its scope`);
      assert.ok(op.responses['403'], `${method} ${path} documents 403`);
      const json = minimalBody(op);
      const token = tokenFor('alice', { scope: scopes[0] });
      const stream = method === 'GET' && op.responses['200']?.content?.['text/event-stream'] !== undefined;
      // an event stream never ends by itself: its head is the answer
      const withIt = stream ? await openEvents(server.url, await concretePath(path), { token }) : await server.request(method, await concretePath(path), { token, json });
      if (stream) await withIt.close();
      assert.ok(withIt.status >= 200 && withIt.status < 300, `${method} ${path} with only ${scopes[0]}: ${withIt.status} ${withIt.text}`);
      const others = ALL_SCOPES.filter((s) => s !== scopes[0]).join(' ');
      const refused = await server.request(method, await concretePath(path), { token: tokenFor('alice', { scope: others }), json });
      if (isDoor(path)) assert.deepEqual([refused.status, refused.body.error.type], [403, 'permission_error'], `${method} ${path} without ${scopes[0]}`);
      else assert403(refused, `${method} ${path} without ${scopes[0]}`);
    }
  });
});
