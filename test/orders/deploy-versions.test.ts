/**
 * Deploying a workflow change while orders are in flight (issue 28, docs/UPGRADING.md): Worker
 * Versioning, every run Pinned to the Deployment Version it started on.
 *
 * Version A is the current workflow code. Version B is a release whose order workflow issues a
 * different command sequence, with no patch (fixtures/next-release-workflows.ts). Orders started
 * on A are held mid-flight (the receipt fails until they park and wait for an operator's
 * re-drive: a signal wait); then B is deployed beside A and becomes current. New orders run on
 * B; the held orders are re-driven and finish on A's workers; no workflow task fails anywhere.
 * The control: an A history replayed with B's code is a non-determinism error, so the held
 * orders finish only because nothing of theirs reached B.
 *
 * Runs on both backends: the dev server (`npx vitest run test/orders/deploy-versions.test.ts`)
 * and the Temporal server on Postgres (`npm run test:postgres -- test/orders/deploy-versions.test.ts`).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Worker } from '@temporalio/worker';
import proto, { type temporal } from '@temporalio/proto';
import type { WorkflowHandle } from '@temporalio/client';
import { startOrderStack, TEST_TIMING, type OrderStack } from '../support/stack.ts';
import { uniq, workflowBundlePath } from '../support/env.ts';
import { untilWorkflow } from '../support/wait.ts';
import { ensureWorkflowBundle } from '../../src/worker/bundle.ts';
import { promoteVersion, type DeploymentVersion } from '../../src/worker/deployment.ts';
import { redriveSignal } from '../../src/orders/contract.ts';

const NEXT_RELEASE = path.resolve(import.meta.dirname, 'fixtures/next-release-workflows.ts');
const { VERSIONING_BEHAVIOR_PINNED } = proto.temporal.api.enums.v1.VersioningBehavior;

let stack: OrderStack;
let bundleDir: string;
let nextReleaseBundle: string;
const stops: (() => Promise<void>)[] = [];

beforeAll(async () => {
  stack = await startOrderStack({ startWorker: false });
  bundleDir = fs.mkdtempSync(path.join(os.tmpdir(), 'onceflow-next-release-'));
  nextReleaseBundle = (
    await ensureWorkflowBundle({ workflowsPath: NEXT_RELEASE, interceptorModules: [], dir: bundleDir })
  ).path;
});
afterAll(async () => {
  for (const stop of stops.reverse()) await stop();
  await stack?.close();
  if (bundleDir) fs.rmSync(bundleDir, { recursive: true, force: true });
});

type History = temporal.api.history.v1.IHistory;

/** What a finished order's history says about where it ran. */
function whereItRan(history: History) {
  const events = history.events ?? [];
  return {
    workflowTaskBuildIds: [
      ...new Set(
        events.flatMap((e) => {
          const done = e.workflowTaskCompletedEventAttributes;
          return done ? [done.deploymentVersion?.buildId ?? '(unversioned)'] : [];
        }),
      ),
    ],
    activityWorkers: [
      ...new Set(
        events.flatMap((e) =>
          e.activityTaskStartedEventAttributes ? [e.activityTaskStartedEventAttributes.identity] : [],
        ),
      ),
    ],
    /** The charge, receipt and status writes: local activities, run inside the workflow tasks above. */
    localActivities: events.filter(
      (e) => e.markerRecordedEventAttributes?.markerName === 'core_local_activity',
    ).length,
    failedWorkflowTasks: events.filter((e) => e.workflowTaskFailedEventAttributes).length,
    timers: events.filter((e) => e.timerStartedEventAttributes).length,
  };
}

async function replayError(bundle: string, history: History, workflowId: string): Promise<unknown> {
  try {
    await Worker.runReplayHistory({ workflowBundle: { codePath: bundle } }, history, workflowId);
    return undefined;
  } catch (err) {
    return err;
  }
}

async function versioningOf(handle: WorkflowHandle) {
  const info = (await handle.describe()).raw.workflowExecutionInfo?.versioningInfo;
  return { behavior: info?.behavior, buildId: info?.deploymentVersion?.buildId };
}

