// A streaming turn's text deltas: where a delta's text (answer or reasoning) goes in a turn's
// content, decided once for the writer, the replies and the journal's reader, and how a stored
// turn's JSON tells that the turn is streaming without being parsed.
import type { Part, TurnContent } from './records.js';

/** The longest delta, in characters (Unicode code points): longer text is sent as several deltas. */
export const DELTA_MAX = 65_536;

/** Where a delta went: the text it was appended to, and that text's length before it. */
export interface DeltaPlace {
  /** Length of the text before the delta, in UTF-16 code units (JavaScript's `length`). */
  readonly at: number;
  /** For content of parts: the index of the part it went to. */
  readonly part?: number;
}

/** What a delta appends: answer text, or the model's reasoning (a reply's `reasoning` part). */
export type PieceKind = 'text' | 'reasoning';

/** A piece of a streaming turn's text, in the order it came. */
export interface Piece {
  readonly kind: PieceKind;
  readonly text: string;
}

/**
 * The content with `text` appended: to a string content, to it; to parts, to the last part when
 * that is a `text` part, else as a new `text` part after them.
 */
export function appendText(content: TurnContent, text: string): { readonly content: TurnContent; readonly place: DeltaPlace } {
  return appendPiece(content, { kind: 'text', text });
}

/**
 * The content with a piece appended. Text goes as appendText says. Reasoning goes to the last
 * part when that is a `reasoning` part, else into a new `reasoning` part after the others; a
 * string content becomes parts for it (its text a `text` part first, unless it is empty).
 */
export function appendPiece(content: TurnContent, piece: Piece): { readonly content: TurnContent; readonly place: DeltaPlace } {
  const { kind, text } = piece;
  if (typeof content === 'string') {
    if (kind === 'text') return { content: content + text, place: { at: content.length } };
    const before: Part[] = content === '' ? [] : [{ type: 'text', text: content }];
    return { content: [...before, { type: 'reasoning', text }], place: { at: 0, part: before.length } };
  }
  const last = content[content.length - 1];
  if (last !== undefined && last.type === kind) {
    const parts: Part[] = content.slice(0, -1);
    parts.push({ type: kind, text: last.text + text });
    return { content: parts, place: { at: last.text.length, part: content.length - 1 } };
  }
  return { content: [...content, { type: kind, text }], place: { at: 0, part: content.length } };
}

/**
 * A turn's JSON ends with `,"status":"<status>","createdAt":"<24 characters>"}` (turnRecord's
 * order), so a stored turn is streaming when these bytes sit 61 bytes from its end.
 */
export const STREAMING_MARK = ',"status":"streaming"';
export const STREAMING_MARK_FROM_END = 61;

/** Whether a turn's JSON (as turnRecord lays it out) says `status: "streaming"`. */
export function isStreamingJson(json: Buffer): boolean {
  const n = json.length;
  return n > STREAMING_MARK_FROM_END && json.toString('latin1', n - STREAMING_MARK_FROM_END, n - STREAMING_MARK_FROM_END + STREAMING_MARK.length) === STREAMING_MARK;
}
