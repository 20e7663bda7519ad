// The schema language's fields (./schema.ts) as JSON Schema in OpenAPI 3.1's dialect: what the
// OpenAPI document says of each route's body and query, derived from what validates them.
import { mustBeGiven, type BodyField, type BodySchema, type QueryField, type QuerySchema } from './schema.js';

export type JsonSchema = { readonly [key: string]: unknown };

/** JSON Schema for a string that must not be blank after trimming. */
export const NOT_BLANK: JsonSchema = { minLength: 1, pattern: '\\S' };

/** JSON Schema (OpenAPI 3.1 dialect) of one field of a body or a query. */
export function fieldJsonSchema(f: BodyField | QueryField): JsonSchema {
  switch (f.kind) {
    case 'string':
      return {
        type: f.nullable === true ? ['string', 'null'] : 'string',
        description: f.description,
        // refused when blank after trimming: at least one character, and one that is not white space
        ...(f.oneOf === undefined && (f.required === true || f.notBlank === true) ? NOT_BLANK : {}),
        ...(f.present === true ? { minLength: 1 } : {}),
        ...(f.maxLength !== undefined ? { maxLength: f.maxLength } : {}),
        // where "" counts as absent it is accepted, so the enum says so
        ...(f.oneOf !== undefined ? { enum: f.emptyIsAbsent === true ? [...f.oneOf, ''] : [...f.oneOf] } : {}),
        ...(f.pattern !== undefined ? { pattern: f.pattern.regex } : {}),
      };
    case 'object':
      return { type: 'object', description: `${f.description} At most ${f.maxBytes} bytes as JSON, nested at most ${f.maxDepth} levels.`, additionalProperties: true };
    case 'integer':
      return { type: 'integer', description: f.description, minimum: f.min, maximum: f.max };
    case 'number':
      return { type: f.integer ? 'integer' : 'number', description: f.description, minimum: f.min, ...(f.max !== undefined ? { maximum: f.max } : {}) };
    case 'boolean':
      return { type: 'boolean', description: f.description };
    case 'json':
      return { description: `${f.description} Any JSON value, nested at most ${f.maxDepth} levels.` };
    case 'shape':
      return objectJsonSchema(f.description, f.fields);
    case 'tagged':
      return {
        type: 'object',
        description: f.description,
        oneOf: Object.entries(f.variants).map(([name, v]) => {
          const o = objectJsonSchema(v.description, v.fields);
          return {
            ...o,
            title: name,
            properties: { [f.tag]: { const: name }, ...(o['properties'] as JsonSchema) },
            required: [f.tag, ...((o['required'] as string[] | undefined) ?? [])],
            ...(v.exactlyOneOf !== undefined ? { oneOf: v.exactlyOneOf.map((n) => ({ required: [n] })) } : {}),
          };
        }),
      };
    case 'list':
      return { type: 'array', description: f.description, items: fieldJsonSchema(f.items), minItems: f.minItems, maxItems: f.maxItems };
    case 'map':
      return {
        type: 'object',
        description: f.description,
        maxProperties: f.maxKeys,
        propertyNames: { minLength: 1, maxLength: f.keyMax },
        additionalProperties: { type: 'string', maxLength: f.valueMax },
      };
    case 'repeated':
      return { type: 'array', description: f.description, items: fieldJsonSchema(f.item), maxItems: f.maxItems };
    case 'either':
      return { description: f.description, oneOf: f.of.map(fieldJsonSchema) };
  }
}

/** JSON Schema of an object with declared fields (others are accepted and ignored). */
function objectJsonSchema(description: string | undefined, fields: Readonly<Record<string, BodyField>>): JsonSchema {
  const properties: Record<string, JsonSchema> = {};
  const required: string[] = [];
  for (const [name, f] of Object.entries(fields)) {
    properties[name] = fieldJsonSchema(f);
    if (mustBeGiven(f)) required.push(name);
  }
  return { type: 'object', ...(description !== undefined ? { description } : {}), properties, ...(required.length > 0 ? { required } : {}), additionalProperties: true };
}

/** JSON Schema (OpenAPI 3.1 dialect) of a body schema. */
export function bodyJsonSchema(schema: BodySchema): JsonSchema {
  return { ...objectJsonSchema(undefined, schema.fields), examples: [schema.example] };
}

/** OpenAPI parameter objects of a query schema. */
export function queryParameters(schema: QuerySchema): JsonSchema[] {
  return Object.entries(schema.fields).map(([name, f]) => ({
    name,
    in: 'query',
    required: f.kind === 'string' && f.required === true,
    description: f.description,
    schema: fieldJsonSchema(f),
    // a repeated parameter is given once per value: ?tag=a&tag=b
    ...(f.kind === 'repeated' ? { style: 'form', explode: true } : {}),
  }));
}
