// What the in-process tests import (bundled to dist/testkit.cjs, never shipped): the parts
// that are tested below the HTTP layer, against the real thing they talk to.
export { crc32, crc32Portable } from './store/crc32.js';
export { ConnectionGuard, HEADROOM } from './http/connections.js';
