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
 * Warns when a provider call may outlast its activity attempt: still safe (takeovers reconcile,
 * completions are fenced) but it costs retries.
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
  /** A bundle to use as is; otherwise the cached one matching the code (bundle.ts). */
  workflowBundlePath?: string;
  /** Also register the smoke probe (`npm start`'s self-check, tests); never in production. */
  smoke?: boolean;
  /**
   * The Deployment Version this worker polls as, its runs Pinned to it (src/worker/deployment.ts).
   * Without it the worker is unversioned: it runs whatever its task queue hands it.
   */
  deployment?: DeploymentVersion;
  overrides?: Partial<WorkerOptions>;
  log?: (line: string) => void;
  /** The process's tracing; without it, workflow spans are dropped. */
  tracing?: Pick<Tracing, 'worker' | 'enabled'>;
}

/**
 * Slots and cache for one worker process on 2 cores with a pool of 10 connections:
 * - a workflow task holds its slot while its local activities wait on a provider, so there are many
 *   slots; polls stay few, since each holds a long poll open on the server;
 * - activities may outnumber the cores, but far past the pool size they only queue for a connection;
 * - the sticky cache holds every workflow in flight, so no task replays because of an eviction;
 * - eager activity dispatch saves a matching round trip per activity (SDK default, up to 3 per task).
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
