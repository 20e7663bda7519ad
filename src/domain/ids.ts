// Record identifiers: 24 lowercase hex characters in MongoDB ObjectId layout
// (4-byte seconds, 5 random bytes fixed per process, 3-byte counter with a random start).
import { randomBytes } from 'node:crypto';

const processPart = randomBytes(5).toString('hex');
let counter = randomBytes(3).readUIntBE(0, 3);

/** A new record id; ids made by one process in one second sort in creation order until the counter wraps. */
export function newObjectId(nowMs: number = Date.now()): string {
  counter = (counter + 1) & 0xffffff;
  const seconds = Math.floor(nowMs / 1000) >>> 0;
  return seconds.toString(16).padStart(8, '0') + processPart + counter.toString(16).padStart(6, '0');
}

const LOWER_HEX_24 = /^[0-9a-f]{24}$/;
const ANY_HEX_24 = /^[0-9a-fA-F]{24}$/;

/** True for the canonical (lowercase) form this service writes. */
export function isObjectId(value: string): boolean {
  return LOWER_HEX_24.test(value);
}

/** True for 24 hex characters in either case, the form accepted for provider ids. */
export function isHexObjectId(value: string): boolean {
  return ANY_HEX_24.test(value);
}
