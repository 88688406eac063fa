/**
 * The Temporal SDK's own worker metrics, served by its core and appended to our /metrics. Kept out
 * of index.ts: it loads the SDK's native module, which the API does not need.
 */
import { DefaultLogger, Runtime, type Logger } from '@temporalio/worker';
import { assertPortFree } from '../process/ports.ts';

export interface WorkerRuntimeOptions {
  /** Port for the SDK's exporter; keep it private (bind 127.0.0.1) and scrape it through our /metrics. */
  sdkMetricsPort: number;
  host?: string;
  logger?: Logger;
}

/**
 * Installs the process-wide Runtime; call BEFORE any connection or Worker (the SDK refuses a second
 * install).
 */
export async function installWorkerRuntime(opts: WorkerRuntimeOptions): Promise<{ sdkMetricsUrl: string }> {
  const host = opts.host ?? '127.0.0.1';
  // The core only logs a bind failure; check first so a port clash fails the start-up.
  await assertPortFree(opts.sdkMetricsPort, 'Temporal SDK metrics (WORKER_METRICS_PORT + 1)', host);
  Runtime.install({
    logger: opts.logger ?? new DefaultLogger('INFO'),
    telemetryOptions: {
      // The Rust core's own lines go through `logger` too (not straight to stderr in its own format).
      logging: { forward: {} },
      metrics: {
        prometheus: { bindAddress: `${host}:${opts.sdkMetricsPort}` },
      },
    },
  });
  return { sdkMetricsUrl: `http://${host}:${opts.sdkMetricsPort}/metrics` };
}
