// What a chat session and a turn may hold: the request bodies that create and change them,
// declared once in the schema language, and the shape a stored record must have. The routes
// validate requests with these; import checks backup records with them.
import { DELTA_MAX } from './deltas.js';
import { isObjectId } from './ids.js';
import { CHAT_SESSION_MODES, DEFAULT_TURN_STATUS, isChatSessionMode, TURN_ROLES, TURN_STATUSES, type ChatSession, type JsonObject, type Turn, type TurnContent, type TurnRole, type TurnStatus, type TurnUsage } from './records.js';
import { isPlainObject, validateBody, ValidationError, type BodyField, type BodySchema, type Values } from './schema.js';

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
    headTurnId: { kind: 'string', notBlank: true, maxLength: ID_MAX, description: 'Switches branch: a turn of this session becomes its head (the newest turn of the active branch).' },
  },
} as const satisfies BodySchema;

/** Parts a turn's content may have at most. */
export const PARTS_MAX = 256;
/** Nesting allowed in a part's free JSON (a tool call's arguments, a tool result's content), as for metadata. */
export const PART_JSON_DEPTH = 32;
/** A file part's `url`, in characters. */
export const URL_MAX = 2048;

const partId = (description: string) => ({ kind: 'string', required: true, maxLength: ID_MAX, description }) as const;

/** The typed parts of a turn's content, one variant per `type`. */
export const PART = {
  kind: 'tagged',
  tag: 'type',
  description: 'One part of the content, by its `type`.',
  variants: {
    text: { description: 'Text shown to the user.', fields: { text: { kind: 'string', required: true, description: 'The text (not blank).' } } },
    reasoning: { description: "The model's reasoning, apart from its answer.", fields: { text: { kind: 'string', required: true, description: 'The reasoning text (not blank).' } } },
    tool_call: {
      description: 'A call of a tool the model asked for.',
      fields: {
        id: partId('The call id, which its tool_result names.'),
        name: partId('The tool called.'),
        arguments: { kind: 'json', required: true, maxDepth: PART_JSON_DEPTH, description: 'The arguments, as the model gave them.' },
      },
    },
    tool_result: {
      description: 'What a tool call returned.',
      fields: {
        toolCallId: partId('The id of the tool_call this answers.'),
        content: { kind: 'json', required: true, maxDepth: PART_JSON_DEPTH, description: "The tool's output: text or any JSON." },
        isError: { kind: 'boolean', description: 'True when the tool failed.' },
      },
    },
    file: {
      description: 'A file: its bytes in `data` (base64) or a link in `url`, exactly one of them.',
      exactlyOneOf: ['data', 'url'],
      fields: {
        name: { kind: 'string', required: true, maxLength: NAME_MAX, description: 'The file name.' },
        mediaType: { kind: 'string', required: true, maxLength: ID_MAX, pattern: { regex: '^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*(\\s*;.*)?$', means: 'a media type such as image/png' }, description: 'Its media type, e.g. image/png.' },
        data: { kind: 'string', pattern: { regex: '^[A-Za-z0-9+/]*={0,2}$', means: 'base64' }, description: 'The bytes, base64.' },
        url: { kind: 'string', maxLength: URL_MAX, pattern: { regex: '^[A-Za-z][A-Za-z0-9+.-]*:\\S+$', means: 'an absolute URL' }, description: 'Where the file is.' },
      },
    },
  },
} as const satisfies BodyField;

/** A turn's content: a string (as the first release took it) or a non-empty array of typed parts. */
export function contentField(create: boolean) {
  return {
    kind: 'either',
    ...(create ? { required: true } : {}),
    expected: 'a string or an array of parts',
    description: 'What the turn says: text, or an array of typed parts (text, reasoning, tool_call, tool_result, file).',
    of: [
      { kind: 'string', ...(create ? { required: true } : { notBlank: true }), description: 'The text of the turn (not blank).' },
      { kind: 'list', minItems: 1, maxItems: PARTS_MAX, items: PART, description: `At most ${PARTS_MAX} parts.` },
    ],
  } as const satisfies BodyField;
}

/** The token usage of a turn. */
export const USAGE = {
  kind: 'shape',
  description: 'Token usage of the turn.',
  fields: {
    inputTokens: { kind: 'number', integer: true, min: 0, required: true, description: 'Tokens read.' },
    outputTokens: { kind: 'number', integer: true, min: 0, required: true, description: 'Tokens written.' },
    cachedTokens: { kind: 'number', integer: true, min: 0, description: 'Of the input, tokens served from a cache.' },
    costUsd: { kind: 'number', integer: false, min: 0, description: 'What the turn cost, in US dollars.' },
  },
} as const satisfies BodyField;

