// The close of a connection whose client may still be sending (an answer given before its
// request's body was read: 413, 401, 431, a bad Content-Length), done as nginx's lingering
// close: the answer, then the FIN; what the client still sends is read and dropped, at most
// LINGER_BYTES and LINGER_MS, and then the socket is closed. Closed at once, the kernel answers
// the unread bytes with a reset, and a client still writing its body can lose the answer to it
// (EPIPE, ECONNRESET instead of the 413).
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';

/** What a lingering close reads and drops at most before it closes anyway. */
export const LINGER_BYTES = 4 * 1024 * 1024;
/** How long a lingering close waits at most for the client to stop sending. */
export const LINGER_MS = 2_000;

/**
 * Half-closes `socket` (what was written goes first, then the FIN), then reads and drops what
 * `from` still brings, the socket's own bytes or the request's body, until it ends, LINGER_BYTES
 * or LINGER_MS, and closes the socket.
 */
export function closeLingering(socket: Socket, from: Socket | IncomingMessage): void {
  if (socket.destroyed) return;
  let read = 0;
  const close = (): void => {
    clearTimeout(timer);
    socket.destroy();
  };
  const timer = setTimeout(close, LINGER_MS);
  socket.once('close', () => clearTimeout(timer));
  from.on('data', (chunk: Buffer) => {
    read += chunk.length;
    if (read > LINGER_BYTES) close();
  });
  from.once('end', close);
  from.resume();
  socket.end();
}

/**
 * Has node:http close the connection of `req`, once its answer (which says `connection: close`)
 * is out, lingering when the request's body has not all come by then. node:http ends such a
 * connection with socket.destroySoon() (the FIN, then the socket destroyed once it is sent):
 * that one socket's is replaced.
 */
export function lingerAfterAnswer(req: IncomingMessage): void {
  const socket = req.socket;
  socket.destroySoon = (): void => {
    delete (socket as { destroySoon?: unknown }).destroySoon; // net.Socket's again, for anything after
    if (req.complete) socket.destroySoon();
    else closeLingering(socket, req);
  };
}
