// What the in-process tests import (bundled to dist/testkit.cjs, never shipped): the parts
// that are tested below the HTTP layer, against the real thing they talk to.
import { runSqliteWriterIfWorker } from './store/sqlite/worker.js';

// the sqlite engine starts its writer thread on the file that holds it: this one, in the tests
runSqliteWriterIfWorker();

export { crc32, crc32Portable } from './store/journal/crc32.js';
export { SortedList } from './store/journal/sorted-list.js';
