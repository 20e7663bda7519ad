// A small schema language for request bodies and query strings. The route table declares
// its inputs with it once; validation and the OpenAPI document are both derived from that.
import type { JsonObject } from './records.js';

export interface StringField {
  readonly kind: 'string';
  readonly description: string;
  /** Missing, null or blank after trimming gets "<name> is required". */
  readonly required?: boolean;
  /** Present but blank after trimming gets "<name> must not be blank". */
  readonly notBlank?: boolean;
  /** "" counts as absent (the spec's "when mode is absent or empty"). */
  readonly emptyIsAbsent?: boolean;
  /** Counted in Unicode code points. */
  readonly maxLength?: number;
  readonly oneOf?: readonly string[];
}

export interface ObjectField {
  readonly kind: 'object';
  readonly description: string;
  /** Limit on the field's JSON text in UTF-8 bytes. */
  readonly maxBytes: number;
  /** Limit on nesting (the object itself is level 1). */
  readonly maxDepth: number;
}

export interface IntegerField {
  readonly kind: 'integer';
  readonly description: string;
  readonly min: number;
  readonly max: number;
}

export type BodyField = StringField | ObjectField;
export type QueryField = StringField | IntegerField;

export interface BodySchema<F extends Record<string, BodyField> = Record<string, BodyField>> {
  /** Component name in the OpenAPI document. */
  readonly name: string;
  /** Validated in this order: the first failure is the answer. */
  readonly fields: F;
  /** Create-style bodies treat an explicit null like an absent optional field; update bodies
   * take any value that is "present (not undefined)" and so reject null as the wrong type. */
  readonly nullIsAbsent: boolean;
}

export interface QuerySchema<F extends Record<string, QueryField> = Record<string, QueryField>> {
  readonly fields: F;
}

type ValueOf<F> = F extends StringField ? string : F extends ObjectField ? JsonObject : F extends IntegerField ? number : never;
export type Values<F> = { -readonly [K in keyof F]?: ValueOf<F[K]> };

/** A request input that does not satisfy its schema; the message is the client's answer. */
export class ValidationError extends Error {
  override readonly name = 'ValidationError';
}

function codePointLength(s: string, atMost: number): number {
  if (s.length <= atMost) return s.length; // UTF-16 length bounds the code point count from above
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) i++;
    }
    n++;
  }
  return n;
}

function checkString(name: string, f: StringField, value: string): void {
  if (f.notBlank === true && value.trim() === '') throw new ValidationError(`${name} must not be blank`);
  if (f.maxLength !== undefined && codePointLength(value, f.maxLength) > f.maxLength) {
    throw new ValidationError(`${name} must be at most ${f.maxLength} characters`);
  }
  if (f.oneOf !== undefined && !f.oneOf.includes(value)) {
    throw new ValidationError(`${name} must be one of: ${f.oneOf.join(', ')}`);
  }
}

/** True when `value` nests objects or arrays deeper than `max` levels; iterative, so any depth is safe. */
function depthExceeds(value: unknown, max: number): boolean {
  const stack: [unknown, number][] = [[value, 1]];
  while (stack.length > 0) {
    const [v, d] = stack.pop() as [unknown, number];
    if (typeof v !== 'object' || v === null) continue;
    if (d > max) return true;
    for (const child of Array.isArray(v) ? v : Object.values(v)) {
      if (typeof child === 'object' && child !== null) stack.push([child, d + 1]);
    }
  }
  return false;
}

/** A JSON object: not null, not an array. */
export function isPlainObject(v: unknown): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Validates a parsed JSON object against a body schema; unknown fields are ignored. */
export function validateBody<F extends Record<string, BodyField>>(schema: BodySchema<F>, body: Record<string, unknown>): Values<F> {
  const out: Record<string, string | JsonObject> = {};
  for (const name of Object.keys(schema.fields)) {
    const f = schema.fields[name] as BodyField;
    let value = Object.prototype.hasOwnProperty.call(body, name) ? body[name] : undefined;
    if (value === null && (schema.nullIsAbsent || (f.kind === 'string' && f.required === true))) value = undefined;
    if (f.kind === 'string') {
      if (typeof value === 'string' && value === '' && f.emptyIsAbsent === true) value = undefined;
      if (f.required === true && (value === undefined || (typeof value === 'string' && value.trim() === ''))) {
        throw new ValidationError(`${name} is required`);
      }
      if (value === undefined) continue;
      if (typeof value !== 'string') throw new ValidationError(`${name} must be a string`);
      checkString(name, f, value);
      out[name] = value;
    } else {
      if (value === undefined) continue;
      if (!isPlainObject(value)) throw new ValidationError(`${name} must be a JSON object`);
      // checked without recursion before anything recursive (JSON.stringify) walks it
      if (depthExceeds(value, f.maxDepth)) throw new ValidationError(`${name} must be nested at most ${f.maxDepth} levels deep`);
      if (Buffer.byteLength(JSON.stringify(value)) > f.maxBytes) {
        throw new ValidationError(`${name} must be at most ${f.maxBytes} bytes of JSON`);
      }
      out[name] = value;
    }
  }
  return out as Values<F>;
}

