/** One onResponse hook recording every response by route pattern; it serves nothing (server.ts does). */
import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import type { Metrics } from './metrics.ts';

export interface MetricsPluginOptions {
  metrics: Metrics;
}

/** Register before the routes; not encapsulated, so its hook sees every route, 404s included. */
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
