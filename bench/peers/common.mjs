// What both peers share: their packages, loaded from $BENCH_PEERS (never dependencies of this
// project), the HS256 check of a Bearer token as an ordinary Fastify app makes it, and a
// session's record as the create route builds it. Only the benchmark starts them (bench/peers.mjs).
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { createRequire } from 'node:module';
import { join } from 'node:path';

/** require() from the directory named by BENCH_PEERS (`npm install --prefix DIR fastify pg`). */
export function peerRequire() {
  const dir = process.env.BENCH_PEERS;
  if (dir === undefined || dir === '') throw new Error('BENCH_PEERS is not set');
  return createRequire(join(dir, 'package.json'));
}

const KEY = Buffer.from(process.env.AUTH_SECRET ?? '', 'utf8');

/**
 * The token's `sub`, or undefined: the signature checked with node:crypto on every request, its
 * header and claims parsed, `exp` enforced. @fastify/jwt (fast-jwt) does this much per request
 * by default (its cache is off unless configured), so the peer pays what a typical app pays.
 */
export function userOf(authorization) {
  if (typeof authorization !== 'string' || !authorization.startsWith('Bearer ')) return undefined;
  const token = authorization.slice(7);
  const dot1 = token.indexOf('.');
  const dot2 = token.indexOf('.', dot1 + 1);
  if (dot1 < 0 || dot2 < 0) return undefined;
  const mac = createHmac('sha256', KEY).update(token.slice(0, dot2)).digest();
  const given = Buffer.from(token.slice(dot2 + 1), 'base64url');
  if (given.length !== mac.length || !timingSafeEqual(given, mac)) return undefined;
  try {
    const header = JSON.parse(Buffer.from(token.slice(0, dot1), 'base64url').toString('utf8'));
    if (header.alg !== 'HS256') return undefined;
    const claims = JSON.parse(Buffer.from(token.slice(dot1 + 1, dot2), 'base64url').toString('utf8'));
    if (typeof claims.exp === 'number' && claims.exp * 1000 <= Date.now()) return undefined;
    return typeof claims.sub === 'string' ? claims.sub : undefined;
  } catch {
    return undefined;
  }
}

/** A new session with the fields and order of the API's answer, or a 400 message for a bad body. */
export function newSession(body, user) {
  if (body === null || typeof body !== 'object') return { error: 'Request body must be a JSON object' };
  for (const k of ['projectId', 'providerId', 'selectedModel']) {
    if (typeof body[k] !== 'string' || body[k] === '') return { error: `${k} is required` };
  }
  if (body.name !== undefined && typeof body.name !== 'string') return { error: 'name must be a string' };
  const now = new Date();
  const at = now.toISOString();
  const id = Math.floor(now.getTime() / 1000).toString(16).padStart(8, '0') + randomBytes(8).toString('hex');
  return {
    session: {
      _id: id,
      name: body.name ?? '',
      provider: body.providerId,
      selectedModel: body.selectedModel,
      mode: 'Build',
      user,
      project: body.projectId,
      createdAt: at,
      updatedAt: at,
      archived: false,
      headTurnId: null,
    },
  };
}

export const UNAUTHORIZED = { success: false, message: 'Missing or invalid token' };
export const NOT_FOUND = '{"success":false,"message":"Chat session not found"}';
export const JSON_TYPE = 'application/json; charset=utf-8';
