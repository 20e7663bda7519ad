// The stream decoding the three clients share: bytes -> UTF-8 lines -> Server-Sent Events (the
// WHATWG rules) or NDJSON, the same whatever cuts the network puts between reads, and bounded.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { kit } from './kit.mjs';

const { LineDecoder, SseDecoder, NdjsonDecoder, StreamDecodeError, MAX_LINE_BYTES } = kit;

/** Decodes `chunks` with a fresh SseDecoder; the events as plain objects. */
function sse(chunks, max) {
  const d = new SseDecoder(max);
  const events = [];
  for (const c of chunks) d.push(Buffer.from(c), events);
  d.end(events);
  return events.map((e) => ({ ...e }));
}

function ndjson(chunks) {
  const d = new NdjsonDecoder();
  const values = [];
  for (const c of chunks) d.push(Buffer.from(c), values);
  d.end(values);
  return values;
}

/** `bytes` cut at the given offsets. */
function cutAt(bytes, ...offsets) {
  const out = [];
  let from = 0;
  for (const o of offsets) {
    out.push(bytes.subarray(from, o));
    from = o;
  }
  out.push(bytes.subarray(from));
  return out;
}

// every line ending, multi-byte characters of 2, 3 and 4 bytes, comments, names, ids, multi-line data
const STREAM = Buffer.from(
  ': keep-alive comment\r\n' +
    'event: message_start\r\n' +
    'data: {"text":"héllo"}\r\n' +
    '\r\n' +
    'data: line one €\n' +
    'data:line two 😀\n' +
    'id: 7\n' +
    '\n' +
    'event: ping\r' +
    'data\r' +
    '\r' +
    ': trailing comment\n' +
    'data: 世界\r\n\r\n',
  'utf8',
);
const EXPECTED = [
  { event: 'message_start', data: '{"text":"héllo"}', id: undefined },
  { event: 'message', data: 'line one €\nline two 😀', id: '7' },
  { event: 'ping', data: '', id: '7' },
  { event: 'message', data: '世界', id: '7' },
];

test('[D-providers-16] SSE: the same events wherever the cut between two reads falls, in CRLF pairs and UTF-8 too', () => {
  assert.deepEqual(sse([STREAM]), EXPECTED);
  for (let i = 0; i <= STREAM.length; i++) assert.deepEqual(sse(cutAt(STREAM, i)), EXPECTED, `cut at ${i}`);
});

test('SSE: the same events whatever the cuts between three reads', () => {
  for (let i = 0; i <= STREAM.length; i += 1) {
    for (let j = i; j <= STREAM.length; j += 3) assert.deepEqual(sse(cutAt(STREAM, i, j)), EXPECTED, `cuts at ${i}, ${j}`);
  }
});

test('SSE: the same events read byte by byte', () => {
  assert.deepEqual(sse([...STREAM].map((b) => Buffer.from([b]))), EXPECTED);
});

test('a CRLF cut between two reads is one line end, not a line end and a blank line', () => {
  // were the LF after a CR counted again, the blank line would dispatch `data: a` early and `event: x` would be lost
  const events = sse(['event: x\r', '\ndata: a\r', '\ndata: b\r\n\r\n']);
  assert.deepEqual(events, [{ event: 'x', data: 'a\nb', id: undefined }]);
});

test('an empty read between the CR and the LF of a CRLF keeps them one line end (regression)', () => {
  // the empty read once ended the wait for the LF, which then made a blank line and dispatched early
  assert.deepEqual(sse(['event: x\r', '', '\ndata: a\r\n\r\n']), [{ event: 'x', data: 'a', id: undefined }]);
});

test('a UTF-8 character cut between reads arrives whole (never as U+FFFD)', () => {
  const bytes = Buffer.from('data: 😀€é\n\n', 'utf8');
  for (let i = 6; i < bytes.length - 2; i++) {
    const [e] = sse(cutAt(bytes, i));
    assert.equal(e.data, '😀€é', `cut at ${i}`);
  }
});

test('SSE (WHATWG): data lines join with LF, one leading space is removed, a field without colon has an empty value', () => {
  assert.deepEqual(sse(['data:  two spaces\ndata\ndata:x\n\n']), [{ event: 'message', data: ' two spaces\n\nx', id: undefined }]);
});

