/**
 * RFC 9457 problem details: the ONE implementation for every HTTP error of the API process, each
 * with a documented `type`. `detail` is ours; internal messages, SQL and the URL never reach it.
 */
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { isDatabaseUnavailable } from '../db/index.ts';
import { log, errorFields } from '../log.ts';
import { isTemporalUnavailable } from '../temporal/connection.ts';

const BASE = 'https://onceflow.dev/problems/';

export const PROBLEMS = {
  invalidRequest: { type: `${BASE}invalid-request`, title: 'The request is not valid', status: 400 },
  invalidIdempotencyKey: {
    type: `${BASE}invalid-idempotency-key`,
    title: 'The Idempotency-Key header is missing or invalid',
    status: 400,
  },
  unauthorized: { type: `${BASE}unauthorized`, title: 'Missing or invalid API key', status: 401 },
  adminUnauthorized: {
    type: `${BASE}admin-unauthorized`,
    title: 'Missing or invalid admin token',
    status: 401,
  },
  invalidSignature: {
    type: `${BASE}invalid-webhook-signature`,
    title: 'The webhook signature is missing, invalid or stale',
    status: 401,
  },
  notFound: { type: `${BASE}not-found`, title: 'Not found', status: 404 },
  webhookUrlRefused: {
    type: `${BASE}webhook-url-refused`,
    title: 'The endpoint URL is not allowed (https to a public address only)',
    status: 422,
  },
  methodNotAllowed: { type: `${BASE}method-not-allowed`, title: 'Method not allowed', status: 405 },
  requestTimeout: {
    type: `${BASE}request-timeout`,
    title: 'The request was not received in time',
    status: 408,
  },
  operationState: {
    type: `${BASE}operation-state`,
    title: 'The operation or order is not in a state this action applies to',
    status: 409,
  },
  operationInProgress: {
    type: `${BASE}operation-in-progress`,
    title: 'A live attempt holds this operation',
    status: 409,
  },
  inProgress: {
    type: `${BASE}idempotency-key-in-progress`,
    title: 'A request with this Idempotency-Key is still being processed',
    status: 409,
  },
  duplicateMerchantReference: {
    type: `${BASE}duplicate-merchant-reference`,
    title: 'An order with this merchantReference already exists',
    status: 409,
  },
  orderNotRefundable: {
    type: `${BASE}order-not-refundable`,
    title: 'The order cannot be refunded in its current status',
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
  amountTooLarge: {
    type: `${BASE}amount-too-large`,
    title: 'The order total is above what the payment provider accepts',
    status: 422,
  },
  refundExceedsCharge: {
    type: `${BASE}refund-exceeds-charge`,
    title: 'The refund would take the refunded total above the amount charged',
    status: 422,
  },
  rateLimited: { type: `${BASE}rate-limited`, title: 'Too many requests', status: 429 },
  internal: { type: `${BASE}internal`, title: 'Internal server error', status: 500 },
  unavailable: { type: `${BASE}unavailable`, title: 'A dependency is unavailable', status: 503 },
  recoveryPending: {
    type: `${BASE}recovery-pending`,
    title: 'A recovery after a database restore is pending; retry later with the same Idempotency-Key',
    status: 503,
  },
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

  /** No `instance`: it would echo the client's URL (any bytes, up to the header limit) back to it. */
  body(): ProblemBody {
    const p = PROBLEMS[this.kind];
    return {
      type: p.type,
      title: p.title,
      status: p.status,
      ...(this.detail ? { detail: this.detail } : {}),
      ...this.extensions,
    };
  }
}

export function sendProblem(reply: FastifyReply, problem: ProblemError): FastifyReply {
  for (const [name, value] of Object.entries(problem.headers)) void reply.header(name, value);
  // Refused before its body arrived: close, so a client trickling the body can't keep the socket.
  if (!reply.request.raw.complete) void reply.header('connection', 'close');
  return reply.code(problem.statusCode).type('application/problem+json').send(problem.body());
}

/** Router errors before any route runs; without this Fastify answers its own JSON and echoes the URL. */
export function frameworkErrorHandler(err: FastifyError, request: FastifyRequest, reply: FastifyReply): void {
  void sendProblem(reply, toProblem(err, request));
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
  FST_ERR_BAD_URL: { kind: 'invalidRequest', detail: 'The URL contains an invalid %-escape.' },
  FST_ERR_MAX_PARAM_LENGTH: {
    kind: 'invalidRequest',
    detail: 'A path parameter is longer than 100 characters.',
  },
  FST_ERR_ASYNC_CONSTRAINT: { kind: 'invalidRequest', detail: 'The request could not be routed.' },
  // The body stopped mid-way. Usually nobody reads this answer; a client that does (seen once in the
  // pg-restart chaos run) was not served, so it gets a retryable status, not a 400.
  ECONNRESET: {
    kind: 'requestTimeout',
    detail: 'The connection closed before the body arrived. Send it again under the same Idempotency-Key.',
  },
};

interface ValidationIssue {
  instancePath?: string;
  message?: string;
}

/** What `toProblem` needs to know about the routes' own error type (admin routes pass the ops mapping). */
export interface ToProblemOptions {
  /** Maps a domain error to a problem, or returns undefined for "not mine". */
  domain?: (err: unknown) => ProblemError | undefined;
  /** The 500's detail: what a client may safely do next. */
  internalDetail?: string;
}

/** What a client is told to wait before retrying a request that met an unreachable dependency. */
const UNAVAILABLE_RETRY_AFTER_SECONDS = 2;

/**
 * Postgres or Temporal could not be reached or did not answer within its bound (docs/DEPLOYING.md,
 * "Postgres timeouts"): 503 with Retry-After, whatever the route. A create's transaction either never
 * committed or committed with its key, so the retry under the same Idempotency-Key is safe.
 */
function dependencyUnavailable(err: unknown, request: FastifyRequest): ProblemError {
  const postgres = isDatabaseUnavailable(err);
  log.warn('a dependency is unavailable; answered 503', {
    dependency: postgres ? 'postgres' : 'temporal',
    ...errorFields(err),
    reqId: request.id,
    url: request.routeOptions.url,
  });
  return new ProblemError(
    'unavailable',
    `${postgres ? 'The database' : 'The workflow service'} did not answer in time. Retry after ` +
      'Retry-After; a create retried with the same Idempotency-Key is never done twice.',
    {},
    { 'retry-after': String(UNAVAILABLE_RETRY_AFTER_SECONDS) },
  );
}

/** Converts any error into a problem. Unknown errors become a bare 500 and are logged, never echoed. */
export function toProblem(
  err: unknown,
  request: FastifyRequest,
  options: ToProblemOptions = {},
): ProblemError {
  if (err instanceof ProblemError) return err;
  const domain = options.domain?.(err);
  if (domain) return domain;
  const e = err as Partial<FastifyError> & { validation?: ValidationIssue[]; validationContext?: string };
  // Before Fastify's codes: a dependency's socket error (ECONNRESET from Postgres) has no statusCode,
  // while the request's own body stopping mid-way has one (400) and stays a request-timeout.
  if (typeof e.statusCode !== 'number' && (isDatabaseUnavailable(err) || isTemporalUnavailable(err))) {
    return dependencyUnavailable(err, request);
  }
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
  if (status === 429) return new ProblemError('rateLimited');
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
    options.internalDetail ??
      'Something went wrong on our side. Retrying with the same Idempotency-Key is safe.',
  );
}
