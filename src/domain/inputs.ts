// What a chat session and a turn may hold: the request bodies that create and change them,
// declared once in the schema language, and the shape a stored record must have. The routes
// validate requests with these; import checks backup records with them.
import { isObjectId } from './ids.js';
import { CHAT_SESSION_MODES, isChatSessionMode, TURN_ROLES } from './records.js';
import { isPlainObject, validateBody, ValidationError, type BodySchema } from './schema.js';

/** Ids (project, provider, user) and model names, in characters. */
export const ID_MAX = 200;
export const NAME_MAX = 500;
const MODE_HELP = `A ChatSessionMode member name: ${CHAT_SESSION_MODES.join(', ')}.`;

export const createBody = {
  name: 'CreateChatSession',
  nullIsAbsent: true,
  fields: {
    projectId: { kind: 'string', required: true, maxLength: ID_MAX, description: 'Project the session belongs to.' },
    providerId: { kind: 'string', required: true, maxLength: ID_MAX, description: 'AI provider; stored as `provider`.' },
    selectedModel: { kind: 'string', required: true, maxLength: ID_MAX, description: 'Model of the provider.' },
    mode: { kind: 'string', emptyIsAbsent: true, oneOf: CHAT_SESSION_MODES, description: `${MODE_HELP} Absent or empty: Build.` },
    name: { kind: 'string', maxLength: NAME_MAX, description: 'Display name; "" when not given.' },
  },
} as const satisfies BodySchema;

export const updateBody = {
  name: 'UpdateChatSession',
  nullIsAbsent: false,
  fields: {
    name: { kind: 'string', maxLength: NAME_MAX, description: 'New display name.' },
    provider: { kind: 'string', notBlank: true, maxLength: ID_MAX, description: 'New provider (the create field is `providerId`).' },
    selectedModel: { kind: 'string', notBlank: true, maxLength: ID_MAX, description: 'New model.' },
    mode: { kind: 'string', oneOf: CHAT_SESSION_MODES, description: MODE_HELP },
  },
} as const satisfies BodySchema;

export const turnBody = {
  name: 'CreateTurn',
  nullIsAbsent: true,
  fields: {
    role: { kind: 'string', required: true, oneOf: TURN_ROLES, description: 'Who spoke.' },
    content: { kind: 'string', required: true, description: 'The text of the turn.' },
    model: { kind: 'string', maxLength: ID_MAX, description: 'Model that produced the turn.' },
    metadata: { kind: 'object', maxBytes: 16 * 1024, maxDepth: 32, description: 'Any JSON object.' },
  },
} as const satisfies BodySchema;

const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

function isTimestamp(v: unknown): boolean {
  return typeof v === 'string' && ISO_MS.test(v) && !Number.isNaN(Date.parse(v));
}

function tooLong(v: string, max: number): boolean {
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
  return undefined;
}

/** What is wrong with a turn record of a backup, or undefined: the API's rules for its fields too. */
export function turnProblem(v: unknown): string | undefined {
  if (!isPlainObject(v)) return 'turn is not an object';
  if (typeof v['_id'] !== 'string' || !isObjectId(v['_id'])) return 'turn _id must be 24 lowercase hex characters';
  if (typeof v['session'] !== 'string' || !isObjectId(v['session'])) return 'turn session must be a session _id';
  if (typeof v['user'] !== 'string' || v['user'].trim() === '' || tooLong(v['user'], ID_MAX)) return `turn user must be a non-blank string of at most ${ID_MAX} characters`;
  if (!isTimestamp(v['createdAt'])) return 'turn createdAt must be an ISO 8601 UTC timestamp';
  try {
    validateBody(turnBody, v);
  } catch (e) {
    if (e instanceof ValidationError) return `turn ${e.message}`;
    throw e;
  }
  return undefined;
}
