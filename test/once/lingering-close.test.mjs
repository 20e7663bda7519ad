// [D-papercuts-4] An answer given before the request's body came (413, 401, 431, 400 on a bad
// Content-Length) closes as nginx's lingering close does: the answer, the FIN, then what the
// client still sends read and dropped (4 MiB or 2 s at most), then the close. A client writing a
// 1.5 MiB body, with Node's fetch or one write on a raw socket, reads its answer every time; closed
// at once, the server's kernel answers the unread body with a reset, which on a busy machine
// reached the client before the answer did (issue 45: EPIPE instead of the 413, 1 try in 40).
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { removeDir, startServer } from '../helpers.mjs';

const TRIES = 100;
const BODY = Buffer.alloc(1.5 * 1024 * 1024, 'x'); // over BODY_LIMIT (1 MiB)

let server;
let token;

before(async () => {
  server = await startServer();
  token = server.as('alice').token;
});
after(async () => {
  await server.stop();
  removeDir(server.dataDir);
});

/** Writes `head` and BODY in one write on a new connection: what came back, and the error the socket met, if any. */
function rawOnce(head) {
  return new Promise((resolve) => {
    const socket = connect(server.port, '127.0.0.1');
    const chunks = [];
    let error;
    socket.on('data', (d) => chunks.push(d));
    socket.on('error', (e) => (error = e.code ?? e.message));
    socket.on('close', () => resolve({ text: Buffer.concat(chunks).toString('latin1'), error }));
    socket.write(Buffer.concat([Buffer.from(head, 'latin1'), BODY]));
  });
}

const post = (headers) => `POST /api/v1/chat-sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${headers}\r\n`;

describe('[D-papercuts-4] "closes as nginx\'s lingering close does": an early answer reaches a client still writing its body', () => {
  const cases = [
    ['413, the declared length over BODY_LIMIT', () => post(`Authorization: Bearer ${token}\r\nContent-Length: ${BODY.length}\r\n`), 413],
    ['401 before the body', () => post(`Content-Length: ${BODY.length}\r\n`), 401],
    ['431, headers over 16 KiB', () => post(`Authorization: Bearer ${token}\r\nX-Pad: ${'p'.repeat(17_000)}\r\nContent-Length: ${BODY.length}\r\n`), 431],
    ['400 on a bad Content-Length', () => post(`Authorization: Bearer ${token}\r\nContent-Length: 1.5mb\r\n`), 400],
  ];
  for (const [name, head, status] of cases) {
    test(`[D-papercuts-4] a raw socket writing 1.5 MiB in one write, ${TRIES} times in a row: ${name}`, async () => {
      for (let i = 0; i < TRIES; i++) {
        const r = await rawOnce(head());
        assert.equal(r.error, undefined, `try ${i + 1}: the socket met ${r.error} (the answer: ${JSON.stringify(r.text.slice(0, 40))})`);
        assert.match(r.text, new RegExp(`^HTTP/1\\.1 ${status} `), `try ${i + 1}`);
        assert.match(r.text, /\r\nconnection: close\r\n/i, `try ${i + 1}`);
        assert.match(r.text, /\{"success":false,"message":"[^"]+"\}$/, `try ${i + 1}: the whole answer`);
      }
      assert.equal((await server.request('GET', '/healthz')).status, 200);
    });
  }

  test(`[D-papercuts-4] Node's fetch posting 1.5 MiB, ${TRIES} times in a row, with a token (413) and without (401)`, async () => {
    for (const [auth, status, message] of [[{ authorization: `Bearer ${token}` }, 413, 'Request body too large'], [{}, 401, 'Unauthorized']]) {
      for (let i = 0; i < TRIES; i++) {
        const r = await fetch(`${server.url}/api/v1/chat-sessions`, { method: 'POST', headers: { 'content-type': 'application/json', ...auth }, body: BODY });
        assert.equal(r.status, status, `try ${i + 1}`);
        assert.deepEqual(await r.json(), { success: false, message }, `try ${i + 1}`);
      }
    }
  });

  test('[D-papercuts-4] what lingers is bounded: past 4 MiB, or with a client dripping bytes, the server closes', async () => {
    // an endless body: the server reads 4 MiB of it at most, then closes (the client sees its answer or a reset, never a hang)
    const endless = await new Promise((resolve) => {
      const socket = connect(server.port, '127.0.0.1');
      let text = '';
      let sent = 0;
      socket.setEncoding('latin1');
      socket.on('data', (d) => (text += d));
      socket.on('error', () => undefined);
      socket.on('close', () => resolve({ text, sent }));
      socket.write(post(`Authorization: Bearer ${token}\r\nContent-Length: ${64 * 1024 * 1024}\r\n`));
      const chunk = Buffer.alloc(256 * 1024, 'x');
      const pump = () => {
        while (!socket.destroyed && sent < 64 * 1024 * 1024) {
          sent += chunk.length;
          if (!socket.write(chunk)) return socket.once('drain', pump);
        }
      };
      pump();
    });
    assert.ok(endless.sent < 64 * 1024 * 1024, 'closed before the client sent the whole body');
    // a client that keeps its side open and sends a byte now and then: the server reads them for
    // a while (LINGER_MS), then closes, and the next byte meets the closed connection
    const slow = await new Promise((resolve) => {
      const socket = connect({ port: server.port, host: '127.0.0.1', allowHalfOpen: true });
      let text = '';
      let ended = false;
      let error;
      let drip;
      socket.setEncoding('latin1');
      socket.on('data', (d) => (text += d));
      socket.on('end', () => {
        ended = true;
        drip = setInterval(() => socket.write('x'), 100);
      });
      socket.on('error', (e) => (error = e.code));
      socket.on('close', () => {
        clearInterval(drip);
        resolve({ text, ended, error });
      });
      socket.write(post(`Authorization: Bearer ${token}\r\nContent-Length: ${BODY.length}\r\n`));
    });
    assert.match(slow.text, /^HTTP\/1\.1 413 /);
    assert.equal(slow.ended, true, 'the answer came with the FIN (the half-close)');
    assert.match(slow.error, /^(EPIPE|ECONNRESET)$/, 'the server closed the connection in the end');
  });
});
