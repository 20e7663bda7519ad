// How a reply's end is recorded, a pure rule of the turn as the end's write finds it: its text not
// yet written (never twice), its tool calls where they came, its status, usage and error, the
// whole held to BODY_LIMIT, and the path key the OpenAI door finds it by.
import { appendPieces, withToolCalls, type PlacedCall } from './deltas.js';
import { pathHash } from './door-match.js';
import type { Part, StopReason, Turn, TurnContent, TurnError, TurnStatus, TurnUsage } from './records.js';
import { unrecordedOn, type Unrecorded } from './reply-ledger.js';

/** A reply's end as its recorder knows it: a value the end's write carries to the serial point. */
export interface ReplyEnd {
  /** What the store does not hold yet of its text and reasoning. */
  readonly unrecorded: Unrecorded;
  /** Its tool calls, each where it came among the text (dropped when it ends `error`). */
  readonly calls: readonly PlacedCall[];
  readonly status: TurnStatus;
  readonly usage?: TurnUsage | undefined;
  readonly error?: TurnError | undefined;
  readonly stopReason?: StopReason | undefined;
  /** What its text may grow to: BODY_LIMIT less the room an end takes. */
  readonly deltaMax: number;
  /** BODY_LIMIT: the most the turn as recorded may hold. */
  readonly maxBytes: number;
  /** The hash of the path it answers (read with its conversation), for the door's index; undefined: none. */
  readonly pathBefore?: string | undefined;
}

/** What the end changes of the turn (an edit of its content, status, usage, error, stop reason and path key). */
export interface ReplyEndEdit {
  readonly content: TurnContent;
  readonly status: TurnStatus;
  readonly usage?: TurnUsage;
  readonly error?: TurnError;
  readonly stopReason?: StopReason;
  readonly pathKey?: string;
}

/** The error of a reply that grew past what a turn may be. */
export function tooLargeMessage(maxBytes: number): string {
  return `The reply grew past the largest a turn may be (BODY_LIMIT, ${maxBytes} bytes)`;
}

/** The edit that ends reply `t` (the turn as stored, still `streaming`) as `end` says. */
export function replyEndEdit(t: Turn, end: ReplyEnd): ReplyEndEdit {
  const usage = end.usage !== undefined ? { usage: end.usage } : {};
  // pieces whose write's answer was lost and that landed all the same are not written twice
  const pieces = unrecordedOn(end.unrecorded, t.content);
  // tool calls where they came, but for a reply that failed (it is never sent back to the model)
  const calls = end.status === 'error' ? [] : end.calls;
  const content = withToolCalls(appendPieces(t.content, pieces), calls);
  // the end is never refused, but the text it carries is held to BODY_LIMIT as a delta
  // would have been: when the store lagged, most of a reply can be pending at its end
  let edit: ReplyEndEdit;
  if ((pieces.length > 0 || calls.length > 0) && Buffer.byteLength(JSON.stringify({ ...t, content })) > end.deltaMax) {
    edit = { content: t.content, status: 'error', ...usage, error: { message: tooLargeMessage(end.maxBytes) } };
  } else edit = { content, status: end.status, ...usage, ...(end.error !== undefined ? { error: end.error } : {}), ...(end.stopReason !== undefined ? { stopReason: end.stopReason } : {}) };
  // what the end adds (usage, an error's words) fits in the room the deltas left, but for a
  // long error: then the text gives way, so the turn as recorded stays within BODY_LIMIT
  const recorded = tidy(fitted({ ...t, ...edit }, end.maxBytes));
  // a reply a client can send back (complete, or stopped with its text) is found by its path
  const pathKey = end.pathBefore !== undefined && edit.status !== 'error' ? pathHash(end.pathBefore, { role: 'assistant', content: recorded }) : undefined;
  return { ...edit, content: recorded, ...(pathKey !== undefined ? { pathKey } : {}) };
}

/** A reply's content as it ends: parts without empty text (a provider's empty pieces leave none). */
function tidy(content: TurnContent): TurnContent {
  if (typeof content === 'string') return content;
  const parts = content.filter((p: Part) => !((p.type === 'text' || p.type === 'reasoning') && p.text === ''));
  return parts.length === 0 ? '' : parts;
}

/**
 * The turn's content cut from its end, text and reasoning alike, until the turn's JSON is at
 * most `maxBytes` (as it is, when it fits); never a surrogate pair cut in two.
 */
function fitted(t: Turn, maxBytes: number): TurnContent {
  let content = t.content;
  for (;;) {
    const over = Buffer.byteLength(JSON.stringify({ ...t, content })) - maxBytes;
    if (over <= 0) return content;
    const cut = cutEnd(content, over);
    if (cut === content) return content;
    content = cut;
  }
}

/** The content less `n` UTF-16 units from the end of its last text (a part that empties stays, tidy drops it); itself when it has no text left. */
function cutEnd(content: TurnContent, n: number): TurnContent {
  const shorter = (text: string): string => {
    let keep = Math.max(0, text.length - n);
    if (keep > 0 && text.charCodeAt(keep - 1) >= 0xd800 && text.charCodeAt(keep - 1) <= 0xdbff) keep--;
    return text.slice(0, keep);
  };
  if (typeof content === 'string') return content === '' ? content : shorter(content);
  for (let i = content.length - 1; i >= 0; i--) {
    const p = content[i] as Part;
    if ((p.type === 'text' || p.type === 'reasoning') && p.text !== '') {
      const parts = content.slice();
      parts[i] = { type: p.type, text: shorter(p.text) };
      return parts;
    }
  }
  return content;
}
