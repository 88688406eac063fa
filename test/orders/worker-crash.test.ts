/**
 * The worker runs as a separate OS process and is killed with SIGKILL while
 * the charge is in flight. A new worker process picks the order up; the
 * ledger's lease and reconciliation make sure the card is charged once.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import readline from 'node:readline';
import path from 'node:path';
import { startOrderStack, TEST_TIMING, type OrderStack } from '../support/stack.ts';
import { testDatabaseUrl, temporalAddress, workflowBundlePath } from '../support/env.ts';
import { freePort } from '../../src/process/ports.ts';
import { stepKeys } from '../../src/orders/model.ts';
import { until } from '../support/wait.ts';
import { entryArgv } from '../support/processes.ts';

const root = path.resolve(import.meta.dirname, '../..');
let stack: OrderStack;
const children: ChildProcess[] = [];

beforeAll(async () => {
  stack = await startOrderStack({ startWorker: false });
});
afterAll(async () => {
  for (const child of children)
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  await stack?.close();
});

const outputs = new Map<ChildProcess, string[]>();

async function spawnWorker(): Promise<ChildProcess> {
  const child = spawn(process.execPath, entryArgv('src/worker/main.ts'), {
    cwd: root,
    env: {
      ...process.env,
      DATABASE_URL: testDatabaseUrl(),
      TEMPORAL_ADDRESS: temporalAddress(),
      TEMPORAL_TASK_QUEUE: stack.taskQueue,
      SANDBOX_URL: stack.sandbox.url,
      ...stack.providerEnv,
      WORKFLOW_BUNDLE_PATH: workflowBundlePath(),
      WORKER_METRICS_PORT: String(await freePort()),
      // Its own free port: the default (metrics port + 1) may be taken by another process.
      WORKER_SDK_METRICS_PORT: String(await freePort()),
      LEDGER_LEASE_MS: '6000',
      PROVIDER_TIMEOUT_MS: '8000',
      LOG_LEVEL: 'info',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  const output: string[] = [];
  outputs.set(child, output);
  await new Promise<void>((resolve, reject) => {
    const onLine = (line: string) => {
      output.push(line);
      if (line.includes('worker started')) resolve();
    };
    readline.createInterface({ input: child.stdout! }).on('line', onLine);
    readline.createInterface({ input: child.stderr! }).on('line', onLine);
    child.once('exit', (code) =>
      reject(new Error(`worker exited (${code}) before starting:\n${output.join('\n')}`)),
    );
  });
  return child;
}

it('a worker killed with SIGKILL during the charge: the order completes with one charge', async () => {
  // Hold the charge request at the provider long enough to kill the worker mid-call.
  await stack.fault('charges.create', 'delay', 1, 2_500);
  const first = await spawnWorker();
  const { input, workflowId, handle } = await stack.startOrder({}, TEST_TIMING);
  const chargeScope = {
    tenantId: input.tenantId,
    operationType: 'payment.charge',
    key: stepKeys.charge(workflowId),
  };

  // Wait until the charge is claimed (the provider call is in flight), then kill the worker.
  await until('the charge to be claimed', () => stack.ledger.get(chargeScope), {
    done: (record) => record?.state === 'in_progress',
    timeoutMs: 60_000,
  });
  first.kill('SIGKILL');
  await new Promise((r) => first.once('exit', r));
  expect(first.signalCode).toBe('SIGKILL');

  const second = await spawnWorker();
  const result = await handle.result();
  expect(result.status).toBe('completed');

  const charges = await stack.charges(input.orderId);
  expect(charges).toHaveLength(1);
  expect(charges[0]?.status).toBe('succeeded');
  const record = await stack.ledger.get(chargeScope);
  expect(record?.state).toBe('succeeded');
  // The killed attempt's claim was taken over, not silently re-executed.
  expect(record?.attempts).toBeGreaterThanOrEqual(2);

  second.kill('SIGTERM');
  await new Promise((r) => second.once('exit', r));
  // Every line is JSON, the Temporal SDK's own lines too (they go through our logger).
  const lines = outputs.get(second)!.filter((l) => l.trim() !== '');
  expect(lines.filter((l) => !l.startsWith('{'))).toEqual([]);
  const sdkLines = lines
    .map((l) => JSON.parse(l) as Record<string, unknown>)
    .filter((l) => l.component === 'temporal-sdk');
  expect(sdkLines.length).toBeGreaterThan(0);
  expect(sdkLines[0]).toMatchObject({
    service: 'worker',
    level: expect.any(String),
    msg: expect.any(String),
  });
});
