// What a chat session and a turn may hold: the request bodies that create and change them,
// declared once in the schema language. The routes validate requests with these; import holds
// backup turns to them (backup-turn.ts).
import { DELTA_MAX } from './deltas.js';
import { ID_MAX, INSTRUCTIONS_MAX_BYTES, TOOL_DESCRIPTION_MAX, TOOL_PARAMETERS_MAX_BYTES, TOOLS_MAX, METADATA_KEY_MAX, METADATA_KEYS, METADATA_VALUE_MAX, NAME_MAX, PART_JSON_DEPTH, PARTS_MAX, TAG_MAX, TAGS_MAX, URL_MAX } from './limits.js';
import { COUNT_MAX } from './numbers.js';
import { CHAT_SESSION_MODES, DEFAULT_TURN_STATUS, TURN_ROLES, TURN_STATUSES } from './records.js';
import { foldForSearch } from './search.js';
import { ValidationError, type BodyField, type BodySchema } from './schema.js';

const MODE_HELP = `A ChatSessionMode member name: ${CHAT_SESSION_MODES.join(', ')}.`;

/** An ISO 8601 time with a time zone, to the second or finer (the regex the API checks expiresAt with). */
const EXPIRY_PATTERN = '^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}(\\.\\d{1,9})?(Z|[+-]\\d{2}:\\d{2})$';

const sessionFields = (update: boolean) =>
  ({
    tags: {
      kind: 'list',
      minItems: 0,
      maxItems: TAGS_MAX,
      items: { kind: 'string', notBlank: true, maxLength: TAG_MAX, wellFormed: true, description: 'A tag (matched ignoring case).' },
      description: `At most ${TAGS_MAX} tags of 1-${TAG_MAX} characters; lists filter by them (tag=), ignoring case. A tag given twice (ignoring case) is kept once.${update ? ' Replaces the tags; [] removes them.' : ''}`,
    },
    metadata: {
      kind: 'map',
      maxKeys: METADATA_KEYS,
      keyMax: METADATA_KEY_MAX,
      valueMax: METADATA_VALUE_MAX,
      description: `The client's own string values by key: at most ${METADATA_KEYS} keys of 1-${METADATA_KEY_MAX} characters, values of at most ${METADATA_VALUE_MAX}.${update ? ' Replaces the metadata whole; {} removes it.' : ''}`,
    },
    expiresAt: {
      kind: 'string',
      nullable: true,
      pattern: { regex: EXPIRY_PATTERN, means: 'an ISO 8601 time with a time zone, such as 2030-01-31T00:00:00Z, or null' },
      description: 'When the session is gone (404, out of every list); null: never, whatever RETENTION_DAYS says. Absent: RETENTION_DAYS after its last activity, when set.',
    },
    instructions: {
      kind: 'string',
      nullable: update,
      maxLength: INSTRUCTIONS_MAX_BYTES,
      wellFormed: true,
      description: `The system message of the replies the server asks the model for (POST .../messages, .../replies), at most ${INSTRUCTIONS_MAX_BYTES / 1024} KiB of UTF-8.${update ? ' "" or null removes it.' : ''}`,
    },
  }) as const satisfies Record<string, BodyField>;

export const createBody = {
  name: 'CreateChatSession',
  nullIsAbsent: true,
  // the OpenAI entry of examples/providers.json, which `npm start` copies on a fresh clone
  example: { projectId: 'website-redesign', providerId: '665f1c2a9b1e8a0012ab34c1', selectedModel: 'gpt-4o', name: 'Tried from /docs' },
  fields: {
    projectId: { kind: 'string', required: true, maxLength: ID_MAX, wellFormed: true, description: 'Project the session belongs to.' },
    providerId: { kind: 'string', required: true, maxLength: ID_MAX, wellFormed: true, description: 'AI provider; stored as `provider`.' },
    selectedModel: { kind: 'string', required: true, maxLength: ID_MAX, wellFormed: true, description: 'Model of the provider.' },
    mode: { kind: 'string', emptyIsAbsent: true, oneOf: CHAT_SESSION_MODES, description: `${MODE_HELP} Absent or empty: Build.` },
    name: { kind: 'string', maxLength: NAME_MAX, wellFormed: true, description: 'Display name; "" when not given.' },
    ...sessionFields(false),
  },
} as const satisfies BodySchema;

