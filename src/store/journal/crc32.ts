// CRC-32 (IEEE 802.3, the zlib/PNG polynomial) of journal records. Node.js 20.15+ has a native
// zlib.crc32; older 20.x releases fall back to the table-driven version below (same results,
// checked against each other in the tests).
import * as zlib from 'node:zlib';

const TABLE = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

/** Portable CRC-32 of bytes [start, end) of `buf`. */
export function crc32Portable(buf: Uint8Array, start = 0, end = buf.length): number {
  let c = 0xffffffff;
  for (let i = start; i < end; i++) c = (TABLE[(c ^ (buf[i] as number)) & 0xff] as number) ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

type NativeCrc = (data: Uint8Array | string, value?: number) => number;
const native: NativeCrc | undefined = (zlib as { crc32?: NativeCrc }).crc32;

/** CRC-32 of a whole buffer (native when the runtime has it). */
export const crc32: (buf: Uint8Array) => number =
  native !== undefined ? (buf) => native(buf) >>> 0 : (buf) => crc32Portable(buf);