/** Parsed query string: each name with every value it was given. */
export type QueryParams = ReadonlyMap<string, readonly string[]>;

function decodeQueryPart(s: string): string {
  const plus = s.includes('+') ? s.replace(/\+/g, ' ') : s;
  if (!plus.includes('%')) return plus;
  try {
    return decodeURIComponent(plus);
  } catch {
    throw new ValidationError('Invalid query string');
  }
}

/** Parses `a=1&b=2` (form encoding: `+` is a space); malformed percent-escapes are a 400. */
export function parseQuery(raw: string): QueryParams {
  const params = new Map<string, string[]>();
  if (raw === '') return params;
  for (const part of raw.split('&')) {
    if (part === '') continue;
    const eq = part.indexOf('=');
    const key = decodeQueryPart(eq === -1 ? part : part.slice(0, eq));
    const value = eq === -1 ? '' : decodeQueryPart(part.slice(eq + 1));
    const list = params.get(key);
    if (list === undefined) params.set(key, [value]);
    else list.push(value);
  }
  return params;
}

const INTEGER = /^(0|[1-9][0-9]{0,15})$/;

/** Validates the query parameters a route declares; others are ignored. An empty value is absent. */
export function validateQuery<F extends Record<string, QueryField>>(schema: QuerySchema<F>, params: QueryParams): Values<F> {
  const out: Record<string, string | number> = {};
  for (const name of Object.keys(schema.fields)) {
    const values = params.get(name);
    if (values === undefined) continue;
    if (values.length > 1) throw new ValidationError(`${name} must be given at most once`);
    const raw = values[0] as string;
    const f = schema.fields[name] as QueryField;
    if (raw === '') continue;
    if (f.kind === 'integer') {
      const n = INTEGER.test(raw) ? Number(raw) : NaN;
      if (!(n >= f.min && n <= f.max)) throw new ValidationError(`${name} must be an integer from ${f.min} to ${f.max}`);
      out[name] = n;
    } else {
      checkString(name, f, raw);
      out[name] = raw;
    }
  }
  return out as Values<F>;
}

type JsonSchema = { readonly [key: string]: unknown };

/** JSON Schema for a string that must not be blank after trimming. */
export const NOT_BLANK: JsonSchema = { minLength: 1, pattern: '\\S' };

function fieldJsonSchema(f: BodyField | QueryField): JsonSchema {
  switch (f.kind) {
    case 'string':
      return {
        type: 'string',
        description: f.description,
        // refused when blank after trimming: at least one character, and one that is not white space
        ...(f.oneOf === undefined && (f.required === true || f.notBlank === true) ? NOT_BLANK : {}),
        ...(f.maxLength !== undefined ? { maxLength: f.maxLength } : {}),
        // where "" counts as absent it is accepted, so the enum says so
        ...(f.oneOf !== undefined ? { enum: f.emptyIsAbsent === true ? [...f.oneOf, ''] : [...f.oneOf] } : {}),
      };
    case 'object':
      return { type: 'object', description: `${f.description} At most ${f.maxBytes} bytes as JSON, nested at most ${f.maxDepth} levels.`, additionalProperties: true };
    case 'integer':
      return { type: 'integer', description: f.description, minimum: f.min, maximum: f.max };
  }
}

/** JSON Schema (OpenAPI 3.1 dialect) of a body schema. */
export function bodyJsonSchema(schema: BodySchema): JsonSchema {
  const properties: Record<string, JsonSchema> = {};
  const required: string[] = [];
  for (const [name, f] of Object.entries(schema.fields)) {
    properties[name] = fieldJsonSchema(f);
    if (f.kind === 'string' && f.required === true) required.push(name);
  }
  return { type: 'object', properties, ...(required.length > 0 ? { required } : {}), additionalProperties: true };
}

/** OpenAPI parameter objects of a query schema. */
export function queryParameters(schema: QuerySchema): JsonSchema[] {
  return Object.entries(schema.fields).map(([name, f]) => ({
    name,
    in: 'query',
    required: false,
    description: f.description,
    schema: fieldJsonSchema(f),
  }));
}
