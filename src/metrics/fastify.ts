/**
 * Fastify integration: one onResponse hook that records every response under
 * its route pattern. It serves nothing: the registry is scraped on a listener
 * of its own (./server.ts), never on the API's port, where any client could
 * read every tenant's figures.
 */
import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import type { Metrics } from './metrics.ts';

export interface MetricsPluginOptions {
  metrics: Metrics;
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
  };
  Object.assign(plugin, {
    [Symbol.for('skip-override')]: true,
    [Symbol.for('fastify.display-name')]: 'onceflow-metrics',
  });
  return plugin;
}
