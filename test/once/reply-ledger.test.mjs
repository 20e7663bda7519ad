// A reply's text between its provider and the store is a small state machine (src/domain/
// reply-ledger.ts): each piece pending, in flight, recorded or in doubt. Its transitions alone,
// from the test kit; the replies' tests drive them through the real server (a lost COMMIT answer
// on PostgreSQL in test/postgres/postgres-faults.test.mjs).
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { describe, test } from 'node:test';

const { ReplyLedger } = createRequire(import.meta.url)('../../dist/testkit.cjs');

const t = (text) => ({ kind: 'text', text });

describe('ReplyLedger: what of a reply the store holds', () => {
  test('it starts from the stored content; told pieces are pending until a write takes them', () => {
    const l = new ReplyLedger([{ type: 'reasoning', text: 'hm' }, { type: 'text', text: 'ab' }]);
    assert.equal(l.recordedChars, 4);
    l.tell(t('c'));
    l.tell(t('de'));
    assert.equal(l.pendingPieces, 2);
    assert.deepEqual(l.take(), [t('c'), t('de')]);
    assert.equal(l.pendingPieces, 0);
  });

  test('a committed write records its pieces; pieces told meanwhile stay pending for the next', () => {
    const l = new ReplyLedger('');
    l.tell(t('ab'));
    l.take();
    l.tell(t('c'));
    assert.deepEqual(l.take(), [], 'one write at a time');
    l.committed();
    assert.equal(l.recordedChars, 2);
    assert.deepEqual(l.take(), [t('c')]);
  });

  test('[D-replies-12] a lost write puts its pieces in doubt at the head, in order; nothing is taken until they are settled', () => {
    const l = new ReplyLedger('');
    l.tell(t('ab'));
    l.take();
    l.tell(t('c'));
    l.lost();
    assert.equal(l.inDoubt, true);
    assert.equal(l.pendingPieces, 2);
    assert.deepEqual(l.take(), []);
    assert.deepEqual(l.unrecorded(''), [t('ab'), t('c')], 'the end writes them all when they did not land');
    assert.deepEqual(l.unrecorded('ab'), [t('c')], 'and leaves them out when they did');
  });

  test('settled by the stored text: landed pieces are recorded and leave; pieces that did not land are written again', () => {
    const landed = new ReplyLedger('x');
    landed.tell(t('ab'));
    landed.take();
    landed.lost();
    landed.tell(t('c'));
    landed.settle('xab');
    assert.equal(landed.inDoubt, false);
    assert.equal(landed.recordedChars, 3);
    assert.deepEqual(landed.take(), [t('c')]);

    const not = new ReplyLedger('x');
    not.tell(t('ab'));
    not.take();
    not.lost();
    not.settle('x');
    assert.equal(not.recordedChars, 1);
    assert.deepEqual(not.take(), [t('ab')]);

    const gone = new ReplyLedger('x');
    gone.tell(t('ab'));
    gone.take();
    gone.lost();
    gone.settle(undefined);
    assert.deepEqual(gone.take(), [t('ab')], 'a turn gone: the next write says so');
  });

  test('a refused write drops its pieces; clear drops the rest', () => {
    const l = new ReplyLedger('');
    l.tell(t('ab'));
    l.take();
    l.tell(t('c'));
    l.refused();
    assert.equal(l.recordedChars, 0);
    l.clear();
    assert.deepEqual(l.take(), []);
    assert.deepEqual(l.unrecorded(''), []);
  });
});
