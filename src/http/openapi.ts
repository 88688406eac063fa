/** OpenAPI helpers shared by the tenant and admin routes; route-specific schemas stay with their routes. */
import { Type, type TSchema } from '@fastify/type-provider-typebox';

/** Marks a header documented as required (app.ts makes it `required: true`); validation never reads it. */
export const DOCUMENTED_REQUIRED = 'x-documented-required';

const Problem = Type.Object(
  {
    type: Type.String({ format: 'uri' }),
    title: Type.String(),
    status: Type.Integer(),
    detail: Type.Optional(Type.String()),
    instance: Type.Optional(Type.String()),
  },
  { additionalProperties: true, title: 'Problem', description: 'RFC 9457 problem details' },
);

/** Response headers, as @fastify/swagger reads them from a response's `headers`. */
export type HeaderDoc = TSchema;
const integerHeader = (description: string): HeaderDoc => Type.Integer({ minimum: 0, description });

/** What @fastify/rate-limit sends on every response of a limited route (and with Retry-After on 429). */
export const RATE_LIMIT_HEADERS = {
  'x-ratelimit-limit': integerHeader('Requests allowed per window (API_RATE_LIMIT_MAX)'),
  'x-ratelimit-remaining': integerHeader('Requests left in the current window'),
  'x-ratelimit-reset': integerHeader('Seconds until the current window ends'),
} satisfies Record<string, HeaderDoc>;

export const RETRY_AFTER_HEADER = {
  'Retry-After': integerHeader('Seconds to wait before retrying (with the same Idempotency-Key)'),
} satisfies Record<string, HeaderDoc>;

/** Documents a response header as always present (the contract test checks it is). */
export const always = (headers: Record<string, HeaderDoc>): Record<string, HeaderDoc> =>
  Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, { ...v, [DOCUMENTED_REQUIRED]: true }]));

function response(
  description: string,
  mediaType: string,
  schema: TSchema,
  headers?: Record<string, HeaderDoc>,
) {
  return { description, ...(headers ? { headers } : {}), content: { [mediaType]: { schema } } };
}

/** A JSON response whose body is a named schema (it appears as a `$ref` in the document). */
export const jsonResponse = (description: string, schema: TSchema, headers?: Record<string, HeaderDoc>) =>
  response(description, 'application/json', schema, headers);

export const problemResponse = (description: string, headers?: Record<string, HeaderDoc>) =>
  response(description, 'application/problem+json', Problem, headers);
