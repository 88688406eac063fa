/**
 * API composition root: config -> pool -> Temporal client -> metrics -> ledger -> outbox relay ->
 * HTTP server, closed in reverse (a finishing request may still hand the relay a workflow). The
 * Temporal connection is lazy: orders are accepted while it is down, and the relay catches up.
 */
import cluster from 'node:cluster';
import { loadConfig, requireCredentials } from '../config.ts';
import { assertNoDemoKeys } from './demo-keys.ts';
import { PortInUseError } from '../process/ports.ts';
import { configureLogging, log } from '../log.ts';
import { answerPrimaryScrapes, createMetrics, startMetricsServer } from '../metrics/index.ts';
import { listParkedWorkflows } from '../orders/attention.ts';
import { runProcess, untilAborted } from '../process/run.ts';
import { detectRestore } from '../restore/gate.ts';
import { apiPoolTimeouts, createLedger, openPool, openTemporalClient } from '../process/wiring.ts';
import { OutboxRelay } from './outbox.ts';
import { buildApiServer } from './server.ts';
import { startTracing } from '../tracing/index.ts';

await runProcess('api', async ({ resources, stopping, started }) => {
  const config = loadConfig();
  configureLogging({ level: config.logLevel, pretty: config.logPretty, service: 'api' });
  // Off loopback, published default credentials stop the API here, with the variable to set.
  requireCredentials(config, ['adminToken', 'webhookSecret', 'apiKeySecret']);
  // Tracing first (OTEL_EXPORTER_OTLP_ENDPOINT; a no-op when unset): the HTTP app and the client read it.
  const tracing = resources.add('tracing', await startTracing(config.tracing, 'api'), (t) => t.shutdown());

  // Bounded waits on Postgres (API_DB_*): while it can't be reached, requests answer 503 in seconds.
  const pool = openPool(resources, config, {
    max: 20,
    applicationName: 'onceflow-api',
    timeouts: apiPoolTimeouts(config),
  });
  const temporal = openTemporalClient(resources, config, { interceptors: tracing.clientInterceptors });
  const metrics = createMetrics({
    // The backlog gauges (one exporter per fact, see METRICS_BACKLOG): on unless turned off.
    pool: (config.metricsBacklog ?? true) ? pool : undefined,
    // Under --api-processes, which process answered (they share the port): see src/api/cluster.ts.
    defaultLabels: { service: 'api', ...(config.processName ? { process: config.processName } : {}) },
    // Orders whose workflow parked without recording it on the row are counted too.
    parkedWorkflowIds: async () =>
      (await listParkedWorkflows(temporal, { limit: 1000 })).map((p) => p.workflowId),
  });
  // A duplicate's wait for its key ends before the statement timeout would (409, not 503).
  const ledger = createLedger(pool, config, metrics.ledgerHooks, {
    localWaitMs: config.api.db.idempotencyWaitMs,
  });
  const relay = resources.add(
    'outbox relay',
    new OutboxRelay({
      pool,
      temporal,
      enabled: config.api.outboxRelay,
      pollMs: config.api.outboxPollMs,
    }),
    (r) => r.stop(),
  );
  const app = resources.add(
    'http server',
    await buildApiServer({ pool, ledger, temporal, config, relay, metrics }),
    (a) => a.close(),
  );

  // (A ConfigError from assertNoDemoKeys fails the start-up with its message.)
  await assertNoDemoKeys(pool, config.exposure);
  // The restore gate's detection rule (src/recovery/gate.ts), before the first request: if the
  // database lacks orders Temporal has, creates answer 503 until ops recover-after-restore ran.
  if (config.restoreDetection)
    await detectRestore(pool, temporal, config.temporal.taskQueue, `api pid ${process.pid}`);
  // Metrics never on the API port: they show every tenant's figures.
  let metricsUrl: string;
  if (cluster.isWorker) {
    resources.add('metrics for the cluster primary', answerPrimaryScrapes(metrics.registry), (stop) =>
      stop(),
    );
    metricsUrl = 'served by the cluster primary';
  } else {
    const server = resources.add(
      'metrics server',
      await startMetricsServer({
        registry: metrics.registry,
        host: config.metricsBindHost,
        port: config.ports.apiMetrics,
        what: 'API metrics (API_METRICS_PORT)',
      }),
      (s) => s.close(),
    );
    metricsUrl = server.url;
  }
  try {
    await app.listen({ host: config.bindHost, port: config.ports.api });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw code === 'EADDRINUSE' || code === 'EACCES'
      ? new PortInUseError(config.ports.api, 'API (API_PORT)')
      : err;
  }
  relay.start();
  started();
  log.info('api listening', {
    url: `http://${config.bindHost}:${config.ports.api}`,
    metrics: metricsUrl,
    temporal: config.temporal.address,
    taskQueue: config.temporal.taskQueue,
    outboxRelay: config.api.outboxRelay ? 'on' : 'off',
  });
  await untilAborted(stopping);
});
