/**
 * The worker's /metrics carries the Temporal SDK's own worker metrics next to
 * ours. Runs in a child process because the SDK runtime is process-wide and
 * installed once (the test process already has one).
 */
import { afterAll, expect, it } from 'vitest';
import { startWorkerMetricsFixture, type WorkerMetricsFixture } from './fixtures/start-worker-metrics.ts';

let worker: WorkerMetricsFixture | undefined;

afterAll(async () => {
  await worker?.stop();
});

it('serves onceflow and temporal_ worker metrics from one endpoint', async () => {
  worker = await startWorkerMetricsFixture('metrics');
  const { url, sdkPort } = worker;

  // The SDK's exporter fills in once the worker polls; allow it a few seconds.
  const deadline = Date.now() + 20_000;
  let body = '';
  while (Date.now() < deadline) {
    body = await (await fetch(url)).text();
    if (/^temporal_num_pollers\{/m.test(body)) break;
    await new Promise((r) => setTimeout(r, 500));
  }
  expect(body).toMatch(/^temporal_num_pollers\{/m);
  expect(body).toMatch(/^temporal_worker_start\{/m);
  expect(body).toContain(
    `onceflow_metrics_source_up{source="http://127.0.0.1:${sdkPort}/metrics",service="worker"} 1`,
  );
  expect(body).toContain('process_resident_memory_bytes{service="worker"}');
  // The merged output must stay parseable: no metric family declared twice.
  const families = [...body.matchAll(/^# TYPE (\S+)/gm)].map((m) => m[1]);
  expect(new Set(families).size).toBe(families.length);
});
