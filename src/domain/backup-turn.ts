// A backup's turn is held to what the API accepts for a new turn: the turn request body of
// inputs.ts, so an import cannot bring in a turn the API would have refused.
import { isObjectId } from './ids.js';
import { turnBody } from './inputs.js';
import { ERROR_MESSAGE_MAX, ID_MAX } from './limits.js';
import { DEFAULT_TURN_STATUS, STOP_REASONS, type StopReason, type Turn, type TurnContent, type TurnRole, type TurnStatus, type TurnUsage } from './records.js';
import { isPlainObject, validateBody, ValidationError, type Values } from './schema.js';
import { isTimestamp, tooLong } from './stored.js';

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
  const error = v['error'];
  if (error !== undefined && (!isPlainObject(error) || typeof error['message'] !== 'string' || tooLong(error['message'], ERROR_MESSAGE_MAX))) return `turn error must be {message} with a message of at most ${ERROR_MESSAGE_MAX} characters`;
  const stopReason = v['stopReason'];
  if (stopReason !== undefined && !(STOP_REASONS as readonly unknown[]).includes(stopReason)) return `turn stopReason must be one of: ${STOP_REASONS.join(', ')}`;
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
    ...(isPlainObject(error) ? { error: { message: error['message'] as string } } : {}),
    ...(stopReason !== undefined ? { stopReason: stopReason as StopReason } : {}),
    status: (b.status as TurnStatus | undefined) ?? DEFAULT_TURN_STATUS,
    createdAt: v['createdAt'] as string,
  };
}
