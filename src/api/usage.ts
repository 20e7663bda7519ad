// What the caller's sessions hold (GET /api/v1/usage), from src/services/usage.ts.
import type { UsageService } from '../services/usage.js';
import { caller } from './common.js';
import { dataBody } from './envelope.js';
import { route, type RouteDef } from './route.js';

export function usageRoutes(usage: UsageService): RouteDef[] {
  return [
    route({
      method: 'GET',
      path: '/api/v1/usage',
      operationId: 'getUsage',
      summary: "What the caller's own sessions hold: sessions, their turns (whoever wrote them), the bytes of their JSON and the tokens of their turns' usage",
      tag: 'Chat sessions',
      auth: true,
      scope: 'sessions:read',
      responses: [{ status: 200, description: "The caller's usage", schema: 'Usage' }],
      async handle(ctx) {
        const u = await usage.of(caller(ctx));
        return { status: 200, body: dataBody(JSON.stringify({ sessions: u.sessions, turns: u.turns, bytes: u.bytes, inputTokens: u.inputTokens, outputTokens: u.outputTokens, cachedTokens: u.cachedTokens })) };
      },
    }),
  ];
}
