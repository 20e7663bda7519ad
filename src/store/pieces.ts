// A streaming turn's deltas, kept apart from its JSON while it streams: each delta is a row of
// its own (its pieces, and the turn's bytes and content end with them), so a delta writes what
// it adds whatever the turn's length. Reads fold the rows into the turn's JSON; the edit that
// ends the turn (or any edit) folds them into the turn's row for good. Both engines store the
// rows this way (sqlite and PostgreSQL `turn_pieces`).
import { appendPieces, contentEnd, type ContentEnd, type Piece } from '../domain/deltas.js';
import { turnRecord, type Turn } from '../domain/records.js';

/**
 * What the writer needs of a streaming turn to append to it: the UTF-8 bytes of its JSON with
 * its text so far, where its content ends, and the number of its last delta (0: none since it
 * was created or last edited).
 */
export interface Tail {
  readonly bytes: number;
  readonly end: ContentEnd;
  readonly seq: number;
}

/** The tail of a streaming turn whose JSON is read whole (created or edited, no delta since). */
export function tailOfJson(json: Buffer): Tail {
  const turn = JSON.parse(json.toString('utf8')) as Turn;
  return { bytes: json.length, end: contentEnd(turn.content), seq: 0 };
}

/** A delta row's pieces, as stored: a JSON array of `{kind, text}`. */
export function piecesText(pieces: readonly Piece[]): string {
  return JSON.stringify(pieces.map((p) => ({ kind: p.kind, text: p.text })));
}

/** A delta row's content end, as stored. */
export function endText(end: ContentEnd): string {
  return JSON.stringify(end);
}

/** A tail from a delta row's columns (written by endText: this service's own rows). */
export function tailOfRow(seq: number, bytes: number, end: string): Tail {
  return { seq, bytes, end: JSON.parse(end) as ContentEnd };
}

/**
 * A turn's JSON with its deltas folded in: `joined` is the `pieces` of its delta rows, in
 * order, joined by commas (what each engine's read gives beside the turn's row, in the same
 * statement so both are of one moment); null or undefined: it has none, and the JSON is as stored.
 * The result is the JSON a turn that took each delta into its row would have: the same bytes.
 */
export function withDeltas(json: Buffer, joined: string | null | undefined): Buffer {
  if (joined === null || joined === undefined || joined === '') return json;
  const turn = JSON.parse(json.toString('utf8')) as Turn;
  const rows = JSON.parse(`[${joined}]`) as Piece[][];
  return Buffer.from(JSON.stringify(turnRecord({ ...turn, content: appendPieces(turn.content, rows.flat()) })));
}