it('orders held on version A finish on A while version B, a changed command sequence, takes the new ones', async () => {
  const deploymentName = uniq('onceflow-deploy');
  const A: DeploymentVersion = { deploymentName, buildId: 'release-a' };
  const B: DeploymentVersion = { deploymentName, buildId: 'release-b' };
  const service = stack.client.workflowService;
  const promote = (version: DeploymentVersion) =>
    promoteVersion(service, 'default', version, { identity: 'deploy-versions.test' });

  // --- Version A: today's workflow code, the deployment's first version, made current by its worker.
  const workerA = await stack.startVersionedWorker({
    deployment: A,
    workflowBundlePath: workflowBundlePath(),
    identity: 'worker-release-a',
  });
  stops.push(workerA.stop);
  expect(await promote(A)).toEqual({ promoted: true });

  // Held mid-flight on A: charged, then the receipt fails until the order parks and waits for a re-drive.
  await stack.fault('messages.create', 'fail_before', 1000);
  const held = [await stack.startOrder(), await stack.startOrder()];
  for (const order of held) {
    await untilWorkflow(order.handle, (s) => s.awaitingOperator, 'parked on the failing receipt');
    expect(await versioningOf(order.handle)).toEqual({
      behavior: VERSIONING_BEHAVIOR_PINNED,
      buildId: A.buildId,
    });
  }
  await stack.clearFaults();

  // --- Deploy B beside A. Its worker's promotion makes it current; A's workers keep running.
  const workerB = await stack.startVersionedWorker({
    deployment: B,
    workflowBundlePath: nextReleaseBundle,
    identity: 'worker-release-b',
  });
  stops.push(workerB.stop);
  expect(await promote(B)).toEqual({ promoted: true });
  // An A worker restarting now (as one of A's would, to finish its pinned orders) does not take it back.
  expect(await promote(A)).toEqual({ promoted: false, why: 'activated before' });
  expect(await promote(B)).toEqual({ promoted: false, why: 'already current' });

  // New orders start on B and run its new step.
  const fresh = [await stack.startOrder(), await stack.startOrder()];
  for (const order of fresh) {
    expect((await order.handle.result()).status).toBe('completed');
    expect(await versioningOf(order.handle)).toEqual({
      behavior: VERSIONING_BEHAVIOR_PINNED,
      buildId: B.buildId,
    });
  }

  // The held orders resume after B became current: each workflow task still on A. The steps are
  // local activities (no activity task to route), so they ran inside those workflow tasks.
  for (const order of held) {
    await order.handle.signal(redriveSignal, { actor: 'deploy-versions.test', reason: 'email is back' });
  }
  for (const order of held) expect((await order.handle.result()).status).toBe('completed');

  for (const order of held) {
    const where = whereItRan(await order.handle.fetchHistory());
    expect(where, order.workflowId).toEqual({
      workflowTaskBuildIds: [A.buildId],
      activityWorkers: [],
      localActivities: expect.any(Number),
      failedWorkflowTasks: 0,
      // The re-drive's task boundary (workflows/order.ts, waitForOperator), and the backoff
      // before each retry of the failing receipt (workflows/policies.ts, localRetryThreshold).
      timers: 1 + (TEST_TIMING.stepMaxAttempts! - 1),
    });
    expect(where.localActivities, order.workflowId).toBeGreaterThan(0);
  }
  for (const order of fresh) {
    const where = whereItRan(await order.handle.fetchHistory());
    expect(where, order.workflowId).toEqual({
      workflowTaskBuildIds: [B.buildId],
      activityWorkers: [],
      localActivities: expect.any(Number),
      failedWorkflowTasks: 0,
      // B's new step.
      timers: 1,
    });
    expect(where.localActivities, order.workflowId).toBeGreaterThan(0);
  }
  // Each order charged once and sent one receipt, old and new.
  for (const order of [...held, ...fresh]) {
    expect(await stack.charges(order.input.orderId), order.workflowId).toHaveLength(1);
    expect(await stack.messages(order.input.orderId), order.workflowId).toHaveLength(1);
  }

  // The control: B's code cannot replay what A recorded (and replays its own), so the held
  // orders finished only because none of their tasks went to B.
  const heldHistory = await held[0]!.handle.fetchHistory();
  expect(await replayError(workflowBundlePath(), heldHistory, held[0]!.workflowId)).toBeUndefined();
  const onB = await replayError(nextReleaseBundle, heldHistory, held[0]!.workflowId);
  expect((onB as Error | undefined)?.name).toBe('DeterminismViolationError');
  expect(
    await replayError(nextReleaseBundle, await fresh[0]!.handle.fetchHistory(), fresh[0]!.workflowId),
  ).toBeUndefined();
}, 240_000);

it('an order started by an unversioned worker (the release before this one) finishes on the first versioned release', async () => {
  // The release before Worker Versioning ran unversioned workers; their open runs must move to the
  // first version made current (docs/UPGRADING.md, "Upgrading from a release without versioning").
  const before = await startOrderStack();
  try {
    await before.fault('messages.create', 'fail_before', 1000);
    const order = await before.startOrder();
    await untilWorkflow(order.handle, (s) => s.awaitingOperator, 'parked on the failing receipt');
    await before.clearFaults();
    expect(await versioningOf(order.handle)).toEqual({ behavior: undefined, buildId: undefined });
    await before.stopWorker();

    const first: DeploymentVersion = { deploymentName: uniq('onceflow-upgrade'), buildId: 'first-versioned' };
    const worker = await before.startVersionedWorker({
      deployment: first,
      workflowBundlePath: workflowBundlePath(),
      identity: 'worker-first-versioned',
    });
    try {
      expect(
        await promoteVersion(before.client.workflowService, 'default', first, {
          identity: 'deploy-versions.test',
        }),
      ).toEqual({ promoted: true });
      await order.handle.signal(redriveSignal, { actor: 'deploy-versions.test', reason: 'email is back' });
      expect((await order.handle.result()).status).toBe('completed');
      const where = whereItRan(await order.handle.fetchHistory());
      expect(where.workflowTaskBuildIds).toEqual(['(unversioned)', first.buildId]);
      expect(where.failedWorkflowTasks).toBe(0);
      expect(await before.charges(order.input.orderId)).toHaveLength(1);
      expect(await before.messages(order.input.orderId)).toHaveLength(1);
    } finally {
      await worker.stop();
    }
  } finally {
    await before.close();
  }
}, 180_000);
