/**
 * Worker Versioning (docs/UPGRADING.md). Every workflow is Pinned by the worker's default, so a
 * release that changes a command sequence deploys while orders are in flight: old runs finish on
 * the old version's workers, new runs start on the new one.
 */
import type { WorkflowService } from '@temporalio/client';
import type { WorkerDeploymentOptions } from '@temporalio/worker';

/** One Deployment Version: what a worker polls as. */
export interface DeploymentVersion {
  deploymentName: string;
  buildId: string;
}

/** Pinned as the worker's default: no workflow it registers may replay on code it did not start on. */
export function workerDeploymentOptions(version: DeploymentVersion): WorkerDeploymentOptions {
  return { version, useWorkerVersioning: true, defaultVersioningBehavior: 'PINNED' };
}

/** gRPC status codes the deployment calls answer with while the version is not there yet, or on a race. */
const NOT_FOUND = 5;
const FAILED_PRECONDITION = 9;
const ABORTED = 10;

/** Why `promoteVersion` did or did not make the version current. */
type Promotion =
  | { promoted: true }
  | { promoted: false; why: 'already current' | 'activated before' | 'a newer version is current' };

type Timestamp = { seconds?: { toString(): string } | number | null; nanos?: number | null } | null;

function millis(t: Timestamp | undefined): number {
  if (!t) return 0;
  return Number(t.seconds?.toString() ?? 0) * 1000 + Math.floor((t.nanos ?? 0) / 1e6);
}

function grpcCode(err: unknown): number | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'number' ? code : undefined;
}

/**
 * Makes a new build current once one of its workers polls. A version that was current before, or is
 * older than the current one, is never promoted by a worker, so a restart can't undo a rollback.
 * The conflict token makes the change conditional on the state read.
 */
export async function promoteVersion(
  service: WorkflowService,
  namespace: string,
  version: DeploymentVersion,
  opts: { identity: string; timeoutMs?: number; pollMs?: number },
): Promise<Promotion> {
  const deadline = Date.now() + (opts.timeoutMs ?? 60_000);
  const pollMs = opts.pollMs ?? 250;
  let lastProblem = 'the version was never registered (no worker of it polled)';
  for (;;) {
    if (Date.now() > deadline) {
      throw new Error(
        `could not make ${version.deploymentName}:${version.buildId} the current version: ${lastProblem}`,
      );
    }
    try {
      const { workerDeploymentInfo: info, conflictToken } = await service.describeWorkerDeployment({
        namespace,
        deploymentName: version.deploymentName,
      });
      const summaries = info?.versionSummaries ?? [];
      const mine = summaries.find((s) => s.deploymentVersion?.buildId === version.buildId);
      if (mine) {
        const current = info?.routingConfig?.currentDeploymentVersion;
        if (current?.buildId === version.buildId) return { promoted: false, why: 'already current' };
        if (mine.firstActivationTime) return { promoted: false, why: 'activated before' };
        const currentSummary = current
          ? summaries.find((s) => s.deploymentVersion?.buildId === current.buildId)
          : undefined;
        if (currentSummary && millis(currentSummary.createTime) > millis(mine.createTime)) {
          return { promoted: false, why: 'a newer version is current' };
        }
        await service.setWorkerDeploymentCurrentVersion({
          namespace,
          deploymentName: version.deploymentName,
          buildId: version.buildId,
          conflictToken,
          identity: opts.identity,
        });
        return { promoted: true };
      }
    } catch (err) {
      const code = grpcCode(err);
      // Not registered yet, a concurrent change (stale conflict token), or the version not yet
      // polling on every task queue of the current one: look again until the deadline.
      if (code !== NOT_FOUND && code !== FAILED_PRECONDITION && code !== ABORTED) throw err;
      lastProblem = err instanceof Error ? err.message : String(err);
    }
    await new Promise((resolve) => setTimeout(resolve, pollMs));
  }
}
