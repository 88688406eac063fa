/**
 * RFC 9457 problem details. Every error response of the API is
 * `application/problem+json` with one of the documented `type` URIs below
 * (docs/API.md lists them). `detail` is always written by us for the client;
 * internal messages, SQL and stack traces never reach it.
 */
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { log, errorFields } from '../log.ts';

const BASE = 'https://onceflow.dev/problems/';

export const PROBLEMS = {
  invalidRequest: { type: `${BASE}invalid-request`, title: 'The request is not valid', status: 400 },
  invalidIdempotencyKey: {
    type: `${BASE}invalid-idempotency-key`,
    title: 'The Idempotency-Key header is missing or invalid',
    status: 400,
  },
  unauthorized: { type: `${BASE}unauthorized`, title: 'Missing or invalid API key', status: 401 },
  invalidSignature: {
    type: `${BASE}invalid-webhook-signature`,
    title: 'The webhook signature is missing, invalid or stale',
    status: 401,
  },
  notFound: { type: `${BASE}not-found`, title: 'Not found', status: 404 },
  methodNotAllowed: { type: `${BASE}method-not-allowed`, title: 'Method not allowed', status: 405 },
  inProgress: {
    type: `${BASE}idempotency-key-in-progress`,
    title: 'A request with this Idempotency-Key is still being processed',
    status: 409,
  },
  payloadTooLarge: { type: `${BASE}payload-too-large`, title: 'The request body is too large', status: 413 },
  unsupportedMediaType: {
    type: `${BASE}unsupported-media-type`,
    title: 'The request body must be application/json',
    status: 415,
  },
  keyReused: {
    type: `${BASE}idempotency-key-reused`,
    title: 'This Idempotency-Key was already used with a different request',
    status: 422,
  },
  rateLimited: { type: `${BASE}rate-limited`, title: 'Too many requests', status: 429 },
  internal: { type: `${BASE}internal`, title: 'Internal server error', status: 500 },
  unavailable: { type: `${BASE}unavailable`, title: 'A dependency is unavailable', status: 503 },
} as const;

export type ProblemKind = keyof typeof PROBLEMS;

export interface ProblemBody {
  type: string;
  title: string;
  status: number;
  detail?: string;
  instance?: string;
  [extension: string]: unknown;
}

/** A problem to send to the client. Thrown from handlers and hooks; the error handler renders it. */
export class ProblemError extends Error {
  override name = 'ProblemError';
  readonly statusCode: number;
  constructor(
    readonly kind: ProblemKind,
    readonly detail?: string,
    readonly extensions: Record<string, unknown> = {},
    readonly headers: Record<string, string> = {},
  ) {
    super(detail ?? PROBLEMS[kind].title);
    this.statusCode = PROBLEMS[kind].status;
  }

  body(instance?: string): ProblemBody {
    const p = PROBLEMS[this.kind];
    return {
      type: p.type,
      title: p.title,
      status: p.status,
      ...(this.detail ? { detail: this.detail } : {}),
      ...(instance ? { instance } : {}),
      ...this.extensions,
    };
  }
}

export function sendProblem(reply: FastifyReply, problem: ProblemError): FastifyReply {
  for (const [name, value] of Object.entries(problem.headers)) void reply.header(name, value);
  return reply
    .code(problem.statusCode)
    .type('application/problem+json')
    .send(problem.body(reply.request.url.split('?')[0]));
}

/** Fastify's own 4xx errors, by code, mapped to our documented problems with our own wording. */
const FASTIFY_CODES: Record<string, { kind: ProblemKind; detail: string }> = {
  FST_ERR_CTP_BODY_TOO_LARGE: { kind: 'payloadTooLarge', detail: 'The body must be at most 64 KiB.' },
  FST_ERR_CTP_INVALID_MEDIA_TYPE: {
    kind: 'unsupportedMediaType',
    detail: 'Send Content-Type: application/json.',
  },
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: {
    kind: 'invalidRequest',
    detail: 'Content-Length does not match the body.',
  },
  FST_ERR_CTP_EMPTY_JSON_BODY: { kind: 'invalidRequest', detail: 'The body must not be empty.' },
  FST_ERR_CTP_INVALID_JSON_BODY: { kind: 'invalidRequest', detail: 'The body is not valid JSON.' },
  FST_ERR_CTP_EMPTY_TYPE: { kind: 'unsupportedMediaType', detail: 'Send Content-Type: application/json.' },
  FST_ERR_CTP_INVALID_TYPE: { kind: 'unsupportedMediaType', detail: 'Send Content-Type: application/json.' },
};

interface ValidationIssue {
  instancePath?: string;
  message?: string;
}

/** Converts any error into a problem. Unknown errors become a bare 500 and are logged, never echoed. */
export function toProblem(err: unknown, request: FastifyRequest): ProblemError {
  if (err instanceof ProblemError) return err;
  const e = err as Partial<FastifyError> & { validation?: ValidationIssue[]; validationContext?: string };
  if (Array.isArray(e.validation)) {
    const where = e.validationContext ?? 'body';
    const errors = e.validation.slice(0, 20).map((v) => ({
      location: where,
      // A JSON pointer into the request and the validator's rule text; neither echoes input values.
      pointer: v.instancePath ?? '',
      message: v.message ?? 'is invalid',
    }));
    return new ProblemError('invalidRequest', `The request ${where} does not match the schema.`, { errors });
  }
  const mapped = e.code ? FASTIFY_CODES[e.code] : undefined;
  if (mapped) return new ProblemError(mapped.kind, mapped.detail);
  // JSON syntax errors from the body parser carry a SyntaxError-derived statusCode of 400.
  if (err instanceof SyntaxError || (e.statusCode === 400 && e.name === 'SyntaxError')) {
    return new ProblemError('invalidRequest', 'The body is not valid JSON.');
  }
  const status = typeof e.statusCode === 'number' ? e.statusCode : 500;
  if (status === 404) return new ProblemError('notFound');
  if (status === 413) return new ProblemError('payloadTooLarge', 'The body must be at most 64 KiB.');
  if (status === 415) return new ProblemError('unsupportedMediaType');
  if (status >= 400 && status < 500) {
    log.warn('client error without a mapped problem', {
      code: e.code,
      status,
      url: request.routeOptions.url,
    });
    return new ProblemError('invalidRequest', 'The request could not be processed.');
  }
  log.error('unhandled error', {
    ...errorFields(err),
    code: e.code,
    reqId: request.id,
    url: request.routeOptions.url,
  });
  return new ProblemError(
    'internal',
    'Something went wrong on our side. Retrying with the same Idempotency-Key is safe.',
  );
}
