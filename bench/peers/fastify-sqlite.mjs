// The benchmark's peer for the sqlite engine: an ordinary Fastify app on node:sqlite answering
// the two routes of the `get` and `create-64` scenarios with the same bodies and status codes,
// with the durability of ours (WAL, synchronous=FULL): each create its own commit, each GET a
// prepared SELECT. Env: BENCH_PEERS, PORT, HOST, AUTH_SECRET, SQLITE_FILE.
import { DatabaseSync } from 'node:sqlite';
import { JSON_TYPE, NOT_FOUND, UNAUTHORIZED, newSession, peerRequire, userOf } from './common.mjs';

const Fastify = peerRequire()('fastify');

const db = new DatabaseSync(process.env.SQLITE_FILE ?? 'peer.db');
db.exec(`PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;
  CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, owner TEXT NOT NULL, project TEXT NOT NULL, updated_at TEXT NOT NULL, json TEXT NOT NULL);
  CREATE INDEX IF NOT EXISTS sessions_by_owner ON sessions (owner, updated_at);
  CREATE INDEX IF NOT EXISTS sessions_by_project ON sessions (project, updated_at);`);
const insert = db.prepare('INSERT INTO sessions (id, owner, project, updated_at, json) VALUES (?, ?, ?, ?, ?) RETURNING json');
const select = db.prepare('SELECT json FROM sessions WHERE id = ?');

const app = Fastify({ logger: false });
app.get('/healthz', async () => ({ success: true, data: { status: 'ok' } }));

app.post('/api/v1/chat-sessions', async (req, reply) => {
  const user = userOf(req.headers.authorization);
  if (user === undefined) return reply.code(401).send(UNAUTHORIZED);
  const made = newSession(req.body, user);
  if (made.error !== undefined) return reply.code(400).send({ success: false, message: made.error });
  const s = made.session;
  const row = insert.get(s._id, s.user, s.project, s.updatedAt, JSON.stringify(s));
  return reply.code(201).type(JSON_TYPE).send(`{"success":true,"data":${row.json}}`);
});

app.get('/api/v1/chat-sessions/:id', async (req, reply) => {
  if (userOf(req.headers.authorization) === undefined) return reply.code(401).send(UNAUTHORIZED);
  const row = select.get(req.params.id);
  if (row === undefined) return reply.code(404).type(JSON_TYPE).send(NOT_FOUND);
  return reply.type(JSON_TYPE).send(`{"success":true,"data":${row.json}}`);
});

await app.listen({ port: Number(process.env.PORT ?? 3000), host: process.env.HOST ?? '127.0.0.1' });
const stop = () => app.close().then(() => db.close()).then(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
