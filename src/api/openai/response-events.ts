// The stream of a response, as OpenAI's SDKs read it: response.created and .in_progress, then
// each output item (added, its content part added, its deltas, its text done, its part done, the
// item done), then response.completed (or .failed, .incomplete) with the whole response; every
// event with its `type` and a `sequence_number` that goes up by one. Reasoning is an item of its
// own while it comes before the answer (later reasoning is in the final response only: an item
// once done is not opened again); tool calls come whole at the end, each its arguments in one delta.
import type { Piece } from '../../domain/deltas.js';
import type { JsonObject, Turn } from '../../domain/records.js';
import { messageItem, outputText, reasoningItem, replyItems, responseObject } from './items.js';

/** The item open in the stream: what it is, where it is, what it has said. */
interface Open {
  readonly kind: 'reasoning' | 'message';
  readonly index: number;
  text: string;
}

export class ResponseEvents {
  private seq = 0;
  private next = 0;
  private open: Open | undefined;
  private readonly done = new Set<'reasoning' | 'message'>();

  constructor(private readonly turnId: string) {}

  private event(type: string, fields: JsonObject): string {
    return `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: this.seq++, ...fields })}\n\n`;
  }

  /** The response begun: created, then in progress. */
  start(begun: Turn): string {
    const r = responseObject(begun);
    return this.event('response.created', { response: r }) + this.event('response.in_progress', { response: r });
  }

  /** A piece of the reply: its item opened if need be, then its delta. */
  piece(p: Piece): string {
    let out = '';
    const kind = p.kind === 'text' ? 'message' : 'reasoning';
    if (this.open?.kind !== kind) {
      // reasoning after the answer began has no item left to go to: it is in the final response
      if (this.done.has(kind) || (kind === 'reasoning' && this.done.has('message')) || (kind === 'reasoning' && this.open?.kind === 'message')) return '';
      out += this.close();
      out += this.openItem(kind);
    }
    const o = this.open as Open;
    o.text += p.text;
    const itemId = kind === 'message' ? `msg_${this.turnId}` : `rs_${this.turnId}`;
    if (kind === 'message') out += this.event('response.output_text.delta', { item_id: itemId, output_index: o.index, content_index: 0, delta: p.text, logprobs: [] });
    else out += this.event('response.reasoning_text.delta', { item_id: itemId, output_index: o.index, content_index: 0, delta: p.text });
    return out;
  }

  private openItem(kind: 'reasoning' | 'message'): string {
    const index = this.next++;
    this.open = { kind, index, text: '' };
    if (kind === 'message') {
      const id = `msg_${this.turnId}`;
      return (
        this.event('response.output_item.added', { output_index: index, item: { id, type: 'message', status: 'in_progress', role: 'assistant', content: [] } }) +
        this.event('response.content_part.added', { item_id: id, output_index: index, content_index: 0, part: outputText('') })
      );
    }
    const id = `rs_${this.turnId}`;
    return (
      this.event('response.output_item.added', { output_index: index, item: { id, type: 'reasoning', summary: [], content: [] } }) +
      this.event('response.content_part.added', { item_id: id, output_index: index, content_index: 0, part: { type: 'reasoning_text', text: '' } })
    );
  }

  /** Closes the open item: its text done, its part done, the item done. */
  private close(): string {
    const o = this.open;
    if (o === undefined) return '';
    this.open = undefined;
    this.done.add(o.kind);
    if (o.kind === 'message') {
      const id = `msg_${this.turnId}`;
      return (
        this.event('response.output_text.done', { item_id: id, output_index: o.index, content_index: 0, text: o.text, logprobs: [] }) +
        this.event('response.content_part.done', { item_id: id, output_index: o.index, content_index: 0, part: outputText(o.text) }) +
        this.event('response.output_item.done', { output_index: o.index, item: messageItem(this.turnId, o.text) })
      );
    }
    const id = `rs_${this.turnId}`;
    return (
      this.event('response.reasoning_text.done', { item_id: id, output_index: o.index, content_index: 0, text: o.text }) +
      this.event('response.content_part.done', { item_id: id, output_index: o.index, content_index: 0, part: { type: 'reasoning_text', text: o.text } }) +
      this.event('response.output_item.done', { output_index: o.index, item: reasoningItem(this.turnId, o.text) })
    );
  }

  /**
   * The end: the open item closed, the reply's tool calls (each added, its arguments, done), then
   * the response as recorded. The final output lists what was streamed in the order it was
   * streamed, then what was not (reasoning that came after the answer), so every streamed item
   * keeps its place.
   */
  end(t: Turn): string {
    let out = this.close();
    const streamed: JsonObject[] = [];
    const all = replyItems(t);
    const calls = all.filter((i) => i['type'] === 'function_call');
    // an answer that never said a word still has its (empty) message, as a waiting request's does
    if (!this.done.has('message') && all.some((i) => i['type'] === 'message') && t.status === 'complete') {
      out += this.openItem('message');
      out += this.close();
    }
    for (const kind of ['reasoning', 'message'] as const) {
      if (!this.done.has(kind)) continue;
      const item = all.find((i) => i['type'] === kind);
      if (item !== undefined) streamed.push(item);
    }
    for (const c of calls) {
      const index = this.next++;
      const id = c['id'] as string;
      const args = c['arguments'] as string;
      out += this.event('response.output_item.added', { output_index: index, item: { ...c, status: 'in_progress', arguments: '' } });
      out += this.event('response.function_call_arguments.delta', { item_id: id, output_index: index, delta: args });
      out += this.event('response.function_call_arguments.done', { item_id: id, output_index: index, name: c['name'] as string, arguments: args });
      out += this.event('response.output_item.done', { output_index: index, item: c });
      streamed.push(c);
    }
    const rest = all.filter((i) => !streamed.includes(i));
    const response = responseObject(t, { output: [...streamed, ...rest] });
    const type = response['status'] === 'completed' ? 'response.completed' : response['status'] === 'incomplete' ? 'response.incomplete' : 'response.failed';
    return out + this.event(type, { response });
  }
}
