/**
 * The HTTP API as a Fastify app, built from its dependencies and nothing
 * else (no env, no listen): `src/api/main.ts` wires the process, tests build
 * it directly.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import Fastify, {
  LogController,
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyRequest,
} from 'fastify';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import rateLimit from '@fastify/rate-limit';
import { registerAjvFormats, type TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { Client } from '@temporalio/client';
import type { Config } from '../config.ts';
import { withClient, type Pool } from '../db/index.ts';
import type { Ledger } from 'onceflow';
import { ApiKeyAuth, untrustedProxyWarning } from './auth.ts';
import { RecoveryGate } from '../restore/gate.ts';
import type { ApiContext } from './context.ts';
import { OrderWaits } from './order-waits.ts';
import { OutboxRelay } from './outbox.ts';
import { PROBLEMS, ProblemError, frameworkErrorHandler, sendProblem, toProblem } from '../http/problems.ts';
import { docsCsp, securityHeaders } from './security-headers.ts';
import { findTenantByKeyHash } from '../tenants/sql.ts';
import { strictValidatorCompiler } from '../http/validation.ts';
import { healthRoutes } from './routes/health.ts';
import { orderRoutes } from './routes/orders.ts';
import { refundRoutes } from './routes/refunds.ts';
import { webhookRoutes } from './routes/webhooks.ts';
import { webhookEndpointRoutes } from './routes/webhook-endpoints.ts';
import { BODY_LIMIT_BYTES } from './schemas.ts';
import { DOCUMENTED_REQUIRED } from '../http/openapi.ts';
import { rootLogger, type Logger } from '../log.ts';
import { PACKAGE_ROOT } from '../paths.ts';
import { logRequests, requestIdFor } from './request-log.ts';
import { traceHttpServer } from '../tracing/index.ts';

export interface ApiDeps {
  pool: Pool;
  ledger: Ledger;
  temporal: Client;
  config: Config;
  /** Defaults to a relay built from `config` whose loop is NOT started (the composition root starts it). */
  relay?: OutboxRelay;
  /**
   * Wakes `?wait=` long-polls when an order's status changes. Defaults to one
   * listening on a connection of its own, started here and stopped with the app.
   */
  orderWaits?: OrderWaits;
  /** Called once per response, e.g. to feed Prometheus. `route` is the route pattern, not the URL. */
  onRequestMetrics?: (route: string, status: number, durationMs: number) => void;
  /** Fastify's logger; default the process's (src/log.ts). Tests pass one writing to memory. */
  logger?: Logger;
  /** The restore gate; default one reading `restore_recoveries` at most once a second. */
  recovery?: RecoveryGate;
}

let formatsRegistered = false;

/** info.version of the OpenAPI document: the package's version, read once. */
const PACKAGE_VERSION = (
  JSON.parse(readFileSync(path.join(PACKAGE_ROOT, 'package.json'), 'utf8')) as { version: string }
).version;

/** The tenant API key and the operator's admin token are different credentials: two schemes. */
const SECURITY_SCHEMES = {
  apiKey: {
    type: 'http',
    scheme: 'bearer',
    description: "A tenant's API key (`Authorization: Bearer sk_...`); it decides the tenant.",
  },
  adminToken: {
    type: 'http',
    scheme: 'bearer',
    description:
      "An admin credential: a named operator's token (`opk_...`, from `npm run ops -- operator add NAME`) " +
      'or the shared ONCEFLOW_ADMIN_TOKEN. Only the /admin routes accept it.',
  },
} as const;

const SCHEMA_KEYWORDS = ['type', 'enum', 'const', 'anyOf', 'oneOf', 'allOf', 'properties'];

/**
 * Moves every titled schema to components/schemas/<title> behind a `$ref`; two schemas under one title
 * fail.
 */
function nameSchemas(doc: Record<string, unknown>): void {
  const components = (doc.components ??= {}) as Record<string, unknown>;
  const named = (components.schemas ??= {}) as Record<string, unknown>;
  const found = new Map<string, string>();
  const walk = (node: unknown): unknown => {
    if (Array.isArray(node)) return node.map(walk);
    if (node === null || typeof node !== 'object') return node;
    const obj = Object.fromEntries(Object.entries(node).map(([k, v]) => [k, walk(v)]));
    const title = obj.title;
    if (typeof title !== 'string' || !SCHEMA_KEYWORDS.some((k) => k in obj)) return obj;
    // A parameter's description is moved out of its schema by @fastify/swagger: compare without it.
    const { description: _description, ...shape } = obj;
    const text = JSON.stringify(shape);
    const seen = found.get(title);
    if (seen !== undefined && seen !== text) throw new Error(`OpenAPI: two different schemas named ${title}`);
    found.set(title, text);
    if (seen === undefined || obj.description !== undefined) named[title] = obj;
    return { $ref: `#/components/schemas/${title}` };
  };
  doc.paths = walk(doc.paths);
  const sorted = Object.keys(named).sort();
  components.schemas = Object.fromEntries(sorted.map((k) => [k, named[k]]));
}

