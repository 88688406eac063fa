/**
 * Builds the Temporal worker: one task queue, all workflows, all activities
 * wired to their dependencies in one place.
 */
import { NativeConnection, Worker, type WorkerOptions } from '@temporalio/worker';
import { createActivities, type ActivityDeps } from '../../activities/index.ts';
import { DEFAULT_TIMING } from '../../workflows/policies.ts';
import { ensureWorkflowBundle } from './bundle.ts';
import { workerDeploymentOptions, type DeploymentVersion } from './deployment.ts';
import { UNTRACED_WORKER, type Tracing } from '../tracing/index.ts';

/** Below this a lease renewal (every third of the lease) can't be trusted to beat a slow database round trip. */
const MIN_RENEWED_LEASE_MS = 3_000;

/**
 * The timings that keep attempts from overlapping needlessly: a provider
 * call gives up before its activity attempt does. The claim's lease no
 * longer has to outlive the attempt (the attempt renews it on every
 * heartbeat), only a few renewal intervals. Breaking either is still safe (a
 * takeover reconciles first and completions are fenced) but costs retries,
 * so it is a warning: workflows may also override the start-to-close
 * timeout per order.
 */
export function timeoutOrderingProblem(
  t: { providerTimeoutMs: number; ledgerLeaseMs: number },
  startToCloseMs = DEFAULT_TIMING.activityStartToCloseMs,
): string | null {
  const problems: string[] = [];
  if (t.providerTimeoutMs >= startToCloseMs) {
    problems.push(
      `expected PROVIDER_TIMEOUT_MS (${t.providerTimeoutMs}) < activity start-to-close (${startToCloseMs})`,
    );
  }
  if (t.ledgerLeaseMs < MIN_RENEWED_LEASE_MS) {
    problems.push(
      `expected LEDGER_LEASE_MS (${t.ledgerLeaseMs}) >= ${MIN_RENEWED_LEASE_MS}: it is renewed every third ` +
        'of itself, and a shorter one can run out between two renewals on a slow database',
    );
  }
  return problems.length ? problems.join('; ') : null;
}

export interface CreateWorkerOptions {
  connection: NativeConnection;
  namespace: string;
  taskQueue: string;
  deps: ActivityDeps;
  /**
   * A bundle to use as is (tests build one per run; WORKFLOW_BUNDLE_PATH).
   * Otherwise the cached bundle matching the current workflow code (and
   * whether tracing is on) is used, built first if the code changed (see bundle.ts).
   */
  workflowBundlePath?: string;
  /**
   * Also register the smoke probe (workflow and activity): `npm start`'s
   * self-check, tests, bench. Production workers don't. With
   * workflowBundlePath, the bundle must be built with `smoke` too.
   */
  smoke?: boolean;
  /**
   * The Deployment Version this worker polls as, its runs Pinned to it (src/worker/deployment.ts).
   * Without it the worker is unversioned: it runs whatever its task queue hands it.
   */
  deployment?: DeploymentVersion;
  overrides?: Partial<WorkerOptions>;
  log?: (line: string) => void;
  /**
   * The process's tracing (src/tracing): activity interceptors and the sink the
   * bundled workflow interceptors export spans through. Without it, workflow spans are dropped.
   */
  tracing?: Pick<Tracing, 'worker' | 'enabled'>;
}

/**
 * Slots and cache, fitted to the machine class we run on (2 cores, one
 * worker process, a pool of 10 connections) following the SDK's
 * performance guidance (docs/BENCHMARKS-JOURNAL.md, "Tuning changes", has the measured effect):
 * - a workflow task holds its slot while its local activities run, and
 *   an order's charge and receipt are local activities (LOCAL_EXTERNAL_STEPS,
 *   and STEPS_CARRY_STATUS, under which they write the statuses around them):
 *   a straight-through order holds one slot from its first step to its
 *   last, most of it waiting on a provider. With 8 slots (the setting when
 *   workflow tasks were CPU work only) 32 clients' orders queued 3-4 s for a
 *   slot (bench:e2e, workflowTaskScheduled -> workflowTaskStarted); 64 slots
 *   cover 32 orders in flight twice over. Polls stay at 4: each held poll
 *   keeps a long poll open on the server;
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
  maxConcurrentWorkflowTaskExecutions: 64,
  maxConcurrentWorkflowTaskPolls: 4,
  maxConcurrentActivityTaskExecutions: 32,
  maxConcurrentActivityTaskPolls: 4,
  maxConcurrentLocalActivityExecutions: 64,
  maxCachedWorkflows: 2_000,
  maxEagerActivityReservationsPerWorkflowTask: 3,
} as const satisfies Partial<WorkerOptions>;

export async function createWorker(opts: CreateWorkerOptions): Promise<Worker> {
  // With tracing on, the bundle with the tracing interceptors; otherwise the one without (cheaper).
  const traced = opts.tracing?.enabled ?? false;
  const codePath =
    opts.workflowBundlePath ??
    (
      await ensureWorkflowBundle({
        traced,
        smoke: opts.smoke ?? false,
        ...(opts.log ? { log: opts.log } : {}),
      })
    ).path;
  return Worker.create({
    connection: opts.connection,
    namespace: opts.namespace,
    taskQueue: opts.taskQueue,
    workflowBundle: { codePath },
    activities: createActivities(opts.deps, { smoke: opts.smoke ?? false }),
    ...(opts.tracing?.worker ?? UNTRACED_WORKER),
    ...WORKER_TUNING,
    ...(opts.deployment ? { workerDeploymentOptions: workerDeploymentOptions(opts.deployment) } : {}),
    ...opts.overrides,
  });
}