test('SSE (WHATWG): a block without data is not dispatched and does not leak its event name to the next one', () => {
  assert.deepEqual(sse(['event: lonely\n\ndata: d\n\n']), [{ event: 'message', data: 'd', id: undefined }]);
});

test('SSE (WHATWG): an event not ended by a blank line when the body ends is discarded', () => {
  assert.deepEqual(sse(['data: complete\n\ndata: cut off']), [{ event: 'message', data: 'complete', id: undefined }]);
  assert.deepEqual(sse(['data: complete\n\ndata: cut off\n']), [{ event: 'message', data: 'complete', id: undefined }]);
});

test('SSE (WHATWG): an opening byte order mark, comments, unknown fields and an id with NUL are ignored', () => {
  assert.deepEqual(sse(['\uFEFFdata: a\nretry: 10\nfoo: bar\n: note\nid: 1\n\nid: x\u0000y\ndata: b\n\n']), [
    { event: 'message', data: 'a', id: '1' },
    { event: 'message', data: 'b', id: '1' },
  ]);
  // the BOM cut in two reads
  const bom = Buffer.from('\uFEFFdata: a\n\n', 'utf8');
  assert.deepEqual(sse(cutAt(bom, 1)), [{ event: 'message', data: 'a', id: undefined }]);
});

test("[D-providers-16] a line or an event over 8 MiB is the provider's failure, not unbounded memory", () => {
  assert.equal(MAX_LINE_BYTES, 8 * 1024 * 1024);
  const d = new LineDecoder();
  const piece = Buffer.alloc(1024 * 1024, 0x61);
  assert.throws(() => {
    for (let i = 0; i < 9; i++) d.push(piece, []);
  }, StreamDecodeError);
  // a line just under the limit is fine
  const ok = new LineDecoder(16);
  const lines = [];
  ok.push(Buffer.from('0123456789abcdef\n'), lines);
  assert.deepEqual(lines, ['0123456789abcdef']);
  assert.throws(() => new LineDecoder(16).push(Buffer.from('0123456789abcdefg\n'), []), StreamDecodeError);
  assert.throws(() => new LineDecoder(16).push(Buffer.from('0123456789abcdefg'), []), StreamDecodeError);
});

test('an event of many data lines larger than the limit is a failure of the provider', () => {
  assert.throws(() => sse(['data: 0123456789\n'.repeat(10)], 64), StreamDecodeError);
});

test('[D-providers-16] an event is bounded in bytes as they came, not characters: 3-byte characters count three times', () => {
  // 20 characters of € a line: 66 bytes with its field name; two lines pass 128 bytes, one does not
  assert.deepEqual(sse([`data: ${'€'.repeat(20)}\n\n`], 128), [{ event: 'message', data: '€'.repeat(20), id: undefined }]);
  assert.throws(() => sse([`data: ${'€'.repeat(20)}\n`.repeat(2)], 128), (e) => e instanceof StreamDecodeError && /larger than 128 bytes/.test(e.message));
  // the same bytes, a byte a read, give the same events (the unfinished line merged as it grows)
  const bytes = Buffer.from(`data: ${'€'.repeat(1000)}\ndata: x\n\n`);
  assert.deepEqual(sse([...bytes].map((b) => Buffer.from([b]))), [{ event: 'message', data: `${'€'.repeat(1000)}\nx`, id: undefined }]);
});

test('NDJSON: the same values whatever the cut, blank lines skipped, a last line without LF read at the end', () => {
  const bytes = Buffer.from('{"a":"é😀"}\n\n{"b":[1,2]}\r\n{"c":null}', 'utf8');
  const expected = [{ a: 'é😀' }, { b: [1, 2] }, { c: null }];
  for (let i = 0; i <= bytes.length; i++) assert.deepEqual(ndjson(cutAt(bytes, i)), expected, `cut at ${i}`);
});

test('NDJSON: a line that is not JSON is a failure of the provider', () => {
  assert.throws(() => ndjson(['{"a":1}\n{"b":\n']), (e) => e instanceof StreamDecodeError && /not JSON/.test(e.message));
});
