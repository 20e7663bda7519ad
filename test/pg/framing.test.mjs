// Message framing, below the server: the reader must frame the same messages however the
// byte stream is cut into chunks (a header split in two, a 1 MiB row in many pieces), and
// the writer must never change bytes it already handed to the socket.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { test } from 'node:test';

const { MessageReader, MessageWriter, decodeDataRow } = createRequire(import.meta.url)('../../dist/testkit.cjs');

/** A DataRow message as the server sends it. */
function dataRow(values) {
  const parts = [];
  for (const v of values) {
    const len = Buffer.alloc(4);
    if (v === null) {
      len.writeInt32BE(-1);
      parts.push(len);
    } else {
      const bytes = Buffer.from(v, 'utf8');
      len.writeInt32BE(bytes.length);
      parts.push(len, bytes);
    }
  }
  const body = Buffer.concat([Buffer.from([values.length >> 8, values.length & 255]), ...parts]);
  const head = Buffer.alloc(5);
  head[0] = 0x44;
  head.writeInt32BE(4 + body.length, 1);
  return Buffer.concat([head, body]);
}

function frame(chunks) {
  const r = new MessageReader();
  const rows = [];
  for (const chunk of chunks) {
    r.push(chunk);
    while (r.next()) {
      assert.equal(r.type, 0x44);
      rows.push(decodeDataRow(r.body, r.offset));
    }
  }
  assert.equal(r.buffered, 0, 'nothing left over');
  return rows;
}

const ROWS = [['a', null, ''], ['日本語 🎉', 'x'.repeat(1000)], [null], ['x'.repeat(1024 * 1024)], ['last', 'é']];

test('the reader frames the same rows whether the stream comes whole, byte by byte, or cut at random', () => {
  const stream = Buffer.concat(ROWS.map(dataRow));
  assert.deepEqual(frame([stream]), ROWS);
  const small = Buffer.concat(ROWS.filter((r) => r[0]?.length !== 1024 * 1024).map(dataRow));
  assert.deepEqual(frame([...small].map((b) => Buffer.from([b]))), ROWS.filter((r) => r[0]?.length !== 1024 * 1024));
  for (let trial = 0; trial < 8; trial++) {
    const chunks = [];
    for (let at = 0; at < stream.length; ) {
      const n = 1 + Math.floor(Math.random() * (trial % 2 ? 70_000 : 9));
      chunks.push(Buffer.from(stream.subarray(at, at + n))); // copies: the socket's chunks are fresh buffers
      at += n;
    }
    assert.deepEqual(frame(chunks), ROWS, `trial ${trial}`);
  }
});

test('a message length below 4 is a protocol error, not a loop', () => {
  const r = new MessageReader();
  r.push(Buffer.from([0x44, 0, 0, 0, 2]));
  assert.throws(() => r.next(), (e) => e.kind === 'protocol');
});

test('the writer never changes bytes it handed out, across its buffer boundaries', () => {
  const w = new MessageWriter();
  const taken = [];
  for (let i = 0; i < 2000; i++) {
    w.bind(`s${i}`, [String(i), null, 'v'.repeat(i % 50)]);
    w.executeAndSync();
    if (i % 7 === 0) {
      const out = w.take();
      taken.push({ out, copy: Buffer.from(out) });
    }
  }
  const rest = w.take();
  taken.push({ out: rest, copy: Buffer.from(rest) });
  w.bind('big', ['y'.repeat(100_000)]); // bigger than a chunk: a new buffer
  taken.push({ out: w.take() });
  for (const { out, copy } of taken.slice(0, -1)) assert.ok(out.equals(copy));
  assert.equal(w.take(), undefined);
  // the slices, in order, are whole messages: Bind, Execute, Sync 2000 times, then the big Bind
  const r = new MessageReader();
  r.push(Buffer.concat(taken.map((t) => t.out)));
  const types = [];
  while (r.next()) types.push(String.fromCharCode(r.type));
  assert.equal(r.buffered, 0);
  assert.equal(types.join(''), `${'BES'.repeat(2000)}B`);
});

test('a long parameter costs the writer its bytes, not six times them, and the buffer goes once the socket has it', () => {
  const w = new MessageWriter();
  for (const value of ['y'.repeat(6_000_000), 'é'.repeat(3_000_000)]) {
    w.bind('big', [value]);
    const out = w.take();
    const bytes = Buffer.byteLength(value, 'utf8');
    assert.ok(out.length > bytes && out.length < bytes + 64, `the Bind holds the value: ${out.length} bytes`);
    assert.ok(out.buffer.byteLength < bytes + 64 * 1024, `allocated ${out.buffer.byteLength} bytes for a ${bytes}-byte value`);
    // the next messages go to a new, small buffer: the large one lives only as long as the socket's write
    w.bind('small', ['x']);
    const next = w.take();
    assert.notEqual(next.buffer, out.buffer);
    assert.ok(next.buffer.byteLength <= 64 * 1024, `the writer went on in ${next.buffer.byteLength} bytes`);
    const r = new MessageReader();
    r.push(Buffer.concat([out, next]));
    const types = [];
    while (r.next()) types.push(String.fromCharCode(r.type));
    assert.equal(types.join(''), 'BB');
  }
});
