// Wires the parts into one request listener: the route table (service, chat sessions,
// providers), the OpenAPI document generated from it and its reference page, and the
// pipeline that runs it.
import { docsPage, type DocsPage } from './api/docs-page.js';
import { openApiDocument } from './api/openapi.js';
import { CursorCodec } from './api/cursor.js';
import { eventRoutes } from './api/events.js';
import { providerRoutes } from './api/providers.js';
import type { RouteDef } from './api/route.js';
import { serviceRoutes } from './api/service.js';
import { sessionRoutes } from './api/sessions.js';
import { turnRoutes } from './api/turns.js';
import { usageRoutes } from './api/usage.js';
import { searchRoutes } from './api/search.js';
import type { SessionDeps } from './api/common.js';
import { Access } from './services/access.js';
import { FeedService } from './services/feed.js';
import { SearchService } from './services/search.js';
import { SessionService } from './services/sessions.js';
import { TurnService } from './services/turns.js';
import { UsageService } from './services/usage.js';
import { ReplyService } from './services/replies.js';
import { replyRoutes } from './api/replies.js';
import { openaiRoutes } from './api/openai/routes.js';
import { DoorService } from './services/door.js';
import { ResponsesService } from './services/responses.js';
import { responsesRoutes } from './api/openai/responses.js';
import { Authenticator } from './auth/authenticate.js';
import type { JwksSource } from './auth/jwks-source.js';
import type { Secrets } from './auth/secret.js';
import { TicketCodec } from './auth/tickets.js';
import type { Config } from './config.js';
import { BodyBudget } from './http/body.js';
import { ConnectionGuard } from './http/connections.js';
import { InFlight, WHOLE_LISTS_PER_USER } from './http/in-flight.js';
import { MemoryGuard } from './http/memory-guard.js';
import { ceilingsOf } from './memory.js';
import { Cors } from './http/cors.js';
import { Pipeline, type RuntimeRoute } from './http/pipeline.js';
import { RateLimiter } from './http/rate-limit.js';
import { Router } from './http/router.js';
import { announce } from './live/changes.js';
import { Hub } from './live/hub.js';
import { MemoryFeedLog, SharedFeedLog, type FeedLog } from './live/log.js';
import { requestLineMiddle, Sparing, type Logger } from './log.js';
import type { Metrics } from './metrics.js';
import type { ProviderCatalog } from './providers/catalog.js';
import { heldLimitOf } from './providers/held.js';
import type { Store } from './store/store.js';

export interface AppParts {
  readonly config: Config;
  readonly version: string;
  readonly log: Logger;
  readonly secrets: Secrets;
  /** The identity provider's keys (AUTH_JWKS), read at start. */
  readonly keySet?: JwksSource | undefined;
  readonly store: Store;
  readonly catalog: () => ProviderCatalog;
  readonly metrics: Metrics | undefined;
}

export interface App {
  readonly pipeline: Pipeline;
  /** The server's `connection` listener lives here (MAX_CONNECTIONS). */
  readonly connections: ConnectionGuard;
  /** The replies this instance generates now (the sweep of streaming turns left leaves them be). */
  generating(): ReadonlySet<string>;
  /** Starts following the store's commits (the live feed); before the server listens. */
  start(): Promise<void>;
  /** SIGTERM: ends every event stream with its final event, so the server can drain. */
  drain(): void;
  close(): Promise<void>;
}

