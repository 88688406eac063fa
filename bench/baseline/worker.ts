/**
 * The bench-only worker for the baseline workflow (see workflows.ts). Same
 * slot and cache settings as the product worker, so the comparison is
 * about what each workflow does, not how its worker is tuned.
 *
 *   node --import tsx bench/baseline/worker.ts <temporalAddress> <taskQueue> [sdk-defaults]
 *
 * `sdk-defaults` leaves the SDK's own slot and cache defaults (to measure the tuning).
 *
 * Prints "ready" once it polls; SIGTERM drains and exits.
 */
import path from 'node:path';
import { DefaultLogger, NativeConnection, Runtime, Worker } from '@temporalio/worker';
import { ensureWorkflowBundle } from '../../src/worker/bundle.ts';
import { WORKER_TUNING } from '../../src/worker/worker.ts';

export interface BaselineActivities {
  noop(step: number): Promise<number>;
}

async function main(): Promise<void> {
  const [address, taskQueue, mode] = process.argv.slice(2);
  if (!address || !taskQueue) throw new Error('usage: worker.ts <temporalAddress> <taskQueue>');
  Runtime.install({ logger: new DefaultLogger('WARN') });
  const bundle = await ensureWorkflowBundle({
    workflowsPath: path.join(import.meta.dirname, 'workflows.ts'),
    dir: path.join(import.meta.dirname, '../../dist/bench-baseline-bundle'),
  });
  const connection = await NativeConnection.connect({ address });
  const activities: BaselineActivities = { noop: async (step) => step };
  const worker = await Worker.create({
    connection,
    taskQueue,
    workflowBundle: { codePath: bundle.path },
    activities,
    ...(mode === 'sdk-defaults' ? {} : WORKER_TUNING),
    shutdownGraceTime: '2 seconds',
  });
  console.log('ready');
  try {
    await worker.run();
  } finally {
    await connection.close();
  }
}

await main();
