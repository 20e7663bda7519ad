// When a message of an OpenAI-style request is a turn the session already holds: the roles are
// equal, the text parts joined are equal (and the files, so an edited image makes a branch), and
// for an assistant its tool calls are equal by id, or by name and arguments; a tool turn's
// results by the call they answer and what they say. Reasoning is never compared (clients drop
// it). A path of such keys hashes to what the door's index finds a conversation by.
import { createHash } from 'node:crypto';
import type { JsonValue, Part, Turn, TurnContent, TurnRole } from './records.js';

/** A message of the request, as the turn it would be recorded as. */
export interface DoorMessage {
  readonly role: TurnRole;
  readonly content: TurnContent;
}

const parts = (c: TurnContent): readonly Part[] => (typeof c === 'string' ? [{ type: 'text', text: c }] : c);

/** JSON with object keys sorted, so arguments a client wrote out again in another order (or spacing) compare equal. */
export function canonicalJson(v: JsonValue): string {
  if (v === null || typeof v !== 'object') return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  const o = v as { readonly [k: string]: JsonValue };
  return `{${Object.keys(o)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${canonicalJson(o[k] as JsonValue)}`)
    .join(',')}}`;
}

/** Arguments as compared: JSON text parsed (a string that is not JSON stays itself). */
function canonicalArguments(v: JsonValue): string {
  if (typeof v === 'string') {
    try {
      return canonicalJson(JSON.parse(v) as JsonValue);
    } catch {
      return JSON.stringify(v);
    }
  }
  return canonicalJson(v);
}

/** What of a content is compared: its text joined, its files, its calls (id, and name with arguments) and its results. */
interface Key {
  readonly text: string;
  readonly files: readonly string[];
  readonly calls: readonly { readonly id: string; readonly call: string }[];
  readonly results: readonly string[];
}

function keyOf(content: TurnContent): Key {
  const text: string[] = [];
  const files: string[] = [];
  const calls: { id: string; call: string }[] = [];
  const results: string[] = [];
  for (const p of parts(content)) {
    if (p.type === 'text') text.push(p.text);
    else if (p.type === 'file') files.push(p.url ?? createHash('sha256').update(p.data ?? '').digest('base64url'));
    else if (p.type === 'tool_call') calls.push({ id: p.id, call: `${p.name}(${canonicalArguments(p.arguments)})` });
    else if (p.type === 'tool_result') results.push(`${p.toolCallId}=${canonicalJson(p.content)}`);
  }
  return { text: text.join(''), files, calls, results };
}

const sameList = (a: readonly string[], b: readonly string[]): boolean => a.length === b.length && a.every((x, i) => x === b[i]);

/** Whether a recorded turn is this message (the door's rule). */
export function sameTurn(turn: Pick<Turn, 'role' | 'content'>, message: DoorMessage): boolean {
  if (turn.role !== message.role) return false;
  const a = keyOf(turn.content);
  const b = keyOf(message.content);
  if (a.text !== b.text || !sameList(a.files, b.files) || !sameList(a.results, b.results) || a.calls.length !== b.calls.length) return false;
  const byId = a.calls.every((c, i) => c.id === (b.calls[i] as { id: string }).id);
  return byId || a.calls.every((c, i) => c.call === (b.calls[i] as { call: string }).call);
}

/** The hash of a path after one more turn: what the path's hash was, and the turn's key (ids of calls left out). */
export function pathHash(before: string, turn: Pick<Turn, 'role' | 'content'>): string {
  const k = keyOf(turn.content);
  const line = JSON.stringify([turn.role, k.text, k.files, k.calls.map((c) => c.call), k.results]);
  return createHash('sha256').update(before).update('\n').update(line).digest('base64url');
}

/** The hash of each path from the root through the messages: [h(m0), h(m0, m1), ...]. */
export function pathHashes(messages: readonly Pick<Turn, 'role' | 'content'>[]): string[] {
  const out: string[] = [];
  let h = '';
  for (const m of messages) {
    h = pathHash(h, m);
    out.push(h);
  }
  return out;
}
