// A small schema language for request bodies and query strings, and the validation it makes. The
// route table declares its inputs with it once; the OpenAPI document is derived from it too
// (./json-schema.ts).
import { DomainError } from './errors.js';
import type { JsonObject, JsonValue } from './records.js';

export interface StringField {
  readonly kind: 'string';
  readonly description: string;
  /** Missing, null or blank after trimming gets "<name> is required". */
  readonly required?: boolean;
  /** Present but blank after trimming gets "<name> must not be blank". */
  readonly notBlank?: boolean;
  /** Missing or null gets "<name> is required", "" gets "<name> must not be empty"; white space counts (a delta's text). */
  readonly present?: boolean;
  /** "" counts as absent (the spec's "when mode is absent or empty"). */
  readonly emptyIsAbsent?: boolean;
  /** Counted in Unicode code points. */
  readonly maxLength?: number;
  readonly oneOf?: readonly string[];
  /** null is a value of its own (kept as null), even in a body where null counts as absent. */
  readonly nullable?: boolean;
  /** A regular expression (Unicode mode) the whole value must match, and what it means for the message. */
  readonly pattern?: { readonly regex: string; readonly means: string };
  /** Half of a UTF-16 surrogate pair alone gets "<name> must be well-formed Unicode" (a session's fields: PostgreSQL reads them back from its JSON). */
  readonly wellFormed?: boolean;
}

