/**
 * Refunds under the failures issue 27 names, on a worker that runs as its own
 * OS process (src/worker/main.ts, the real composition root) with the
 * stack's providers (the sandbox, or with PAYMENT_PROVIDER=stripe
 * EMAIL_PROVIDER=smtp the Stripe adapter and SMTP): a lost refund response,
 * a provider call slower than the activity's start-to-close timeout, and a
 * worker killed with SIGKILL while the refund is in flight. Each refund makes
 * exactly one provider refund (counted at /_sandbox/refunds), and the sum
 * refunded never exceeds the charge.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import readline from 'node:readline';
import path from 'node:path';
import { startOrderStack, TEST_TIMING, type OrderStack } from '../support/stack.ts';
import { testDatabaseUrl, temporalAddress, uniq, workflowBundlePath } from '../support/env.ts';
import { freePort } from '../../src/process/ports.ts';
import { withTransaction } from '../../src/db/index.ts';
import { reserveRefund } from '../../src/refunds/sql.ts';
import { until } from '../support/wait.ts';
import { startRefund } from '../support/refunds.ts';
import { entryArgv } from '../support/processes.ts';

const root = path.resolve(import.meta.dirname, '../..');
/** The worker's provider client gives up after this; the activity's start-to-close is TEST_TIMING's (4 s). */
const PROVIDER_TIMEOUT_MS = 8_000;
let stack: OrderStack;
const children: ChildProcess[] = [];
let worker: ChildProcess;

beforeAll(async () => {
  stack = await startOrderStack({ startWorker: false });
  worker = await spawnWorker();
}, 120_000);
afterAll(async () => {
  for (const child of children)
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  await stack?.close();
});

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
      WORKER_SDK_METRICS_PORT: String(await freePort()),
      LEDGER_LEASE_MS: '6000',
      PROVIDER_TIMEOUT_MS: String(PROVIDER_TIMEOUT_MS),
      LOG_LEVEL: 'info',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  const output: string[] = [];
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

type ProviderRefund = { id: string; amount: number; idempotency_key: string; status: string };

async function providerRefunds(orderId: string): Promise<ProviderRefund[]> {
  const res = await fetch(`${stack.sandbox.url}/_sandbox/refunds?order_id=${encodeURIComponent(orderId)}`);
  expect(res.status).toBe(200);
  return ((await res.json()) as { data: ProviderRefund[] }).data;
}

/** An order charged and completed by its own workflow (on the spawned worker). */
async function completedOrder(amount: number) {
  const { input, handle } = await stack.startOrder({ orderId: uniq('ord'), amount });
  expect((await handle.result()).status).toBe('completed');
  const row = await stack.orderRow(input);
  return { input, chargeId: row.charge_id! };
}

/** Every refund of the order made exactly once at the provider, and never more than the charge. */
async function expectOneProviderRefundEach(orderId: string, charged: number, refunds: number[]) {
  const made = await providerRefunds(orderId);
  expect(made.map((r) => r.amount).sort((a, b) => a - b)).toEqual([...refunds].sort((a, b) => a - b));
  expect(new Set(made.map((r) => r.idempotency_key)).size).toBe(refunds.length);
  const sum = made.reduce((s, r) => s + r.amount, 0);
  expect(sum).toBeLessThanOrEqual(charged);
  const { rows } = await stack.pool.query<{ refunded_amount: string; amount: string }>(
    'select refunded_amount, amount from orders where id = $1',
    [orderId],
  );
  expect(Number(rows[0]!.refunded_amount)).toBe(sum);
  expect(Number(rows[0]!.refunded_amount)).toBeLessThanOrEqual(Number(rows[0]!.amount));
}

it('a lost refund response: one provider refund, the refund succeeds', async () => {
  const order = await completedOrder(3000);
  await stack.fault('refunds.create', 'drop_after', 1);
  try {
    const { handle } = await startRefund(stack, order, 1200);
    expect((await handle.result()).status).toBe('succeeded');
    await expectOneProviderRefundEach(order.input.orderId, 3000, [1200]);
  } finally {
    await stack.clearFaults();
  }
});

it('a provider call slower than the activity timeout: the next attempt runs beside it, one provider refund', async () => {
  const order = await completedOrder(3000);
  // Past the activity's start-to-close (4 s) and inside the worker's provider timeout (8 s): Temporal
  // times the attempt out and retries while its call is still running at the provider.
  const delayMs = TEST_TIMING.activityStartToCloseMs! + 1_500;
  expect(delayMs).toBeLessThan(PROVIDER_TIMEOUT_MS);
  await stack.fault('refunds.create', 'delay', 1, delayMs);
  try {
    const { handle } = await startRefund(stack, order, 800);
    expect((await handle.result()).status).toBe('succeeded');
    await expectOneProviderRefundEach(order.input.orderId, 3000, [800]);
  } finally {
    await stack.clearFaults();
  }
});

it('a worker killed with SIGKILL during two refunds of one order: each made once, the sum within the charge', async () => {
  const order = await completedOrder(3000);
  // Hold both refund requests at the provider long enough to kill the worker mid-call.
  await stack.fault('refunds.create', 'delay', 2, 2_500);
  try {
    const a = await startRefund(stack, order, 1000);
    const b = await startRefund(stack, order, 2000);
    // A third that does not fit is refused where the limit lives, before any workflow exists.
    const over = await withTransaction(stack.pool, (c) =>
      reserveRefund(c, { tenantId: order.input.tenantId, orderId: order.input.orderId, amount: 1 }),
    );
    expect(over.refused).toBe('exceeds');

    await until(
      'both refunds to be claimed',
      async () => [await stack.ledger.get(a.scope), await stack.ledger.get(b.scope)],
      {
        done: (records) => records.every((r) => r?.state === 'in_progress'),
        timeoutMs: 60_000,
      },
    );
    worker.kill('SIGKILL');
    await new Promise((r) => worker.once('exit', r));
    expect(worker.signalCode).toBe('SIGKILL');

    worker = await spawnWorker();
    expect((await a.handle.result()).status).toBe('succeeded');
    expect((await b.handle.result()).status).toBe('succeeded');
    await expectOneProviderRefundEach(order.input.orderId, 3000, [1000, 2000]);
    // The killed attempts' claims were taken over, not silently re-executed.
    for (const { scope } of [a, b]) {
      const record = await stack.ledger.get(scope);
      expect(record?.state).toBe('succeeded');
      expect(record?.attempts).toBeGreaterThanOrEqual(2);
    }
  } finally {
    await stack.clearFaults();
  }
});
