// The sizes a session and a turn may have, in one place: the request bodies (inputs.ts) are
// declared with them, and the checks of stored records (stored.ts) hold an import to them,
// without the record checks depending on the request-body module.

/** Ids (project, provider, user) and model names, in characters. */
export const ID_MAX = 200;
export const NAME_MAX = 500;

/** A session's tags and metadata: at most this many tags of at most TAG_MAX characters, metadata of at most METADATA_KEYS keys. */
export const TAGS_MAX = 20;
export const TAG_MAX = 50;
export const METADATA_KEYS = 16;
export const METADATA_KEY_MAX = 64;
export const METADATA_VALUE_MAX = 512;

/** Parts a turn's content may have at most. */
export const PARTS_MAX = 256;
/** Nesting allowed in a part's free JSON (a tool call's arguments, a tool result's content), as for metadata. */
export const PART_JSON_DEPTH = 32;
/** A file part's `url`, in characters. */
export const URL_MAX = 2048;

/** A session's `instructions` (the system message of its replies), in UTF-8 bytes: 32 KiB. */
export const INSTRUCTIONS_MAX_BYTES = 32 * 1024;
/** A turn's `error.message`, in characters (a provider's words are cut to fit). */
export const ERROR_MESSAGE_MAX = 2000;
/** Tools a reply may be offered, and the longest description and parameters (JSON Schema) of one. */
export const TOOLS_MAX = 128;
export const TOOL_DESCRIPTION_MAX = 4096;
export const TOOL_PARAMETERS_MAX_BYTES = 64 * 1024;
