// GET /docs, the API reference page (docs/DECISIONS.md, "The reference page"): what the server
// sends, and the page itself in headless Chromium: it lists every operation of the OpenAPI
// document, loads nothing from anywhere, and its try-it form calls the API with a pasted token.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Script } from 'node:vm';
import { after, before, describe, test } from 'node:test';
import { Browser, chromiumOrSkip } from '../chromium.mjs';
import { removeDir, ROOT, runCli, SECRET, startServer } from '../helpers.mjs';
import { startProvider } from '../provider/server.mjs';

/** The text of every inline <script> (without a type) and <style> of a page. */
function inlineBlocks(html) {
  const scripts = [...html.matchAll(/<script>([\s\S]*?)<\/script>/g)].map((m) => m[1]);
  const styles = [...html.matchAll(/<style>([\s\S]*?)<\/style>/g)].map((m) => m[1]);
  return { scripts, styles };
}

const hash = (text) => `'sha256-${createHash('sha256').update(text, 'utf8').digest('base64')}'`;

function operationIds(doc) {
  const ids = [];
  for (const item of Object.values(doc.paths)) for (const op of Object.values(item)) ids.push(op.operationId);
  return ids.sort();
}

let server;
let doc;
before(async () => {
  server = await startServer();
  doc = (await server.request('GET', '/api/v1/openapi.json')).body;
});
after(async () => {
  await server.stop();
  removeDir(server.dataDir);
});

