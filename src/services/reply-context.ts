// What of a conversation is sent to the model: the path to the turn answered, read oldest first,
// keeping the newest turns that fit in REPLY_CONTEXT_MAX. Turns are dropped whole, from the oldest
// end, as they are read, and kept as the bytes the store gave until the end (only those kept are
// ever parsed), so however long the path, a reply holds at most the bound (and one chunk of the
// read) of it. System turns go last, the turn answered never (nor, when it answers tool calls,
// the turn that made them), and a tool call and its results go together.
import type { Part, Turn, TurnContent, TurnRole } from '../domain/records.js';
import { answeredCalls, type ReplyMessage } from '../providers/wire.js';

interface Kept {
  /** The turn as stored, parsed when it had to be (or at the end, once it is sure to be sent). */
  readonly json: Buffer;
  turn: Turn | undefined;
  readonly role: TurnRole;
  readonly bytes: number;
  /** Its place on the path. */
  readonly at: number;
}

// In a turn's JSON (turnRecord's order) a string's quotes are escaped, so these bytes are found
// only as the field they name: `role` the first time (before the content), `status` the last.
const ROLE = Buffer.from(',"role":"');
const STATUS = Buffer.from(',"status":"');

/** The value of the string field that `mark` opens at `at` in `json`. */
function fieldAt(json: Buffer, mark: Buffer, at: number): string {
  const from = at + mark.length;
  return json.toString('latin1', from, json.indexOf(0x22, from));
}

export class ContextWindow {
  /** The system turns kept, and the others, each oldest first. */
  private readonly systems: Kept[] = [];
  private readonly others: Kept[] = [];
  /** Where `others` starts (dropped entries are skipped, not spliced: dropping is O(1)). */
  private first = 0;
  private bytes = 0;
  private seen = 0;
  /** Whether any turn was dropped. */
  cut = false;

  constructor(private readonly maxBytes: number) {}

  /** The next turn of the path (oldest first), as stored; `turn` when it was parsed already. */
  add(json: Buffer, turn?: Turn): void {
    // a turn that ended in error is never sent (told without parsing it)
    const status = turn?.status ?? fieldAt(json, STATUS, json.lastIndexOf(STATUS));
    if (status === 'error') return;
    const role = turn?.role ?? (fieldAt(json, ROLE, json.indexOf(ROLE)) as TurnRole);
    const kept: Kept = { json, turn, role, bytes: json.length, at: this.seen++ };
    (role === 'system' ? this.systems : this.others).push(kept);
    this.bytes += kept.bytes;
    while (this.bytes > this.maxBytes && this.dropOne());
    // a long path's dropped entries are let go now and then (the array is not copied per drop)
    if (this.first > 1024 && this.first * 2 > this.others.length) {
      this.others.splice(0, this.first);
      this.first = 0;
    }
  }

  /** Drops the oldest turn that may go: false when none may. */
  private dropOne(): boolean {
    if (this.first < this.protectedFrom()) {
      const dropped = this.others[this.first] as Kept;
      this.bytes -= dropped.bytes;
      // (its bytes are let go at once)
      this.others[this.first++] = { ...dropped, json: EMPTY, turn: undefined };
      this.cut = true;
      return true;
    }
    // the system turns go last, the oldest first
    const system = this.systems.shift();
    if (system === undefined) return false;
    this.bytes -= system.bytes;
    this.cut = true;
    return true;
  }

  /**
   * Where the turns that are never dropped start among `others`: the newest (the turn answered);
   * when the newest are tool turns, the assistant turn whose calls they answer too.
   */
  private protectedFrom(): number {
    let i = this.others.length - 1;
    while (i > this.first && (this.others[i] as Kept).role === 'tool') i--;
    const head = this.others[i] as Kept | undefined;
    if (head !== undefined && i < this.others.length - 1 && head.role === 'assistant') return i;
    return this.others.length - 1;
  }

  /**
   * The messages to send, in path order, without turns that said nothing and without reasoning
   * parts (never sent), with tool calls and results paired (a result whose call was dropped goes
   * too); after a cut, the history starts at a user turn, as every protocol wants.
   */
  messages(): ReplyMessage[] {
    let others = this.others.slice(this.first);
    if (this.cut) {
      const protectedAt = this.protectedFrom() - this.first;
      let start = 0;
      while (start < protectedAt && (others[start] as Kept).role !== 'user') start++;
      others = others.slice(start);
    }
    const out: ReplyMessage[] = [];
    for (const k of [...this.systems, ...others].sort((a, b) => a.at - b.at)) {
      const turn = k.turn ?? (JSON.parse(k.json.toString('utf8')) as Turn);
      const content: TurnContent = typeof turn.content === 'string' ? turn.content : turn.content.filter((p: Part) => p.type !== 'reasoning');
      if (content.length === 0) continue;
      out.push({ role: turn.role, content });
    }
    return answeredCalls(out);
  }
}

const EMPTY = Buffer.alloc(0);
