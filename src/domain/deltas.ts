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

/**
 * Where a streaming turn's content ends: all a delta needs to place its pieces and to count
 * what they add to the turn's JSON, without the text before them.
 */
export interface ContentEnd {
  /** null: the content is a string; else how many parts it has. */
  readonly parts: number | null;
  /** The type of the last part (null for a string content, or no parts). */
  readonly last: string | null;
  /** UTF-16 length of the text a piece would continue: the string content, or the last part's text when it is a `text` or `reasoning` part (else 0). */
  readonly length: number;
  /**
   * That text ends with a high surrogate. JSON.stringify escapes a lone surrogate (6 bytes
   * each), so a piece that starts with the low half completes one character of 4 UTF-8 bytes
   * where the two apart took 12.
   */
  readonly high: boolean;
}

const isHigh = (unit: number): boolean => unit >= 0xd800 && unit <= 0xdbff;
const isLow = (unit: number): boolean => unit >= 0xdc00 && unit <= 0xdfff;

/** UTF-8 bytes of `text` inside a JSON string (JSON.stringify's escapes), without the quotes. */
function escapedBytes(text: string): number {
  return Buffer.byteLength(JSON.stringify(text)) - 2;
}

/** UTF-8 bytes of a new part `{"type":kind,"text":text}` in a turn's JSON. */
function partBytes(kind: PieceKind, text: string): number {
  return Buffer.byteLength(JSON.stringify({ type: kind, text }));
}

/** Where `content` ends (read once, from the whole content: a turn created or edited streaming). */
export function contentEnd(content: TurnContent): ContentEnd {
  if (typeof content === 'string') return { parts: null, last: null, length: content.length, high: content.length > 0 && isHigh(content.charCodeAt(content.length - 1)) };
  const last = content[content.length - 1];
  if (last === undefined) return { parts: 0, last: null, length: 0, high: false };
  const text = last.type === 'text' || last.type === 'reasoning' ? last.text : '';
  return { parts: content.length, last: last.type, length: text.length, high: text.length > 0 && isHigh(text.charCodeAt(text.length - 1)) };
}

/**
 * A piece appended where a content ends, as appendPiece appends it: where it goes, where the
 * content then ends, and how many bytes it adds to the turn's JSON (JSON.stringify's, to the
 * byte). Its cost is the piece's, whatever the length of the text before it.
 */
export function appendToEnd(end: ContentEnd, piece: Piece): { readonly end: ContentEnd; readonly place: DeltaPlace; readonly bytes: number } {
  const { kind, text } = piece;
  /** Whether the text then ends with a high surrogate: the piece's last unit, or (an empty piece) what it continues. */
  const endsHigh = (before: boolean): boolean => (text.length > 0 ? isHigh(text.charCodeAt(text.length - 1)) : before);
  /** The piece continues the text that ends the content: its escaped bytes, less what joining a surrogate pair saves. */
  const continued = (): number => escapedBytes(text) - (end.high && text.length > 0 && isLow(text.charCodeAt(0)) ? 8 : 0);
  if (end.parts === null) {
    if (kind === 'text') {
      return { end: { parts: null, last: null, length: end.length + text.length, high: endsHigh(end.high) }, place: { at: end.length }, bytes: continued() };
    }
    // a string becomes parts: `"s"` -> `[{"type":"text","text":"s"},{"type":"reasoning","text":...}]`, or `""` -> `[{...}]`
    const before = end.length === 0 ? 0 : 1;
    const wrapped = before === 0 ? 0 : '{"type":"text","text":'.length + '},'.length;
    return { end: { parts: before + 1, last: kind, length: text.length, high: endsHigh(false) }, place: { at: 0, part: before }, bytes: '[]'.length + wrapped + partBytes(kind, text) - (before === 0 ? '""'.length : 0) };
  }
  if (end.last === kind) {
    return { end: { parts: end.parts, last: kind, length: end.length + text.length, high: endsHigh(end.high) }, place: { at: end.length, part: end.parts - 1 }, bytes: continued() };
  }
  return { end: { parts: end.parts + 1, last: kind, length: text.length, high: endsHigh(false) }, place: { at: 0, part: end.parts }, bytes: (end.parts > 0 ? 1 : 0) + partBytes(kind, text) };
}

/** A tool call of a reply and where it came: after the first `at` characters of the reply's text and reasoning. */
export interface PlacedCall {
  readonly at: number;
  readonly part: Extract<Part, { type: 'tool_call' }>;
}

/**
 * The content with each tool call put where it came among the text and reasoning (which came as
 * pieces and were joined in their parts): a part that a call came in the middle of is cut there.
 * Calls past the text's end (text cut to fit) go last, in order.
 */
export function withToolCalls(content: TurnContent, calls: readonly PlacedCall[]): TurnContent {
  if (calls.length === 0) return content;
  const parts: readonly Part[] = typeof content === 'string' ? (content === '' ? [] : [{ type: 'text', text: content }]) : content;
  const out: Part[] = [];
  let seen = 0;
  let k = 0;
  for (const p of parts) {
    if (p.type !== 'text' && p.type !== 'reasoning') {
      out.push(p);
      continue;
    }
    let from = 0;
    for (; k < calls.length && (calls[k] as PlacedCall).at < seen + p.text.length; k++) {
      const cut = Math.max((calls[k] as PlacedCall).at - seen, 0);
      if (cut > from) out.push({ type: p.type, text: p.text.slice(from, cut) });
      from = Math.max(from, cut);
      out.push((calls[k] as PlacedCall).part);
    }
    if (from === 0) out.push(p);
    else if (from < p.text.length) out.push({ type: p.type, text: p.text.slice(from) });
    seen += p.text.length;
  }
  for (; k < calls.length; k++) out.push((calls[k] as PlacedCall).part);
  return out;
}

/**
 * The content with `pieces` appended in order (appendPiece's rules), in time linear in the
 * content and the pieces: the parts are copied once, and each run of pieces of one kind is joined
 * once (appendPiece in a loop copies the parts for every piece).
 */
export function appendPieces(content: TurnContent, pieces: readonly Piece[]): TurnContent {
  let i = 0;
  let c = content;
  if (typeof c === 'string') {
    const texts = [c];
    for (; i < pieces.length && (pieces[i] as Piece).kind === 'text'; i++) texts.push((pieces[i] as Piece).text);
    c = texts.length === 1 ? c : texts.join('');
    if (i === pieces.length) return c;
    // a reasoning piece: the string becomes parts
    c = appendPiece(c, pieces[i++] as Piece).content;
    if (i === pieces.length) return c;
  }
  // (appendPiece made parts of a string that met a reasoning piece)
  const parts: Part[] = (c as readonly Part[]).slice();
  /** Texts to join onto the last part, which is of their kind. */
  let run: string[] = [];
  const flush = (): void => {
    if (run.length === 0) return;
    const last = parts[parts.length - 1] as Extract<Part, { type: PieceKind }>;
    parts[parts.length - 1] = { type: last.type, text: last.text + run.join('') };
    run = [];
  };
  for (; i < pieces.length; i++) {
    const p = pieces[i] as Piece;
    if (parts[parts.length - 1]?.type === p.kind) run.push(p.text);
    else {
      flush();
      parts.push({ type: p.kind, text: p.text });
    }
  }
  flush();
  return parts;
}