describe('The reference page', () => {

  test('[D-openapi-4] GET /docs needs no token and holds the document /api/v1/openapi.json serves, /docs in it', async () => {
    const r = await server.request('GET', '/docs');
    assert.equal(r.status, 200);
    assert.equal(r.headers['content-type'], 'text/html; charset=utf-8');
    const m = /<script type="application\/json" id="openapi">([\s\S]*?)<\/script>/.exec(r.text);
    assert.ok(m, 'the document is embedded');
    assert.deepEqual(JSON.parse(m[1]), doc);
    assert.equal(doc.paths['/docs'].get.operationId, 'docs');
    assert.deepEqual(Object.keys(doc.paths['/docs'].get.responses['200'].content), ['text/html']);
    const { scripts } = inlineBlocks(r.text);
    assert.equal(scripts.length, 1);
    assert.doesNotThrow(() => new Script(scripts[0]), 'the page script parses');
  });

  test('[D-openapi-8] the page holds its script and style, loads nothing else, and is sent with a hash-based CSP', async () => {
    const r = await server.request('GET', '/docs');
    const csp = r.headers['content-security-policy'];
    assert.ok(csp, 'a Content-Security-Policy is sent');
    const directives = Object.fromEntries(csp.split(';').map((d) => d.trim().split(/\s+/)).map(([k, ...v]) => [k, v]));
    assert.deepEqual(directives['default-src'], ["'none'"]);
    assert.deepEqual(directives['connect-src'], ["'self'"]);
    assert.deepEqual(directives['frame-ancestors'], ["'none'"]);
    const { scripts, styles } = inlineBlocks(r.text);
    assert.deepEqual(directives['script-src'], scripts.map(hash));
    assert.deepEqual(directives['style-src'], styles.map(hash));
    assert.ok(!csp.includes('unsafe-inline') && !csp.includes('unsafe-eval'));
    assert.doesNotMatch(r.text, /<(script|link|img|iframe)[^>]*\s(src|href)="(?!data:)/i, 'no element loads a resource');
    assert.doesNotMatch(r.text, /@import|url\(\s*['"]?(https?:)?\/\//i, 'the style loads nothing');
    assert.doesNotMatch(r.text.replace(/<script type="application\/json"[\s\S]*?<\/script>/, ''), /https?:\/\//, 'no address outside this server');
  });

  test('[D-openapi-8] DOCS=off removes the route: 404 and absent from the OpenAPI document', async () => {
    const off = await startServer({ env: { DOCS: 'off' } });
    try {
      assert.equal((await off.request('GET', '/docs')).status, 404);
      const d = (await off.request('GET', '/api/v1/openapi.json')).body;
      assert.equal(d.paths['/docs'], undefined);
    } finally {
      await off.stop();
      removeDir(off.dataDir);
    }
    const help = runCli(['--help']);
    assert.match(help.stdout, /DOCS \/ --docs\s+on or off: GET \/docs/);
  });

  test('[D-openapi-10] in Chromium the page lists every operation, calls this server only, and try-it shows an answer', async (t) => {
    if (!chromiumOrSkip(t)) return;
    const browser = await Browser.launch();
    try {
      const requests = [];
      const problems = [];
      browser.on((method, p) => {
        if (method === 'Network.requestWillBeSent') requests.push({ url: p.request.url, headers: p.request.headers });
        if (method === 'Log.entryAdded' && p.entry.level === 'error') problems.push(`${p.entry.source}: ${p.entry.text}`);
        if (method === 'Runtime.exceptionThrown') problems.push(p.exceptionDetails.exception?.description ?? p.exceptionDetails.text);
        if (method === 'Runtime.consoleAPICalled' && p.type === 'error') problems.push(JSON.stringify(p.args));
      });
      await Promise.all([browser.send('Page.enable'), browser.send('Network.enable'), browser.send('Log.enable'), browser.send('Runtime.enable')]);
      const loaded = browser.waitFor('Page.loadEventFired');
      await browser.send('Page.navigate', { url: `${server.url}/docs` });
      await loaded;

      const listed = await browser.evaluate(`[...document.querySelectorAll('section.op')].map((s) => s.dataset.operationId).sort()`);
      assert.deepEqual(listed, operationIds(doc), 'every operation of the document, each once');
      const forms = await browser.evaluate(`document.querySelectorAll('form.try').length`);
      assert.equal(forms, listed.length, 'a try-it form per operation');
      // every parameter and every documented answer of each operation is on the page
      for (const [path, item] of Object.entries(doc.paths)) {
        for (const op of Object.values(item)) {
          const shown = await browser.evaluate(`(() => {
            const s = document.getElementById(${JSON.stringify(`op-${op.operationId}`)});
            return { path: s.dataset.path, statuses: [...s.querySelectorAll('table.responses > tbody > tr > td:first-child > code')].map((c) => c.textContent),
                     params: [...s.querySelectorAll('table.params td:first-child code')].map((c) => c.textContent) };
          })()`);
          assert.equal(shown.path, path);
          assert.deepEqual(shown.statuses, Object.keys(op.responses), `${op.operationId}: answers and errors`);
          assert.deepEqual(shown.params, (op.parameters ?? []).map((p) => p.name), `${op.operationId}: parameters`);
        }
      }

      const minted = runCli(['token', '--sub', 'docs-reader'], { env: { AUTH_SECRET: SECRET } });
      assert.equal(minted.code, 0, minted.stderr);
      const token = minted.stdout.trim();
      const answer = await browser.evaluate(`(async () => {
        const input = document.getElementById('token');
        input.value = ${JSON.stringify(token)};
        input.dispatchEvent(new Event('input'));
        const form = document.querySelector('form.try[data-operation-id="listProviders"]');
        const done = new Promise((resolve) => {
          const seen = () => form.dataset.state === 'answered' || form.dataset.state === 'failed';
          new MutationObserver(() => seen() && resolve()).observe(form, { attributes: true });
        });
        form.querySelector('button[type=submit]').click();
        await done;
        return { state: form.dataset.state, status: form.querySelector('.answer').dataset.status, text: form.querySelector('.answer').textContent };
      })()`);
      assert.equal(answer.state, 'answered', answer.text);
      assert.equal(answer.status, '200');
      assert.match(answer.text, /^GET \/api\/v1\/providers\nHTTP 200 OK\n/);
      const direct = await server.as('docs-reader').get('/api/v1/providers');
      assert.ok(answer.text.endsWith(JSON.stringify(direct.body, null, 2)), answer.text);

      const call = requests.find((r) => r.url === `${server.url}/api/v1/providers`);
      assert.ok(call, 'the form called the API');
      assert.equal(call.headers.Authorization, `Bearer ${token}`);
      assert.deepEqual(requests.filter((r) => !r.url.startsWith(`${server.url}/`)), [], 'no request leaves this server');
      assert.deepEqual(requests.map((r) => new URL(r.url).pathname), ['/docs', '/api/v1/providers']);
      assert.deepEqual(problems, []);
    } finally {
      await browser.close();
    }
  });
});

/** Opens /docs of `on` (the file's server unless told) in `browser`, and collects what goes wrong in the page (errors logged, exceptions). */
async function openDocs(browser, on = server) {
  const problems = [];
  browser.on((method, p) => {
    if (method === 'Log.entryAdded' && p.entry.level === 'error') problems.push(`${p.entry.source}: ${p.entry.text}`);
    if (method === 'Runtime.exceptionThrown') problems.push(p.exceptionDetails.exception?.description ?? p.exceptionDetails.text);
  });
  await Promise.all([browser.send('Page.enable'), browser.send('Log.enable'), browser.send('Runtime.enable')]);
  const loaded = browser.waitFor('Page.loadEventFired');
  await browser.send('Page.navigate', { url: `${on.url}/docs` });
  await loaded;
  return problems;
}

/** RFC 6901: the pointer one step below `base`. */
const down = (base, ...keys) => keys.reduce((p, k) => `${p}/${String(k).replace(/~/g, '~0').replace(/\//g, '~1')}`, base);

/**
 * What the page must show of a schema at `pointer`, as it would be drawn: every object's fields
 * (a table), every oneOf/anyOf (a list of its alternatives), nested to any depth. A $ref is shown
 * where it points (under Schemas).
 */
function expectedShapes(schema, pointer, into = []) {
  if (schema === undefined || schema === null || typeof schema !== 'object' || schema.$ref !== undefined) return into;
  if (schema.properties !== undefined) {
    into.push({ pointer, kind: 'properties', fields: Object.keys(schema.properties) });
    for (const [name, p] of Object.entries(schema.properties)) expectedShapes(p, down(pointer, 'properties', name), into);
  }
  for (const key of ['oneOf', 'anyOf']) {
    if (!Array.isArray(schema[key])) continue;
    into.push({ pointer, kind: key, alternatives: schema[key].length });
    schema[key].forEach((a, i) => expectedShapes(a, down(pointer, key, i), into));
  }
  if (schema.items !== undefined) expectedShapes(schema.items, down(pointer, 'items'), into);
  return into;
}

describe('The reference page in a browser (issue 31, item 6)', () => {
  test('[D-openapi-5] what the page draws is a walk of the document: no schema left out, no [object ...]', async (t) => {
    if (!chromiumOrSkip(t)) return;
    const browser = await Browser.launch();
    try {
      const problems = await openDocs(browser);
      const text = await browser.evaluate('document.body.innerText');
      assert.deepEqual([...new Set(text.match(/\[object [^\]]*\]|\bundefined\b|\bNaN\b/g) ?? [])], [], 'nothing rendered as [object ...], undefined or NaN');
      // what the page draws: each schema block with its pointer, its fields or its alternatives
      const shown = await browser.evaluate(`[...document.querySelectorAll('[data-schema]')].map((e) => ({
        pointer: e.dataset.schema,
        kind: e.dataset.kind,
        op: e.closest('section.op')?.dataset.operationId ?? null,
        fields: e.dataset.kind === 'properties' ? [...e.querySelectorAll(':scope > tbody > tr > td:first-child > code')].map((c) => c.textContent) : undefined,
        alternatives: e.dataset.kind === 'properties' ? undefined : e.querySelectorAll(':scope > li').length,
      }))`);
      const expected = [];
      const expectedInOp = [];
      for (const [path, item] of Object.entries(doc.paths)) {
        for (const [method, op] of Object.entries(item)) {
          const at = down('#/paths', path, method);
          for (const [status, r] of Object.entries(op.responses)) {
            for (const [type, media] of Object.entries(r.content ?? {})) expectedShapes(media.schema, down(at, 'responses', status, 'content', type, 'schema'), expected);
          }
          for (const [type, media] of Object.entries(op.requestBody?.content ?? {})) {
            const ref = media.schema.$ref;
            // a body by reference is shown in full in its operation too, under the reference's pointer
            if (ref !== undefined) expectedInOp.push(...expectedShapes(doc.components.schemas[ref.split('/').at(-1)], ref).map((e) => ({ ...e, op: op.operationId })));
            else expectedShapes(media.schema, down(at, 'requestBody', 'content', type, 'schema'), expected);
          }
        }
      }
      for (const [name, schema] of Object.entries(doc.components.schemas)) expectedShapes(schema, down('#/components/schemas', name), expected);
      assert.ok(expected.some((e) => e.pointer === '#/components/schemas/Turn/properties/content' && e.kind === 'oneOf'), 'the walk reaches Turn.content');
      assert.ok(expected.filter((e) => e.pointer.startsWith('#/paths/')).length > 20, 'the walk reaches the answers');
      const missing = [];
      for (const e of expected) {
        const found = shown.find((s) => s.pointer === e.pointer && s.kind === e.kind);
        if (found === undefined) missing.push(`${e.pointer} (${e.kind}): not shown`);
        else if (e.fields !== undefined && JSON.stringify(found.fields) !== JSON.stringify(e.fields)) missing.push(`${e.pointer}: shows ${found.fields.join(', ')} for ${e.fields.join(', ')}`);
        else if (e.alternatives !== undefined && found.alternatives !== e.alternatives) missing.push(`${e.pointer}: shows ${found.alternatives} of ${e.alternatives} alternatives`);
      }
      for (const e of expectedInOp) {
        if (!shown.some((s) => s.op === e.op && s.pointer === e.pointer && s.kind === e.kind)) missing.push(`${e.op}: its body's ${e.pointer} (${e.kind}) is not shown`);
      }
      assert.deepEqual(missing, [], 'every schema shown as its fields');
      // and what a reader looks for: a turn's content, part by part
      const turn = await browser.evaluate(`document.getElementById('schema-Turn').innerText`);
      for (const words of ['tool_call', 'toolCallId', 'arguments', 'mediaType', 'The text of the turn']) assert.ok(turn.includes(words), `Turn shows ${words}`);
      assert.deepEqual(problems, []);
    } finally {
      await browser.close();
    }
  });
});

/** In the page: fills the token and the form of `operationId` (`values`: input id suffix -> value, or an array for a repeated parameter), clicks Send, and resolves the answer. */
async function send(browser, token, operationId, values = {}) {
  return browser.evaluate(`(async () => {
    const input = document.getElementById('token');
    input.value = ${JSON.stringify(token)};
    input.dispatchEvent(new Event('input'));
    const form = document.querySelector('form.try[data-operation-id="${operationId}"]');
    for (const [name, value] of Object.entries(${JSON.stringify(values)})) {
      const field = form.querySelector('input[name="' + name + '"]').closest('.field');
      const wanted = [].concat(value);
      while (field.querySelectorAll('input').length < wanted.length) field.querySelector('button.more').click();
      field.querySelectorAll('input').forEach((box, i) => { box.value = wanted[i]; });
    }
    const answer = form.querySelector('.answer');
    const before = answer.textContent;
    const done = new Promise((resolve) => {
      const seen = () => (form.dataset.state === 'answered' || form.dataset.state === 'failed') && answer.textContent !== before;
      new MutationObserver(() => seen() && resolve()).observe(form, { attributes: true, subtree: true, childList: true, characterData: true });
    });
    form.querySelector('button[type=submit]').click();
    await done;
    const text = answer.textContent;
    return { status: answer.dataset.status, text, body: text.includes('\\n\\n') ? JSON.parse(text.slice(text.indexOf('\\n\\n') + 2)) : null, firstLine: text.split('\\n')[0] };
  })()`);
}

describe('The try-it forms (issue 31, item 10)', () => {
  test('[D-openapi-6] every try-it form with a body starts with its example, and Send works as it opens', async (t) => {
    if (!chromiumOrSkip(t)) return;
    const browser = await Browser.launch();
    try {
      const problems = await openDocs(browser);
      const bodies = await browser.evaluate(`Object.fromEntries([...document.querySelectorAll('form.try')].filter((f) => f.querySelector('textarea')).map((f) => [f.dataset.operationId, f.querySelector('textarea').value]))`);
      const withBody = [];
      for (const item of Object.values(doc.paths)) for (const op of Object.values(item)) if (op.requestBody !== undefined) withBody.push(op);
      assert.deepEqual(Object.keys(bodies).sort(), withBody.map((op) => op.operationId).sort(), 'a body box on every form whose route takes a body');
      for (const op of withBody) {
        const schema = doc.components.schemas[op.requestBody.content['application/json'].schema.$ref.split('/').at(-1)];
        assert.ok(Array.isArray(schema.examples) && schema.examples.length === 1, `${op.operationId}: the body schema has its example`);
        assert.deepEqual(JSON.parse(bodies[op.operationId]), schema.examples[0], `${op.operationId} starts with its example`);
        assert.notDeepEqual(schema.examples[0], {}, `${op.operationId}: an example that does something`);
      }
      const minted = runCli(['token', '--sub', 'docs-examples'], { env: { AUTH_SECRET: SECRET } });
      const token = minted.stdout.trim();
      const created = await send(browser, token, 'createChatSession');
      assert.equal(created.status, '201', created.text);
      const id = created.body.data._id;
      const updated = await send(browser, token, 'updateChatSession', { id });
      assert.equal(updated.status, '200', updated.text);
      const turn = await send(browser, token, 'createTurn', { id });
      assert.equal(turn.status, '201', turn.text);
      // a delta goes to a streaming turn: one is recorded beside the form's
      const streaming = (await server.as('docs-examples').post(`/api/v1/chat-sessions/${id}/turns`, { role: 'assistant', content: 'So far', status: 'streaming' })).body.data;
      const delta = await send(browser, token, 'appendTurnDelta', { id, turnId: streaming._id });
      assert.equal(delta.status, '200', delta.text);
      const finished = await send(browser, token, 'updateTurn', { id, turnId: streaming._id });
      assert.equal(finished.status, '200', finished.text);
      assert.equal(finished.body.data.status, 'complete');
      const fork = await send(browser, token, 'forkChatSession', { id });
      assert.equal(fork.status, '201', fork.text);
      assert.deepEqual(problems, []);
    } finally {
      await browser.close();
    }
  });

  test('[D-openapi-6] a repeatable parameter (tag) gets a box per value and a + button; Send gives each', async (t) => {
    if (!chromiumOrSkip(t)) return;
    const who = server.as('docs-tags');
    await who.post('/api/v1/chat-sessions', { projectId: 'p', providerId: 'x', selectedModel: 'm', name: 'both', tags: ['red', 'blue'] });
    await who.post('/api/v1/chat-sessions', { projectId: 'p', providerId: 'x', selectedModel: 'm', name: 'red only', tags: ['red'] });
    const browser = await Browser.launch();
    try {
      const problems = await openDocs(browser);
      const repeatable = await browser.evaluate(`[...document.querySelectorAll('form.try button.more')].map((b) => b.closest('form').dataset.operationId + ' ' + b.dataset.param)`);
      const expected = [];
      for (const item of Object.values(doc.paths)) for (const op of Object.values(item)) for (const p of op.parameters ?? []) if (p.schema?.type === 'array') expected.push(`${op.operationId} ${p.name}`);
      assert.ok(expected.includes('listChatSessions tag'));
      assert.deepEqual(repeatable.sort(), expected.sort(), 'every repeated parameter, and only those, can take more values');
      const token = runCli(['token', '--sub', 'docs-tags'], { env: { AUTH_SECRET: SECRET } }).stdout.trim();
      const both = await send(browser, token, 'listChatSessions', { tag: ['red', 'blue'] });
      assert.equal(both.firstLine, 'GET /api/v1/chat-sessions?tag=red&tag=blue');
      assert.equal(both.status, '200', both.text);
      assert.deepEqual(both.body.data.map((x) => x.name), ['both']);
      const one = await send(browser, token, 'listChatSessions', { tag: ['red', ''] });
      assert.equal(one.firstLine, 'GET /api/v1/chat-sessions?tag=red', 'an empty box is no value');
      assert.deepEqual(one.body.data.map((x) => x.name).sort(), ['both', 'red only']);
      assert.deepEqual(problems, []);
    } finally {
      await browser.close();
    }
  });

  test('[D-openapi-7] on a narrow screen every path that wraps does so right after a slash', async (t) => {
    if (!chromiumOrSkip(t)) return;
    const browser = await Browser.launch();
    try {
      await browser.send('Emulation.setDeviceMetricsOverride', { width: 320, height: 800, deviceScaleFactor: 1, mobile: false });
      const problems = await openDocs(browser);
      // for every path on the page: the characters that begin a new line, and the one before each
      const breaks = await browser.evaluate(`[...document.querySelectorAll('h3 .path, nav .path')].map((el) => {
        const chars = [];
        const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
          for (let i = 0; i < node.data.length; i++) {
            const range = document.createRange();
            range.setStart(node, i);
            range.setEnd(node, i + 1);
            const rect = range.getClientRects()[0];
            if (rect) chars.push({ c: node.data[i], top: rect.top });
          }
        }
        const lines = [];
        for (let i = 1; i < chars.length; i++) if (chars[i].top > chars[i - 1].top + 2) lines.push(chars[i - 1].c + '|' + chars[i].c);
        return { path: el.textContent, where: el.closest('nav') ? 'nav' : 'heading', breaks: lines };
      })`);
      assert.ok(breaks.length >= 2 * Object.keys(doc.paths).length - 2, 'paths in the headings and the menu');
      const wrapped = breaks.filter((b) => b.breaks.length > 0);
      assert.ok(wrapped.length >= 5, `at 320 px some paths wrap (${wrapped.length} did)`);
      const bad = wrapped.filter((b) => b.breaks.some((x) => !x.startsWith('/|')));
      assert.deepEqual(bad, [], 'every break is right after a slash');
      assert.deepEqual(problems, []);
    } finally {
      await browser.close();
    }
  });
});

describe('The OpenAPI document', () => {
  const schemaOf = (path, method) => {
    const ref = doc.paths[path][method].requestBody.content['application/json'].schema.$ref;
    return doc.components.schemas[ref.replace('#/components/schemas/', '')];
  };

  test('[D-openapi-1] a body with a required field is required: true; an update body may be left out', async () => {
    assert.equal(doc.paths['/api/v1/chat-sessions'].post.requestBody.required, true);
    assert.equal(doc.paths['/api/v1/chat-sessions/{id}/turns'].post.requestBody.required, true);
    assert.equal(doc.paths['/api/v1/chat-sessions/{id}'].put.requestBody.required, false);
    for (const item of Object.values(doc.paths)) {
      for (const op of Object.values(item)) {
        if (op.requestBody === undefined) continue;
        const ref = op.requestBody.content['application/json'].schema.$ref;
        const schema = doc.components.schemas[ref.replace('#/components/schemas/', '')];
        assert.equal(op.requestBody.required, (schema.required ?? []).length > 0, op.operationId);
      }
    }
    // and it is true: the update answers an empty body, the create refuses it
    const u = server.as('alice');
    const s = (await u.post('/api/v1/chat-sessions', { projectId: 'p', providerId: 'x', selectedModel: 'm' })).body.data;
    assert.equal((await server.request('PUT', `/api/v1/chat-sessions/${s._id}`, { token: u.token })).status, 200);
    assert.equal((await server.request('POST', '/api/v1/chat-sessions', { token: u.token })).status, 400);
  });

  test('[D-openapi-2] a string refused when blank has minLength: 1 and a pattern that wants a non-space', async () => {
    const create = schemaOf('/api/v1/chat-sessions', 'post');
    for (const f of ['projectId', 'providerId', 'selectedModel']) {
      assert.equal(create.properties[f].minLength, 1, f);
      assert.equal(create.properties[f].pattern, '\\S', f);
    }
    assert.equal(create.properties.name.minLength, undefined, 'name may be empty');
    const update = schemaOf('/api/v1/chat-sessions/{id}', 'put');
    for (const f of ['provider', 'selectedModel']) assert.equal(update.properties[f].minLength, 1, f);
    assert.equal(update.properties.name.minLength, undefined);
    // a turn created streaming may start blank (a reply that has said nothing yet): the description says so
    const turn = schemaOf('/api/v1/chat-sessions/{id}/turns', 'post');
    assert.equal(turn.properties.content.oneOf[0].minLength, undefined, 'content: a string, blank only when created streaming');
    assert.match(turn.properties.content.oneOf[0].description, /"" only for a turn created streaming/);
    const message = schemaOf('/api/v1/chat-sessions/{id}/messages', 'post');
    assert.ok(message.required.includes('content'));
    const id = doc.paths['/api/v1/chat-sessions/{id}'].get.parameters.find((p) => p.name === 'id');
    assert.deepEqual(id.schema, { type: 'string', minLength: 1, pattern: '\\S' });
    // and the server does refuse what the pattern refuses
    const u = server.as('alice');
    const blank = await u.post('/api/v1/chat-sessions', { projectId: ' \t', providerId: 'x', selectedModel: 'm' });
    assert.equal(blank.status, 400);
    assert.equal(new RegExp(create.properties.projectId.pattern, 'u').test(' \t'), false);
  });

  test('[D-openapi-3] on create, the mode enum lists "" beside the member names', async () => {
    const create = schemaOf('/api/v1/chat-sessions', 'post');
    assert.deepEqual(create.properties.mode.enum, ['Build', 'Plan', 'Ask', '']);
    assert.match(create.properties.mode.description, /Build, Plan, Ask/);
    const update = schemaOf('/api/v1/chat-sessions/{id}', 'put');
    assert.deepEqual(update.properties.mode.enum, ['Build', 'Plan', 'Ask']);
    const u = server.as('alice');
    const r = await u.post('/api/v1/chat-sessions', { projectId: 'p', providerId: 'x', selectedModel: 'm', mode: '' });
    assert.equal(r.status, 201);
    assert.equal(r.body.data.mode, 'Build');
    const s = r.body.data;
    assert.equal((await u.put(`/api/v1/chat-sessions/${s._id}`, { mode: '' })).status, 400);
  });
});

describe('The quick start and a streamed reply in the page (issue 45, item 6)', () => {
  const LOCAL = '6f0000000000000000000001';
  let local;
  let provider;
  before(async () => {
    provider = await startProvider();
    local = await startServer({ providers: [{ _id: LOCAL, name: 'Local', type: 'openai', baseUrl: `${provider.url}/v1`, apiKey: 'sk-test-0123456789abcdef0123' }] });
  });
  after(async () => {
    await local?.stop();
    await provider?.close();
    if (local !== undefined) removeDir(local.dataDir);
  });

  test('[D-papercuts-5] "/docs opens with a quick start" and a table of contents; its commands and code run as shown', async (t) => {
    if (!chromiumOrSkip(t)) return;
    const browser = await Browser.launch();
    let shown;
    try {
      await browser.send('Emulation.setDeviceMetricsOverride', { width: 1280, height: 800, deviceScaleFactor: 1, mobile: false });
      const problems = await openDocs(browser, local);
      shown = await browser.evaluate(`(() => {
        const quick = document.getElementById('quick-start');
        const toc = document.getElementById('contents');
        const before = (a, b) => (a.compareDocumentPosition(b) & Node.DOCUMENT_POSITION_FOLLOWING) !== 0;
        return {
          order: before(quick, toc) && before(toc, document.querySelector('nav')) && before(toc, document.querySelector('section.op')),
          top: quick.getBoundingClientRect().top,
          snippets: [...document.querySelectorAll('#quick-start pre')].map((p) => p.textContent),
          links: [...toc.querySelectorAll('a')].map((a) => ({ text: a.textContent, there: document.getElementById(a.getAttribute('href').slice(1)) !== null })),
          quickLinks: [...document.querySelectorAll('#quick-start a')].map((a) => document.getElementById(a.getAttribute('href').slice(1)) !== null),
        };
      })()`);
      assert.equal(shown.order, true, 'the quick start, then the contents, before the menu and any operation');
      assert.ok(shown.top < 800, `the quick start is on the first screen (${shown.top} px down)`);
      const tags = [...new Set([...(doc.tags ?? []).map((x) => x.name), ...Object.values(doc.paths).flatMap((item) => Object.values(item).flatMap((op) => op.tags ?? ['Other']))])];
      assert.deepEqual(shown.links.map((l) => l.text), ['Quick start', ...tags, 'Schemas']);
      assert.ok(shown.links.every((l) => l.there), 'every entry of the contents leads somewhere');
      assert.ok(shown.quickLinks.length >= 3 && shown.quickLinks.every(Boolean), 'the quick start links the forms it names');
      assert.equal(shown.snippets.length, 4, 'a token, a session, a message, the openai SDK');
      assert.deepEqual(problems, []);
    } finally {
      await browser.close();
    }
    // the commands as shown, the placeholders filled in as the reader would
    const token = runCli(['token', '--sub', 'quick'], { env: { AUTH_SECRET: SECRET } }).stdout.trim();
    // run without blocking this process: the local provider answers from it
    const run = (file, args) =>
      new Promise((resolve) => {
        execFile(file, args, { env: { PATH: process.env.PATH, TOKEN: token }, encoding: 'utf8', timeout: 60_000 }, (err, stdout, stderr) => resolve({ status: err === null ? 0 : (err.code ?? 1), stdout, stderr }));
      });
    const bash = (script) => run('bash', ['--noprofile', '--norc', '-c', script]);
    assert.equal(shown.snippets[0], 'TOKEN=$(node dist/server.js token --sub alice)');
    const created = await bash(shown.snippets[1].replace('<provider _id>', LOCAL).replace('<model>', 'say:Hello%20from%20the%20quick%20start.'));
    assert.equal(created.status, 0, created.stderr);
    const session = JSON.parse(created.stdout).data;
    assert.equal(session.provider, LOCAL);
    const streamed = await bash(shown.snippets[2].replace('<session _id>', session._id));
    assert.equal(streamed.status, 0, streamed.stderr);
    assert.match(streamed.stdout, /event: turn\.delta\n/);
    assert.match(streamed.stdout, /"content":"Hello from the quick start\.".*"status":"complete"/);
    // the openai SDK's lines, run by Node with the real SDK
    const dir = mkdtempSync(join(tmpdir(), 'csa-quick-start-'));
    try {
      symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'));
      writeFileSync(join(dir, 'quick.mjs'), shown.snippets[3].replace('<slug>/<model>', 'local/say:Five%20words%20from%20the%20SDK.'));
      const r = await run(process.execPath, [join(dir, 'quick.mjs')]);
      assert.equal(r.status, 0, r.stderr);
      assert.equal(r.stdout, 'Five words from the SDK.');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('[D-papercuts-5] "the try-it form of .../messages can stream": it shows the reply\'s pieces as they come', async (t) => {
    if (!chromiumOrSkip(t)) return;
    const who = local.as('streamer');
    // two pieces, then the provider holds the rest until the test lets it go
    const s = (await who.post('/api/v1/chat-sessions', { projectId: 'p', providerId: LOCAL, selectedModel: 'reasoning:2+say:One%20two%20three%20four.+hold-after:4' })).body.data;
    const browser = await Browser.launch();
    try {
      const problems = await openDocs(browser, local);
      const streamable = await browser.evaluate(`[...document.querySelectorAll('form.try input[name=stream]')].map((b) => b.closest('form').dataset.operationId).sort()`);
      assert.deepEqual(streamable, ['askReply', 'sendMessage'], 'the routes that answer JSON or, when asked, a stream');
      await browser.evaluate(`(() => {
        const input = document.getElementById('token');
        input.value = ${JSON.stringify(who.token)};
        input.dispatchEvent(new Event('input'));
        const form = document.querySelector('form.try[data-operation-id="sendMessage"]');
        form.querySelector('input[name="id"]').value = ${JSON.stringify(s._id)};
        form.querySelector('input[name="stream"]').checked = true;
        form.querySelector('button[type=submit]').click();
      })()`);
      const until = (condition) => browser.evaluate(`new Promise((resolve) => {
        const form = document.querySelector('form.try[data-operation-id="sendMessage"]');
        const pieces = form.querySelector('.pieces');
        const check = () => {
          if (${condition}) {
            resolve({ state: form.dataset.state, pieces: pieces.textContent, answer: form.querySelector('.answer').textContent });
            return true;
          }
          return false;
        };
        if (!check()) new MutationObserver((_, o) => check() && o.disconnect()).observe(form, { attributes: true, subtree: true, childList: true, characterData: true });
      })`);
      // the reasoning and the first two words are shown while the reply is still being written
      const partial = await until(`pieces.textContent.endsWith('One two')`);
      assert.equal(partial.state, 'streaming');
      assert.equal(partial.pieces, '(reasoning) Let me\nOne two');
      assert.match(partial.answer, /^POST \/api\/v1\/chat-sessions\/[0-9a-f]{24}\/messages\nHTTP 200 OK\ncontent-type: text\/event-stream/);
      provider.release();
      const done = await until(`form.dataset.state === 'answered'`);
      assert.equal(done.pieces, '(reasoning) Let me\nOne two three four.\n(complete)');
      assert.match(done.answer, /event: turn\.updated\n/);
      const turns = (await who.get(`/api/v1/chat-sessions/${s._id}/turns`)).body.data;
      assert.deepEqual(turns.map((x) => x.role), ['user', 'assistant']);
      assert.equal(turns[1].status, 'complete');
      assert.deepEqual(problems, []);
    } finally {
      await browser.close();
    }
  });
});
