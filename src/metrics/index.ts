/**
 * Metrics for the API and the worker. The worker also needs
 * `installWorkerRuntime` from './worker-runtime.ts' (kept apart: it loads the
 * Temporal SDK's native module). See docs/OPERATIONS.md for every metric.
 */
export { createMetrics, type Metrics } from './metrics.ts';
export { metricsPlugin } from './fastify.ts';
export { startMetricsServer, type MetricsServer } from './server.ts';
export { answerPrimaryScrapes, clusterCollector } from './cluster.ts';
