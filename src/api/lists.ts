// List answers: a page, built whole (`limit` given, so it is small), or the spec's whole list,
// streamed in pieces as the client reads it (it may be any size). Items are the JSON the store
// keeps, joined without being parsed or serialized again.
import type { Answer, Reply } from '../http/route.js';
import { DATA_OPEN } from '../http/envelope.js';

const OPEN_TEXT = `${DATA_OPEN}[`;
const COMMA = Buffer.from(',');

/**
 * Items already JSON, joined with commas (and one before them when they continue a list): text
 * when they are text (sessions), bytes when they are bytes (turns).
 */
function joined(items: readonly (string | Buffer)[], continuing: boolean): string | Buffer {
  if (items.length === 0) return '';
  if (typeof items[0] === 'string') {
    let text = continuing ? ',' : '';
    for (let i = 0; i < items.length; i++) text += i === 0 ? (items[i] as string) : `,${items[i] as string}`;
    return text;
  }
  const parts: Buffer[] = [];
  for (let i = 0; i < items.length; i++) {
    if (continuing || i > 0) parts.push(COMMA);
    parts.push(items[i] as Buffer);
  }
  return Buffer.concat(parts);
}

/** `open`, the items and `close` as one body: text if all of it is text. */
function body(open: string, items: string | Buffer, close: string): string | Buffer {
  return typeof items === 'string' ? `${open}${items}${close}` : Buffer.concat([Buffer.from(open), items, Buffer.from(close)]);
}

/** One page: `{"success":true,"data":[...],"nextCursor":...}`. */
export function pageReply(items: readonly (string | Buffer)[], nextCursor: string | undefined): Reply {
  return { status: 200, body: body(OPEN_TEXT, joined(items, false), `],"nextCursor":${nextCursor === undefined ? 'null' : JSON.stringify(nextCursor)}}`) };
}

/**
 * The whole list: `{"success":true,"data":[...]}`. A list that comes in one chunk is answered
 * whole; a longer one is streamed, chunk after chunk, each read from the store only once the
 * client has taken the one before.
 */
export async function wholeListReply<T>(chunks: AsyncIterable<readonly T[]>, jsonOf: (item: T) => string | Buffer): Promise<Answer> {
  const it = chunks[Symbol.asyncIterator]();
  const first = await it.next();
  const firstItems = first.done === true ? [] : first.value.map(jsonOf);
  const second = first.done === true ? first : await it.next();
  if (second.done === true) return { status: 200, body: body(OPEN_TEXT, joined(firstItems, false), ']}') };
  async function* pieces(): AsyncIterable<string | Buffer> {
    try {
      yield body(OPEN_TEXT, joined(firstItems, false), '');
      let next = second;
      while (next.done !== true) {
        const piece = joined(next.value.map(jsonOf), true);
        if (piece.length > 0) yield piece;
        next = await it.next();
      }
      yield ']}';
    } finally {
      await it.return?.();
    }
  }
  return { status: 200, stream: pieces() };
}
