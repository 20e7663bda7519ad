// The portable CRC-32 (used where the runtime has no zlib.crc32, Node.js before 20.15) gives
// the same checksums as zlib's: the retired journal's reader checks its records with them.
// A pure function, so it is called directly from the test kit rather than through the server.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import { test } from 'node:test';
import * as zlib from 'node:zlib';

const { crc32, crc32Portable } = createRequire(import.meta.url)('../../dist/testkit.cjs');

test('crc32Portable equals zlib.crc32 (the journal checksum) on the standard check value and on random data', async (t) => {
  if (typeof zlib.crc32 !== 'function') return t.skip('this runtime has no zlib.crc32 to compare with');
  assert.equal(crc32Portable(Buffer.from('123456789')), 0xcbf43926, 'the CRC-32/ISO-HDLC check value');
  for (const size of [0, 1, 7, 64, 1000, 65_537]) {
    const data = randomBytes(size);
    assert.equal(crc32Portable(data), zlib.crc32(data) >>> 0, `size ${size}`);
    assert.equal(crc32(data), zlib.crc32(data) >>> 0);
    assert.equal(crc32Portable(data, 3, Math.max(3, size - 2)), size > 5 ? zlib.crc32(data.subarray(3, size - 2)) >>> 0 : 0, `range of size ${size}`);
  }
});
