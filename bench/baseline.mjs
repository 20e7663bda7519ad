// The baseline: a raw node:http server answering every request with the bytes
// `GET /api/v1/chat-sessions/:id` answers (same headers, a ~300-byte session body) and doing
// no other work. The real server is reported as a ratio of it, measured in the same run.
// `--raw` instead answers from plain node:net with pre-built bytes: the cheapest possible
// server, used to show how fast the load generator itself can go (GET requests only).
// `--create` is the floor of a create: node:http reading and parsing the JSON body, making
// the session object and answering 201 with it, and nothing else (no token, no validation,
// no store, no log); what the real server adds to a create is measured against it.
// Usage: PORT=N node bench/baseline.mjs [--raw | --create]
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import { createServer as createNetServer } from 'node:net';

const port = Number(process.env.PORT ?? 0);

const BODY = JSON.stringify({
  success: true,
  data: {
    _id: '673f6a2c5e1d2a9b7c4e8f01',
    name: 'Benchmark session',
    provider: '665f1c2a9b1e8a0012ab34c1',
    selectedModel: 'gpt-4o',
    mode: 'Build',
    user: 'bench-user-0',
    project: 'bench-project',
    createdAt: '2024-11-21T17:51:08.123Z',
    updatedAt: '2024-11-21T17:51:08.123Z',
    archived: false,
  },
});
const ETAG = '"Qm5jaG1hcmstdmVyc2lvbg"'; // the server's ETag: a quoted 22-character version digest
const JSON_TYPE = 'application/json; charset=utf-8';
// request ids made the way the server makes them (boot id + counter), so the bytes match
const bootId = randomBytes(4).toString('hex');
let counter = 0;
// the same as src/server.ts
const SERVER_OPTIONS = { keepAliveTimeout: 5_000, headersTimeout: 15_000, requestTimeout: 30_000, maxHeaderSize: 16 * 1024 };

/** Answers with the server's headers around `body`. */
function answer(res, status, body) {
  res.writeHead(status, [
    'content-type',
    JSON_TYPE,
    'cache-control',
    'no-store',
    'x-content-type-options',
    'nosniff',
    'x-request-id',
    `${bootId}-${(++counter).toString(36)}`,
    'content-length',
    String(Buffer.byteLength(body)),
    'etag',
    ETAG,
  ]);
  res.end(body);
}

let server;
if (process.argv.includes('--raw')) {
  const response = Buffer.from(
    `HTTP/1.1 200 OK\r\ncontent-type: ${JSON_TYPE}\r\ncache-control: no-store\r\nx-content-type-options: nosniff\r\n` +
      `x-request-id: ${bootId}-1\r\ncontent-length: ${Buffer.byteLength(BODY)}\r\netag: ${ETAG}\r\n` +
      `connection: keep-alive\r\nkeep-alive: timeout=5\r\n\r\n${BODY}`,
  );
  const END_OF_HEAD = Buffer.from('\r\n\r\n');
  server = createNetServer((socket) => {
    socket.setNoDelay(true);
    socket.on('data', (d) => {
      // GET requests arrive whole (one in flight per connection): count their blank lines
      let n = 0;
      for (let i = d.indexOf(END_OF_HEAD); i !== -1; i = d.indexOf(END_OF_HEAD, i + 4)) n++;
      for (let i = 0; i < n; i++) socket.write(response);
    });
    socket.on('error', () => undefined);
  });
} else if (process.argv.includes('--create')) {
  let seq = 0;
  server = createServer(SERVER_OPTIONS, (req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      let b = {};
      try {
        if (chunks.length > 0) b = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch {
        // answered like a good body: this server measures cost, not validation
      }
      const now = Date.now();
      const at = new Date(now).toISOString();
      const session = {
        _id: Math.floor(now / 1000).toString(16).padStart(8, '0') + (++seq).toString(16).padStart(16, '0'),
        name: b.name ?? '',
        provider: b.providerId,
        selectedModel: b.selectedModel,
        mode: b.mode ?? 'Build',
        user: 'bench-user',
        project: b.projectId,
        createdAt: at,
        updatedAt: at,
        archived: false,
      };
      answer(res, req.method === 'POST' ? 201 : 200, `{"success":true,"data":${JSON.stringify(session)}}`);
    });
  });
} else {
  server = createServer(SERVER_OPTIONS, (_req, res) => answer(res, 200, BODY));
}

server.listen(port, '127.0.0.1', () => {
  process.stdout.write(`${JSON.stringify({ msg: 'listening', port: server.address().port })}\n`);
});
process.on('SIGTERM', () => process.exit(0));
