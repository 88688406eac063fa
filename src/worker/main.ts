/**
 * Worker composition root: config -> SDK runtime -> pool -> metrics server ->
 * Temporal connections -> restore gate -> worker. SIGTERM/SIGINT drain the
 * worker (in-flight activities get a grace period); then, and on every failed
 * start-up, what was opened closes in reverse order (src/process/run.ts).
 */
import { NativeConnection } from '@temporalio/worker';
import { ensureRetentionSchedule } from '../retention/schedule.ts';
import { loadConfig } from '../config.ts';
import { connectionSettings } from '../temporal/connection.ts';
import { createWorker, timeoutOrderingProblem } from './worker.ts';
import { defaultBuildId } from './bundle.ts';
import { promoteVersion, type DeploymentVersion } from './deployment.ts';
import { workerReadiness } from './health.ts';
import { configureLogging, log, temporalSdkLogger } from '../log.ts';
import { createMetrics, startMetricsServer } from '../metrics/index.ts';
import { installWorkerRuntime } from '../metrics/worker-runtime.ts';
import { runProcess } from '../process/run.ts';
import { detectRestore, waitWhileRecoveryPending } from '../restore/gate.ts';
import { startTracing } from '../tracing/index.ts';
import { createLedger, openPool, openTemporalClient, configuredProviders } from '../process/wiring.ts';

await runProcess('worker', async ({ resources, stopping, started }) => {
  const config = loadConfig();
  configureLogging({ level: config.logLevel, pretty: config.logPretty, service: 'worker' });
  const timeoutProblem = timeoutOrderingProblem(config);
  if (timeoutProblem)
    log.warn('timeouts are ordered unusually; expect extra retries', { problem: timeoutProblem });
  // Tracing (OTEL_EXPORTER_OTLP_ENDPOINT; a no-op when unset): activity interceptors and the workflow span sink.
  const tracing = resources.add('tracing', await startTracing(config.tracing, 'worker'), (t) => t.shutdown());
  // First, before any connection: the SDK runtime (logger, Prometheus exporter) is process-wide.
  const { sdkMetricsUrl } = await installWorkerRuntime({
    sdkMetricsPort: config.ports.workerSdkMetrics,
    logger: temporalSdkLogger(),
  });
  const pool = openPool(resources, config, { applicationName: 'onceflow-worker' });
  const metrics = createMetrics({
    // No backlog gauges unless METRICS_BACKLOG=on: the API exports those facts once (config.ts).
    pool: config.metricsBacklog === true ? pool : undefined,
    // Under --workers N each worker has its own metrics port; the label names it too.
    defaultLabels: { service: 'worker', ...(config.processName ? { process: config.processName } : {}) },
  });
  const ledger = createLedger(pool, config, metrics.ledgerHooks);
  // /readyz reports the worker once it exists (set below); until then it answers 503 "starting".
  const current: { worker?: Awaited<ReturnType<typeof createWorker>> } = {};
  resources.add(
    'metrics server',
    await startMetricsServer({
      registry: metrics.registry,
      // METRICS_BIND_HOST (loopback unless set), as the API's: BIND_HOST does not expose metrics.
      host: config.metricsBindHost,
      port: config.ports.workerMetrics,
      merge: [sdkMetricsUrl],
      readiness: workerReadiness({ worker: () => current.worker, pool }),
    }),
    (s) => s.close(),
  );
  const connection = resources.add(
    'temporal worker connection',
    await NativeConnection.connect(connectionSettings(config.temporal.address)),
    (c) => c.close(),
  );
  const client = openTemporalClient(resources, config);
  // The retention Schedule is created once, by whichever worker starts first.
  const created = await ensureRetentionSchedule(client, {
    taskQueue: config.temporal.taskQueue,
    windowMs: config.retention.windowMs,
    intervalMs: config.retention.intervalMs,
    webhookWindowMs: config.retention.webhookWindowMs,
    outboxWindowMs: config.retention.outboxWindowMs,
  });
  log.info(created ? 'retention schedule created' : 'retention schedule already exists', {
    ...config.retention,
  });
  // The restore gate: no step runs while the database may lack records a restore lost.
  if (config.restoreDetection)
    await detectRestore(pool, client, config.temporal.taskQueue, `worker pid ${process.pid}`);
  await waitWhileRecoveryPending(pool, { signal: stopping });
  // A signal during start-up: nothing is running yet, so just close what is open.
  if (stopping.aborted) return;
  // Worker Versioning (src/worker/deployment.ts): this build's version, its runs Pinned to it.
  const versioning = config.workerVersioning;
  const deployment: DeploymentVersion | undefined = versioning.enabled
    ? { deploymentName: versioning.deploymentName, buildId: versioning.buildId ?? defaultBuildId() }
    : undefined;
  // Created after the gate: a Worker that never ran keeps the connection from closing.
  const worker = await createWorker({
    connection,
    namespace: config.temporal.namespace,
    taskQueue: config.temporal.taskQueue,
    deps: { pool, ledger, ...configuredProviders(config), webhooks: config.webhooks },
    ...(config.workflowBundlePath ? { workflowBundlePath: config.workflowBundlePath } : {}),
    smoke: config.workerSmokeWorkflow,
    ...(deployment ? { deployment } : {}),
    overrides: { shutdownGraceTime: '10 seconds' },
    log: (line) => log.info(line),
    tracing,
  });
  // worker.run() also handles SIGINT/SIGTERM itself (the SDK's graceful shutdown) and resolves once drained.
  // It starts polling at once: a version exists on the server only from its first poll.
  const running = worker.run();
  if (deployment && versioning.promote === 'auto') {
    try {
      const promotion = await promoteVersion(client.workflowService, config.temporal.namespace, deployment, {
        identity: `onceflow-worker ${config.processName ?? 'worker'} pid ${process.pid}`,
      });
      log.info(promotion.promoted ? 'made this version current' : 'left the current version as it is', {
        ...deployment,
        ...(promotion.promoted ? {} : { why: promotion.why }),
      });
    } catch (err) {
      // Not ready, and the worker must not go on polling a version no new run can reach unnoticed.
      worker.shutdown();
      await running.catch(() => undefined);
      throw err;
    }
  }
  // Ready (/readyz) once polling and its version is settled: a worker whose version no run can reach is not.
  current.worker = worker;
  started();
  log.info('worker started', {
    address: config.temporal.address,
    namespace: config.temporal.namespace,
    taskQueue: config.temporal.taskQueue,
    ...(deployment
      ? { deployment: deployment.deploymentName, buildId: deployment.buildId }
      : { versioning: 'off' }),
  });
  await running;
});
