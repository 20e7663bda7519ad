// What the caller's sessions hold (GET /api/v1/usage): the owner's usage the store keeps
// up to date with every write, so the answer costs one lookup whatever the caller holds.
import type { Store } from '../store/store.js';
import { user } from './access.js';
import { dataBody } from '../http/envelope.js';
import { route, type RouteDef } from '../http/route.js';

export function usageRoutes(store: Store): RouteDef[] {
  return [
    route({
      method: 'GET',
      path: '/api/v1/usage',
      operationId: 'getUsage',
      summary: "What the caller's own sessions hold: sessions, their turns (whoever wrote them) and the bytes of their JSON",
      tag: 'Chat sessions',
      auth: true,
      scope: 'sessions:read',
      responses: [{ status: 200, description: "The caller's usage", schema: 'Usage' }],
      async handle(ctx) {
        const u = await store.usage(user(ctx));
        return { status: 200, body: dataBody(JSON.stringify({ sessions: u.sessions, turns: u.turns, bytes: u.bytes })) };
      },
    }),
  ];
}
