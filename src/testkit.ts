// What the in-process tests import (bundled to dist/testkit.cjs, never shipped): the parts
// that are tested below the HTTP layer, against the real thing they talk to.
import type { Config } from './config.js';
import { announce } from './live/changes.js';
import type { Logger } from './log.js';
import { openStore as openStoreWith, runEngineThreadIfWorker, type OpenOptions } from './store/open.js';
import type { Store } from './store/store.js';

// the sqlite engine starts its writer thread on the file that holds it: this one, in the tests
runEngineThreadIfWorker();

export { crc32, crc32Portable, Indexer, prepareSchema, QUEUED_WORDS_SQL, queuedTurnWords, registerSearchFunctions, turnWordsSql, checkFiles, SUBTREE_SQL, branchKeysSql, branchPageSql } from './store/open.js';
export { loadConfig } from './config.js';
export { Logger } from './log.js';
export { openStoreSnapshot } from './store/open.js';

/** A store as a server opens it (the live feed's events logged with its changes on PostgreSQL). */
export function openStore(config: Config, log: Logger, opts: OpenOptions = {}): Promise<Store> {
  return openStoreWith(config, log, { announce, ...opts });
}
export { setFaultPlan } from './store/faults.js';
export { PreconditionFailed, QuotaExceeded, SessionMoved, SessionNotFound, SessionNotVisible, SessionStillLive, StorageWriteFailed, StoreOpenFailed, TurnNotFound, TurnNotStreaming, TurnStillStreaming, TurnTooLarge } from './store/store.js';
export { PAGE_BYTE_BUDGET, PAGE_SCAN_BUDGET, SCAN_CHUNK } from './domain/order.js';
export { wholeListReply } from './api/lists.js';
export { versionOf, versionOfSession } from './domain/version.js';
export { eachIndexedWord, foldForSearch, indexedWordList, indexedWords, plainAscii, textHolds, turnText, wordHash, wordsOf } from './domain/search.js';
export { placesOfChain } from './store/tree-index.js';
export { chatSession, turnRecord } from './domain/records.js';
export { appendPiece, appendPieces, appendToEnd, contentEnd } from './domain/deltas.js';
export { ReplyLedger } from './domain/reply-ledger.js';
export { withDeltas, piecesText } from './store/pieces.js';
export { newObjectId } from './domain/ids.js';
export { ConnectionGuard, HEADROOM } from './http/connections.js';
export { ScramClient, md5Password, saslprep } from './pg/auth.js';
export { MessageReader, decodeDataRow, decodeErrorFields } from './pg/backend.js';
export { MessageWriter } from './pg/frontend.js';
export { Connection, connect } from './pg/connection.js';
export { PgError, PgServerError } from './pg/errors.js';
export { Password, describeTarget, parseDatabaseUrl, redactDatabaseUrl } from './pg/url.js';
export { Listener } from './pg/listen.js';
export { Pool } from './pg/pool.js';
export { livenessAt } from './domain/retention.js';
export { eraseUser, pausedLike, purgeExpired, PURGE_BATCH } from './services/retention.js';
export { streamReply, MAX_RETRIES, RETRY_AFTER_CAP_MS, DEFAULT_IDLE_TIMEOUT_MS } from './providers/call.js';
export { providerConfig, modelAllowed, canReply, DEFAULT_BASE_URLS } from './providers/config.js';
export { ProviderFailed, ProviderUnusable } from './providers/failure.js';
export { scrubCredentials } from './providers/scrub.js';
export { LineDecoder, SseDecoder, NdjsonDecoder, StreamDecodeError, MAX_LINE_BYTES } from './providers/stream-decoder.js';
export { ANTHROPIC_DEFAULT_MAX_TOKENS } from './providers/anthropic.js';
export { parseProviders } from './providers/catalog.js';
export { Router } from './http/router.js';
