// The running service: load secrets, providers and the store, listen, and stop cleanly.
// SIGTERM/SIGINT stop accepting, let requests in flight finish (10 s at most), flush the
// store and exit 0. SIGHUP re-reads the providers file, keeping the old list if it is bad.
import { mkdirSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { createServer as createNetServer, type AddressInfo } from 'node:net';
import { createApp } from './app.js';
import { JwksSource } from './auth/jwks-source.js';
import { checkSecrets, loadSecrets } from './auth/secret.js';
import type { Config } from './config.js';
import { Sparing, type Logger } from './log.js';
import { capYoungGeneration } from './memory.js';
import { Metrics } from './metrics.js';
import { acquireLock, guardDataDir } from './data-dir-lock.js';
import { loadProviders, type ProviderCatalog } from './providers/catalog.js';
import { INTERRUPT_SWEEP_MS, interruptLeftStreaming } from './live/interrupted.js';
import { BackgroundPurge } from './services/retention.js';
import { announce } from './live/changes.js';
import { openStore } from './store/open.js';
import type { Store } from './store/store.js';

const DRAIN_MS = 10_000;
const HEADERS_TIMEOUT_MS = 15_000;

/** Starts serving; resolves once listening. Start-up errors are thrown for main to report. */
export async function serve(config: Config, log: Logger, version: string): Promise<Server> {
  capYoungGeneration();
  // every setting is checked before the address is tried: a bad one is reported whatever holds the port
  checkSecrets(config);
  let catalog: ProviderCatalog = loadProviders(config.providersFile, config.providersFileSet);
  // a start that cannot have its address must leave a new data directory as it found it (no
  // secret, no store): the address is tried before anything is written, and let go for the listen
  await tryAddress(config.port, config.host);
  // the identity provider's keys before anything is written: a start that cannot have them fails
  const keySet = config.authJwks === undefined ? undefined : await JwksSource.open(config.authJwks, config.authJwksRefreshMs, log);
  // one server per data directory, whatever the engine (its secret, its providers, and for the
  // journal and sqlite its data live there; several postgres instances each have their own)
  const unguarded = await guardDataDir(config.dataDir);
  if (unguarded !== undefined) log.warn('cannot hold the data directory by a socket name; the lock file alone keeps other servers out', { code: unguarded });
  const secrets = loadSecrets(config);
  for (const w of secrets.warnings) log.warn(w);

  if (catalog.fromFile) log.info('providers loaded', { count: catalog.count, file: config.providersFile });
  else log.warn('no providers file; the provider list is empty until one is created and SIGHUP is sent', { file: config.providersFile });

  const metrics = config.metrics ? new Metrics() : undefined;
  const unwatchEventLoop = metrics?.watchEventLoop();
  const lock = takeDataDir(config, log);
  let store: Store;
  try {
    const observer = metrics === undefined ? undefined : {
      commit: (seconds: number, writes: number) => {
        metrics.commits.observe(seconds);
        metrics.committedWrites += writes;
      },
    };
    store = await openStore(config, log, { observer, serving: true, announce });
  } catch (e) {
    lock.release();
    throw e;
  }
  const closeStore = async (): Promise<void> => {
    try {
      await store.close();
    } finally {
      lock.release();
    }
  };

  const app = createApp({ config, version, log, secrets, keySet, store, catalog: () => catalog, metrics });
  try {
    await app.start();
  } catch (e) {
    await app.close().catch(() => undefined);
    await closeStore();
    throw e;
  }
  // before the first request: a client's delta to a turn the crash cut gets 409, never a place in it
  let sweep: NodeJS.Timeout | undefined;
  try {
    await interruptLeftStreaming(store, true, log);
    let sweeping = false;
    const failures = new Sparing(60_000);
    sweep = setInterval(() => {
      // (one at a time: a slow database does not pile them up)
      if (sweeping) return;
      sweeping = true;
      interruptLeftStreaming(store, false, log, app.generating())
        .catch((e: unknown) => {
          if (failures.due()) log.warn('looking for streaming turns left by a crash failed; trying again later (logged once a minute)', { err: e });
        })
        .finally(() => (sweeping = false));
    }, store.sweepEveryMs ?? INTERRUPT_SWEEP_MS).unref();
  } catch (e) {
    await app.close().catch(() => undefined);
    await closeStore();
    throw e;
  }
  const { limits } = config;
  const server = createServer(
    {
      keepAliveTimeout: 5_000,
      headersTimeout: HEADERS_TIMEOUT_MS,
      // a backstop behind BODY_TIMEOUT, which answers first (with the route in its log line)
      requestTimeout: HEADERS_TIMEOUT_MS + limits.bodyTimeoutMs + 5_000,
      // how often node checks those two timeouts: its default (30 s) lets them run up to twice as long
      connectionsCheckingInterval: 1_000,
      maxHeaderSize: 16 * 1024,
    },
    app.pipeline.handle,
  );
  server.on('connection', app.connections.onConnection);
  // HTTP the parser refuses never reaches the pipeline's handler: the pipeline answers it too,
  // and so an Expect it cannot meet and CONNECT, which node:http would answer bare or not at all
  server.on('clientError', app.pipeline.rejectRaw);
  server.on('checkExpectation', app.pipeline.rejectExpectation);
  server.on('connect', app.pipeline.rejectConnect);

  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(config.port, config.host, () => {
        server.off('error', reject);
        resolve();
      });
    });
  } catch (e) {
    await app.close().catch(() => undefined);
    await closeStore();
    throw e;
  }
  const addr = server.address() as AddressInfo;
  const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  log.info('listening', { url: `http://${host}:${addr.port}`, port: addr.port, dataDir: config.dataDir, store: config.store, access: config.access, version });
  // expired sessions' storage goes in the background, once serving
  const purge = config.purgeIntervalMs === undefined ? undefined : new BackgroundPurge(store, config.retentionDays, config.purgeIntervalMs, log);
  if (metrics !== undefined && purge !== undefined) metrics.purged = purge.total;
  purge?.start();
  if (secrets.source === 'generated') {
    log.info('generated a new HS256 secret; mint a token with: node dist/server.js token --sub <user>', { file: secrets.file });
  }

  process.on('SIGHUP', () => {
    try {
      const next = loadProviders(config.providersFile, config.providersFileSet);
      catalog = next;
      log.info('providers reloaded', { count: next.count, fromFile: next.fromFile });
    } catch (e) {
      log.error('providers reload failed; keeping the previous list', { reason: (e as Error).message, count: catalog.count });
    }
  });

  let stopping = false;
  const stop = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    clearInterval(sweep);
    log.info('shutting down', { signal });
    // event streams never end by themselves: each gets its final event now, then drains like any answer
    app.drain();
    const idle = setInterval(() => server.closeIdleConnections(), 50);
    const force = setTimeout(() => {
      log.warn('requests still running after the drain period; closing their connections', { ms: DRAIN_MS });
      server.closeAllConnections();
    }, DRAIN_MS);
    server.close(() => {
      clearInterval(idle);
      unwatchEventLoop?.();
      clearTimeout(force);
      app
        .close()
        .catch((e: unknown) => log.error('the live feed did not close cleanly', { err: e }))
        .then(() => purge?.stop())
        .then(closeStore)
        .then(
        () => {
          log.info('stopped');
          log.flush();
          process.exit(0);
        },
        (e: unknown) => {
          log.error('store did not close cleanly', { err: e });
          log.flush();
          process.exit(1);
        },
      );
    });
    server.closeIdleConnections();
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  return server;
}

/**
 * Binds the address and lets it go: a port taken, a HOST that is not this machine's, a port
 * below 1024 without the right fail here with the error the listen would give. Another process
 * may still take the port before the listen, a window as long as the store takes to open.
 */
async function tryAddress(port: number, host: string): Promise<void> {
  const probe = createNetServer((socket) => socket.destroy());
  await new Promise<void>((resolve, reject) => {
    probe.once('error', reject);
    probe.listen(port, host, () => resolve());
  });
  await new Promise<void>((resolve) => probe.close(() => resolve()));
}

/** The data directory's lock, taken before the store is opened: one server per directory, whatever the engine. */
function takeDataDir(config: Config, log: Logger): { release(): void } {
  mkdirSync(config.dataDir, { recursive: true });
  const lock = acquireLock(config.dataDir);
  if (lock.tookOver !== undefined) log.warn('took over a stale data directory lock', { pid: lock.tookOver.pid, since: lock.tookOver.startedAt });
  return lock;
}
