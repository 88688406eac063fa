/**
 * The one validator compiler of the API process. Bodies are never coerced; query, params and
 * headers are parsed only from a number's exact spelling (`limit=100.5` stays a string and fails),
 * unlike TypeBox's `Value.Convert`, which truncates.
 */
import type { FastifySchemaCompiler } from 'fastify';
import { TypeBoxValidatorCompiler, type TSchema } from '@fastify/type-provider-typebox';

const INTEGER = /^-?(0|[1-9][0-9]{0,15})$/;
const NUMBER = /^-?(0|[1-9][0-9]{0,15})(\.[0-9]{1,15})?$/;

interface JsonSchema {
  type?: string | string[];
  properties?: Record<string, JsonSchema>;
}

function convertScalar(schema: JsonSchema | undefined, value: unknown): unknown {
  if (typeof value !== 'string' || !schema) return value;
  const types = Array.isArray(schema.type) ? schema.type : [schema.type];
  if (types.includes('integer') && INTEGER.test(value)) return Number(value);
  if (types.includes('number') && NUMBER.test(value)) return Number(value);
  if (types.includes('boolean') && (value === 'true' || value === 'false')) return value === 'true';
  return value;
}

/** Converts the top-level properties of a flat object (query, params, headers) by their declared type. */
function convertText(schema: JsonSchema, value: unknown): unknown {
  if (!schema.properties || value === null || typeof value !== 'object' || Array.isArray(value)) return value;
  const out: Record<string, unknown> = {};
  for (const [name, v] of Object.entries(value as Record<string, unknown>)) {
    out[name] = convertScalar(schema.properties[name], v);
  }
  return out;
}

export const strictValidatorCompiler: FastifySchemaCompiler<TSchema> = (route) => {
  // Compiled as a body for every part: TypeBox's checker without its lenient conversion.
  const validate = TypeBoxValidatorCompiler({ ...route, httpPart: 'body' });
  if (route.httpPart === 'body') return validate;
  const schema = route.schema as JsonSchema;
  return (value: unknown) => validate(convertText(schema, value));
};
