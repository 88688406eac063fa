/**
 * Builds the Temporal worker: one task queue, all workflows, all activities
 * wired to their dependencies in one place.
 */
import { NativeConnection, Worker, type WorkerOptions } from '@temporalio/worker';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { createActivities, type ActivityDeps } from '../../activities/index.ts';

export const WORKFLOWS_PATH = path.resolve(
  path.dirname(fileURLToPath(import.meta.url)),
  '../../workflows/index.ts',
);

export interface CreateWorkerOptions {
  connection: NativeConnection;
  namespace: string;
  taskQueue: string;
  deps: ActivityDeps;
  /** A pre-built bundle (tests build one per run) instead of bundling from source. */
  workflowBundlePath?: string;
  overrides?: Partial<WorkerOptions>;
}

export async function createWorker(opts: CreateWorkerOptions): Promise<Worker> {
  return Worker.create({
    connection: opts.connection,
    namespace: opts.namespace,
    taskQueue: opts.taskQueue,
    ...(opts.workflowBundlePath
      ? { workflowBundle: { codePath: opts.workflowBundlePath } }
      : { workflowsPath: WORKFLOWS_PATH }),
    activities: createActivities(opts.deps),
    ...opts.overrides,
  });
}
