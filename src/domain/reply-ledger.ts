// What of a reply's text the store holds, as a small state machine over its pieces: each piece is
// pending (told, not yet written), in flight (a write took it), recorded (the write committed), or
// in doubt (the write failed without saying whether it committed). A piece is never written twice:
// pieces in doubt wait until the turn read back says by its text's length whether they landed.
import type { Piece } from './deltas.js';
import type { TurnContent } from './records.js';

/** The characters of a content's text and reasoning (what its pieces add up to). */
export function charsOfContent(content: TurnContent): number {
  if (typeof content === 'string') return content.length;
  let n = 0;
  for (const p of content) if (p.type === 'text' || p.type === 'reasoning') n += p.text.length;
  return n;
}

function charsOf(pieces: readonly Piece[]): number {
  let n = 0;
  for (const p of pieces) n += p.text.length;
  return n;
}

/** What the store does not hold yet of a reply, as a value its end's write carries (./reply-end.ts). */
export interface Unrecorded {
  /** The pieces not known to be recorded, in order. */
  readonly pending: readonly Piece[];
  /** How many at their head are in doubt (a write whose answer was lost), and their characters. */
  readonly doubt: { readonly pieces: number; readonly chars: number } | undefined;
  /** The characters of text and reasoning known to be recorded. */
  readonly recorded: number;
}

/** The pieces of `u` to write onto `stored` (the turn as the write reads it): those in doubt that landed there are left out. */
export function unrecordedOn(u: Unrecorded, stored: TurnContent): readonly Piece[] {
  const d = u.doubt;
  return d !== undefined && charsOfContent(stored) === u.recorded + d.chars ? u.pending.slice(d.pieces) : u.pending;
}

/**
 * One reply's pieces between the provider and the store. Transitions: `tell` (-> pending),
 * `take` (pending -> in flight), then `committed` (-> recorded), `lost` (-> in doubt, and
 * pending again at the head, in order) or `refused` (dropped: the write will never be made);
 * `settle` (in doubt -> recorded, or pending when they did not land) once the stored turn is read.
 */
export class ReplyLedger {
  private pending: Piece[] = [];
  private inFlight: readonly Piece[] | undefined;
  /** How many pieces at the head of `pending` are in doubt, and their characters. */
  private doubt: { readonly pieces: number; readonly chars: number } | undefined;
  private recorded: number;

  /** `content`: what the store holds of the turn when the reply starts. */
  constructor(content: TurnContent) {
    this.recorded = charsOfContent(content);
  }

  /** Characters of text and reasoning the store holds (every recorded piece, in order). */
  get recordedChars(): number {
    return this.recorded;
  }

  get pendingPieces(): number {
    return this.pending.length;
  }

  /** Pieces whose write failed without saying whether it committed: settle them (by reading the turn) before the next write. */
  get inDoubt(): boolean {
    return this.doubt !== undefined;
  }

  tell(piece: Piece): void {
    this.pending.push(piece);
  }

  /** The pieces the next write carries (all pending ones); none while some are in doubt or a write is in flight. */
  take(): readonly Piece[] {
    if (this.doubt !== undefined || this.inFlight !== undefined || this.pending.length === 0) return [];
    const pieces = this.pending;
    this.pending = [];
    this.inFlight = pieces;
    return pieces;
  }

  /** The write in flight committed. */
  committed(): void {
    this.recorded += charsOf(this.inFlight ?? []);
    this.inFlight = undefined;
  }

  /** The write in flight failed for a reason that may have come after its commit (a lost answer): its pieces are in doubt. */
  lost(): void {
    const pieces = this.inFlight ?? [];
    this.inFlight = undefined;
    if (pieces.length === 0) return;
    this.pending = [...pieces, ...this.pending];
    this.doubt = { pieces: pieces.length, chars: charsOf(pieces) };
  }

  /** The write in flight was refused for good: its pieces are never written. */
  refused(): void {
    this.inFlight = undefined;
  }

  /**
   * The turn as read back (undefined: gone) settles what was in doubt: the pieces landed when its
   * text is as long as what was recorded and them.
   */
  settle(stored: TurnContent | undefined): void {
    const d = this.doubt;
    if (d === undefined) return;
    this.doubt = undefined;
    if (stored !== undefined && charsOfContent(stored) === this.recorded + d.chars) {
      this.pending = this.pending.slice(d.pieces);
      this.recorded += d.chars;
    }
  }

  /**
   * Everything not yet recorded, for the end's write onto `stored` (the turn as the end reads it,
   * perhaps more than once while the store is away): pieces in doubt that landed there are left out.
   */
  unrecorded(stored: TurnContent): readonly Piece[] {
    return unrecordedOn(this.value(), stored);
  }

  /** Everything not yet recorded as a value (a copy: the ledger may go on), for a write decided at the serial point. */
  value(): Unrecorded {
    return { pending: this.pending.slice(), doubt: this.doubt, recorded: this.recorded };
  }

  /** Drops everything not recorded (the reply was refused for good). */
  clear(): void {
    this.pending = [];
    this.doubt = undefined;
  }
}
