/**
 * Worker composition root: config -> pool -> ledger + providers -> Temporal
 * connection -> worker. SIGTERM/SIGINT drain the worker (in-flight
 * activities get a grace period), then close in reverse order.
 */
import { NativeConnection } from '@temporalio/worker';
import { Client, Connection } from '@temporalio/client';
import { ensureRetentionSchedule } from '../retention/schedule.ts';
import { loadConfig } from '../config.ts';
import { createPool } from '../db/index.ts';
import { connectionSettings } from '../temporal/connection.ts';
import { createWorker, timeoutOrderingProblem } from './worker.ts';
import { errorFields, log, setLogLevel } from '../log.ts';
import { Ledger } from '../ledger/index.ts';
import { createSandboxEmailProvider, createSandboxPaymentProvider } from '../providers/sandbox.ts';
import { createMetrics, startMetricsServer } from '../metrics/index.ts';
import { installWorkerRuntime } from '../metrics/worker-runtime.ts';
import { DefaultLogger, type LogLevel } from '@temporalio/worker';
import { PortInUseError } from '../devserver/ports.ts';

const config = loadConfig();
setLogLevel(config.logLevel);
const timeoutProblem = timeoutOrderingProblem(config);
if (timeoutProblem)
  log.warn('timeouts are ordered unusually; expect extra retries', { problem: timeoutProblem });
const address = config.temporal.address ?? `127.0.0.1:${config.ports.temporal}`;
// First, before any connection: the SDK runtime (its logger and Prometheus exporter) is process-wide.
const { sdkMetricsUrl } = await installWorkerRuntime({
  sdkMetricsPort: config.ports.workerSdkMetrics,
  logger: new DefaultLogger(config.logLevel.toUpperCase() as LogLevel),
});
const pool = createPool(config.databaseUrl);
const metrics = createMetrics({
  pool,
  // Under --workers N each worker has its own metrics port; the label names it too.
  defaultLabels: { service: 'worker', ...(config.processName ? { process: config.processName } : {}) },
});
const ledger = new Ledger(pool, { leaseMs: config.ledgerLeaseMs, hooks: metrics.ledgerHooks });
let metricsServer: Awaited<ReturnType<typeof startMetricsServer>>;
try {
  metricsServer = await startMetricsServer({
    registry: metrics.registry,
    host: config.bindHost,
    port: config.ports.workerMetrics,
    merge: [sdkMetricsUrl],
  });
} catch (err) {
  log.error(
    err instanceof PortInUseError ? err.message : 'worker metrics server failed to start',
    errorFields(err),
  );
  await pool.end();
  process.exit(1);
}
const providerOptions = { baseUrl: config.sandboxUrl, timeoutMs: config.providerTimeoutMs };
const connection = await NativeConnection.connect(connectionSettings(address));
const worker = await createWorker({
  connection,
  namespace: config.temporal.namespace,
  taskQueue: config.temporal.taskQueue,
  deps: {
    pool,
    ledger,
    payments: createSandboxPaymentProvider(providerOptions),
    email: createSandboxEmailProvider(providerOptions),
  },
  ...(config.workflowBundlePath ? { workflowBundlePath: config.workflowBundlePath } : {}),
  overrides: { shutdownGraceTime: '10 seconds' },
  log: (line) => log.info(line),
});
// The retention Schedule is created once, by whichever worker starts first.
const clientConnection = await Connection.connect(connectionSettings(address));
const created = await ensureRetentionSchedule(
  new Client({ connection: clientConnection, namespace: config.temporal.namespace }),
  {
    taskQueue: config.temporal.taskQueue,
    windowMs: config.retention.windowMs,
    intervalMs: config.retention.intervalMs,
  },
);
await clientConnection.close();
log.info(created ? 'retention schedule created' : 'retention schedule already exists', {
  windowMs: config.retention.windowMs,
  intervalMs: config.retention.intervalMs,
});
log.info('worker started', {
  address,
  namespace: config.temporal.namespace,
  taskQueue: config.temporal.taskQueue,
});
// worker.run() installs its own SIGINT/SIGTERM handlers that begin a graceful shutdown.
try {
  await worker.run();
} finally {
  await connection.close();
  await metricsServer.close();
  await pool.end();
  log.info('worker stopped');
}