/** Turns a header schema's DOCUMENTED_REQUIRED into `required: true` on the header itself. */
function applyDocumentedRequired(doc: Record<string, unknown>): void {
  const visit = (holder: Record<string, unknown>) => {
    const schema = holder.schema as Record<string, unknown> | undefined;
    if (schema && DOCUMENTED_REQUIRED in schema) {
      delete schema[DOCUMENTED_REQUIRED];
      holder.required = true;
    }
  };
  const paths = (doc.paths ?? {}) as Record<string, Record<string, Record<string, unknown>>>;
  for (const item of Object.values(paths)) {
    for (const op of Object.values(item)) {
      for (const p of (op.parameters ?? []) as Record<string, unknown>[]) visit(p);
      const responses = (op.responses ?? {}) as Record<string, { headers?: Record<string, unknown> }>;
      for (const r of Object.values(responses)) {
        for (const h of Object.values(r.headers ?? {})) visit(h as Record<string, unknown>);
      }
    }
  }
}

export async function buildApiApp(deps: ApiDeps): Promise<FastifyInstance> {
  if (!formatsRegistered) {
    registerAjvFormats();
    formatsRegistered = true;
  }
  const relay =
    deps.relay ??
    new OutboxRelay({
      pool: deps.pool,
      temporal: deps.temporal,
      enabled: deps.config.api.outboxRelay,
      pollMs: deps.config.api.outboxPollMs,
    });
  const orderWaits = deps.orderWaits ?? new OrderWaits({ pool: deps.pool });
  const ctx: ApiContext = {
    ...deps,
    relay,
    orderWaits,
    recovery: deps.recovery ?? new RecoveryGate(deps.pool),
  };
  const limits = deps.config.api;

  const app = Fastify({
    // Our pino, so request logs have the process's format and redaction. Fastify's own
    // per-request lines are off: logRequests writes one line per request with the route pattern.
    loggerInstance: (deps.logger ?? rootLogger()) as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true, requestIdLogLabel: 'requestId' }),
    genReqId: (req) => requestIdFor(req.headers),
    bodyLimit: BODY_LIMIT_BYTES,
    // Slow clients (docs/API.md "Limits"). Node checks the header and request deadlines every
    // connectionsCheckingInterval ms (30 s by default), so the interval follows the shorter bound.
    http: {
      headersTimeout: limits.headersTimeoutMs,
      requestTimeout: limits.requestTimeoutMs,
      connectionsCheckingInterval: Math.max(
        10,
        Math.min(1000, Math.floor(Math.min(limits.headersTimeoutMs, limits.requestTimeoutMs) / 2)),
      ),
    },
    requestTimeout: limits.requestTimeoutMs,
    connectionTimeout: limits.idleTimeoutMs,
    keepAliveTimeout: limits.keepAliveTimeoutMs,
    maxRequestsPerSocket: limits.maxRequestsPerSocket,
    // The client address the failed-login limiter keys on: the socket's, unless a trusted proxy says otherwise.
    ...(limits.trustProxy.length ? { trustProxy: limits.trustProxy } : {}),
    // Router errors (bad %-escapes, over-long parameters) become problems instead of Fastify's JSON.
    frameworkErrors: frameworkErrorHandler,
    // JSON with __proto__ / constructor.prototype keys is refused (400), not merged into objects.
    onProtoPoisoning: 'error',
    onConstructorPoisoning: 'error',
    // Requests the HTTP parser itself rejects (NUL or CR in a header, ...) still get problem+json.
    // Node's own header/request deadlines (ERR_HTTP_REQUEST_TIMEOUT) arrive here too: 408, then close.
    clientErrorHandler: (err, socket) => {
      // Once a response has started on this socket, another one can't be written: just close it.
      if (!socket.writable || socket.bytesWritten > 0) return socket.destroy();
      const code = (err as { code?: string }).code;
      const [status, reason, body] =
        code === 'ERR_HTTP_REQUEST_TIMEOUT'
          ? [408, 'Request Timeout', PROBLEMS.requestTimeout]
          : code === 'HPE_HEADER_OVERFLOW'
            ? [
                431,
                'Request Header Fields Too Large',
                { ...PROBLEMS.invalidRequest, title: 'The HTTP request is malformed', status: 431 },
              ]
            : [400, 'Bad Request', { ...PROBLEMS.invalidRequest, title: 'The HTTP request is malformed' }];
      const json = JSON.stringify(body);
      socket.end(
        `HTTP/1.1 ${status} ${reason}\r\n` +
          `Content-Type: application/problem+json\r\nContent-Length: ${Buffer.byteLength(json)}\r\n` +
          `Connection: close\r\n\r\n${json}`,
      );
    },
  }).withTypeProvider<TypeBoxTypeProvider>();
  // Connections beyond this are dropped at accept, before they cost a parser or a request.
  app.server.maxConnections = limits.maxConnections;
  // A server span per request when tracing is on (src/tracing); no hooks at all otherwise.
  traceHttpServer(app);
  if (!deps.orderWaits) {
    orderWaits.start();
    app.addHook('onClose', () => orderWaits.stop());
  }

  // JSON only: without this, Fastify's built-in text/plain parser would turn a wrong media type into a 400.
  app.removeContentTypeParser('text/plain');
  // Bodies are validated without type coercion ("2" is not a quantity); query numbers only from their exact spelling.
  app.setValidatorCompiler(strictValidatorCompiler);
  // Response schemas document the API; bodies are sent as built, so a replay is byte-for-byte the original.
  app.setSerializerCompiler(() => (data) => JSON.stringify(data));

  await app.register(swagger, {
    transformObject: (documentObject) => {
      const doc = ('openapiObject' in documentObject ? documentObject.openapiObject : {}) as Record<
        string,
        unknown
      >;
      applyDocumentedRequired(doc);
      nameSchemas(doc);
      return doc;
    },
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'onceflow API',
        version: PACKAGE_VERSION,
        description:
          'Idempotent order creation (Idempotency-Key), order status and provider webhooks. ' +
          'Errors are application/problem+json (RFC 9457). See docs/API.md.',
      },
      tags: [
        { name: 'orders', description: "A tenant's orders (API key)" },
        { name: 'refunds', description: "Refunds of a tenant's completed orders (API key)" },
        { name: 'webhooks', description: 'Signed events from the payment provider' },
        { name: 'health', description: 'Liveness and readiness' },
        { name: 'admin', description: "The operator's recovery path (admin token); see docs/OPERATIONS.md" },
      ],
      components: { securitySchemes: SECURITY_SCHEMES },
    },
  });
  // Every response carries the standard browser hardening headers; /docs gets a CSP that lets Swagger UI run.
  app.addHook('onSend', securityHeaders);
  // X-Request-Id on every response (problems included) and one log line per request.
  logRequests(app);
  await app.register(swaggerUi, {
    routePrefix: '/docs',
    staticCSP: true,
    transformStaticCSP: docsCsp,
  });

  app.setErrorHandler((err, request, reply) => sendProblem(reply, toProblem(err, request)));
  // The URL is not echoed: it is the client's own input, of any length.
  app.setNotFoundHandler((_request, reply) =>
    sendProblem(reply, new ProblemError('notFound', 'No such resource.')),
  );

  // Auth runs before the rate limiter, so the limiter keys on the tenant. A 401 is held until
  // preParsing, where the limiter counts it per client address: a flood without a valid key gets
  // 429s while valid keys from that address keep their tenant's limit.
  const apiKeys = new ApiKeyAuth({
    secret: deps.config.apiKeySecret,
    allowUntagged: limits.apiKeyAllowUntagged,
    failureMax: limits.authFailureMax,
    failureWindowMs: limits.authFailureWindowMs,
    cacheTtlMs: limits.apiKeyCacheTtlMs,
  });
  const lookup = (keyHash: string) => withClient(deps.pool, (c) => findTenantByKeyHash(c, keyHash));
  const warnUntrustedProxy = untrustedProxyWarning(app.log);
  const refusedCredentials = new WeakMap<FastifyRequest, ProblemError>();
  app.addHook('onRequest', async (request) => {
    warnUntrustedProxy(request);
    if (!request.routeOptions.config.auth) return;
    try {
      request.tenantId = await apiKeys.authenticate(lookup, request);
    } catch (err) {
      if (!(err instanceof ProblemError) || err.kind !== 'unauthorized') throw err;
      refusedCredentials.set(request, err);
    }
  });
  app.addHook('preParsing', async (request, reply) => {
    const refused = refusedCredentials.get(request);
    if (!refused) return;
    // Counted, but the limit's headers describe a tenant's budget, which a 401 has none of.
    for (const h of ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset'])
      reply.removeHeader(h);
    throw refused;
  });

  await app.register(rateLimit, {
    global: true,
    max: deps.config.api.rateLimitMax,
    timeWindow: deps.config.api.rateLimitWindowMs,
    keyGenerator: (request) => (request.tenantId ? `tenant:${request.tenantId}` : `ip:${request.ip}`),
    errorResponseBuilder: (_request, context) =>
      new ProblemError('rateLimited', `Rate limit exceeded; retry in ${context.after}.`),
  });

  if (deps.onRequestMetrics) {
    const metrics = deps.onRequestMetrics;
    app.addHook('onResponse', async (request, reply) => {
      try {
        metrics(request.routeOptions.url ?? 'unmatched', reply.statusCode, reply.elapsedTime);
      } catch {
        // metrics must never break a request
      }
    });
  }

  app.get('/openapi.json', { schema: { hide: true }, config: { rateLimit: false } }, async () =>
    app.swagger(),
  );
  await app.register(healthRoutes, { ctx });
  await app.register(orderRoutes, { ctx });
  await app.register(refundRoutes, { ctx });
  await app.register(webhookRoutes, { ctx });
  await app.register(webhookEndpointRoutes, { ctx });

  return app;
}
