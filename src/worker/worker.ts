/**
 * Builds the Temporal worker: one task queue, all workflows, all activities
 * wired to their dependencies in one place.
 */
import { NativeConnection, Worker, type WorkerOptions } from '@temporalio/worker';
import { createActivities, type ActivityDeps } from '../../activities/index.ts';
import { DEFAULT_TIMING } from '../../workflows/policies.ts';
import { ensureWorkflowBundle, WORKFLOWS_PATH } from './bundle.ts';

export { WORKFLOWS_PATH };

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

export interface CreateWorkerOptions {
  connection: NativeConnection;
  namespace: string;
  taskQueue: string;
  deps: ActivityDeps;
  /**
   * A bundle to use as is (tests build one per run; WORKFLOW_BUNDLE_PATH).
   * Otherwise the cached bundle matching the current workflow code is used,
   * built first if the code changed (see bundle.ts).
   */
  workflowBundlePath?: string;
  overrides?: Partial<WorkerOptions>;
  log?: (line: string) => void;
}

/**
 * Slots and cache, fitted to the machine class we run on (2 cores, one
 * worker process, a pool of 10 connections) following the SDK's
 * performance guidance (see docs/BENCHMARKS.md for the measured effect):
 * - workflow tasks are CPU work on one thread; more than a handful in
 *   flight only queue inside the process, while each held slot keeps a
 *   long poll open on the server;
 * - activities wait on Postgres or a provider, so they may outnumber the
 *   cores, but far beyond the pool size they only queue for a connection;
 * - the sticky cache holds every workflow in flight, so a workflow task
 *   never replays history because its workflow was evicted;
 * - eager activity dispatch (server flag `system.enableActivityEagerExecution`,
 *   set by our dev server) hands an activity scheduled by a workflow task
 *   straight back to this worker in the task's completion, saving a
 *   matching round trip per activity. Up to 3 per task (the SDK default).
 */
export const WORKER_TUNING = {
  maxConcurrentWorkflowTaskExecutions: 8,
  maxConcurrentWorkflowTaskPolls: 4,
  maxConcurrentActivityTaskExecutions: 32,
  maxConcurrentActivityTaskPolls: 4,
  maxConcurrentLocalActivityExecutions: 32,
  maxCachedWorkflows: 2_000,
  maxEagerActivityReservationsPerWorkflowTask: 3,
} as const satisfies Partial<WorkerOptions>;

export async function createWorker(opts: CreateWorkerOptions): Promise<Worker> {
  const codePath =
    opts.workflowBundlePath ?? (await ensureWorkflowBundle(opts.log ? { log: opts.log } : {})).path;
  return Worker.create({
    connection: opts.connection,
    namespace: opts.namespace,
    taskQueue: opts.taskQueue,
    workflowBundle: { codePath },
    activities: createActivities(opts.deps),
    ...WORKER_TUNING,
    ...opts.overrides,
  });
}
