/**
 * Backlog gauges are facts about the database, not about a process: exactly
 * one exporter serves them (METRICS_BACKLOG, src/config.ts). A worker started
 * as production starts it (src/worker/main.ts) exports its own series and
 * the SDK's, but no backlog gauge, unless METRICS_BACKLOG=on says it is the
 * one exporter. (The API side, one process and the cluster, is in
 * test/api/process.test.ts.)
 */
import { afterAll, expect, it } from 'vitest';
import { freePort } from '../../src/process/ports.ts';
import { temporalAddress, testDatabaseUrl, uniq, workflowBundlePath } from '../support/env.ts';
import { killAll, spawnEntry, waitOutput, type Proc } from '../support/processes.ts';

const BACKLOG = [
  'onceflow_metrics_db_up',
  'onceflow_orders_in_status',
  'onceflow_refunds_in_status',
  'onceflow_ledger_unresolved_records',
  'onceflow_outbox_unstarted_rows',
];

const procs: Proc[] = [];
afterAll(async () => {
  killAll(procs);
  await Promise.all(procs.map((p) => p.exited));
});

async function workerScrape(extraEnv: Record<string, string>): Promise<string> {
  const metricsPort = await freePort();
  const worker = spawnEntry('worker', 'src/worker/main.ts', {
    DATABASE_URL: testDatabaseUrl(),
    TEMPORAL_ADDRESS: temporalAddress(),
    TEMPORAL_TASK_QUEUE: uniq('once-per-fact'),
    WORKFLOW_BUNDLE_PATH: workflowBundlePath(),
    WORKER_METRICS_PORT: String(metricsPort),
    WORKER_SDK_METRICS_PORT: String(await freePort()),
    LOG_LEVEL: 'info',
    ...extraEnv,
  });
  procs.push(worker);
  await waitOutput(worker, /worker started/, 120_000);
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  worker.child.kill('SIGTERM');
  expect(await worker.exited).toEqual({ code: 0, signal: null });
  return text;
}

const exported = (text: string, name: string) => new RegExp(`^${name}[{ ]`, 'm').test(text);

it('a worker exports its own series and no backlog gauge; METRICS_BACKLOG=on makes it the exporter', async () => {
  const plain = await workerScrape({});
  // Its own facts are there: the ledger counters, the process and the SDK's worker metrics.
  expect(plain).toMatch(/^process_resident_memory_bytes\{service="worker"\}/m);
  expect(plain).toMatch(/^temporal_worker_task_slots_available\{/m);
  for (const name of BACKLOG) expect(exported(plain, name), name).toBe(false);

  const exporter = await workerScrape({ METRICS_BACKLOG: 'on' });
  for (const name of BACKLOG) expect(exported(exporter, name), name).toBe(true);
}, 300_000);
