/**
 * The Temporal SDK's own worker metrics (task slots, poll latencies, sticky
 * cache, activity and workflow task outcomes...). The SDK's Rust core serves
 * them in Prometheus text on a bind address of its own; the worker's metrics
 * server (server.ts) scrapes that address and appends it to /metrics, so one
 * scrape target covers the process. Kept out of index.ts: it loads the
 * SDK's native module, which the API process does not need.
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
 * Installs the process-wide Temporal Runtime with the Prometheus exporter.
 * Call once, BEFORE any NativeConnection or Worker is created (the SDK
 * creates a default runtime on first use and refuses a second install).
 * Returns the URL to merge into our /metrics.
 */
export async function installWorkerRuntime(opts: WorkerRuntimeOptions): Promise<{ sdkMetricsUrl: string }> {
  const host = opts.host ?? '127.0.0.1';
  // The core exporter binds in a background thread and only logs a bind failure; check first so a
  // port clash fails the start-up with a clear message instead of silently losing SDK metrics.
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
