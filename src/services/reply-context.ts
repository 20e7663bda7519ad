// What of a conversation is sent to the model: the path to the turn answered, read oldest first,
// keeping the newest turns that fit in REPLY_CONTEXT_MAX. Turns are dropped whole, from the oldest
// end, as they are read, so however long the path, a reply holds at most the bound (and one
// chunk of the read) of it. System turns go last, the turn answered never (nor, when it answers
// tool calls, the turn that made them), and a tool call and its results go together.
import type { TurnContent, TurnRole } from '../domain/records.js';
import { answeredCalls, type ReplyMessage } from '../providers/wire.js';

interface Kept {
  readonly message: ReplyMessage;
  readonly bytes: number;
  /** Its place on the path. */
  readonly at: number;
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

  /** The next turn of the path (oldest first), of `bytes` as stored. */
  add(role: TurnRole, content: TurnContent, bytes: number): void {
    const kept = { message: { role, content }, bytes, at: this.seen++ };
    (role === 'system' ? this.systems : this.others).push(kept);
    this.bytes += bytes;
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
      this.drop(this.others, this.first++);
      return true;
    }
    // the system turns go last, the oldest first
    if (this.systems.length > 0) {
      this.drop(this.systems, 0);
      this.systems.shift();
      return true;
    }
    return false;
  }

  private drop(list: Kept[], i: number): void {
    this.bytes -= (list[i] as Kept).bytes;
    this.cut = true;
  }

  /**
   * Where the turns that are never dropped start among `others`: the newest (the turn answered);
   * when the newest are tool turns, the assistant turn whose calls they answer too.
   */
  private protectedFrom(): number {
    let i = this.others.length - 1;
    while (i > this.first && (this.others[i] as Kept).message.role === 'tool') i--;
    const head = this.others[i] as Kept | undefined;
    if (head !== undefined && i < this.others.length - 1 && head.message.role === 'assistant') return i;
    return this.others.length - 1;
  }

  /**
   * The messages to send, in path order, with tool calls and results paired (a result whose call
   * was dropped goes too); after a cut, the history starts at a user turn, as every protocol wants.
   */
  messages(): ReplyMessage[] {
    let others = this.others.slice(this.first);
    if (this.cut) {
      const protectedAt = this.protectedFrom() - this.first;
      let start = 0;
      while (start < protectedAt && (others[start] as Kept).message.role !== 'user') start++;
      others = others.slice(start);
    }
    const all = [...this.systems, ...others].sort((a, b) => a.at - b.at);
    return answeredCalls(all.map((k) => k.message));
  }
}
