/**
 * The HTTP API as a Fastify app, built from its dependencies and nothing
 * else (no env, no listen): `src/api/main.ts` wires the process, tests build
 * it directly.
 */
import Fastify, { type FastifyInstance } from 'fastify';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import rateLimit from '@fastify/rate-limit';
import {
  TypeBoxValidatorCompiler,
  registerAjvFormats,
  type TypeBoxTypeProvider,
} from '@fastify/type-provider-typebox';
import type { Client } from '@temporalio/client';
import type { Config } from '../config.ts';
import { withClient, type Pool } from '../db/index.ts';
import type { Ledger } from '../ledger/index.ts';
import { authenticate } from './auth.ts';
import type { ApiContext } from './context.ts';
import { OutboxRelay } from './outbox.ts';
import { PROBLEMS, ProblemError, sendProblem, toProblem } from './problems.ts';
import { healthRoutes } from './routes/health.ts';
import { orderRoutes } from './routes/orders.ts';
import { webhookRoutes } from './routes/webhooks.ts';
import { BODY_LIMIT_BYTES } from './schemas.ts';

export interface ApiDeps {
  pool: Pool;
  ledger: Ledger;
  temporal: Client;
  config: Config;
  /** Defaults to a relay built from `config` whose loop is NOT started (the composition root starts it). */
  relay?: OutboxRelay;
  /** Called once per response, e.g. to feed Prometheus. `route` is the route pattern, not the URL. */
  onRequestMetrics?: (route: string, status: number, durationMs: number) => void;
}

let formatsRegistered = false;

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
  const ctx: ApiContext = { ...deps, relay };

  const app = Fastify({
    logger: false,
    bodyLimit: BODY_LIMIT_BYTES,
    // JSON with __proto__ / constructor.prototype keys is refused (400), not merged into objects.
    onProtoPoisoning: 'error',
    onConstructorPoisoning: 'error',
    // Requests the HTTP parser itself rejects (NUL or CR in a header, ...) still get problem+json.
    clientErrorHandler: (err, socket) => {
      if (!socket.writable) return socket.destroy();
      const status = (err as { code?: string }).code === 'HPE_HEADER_OVERFLOW' ? 431 : 400;
      const body = JSON.stringify({
        type: PROBLEMS.invalidRequest.type,
        title: 'The HTTP request is malformed',
        status,
      });
      socket.end(
        `HTTP/1.1 ${status} ${status === 431 ? 'Request Header Fields Too Large' : 'Bad Request'}\r\n` +
          `Content-Type: application/problem+json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
          `Connection: close\r\n\r\n${body}`,
      );
    },
  }).withTypeProvider<TypeBoxTypeProvider>();

  // JSON only: without this, Fastify's built-in text/plain parser would turn a wrong media type into a 400.
  app.removeContentTypeParser('text/plain');
  // Bodies are validated without type coercion ("2" is not a quantity); query strings are converted.
  app.setValidatorCompiler(TypeBoxValidatorCompiler);
  // Response schemas document the API; bodies are sent as built, so a replay is byte-for-byte the original.
  app.setSerializerCompiler(() => (data) => JSON.stringify(data));

  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'onceflow API',
        version: '1.0.0',
        description:
          'Idempotent order creation (Idempotency-Key), order status and provider webhooks. ' +
          'Errors are application/problem+json (RFC 9457). See docs/API.md.',
      },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
    },
  });
  await app.register(swaggerUi, { routePrefix: '/docs' });

  app.setErrorHandler((err, request, reply) => sendProblem(reply, toProblem(err, request)));
  app.setNotFoundHandler((request, reply) =>
    sendProblem(
      reply,
      new ProblemError('notFound', `No route for ${request.method} ${request.url.split('?')[0]}.`),
    ),
  );

  // Auth runs first (app-level onRequest precedes the rate limiter's route-level hook), so the
  // limiter can key on the tenant and a 401 is never counted against anyone.
  app.addHook('onRequest', async (request) => {
    if (request.routeOptions.config.auth) {
      request.tenantId = await withClient(deps.pool, (c) => authenticate(c, request));
    }
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
  await app.register(webhookRoutes, { ctx });

  return app;
}
