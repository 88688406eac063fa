/**
 * OpenTelemetry tracing: one connected trace per order, from the POST to the webhook that settles
 * it (docs/OPERATIONS.md "Following one order").
 *
 * - `startTracing`, first thing in a composition root, registers a provider only with
 *   OTEL_EXPORTER_OTLP_ENDPOINT set; otherwise every span is the OTel API's no-op.
 * - A *trace carrier* (`{ traceparent, tracestate? }`) outlives its request: the order's is stored
 *   with its start intent, so the relay or the webhook handler continues the order's trace.
 * - Temporal's spans come from `@temporalio/interceptors-opentelemetry` (client, workflow via the
 *   bundle and a sink, activity).
 */
import {
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  context,
  propagation,
  trace,
  type Context,
  type Link,
  type Span,
} from '@opentelemetry/api';
import type { SpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { OpenTelemetrySinks } from '@temporalio/interceptors-opentelemetry';
import type { ClientInterceptors } from '@temporalio/client';
import type { InjectedSinks, WorkerOptions } from '@temporalio/worker';
import type { FastifyInstance, FastifyRequest } from 'fastify';

export type ServiceName = 'api' | 'worker' | 'sandbox';

/** The W3C trace context of one span, as stored and sent: `traceparent` and, if any, `tracestate`. */
export interface TraceCarrier {
  traceparent: string;
  tracestate?: string;
}

export interface Tracing {
  /** True when spans are recorded and exported (OTEL_EXPORTER_OTLP_ENDPOINT set, or a test's processor). */
  readonly enabled: boolean;
  readonly serviceName: ServiceName;
  /** Interceptors for a Temporal `Client` (empty when disabled). */
  readonly clientInterceptors: ClientInterceptors;
  /** What `createWorker` adds to its options: activity interceptors and the workflow span sink. */
  readonly worker: Pick<WorkerOptions, 'interceptors' | 'sinks'>;
  /** Flushes buffered spans and unregisters the provider. Safe to call twice. */
  shutdown(): Promise<void>;
}

const TRACER_NAME = 'onceflow';

let active = false;

/** True while a provider registered by `startTracing` is in place (the HTTP hooks are only installed then). */
export function tracingActive(): boolean {
  return active;
}

/** Without tracing the sink drops spans; a worker without it would log "unregistered sink" every task. */
const DROP_WORKFLOW_SPANS: InjectedSinks<OpenTelemetrySinks> = {
  exporter: { export: { fn: () => undefined, callDuringReplay: false } },
};

/** Worker options of a worker without tracing (tests' stacks, OTEL_EXPORTER_OTLP_ENDPOINT unset). */
export const UNTRACED_WORKER: Pick<WorkerOptions, 'interceptors' | 'sinks'> = { sinks: DROP_WORKFLOW_SPANS };

/**
 * Sets up tracing for one process; `spanProcessor` replaces the OTLP exporter (tests). With neither,
 * nothing is registered.
 */
export async function startTracing(
  settings: { otlpEndpoint: string | undefined },
  serviceName: ServiceName,
  opts: { spanProcessor?: SpanProcessor } = {},
): Promise<Tracing> {
  if (!settings.otlpEndpoint && !opts.spanProcessor) {
    return {
      enabled: false,
      serviceName,
      clientInterceptors: {},
      worker: UNTRACED_WORKER,
      shutdown: async () => undefined,
    };
  }
  if (active) throw new Error('startTracing was called twice in one process');
  // Loaded only when tracing is on: importing them is slow, and untraced processes shouldn't pay it.
  const [{ Resource }, { BatchSpanProcessor }, { NodeTracerProvider }, { OTLPTraceExporter }, temporalOtel] =
    await Promise.all([
      import('@opentelemetry/resources'),
      import('@opentelemetry/sdk-trace-base'),
      import('@opentelemetry/sdk-trace-node'),
      import('@opentelemetry/exporter-trace-otlp-proto'),
      import('@temporalio/interceptors-opentelemetry'),
    ]);
  const processor =
    opts.spanProcessor ??
    new BatchSpanProcessor(
      new OTLPTraceExporter({ url: `${settings.otlpEndpoint!.replace(/\/+$/, '')}/v1/traces` }),
    );
  // In the `onceflow` namespace, so a shared tracing backend lists them apart from any other "api".
  const resource = new Resource({
    'service.name': `onceflow-${serviceName}`,
    'service.namespace': 'onceflow',
  });
  const provider = new NodeTracerProvider({ resource, spanProcessors: [processor] });
  // Global tracer provider, AsyncLocalStorage context manager, W3C trace context + baggage propagators.
  provider.register();
  active = true;
  let stopped: Promise<void> | undefined;
  return {
    enabled: true,
    serviceName,
    clientInterceptors: { workflow: [new temporalOtel.OpenTelemetryWorkflowClientInterceptor()] },
    worker: {
      interceptors: {
        activity: [
          (ctx) => ({
            inbound: new temporalOtel.OpenTelemetryActivityInboundInterceptor(ctx),
            outbound: new temporalOtel.OpenTelemetryActivityOutboundInterceptor(ctx),
          }),
        ],
      },
      sinks: {
        exporter: temporalOtel.makeWorkflowExporter(processor, resource),
      } satisfies InjectedSinks<OpenTelemetrySinks>,
    },
    shutdown() {
      stopped ??= (async () => {
        try {
          await provider.shutdown();
        } finally {
          trace.disable();
          context.disable();
          propagation.disable();
          active = false;
        }
      })();
      return stopped;
    },
  };
}

function tracer() {
  return trace.getTracer(TRACER_NAME);
}

/** The W3C carrier of `ctx`'s span; null when tracing is off or there is no span. */
export function traceCarrier(ctx: Context = context.active()): TraceCarrier | null {
  const out: Record<string, string> = {};
  propagation.inject(ctx, out);
  if (!out.traceparent) return null;
  return { traceparent: out.traceparent, ...(out.tracestate ? { tracestate: out.tracestate } : {}) };
}

/** A context whose parent is the carrier's span; the root context for null (or when tracing is off). */
export function contextFromCarrier(carrier: TraceCarrier | null | undefined): Context {
  if (!carrier || typeof carrier.traceparent !== 'string') return ROOT_CONTEXT;
  return propagation.extract(ROOT_CONTEXT, carrier);
}

/**
 * Runs `fn` in a span of its own (child of `parent`, the active context by
 * default), ending it when `fn` settles; a throw marks the span as an error.
 */
export async function inSpan<T>(
  name: string,
  opts: {
    parent?: Context;
    kind?: SpanKind;
    attributes?: Record<string, string | number | boolean>;
    links?: Link[];
  },
  fn: (span: Span) => Promise<T>,
): Promise<T> {
  const parent = opts.parent ?? context.active();
  const span = tracer().startSpan(
    name,
    {
      kind: opts.kind ?? SpanKind.INTERNAL,
      ...(opts.attributes ? { attributes: opts.attributes } : {}),
      ...(opts.links ? { links: opts.links } : {}),
    },
    parent,
  );
  try {
    return await context.with(trace.setSpan(parent, span), () => fn(span));
  } catch (err) {
    span.recordException(err instanceof Error ? err : String(err));
    span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
    throw err;
  } finally {
    span.end();
  }
}

/**
 * An outgoing HTTP call as a client span, with `traceparent` added to
 * `headers` so the server's span joins the caller's trace. `send` returns
 * the response status (recorded; 5xx marks the span as an error).
 */
export function httpClientSpan<T extends { status: number }>(
  method: string,
  url: URL,
  headers: Record<string, string>,
  send: () => Promise<T>,
): Promise<T> {
  return inSpan(
    `${method} ${url.pathname}`,
    {
      kind: SpanKind.CLIENT,
      attributes: {
        'http.request.method': method,
        'server.address': url.hostname,
        'server.port': Number(url.port || (url.protocol === 'https:' ? 443 : 80)),
        // No query string: it may hold an idempotency key, and the route is what groups calls.
        'url.path': url.pathname,
      },
    },
    async (span) => {
      propagation.inject(context.active(), headers);
      const res = await send();
      span.setAttribute('http.response.status_code', res.status);
      if (res.status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
      return res;
    },
  );
}

const requestSpans = new WeakMap<FastifyRequest, { span: Span; ctx: Context }>();

/** The server span of a request (when tracing is on), e.g. to link a span of another trace to it. */
export function requestSpan(request: FastifyRequest): Span | undefined {
  return requestSpans.get(request)?.span;
}

/** The W3C carrier of a request's server span; null when tracing is off. */
export function requestTraceCarrier(request: FastifyRequest): TraceCarrier | null {
  const entry = requestSpans.get(request);
  return entry ? traceCarrier(entry.ctx) : null;
}

/**
 * One SERVER span per request, active in the handler; installed only while tracing is on, so otherwise no
 * hooks at all.
 */
export function traceHttpServer(app: FastifyInstance): void {
  if (!active) return;
  app.addHook('onRequest', (request, _reply, done) => {
    const parent = propagation.extract(ROOT_CONTEXT, request.headers);
    const route = request.routeOptions.url;
    const span = tracer().startSpan(
      route ? `${request.method} ${route}` : request.method,
      {
        kind: SpanKind.SERVER,
        attributes: {
          'http.request.method': request.method,
          'url.path': request.url.split('?')[0] ?? request.url,
          ...(route ? { 'http.route': route } : {}),
        },
      },
      parent,
    );
    const ctx = trace.setSpan(parent, span);
    requestSpans.set(request, { span, ctx });
    context.with(ctx, done);
  });
  // The body arrives on the socket's own async context; re-enter the request's context for the handler.
  app.addHook('preHandler', (request, _reply, done) => {
    const entry = requestSpans.get(request);
    if (entry) context.with(entry.ctx, done);
    else done();
  });
  const end = (request: FastifyRequest, status: number | undefined) => {
    const entry = requestSpans.get(request);
    if (!entry) return;
    requestSpans.delete(request);
    if (status !== undefined) {
      entry.span.setAttribute('http.response.status_code', status);
      if (status >= 500) entry.span.setStatus({ code: SpanStatusCode.ERROR });
    } else {
      entry.span.setStatus({ code: SpanStatusCode.ERROR, message: 'request aborted' });
    }
    entry.span.end();
  };
  app.addHook('onResponse', (request, reply, done) => {
    end(request, reply.statusCode);
    done();
  });
  app.addHook('onRequestAbort', (request, done) => {
    end(request, undefined);
    done();
  });
}
