// List answers: a page (`limit` given) or the spec's whole list, streamed in pieces as the
// client reads them (it may be any size). Items are the JSON the store keeps, joined without
// being parsed or serialized again, and never copied into one buffer with the rest: small items
// are gathered into pieces of up to PIECE_BYTES, a larger one is written as it is kept, so an
// answer costs the server a piece or two of memory whatever the client's pace.
import { LIST_CLOSE, LIST_OPEN, pageClose } from './envelope.js';
import type { Answer, Reply } from './route.js';

const COMMA = Buffer.from(',');
/** Answers up to this size are sent whole (with a Content-Length); larger ones are streamed. */
const WHOLE_MAX = 256 * 1024;
/** Small items are gathered into pieces of about this size. */
const PIECE_BYTES = 64 * 1024;

type Json = string | Buffer;

const sizeOf = (j: Json): number => (typeof j === 'string' ? j.length : j.length);

/**
 * Items already JSON as pieces, with commas between them (and one before them when they continue
 * a list): text pieces for text items (sessions), byte pieces for byte items (turns), an item of
 * PIECE_BYTES or more on its own, as it is kept.
 */
function* piecesOf(items: readonly Json[], continuing: boolean): Generator<Json> {
  let text = '';
  let parts: Buffer[] = [];
  let size = 0;
  const flush = function* (): Generator<Json> {
    if (text !== '') yield text;
    if (parts.length > 0) yield parts.length === 1 ? (parts[0] as Buffer) : Buffer.concat(parts, size);
    text = '';
    parts = [];
    size = 0;
  };
  for (let i = 0; i < items.length; i++) {
    const item = items[i] as Json;
    const comma = continuing || i > 0;
    if (typeof item === 'string') {
      text += comma ? `,${item}` : item;
      if (text.length >= PIECE_BYTES) yield* flush();
      continue;
    }
    if (comma) {
      parts.push(COMMA);
      size++;
    }
    if (item.length >= PIECE_BYTES) {
      yield* flush();
      yield item;
      continue;
    }
    parts.push(item);
    size += item.length;
    if (size >= PIECE_BYTES) yield* flush();
  }
  yield* flush();
}

/** `open`, the items and `close` as one body: text if all of it is text. */
function whole(open: string, items: readonly Json[], close: string): Json {
  const pieces = [...piecesOf(items, false)];
  if (pieces.every((p) => typeof p === 'string')) return `${open}${pieces.join('')}${close}`;
  return Buffer.concat([Buffer.from(open), ...pieces.map((p) => (typeof p === 'string' ? Buffer.from(p) : p)), Buffer.from(close)]);
}

const totalOf = (items: readonly Json[]): number => items.reduce((n, j) => n + sizeOf(j) + 1, 0);

/** Lets other requests run: a list yields to the event loop between the chunks it reads from the store. */
const yieldToOthers = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/**
 * One page: `{"success":true,"data":[...],"nextCursor":...}`, streamed when it is large (a page
 * of large turns), so it is never copied whole.
 */
export function pageReply(items: readonly Json[], nextCursor: string | undefined): Answer {
  const close = pageClose(nextCursor);
  if (totalOf(items) <= WHOLE_MAX) return { status: 200, body: whole(LIST_OPEN, items, close) } satisfies Reply;
  async function* stream(): AsyncIterable<Json> {
    yield LIST_OPEN;
    yield* piecesOf(items, false);
    yield close;
  }
  return { status: 200, stream: stream() };
}

/**
 * The whole list: `{"success":true,"data":[...]}`. A short list is answered whole; a longer one
 * is streamed, each chunk read from the store only once the client has taken the one before,
 * and the event loop free between chunks, however many items a filter leaves out of them.
 * `fromSnapshot`: the chunks hold a snapshot of the store until they end (not so for pages read
 * one after another).
 */
export async function wholeListReply<T>(chunks: AsyncIterable<readonly T[]>, jsonOf: (item: T) => Json, fromSnapshot = true): Promise<Answer> {
  const it = chunks[Symbol.asyncIterator]();
  const first = await it.next();
  const firstItems = first.done === true ? [] : first.value.map(jsonOf);
  const second = first.done === true ? first : await it.next();
  if (second.done === true && totalOf(firstItems) <= WHOLE_MAX) return { status: 200, body: whole(LIST_OPEN, firstItems, LIST_CLOSE) };
  let started = false;
  async function* pieces(): AsyncIterable<Json> {
    started = true;
    try {
      yield LIST_OPEN;
      yield* piecesOf(firstItems, false);
      let sent = firstItems.length;
      let next = second;
      while (next.done !== true) {
        const items = next.value.map(jsonOf);
        yield* piecesOf(items, sent > 0);
        sent += items.length;
        await yieldToOthers();
        next = await it.next();
      }
      yield LIST_CLOSE;
    } finally {
      await it.return?.();
    }
  }
  // a generator never started runs no `finally`: what the store holds is given back here instead
  const cancel = async (): Promise<void> => {
    if (!started) await it.return?.();
  };
  return fromSnapshot ? { status: 200, stream: pieces(), wholeList: true, cancel } : { status: 200, stream: pieces(), cancel };
}