export function createApp(p: AppParts): App {
  const { config } = p;
  let openApiBody = '';
  let docs: DocsPage | undefined;
  const docsRoute = config.docs ? (): DocsPage => docs as DocsPage : undefined;
  const { limits } = config;
  const ceilings = ceilingsOf(limits.memoryLimit);
  const live = liveFeed(p);
  const access = new Access(config.access, config.retentionDays);
  const replies = new ReplyService(p.store, access, p.catalog, live?.hub, { maxReplies: config.repliesMax, maxRepliesPerUser: limits.maxRequestsPerUser, idleTimeoutMs: config.providerIdleTimeoutMs, maxDurationMs: config.replyMaxDurationMs, maxTurnBytes: config.bodyLimit, heldBytes: heldLimitOf(ceilings.residentBytes, ceilings.heapBytes), contextMaxBytes: config.replyContextMax }, p.log);
  if (p.metrics !== undefined) p.metrics.replies = () => replies.counts;
  const usage = new UsageService(p.store);
  const feed = live === undefined ? undefined : new FeedService(live.hub, p.store, access);
  const door = new DoorService(p.store, replies, p.catalog, access);
  /** The OpenAI door's streams send `: ping` after as long a silence as the event streams' heartbeat. */
  const pingMs = config.events?.heartbeatMs ?? 15_000;
  const sessionDeps: SessionDeps = {
    sessions: new SessionService(p.store, access),
    turns: new TurnService(p.store, access),
    search: new SearchService(p.store, access),
    usage,
    cursors: new CursorCodec(p.secrets.current),
    maxTurnBytes: config.bodyLimit,
  };
  const routes: RouteDef[] = [
    ...serviceRoutes({ version: p.version, catalog: p.catalog, store: p.store, metrics: p.metrics, openApiBody: () => openApiBody, docsPage: docsRoute }),
    ...sessionRoutes(sessionDeps),
    ...turnRoutes(sessionDeps),
    ...(config.search ? searchRoutes(sessionDeps) : []),
    ...usageRoutes(usage),
    ...(live === undefined || feed === undefined ? [] : eventRoutes({ feed, tickets: live.tickets })),
    ...providerRoutes(p.catalog),
    ...replyRoutes({ replies, feed }),
    ...openaiRoutes({ door, pingMs }),
    ...responsesRoutes({ responses: new ResponsesService(p.store, replies, door), pingMs }),
  ];
  openApiBody = JSON.stringify(openApiDocument(routes, p.version));
  if (config.docs) docs = docsPage(openApiBody, 'chat-session-api');

  const router = new Router<RuntimeRoute>();
  for (const def of routes) {
    const paramNames = def.path.split('/').filter((s) => s.startsWith(':') || s.startsWith('*')).map((s) => s.slice(1));
    const routeJson = JSON.stringify(def.path);
    router.add(def.method, def.path, { def, paramNames, stats: p.metrics?.forRoute(def.method, def.path), routeJson, logMiddle: requestLineMiddle(def.method, routeJson) });
  }
  const limiter = config.rateLimit === undefined ? undefined : new RateLimiter(config.rateLimit.rate, config.rateLimit.burst);
  const budget = new BodyBudget(limits.bodyMemory, config.bodyLimit);
  const inFlight = new InFlight(limits.maxRequestsPerUser);
  let pipeline: Pipeline | undefined;
  const evictions = new Sparing(60_000);
  const connections = new ConnectionGuard(limits.maxConnections, {
    refuse: (socket) => {
      if (p.metrics !== undefined) p.metrics.connectionsRefused++;
      pipeline?.refuseConnection(socket);
    },
    evicted: () => {
      if (p.metrics !== undefined) p.metrics.connectionsEvicted++;
      if (evictions.due()) {
        p.log.warn('MAX_CONNECTIONS reached: closing idle connections, of whoever holds the most first, to let new ones in (logged once a minute)', { max: limits.maxConnections });
      }
    },
  });
  if (p.metrics !== undefined) {
    p.metrics.load = { connections: () => connections.count, bodyBytes: () => budget.used, requestsInFlight: () => inFlight.total, busiestInFlight: () => inFlight.busiest() };
  }
  const memory = new MemoryGuard(ceilings, (low, measure) => {
    const mib = (n: number | undefined): number | null => (n === undefined ? null : Math.round(n / 2 ** 20));
    const fields = { heapUsedMiB: mib(measure.heapUsed), heapLimitMiB: mib(memory.ceilings.heapBytes), residentMiB: mib(measure.resident), memoryLimitMiB: mib(memory.ceilings.residentBytes) };
    if (low) p.log.warn('the server is low on memory: writes that add data are refused (503) until it is not; reads and deletes go on', fields);
    else p.log.info('memory is no longer low: writes are accepted again', fields);
  });
  if (p.metrics !== undefined) p.metrics.memory = memory;
  pipeline = new Pipeline({
    router,
    auth: new Authenticator({
      keys: config.authHs256 ? [p.secrets.current, ...p.secrets.previous] : [],
      issuer: config.authIssuer,
      audience: config.authAudience,
      keySet: p.keySet,
      userClaim: config.authUserClaim,
      log: p.log,
    }),
    log: p.log,
    body: { limit: config.bodyLimit, budget, timeoutMs: limits.bodyTimeoutMs },
    writeTimeoutMs: limits.writeTimeoutMs,
    connections,
    inFlight,
    wholeLists: new InFlight(WHOLE_LISTS_PER_USER),
    cors: config.corsOrigin === undefined ? undefined : new Cors(config.corsOrigin),
    limiter,
    trustProxy: config.trustProxy,
    metrics: p.metrics,
    memory,
    tickets: live?.tickets,
  });
  return {
    pipeline,
    connections,
    generating: () => replies.generating(),
    start: async () => {
      await live?.hub.start();
      await replies.start();
    },
    // replies in progress end `interrupted` (recorded, and waiting requests answered), then the streams end
    drain: () => void replies.stop().finally(() => live?.hub.drain()),
    close: async () => {
      limiter?.stop();
      p.keySet?.close();
      await replies.stop();
      await live?.hub.close();
    },
  };
}

/** The live feed, unless EVENTS=off: in the engine's shared log (several instances) or in memory. */
function liveFeed(p: AppParts): { hub: Hub; tickets: TicketCodec } | undefined {
  const { config } = p;
  const events = config.events;
  if (events === undefined) return undefined;
  const shared = p.store.sharedEventLog();
  const feed: FeedLog =
    shared === undefined
      ? new MemoryFeedLog(p.store, announce, { events: events.window, bytes: events.windowBytes })
      : new SharedFeedLog(p.store, shared, events.window, p.log);
  const hub = new Hub(
    feed,
    {
      heartbeatMs: events.heartbeatMs,
      bufferBytes: events.bufferBytes,
      maxStreams: events.maxStreams,
      maxStreamsPerUser: events.maxStreamsPerUser,
      writeTimeoutMs: config.limits.writeTimeoutMs,
    },
    p.log,
    p.metrics,
  );
  return { hub, tickets: new TicketCodec([p.secrets.current, ...p.secrets.previous]) };
}
