// docs/TEAM-DECISIONS.md, HTTP behaviour and Running it: the JSON log (levels, request lines),
// and no token, secret or apiKey ever written anywhere.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { sleep, waitFor, dispose } from '../api-kit.mjs';
import { SECRET, SERVER, STORE, ServerProcess, failingWrite, newSession, removeDir, request, runCli, sign, startServer, storeEnv, tempDir } from '../helpers.mjs';

/** A port that was free a moment ago. */
function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

const quiet = new Set();
process.on('exit', () => {
  for (const c of quiet) c.kill('SIGKILL');
});

/**
 * Starts the server on a port chosen here, for log levels that do not print the "listening"
 * line the harness waits for; ready when /healthz answers.
 */
async function startOnFixedPort({ env = {}, providers } = {}) {
  const port = await freePort();
  const dataDir = tempDir();
  if (providers !== undefined) writeFileSync(join(dataDir, 'providers.json'), JSON.stringify(providers));
  const child = spawn(process.execPath, [SERVER], {
    cwd: dataDir,
    env: { PATH: process.env.PATH, HOME: process.env.HOME, PORT: String(port), HOST: '127.0.0.1', DATA_DIR: dataDir, AUTH_SECRET: SECRET, ...storeEnv(dataDir), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  quiet.add(child);
  child.on('exit', () => quiet.delete(child));
  const s = new ServerProcess(child, dataDir);
  s.port = port;
  s.url = `http://127.0.0.1:${port}`;
  const started = Date.now();
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`server exited: ${s.stderr}${s.stdout}`);
    try {
      if ((await request(s.url, 'GET', '/healthz', { keepAlive: false })).status === 200) return s;
    } catch {
      // not listening yet
    }
    if (Date.now() - started > 10_000) {
      child.kill('SIGKILL');
      throw new Error('server did not start');
    }
    await sleep(20);
  }
}

describe('Logs', () => {
  test('every stdout line is JSON with time, level and msg; nothing on stderr', async () => {
    const s = await startServer({ providers: null });
    try {
      const u = s.as('alice');
      const id = (await u.post('/api/v1/chat-sessions', newSession())).body.data._id;
      await u.get(`/api/v1/chat-sessions/${id}`);
      await u.get('/nope');
      await s.request('GET', '/api/v1/chat-sessions', { token: 'x.y.z' });
      s.child.kill('SIGHUP');
      await waitFor(() => s.logs().some((l) => l.msg === 'providers reloaded'), 'reload');
      await s.stop();
      const lines = s.stdout.split('\n');
      assert.equal(lines.pop(), '', 'ends with a newline');
      assert.ok(lines.length >= 8);
      for (const line of lines) {
        const l = JSON.parse(line);
        assert.equal(typeof l, 'object');
        assert.match(l.time, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/, line);
        assert.ok(['debug', 'info', 'warn', 'error'].includes(l.level), line);
        assert.equal(typeof l.msg, 'string', line);
        assert.notEqual(l.msg, '', line);
      }
      assert.equal(s.stderr, '');
    } finally {
      removeDir(s.dataDir);
    }
  });

  test('request lines carry reqId, method, route pattern, status, ms and user; a session id never appears in a request line', async () => {
    const s = await startServer();
    try {
      const u = s.as('alice');
      const ids = [];
      const sent = new Map(); // request id -> [method, route, status, user]
      let n = 0;
      const call = async (method, path, route, opts = {}, user = 'alice') => {
        const reqId = `req-${++n}`;
        const r = await s.request(method, path, { token: u.token, ...opts, headers: { 'x-request-id': reqId } });
        sent.set(reqId, [method, route, r.status, user]);
        return r;
      };
      for (let i = 0; i < 2; i++) ids.push((await call('POST', '/api/v1/chat-sessions', '/api/v1/chat-sessions', { json: newSession() })).body.data._id);
      await call('GET', `/api/v1/chat-sessions/${ids[0]}`, '/api/v1/chat-sessions/:id');
      await call('PUT', `/api/v1/chat-sessions/${ids[0]}`, '/api/v1/chat-sessions/:id', { json: { name: 'n' } });
      await call('POST', `/api/v1/chat-sessions/${ids[0]}/turns`, '/api/v1/chat-sessions/:id/turns', { json: { role: 'user', content: 'c' } });
      await call('GET', `/api/v1/chat-sessions/${ids[0]}/turns?limit=1`, '/api/v1/chat-sessions/:id/turns');
      await call('POST', `/api/v1/chat-sessions/${ids[1]}/archive`, '/api/v1/chat-sessions/:id/archive', { json: {} });
      await call('DELETE', `/api/v1/chat-sessions/${ids[1]}`, '/api/v1/chat-sessions/:id');
      await call('GET', `/api/v1/chat-sessions/${ids[1]}`, '/api/v1/chat-sessions/:id');
      await call('GET', '/api/v1/chat-sessions/eeeeeeeeeeeeeeeeeeeeeeee', '/api/v1/chat-sessions/:id');
      await call('GET', `/api/v1/chat-sessions/${ids[0]}`, '/api/v1/chat-sessions/:id', { token: 'bad.token.value' }, null);
      await call('GET', `/api/v1/providers/665f1c2a9b1e8a0012ab34c1`, '/api/v1/providers/:id');
      await call('GET', `/api/v1/chat-sessions?projectId=${ids[0]}`, '/api/v1/chat-sessions');
      await call('GET', `/api/v1/chat-sessions/${ids[0]}/nothing-here`, null, {}, null); // no route: never authenticated, so no user
      await waitFor(() => s.logs().filter((l) => l.msg === 'request').length >= n, 'the request lines');
      const lines = s.logs().filter((l) => l.msg === 'request');
      for (const [reqId, [method, route, status, user]] of sent) {
        const mine = lines.filter((l) => l.reqId === reqId);
        assert.equal(mine.length, 1, `${reqId}: one line per request`);
        const l = mine[0];
        assert.equal(l.level, 'info');
        assert.equal(l.method, method, reqId);
        assert.equal(l.route, route, reqId);
        assert.equal(l.status, status, reqId);
        assert.equal(typeof l.ms, 'number');
        assert.ok(l.ms >= 0 && l.ms < 10_000);
        assert.equal(l.user, user, reqId);
      }
      const text = s.stdout.split('\n').filter((x) => x.includes('"msg":"request"')).join('\n');
      for (const id of [...ids, 'eeeeeeeeeeeeeeeeeeeeeeee', '665f1c2a9b1e8a0012ab34c1']) assert.equal(text.includes(id), false, `${id} in a request line`);
    } finally {
      await dispose(s);
    }
  });

  test('request lines are written in place: escapes, non-ASCII and 200-character users exactly; HEAD logged as HEAD', async () => {
    const s = await startServer();
    try {
      const users = ['plain-user', 'quote"back\\slash', 'tab\there', 'ünïcødé-用户-🙂', 'x'.repeat(200), '\u0001'.repeat(200)];
      const sent = new Map(); // request id -> user
      let n = 0;
      for (const name of users) {
        const reqId = `esc-${++n}`;
        const r = await s.request('GET', '/api/v1/chat-sessions', { token: s.as(name).token, headers: { 'x-request-id': reqId } });
        assert.equal(r.status, 200);
        sent.set(reqId, name);
      }
      const head = await s.request('HEAD', '/api/v1/chat-sessions', { token: s.as('alice').token, headers: { 'x-request-id': 'head-1' } });
      assert.equal(head.status, 200);
      await waitFor(() => s.logs().filter((l) => l.msg === 'request' && (l.reqId.startsWith('esc-') || l.reqId === 'head-1')).length >= n + 1, 'the request lines');
      const lines = s.logs().filter((l) => l.msg === 'request');
      for (const [reqId, user] of sent) {
        const mine = lines.filter((l) => l.reqId === reqId);
        assert.equal(mine.length, 1, reqId);
        assert.equal(mine[0].user, user, reqId);
        assert.equal(mine[0].route, '/api/v1/chat-sessions');
        assert.equal(mine[0].status, 200);
      }
      const h = lines.find((l) => l.reqId === 'head-1');
      assert.equal(h.method, 'HEAD');
      assert.equal(h.route, '/api/v1/chat-sessions');
      assert.equal(h.user, 'alice');
    } finally {
      await dispose(s);
    }
  });

  test('nothing ever logs a token, a secret or an apiKey: a whole session of traffic leaves none, in any form', async () => {
    const rnd = () => randomBytes(12).toString('hex');
    const current = `current-secret-${rnd()}-${rnd()}`;
    const prev1 = `previous-one-${rnd()}-${rnd()}`;
    const prev2 = `previous-two-${rnd()}-${rnd()}`;
    const keys = {
      plain: `sk-live-${rnd()}`,
      slashy: `sk-proj/${rnd()}+${rnd()}==`,
      quoted: `sk-"quoted"\\${rnd()}`,
      nested: `nested-${rnd()}`,
      url: `urlpass${rnd()}`,
      query: `qkey${rnd()}`,
      reloaded: `sk-reloaded-${rnd()}`,
      badReload: `sk-bad-reload-${rnd()}`,
      badReload2: `sk-bad-reload2-${rnd()}`,
    };
    const providers = [
      { _id: 'dddddddddddddddddddddd01', name: 'Plain', apiKey: keys.plain },
      { _id: 'dddddddddddddddddddddd02', name: 'Slashy', apiKey: keys.slashy, note: `copied key ${keys.slashy}` },
      { _id: 'dddddddddddddddddddddd03', name: 'Quoted', apiKey: keys.quoted },
      { _id: 'dddddddddddddddddddddd04', name: 'Nested', config: { api_key: keys.nested, headers: { Authorization: `Bearer ${keys.nested}` } } },
      { _id: 'dddddddddddddddddddddd05', name: 'Url', baseUrl: `https://user:${keys.url}@proxy.example/v1?api_key=${keys.query}` },
    ];
    const s = await startServer({
      providers,
      env: {
        AUTH_SECRET: current,
        AUTH_PREVIOUS_SECRETS: `${prev1}, ${prev2}`,
        LOG_LEVEL: 'debug',
        CHAT_SESSION_API_FAULTS: failingWrite(3, 6),
      },
    });
    const tokens = [];
    const mint = (claims, secret, header) => {
      const t = sign(claims, { secret, ...(header ? { header } : {}) });
      tokens.push(t);
      return t;
    };
    try {
      const now = Math.floor(Date.now() / 1000);
      const alice = mint({ sub: 'alice', iat: now, exp: now + 600 }, current);
      const bob = mint({ sub: 'bob', exp: now + 600 }, prev1);
      const carol = mint({ sub: 'carol' }, prev2);
      const readOnly = mint({ sub: 'dave', scope: 'sessions:read' }, current);
      const bad = [
        mint({ sub: 'mallory', exp: now + 600 }, `wrong-secret-${rnd()}-${rnd()}`),
        mint({ sub: 'alice', exp: now - 3600 }, current), // expired, validly signed
        mint({ sub: 'alice', nbf: now + 3600 }, current),
        mint({ sub: '', exp: now + 600 }, current),
        mint({ sub: 'alice' }, current, { alg: 'none', typ: 'JWT' }),
        mint({ sub: 'alice' }, current, { alg: 'HS512', typ: 'JWT' }),
        mint({ sub: 'alice', aud: 'x' }, current).slice(0, -5),
      ];
      const call = (method, path, token, opts = {}) => s.request(method, path, { token, ...opts });
      const statuses = [];
      const note = (r) => statuses.push(r.status);
      // writes: the 3rd write fails (500), the 6th fsync (or commit) fails (500)
      const ids = [];
      for (const [i, t] of [alice, bob, carol, alice, bob, alice, carol].entries()) {
        const r = await call('POST', '/api/v1/chat-sessions', t, { json: newSession({ name: `s${i}` }) });
        note(r);
        if (r.status === 201) ids.push(r.body.data._id);
      }
      assert.ok(statuses.filter((x) => x === 500).length >= 2, `two injected failures: ${statuses}`);
      for (const id of ids) {
        note(await call('GET', `/api/v1/chat-sessions/${id}`, carol));
        note(await call('POST', `/api/v1/chat-sessions/${id}/turns`, bob, { json: { role: 'user', content: `token ${alice}` } }));
        note(await call('PUT', `/api/v1/chat-sessions/${id}`, readOnly, { json: { name: 'nope' } }));
        note(await call('GET', `/api/v1/chat-sessions/${id}/turns?limit=1`, alice));
      }
      for (const t of bad) {
        note(await call('GET', '/api/v1/chat-sessions', t));
        note(await call('GET', `/api/v1/chat-sessions?access_token=${encodeURIComponent(t)}`));
        note(await call('POST', '/api/v1/chat-sessions', t, { json: newSession() }));
      }
      note(await s.request('GET', '/api/v1/chat-sessions', { headers: { authorization: `Basic ${Buffer.from(`alice:${current}`).toString('base64')}` } }));
      note(await s.request('GET', '/api/v1/chat-sessions', { headers: { authorization: `Bearer ${alice} ${current}` } }));
      note(await s.request('GET', `/api/v1/chat-sessions/${alice}`, { token: alice }));
      note(await s.request('GET', `/no/such/${alice}`, { token: alice }));
      note(await s.request('POST', '/api/v1/chat-sessions', { token: alice, body: `{"projectId":"${alice}",`, headers: { 'content-type': 'application/json' } }));
      note(await s.request('POST', '/api/v1/chat-sessions', { token: alice, json: { projectId: 'p', providerId: keys.plain, selectedModel: 'm', mode: current } }));
      note(await call('GET', '/api/v1/providers', alice));
      for (const p of providers) note(await call('GET', `/api/v1/providers/${p._id}`, bob));
      note(await s.request('GET', '/metrics'));
      note(await s.request('GET', '/healthz'));
      assert.ok(statuses.includes(401) && statuses.includes(403) && statuses.includes(404) && statuses.includes(400) && statuses.includes(500), String(statuses));
      // a good reload with a new key, then bad ones holding keys
      const file = join(s.dataDir, 'providers.json');
      const reloads = () => s.logs().filter((l) => /^providers reload/.test(l.msg)).length;
      let seen = reloads();
      const hup = async () => {
        s.child.kill('SIGHUP');
        await waitFor(() => reloads() > seen, 'reload');
        seen = reloads();
      };
      writeFileSync(file, JSON.stringify([...providers, { _id: 'dddddddddddddddddddddd06', name: 'Reloaded', apiKey: keys.reloaded }]));
      await hup();
      note(await call('GET', '/api/v1/providers/dddddddddddddddddddddd06', alice));
      writeFileSync(file, `[{"_id":"dddddddddddddddddddddd07","name":"Bad","apiKey":"${keys.badReload}"}, {"apiKey":"${keys.badReload2}" oops}]`);
      await hup();
      writeFileSync(file, JSON.stringify([{ _id: 'dddddddddddddddddddddd08', name: '', apiKey: keys.badReload, other: keys.badReload2 }]));
      await hup();
      writeFileSync(file, JSON.stringify([{ _id: 'dddddddddddddddddddddd09', name: 'x', apiKey: keys.badReload }, { _id: 'dddddddddddddddddddddd09', name: 'y', apiKey: keys.badReload2 }]));
      await hup();
      assert.equal(s.logs().filter((l) => l.msg === 'providers reload failed; keeping the previous list').length, 3);
      assert.ok(s.logs().some((l) => l.msg === 'request failed' && l.level === 'error'), 'the 500s were logged');
      const { code } = await s.stop();
      assert.equal(code, 0);

      // start-up failures that involve secrets must not echo them either
      const short = `short-${rnd().slice(0, 8)}`;
      const failures = [
        runCli([], { env: { DATA_DIR: s.dataDir, PORT: '0', AUTH_SECRET: short } }),
        runCli([], { env: { DATA_DIR: s.dataDir, PORT: '0', AUTH_SECRET: current, AUTH_PREVIOUS_SECRETS: `${prev1},${short}` } }),
        runCli(['--auth-secret', short], { env: { DATA_DIR: s.dataDir, PORT: '0' } }),
      ];
      for (const f of failures) assert.notEqual(f.code, 0);
      const failureText = failures.map((f) => f.stdout + f.stderr).join('\n');
      assert.equal(failureText.includes(short), false, 'a rejected secret is not echoed');

      const everything = s.stdout + s.stderr + failureText;
      const forms = (x) => {
        const b = Buffer.from(x);
        return [x, JSON.stringify(x).slice(1, -1), b.toString('base64url'), b.toString('base64'), b.toString('hex'), encodeURIComponent(x)];
      };
      const needles = [];
      for (const t of tokens) needles.push(['token', t], ['token signature', t.split('.')[2] ?? t], ['token payload+signature', t.split('.').slice(1).join('.')]);
      for (const [name, x] of Object.entries({ current, prev1, prev2, short })) for (const f of forms(x)) needles.push([`secret ${name}`, f]);
      for (const [name, x] of Object.entries(keys)) for (const f of forms(x)) needles.push([`apiKey ${name}`, f]);
      const leaks = needles.filter(([, n]) => n.length >= 8 && everything.includes(n)).map(([what, n]) => `${what}: ${n}`);
      assert.deepEqual(leaks, [], 'leaked into the output');
      assert.ok(s.stdout.length > 2000, 'the server did log plenty');
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('LOG_LEVEL=warn drops request lines (and info lines) but keeps warnings and errors', async () => {
    const s = await startOnFixedPort({ env: { LOG_LEVEL: 'warn', CHAT_SESSION_API_FAULTS: failingWrite(2) } });
    try {
      const u = s.as('alice');
      assert.equal((await u.post('/api/v1/chat-sessions', newSession())).status, 201);
      assert.equal((await u.post('/api/v1/chat-sessions', newSession())).status, 500);
      for (let i = 0; i < 5; i++) await u.get('/api/v1/chat-sessions');
      await s.request('GET', '/api/v1/chat-sessions');
      assert.equal((await s.stop()).code, 0);
      const logs = s.logs();
      assert.ok(logs.every((l) => l.unparsed === undefined), 'every line is JSON');
      assert.deepEqual(logs.filter((l) => l.level === 'info' || l.level === 'debug'), []);
      assert.equal(logs.some((l) => l.msg === 'request'), false);
      assert.ok(logs.some((l) => l.level === 'warn' && /no providers file/.test(l.msg)), 'warnings still print');
      assert.ok(logs.some((l) => l.level === 'error' && l.msg === 'request failed'), 'errors still print');
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('[D-logs-2] log lines wait at most 20 ms, but an error is written at once: a SIGKILL after its 500 finds it', async () => {
    const s = await startOnFixedPort({ env: { CHAT_SESSION_API_FAULTS: failingWrite(2) } });
    try {
      const u = s.as('alice');
      assert.equal((await u.post('/api/v1/chat-sessions', newSession())).status, 201);
      assert.equal((await u.post('/api/v1/chat-sessions', newSession())).status, 500);
      const closed = new Promise((resolve) => s.child.once('close', resolve)); // stdout read to its end
      await s.kill();
      await closed;
      assert.ok(
        s.logs().some((l) => l.level === 'error' && l.msg === 'request failed'),
        'the error line was written before the answer',
      );
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });

  test('LOG_LEVEL=silent prints nothing at all (stdout and stderr), even for warnings, errors, reloads and shutdown', async () => {
    const s = await startOnFixedPort({ env: { LOG_LEVEL: 'silent', CHAT_SESSION_API_FAULTS: failingWrite(2) } });
    try {
      const u = s.as('alice');
      await u.post('/api/v1/chat-sessions', newSession());
      assert.equal((await u.post('/api/v1/chat-sessions', newSession())).status, 500);
      await u.get('/api/v1/chat-sessions');
      await s.request('GET', '/nope');
      writeFileSync(join(s.dataDir, 'providers.json'), '[{"_id":"bad"}]');
      s.child.kill('SIGHUP');
      await sleep(150);
      assert.equal((await s.request('GET', '/healthz')).status, 200);
      assert.equal((await s.stop()).code, 0);
      assert.equal(s.stdout, '');
      assert.equal(s.stderr, '');
    } finally {
      await s.stop();
      removeDir(s.dataDir);
    }
  });
});