export interface ObjectField {
  readonly kind: 'object';
  readonly description: string;
  readonly required?: boolean;
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

/** A JSON number (an integer when `integer`), at least `min` (and at most `max` when given). */
export interface NumberField {
  readonly kind: 'number';
  readonly description: string;
  readonly required?: boolean;
  readonly integer: boolean;
  readonly min: number;
  readonly max?: number;
}

export interface BooleanField {
  readonly kind: 'boolean';
  readonly description: string;
  readonly required?: boolean;
}

/** Any JSON value (null included), nested at most `maxDepth` levels. */
export interface JsonField {
  readonly kind: 'json';
  readonly description: string;
  readonly required?: boolean;
  readonly maxDepth: number;
}

/** An object with declared fields, kept in their declared order; other keys are dropped. */
export interface ShapeField {
  readonly kind: 'shape';
  readonly description: string;
  readonly required?: boolean;
  readonly fields: Readonly<Record<string, BodyField>>;
}

/** One kind of object a TaggedField takes: its fields beside the tag. */
export interface Variant {
  readonly description: string;
  readonly fields: Readonly<Record<string, BodyField>>;
  /** Exactly one of these fields must be present. */
  readonly exactlyOneOf?: readonly string[];
}

/** An object whose `tag` field names which of the variants it is. */
export interface TaggedField {
  readonly kind: 'tagged';
  readonly description: string;
  readonly required?: boolean;
  readonly tag: string;
  readonly variants: Readonly<Record<string, Variant>>;
}

/** A JSON array of items of one field's kind. */
export interface ListField {
  readonly kind: 'list';
  readonly description: string;
  readonly required?: boolean;
  readonly items: BodyField;
  readonly minItems: number;
  readonly maxItems: number;
}

/** A JSON object of string values: at most `maxKeys` keys of 1 to `keyMax` characters, values of at most `valueMax`. */
export interface MapField {
  readonly kind: 'map';
  readonly description: string;
  readonly required?: boolean;
  readonly maxKeys: number;
  readonly keyMax: number;
  readonly valueMax: number;
}

/** A query parameter that may be given several times: every value, each checked as `item`. */
export interface RepeatedField {
  readonly kind: 'repeated';
  readonly description: string;
  readonly item: StringField;
  readonly maxItems: number;
}

/** One of several fields, chosen by the JSON type of the value (a string, an array, an object...). */
export interface EitherField {
  readonly kind: 'either';
  readonly description: string;
  readonly required?: boolean;
  readonly of: readonly BodyField[];
  /** What the value must be, for the message when it is none of them ("a string or an array of parts"). */
  readonly expected: string;
}

export type BodyField = StringField | ObjectField | NumberField | BooleanField | JsonField | ShapeField | TaggedField | ListField | EitherField | MapField;
export type QueryField = StringField | IntegerField | RepeatedField;

export interface BodySchema<F extends Record<string, BodyField> = Record<string, BodyField>> {
  /** Component name in the OpenAPI document. */
  readonly name: string;
  /** Validated in this order: the first failure is the answer. */
  readonly fields: F;
  /** Create-style bodies treat an explicit null like an absent optional field; update bodies
   * take any value that is "present (not undefined)" and so reject null as the wrong type. */
  readonly nullIsAbsent: boolean;
  /** A body the route accepts, as the OpenAPI document's `examples` (the /docs try-it form starts with it). */
  readonly example: Readonly<Record<string, JsonValue>>;
}

export interface QuerySchema<F extends Record<string, QueryField> = Record<string, QueryField>> {
  readonly fields: F;
}

type ValueOf<F> = F extends StringField
  ? F extends { readonly nullable: true }
    ? string | null
    : string
  : F extends ObjectField
    ? JsonObject
    : F extends IntegerField | NumberField
      ? number
      : F extends BooleanField
        ? boolean
        : F extends RepeatedField
          ? string[]
          : F extends MapField
            ? { [key: string]: string }
            : F extends ListField
              ? JsonValue[]
              : JsonValue;
/** The fields validation guarantees: a required field, or one that must be present. */
type Given<F> = { [K in keyof F]: F[K] extends { readonly required: true } | { readonly present: true } ? K : never }[keyof F];
export type Values<F> = { -readonly [K in Given<F>]: ValueOf<F[K]> } & { -readonly [K in Exclude<keyof F, Given<F>>]?: ValueOf<F[K]> };

/** A request input that does not satisfy its schema; the message is the client's answer. */
/** A request that breaks a rule of its shape: a 400 with this message. */
export class ValidationError extends DomainError {
  override readonly name = 'ValidationError';
  constructor(message: string) {
    super('invalid', message);
  }
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
  if (f.pattern !== undefined && !compiled(f.pattern.regex).test(value)) throw new ValidationError(`${name} must be ${f.pattern.means}`);
  if (f.wellFormed === true && hasLoneSurrogate(value)) throw new ValidationError(`${name} must be well-formed Unicode (no half of a surrogate pair alone)`);
}

const LONE_SURROGATE = /\p{Cs}/u;
/** Whether `s` holds half of a UTF-16 surrogate pair alone (not well-formed Unicode; in Unicode mode a pair is one code point). */
export function hasLoneSurrogate(s: string): boolean {
  return LONE_SURROGATE.test(s);
}

const patterns = new Map<string, RegExp>();
function compiled(regex: string): RegExp {
  let r = patterns.get(regex);
  if (r === undefined) {
    r = new RegExp(regex, 'u');
    patterns.set(regex, r);
  }
  return r;
}

/** True when `value` nests objects or arrays deeper than `max` levels; iterative, so any depth is safe. */
export function depthExceeds(value: unknown, max: number): boolean {
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

/** The JSON type a field takes, to choose among the fields of an EitherField. */
function jsonTypeOf(f: BodyField): string {
  switch (f.kind) {
    case 'string':
    case 'number':
    case 'boolean':
      return f.kind;
    case 'list':
      return 'array';
    case 'map':
      return 'object';
    case 'json':
      return 'any';
    default:
      return 'object';
  }
}

function jsonTypeOfValue(v: unknown): string {
  if (Array.isArray(v)) return 'array';
  if (v === null) return 'null';
  return typeof v;
}

/**
 * Checks a present value (not undefined) of field `f` at `path` (`content[2].type`) and returns
 * it as kept: objects of declared fields rebuilt in their declared order, without other keys.
 */
function checkValue(path: string, f: BodyField, value: unknown): JsonValue {
  switch (f.kind) {
    case 'string':
      if (value === null && f.nullable === true) return null;
      if (typeof value !== 'string') throw new ValidationError(`${path} must be a string${f.nullable === true ? ' or null' : ''}`);
      if (f.required === true && value.trim() === '') throw new ValidationError(`${path} is required`);
      if (f.present === true && value === '') throw new ValidationError(`${path} must not be empty`);
      checkString(path, f, value);
      return value;
    case 'object':
      if (!isPlainObject(value)) throw new ValidationError(`${path} must be a JSON object`);
      // checked without recursion before anything recursive (JSON.stringify) walks it
      if (depthExceeds(value, f.maxDepth)) throw new ValidationError(`${path} must be nested at most ${f.maxDepth} levels deep`);
      if (Buffer.byteLength(JSON.stringify(value)) > f.maxBytes) throw new ValidationError(`${path} must be at most ${f.maxBytes} bytes of JSON`);
      return value;
    case 'number': {
      const kind = f.integer ? 'integer' : 'number';
      const what =
        f.max !== undefined ? `${f.integer ? 'an' : 'a'} ${kind} from ${f.min} to ${f.max}` : f.min === 0 ? `a non-negative ${kind}` : `${f.integer ? 'an' : 'a'} ${kind} of at least ${f.min}`;
      if (typeof value !== 'number' || !Number.isFinite(value) || (f.integer && !Number.isSafeInteger(value)) || value < f.min || (f.max !== undefined && value > f.max)) {
        throw new ValidationError(`${path} must be ${what}`);
      }
      return value;
    }
    case 'boolean':
      if (typeof value !== 'boolean') throw new ValidationError(`${path} must be true or false`);
      return value;
    case 'json':
      if (depthExceeds(value, f.maxDepth)) throw new ValidationError(`${path} must be nested at most ${f.maxDepth} levels deep`);
      return value as JsonValue;
    case 'shape':
      if (!isPlainObject(value)) throw new ValidationError(`${path} must be an object`);
      return checkFields(path, f.fields, value);
    case 'tagged': {
      if (!isPlainObject(value)) throw new ValidationError(`${path} must be an object`);
      const tag = value[f.tag];
      if (tag === undefined || tag === null) throw new ValidationError(`${path}.${f.tag} is required`);
      const names = Object.keys(f.variants);
      const variant = typeof tag === 'string' && Object.hasOwn(f.variants, tag) ? f.variants[tag] : undefined;
      if (variant === undefined) throw new ValidationError(`${path}.${f.tag} must be one of: ${names.join(', ')}`);
      const present = (variant.exactlyOneOf ?? []).filter((n) => value[n] !== undefined && value[n] !== null);
      if (variant.exactlyOneOf !== undefined && present.length !== 1) {
        throw new ValidationError(`${path} must have exactly one of: ${variant.exactlyOneOf.join(', ')}`);
      }
      return { [f.tag]: tag as string, ...checkFields(path, variant.fields, value) };
    }
    case 'list': {
      if (!Array.isArray(value)) throw new ValidationError(`${path} must be an array`);
      if (value.length < f.minItems) throw new ValidationError(f.minItems === 1 ? `${path} must not be empty` : `${path} must have at least ${f.minItems} items`);
      if (value.length > f.maxItems) throw new ValidationError(`${path} must have at most ${f.maxItems} items`);
      return value.map((item: unknown, i) => {
        if (item === undefined || item === null) throw new ValidationError(`${path}[${i}] must not be null`);
        return checkValue(`${path}[${i}]`, f.items, item);
      });
    }
    case 'map': {
      if (!isPlainObject(value)) throw new ValidationError(`${path} must be an object`);
      const keys = Object.keys(value);
      if (keys.length > f.maxKeys) throw new ValidationError(`${path} must have at most ${f.maxKeys} keys`);
      for (const k of keys) {
        if (k === '' || codePointLength(k, f.keyMax) > f.keyMax) throw new ValidationError(`${path} keys must be 1 to ${f.keyMax} characters`);
        const v = value[k];
        if (typeof v !== 'string') throw new ValidationError(`${path}.${k} must be a string`);
        if (codePointLength(v, f.valueMax) > f.valueMax) throw new ValidationError(`${path}.${k} must be at most ${f.valueMax} characters`);
        if (hasLoneSurrogate(k) || hasLoneSurrogate(v)) throw new ValidationError(`${path} must be well-formed Unicode (no half of a surrogate pair alone)`);
      }
      return value;
    }
    case 'either': {
      const type = jsonTypeOfValue(value);
      const alt = f.of.find((a) => jsonTypeOf(a) === type || jsonTypeOf(a) === 'any');
      if (alt === undefined) throw new ValidationError(`${path} must be ${f.expected}`);
      return checkValue(path, alt, value);
    }
  }
}

/** The declared fields of an object at `path`, in their order; null is absent for an optional field. */
function checkFields(path: string, fields: Readonly<Record<string, BodyField>>, value: JsonObject): JsonObject {
  const out: Record<string, JsonValue> = {};
  for (const name of Object.keys(fields)) {
    const f = fields[name] as BodyField;
    let v: unknown = Object.hasOwn(value, name) ? value[name] : undefined;
    if (v === null && f.kind !== 'json' && !(f.kind === 'string' && f.nullable === true)) v = undefined;
    if (v === undefined) {
      if (f.required === true) throw new ValidationError(`${path}.${name} is required`);
      continue;
    }
    out[name] = checkValue(`${path}.${name}`, f, v);
  }
  return out;
}

/** A field whose absence (or null) is refused as "<name> is required". */
export function mustBeGiven(f: BodyField): boolean {
  return f.required === true || (f.kind === 'string' && f.present === true);
}

/** Validates a parsed JSON object against a body schema; unknown fields are ignored. */
export function validateBody<F extends Record<string, BodyField>>(schema: BodySchema<F>, body: Record<string, unknown>): Values<F> {
  const out: Record<string, JsonValue> = {};
  for (const name of Object.keys(schema.fields)) {
    const f = schema.fields[name] as BodyField;
    let value = Object.prototype.hasOwnProperty.call(body, name) ? body[name] : undefined;
    const nullIsValue = f.kind === 'string' && f.nullable === true;
    if (value === null && !nullIsValue && (schema.nullIsAbsent || mustBeGiven(f))) value = undefined;
    if (f.kind === 'string' && typeof value === 'string' && value === '' && f.emptyIsAbsent === true) value = undefined;
    if (value === undefined) {
      if (mustBeGiven(f)) throw new ValidationError(`${name} is required`);
      continue;
    }
    out[name] = checkValue(name, f, value);
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
  const out: Record<string, string | number | string[]> = {};
  for (const name of Object.keys(schema.fields)) {
    const values = params.get(name);
    if (values === undefined) continue;
    const f = schema.fields[name] as QueryField;
    if (f.kind === 'repeated') {
      const given = values.filter((v) => v !== '');
      if (given.length > f.maxItems) throw new ValidationError(`${name} must be given at most ${f.maxItems} times`);
      for (const v of given) checkString(name, f.item, v);
      if (given.length > 0) out[name] = given;
      continue;
    }
    if (values.length > 1) throw new ValidationError(`${name} must be given at most once`);
    const raw = values[0] as string;
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
  for (const [name, f] of Object.entries(schema.fields)) {
    if (f.kind === 'string' && f.required === true && out[name] === undefined) throw new ValidationError(`${name} is required`);
  }
  return out as Values<F>;
}
