// Paging cursors: opaque to clients, signed so a forged or edited one is refused, and bound
// to the list they came from so one list's cursor cannot page another.
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import { ValidationError } from '../domain/schema.js';

const SIG_BYTES = 12;

export class CursorCodec {
  private readonly key: Buffer;

  constructor(secret: Buffer) {
    this.key = createHmac('sha256', secret).update('chat-session-api cursor v1').digest();
  }

  private sign(payload: string): Buffer {
    return createHmac('sha256', this.key).update(payload).digest().subarray(0, SIG_BYTES);
  }

  /** A cursor after the item with sort key `sortKey` and id `id` in the list named `list`. */
  encode(list: string, sortKey: string, id: string): string {
    const payload = Buffer.from(JSON.stringify([listTag(list), sortKey, id])).toString('base64url');
    return `${payload}.${this.sign(payload).toString('base64url')}`;
  }

  /** The [sortKey, id] a cursor holds; 400 when it is not ours or belongs to another list. */
  decode(list: string, cursor: string): [string, string] {
    const dot = cursor.indexOf('.');
    const payload = cursor.slice(0, dot);
    // compared as text: decoding first would let trailing characters ride along unnoticed
    const sig = Buffer.from(cursor.slice(dot + 1), 'latin1');
    const want = Buffer.from(this.sign(payload).toString('base64url'), 'latin1');
    if (dot <= 0 || sig.length !== want.length || !timingSafeEqual(sig, want)) throw new ValidationError('Invalid cursor');
    let parts: unknown;
    try {
      parts = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8'));
    } catch {
      throw new ValidationError('Invalid cursor');
    }
    if (!Array.isArray(parts) || parts.length !== 3 || !parts.every((p) => typeof p === 'string')) throw new ValidationError('Invalid cursor');
    if (parts[0] !== listTag(list)) throw new ValidationError('cursor belongs to another list or query');
    return [parts[1] as string, parts[2] as string];
  }
}

/** A short digest naming a list (its kind and filters) without revealing them. */
function listTag(list: string): string {
  return createHash('sha256').update(list).digest('base64url').slice(0, 11);
}
