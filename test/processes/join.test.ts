/**
 * `npm start -- --join` (dev/start.ts): the next release's workers beside a stack that is already
 * running (docs/UPGRADING.md, "Two versions side by side with npm start"). Version A polls the
 * task queue and is current; `--join` starts two worker processes of build B against the same
 * Temporal and Postgres. B's workers make B current (a new build), the self-check's smoke
 * workflow runs on B, a new order runs on B, and SIGTERM stops only the joined workers: A, still
 * polling, takes new orders again once an operator rolls back to it.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { freePortRange } from '../../src/process/ports.ts';
import { startOrderStack, type OrderStack } from '../support/stack.ts';
import { temporalAddress, testDatabaseUrl, workflowBundlePath } from '../support/env.ts';
import { killAll, spawnEntry, waitOutput, type Proc } from '../support/processes.ts';
import { promoteVersion } from '../../src/worker/deployment.ts';

let stack: OrderStack;
let versionA: { stop(): Promise<void> } | undefined;
const procs: Proc[] = [];

beforeAll(async () => {
  stack = await startOrderStack({ startWorker: false });
});
afterAll(async () => {
  killAll(procs);
  await versionA?.stop();
  await stack?.close();
});

it('joins the running stack: B becomes current, takes new orders, and stops alone', async () => {
  // The running release: version A on the stack's task queue (the deployment is named after it).
  const A = { deploymentName: stack.taskQueue, buildId: 'join-a' };
  versionA = await stack.startVersionedWorker({
    deployment: A,
    workflowBundlePath: workflowBundlePath(),
    identity: 'worker-join-a',
  });
  expect(await promoteVersion(stack.client.workflowService, 'default', A, { identity: 'join.test' })).toEqual(
    { promoted: true },
  );

  // Worker 2's ports are 2 above worker 1's: a base with three free ports after it.
  const metricsBase = await freePortRange(4);
  const joined = spawnEntry(
    'join',
    'dev/start.ts',
    {
      DATABASE_URL: testDatabaseUrl(),
      TEMPORAL_ADDRESS: temporalAddress(),
      TEMPORAL_TASK_QUEUE: stack.taskQueue,
      SANDBOX_URL: stack.sandbox.url,
      ...stack.providerEnv,
      WORKFLOW_BUNDLE_PATH: workflowBundlePath(),
      WORKER_METRICS_PORT: String(metricsBase),
      WORKER_SDK_METRICS_PORT: String(metricsBase + 1),
      ONCEFLOW_WORKER_BUILD_ID: 'join-b',
      LOG_PRETTY: 'off',
    },
    ['--join', '--workers', '2'],
  );
  procs.push(joined);
  await waitOutput(joined, /self-check passed/, 180_000);
  await waitOutput(joined, /2 workers joined/);
  expect(joined.output()).toMatch(/database schema is up to date/);

  const { workerDeploymentInfo } = await stack.client.workflowService.describeWorkerDeployment({
    namespace: 'default',
    deploymentName: stack.taskQueue,
  });
  expect(workerDeploymentInfo?.routingConfig?.currentDeploymentVersion?.buildId, joined.output()).toBe(
    'join-b',
  );

  const order = await stack.startOrder();
  expect((await order.handle.result()).status).toBe('completed');
  const info = (await order.handle.describe()).raw.workflowExecutionInfo?.versioningInfo;
  expect(info?.deploymentVersion?.buildId).toBe('join-b');

  joined.child.kill('SIGTERM');
  expect(await joined.exited).toEqual({ code: 0, signal: null });
  // Rollback (docs/UPGRADING.md): A, whose worker kept running, is made current again and takes new orders.
  await stack.client.workflowService.setWorkerDeploymentCurrentVersion({
    namespace: 'default',
    deploymentName: stack.taskQueue,
    buildId: A.buildId,
    identity: 'join.test',
  });
  const after = await stack.startOrder();
  expect((await after.handle.result()).status).toBe('completed');
  expect(
    (await after.handle.describe()).raw.workflowExecutionInfo?.versioningInfo?.deploymentVersion?.buildId,
  ).toBe(A.buildId);
}, 300_000);
