// The script of GET /docs, inlined into the page by build.mjs: renders the OpenAPI document
// embedded beside it (a quick start and the contents first, then every operation, its
// parameters, body, answers and errors, and the schemas) and runs the try-it forms with the
// token pasted at the top; a form whose route can answer with an event stream can ask for one
// and shows the reply's pieces as they come. Browser JavaScript, no dependency; it loads
// nothing and talks only to the server that served it.
(function () {
  'use strict';
  const doc = JSON.parse(document.getElementById('openapi').textContent);
  const app = document.getElementById('app');
  const METHODS = ['get', 'put', 'post', 'delete', 'patch', 'head', 'options'];
  let token = '';

  /** An element with attributes (class, id, data-*, for, ...) and children: nodes, text, or arrays of them nested to any depth. */
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      else e.setAttribute(k, v === true ? '' : String(v));
    }
    // flattened all the way: a summary holds arrays of parts that hold arrays (one level made [object HTMLElement] of them)
    for (const c of children.flat(Infinity)) if (c !== undefined && c !== null && c !== false) e.append(c instanceof Node ? c : String(c));
    return e;
  }

  /** A description with its `code` spans shown as code. */
  const prose = (text) => (text || '').split('`').map((part, i) => (i % 2 === 1 ? el('code', null, part) : part));

  const refName = (ref) => ref.replace('#/components/schemas/', '');
  const resolve = (s) => (s && s.$ref !== undefined ? doc.components.schemas[refName(s.$ref)] || {} : s || {});
  /** The JSON pointer one or more steps below `base` (RFC 6901: ~ and / escaped), marking where a shown schema is in the document. */
  const down = (base, ...keys) => keys.reduce((p, k) => `${p}/${String(k).replace(/~/g, '~0').replace(/\//g, '~1')}`, base);
  const ALTERNATIVES = ['oneOf', 'anyOf'];

  /** One line saying what a schema allows: type, enum, const, lengths, pattern, range. Fields and alternatives are shown by schemaBlock. */
  function schemaSummary(schema) {
    if (!schema) return '';
    if (schema.$ref !== undefined) return el('a', { href: `#schema-${refName(schema.$ref)}`, class: 'ref' }, refName(schema.$ref));
    const key = ALTERNATIVES.find((k) => Array.isArray(schema[k]));
    if (key !== undefined && !schema.properties) {
      return el('span', null, key === 'oneOf' ? 'one of: ' : 'any of: ', schema[key].map((o, i) => [i > 0 ? ' | ' : '', o.title ? el('code', null, o.title) : schemaSummary(o)]));
    }
    const parts = [];
    if ('const' in schema) parts.push(`= ${JSON.stringify(schema.const)}`);
    else if (schema.enum) parts.push(`one of ${schema.enum.map((v) => JSON.stringify(v)).join(', ')}`);
    else if (schema.items !== undefined) return el('span', null, 'array of ', schemaSummary(schema.items), schema.maxItems !== undefined ? `, at most ${schema.maxItems}` : '');
    else if (schema.type !== undefined) parts.push([].concat(schema.type).join(' | '));
    else if (schema.properties) parts.push('object');
    else if (Array.isArray(schema.required)) return el('span', null, 'with ', schema.required.map((n, i) => [i > 0 ? ', ' : '', el('code', null, n)]));
    else parts.push('any JSON value');
    if (schema.format) parts.push(schema.format);
    if (schema.minLength !== undefined) parts.push(`at least ${schema.minLength} character${schema.minLength === 1 ? '' : 's'}`);
    if (schema.maxLength !== undefined) parts.push(`at most ${schema.maxLength} characters`);
    if (schema.pattern !== undefined) parts.push(schema.pattern === '\\S' ? 'not blank' : `matches ${schema.pattern}`);
    if (schema.minimum !== undefined || schema.maximum !== undefined) parts.push(`${schema.minimum ?? '…'} to ${schema.maximum ?? '…'}`);
    if (schema.maxProperties !== undefined) parts.push(`at most ${schema.maxProperties} keys`);
    const values = schema.additionalProperties;
    if (values && typeof values === 'object' && !schema.properties) return el('span', null, parts.join(', '), ', values: ', schemaSummary(values));
    return el('span', null, parts.join(', '));
  }

  /**
   * A schema shown in full below its summary: its fields as a table and its alternatives as a
   * list, nested as deep as they go, each marked with its JSON pointer (data-schema). A $ref is
   * shown once, under Schemas, and linked from its summary.
   */
  function schemaBlock(schema, pointer) {
    if (!schema || schema.$ref !== undefined) return [];
    const out = [];
    if (schema.properties) out.push(fieldsTable(schema, pointer));
    for (const key of ALTERNATIVES) if (Array.isArray(schema[key])) out.push(alternativesList(schema[key], key, pointer));
    if (schema.items !== undefined) out.push(schemaBlock(schema.items, down(pointer, 'items')));
    return out;
  }

  /** An object schema's fields: name (and whether required), type, meaning, and what each holds. */
  function fieldsTable(schema, pointer) {
    const required = new Set(schema.required || []);
    const rows = Object.entries(schema.properties).map(([name, p]) =>
      el(
        'tr',
        null,
        el('td', null, el('code', null, name), required.has(name) ? el('span', { class: 'req' }, ' required') : ''),
        el('td', null, schemaSummary(p)),
        el('td', null, prose(p.description), schemaBlock(p, down(pointer, 'properties', name))),
      ),
    );
    return el(
      'table',
      { class: 'props', 'data-schema': pointer, 'data-kind': 'properties' },
      el('thead', null, el('tr', null, el('th', null, 'field'), el('th', null, 'type'), el('th', null, 'meaning'))),
      el('tbody', null, rows),
    );
  }

  /** A oneOf or anyOf: each alternative with its title, what it is and its own fields. */
  function alternativesList(alternatives, key, pointer) {
    return el(
      'ul',
      { class: 'alternatives', 'data-schema': pointer, 'data-kind': key },
      alternatives.map((a, i) =>
        el(
          'li',
          null,
          el('span', { class: 'alt' }, key === 'oneOf' ? 'one of' : 'any of'),
          ' ',
          a.title ? [el('code', null, a.title), ': '] : '',
          a.properties ? '' : [schemaSummary(a), a.description ? '. ' : ''],
          prose(a.description),
          schemaBlock(a, down(pointer, key, i)),
        ),
      ),
    );
  }

  /** A schema as the page shows it: a referenced one in full (its fields under its own name), an inline one as its block. */
  function schemaShown(schema, pointer) {
    if (schema && schema.$ref !== undefined) return schemaBlock(resolve(schema), schema.$ref);
    return schemaBlock(schema, pointer);
  }

  /** A value of a schema's type that its checks accept, for a body with no example of its own. */
  function exampleValue(schema) {
    const p = resolve(schema);
    if (Array.isArray(p.examples) && p.examples.length > 0) return p.examples[0];
    if ('const' in p) return p.const;
    if (p.enum) return p.enum[0];
    if (Array.isArray(p.oneOf) || Array.isArray(p.anyOf)) return exampleValue((p.oneOf || p.anyOf)[0]);
    const type = [].concat(p.type)[0];
    if (type === 'object' || p.properties) {
      const o = {};
      for (const name of p.required || []) o[name] = exampleValue((p.properties || {})[name]);
      return o;
    }
    if (type === 'array') return (p.minItems || 0) > 0 ? [exampleValue(p.items)] : [];
    if (type === 'integer' || type === 'number') return p.minimum !== undefined ? p.minimum : 1;
    if (type === 'boolean') return true;
    if (type === 'null') return null;
    return 'example';
  }

  /** The try-it form's starting body: the schema's example (a body the route accepts), else its required fields with values they accept. */
  function exampleBody(schema) {
    return JSON.stringify(exampleValue(schema), null, 2);
  }

  /** A path that may wrap after a `/` and nowhere else: segments that do not break, a <wbr> after each slash. */
  function pathText(path) {
    const segments = path.split('/').map((seg, i, all) => (i < all.length - 1 ? `${seg}/` : seg)).filter((seg) => seg !== '');
    return el('span', { class: 'path' }, segments.map((seg, i) => [i > 0 ? el('wbr') : '', el('span', { class: 'seg' }, seg)]));
  }

  function operations() {
    const out = [];
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const method of METHODS) if (item[method]) out.push({ path, method, op: item[method] });
    }
    return out;
  }

  function parametersSection(op) {
    const params = op.parameters || [];
    if (params.length === 0) return el('p', { class: 'none' }, 'No parameters.');
    return el(
      'table',
      { class: 'params' },
      el('thead', null, el('tr', null, el('th', null, 'parameter'), el('th', null, 'in'), el('th', null, 'type'), el('th', null, 'meaning'))),
      el(
        'tbody',
        null,
        params.map((p) =>
          el(
            'tr',
            null,
            el('td', null, el('code', null, p.name), p.required ? el('span', { class: 'req' }, ' required') : ''),
            el('td', null, p.in),
            el('td', null, schemaSummary(p.schema)),
            el('td', null, prose(p.description)),
          ),
        ),
      ),
    );
  }

  function bodySection(op, pointer) {
    const rb = op.requestBody;
    if (!rb) return '';
    const [type, media] = Object.entries(rb.content)[0];
    return el(
      'div',
      { class: 'body' },
      el('h4', null, 'Request body ', el('span', { class: rb.required ? 'req' : 'opt' }, rb.required ? '(required)' : '(optional)'), ` ${type}: `, schemaSummary(media.schema)),
      schemaShown(media.schema, down(pointer, 'requestBody', 'content', type, 'schema')),
    );
  }

  function responsesSection(op, pointer) {
    const rows = Object.entries(op.responses).map(([status, r]) => {
      const [type, media] = Object.entries(r.content || {})[0] || [];
      // an object answered inline (the envelope) is its table; a reference or a plain type, its summary
      const inline = type && media.schema && media.schema.properties;
      return el(
        'tr',
        { class: Number(status) >= 400 ? 'error' : 'success' },
        el('td', null, el('code', null, status)),
        el('td', null, prose(r.description)),
        el('td', null, type ? [el('span', null, `${type} `, inline ? '' : schemaSummary(media.schema)), schemaBlock(media.schema, down(pointer, 'responses', status, 'content', type, 'schema'))] : ''),
      );
    });
    return el(
      'table',
      { class: 'responses' },
      el('thead', null, el('tr', null, el('th', null, 'status'), el('th', null, 'answer'), el('th', null, 'body'))),
      el('tbody', null, rows),
    );
  }

  /** The try-it form of one operation: its parameters, its body, Send, and the answer. */
  function tryIt(path, method, op) {
    const params = op.parameters || [];
    const inputs = params.map((p) => {
      const id = `in-${op.operationId}-${p.in}-${p.name}`;
      // a parameter given once per value (tag=a&tag=b) gets a box per value, and a button for one more
      const repeated = p.schema !== undefined && p.schema.type === 'array';
      const box = (n) =>
        el('input', {
          id: n === 0 ? id : `${id}-${n + 1}`,
          name: p.name,
          'data-in': p.in,
          placeholder: p.required ? 'required' : 'optional',
          autocomplete: 'off',
          'aria-label': n === 0 ? undefined : `${p.name} (${p.in}), value ${n + 1}`,
        });
      const boxes = el('div', { class: 'values' }, box(0));
      let more;
      if (repeated) {
        more = el('button', { type: 'button', class: 'more', 'data-param': p.name }, `+ another ${p.name}`);
        more.addEventListener('click', () => {
          const next = box(boxes.children.length);
          boxes.append(next);
          next.focus();
        });
      }
      return { p, label: el('label', { for: id }, `${p.name} (${p.in})`), boxes, more, values: () => [...boxes.querySelectorAll('input')].map((i) => i.value) };
    });
    const media = op.requestBody ? Object.values(op.requestBody.content)[0] : undefined;
    const body = media ? el('textarea', { name: 'body', rows: 6, spellcheck: 'false', 'aria-label': 'request body (JSON)' }) : undefined;
    if (body) body.value = exampleBody(media.schema);
    const answer = el('pre', { class: 'answer', 'aria-live': 'polite' });
    // a route that answers JSON or, when asked (Accept: text/event-stream), an event stream
    const types = Object.entries(op.responses).filter(([status]) => status.startsWith('2')).flatMap(([, r]) => Object.keys(r.content || {}));
    const canStream = types.includes('text/event-stream') && types.includes('application/json');
    const streamBox = canStream ? el('input', { type: 'checkbox', name: 'stream', id: `stream-${op.operationId}` }) : undefined;
    /** The reply's text as its pieces come (turn.delta), above the events themselves. */
    const pieces = el('output', { class: 'pieces', 'aria-live': 'polite' });
    const send = el('button', { type: 'submit' }, 'Send');
    const form = el(
      'form',
      { class: 'try', 'data-operation-id': op.operationId },
      el('h4', null, 'Try it'),
      inputs.map((i) => el('div', { class: 'field' }, i.label, el('div', null, i.boxes, i.more))),
      body ? el('div', { class: 'field' }, el('label', null, 'body (JSON)'), body) : '',
      streamBox ? el('div', { class: 'field' }, el('label', { for: streamBox.id }, 'stream the answer'), el('div', null, streamBox, ' ', el('code', null, 'Accept: text/event-stream'), ': the reply as it is written')) : '',
      send,
      pieces,
      answer,
    );
    /** Set while an event stream is shown: the Send button then stops it. */
    let stop;
    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      if (stop) {
        stop();
        return;
      }
      let url = path;
      const query = new URLSearchParams();
      const headers = {};
      for (const { p, values } of inputs) {
        for (const v of values()) {
          if (p.in === 'path') url = url.replace(`{${p.name}}`, encodeURIComponent(v));
          else if (v !== '' && p.in === 'query') query.append(p.name, v);
          else if (v !== '' && p.in === 'header') headers[p.name] = v;
        }
      }
      const q = query.toString();
      if (q !== '') url += `?${q}`;
      const needsToken = Array.isArray(op.security) && op.security.length > 0;
      if (needsToken && token !== '') headers.Authorization = `Bearer ${token}`;
      if (streamBox && streamBox.checked) headers.Accept = 'text/event-stream';
      pieces.textContent = '';
      const init = { method: method.toUpperCase(), headers, cache: 'no-store', credentials: 'omit' };
      if (body && body.value.trim() !== '') {
        headers['Content-Type'] = 'application/json';
        init.body = body.value;
      }
      answer.textContent = `${init.method} ${url} …`;
      form.dataset.state = 'sending';
      send.disabled = true;
      const controller = new AbortController();
      init.signal = controller.signal;
      try {
        const res = await fetch(url, init);
        if ((res.headers.get('content-type') || '').startsWith('text/event-stream') && res.body) {
          // an event stream never ends by itself: shown as its events come, until Stop
          const head = `${init.method} ${url}\nHTTP ${res.status} ${res.statusText}\ncontent-type: ${res.headers.get('content-type')}\n\n`;
          answer.textContent = head;
          answer.dataset.status = String(res.status);
          form.dataset.state = 'streaming';
          send.disabled = false;
          send.textContent = 'Stop';
          stop = () => controller.abort();
          const reader = res.body.getReader();
          const decoder = new TextDecoder();
          const reply = replyPieces(pieces);
          let shown = '';
          try {
            for (;;) {
              const { value, done } = await reader.read();
              if (done) break;
              const text = decoder.decode(value, { stream: true });
              reply.add(text);
              shown = (shown + text).slice(-20000);
              answer.textContent = head + shown;
            }
          } catch {
            // stopped
          }
          stop = undefined;
          send.textContent = 'Send';
          form.dataset.state = 'answered';
          return;
        }
        const text = await res.text();
        let shown = text;
        try {
          if ((res.headers.get('content-type') || '').startsWith('application/json')) shown = JSON.stringify(JSON.parse(text), null, 2);
        } catch {
          // not JSON after all: shown as it came
        }
        const lines = [`${init.method} ${url}`, `HTTP ${res.status} ${res.statusText}`];
        for (const h of ['content-type', 'etag', 'x-request-id', 'retry-after', 'www-authenticate']) {
          const v = res.headers.get(h);
          if (v !== null) lines.push(`${h}: ${v}`);
        }
        answer.textContent = `${lines.join('\n')}\n\n${shown}`;
        answer.dataset.status = String(res.status);
        form.dataset.state = 'answered';
      } catch (e) {
        answer.textContent = `${init.method} ${url}\nno answer: ${e && e.message ? e.message : e}`;
        answer.dataset.status = 'failed';
        form.dataset.state = 'failed';
      } finally {
        send.disabled = false;
      }
    });
    return form;
  }

  /**
   * Reads an event stream's text as it comes and shows, in `out`, the text of the reply: the
   * turn.delta pieces of the turn whose turn.created has role assistant (a message's stream
   * opens with the user turn's turn.created first), reasoning apart from the answer.
   */
  function replyPieces(out) {
    let pending = '';
    let replyId;
    let reasoning = '';
    let text = '';
    let status = '';
    const show = () => {
      out.textContent = `${reasoning !== '' ? `(reasoning) ${reasoning}\n` : ''}${text}${status !== '' ? `\n(${status})` : ''}`;
    };
    return {
      add(chunk) {
        pending += chunk.replace(/\r\n?/g, '\n');
        for (let end = pending.indexOf('\n\n'); end !== -1; end = pending.indexOf('\n\n')) {
          const block = pending.slice(0, end);
          pending = pending.slice(end + 2);
          const event = /^event: ?(.*)$/m.exec(block);
          const data = /^data: ?(.*)$/m.exec(block);
          if (!event || !data) continue;
          let d;
          try {
            d = JSON.parse(data[1]);
          } catch {
            continue;
          }
          if (event[1] === 'turn.created' && d.role === 'assistant') replyId = d._id;
          else if (event[1] === 'turn.delta' && d._id === replyId) {
            if (d.type === 'reasoning') reasoning += d.text;
            else text += d.text;
          } else if (event[1] === 'turn.updated' && d._id === replyId) status = d.error ? `${d.status}: ${d.error.message}` : d.status;
          else continue;
          show();
        }
      },
    };
  }

  function operationSection({ path, method, op }) {
    const pointer = down('#/paths', path, method);
    const needsToken = Array.isArray(op.security) && op.security.length > 0;
    const scopes = needsToken ? op.security.flatMap((s) => Object.values(s).flat()) : [];
    return el(
      'section',
      { class: 'op', id: `op-${op.operationId}`, 'data-operation-id': op.operationId, 'data-method': method.toUpperCase(), 'data-path': path },
      el('h3', null, el('span', { class: `method ${method}` }, method.toUpperCase()), ' ', el('code', null, pathText(path))),
      el('p', { class: 'summary' }, prose(op.summary)),
      el('p', { class: 'auth' }, needsToken ? `Needs a Bearer token${scopes.length > 0 ? ` with the scope ${scopes.join(' ')}` : ''}.` : 'No token needed.'),
      el('h4', null, 'Parameters'),
      parametersSection(op),
      bodySection(op, pointer),
      el('h4', null, 'Answers and errors'),
      responsesSection(op, pointer),
      tryIt(path, method, op),
    );
  }

  /** A command or a few lines of code, shown to be copied. */
  const snippet = (text) => el('pre', { class: 'snippet' }, el('code', null, text));

  /** How to start: a token, a session, a message whose reply streams, and the same through the OpenAI door. */
  function quickStart() {
    const origin = location.origin;
    const steps = [
      el(
        'li',
        null,
        el('p', null, 'Mint a token on the server\'s machine (it lasts an hour; ', el('code', null, '--ttl 7d'), ' for longer), and paste it in the box above for the forms of this page:'),
        snippet('TOKEN=$(node dist/server.js token --sub alice)'),
      ),
      el(
        'li',
        null,
        el('p', null, 'Create a session on a provider (its ', el('code', null, '_id'), ' from ', el('a', { href: '#op-listProviders' }, 'GET /api/v1/providers'), ') and one of its models:'),
        snippet(`curl -s -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \\\n  -d '{"projectId":"demo","providerId":"<provider _id>","selectedModel":"<model>"}' \\\n  ${origin}/api/v1/chat-sessions`),
      ),
      el(
        'li',
        null,
        el('p', null, 'Send a message: the server asks the model and records its reply, which comes as it is written with ', el('code', null, 'Accept: text/event-stream'), ' (without it, the answer waits for the whole reply). ', el('a', { href: '#op-sendMessage' }, 'Its form'), ' below can stream too.'),
        snippet(`curl -sN -H "Authorization: Bearer $TOKEN" -H 'Accept: text/event-stream' -H 'Content-Type: application/json' \\\n  -d '{"content":"Say hello in five words."}' \\\n  ${origin}/api/v1/chat-sessions/<session _id>/messages`),
      ),
    ];
    if (doc.paths['/v1/chat/completions']) {
      steps.push(
        el(
          'li',
          null,
          el('p', null, 'Or the same with the ', el('code', null, 'openai'), ' SDK (', el('code', null, 'npm install openai'), '): the token is its API key, the model a ', el('code', null, '<slug>/<model>'), ' of ', el('a', { href: '#op-listModels' }, 'GET /v1/models'), ', and the conversation is recorded as a session:'),
          snippet(
            [
              "import OpenAI from 'openai';",
              `const client = new OpenAI({ baseURL: '${origin}/v1', apiKey: process.env.TOKEN });`,
              'const stream = await client.chat.completions.create({',
              "  model: '<slug>/<model>',",
              "  messages: [{ role: 'user', content: 'Say hello in five words.' }],",
              '  stream: true,',
              '});',
              "for await (const chunk of stream) process.stdout.write(chunk.choices[0]?.delta?.content ?? '');",
            ].join('\n'),
          ),
        ),
      );
    }
    return el('section', { id: 'quick-start', class: 'quick-start' }, el('h2', null, 'Quick start'), el('ol', null, steps));
  }

  /** The page's parts: the quick start, each group of operations, the schemas. */
  function contents(tags, ops) {
    const count = (t) => ops.filter(({ op }) => (op.tags || ['Other']).includes(t)).length;
    return el(
      'div',
      { class: 'toc', id: 'contents', role: 'navigation', 'aria-label': 'contents' },
      el('h2', null, 'Contents'),
      el(
        'ul',
        null,
        el('li', null, el('a', { href: '#quick-start' }, 'Quick start')),
        tags.map((t) => el('li', null, el('a', { href: `#${tagId(t)}` }, t), ` (${count(t)})`)),
        el('li', null, el('a', { href: '#schemas' }, 'Schemas'), ` (${Object.keys(doc.components.schemas).length})`),
      ),
    );
  }

  const tagId = (t) => `tag-${t.toLowerCase().replace(/[^a-z0-9]+/g, '-')}`;

  function render() {
    const ops = operations();
    const tags = (doc.tags || []).map((t) => t.name);
    for (const { op } of ops) for (const t of op.tags || ['Other']) if (!tags.includes(t)) tags.push(t);
    const tokenInput = el('input', { id: 'token', type: 'password', autocomplete: 'off', spellcheck: 'false', placeholder: 'paste a token' });
    tokenInput.addEventListener('input', () => {
      token = tokenInput.value.trim();
    });
    const scheme = doc.components && doc.components.securitySchemes && doc.components.securitySchemes.bearerAuth;
    app.replaceChildren(
      el(
        'header',
        null,
        el('h1', null, `${doc.info.title} `, el('small', null, doc.info.version)),
        el('p', null, doc.info.description || ''),
        el('p', null, 'The OpenAPI document itself: ', el('a', { href: '/api/v1/openapi.json' }, '/api/v1/openapi.json'), '.'),
        el(
          'div',
          { class: 'token' },
          el('label', { for: 'token' }, 'Token for the try-it forms '),
          tokenInput,
          el('p', { class: 'hint' }, scheme && scheme.description ? scheme.description : '', ' Mint one with ', el('code', null, 'node dist/server.js token --sub <user>'), '. It is kept in this page only and sent as Authorization: Bearer.'),
        ),
        quickStart(),
        contents(tags, ops),
      ),
      el(
        'nav',
        { 'aria-label': 'operations' },
        tags.map((t) =>
          el(
            'div',
            null,
            el('h2', null, t),
            el(
              'ul',
              null,
              ops.filter(({ op }) => (op.tags || ['Other']).includes(t)).map(({ path, method, op }) => el('li', null, el('a', { href: `#op-${op.operationId}` }, el('span', { class: `method ${method}` }, method.toUpperCase()), ' ', pathText(path)))),
            ),
          ),
        ),
      ),
      el(
        'main',
        null,
        tags.map((t) => el('div', { class: 'tag', id: tagId(t) }, el('h2', null, t), ops.filter(({ op }) => (op.tags || ['Other']).includes(t)).map(operationSection))),
        el(
          'div',
          { class: 'schemas', id: 'schemas' },
          el('h2', null, 'Schemas'),
          Object.entries(doc.components.schemas).map(([name, s]) =>
            el('section', { id: `schema-${name}`, class: 'schema' }, el('h3', null, name), s.description ? el('p', null, prose(s.description)) : '', schemaBlock(s, down('#/components/schemas', name))),
          ),
        ),
      ),
    );
    document.title = `${doc.info.title} ${doc.info.version}: API reference`;
    document.body.dataset.operations = String(ops.length);
    if (location.hash !== '') document.getElementById(decodeURIComponent(location.hash.slice(1)))?.scrollIntoView();
  }

  render();
})();
