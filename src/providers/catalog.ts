// The configured AI providers: read from providers.json, checked, redacted once and kept as
// ready-to-send response bodies. The `apiKey` leaves this module only in `records`, for the
// provider clients (src/providers/) to call with: never in a response, a log line or an error message.
import { readFileSync } from 'node:fs';
import { isHexObjectId } from '../domain/ids.js';
import { isCountName, isCredentialName, isHeadersName } from './credentials.js';

export class ProvidersFileError extends Error {
  override readonly name = 'ProvidersFileError';
}

export interface ProviderCatalog {
  readonly count: number;
  readonly loadedAt: string;
  /** false when the file did not exist (no providers). */
  readonly fromFile: boolean;
  /** The providers as the API answers them (redacted), a JSON array sorted by name. */
  readonly listJson: string;
  /** One provider as the API answers it (redacted), JSON, by lowercase id. */
  readonly json: ReadonlyMap<string, string>;
  /** Each provider's entry as the file holds it (key included), by lowercase id: what src/providers/config.ts reads to call it. */
  readonly records: ReadonlyMap<string, ProviderRecord>;
}

/** A provider's entry as the file holds it. */
export type ProviderRecord = { readonly [key: string]: unknown };

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** Fields removed outright (the spec's `apiKey`, however spelled). */
const KEY_NAME = /^api[-_]?key$/i;
const MASK = '***';
// up to the LAST @ of the authority, as URL parsers split it (a password may hold an unencoded @)
const URL_USERINFO = /([a-z][a-z0-9+.-]*:\/\/)[^/?#\s]+@/gi;
const SECRET_PARAM = /([?&](?:[^=&#]*(?:key|token|secret|passw|pwd|passcode|passphrase|auth|bearer|cookie|credential|jwt|signature|sig|private)[^=&#]*)=)[^&#]*/gi;
/**
 * Where a `name=` of a connection string begins (`Server=db;Password=x;`, libpq's `host=db password=x`):
 * see maskPairs.
 */
const PAIR_NAME = /(^|[;\s])([A-Za-z][A-Za-z0-9 _.-]{0,40}?)=/g;
/** An HTTP credential written out in free text (`Authorization: Bearer x`, `Basic x`). */
const SCHEME_CREDENTIAL = /\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{4,}/gi;
/** Any scheme's credential after `Authorization:` written in text (`Authorization: Token x`, `ApiKey x`). */
const AUTHORIZATION_LINE = /(Authorization:\s*[A-Za-z][A-Za-z0-9_-]*)\s+[^\s,;]{4,}/gi;

/**
 * A connection string's pairs named like credentials, masked up to the next `;` (or the end): the
 * names are looked for from the start of each value on, so a pair's value does not hide one named
 * after it (`host=db password=x`, pairs separated by spaces), and a credential's takes in what
 * follows it (a password may hold spaces and `=`).
 */
function maskPairs(s: string): string {
  let out = '';
  let from = 0;
  PAIR_NAME.lastIndex = 0;
  for (let m = PAIR_NAME.exec(s); m !== null; m = PAIR_NAME.exec(s)) {
    const at = m.index + m[0].length;
    if (!isCredentialName(m[2] as string)) continue;
    const semicolon = s.indexOf(';', at);
    const to = semicolon === -1 ? s.length : semicolon;
    if (to === at) continue;
    out += s.slice(from, at) + MASK;
    from = to;
    PAIR_NAME.lastIndex = to;
  }
  return out + s.slice(from);
}

/** A credential's value as answered: masked whole, unless it cannot hold a secret (true, false, null, "") or is a count. */
function maskCredential(name: string, value: Json): Json {
  if (value === null || typeof value === 'boolean' || value === '') return value;
  if (typeof value === 'number' && isCountName(name)) return value;
  return MASK;
}

/** What is under a `headers` field: every value masked (any header may carry a credential), the names kept. */
function maskHeaders(value: Json): Json {
  if (value === null || typeof value === 'boolean' || value === '') return value;
  if (Array.isArray(value)) return value.map(maskHeaders);
  if (typeof value === 'object') {
    const out: { [key: string]: Json } = {};
    for (const [k, v] of Object.entries(value)) if (!KEY_NAME.test(k)) out[k] = maskHeaders(v);
    return out;
  }
  return MASK;
}

/**
 * Removes `apiKey` (any case, `api_key`, `api-key`) at every depth, masks what is under a
 * credential's name (src/credentials.ts) or under `headers`, and credentials inside strings:
 * `secrets` copied anywhere, URL userinfo and URL query parameters named like credentials, a
 * connection string's pairs named so, and `Bearer`/`Basic` credentials written in text.
 */
function redact(value: Json, secrets: readonly string[]): Json {
  if (typeof value === 'string') {
    let s = value;
    for (const k of secrets) if (s.includes(k)) s = s.split(k).join(MASK);
    if (s.includes('://')) s = s.replace(URL_USERINFO, `$1${MASK}@`).replace(SECRET_PARAM, `$1${MASK}`);
    if (s.includes('=')) s = maskPairs(s);
    return s.replace(SCHEME_CREDENTIAL, `$1 ${MASK}`).replace(AUTHORIZATION_LINE, `$1 ${MASK}`);
  }
  if (Array.isArray(value)) return value.map((v) => redact(v, secrets));
  if (value !== null && typeof value === 'object') {
    const out: { [key: string]: Json } = {};
    for (const [k, v] of Object.entries(value)) {
      if (KEY_NAME.test(k)) continue;
      out[k] = isHeadersName(k) ? maskHeaders(v) : isCredentialName(k) ? maskCredential(k, v) : redact(v, secrets);
    }
    return out;
  }
  return value;
}

/** Every string and number held under a credential's name, so copies elsewhere in the file are masked too. */
function collectSecrets(value: Json, into: Set<string>, underCredential = false): void {
  if (typeof value === 'string' || typeof value === 'number') {
    if (underCredential) into.add(String(value));
  } else if (Array.isArray(value)) for (const v of value) collectSecrets(v, into, underCredential);
  else if (value !== null && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) {
      const credential = KEY_NAME.test(k) || (isCredentialName(k) && !(typeof v === 'number' && isCountName(k)));
      collectSecrets(v, into, underCredential || credential);
    }
  }
}

/** The secrets worth looking for in other strings: long enough not to mask ordinary text, longest first (one may hold another). */
function secretsOf(file: Json): string[] {
  const found = new Set<string>();
  collectSecrets(file, found);
  return [...found].filter((s) => s.length >= 4).sort((a, b) => b.length - a.length);
}

function describeId(v: unknown): string {
  if (typeof v !== 'string') return '';
  return ` (_id ${JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}...` : v)})`;
}

/** Line and column of a character offset, for a JSON syntax error without quoting the file. */
function lineCol(text: string, pos: number): string {
  const before = text.slice(0, pos);
  const line = before.split('\n').length;
  return `line ${line}, column ${pos - before.lastIndexOf('\n')}`;
}

function compareCodePoints(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
}

/** Parses and checks a providers file's text; `file` only names it in errors. */
export function parseProviders(text: string, file: string): ProviderCatalog {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    // V8's message quotes the file around the error, which may hold a key: report the position only
    throw new ProvidersFileError(`providers file ${file} is not valid JSON (near ${lineCol(text, jsonErrorOffset(text))})`);
  }
  if (!Array.isArray(parsed)) throw new ProvidersFileError(`providers file ${file} must hold a JSON array of provider objects`);
  const seen = new Map<string, number>();
  const entries: { id: string; name: string; body: Json }[] = [];
  const records = new Map<string, ProviderRecord>();
  // every secret in the file, so one copied into any entry's other fields is masked too
  const secrets = secretsOf(parsed as Json);
  parsed.forEach((entry: unknown, i) => {
    const where = `providers file ${file}: entry ${i + 1}`;
    if (typeof entry !== 'object' || entry === null || Array.isArray(entry)) throw new ProvidersFileError(`${where} is not an object`);
    const e = entry as { [key: string]: Json };
    const id = e['_id'];
    if (typeof id !== 'string' || !isHexObjectId(id)) throw new ProvidersFileError(`${where}${describeId(id)}: _id must be 24 hex characters`);
    const lower = id.toLowerCase();
    const dup = seen.get(lower);
    if (dup !== undefined) throw new ProvidersFileError(`${where} (_id "${id}"): _id repeats entry ${dup}`);
    seen.set(lower, i + 1);
    const name = e['name'];
    if (typeof name !== 'string' || name.trim() === '') throw new ProvidersFileError(`${where} (_id "${id}"): name must be a non-blank string`);
    const apiKey = e['apiKey'];
    const redacted = redact(e, secrets) as { [key: string]: Json };
    redacted['_id'] = lower;
    redacted['hasApiKey'] = typeof apiKey === 'string' && apiKey.trim() !== '';
    entries.push({ id: lower, name, body: redacted });
    records.set(lower, e);
  });
  entries.sort((a, b) => compareCodePoints(a.name, b.name) || compareCodePoints(a.id, b.id));
  const json = new Map<string, string>();
  for (const p of entries) json.set(p.id, JSON.stringify(p.body));
  return {
    count: entries.length,
    loadedAt: new Date().toISOString(),
    fromFile: true,
    listJson: `[${[...json.values()].join(',')}]`,
    json,
    records,
  };
}

/** Reads and checks the providers file. A missing file means no providers unless `required` (PROVIDERS_FILE was set). */
export function loadProviders(file: string, required = false): ProviderCatalog {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' && required) throw new ProvidersFileError(`providers file ${file} (PROVIDERS_FILE) does not exist`);
    if (code === 'ENOENT') {
      return { count: 0, loadedAt: new Date().toISOString(), fromFile: false, listJson: '[]', json: new Map(), records: new Map() };
    }
    throw new ProvidersFileError(`providers file ${file} cannot be read (${code ?? 'error'})`);
  }
  return parseProviders(text, file);
}

/**
 * Offset of the first JSON syntax error in `text` (which JSON.parse has rejected), found by a
 * small recursive-descent scan that reads values without keeping them.
 */
export function jsonErrorOffset(text: string): number {
  let i = 0;
  const ws = (): void => {
    while (i < text.length && ' \t\n\r'.includes(text[i] as string)) i++;
  };
  const fail = (): never => {
    throw i;
  };
  const literal = (word: string): void => {
    if (text.startsWith(word, i)) i += word.length;
    else fail();
  };
  const string = (): void => {
    i++; // opening quote
    while (i < text.length) {
      const c = text.charCodeAt(i);
      if (c === 34) {
        i++;
        return;
      }
      if (c < 32) fail();
      if (c === 92) {
        const e = text[i + 1] ?? '';
        if (e === 'u') {
          if (!/^[0-9a-fA-F]{4}$/.test(text.slice(i + 2, i + 6))) fail();
          i += 6;
        } else if ('"\\/bfnrt'.includes(e) && e !== '') i += 2;
        else fail();
      } else i++;
    }
    fail();
  };
  const number = (): void => {
    const m = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/.exec(text.slice(i, i + 400));
    if (m === null) fail();
    else i += m[0].length;
  };
  /** The items of an object or array up to `close`, each read by `item`, comma-separated. */
  const items = (close: string, item: () => void): void => {
    i++;
    ws();
    if (text[i] === close) {
      i++;
      return;
    }
    for (;;) {
      item();
      ws();
      if (text[i] === ',') i++;
      else if (text[i] === close) {
        i++;
        return;
      } else fail();
    }
  };
  const member = (): void => {
    ws();
    if (text[i] !== '"') fail();
    string();
    ws();
    if (text[i] !== ':') fail();
    i++;
    value();
  };
  const value = (): void => {
    ws();
    const c = text[i];
    if (c === '{') items('}', member);
    else if (c === '[') items(']', value);
    else if (c === '"') string();
    else if (c === 't') literal('true');
    else if (c === 'f') literal('false');
    else if (c === 'n') literal('null');
    else if (c === '-' || (c !== undefined && c >= '0' && c <= '9')) number();
    else fail();
  };
  try {
    value();
    ws();
    return i < text.length ? i : text.length;
  } catch (at) {
    return typeof at === 'number' ? at : 0;
  }
}
