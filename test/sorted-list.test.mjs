// The journal engine's session lists (src/store/journal/sorted-list.ts) against a plain sorted
// array: random inserts, removals and reads from random keys, on lists many chunks long. A pure
// data structure, so it is called directly from the test kit, like the CRC; the HTTP tests walk
// the lists through the server (paging.test.mjs, "a list longer than the store keeps in one piece").
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { test } from 'node:test';
import { rng } from './helpers.mjs';

const { SortedList } = createRequire(import.meta.url)('../dist/testkit.cjs');

// the session lists' order: `at` newest first, ties by `id` descending
const before = (a, b) => a.at > b.at || (a.at === b.at && a.id > b.id);
const order = (a, b) => (before(a, b) ? -1 : before(b, a) ? 1 : 0);

function readAfter(list, key, limit = Infinity) {
  const out = [];
  list.forEachAfter(key, (x) => {
    if (out.length === limit) return false;
    out.push(x);
    return true;
  });
  return out;
}

test('the chunked session list reads like one sorted array through inserts (mostly at the front), removals, reads after any key, and fill', async () => {
  {
    for (const seed of [1, 2, 3]) {
      const rand = rng(seed);
      const list = new SortedList(before);
      let model = [];
      let clock = 0;
      let nextId = 0;
      const newItem = (at) => ({ at, id: nextId++ });
      for (let step = 0; step < 6000; step++) {
        const r = rand();
        let item;
        if (r < 0.6) item = newItem(clock += rand() < 0.3 ? 0 : 1); // newest (ties on the clock too)
        else if (r < 0.75) item = newItem(Math.floor(rand() * (clock + 1))); // anywhere
        else if (r < 0.8) item = newItem(-1); // older than everything
        if (item !== undefined) {
          list.insert(item);
          model.push(item);
          continue;
        }
        if (model.length === 0) continue;
        // remove one (an update removes, then inserts the new state at the front)
        const victim = model[Math.floor(rand() * model.length)];
        assert.equal(list.remove(victim, (a, b) => a === b), true, `seed ${seed} step ${step}: remove`);
        model = model.filter((x) => x !== victim);
        assert.equal(list.remove(victim, (a, b) => a === b), false, 'a removed item is not there');
        if (r < 0.9) {
          const moved = newItem(++clock);
          list.insert(moved);
          model.push(moved);
        }
      }
      model.sort(order);
      assert.ok(model.length > 2000, `seed ${seed}: the list spans several chunks (${model.length} items)`);
      // keys before everything (a cursor on a newest session since moved or deleted) and after it
      const newest = model[0];
      const oldest = model[model.length - 1];
      assert.deepEqual(readAfter(list, { at: newest.at + 1, id: 0 }), model, 'a key read before every item: the whole list');
      assert.deepEqual(readAfter(list, { at: newest.at, id: newest.id + 0.5 }), model, 'just before the first item');
      assert.deepEqual(readAfter(list, newest), model.slice(1), 'the first item itself');
      assert.deepEqual(readAfter(list, oldest), [], 'the last item');
      assert.deepEqual(readAfter(list, { at: oldest.at - 1, id: 0 }), [], 'a key read after every item');
      assert.equal(list.size, model.length);
      assert.deepEqual(readAfter(list, undefined), model, `seed ${seed}: the whole list`);
      for (let i = 0; i < 300; i++) {
        // keys that are in the list, and keys between and around its items
        const key = i % 2 === 0 ? model[Math.floor(rand() * model.length)] : { at: Math.floor(rand() * (clock + 3)) - 1, id: Math.floor(rand() * nextId) + 0.5 };
        const want = model.filter((x) => before(key, x));
        const limit = 1 + Math.floor(rand() * 700);
        assert.deepEqual(readAfter(list, key, limit), want.slice(0, limit), `seed ${seed}: after ${JSON.stringify(key)}, ${limit} items`);
      }
      const filled = new SortedList(before);
      filled.fill(model);
      assert.deepEqual(readAfter(filled, undefined), model, 'fill keeps the order it is given');
      for (const i of [0, 1, 511, 512, 513, model.length - 2]) assert.deepEqual(readAfter(filled, model[i]), model.slice(i + 1), `filled: after item ${i}`);
      // emptying whole chunks, from the newest end, the oldest end and the middle
      const drained = new SortedList(before);
      drained.fill(model);
      const rest = [...model];
      for (const at of [() => 0, () => rest.length - 1, () => rest.length >> 1]) {
        for (let k = 0; k < 700 && rest.length > 0; k++) {
          const [gone] = rest.splice(at(), 1);
          assert.equal(drained.remove(gone, (a, b) => a === b), true);
        }
        assert.deepEqual(readAfter(drained, undefined), rest, 'after emptying chunks');
        if (rest.length > 0) assert.deepEqual(readAfter(drained, rest[0]), rest.slice(1));
      }
      while (rest.length > 0) assert.equal(drained.remove(rest.pop(), (a, b) => a === b), true);
      assert.equal(drained.size, 0);
      assert.deepEqual(readAfter(drained, undefined), [], 'emptied to nothing');
      assert.deepEqual(readAfter(drained, newest), [], 'emptied: after a key');
      drained.insert(newest);
      assert.deepEqual(readAfter(drained, undefined), [newest], 'usable again');
      filled.insert(newItem(++clock));
      filled.insert(newItem(-2));
      assert.equal(readAfter(filled, undefined).length, model.length + 2);
      assert.deepEqual(readAfter(new SortedList(before), undefined), [], 'an empty list');
    }
  }
});