const STATUS_HELP = `${TURN_STATUSES.join(', ')}; default ${DEFAULT_TURN_STATUS}.`;
const metadataField = { kind: 'object', maxBytes: 16 * 1024, maxDepth: 32, description: 'Any JSON object.' } as const;

export const turnBody = {
  name: 'CreateTurn',
  nullIsAbsent: true,
  fields: {
    role: { kind: 'string', required: true, oneOf: TURN_ROLES, description: 'Who spoke.' },
    content: contentField(true),
    parentId: {
      kind: 'string',
      nullable: true,
      maxLength: ID_MAX,
      description: "The turn this one answers or follows: a turn of this session; null makes a new root. Absent: the session's head.",
    },
    model: { kind: 'string', maxLength: ID_MAX, description: 'Model that produced the turn.' },
    metadata: metadataField,
    usage: USAGE,
    status: { kind: 'string', oneOf: TURN_STATUSES, description: STATUS_HELP },
  },
} as const satisfies BodySchema;

export const turnUpdateBody = {
  name: 'UpdateTurn',
  nullIsAbsent: false,
  fields: {
    content: contentField(false),
    metadata: metadataField,
    usage: USAGE,
    status: { kind: 'string', oneOf: TURN_STATUSES, description: TURN_STATUSES.join(', ') },
  },
} as const satisfies BodySchema;

export const deltaBody = {
  name: 'TurnDelta',
  nullIsAbsent: true,
  fields: {
    text: {
      kind: 'string',
      present: true,
      maxLength: DELTA_MAX,
      description: `Text to append to the streaming turn (at least one character; spaces count), at most ${DELTA_MAX} characters.`,
    },
  },
} as const satisfies BodySchema;

export const forkBody = {
  name: 'ForkChatSession',
  nullIsAbsent: true,
  fields: {
    turnId: { kind: 'string', notBlank: true, maxLength: ID_MAX, description: "The turn the copy ends at: a turn of the session. Absent: its head." },
    name: { kind: 'string', maxLength: NAME_MAX, description: "The new session's name. Absent: the source's." },
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
  return laterSessionProblem(v);
}

/**
 * A turn of a backup held to the API's rules, as this release keeps it (content normalized,
 * fields in their order), or what is wrong with it. A turn of the first release's backups has no
 * `parentId` (null here: the import gives it its place) and no `status` (complete).
 */
export function turnOfBackup(v: unknown): Turn | string {
  if (!isPlainObject(v)) return 'turn is not an object';
  if (typeof v['_id'] !== 'string' || !isObjectId(v['_id'])) return 'turn _id must be 24 lowercase hex characters';
  if (typeof v['session'] !== 'string' || !isObjectId(v['session'])) return 'turn session must be a session _id';
  const parent = v['parentId'];
  if (parent !== undefined && parent !== null && (typeof parent !== 'string' || !isObjectId(parent))) return 'turn parentId must be a turn _id or null';
  if (typeof v['user'] !== 'string' || v['user'].trim() === '' || tooLong(v['user'], ID_MAX)) return `turn user must be a non-blank string of at most ${ID_MAX} characters`;
  if (!isTimestamp(v['createdAt'])) return 'turn createdAt must be an ISO 8601 UTC timestamp';
  let b: Values<typeof turnBody.fields>;
  try {
    b = validateBody(turnBody, v);
  } catch (e) {
    if (e instanceof ValidationError) return `turn ${e.message}`;
    throw e;
  }
  return {
    _id: v['_id'],
    session: v['session'],
    parentId: typeof parent === 'string' ? parent : null,
    user: v['user'],
    role: b.role as TurnRole,
    content: b.content as TurnContent,
    ...(b.model !== undefined ? { model: b.model } : {}),
    ...(b.metadata !== undefined ? { metadata: b.metadata } : {}),
    ...(b.usage !== undefined ? { usage: b.usage as unknown as TurnUsage } : {}),
    status: (b.status as TurnStatus | undefined) ?? DEFAULT_TURN_STATUS,
    createdAt: v['createdAt'] as string,
  };
}

/** What is wrong with the fields a release after the first added to a stored session, or undefined. */
export function laterSessionProblem(v: JsonObject): string | undefined {
  const head = v['headTurnId'];
  if (head !== undefined && head !== null && (typeof head !== 'string' || !isObjectId(head))) return 'session headTurnId must be a turn _id or null';
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
