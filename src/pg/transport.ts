// The byte stream under a connection: a TCP or unix socket, upgraded to TLS when sslmode
// asks for it (SSLRequest, then the TLS handshake on the same socket). verify-full checks
// the certificate chain against sslrootcert and the host name against the certificate.
import { readFile } from 'node:fs/promises';
import { connect as netConnect, isIP, type Socket } from 'node:net';
import { connect as tlsConnect, type TLSSocket } from 'node:tls';
import { PgError } from './errors.js';
import { SSL_REQUEST } from './frontend.js';
import { describeTarget, type ConnectionConfig } from './url.js';

export type Transport = Socket | TLSSocket;

function reason(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

async function readRootCert(path: string): Promise<Buffer> {
  try {
    return await readFile(path);
  } catch (err) {
    throw new PgError('config', `sslrootcert: cannot read ${path}: ${reason(err)}`);
  }
}

/** Errors of the socket under TLS that say the connection was cut, not that TLS failed. */
const NETWORK_ERRORS = new Set(['ECONNRESET', 'EPIPE', 'ECONNABORTED', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENETDOWN']);

/**
 * Opens the socket and, unless sslmode is disable (or the socket is a unix one), negotiates
 * TLS. Rejects with `connect_failed`, `tls_failed` or `protocol`; gives up after `timeoutMs`.
 */
export async function openTransport(config: ConnectionConfig, timeoutMs: number): Promise<Transport> {
  const useTls = config.sslmode !== 'disable' && config.socketPath === undefined;
  const ca = config.sslmode === 'verify-full' && config.sslrootcert !== undefined ? await readRootCert(config.sslrootcert) : undefined;
  const target = describeTarget(config);

  return new Promise<Transport>((resolve, reject) => {
    const socket = config.socketPath !== undefined ? netConnect(config.socketPath) : netConnect({ host: config.host, port: config.port });
    let current: Transport = socket;
    let settled = false;

    const finish = (err: PgError | undefined): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      // The listeners stay, as no-ops: until the connection adds its own (a microtask later)
      // an 'error' with no listener would be an uncaught exception.
      if (err === undefined) {
        resolve(current);
      } else {
        current.destroy();
        reject(err);
      }
    };
    const onError = (err: Error): void => {
      // during the handshake, a connection cut (a server restarting) is the network's, not TLS's: it may be tried again
      const cut = NETWORK_ERRORS.has((err as NodeJS.ErrnoException).code ?? '');
      const kind = current === socket || cut ? 'connect_failed' : 'tls_failed';
      finish(new PgError(kind, `cannot connect to ${target}: ${reason(err)}`));
    };
    const onClose = (): void => finish(new PgError('connect_failed', `cannot connect to ${target}: the connection closed`));
    const timer = setTimeout(() => finish(new PgError('connect_failed', `cannot connect to ${target}: timed out after ${timeoutMs} ms`)), timeoutMs);

    socket.on('error', onError);
    socket.on('close', onClose);
    socket.once('connect', () => {
      if (config.socketPath === undefined) {
        socket.setNoDelay(true);
        socket.setKeepAlive(true, 30_000);
      }
      if (!useTls) return finish(undefined);
      socket.write(SSL_REQUEST);
      socket.once('data', (answer: Buffer) => {
        // A byte past the answer would be plaintext injected before the handshake (CVE-2021-23214).
        if (answer.length !== 1) return finish(new PgError('protocol', `${target}: unexpected data after the SSLRequest answer`));
        if (answer[0] === 0x4e /* N */) return finish(new PgError('tls_failed', `${target}: the server does not accept TLS (sslmode=${config.sslmode})`));
        if (answer[0] !== 0x53 /* S */) return finish(new PgError('protocol', `${target}: unexpected answer to SSLRequest`));
        const verify = config.sslmode === 'verify-full';
        const secure = tlsConnect({
          socket,
          host: config.host,
          // SNI takes host names only; the certificate check still uses `host`
          ...(isIP(config.host) === 0 ? { servername: config.host } : {}),
          rejectUnauthorized: verify,
          ...(ca !== undefined ? { ca } : {}),
        });
        socket.removeListener('error', onError);
        socket.removeListener('close', onClose);
        socket.on('error', (err) => secure.destroy(err)); // the TLS socket reports it; never unhandled
        current = secure;
        secure.on('error', onError);
        secure.on('close', onClose);
        secure.once('secureConnect', () => finish(undefined));
      });
    });
  });
}
