// Request bodies: JSON objects only, in UTF-8, no larger than the configured limit, read
// within a deadline and out of a memory budget shared by every request (BODY_MEMORY), of which
// one user may hold a quarter, so slow or many bodies cannot make the server hold more than that.
import type { IncomingMessage } from 'node:http';
import { HttpError } from '../api/errors.js';
import { OverShare } from './in-flight.js';

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
 * The request body bytes the server holds, over all requests and by owner (a user, or an address
 * for requests without one). Bytes are taken as they arrive and given back when the request's
 * answer is sent (its parsed body lives until then). One owner may hold at most `perOwner` of
 * them, so that one user's slow uploads cannot take the budget every other user's writes need.
 */
export class BodyBudget {
  used = 0;
  private readonly byOwner = new Map<string, number>();
  /** A quarter of the budget, but never less than one body of the largest size. */
  readonly perOwner: number;

  constructor(
    readonly limit: number,
    bodyLimit: number,
  ) {
    this.perOwner = Math.max(bodyLimit, Math.floor(limit / 4));
  }

  /** Takes `n` bytes for `owner`: 'ok', or what refuses them ('busy': the budget; 'share': the owner's part of it). */
  take(owner: string | undefined, n: number): 'ok' | 'busy' | 'share' {
    if (this.used + n > this.limit) return 'busy';
    if (owner !== undefined) {
      const mine = (this.byOwner.get(owner) ?? 0) + n;
      if (mine > this.perOwner) return 'share';
      this.byOwner.set(owner, mine);
    }
    this.used += n;
    return 'ok';
  }

  give(owner: string | undefined, n: number): void {
    this.used -= n;
    if (owner === undefined) return;
    const mine = (this.byOwner.get(owner) ?? n) - n;
    if (mine <= 0) this.byOwner.delete(owner);
    else this.byOwner.set(owner, mine);
  }
}

/** What one request holds of the budget, and whose it is. */
export interface BodyHold {
  heldBytes: number;
  readonly owner: string | undefined;
}

export interface BodyRules {
  readonly limit: number;
  readonly budget: BodyBudget;
  readonly timeoutMs: number;
}

/** Gives back what `hold` took of the budget. */
export function releaseBody(budget: BodyBudget, hold: BodyHold): void {
  budget.give(hold.owner, hold.heldBytes);
  hold.heldBytes = 0;
}

/**
 * Reads and parses a JSON object body. An absent or empty body is `{}`. Errors:
 * 415 when a body is not declared as JSON, 413 past `limit` bytes, 503 when the budget is spent,
 * 429 when the owner's share of it is (OverShare), 408 when the body has not arrived within the
 * timeout (for these the connection is then closed rather than read to its end), 400 for bad
 * UTF-8 or JSON, or a non-object.
 * What the body takes of the budget is added to `hold`; the caller gives it back (releaseBody).
 */
export function readJsonObject(req: IncomingMessage, rules: BodyRules, hold: BodyHold): Promise<Record<string, unknown>> {
  const { limit, budget } = rules;
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
    const timer = setTimeout(() => {
      req.pause();
      finish(new HttpError(408, 'Request timeout', [], true));
    }, rules.timeoutMs);
    const finish = (err: HttpError | undefined, value?: Record<string, unknown>): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
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
      const taken = budget.take(hold.owner, chunk.length);
      if (taken !== 'ok') {
        req.pause();
        finish(taken === 'busy' ? new HttpError(503, 'Server is busy', [['retry-after', '1']], true) : new OverShare());
        return;
      }
      hold.heldBytes += chunk.length;
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
