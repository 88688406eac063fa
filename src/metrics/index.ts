/**
 * Metrics for the API and the worker. The worker also needs
 * `installWorkerRuntime` from './worker-runtime.ts' (kept apart: it loads the
 * Temporal SDK's native module). See docs/OPERATIONS.md for every metric.
 */
export { createMetrics, type Metrics, type MetricsOptions, type HttpSample } from './metrics.ts';
export { metricsPlugin, type MetricsPluginOptions } from './fastify.ts';
export { startMetricsServer, type MetricsServer, type MetricsServerOptions } from './server.ts';
export { answerPrimaryScrapes, clusterCollector, type ClusterScrapeOptions } from './cluster.ts';