export const updateBody = {
  name: 'UpdateChatSession',
  nullIsAbsent: false,
  example: { name: 'Renamed from /docs', mode: 'Plan' },
  fields: {
    name: { kind: 'string', maxLength: NAME_MAX, wellFormed: true, description: 'New display name.' },
    provider: { kind: 'string', notBlank: true, maxLength: ID_MAX, wellFormed: true, description: 'New provider (the create field is `providerId`).' },
    selectedModel: { kind: 'string', notBlank: true, maxLength: ID_MAX, wellFormed: true, description: 'New model.' },
    mode: { kind: 'string', oneOf: CHAT_SESSION_MODES, description: MODE_HELP },
    headTurnId: { kind: 'string', notBlank: true, maxLength: ID_MAX, description: 'Switches branch: a turn of this session becomes its head (the newest turn of the active branch).' },
    ...sessionFields(true),
  },
} as const satisfies BodySchema;

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

/**
 * A turn's content: a string (as the first release took it) or a non-empty array of typed parts.
 * `create`: required; a blank string is then refused unless `blankWhen` allows it (a turn created
 * streaming: checked by the route, which knows the status; a stored turn: a reply that ended
 * before its first word).
 */
export function contentField(create: boolean) {
  return {
    kind: 'either',
    ...(create ? { required: true } : {}),
    expected: 'a string or an array of parts',
    description: 'What the turn says: text, or an array of typed parts (text, reasoning, tool_call, tool_result, file).',
    of: [
      { kind: 'string', ...(create ? {} : { notBlank: true }), description: create ? 'The text of the turn (not blank; "" only for a turn created streaming).' : 'The text of the turn (not blank).' },
      { kind: 'list', minItems: 1, maxItems: PARTS_MAX, items: PART, description: `At most ${PARTS_MAX} parts.` },
    ],
  } as const satisfies BodyField;
}

/** What a turn created through the API may say: blank text only when it is created streaming (a reply that has said nothing yet). */
export function checkNewContent(content: unknown, status: string | undefined): void {
  if (typeof content === 'string' && content.trim() === '' && status !== 'streaming') throw new ValidationError('content is required');
}

/** The token usage of a turn: counts in 0..2^53 - 1 (numbers.ts), so that no total of them can break a read. */
export const USAGE = {
  kind: 'shape',
  description: 'Token usage of the turn.',
  fields: {
    inputTokens: { kind: 'number', integer: true, min: 0, max: COUNT_MAX, required: true, description: 'Tokens read.' },
    outputTokens: { kind: 'number', integer: true, min: 0, max: COUNT_MAX, required: true, description: 'Tokens written.' },
    cachedTokens: { kind: 'number', integer: true, min: 0, max: COUNT_MAX, description: 'Of the input, tokens served from a cache.' },
    reasoningTokens: { kind: 'number', integer: true, min: 0, max: COUNT_MAX, description: "Of the output, tokens of the model's reasoning." },
    costUsd: { kind: 'number', integer: false, min: 0, description: 'What the turn cost, in US dollars (a finite number).' },
  },
} as const satisfies BodyField;

const STATUS_HELP = `${TURN_STATUSES.join(', ')}; default ${DEFAULT_TURN_STATUS}.`;
const metadataField = { kind: 'object', maxBytes: 16 * 1024, maxDepth: 32, description: 'Any JSON object.' } as const;

export const turnBody = {
  name: 'CreateTurn',
  nullIsAbsent: true,
  example: { role: 'user', content: 'Draft three headlines for the landing page.' },
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
  example: { status: 'complete' },
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
  example: { text: ' and a few words more.' },
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
  example: { name: 'A fork to try another answer' },
  fields: {
    turnId: { kind: 'string', notBlank: true, maxLength: ID_MAX, description: "The turn the copy ends at: a turn of the session. Absent: its head." },
    name: { kind: 'string', maxLength: NAME_MAX, wellFormed: true, description: "The new session's name. Absent: the source's." },
  },
} as const satisfies BodySchema;


/** Where the model stops: one sequence or up to 4 (a reply's `options.stop`, the OpenAI door's `stop`). */
export const STOP_SEQUENCES = {
  kind: 'either',
  expected: 'a string or an array of strings',
  description: 'Where the model stops: a string, or up to 4.',
  of: [
    { kind: 'string', present: true, maxLength: 200, description: 'One stop sequence.' },
    { kind: 'list', minItems: 1, maxItems: 4, items: { kind: 'string', present: true, maxLength: 200, description: 'A stop sequence.' }, description: 'Up to 4 stop sequences.' },
  ],
} as const satisfies BodyField;

/** What a reply is asked with: the generation settings, passed on to the provider in its own names. */
export const REPLY_OPTIONS = {
  kind: 'shape',
  description: 'Generation settings, passed on to the provider in its own names; absent ones are not sent.',
  fields: {
    temperature: { kind: 'number', integer: false, min: 0, max: 2, description: 'Sampling temperature, 0 to 2.' },
    maxTokens: { kind: 'number', integer: true, min: 1, max: 1_000_000, description: 'The most tokens the reply may have.' },
    topP: { kind: 'number', integer: false, min: 0, max: 1, description: 'Nucleus sampling, 0 to 1.' },
    stop: STOP_SEQUENCES,
  },
} as const satisfies BodyField;

