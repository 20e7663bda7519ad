// Request bodies: JSON objects only, in UTF-8, no larger than the configured limit.
import type { IncomingMessage } from 'node:http';
import { HttpError } from './errors.js';

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** True when the request says it carries a body (a non-zero length or chunked encoding). */
export function hasBody(req: IncomingMessage): boolean {
  const len = req.headers['content-length'];
  if (len !== undefined) return len !== '0';
  return req.headers['transfer-encoding'] !== undefined;
}

function isJsonContentType(value: string | undefined): boolean {
  if (value === undefined) return false;
  const [type, ...params] = value.split(';');
  if (type?.trim().toLowerCase() !== 'application/json') return false;
  for (const p of params) {
    const [k, v] = p.split('=');
    if (k?.trim().toLowerCase() === 'charset' && v?.trim().replace(/^"|"$/g, '').toLowerCase() !== 'utf-8') return false;
  }
  return true;
}

/**
 * Reads and parses a JSON object body. An absent or empty body is `{}`. Errors:
 * 415 when a body is not declared as JSON, 413 past `limit` bytes (the connection is then
 * closed rather than read to its end), 400 for bad UTF-8 or JSON, or a non-object.
 */
export function readJsonObject(req: IncomingMessage, limit: number): Promise<Record<string, unknown>> {
  if (!hasBody(req)) return Promise.resolve({});
  if (!isJsonContentType(req.headers['content-type'])) {
    return Promise.reject(new HttpError(415, 'Content-Type must be application/json', [], true));
  }
  const declared = Number(req.headers['content-length']);
  if (declared > limit) return Promise.reject(new HttpError(413, 'Request body too large', [], true));
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    const finish = (err: HttpError | undefined, value?: Record<string, unknown>): void => {
      if (done) return;
      done = true;
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      req.off('aborted', onAborted);
      if (err !== undefined) reject(err);
      else resolve(value ?? {});
    };
    const onData = (chunk: Buffer): void => {
      size += chunk.length;
      if (size > limit) {
        req.pause();
        finish(new HttpError(413, 'Request body too large', [], true));
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = (): void => {
      const buf = chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks, size);
      if (buf.length === 0) return finish(undefined, {});
      let value: unknown;
      try {
        value = JSON.parse(utf8.decode(buf));
      } catch {
        return finish(new HttpError(400, 'Invalid JSON body'));
      }
      if (typeof value !== 'object' || value === null || Array.isArray(value)) {
        return finish(new HttpError(400, 'Request body must be a JSON object'));
      }
      finish(undefined, value as Record<string, unknown>);
    };
    const onError = (): void => finish(new HttpError(400, 'Request body could not be read', [], true));
    const onAborted = (): void => finish(new HttpError(400, 'Request body could not be read', [], true));
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onError);
    req.on('aborted', onAborted);
  });
}
