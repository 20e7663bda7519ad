// The benchmark's peer for the PostgreSQL engine: an ordinary Fastify app on `pg` (a pg.Pool of
// 16) answering the two routes of the `get` and `create-64` scenarios with the same bodies and
// status codes: one INSERT ... RETURNING per create (committed on its own), one SELECT per GET.
// Env: BENCH_PEERS, PORT, HOST, AUTH_SECRET, DATABASE_URL, DATABASE_SCHEMA.
import { JSON_TYPE, NOT_FOUND, UNAUTHORIZED, newSession, peerRequire, userOf } from './common.mjs';

const require = peerRequire();
const Fastify = require('fastify');
const pg = require('pg');

const S = process.env.DATABASE_SCHEMA ?? 'peer';
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 16 });
// the table and the indexes an app answering the same lists (a user's, a project's) would keep
await pool.query(`CREATE SCHEMA IF NOT EXISTS ${S};
  CREATE TABLE IF NOT EXISTS ${S}.sessions (id text PRIMARY KEY, owner text NOT NULL, project text NOT NULL, updated_at text NOT NULL, json text NOT NULL);
  CREATE INDEX IF NOT EXISTS sessions_by_owner ON ${S}.sessions (owner, updated_at);
  CREATE INDEX IF NOT EXISTS sessions_by_project ON ${S}.sessions (project, updated_at);`);

const app = Fastify({ logger: false });
app.get('/healthz', async () => ({ success: true, data: { status: 'ok' } }));

app.post('/api/v1/chat-sessions', async (req, reply) => {
  const user = userOf(req.headers.authorization);
  if (user === undefined) return reply.code(401).send(UNAUTHORIZED);
  const made = newSession(req.body, user);
  if (made.error !== undefined) return reply.code(400).send({ success: false, message: made.error });
  const s = made.session;
  const { rows } = await pool.query(`INSERT INTO ${S}.sessions (id, owner, project, updated_at, json) VALUES ($1, $2, $3, $4, $5) RETURNING json`, [s._id, s.user, s.project, s.updatedAt, JSON.stringify(s)]);
  return reply.code(201).type(JSON_TYPE).send(`{"success":true,"data":${rows[0].json}}`);
});

app.get('/api/v1/chat-sessions/:id', async (req, reply) => {
  if (userOf(req.headers.authorization) === undefined) return reply.code(401).send(UNAUTHORIZED);
  const { rows } = await pool.query(`SELECT json FROM ${S}.sessions WHERE id = $1`, [req.params.id]);
  if (rows.length === 0) return reply.code(404).type(JSON_TYPE).send(NOT_FOUND);
  return reply.type(JSON_TYPE).send(`{"success":true,"data":${rows[0].json}}`);
});

await app.listen({ port: Number(process.env.PORT ?? 3000), host: process.env.HOST ?? '127.0.0.1' });
const stop = () => app.close().then(() => pool.end()).then(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
