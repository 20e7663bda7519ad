// AI providers (/api/v1/providers): read-only, answered from bodies prepared when the
// providers file was loaded (so no apiKey can reach a response by accident).
import { isHexObjectId } from '../domain/ids.js';
import { dataBody } from './envelope.js';
import { HttpError } from './errors.js';
import type { ProviderCatalog } from '../providers/catalog.js';
import { route, type RouteDef } from './route.js';

export function providerRoutes(catalog: () => ProviderCatalog): RouteDef[] {
  return [
    route({
      method: 'GET',
      path: '/api/v1/providers',
      operationId: 'listProviders',
      summary: 'List the configured providers sorted by name, without apiKey',
      tag: 'Providers',
      auth: true,
      scope: 'providers:read',
      responses: [{ status: 200, description: 'The providers', schema: 'ProviderList' }],
      handle() {
        return { status: 200, body: dataBody(catalog().listJson) };
      },
    }),
    route({
      method: 'GET',
      path: '/api/v1/providers/:id',
      operationId: 'getProvider',
      summary: 'Read one provider, without apiKey',
      tag: 'Providers',
      auth: true,
      scope: 'providers:read',
      params: { id: { description: 'Provider id: 24 hex characters.' } },
      responses: [{ status: 200, description: 'The provider', schema: 'Provider' }],
      errors: [
        { status: 400, description: 'Invalid provider ID' },
        { status: 404, description: 'Provider not found' },
      ],
      handle(ctx) {
        const id = ctx.params['id'] as string;
        if (!isHexObjectId(id)) throw new HttpError(400, 'Invalid provider ID');
        const json = catalog().json.get(id.toLowerCase());
        if (json === undefined) throw new HttpError(404, 'Provider not found');
        return { status: 200, body: dataBody(json) };
      },
    }),
  ];
}
