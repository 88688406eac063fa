/**
 * Builds the Temporal worker: one task queue, all workflows, all activities
 * wired to their dependencies in one place.
 */
import { NativeConnection, Worker, type WorkerOptions } from '@temporalio/worker';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { createActivities, type ActivityDeps } from '../../activities/index.ts';
import { DEFAULT_TIMING } from '../../workflows/policies.ts';

/**
 * The ordering that keeps attempts from overlapping needlessly: a provider
 * call gives up before its activity attempt does, and a claim's lease
 * outlives the attempt. Breaking it is still safe (a takeover reconciles
 * first and completions are fenced) but costs retries, so it is a warning:
 * workflows may also override the start-to-close timeout per order.
 */
export function timeoutOrderingProblem(
  t: { providerTimeoutMs: number; ledgerLeaseMs: number },
  startToCloseMs = DEFAULT_TIMING.activityStartToCloseMs,
): string | null {
  if (t.providerTimeoutMs < startToCloseMs && startToCloseMs < t.ledgerLeaseMs) return null;
  return (
    `expected PROVIDER_TIMEOUT_MS (${t.providerTimeoutMs}) < activity start-to-close ` +
    `(${startToCloseMs}) < LEDGER_LEASE_MS (${t.ledgerLeaseMs})`
  );
}

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
