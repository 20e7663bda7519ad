// Errors as OpenAI's API answers them, on every route under /v1: `{"error":{message, type,
// param, code}}`, the type by the status, `param` the field a 400 names. One exception, as OpenAI
// does it: an exceeded quota (403 on the native API) is 429 of type and code insufficient_quota, with
// `x-should-retry: false` so the SDKs do not try it again.
import { DomainError } from '../../domain/errors.js';
import { HttpError } from '../errors.js';

/** OpenAI's error type for a status. */
function typeOf(status: number): string {
  if (status === 401) return 'authentication_error';
  if (status === 403) return 'permission_error';
  if (status === 429) return 'rate_limit_error';
  if (status >= 500) return 'api_error';
  return 'invalid_request_error';
}

/** The field a 400's message names first (`messages[0].role must be ...` -> `messages[0].role`), or null. */
function paramOf(status: number, message: string): string | null {
  if (status !== 400) return null;
  const m = /^([A-Za-z_][A-Za-z0-9_]*(?:\[\d+\]|\.[A-Za-z_][A-Za-z0-9_]*)*) (?:must|is|needs)\b/.exec(message);
  return m === null ? null : (m[1] as string);
}

/** The answer of a refusal or failure under /v1: its status (a quota's is 429), its body, and headers beside the refusal's own. */
export function openaiError(h: HttpError, thrown: unknown, method: string, path: string): { status: number; body: string; headers: [string, string][] } {
  let status = h.status;
  let code: string | null = null;
  let message = h.message;
  const headers: [string, string][] = [];
  if (thrown instanceof DomainError && thrown.code === 'quota_exceeded') {
    status = 429;
    code = 'insufficient_quota';
    headers.push(['x-should-retry', 'false']);
  } else if (thrown instanceof DomainError && thrown.code === 'model_not_found') code = 'model_not_found';
  else if (status === 404 && message === 'Not found') {
    message = `Invalid URL (${method} ${path})`;
    code = 'unknown_url';
  } else if (status === 401) code = 'invalid_api_key';
  const param = code === 'model_not_found' ? 'model' : paramOf(status, message);
  // OpenAI's exceeded quota is its own type too
  const type = code === 'insufficient_quota' ? 'insufficient_quota' : typeOf(status);
  return { status, body: JSON.stringify({ error: { message, type, param, code } }), headers };
}
