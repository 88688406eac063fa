/**
 * Request IDs (the caller's sane `X-Request-Id`, else the traceparent's trace ID, else a UUID) and
 * one log line per request, by route pattern (the raw URL carries IDs). Headers are never logged.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { FastifyInstance } from 'fastify';
import { requestSpan } from '../tracing/index.ts';

const REQUEST_ID_HEADER = 'x-request-id';

/** What a client may send as X-Request-Id: a short token, nothing that could forge a log line. */
const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;
/** W3C traceparent: version-traceid-parentid-flags, lower-case hex. */
const TRACEPARENT = /^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$/;

/** Health checks and scrapes run every few seconds: their lines are debug, not info. */
const QUIET_ROUTES = new Set(['/healthz', '/readyz', '/metrics']);

function single(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

export function requestIdFor(headers: IncomingHttpHeaders): string {
  const given = single(headers[REQUEST_ID_HEADER])?.trim();
  if (given && REQUEST_ID.test(given)) return given;
  const traceId = TRACEPARENT.exec(single(headers.traceparent)?.trim() ?? '')?.[1];
  // An all-zero trace ID is invalid by the spec.
  if (traceId && !/^0+$/.test(traceId)) return traceId;
  return randomUUID();
}

type TraceIds = { trace_id: string; span_id: string };
/** The request span's IDs, read at onSend: the span is ended (and forgotten) before onResponse. */
const requestTraceIds = new WeakMap<object, TraceIds>();

export function logRequests(app: FastifyInstance): void {
  app.addHook('onSend', async (request, reply, payload) => {
    reply.header(REQUEST_ID_HEADER, request.id);
    const ctx = requestSpan(request)?.spanContext();
    if (ctx) requestTraceIds.set(request, { trace_id: ctx.traceId, span_id: ctx.spanId });
    return payload;
  });
  app.addHook('onResponse', async (request, reply) => {
    const route = request.routeOptions.url ?? 'unmatched';
    const status = reply.statusCode;
    const fields = {
      method: request.method,
      route,
      status,
      durationMs: Math.round(reply.elapsedTime * 10) / 10,
      tenantId: request.tenantId ?? null,
      // This hook runs after the request span has ended: name its trace explicitly (src/log.ts).
      ...requestTraceIds.get(request),
    };
    if (status >= 500) request.log.warn(fields, 'request');
    else if (QUIET_ROUTES.has(route)) request.log.debug(fields, 'request');
    else request.log.info(fields, 'request');
  });
}
