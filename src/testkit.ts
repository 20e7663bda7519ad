// What the in-process tests import (bundled to dist/testkit.cjs, never shipped): the parts
// that are tested below the HTTP layer, against the real thing they talk to.
export { crc32, crc32Portable } from './store/crc32.js';
export { ScramClient, md5Password, saslprep } from './pg/auth.js';
export { MessageReader, decodeDataRow, decodeErrorFields } from './pg/backend.js';
export { MessageWriter } from './pg/frontend.js';
export { Connection, connect } from './pg/connection.js';
export { PgError, PgServerError } from './pg/errors.js';
export { Password, describeTarget, parseDatabaseUrl, redactDatabaseUrl } from './pg/url.js';
export { Listener } from './pg/listen.js';
export { Pool } from './pg/pool.js';
