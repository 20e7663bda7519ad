// A provider's record from providers.json read as something the clients can call: its type,
// where it is, its key and headers, and the models it allows. Checked here, before any call.
import { ProviderUnusable } from './failure.js';
import { REPLY_TYPES, type ProviderConfig, type ReplyType } from './wire.js';

/** Where each type is when the record gives no `baseUrl`: the vendor's own API, or a local Ollama. */
export const DEFAULT_BASE_URLS: { readonly [type in ReplyType]: string } = {
  openai: 'https://api.openai.com/v1',
  anthropic: 'https://api.anthropic.com',
  ollama: 'http://127.0.0.1:11434',
};

/** What node:http lets a header value hold (no control characters but tab). */
const HEADER_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;

/** True when a provider of this `type` can reply (`openai`, `anthropic`, `ollama`). */
export function canReply(type: unknown): type is ReplyType {
  return typeof type === 'string' && (REPLY_TYPES as readonly string[]).includes(type);
}

/**
 * The call configuration of a provider record (as providers.json holds it: `name`, `type`,
 * optional `baseUrl`, `apiKey`, `headers`, `models`). Throws ProviderUnusable, naming the
 * provider, when its type cannot reply or a field is not what it must be.
 */
export function providerConfig(record: { readonly [key: string]: unknown }): ProviderConfig {
  const name = typeof record['name'] === 'string' ? record['name'] : '';
  const who = `Provider ${JSON.stringify(name)}`;
  const type = record['type'];
  if (!canReply(type)) {
    const what = typeof type === 'string' ? `is of type ${JSON.stringify(type)}, which` : 'has no type, so it';
    throw new ProviderUnusable(`${who} ${what} cannot reply (the types that can are ${REPLY_TYPES.join(', ')})`);
  }
  const rawUrl = record['baseUrl'] ?? DEFAULT_BASE_URLS[type];
  let url: URL | undefined;
  try {
    url = typeof rawUrl === 'string' ? new URL(rawUrl) : undefined;
  } catch {
    url = undefined;
  }
  // the URL itself is not quoted: it may hold credentials
  if (url === undefined || (url.protocol !== 'http:' && url.protocol !== 'https:')) throw new ProviderUnusable(`${who} has a baseUrl that is not an http:// or https:// URL`);
  if (url.search !== '' || url.hash !== '') throw new ProviderUnusable(`${who} has a baseUrl with a query or a fragment; give the URL the API paths are appended to`);
  const apiKey = typeof record['apiKey'] === 'string' && record['apiKey'].trim() !== '' ? record['apiKey'].trim() : undefined;
  if (apiKey !== undefined && !HEADER_VALUE.test(apiKey)) throw new ProviderUnusable(`${who} has an apiKey with characters an HTTP header cannot carry`);
  const headers: Record<string, string> = {};
  const rawHeaders = record['headers'];
  if (rawHeaders !== undefined && rawHeaders !== null) {
    if (typeof rawHeaders !== 'object' || Array.isArray(rawHeaders)) throw new ProviderUnusable(`${who} has headers that are not an object of header names and string values`);
    for (const [k, v] of Object.entries(rawHeaders)) {
      if (typeof v !== 'string' || !/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(k) || !HEADER_VALUE.test(v)) {
        throw new ProviderUnusable(`${who} has a header ${JSON.stringify(k.slice(0, 100))} that is not a valid name with a string value`);
      }
      headers[k.toLowerCase()] = v;
    }
  }
  const rawModels = record['models'];
  let models: string[] | undefined;
  if (rawModels !== undefined && rawModels !== null) {
    if (!Array.isArray(rawModels) || !rawModels.every((m) => typeof m === 'string')) throw new ProviderUnusable(`${who} has models that are not a list of model names`);
    models = rawModels as string[];
  }
  return { name, type, baseUrl: url.href.replace(/\/+$/, ''), apiKey, headers, models };
}

/** The model may be asked of this provider: its `models` is absent or empty, or lists it. */
export function modelAllowed(provider: ProviderConfig, model: string): boolean {
  return provider.models === undefined || provider.models.length === 0 || provider.models.includes(model);
}

/** How many of a provider's `models` a refusal names before it counts the rest. */
const NAMED_MODELS = 20;

/** The models a refusal offers instead, for a message: `"a", "b", and 3 more` (the first 20 named). */
export function allowedModels(provider: ProviderConfig): string {
  const all = provider.models ?? [];
  const named = all.slice(0, NAMED_MODELS).map((m) => JSON.stringify(m));
  return all.length > NAMED_MODELS ? `${named.join(', ')}, and ${all.length - NAMED_MODELS} more` : named.join(', ');
}
