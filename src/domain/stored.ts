// Stored session records checked as records, not as request bodies: what journal replay and
// backup import accept from a file, held to the types (and on import to the API's limits).
// A backup's turns are held to the turn request body instead (backup-turn.ts).
import { isObjectId } from './ids.js';
import { ID_MAX, INSTRUCTIONS_MAX_BYTES, METADATA_KEY_MAX, METADATA_KEYS, METADATA_VALUE_MAX, NAME_MAX, TAG_MAX, TAGS_MAX } from './limits.js';
import { isChatSessionMode, type ChatSession, type JsonObject } from './records.js';
import { isPlainObject } from './schema.js';

const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

export function isTimestamp(v: unknown): boolean {
  return typeof v === 'string' && ISO_MS.test(v) && !Number.isNaN(Date.parse(v));
}

export function tooLong(v: string, max: number): boolean {
  return v.length > max && [...v].length > max;
}

/**
 * What is wrong with a stored chat session record, or undefined when it is one. `strict`
 * (import) also holds it to the API's limits; replay, reading checksummed lines this server
 * wrote, checks only the types.
 */
export function sessionProblem(v: unknown, strict: boolean): string | undefined {
  if (!isPlainObject(v)) return 'session is not an object';
  if (typeof v['_id'] !== 'string' || (strict && !isObjectId(v['_id']))) return 'session _id must be 24 lowercase hex characters';
  for (const f of ['name', 'provider', 'selectedModel', 'user', 'project'] as const) {
    const value = v[f];
    if (typeof value !== 'string') return `session ${f} must be a string`;
    const max = f === 'name' ? NAME_MAX : ID_MAX;
    if (strict && tooLong(value, max)) return `session ${f} must be at most ${max} characters`;
  }
  if (typeof v['mode'] !== 'string' || !isChatSessionMode(v['mode'])) return 'session mode is not a ChatSessionMode member';
  for (const f of ['createdAt', 'updatedAt'] as const) {
    if (typeof v[f] !== 'string' || (strict && !isTimestamp(v[f]))) return `session ${f} must be an ISO 8601 UTC timestamp`;
  }
  if (typeof v['archived'] !== 'boolean') return 'session archived must be true or false';
  return laterSessionProblem(v);
}

/** What is wrong with the fields a release after the first added to a stored session, or undefined. */
export function laterSessionProblem(v: JsonObject): string | undefined {
  const tags = v['tags'];
  if (tags !== undefined && (!Array.isArray(tags) || tags.length > TAGS_MAX || !tags.every((t) => typeof t === 'string' && t.trim() !== '' && !tooLong(t, TAG_MAX)))) {
    return `session tags must be at most ${TAGS_MAX} non-blank strings of at most ${TAG_MAX} characters`;
  }
  const metadata = v['metadata'];
  if (metadata !== undefined) {
    const m = isPlainObject(metadata) ? metadata : undefined;
    const keys = m === undefined ? undefined : Object.keys(m);
    if (m === undefined || keys === undefined || keys.length > METADATA_KEYS || !keys.every((k) => { const x = m[k]; return k !== '' && !tooLong(k, METADATA_KEY_MAX) && typeof x === 'string' && !tooLong(x, METADATA_VALUE_MAX); })) {
      return `session metadata must be an object of at most ${METADATA_KEYS} string values`;
    }
  }
  const expires = v['expiresAt'];
  if (expires !== undefined && expires !== null && !isTimestamp(expires)) return 'session expiresAt must be an ISO 8601 UTC timestamp or null';
  const head = v['headTurnId'];
  if (head !== undefined && head !== null && (typeof head !== 'string' || !isObjectId(head))) return 'session headTurnId must be a turn _id or null';
  const instructions = v['instructions'];
  if (instructions !== undefined && (typeof instructions !== 'string' || Buffer.byteLength(instructions) > INSTRUCTIONS_MAX_BYTES)) return `session instructions must be a string of at most ${INSTRUCTIONS_MAX_BYTES} bytes`;
  const from = v['forkedFrom'];
  if (from !== undefined) {
    if (!isPlainObject(from) || typeof from['session'] !== 'string' || !isObjectId(from['session'])) return 'session forkedFrom.session must be a session _id';
    const turn = from['turn'];
    if (turn !== null && (typeof turn !== 'string' || !isObjectId(turn))) return 'session forkedFrom.turn must be a turn _id or null';
  }
  return undefined;
}

/** The forkedFrom of a stored session (checked by laterSessionProblem), when it has one. */
export function forkedFromOf(v: JsonObject): ChatSession['forkedFrom'] {
  const from = v['forkedFrom'];
  if (!isPlainObject(from)) return undefined;
  return { session: from['session'] as string, turn: (from['turn'] as string | null | undefined) ?? null };
}
