// Tickets for browsers' EventSource, which cannot send an Authorization header: a token holder
// trades its token for a ticket (POST /api/v1/events/tickets) and opens an event stream with
// `?ticket=`. A ticket is sealed with AES-256-GCM under a key derived from the signing secret,
// so any instance sharing the secret opens it, a forged or edited one fails, and the URL (which
// proxies log) shows neither the user nor the scopes. It is good for 60 seconds and for one
// stream: its id is claimed when the stream opens (src/live/), once across all instances.
import { createCipheriv, createDecipheriv, createHmac, randomBytes } from 'node:crypto';
import { TokenError } from './jwt.js';
import type { Principal } from './authenticate.js';

/** How long a ticket may wait before it opens a stream. */
export const TICKET_TTL_MS = 60_000;
const IV_BYTES = 12;
const TAG_BYTES = 16;
/** Longer text is not a ticket of ours (the longest user id and every scope fit well within). */
const MAX_TICKET = 2048;

/** What opening a ticket gives: who it was issued to, and the id its single use is claimed under. */
export interface OpenedTicket {
  readonly principal: Principal;
  readonly id: string;
  readonly expiresAtMs: number;
}

function keyOf(secret: Buffer): Buffer {
  return createHmac('sha256', secret).update('chat-session-api event ticket v1').digest();
}

export class TicketCodec {
  private readonly keys: readonly Buffer[];

  /** `secrets[0]` seals; all of them open (a ticket minted just before a rotation still works). */
  constructor(secrets: readonly Buffer[]) {
    this.keys = secrets.map(keyOf);
  }

  /** A ticket for `principal`, good until 60 s from now or its token's expiry, whichever comes first. */
  mint(principal: Principal, nowMs: number): { ticket: string; expiresAtMs: number } {
    const expiresAtMs = Math.min(nowMs + TICKET_TTL_MS, principal.expiresAtMs ?? Infinity);
    const payload = JSON.stringify([principal.user, principal.scopes === null ? null : [...principal.scopes].join(' '), principal.expiresAtMs ?? null, expiresAtMs]);
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv('aes-256-gcm', this.keys[0] as Buffer, iv);
    const sealed = Buffer.concat([iv, cipher.update(payload, 'utf8'), cipher.final(), cipher.getAuthTag()]);
    return { ticket: sealed.toString('base64url'), expiresAtMs };
  }

  /** Opens a ticket; TokenError when it is not one of ours or has expired. Its single use is the caller's to claim. */
  open(ticket: string, nowMs: number): OpenedTicket {
    if (ticket.length > MAX_TICKET || !/^[A-Za-z0-9_-]+$/.test(ticket)) throw new TokenError('malformed ticket');
    const raw = Buffer.from(ticket, 'base64url');
    if (raw.length <= IV_BYTES + TAG_BYTES || raw.toString('base64url') !== ticket) throw new TokenError('malformed ticket');
    const iv = raw.subarray(0, IV_BYTES);
    const body = raw.subarray(IV_BYTES, raw.length - TAG_BYTES);
    const tag = raw.subarray(raw.length - TAG_BYTES);
    let payload: unknown;
    for (const key of this.keys) {
      try {
        const decipher = createDecipheriv('aes-256-gcm', key, iv);
        decipher.setAuthTag(tag);
        payload = JSON.parse(Buffer.concat([decipher.update(body), decipher.final()]).toString('utf8'));
        break;
      } catch {
        // not sealed with this key
      }
    }
    if (!Array.isArray(payload) || payload.length !== 4) throw new TokenError('invalid ticket');
    const [user, scope, tokenUntil, expiresAtMs] = payload as unknown[];
    if (typeof user !== 'string' || (scope !== null && typeof scope !== 'string') || (tokenUntil !== null && typeof tokenUntil !== 'number') || typeof expiresAtMs !== 'number') {
      throw new TokenError('invalid ticket');
    }
    if (expiresAtMs <= nowMs) throw new TokenError('ticket expired');
    return {
      principal: {
        user,
        scopes: scope === null ? null : new Set(scope.split(' ').filter((w) => w !== '')),
        expiresAtMs: tokenUntil ?? undefined,
      },
      id: iv.toString('base64url'),
      expiresAtMs,
    };
  }
}
