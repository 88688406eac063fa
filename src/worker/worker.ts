/**
 * Builds the Temporal worker: one task queue, all workflows, all activities
 * wired to their dependencies in one place.
 */
import { NativeConnection, Worker, type WorkerOptions } from '@temporalio/worker';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { createActivities, type ActivityDeps } from '../../activities/index.ts';
import { DEFAULT_TIMING } from '../../workflows/policies.ts';

/** Below this a lease renewal (every third of the lease) can't be trusted to beat a slow database round trip. */
export const MIN_RENEWED_LEASE_MS = 3_000;

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