/** A tool's name as every protocol takes it (OpenAI's rule, the narrowest). */
export const TOOL_NAME_PATTERN = '^[A-Za-z0-9_-]{1,64}$';

/** The client's tools a reply may call: declared, passed on to the provider in its protocol's form, never run here. */
export const TOOLS = {
  kind: 'list',
  minItems: 0,
  maxItems: TOOLS_MAX,
  description: `The client's tools the model may call, at most ${TOOLS_MAX} (the server passes them on and records the calls; the client runs them and answers with a \`tool\` message).`,
  items: {
    kind: 'shape',
    description: 'A tool.',
    fields: {
      name: { kind: 'string', required: true, pattern: { regex: TOOL_NAME_PATTERN, means: '1-64 letters, digits, _ or -' }, description: 'Its name: 1-64 letters, digits, `_` or `-`.' },
      description: { kind: 'string', maxLength: TOOL_DESCRIPTION_MAX, description: 'What it does, for the model.' },
      parameters: { kind: 'object', maxBytes: TOOL_PARAMETERS_MAX_BYTES, maxDepth: 64, description: 'Its arguments as a JSON Schema object (passed on as given).' },
    },
  },
} as const satisfies BodyField;

/** Whether the model must, may or must not call a tool, or which one it must call. */
export const TOOL_CHOICE = {
  kind: 'either',
  expected: '"auto", "none", "required" or {"name": ...}',
  description: 'Whether the model may call a tool (`auto`, the default), must not (`none`), must call one (`required`) or must call the one named (`{name}`).',
  of: [
    { kind: 'string', oneOf: ['auto', 'none', 'required'], description: 'auto, none or required.' },
    { kind: 'shape', description: 'The one tool it must call.', fields: { name: { kind: 'string', required: true, pattern: { regex: TOOL_NAME_PATTERN, means: 'a tool name' }, description: 'A name of `tools`.' } } },
  ],
} as const satisfies BodyField;

const replyFields = {
  model: { kind: 'string', notBlank: true, maxLength: ID_MAX, description: "The model to ask; absent: the session's selectedModel. It must be one of the provider's `models` when it lists some." },
  options: REPLY_OPTIONS,
  background: { kind: 'boolean', description: 'true: answer 202 at once with the reply still streaming (follow it on the session\'s events or by GET of the turn).' },
  tools: TOOLS,
  toolChoice: TOOL_CHOICE,
} as const satisfies Record<string, BodyField>;

/** POST .../messages: a user turn, and the model's reply to it. */
export const messageBody = {
  name: 'SendMessage',
  nullIsAbsent: true,
  example: { content: 'Say hello in five words.' },
  fields: {
    role: { kind: 'string', oneOf: ['user', 'tool'], description: '`user` (the default), or `tool`: the content is `tool_result` parts answering the tool calls of the reply it follows, and the model is asked to go on.' },
    content: contentField(true),
    parentId: { kind: 'string', nullable: true, maxLength: ID_MAX, description: "The turn the message follows: a turn of this session; null makes a new root. Absent: the session's head." },
    ...replyFields,
  },
} as const satisfies BodySchema;

/** POST .../replies: the model's reply to a turn already there (regenerating an answer is a reply to its user turn). */
export const replyBody = {
  name: 'AskReply',
  nullIsAbsent: true,
  example: { background: true },
  fields: {
    parentId: { kind: 'string', notBlank: true, maxLength: ID_MAX, description: "The turn to reply to: a turn of this session. Absent: the session's head." },
    ...replyFields,
  },
} as const satisfies BodySchema;

/** A given expiresAt as stored: UTC with milliseconds, or null (never). A time the calendar does not have is refused. */
export function expiryOf(value: string | null): string | null {
  if (value === null) return null;
  const ms = Date.parse(value);
  if (Number.isNaN(ms) || ms < 0 || ms > 253402300799999) throw new ValidationError('expiresAt must be an ISO 8601 time with a time zone, such as 2030-01-31T00:00:00Z, or null');
  return new Date(ms).toISOString();
}

/** Tags as stored: each once, ignoring case, in the order first given. */
export function tagsOf(given: readonly string[]): string[] {
  const seen = new Set<string>();
  const out: string[] = [];
  for (const t of given) {
    const f = foldForSearch(t);
    if (seen.has(f)) continue;
    seen.add(f);
    out.push(t);
  }
  return out;
}
