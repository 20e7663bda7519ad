// What a delta adds to its turn is worked out from where the turn's content ends, never from its
// text (src/domain/deltas.ts appendToEnd), so the writer can place a delta, check the turn's
// size and charge its bytes at a cost that does not grow with the turn. Pure functions, called
// from the test kit: each step is checked against the whole turn made again, as it was before.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { test } from 'node:test';
import { rng } from './helpers.mjs';

const { appendPiece, appendPieces, appendToEnd, contentEnd, turnRecord, withDeltas, piecesText } = createRequire(import.meta.url)('../dist/testkit.cjs');

const bytesOf = (turn) => Buffer.byteLength(JSON.stringify(turnRecord(turn)));

/** Text of 0-6 code units drawn from what JSON escapes or encodes in several bytes: quotes, backslashes, controls, accents, CJK, both halves of a surrogate pair alone. */
function textOf(random) {
  const units = ['a', ' ', '"', '\\', '\n', '\u0000', '\u001f', 'é', '日', '\ud83d', '\ude00', '😀', '\u2028', '/'];
  let out = '';
  const n = Math.floor(random() * 7);
  for (let i = 0; i < n; i++) out += units[Math.floor(random() * units.length)];
  return out;
}

const STARTS = [
  '',
  'Hello',
  'ends high \ud83d',
  [],
  [{ type: 'text', text: 'a' }],
  [{ type: 'reasoning', text: 'thinking \ud83d' }],
  [{ type: 'tool_call', id: 'c1', name: 'grep', arguments: { q: 'x' } }],
  [{ type: 'text', text: 'x' }, { type: 'file', name: 'a.png', mediaType: 'image/png', url: 'https://x/a.png' }],
];

test("[D-streaming-7] a delta's place and bytes follow from the turn's tail, to the byte, whatever the text holds", () => {
  const random = rng(20_260_101);
  for (let round = 0; round < 400; round++) {
    let turn = turnRecord({ _id: '6b0000000000000000000001', session: '6b0000000000000000000002', parentId: null, user: 'u', role: 'assistant', content: STARTS[round % STARTS.length], status: 'streaming', createdAt: '2026-01-01T00:00:00.000Z' });
    let end = contentEnd(turn.content);
    let bytes = bytesOf(turn);
    for (let step = 0; step < 12; step++) {
      const piece = { kind: random() < 0.3 ? 'reasoning' : 'text', text: textOf(random) };
      const whole = appendPiece(turn.content, piece);
      const r = appendToEnd(end, piece);
      turn = turnRecord({ ...turn, content: whole.content });
      assert.deepEqual(r.place, whole.place, `round ${round}, step ${step}: the place`);
      bytes += r.bytes;
      assert.equal(bytes, bytesOf(turn), `round ${round}, step ${step}: the bytes of ${JSON.stringify(turn.content)}`);
      assert.deepEqual(r.end, contentEnd(turn.content), `round ${round}, step ${step}: where it ends`);
      end = r.end;
    }
  }
});

test('[D-streaming-8] a streaming turn read with its delta rows folded in is the same bytes as one rewritten by each', () => {
  const random = rng(7);
  for (let round = 0; round < 50; round++) {
    const base = turnRecord({ _id: '6b0000000000000000000001', session: '6b0000000000000000000002', parentId: null, user: 'u', role: 'assistant', content: STARTS[round % STARTS.length], model: 'm', status: 'streaming', createdAt: '2026-01-01T00:00:00.000Z' });
    let whole = base;
    const rows = [];
    for (let d = 0; d < 5; d++) {
      const pieces = Array.from({ length: 1 + Math.floor(random() * 3) }, () => ({ kind: random() < 0.3 ? 'reasoning' : 'text', text: textOf(random) }));
      for (const p of pieces) whole = turnRecord({ ...whole, content: appendPiece(whole.content, p).content });
      rows.push(piecesText(pieces));
    }
    assert.equal(withDeltas(Buffer.from(JSON.stringify(base)), rows.join(',')).toString('utf8'), JSON.stringify(whole), `round ${round}`);
  }
  const json = Buffer.from(JSON.stringify(STARTS[1]));
  assert.equal(withDeltas(json, null), json, 'no rows: the JSON as stored');
});

test('appendPieces gives what appendPiece gives piece by piece, whatever the content and the kinds', () => {
  const random = rng(31);
  for (let round = 0; round < 400; round++) {
    let content = STARTS[round % STARTS.length];
    const pieces = Array.from({ length: Math.floor(random() * 9) }, () => ({ kind: random() < 0.4 ? 'reasoning' : 'text', text: textOf(random) }));
    const all = appendPieces(content, pieces);
    for (const p of pieces) content = appendPiece(content, p).content;
    assert.deepEqual(all, content, `round ${round}: ${JSON.stringify(pieces)}`);
  }
});

test('appendPieces costs time linear in its pieces: 200,000 one-character pieces of alternating kinds', () => {
  // appendPiece in a loop copies the parts for every piece: 2 * 10^10 copies here, far past any test's time
  const pieces = Array.from({ length: 200_000 }, (_, i) => ({ kind: i % 2 === 0 ? 'text' : 'reasoning', text: 'x' }));
  const content = appendPieces('', pieces);
  assert.equal(content.length, 200_000);
  assert.deepEqual(content.slice(0, 2), [{ type: 'text', text: 'x' }, { type: 'reasoning', text: 'x' }]);
});
