// The service's own routes, outside the spec's two groups: health, the OpenAPI document, its
// HTML reference page and Prometheus metrics. None needs a token.
import type { Metrics } from '../metrics.js';
import type { DocsPage } from './docs-page.js';
import type { ProviderCatalog } from '../providers/catalog.js';
import type { Store } from '../store/store.js';
import { dataBody } from './envelope.js';
import { route, type RouteDef } from './route.js';

export interface ServiceDeps {
  readonly version: string;
  readonly catalog: () => ProviderCatalog;
  readonly store: Store;
  /** undefined when METRICS=off: the route does not exist. */
  readonly metrics: Metrics | undefined;
  /** The OpenAPI document, serialized once the table is complete. */
  readonly openApiBody: () => string;
  /** The reference page, built once the document is; undefined when DOCS=off: the route does not exist. */
  readonly docsPage: (() => DocsPage) | undefined;
}

export function serviceRoutes(d: ServiceDeps): RouteDef[] {
  const routes: RouteDef[] = [
    route({
      method: 'GET',
      path: '/healthz',
      operationId: 'health',
      summary: 'Liveness, version, the storage engine, and when the providers file was last loaded; 503 while the database is unreachable, or once the store was found damaged',
      tag: 'Service',
      auth: false,
      unlimited: true,
      responses: [{ status: 200, description: 'Serving', schema: 'Health' }],
      errors: [{ status: 503, description: 'Storage unavailable: the database cannot be reached; or Storage damaged: the sqlite file was found damaged (writes are refused)' }],
      async handle() {
        await d.store.health();
        const c = d.catalog();
        return {
          status: 200,
          body: dataBody(JSON.stringify({ status: 'ok', version: d.version, store: d.store.engine, providers: { count: c.count, loadedAt: c.loadedAt } })),
        };
      },
    }),
    route({
      method: 'GET',
      path: '/api/v1/openapi.json',
      operationId: 'openApi',
      summary: 'This API as an OpenAPI 3.1 document',
      tag: 'Service',
      auth: false,
      responses: [{ status: 200, description: 'The document', schema: 'OpenApi' }],
      handle() {
        return { status: 200, body: d.openApiBody() };
      },
    }),
  ];
  const docsPage = d.docsPage;
  if (docsPage !== undefined) {
    routes.push(
      route({
        method: 'GET',
        path: '/docs',
        operationId: 'docs',
        summary: 'This reference as an HTML page with a try-it form per operation (DOCS=off removes this route)',
        tag: 'Service',
        auth: false,
        responses: [{ status: 200, description: 'The page', schema: 'DocsPage' }],
        handle() {
          const page = docsPage();
          return { status: 200, contentType: 'text/html; charset=utf-8', body: page.html, headers: page.headers };
        },
      }),
    );
  }
  const metrics = d.metrics;
  if (metrics !== undefined) {
    routes.push(
      route({
        method: 'GET',
        path: '/metrics',
        operationId: 'metrics',
        summary: 'Prometheus metrics (METRICS=off removes this route)',
        tag: 'Service',
        auth: false,
        unlimited: true,
        responses: [{ status: 200, description: 'Metrics in Prometheus text format', schema: 'Metrics' }],
        async handle() {
          const store = await d.store.stats();
          return {
            status: 200,
            contentType: 'text/plain; version=0.0.4; charset=utf-8',
            body: metrics.render({ engine: d.store.engine, store, providers: d.catalog().count }),
          };
        },
      }),
    );
  }
  return routes;
}
