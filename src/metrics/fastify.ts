/**
 * Fastify integration: one onResponse hook that records every response under
 * its route pattern, and GET /metrics.
 */
import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import type { Metrics } from './metrics.ts';

export interface MetricsPluginOptions {
  metrics: Metrics;
  /** Where the registry is served. Default '/metrics'. */
  path?: string;
}

/**
 * `await app.register(metricsPlugin({ metrics }))`, before the routes.
 * The plugin is not encapsulated (skip-override, what fastify-plugin sets),
 * so its hook sees every route of the app, including 404s ('unmatched').
 */
export function metricsPlugin(opts: MetricsPluginOptions): FastifyPluginAsync {
  const { metrics } = opts;
  const plugin: FastifyPluginAsync = async (app: FastifyInstance) => {
    app.addHook('onResponse', async (request, reply) => {
      metrics.observeHttp({
        route: request.routeOptions.url ?? 'unmatched',
        method: request.method,
        status: reply.statusCode,
        durationMs: reply.elapsedTime,
      });
    });
    app.get(
      opts.path ?? '/metrics',
      { schema: { hide: true }, config: { rateLimit: false } },
      async (_request, reply) => {
        const body = await metrics.registry.metrics();
        return reply.type(metrics.registry.contentType).send(body);
      },
    );
  };
  Object.assign(plugin, {
    [Symbol.for('skip-override')]: true,
    [Symbol.for('fastify.display-name')]: 'onceflow-metrics',
  });
  return plugin;
}
