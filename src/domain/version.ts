// The version tag of a chat session, which its ETag quotes. It is a digest of the state, not of
// the clock or of how an engine keeps it, so the same history gives the same tag on every
// engine, after a restart, after an export and import, and in every release: it is taken over
// the ten fields of the first release only, so a session keeps its tag across the upgrade that
// added fields after them. Every write moves a session's updatedAt (nextTimestamp), so states
// that differ only in a later field (the head, a turn's content) still get tags of their own.
import * as crypto from 'node:crypto';
import type { TurnKey } from './order.js';

/** What a session's JSON starts its fields of later releases with (see ChatSession). */
const LATER_FIELDS = ',"headTurnId":';

/**
 * The JSON of the first release's ten fields of a session, cut from the session's JSON: the
 * later fields all follow them, from `headTurnId` on. Inside a JSON string every `"` is escaped,
 * so the key can only be found where it really starts. A JSON without it (the first release's)
 * is that JSON already.
 */
export function firstReleaseJson(sessionJson: string): string {
  const at = sessionJson.indexOf(LATER_FIELDS);
  return at < 0 ? sessionJson : `${sessionJson.slice(0, at)}}`;
}

/** The ETag of a session: its version tag, which any change to it (a field, a turn) moves. */
export function etagOf(version: string): string {
  return `"${version}"`;
}

/** RFC 9110 If-Match with strong comparison (`ifMatch`: the header's value) against a session's version: `*` matches any. */
export function ifMatchHolds(ifMatch: string, version: string): boolean {
  if (ifMatch.trim() === '*') return true;
  const tag = etagOf(version);
  for (const part of ifMatch.split(',')) if (part.trim() === tag) return true;
  return false;
}

/** The version tag of a session from its JSON as stored and answered, and its newest turn. */
export function versionOfSession(sessionJson: string, lastTurn: TurnKey | undefined): string {
  return versionOf(firstReleaseJson(sessionJson), lastTurn);
}

/**
 * The first 22 characters of the base64url SHA-256 of the session's JSON, followed (when the
 * session has turns) by a newline, its newest turn's createdAt, a newline and that turn's _id.
 * Any change to a field or a new turn gives a new tag, even within one millisecond.
 */
export function versionOf(sessionJson: string, lastTurn: TurnKey | undefined): string {
  const text = lastTurn === undefined ? sessionJson : `${sessionJson}\n${lastTurn.createdAt}\n${lastTurn._id}`;
  return base64url22(digest(text));
}

type OneShotHash = (algorithm: string, data: string, encoding: 'buffer') => Buffer;
const oneShot = (crypto as { hash?: OneShotHash }).hash;
/** SHA-256: the one-shot crypto.hash where the runtime has it (20.12+), else a Hash object. */
const digest: (text: string) => Buffer = oneShot !== undefined ? (text) => oneShot('sha256', text, 'buffer') : (text) => crypto.createHash('sha256').update(text).digest();

const B64URL = Buffer.from('ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_', 'latin1');
const tag = Buffer.alloc(22);
/**
 * The first 22 characters of the base64url form of `d` (132 bits), as one flat string: slicing
 * the 43-character form would keep both strings alive wherever the tag is kept.
 */
function base64url22(d: Buffer): string {
  let o = 0;
  for (let i = 0; i < 15; i += 3) {
    const n = ((d[i] as number) << 16) | ((d[i + 1] as number) << 8) | (d[i + 2] as number);
    tag[o++] = B64URL[n >>> 18] as number;
    tag[o++] = B64URL[(n >>> 12) & 63] as number;
    tag[o++] = B64URL[(n >>> 6) & 63] as number;
    tag[o++] = B64URL[n & 63] as number;
  }
  const n = ((d[15] as number) << 16) | ((d[16] as number) << 8);
  tag[o++] = B64URL[n >>> 18] as number;
  tag[o] = B64URL[(n >>> 12) & 63] as number;
  return tag.toString('latin1');
}
