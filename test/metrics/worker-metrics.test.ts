/**
 * The worker's /metrics carries the Temporal SDK's own worker metrics next to
 * ours. Runs in a child process because the SDK runtime is process-wide and
 * installed once (the test process already has one).
 */
import { afterAll, expect, it } from 'vitest';
import { until } from '../support/wait.ts';
import { startWorkerMetricsFixture, type WorkerMetricsFixture } from './fixtures/start-worker-metrics.ts';

let worker: WorkerMetricsFixture | undefined;

afterAll(async () => {
  await worker?.stop();
});

it('serves onceflow and temporal_ worker metrics from one endpoint', async () => {
  worker = await startWorkerMetricsFixture('metrics');
  const { url, sdkPort } = worker;

  // The SDK's exporter fills in once the worker polls.
  const body = await until(
    'the SDK exporter to report temporal_num_pollers',
    async () => (await fetch(url)).text(),
    {
      done: (text) => /^temporal_num_pollers\{/m.test(text),
      intervalMs: 500,
    },
  );
  expect(body).toMatch(/^temporal_worker_start\{/m);
  expect(body).toContain(
    `onceflow_metrics_source_up{source="http://127.0.0.1:${sdkPort}/metrics",service="worker"} 1`,
  );
  expect(body).toContain('process_resident_memory_bytes{service="worker"}');
  // The merged output must stay parseable: no metric family declared twice.
  const families = [...body.matchAll(/^# TYPE (\S+)/gm)].map((m) => m[1]);
  expect(new Set(families).size).toBe(families.length);
});
