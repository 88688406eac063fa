/**
 * Orders that need a human: they park, wait for a re-drive, and resume under
 * their original keys without charging twice.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startOrderStack, TEST_PROVIDER_TIMEOUT_MS, type OrderStack } from '../support/stack.ts';
import { json, runOps } from '../operator/support.ts';
import { redriveSignal } from '../../src/orders/contract.ts';
import { until, untilStatus, untilWorkflow } from '../support/wait.ts';
import { uniq } from '../support/env.ts';
import { orderWorkflowId, stepKeys, type OrderStatus } from '../../src/orders/model.ts';
import { listParkedWorkflows } from '../../src/orders/attention.ts';
import { createMetrics } from '../../src/metrics/index.ts';
import { countUnrecordedParked } from '../../src/orders/sql.ts';
import { Operator, type AttentionItem } from '../../src/operator/index.ts';
import { isOpsError } from '../../src/operator/errors.ts';
import { testOperator } from '../operator/support.ts';

let stack: OrderStack;
let operator: Operator;

beforeAll(async () => {
  stack = await startOrderStack();
  operator = testOperator({
    pool: stack.pool,
    ledger: stack.ledger,
    temporal: stack.client,
    providerUrl: stack.sandbox.url,
    providerTimeoutMs: TEST_PROVIDER_TIMEOUT_MS,
    temporalUiUrl: 'http://temporal-ui.test',
  });
});
afterAll(async () => {
  await stack?.close();
});

it('a status write that cannot succeed parks the workflow; a re-drive resumes it', async () => {
  // Hold the charge at the provider, and meanwhile remove the order row so writing `paid` fails for good.
  await stack.fault('charges.create', 'delay', 1, 1_500);
  const { input, workflowId, handle } = await stack.startOrder();
  await untilRowStatus(input, 'payment_pending');
  const { rows } = await stack.pool.query('delete from orders where tenant_id = $1 and id = $2 returning *', [
    input.tenantId,
    input.orderId,
  ]);
  expect(rows).toHaveLength(1);

  const parked = await untilWorkflow(handle, (s) => s.awaitingOperator, 'parked');
  expect(parked.lastError).toMatch(/status paid could not be recorded/);
  expect(parked.reason).toBe('status_write_failed');
  expect((await handle.describe()).searchAttributes.OrderStatus).toEqual(['needs_attention']);

  // Visibility is eventually consistent (the Temporal server on Postgres writes it
  // asynchronously): wait until a visibility query sees the parked order, as ops would.
  await until(`${workflowId} in the parked-workflow visibility query`, async () =>
    (await listParkedWorkflows(stack.client, { limit: 1000 })).some((p) => p.workflowId === workflowId),
  );
  // No row says needs_attention (there is no row at all), yet the order is listed and counted.
  const cli = json<AttentionItem[]>(
    await runOps(['attention', '--tenant', input.tenantId, '--json'], { sandboxUrl: stack.sandbox.url }),
  );
  expect(cli.find((i) => i.workflowId === workflowId)).toMatchObject({
    orderId: input.orderId,
    status: 'needs_attention',
    reason: 'status_write_failed',
    source: 'workflow',
    lastError: expect.stringMatching(/status paid could not be recorded/),
  });
  await expectCountedAsNeedsAttention(workflowId);

  // Put the row back (as an operator would after fixing the cause) and re-drive.
  const row = rows[0] as Record<string, unknown>;
  await stack.pool.query(
    `insert into orders (tenant_id, id, workflow_id, status, amount, currency, customer_id, customer_email, items, payment_method)
     values ($1, $2, $3, 'payment_pending', $4, $5, $6, $7, $8, $9)`,
    [
      row.tenant_id,
      row.id,
      row.workflow_id,
      row.amount,
      row.currency,
      row.customer_id,
      row.customer_email,
      JSON.stringify(row.items),
      row.payment_method,
    ],
  );
  await handle.signal(redriveSignal, { actor: 'test', reason: 'order row restored' });
  expect((await handle.result()).status).toBe('completed');
  expect((await stack.orderRow(input)).status).toBe('completed');
  expect(await stack.charges(input.orderId)).toHaveLength(1);
  expect(await stack.messages(input.orderId)).toHaveLength(1);
});

it('a status write that fails for good records needs_attention with reason status_write_failed', async () => {
  // The row exists, but the paid write fails for good: a fingerprint conflict planted
  // under its key stands in for any write that keeps failing.
  await stack.fault('charges.create', 'delay', 1, 1_500);
  const { input, workflowId, handle } = await stack.startOrder();
  await untilRowStatus(input, 'payment_pending');
  await stack.ledger.runLocal(
    { tenantId: input.tenantId, operationType: 'order.status', key: stepKeys.status(workflowId, 'paid') },
    { schemaVersion: 1, value: { planted: true } },
    async () => ({ planted: true }),
  );
  await untilWorkflow(handle, (s) => s.awaitingOperator, 'parked');
  // The one extra attempt recorded it on the row, with the reason.
  expect(await stack.orderRow(input)).toMatchObject({
    status: 'needs_attention',
    reason: 'status_write_failed',
  });
  const listed = await operator.listAttention({ tenantId: input.tenantId });
  expect(listed.find((i) => i.workflowId === workflowId)).toMatchObject({
    status: 'needs_attention',
    reason: 'status_write_failed',
  });
  await handle.terminate('test over');
});

/** A record with another fingerprint under an order's status key: every write under it fails for good. */
async function plantStatusConflict(workflowId: string, status: OrderStatus): Promise<void> {
  await stack.ledger.runLocal(
    { tenantId: 'acme', operationType: 'order.status', key: stepKeys.status(workflowId, status) },
    { schemaVersion: 1, value: { planted: true } },
    async () => ({ planted: true }),
  );
}

/** An order whose `status` write fails for good, run until it parks on it. */
async function parkedOnStatus(status: OrderStatus) {
  const orderId = uniq('ord');
  const workflowId = orderWorkflowId('acme', orderId);
  await plantStatusConflict(workflowId, status);
  const { input, handle } = await stack.startOrder({ orderId });
  const parked = await untilWorkflow(handle, (s) => s.awaitingOperator, 'parked');
  expect(parked).toMatchObject({ status: 'needs_attention', reason: 'status_write_failed' });
  expect(parked.lastError).toContain(`status ${status} could not be recorded`);
  return { input, workflowId, handle, parked };
}

it('a payment_pending the charge cannot write parks the order before anything is charged', async () => {
  // The charge's activity writes payment_pending first; when it cannot, the
  // workflow writes it as its own step, which parks the order, and the charge is never made.
  const { input, workflowId, handle } = await parkedOnStatus('payment_pending');
  expect(await stack.charges(input.orderId)).toHaveLength(0);
  expect(
    await stack.ledger.get({
      tenantId: 'acme',
      operationType: 'payment.charge',
      key: stepKeys.charge(workflowId),
    }),
  ).toBeNull();
  await handle.terminate('test over');
});

it('a completed the receipt cannot write parks the order, charged once and its receipt sent once', async () => {
  // The receipt's activity writes completed after the send; when it cannot, the workflow runs
  // paid, the receipt and completed as their own steps: paid and the receipt replay under their
  // keys, and completed parks the order.
  const { input, handle, parked } = await parkedOnStatus('completed');
  expect(parked.receiptId).toBeTruthy();
  expect(await stack.charges(input.orderId)).toHaveLength(1);
  expect(await stack.messages(input.orderId)).toHaveLength(1);
  expect(await stack.orderRow(input)).toMatchObject({
    status: 'needs_attention',
    reason: 'status_write_failed',
  });
  await handle.terminate('test over');
});

it('a re-drive while the order is not parked is refused and not audited, even if the row says needs_attention', async () => {
  await stack.fault('messages.create', 'fail_before', 1000);
  const { input, workflowId, handle } = await stack.startOrder();
  await untilWorkflow(handle, (s) => s.awaitingOperator, 'parked');
  expect(await stack.orderRow(input)).toMatchObject({ status: 'needs_attention', reason: 'receipt_failed' });
  await stack.clearFaults();
  // The re-driven receipt is slow: the order is busy (not parked) while its row still says needs_attention.
  await stack.fault('messages.create', 'delay', 1, 2_000);

  const first = await operator.redrive(input.tenantId, input.orderId, {
    actor: 'ann',
    reason: 'email is back',
  });
  expect(first.accepted).toMatchObject({ reason: 'receipt_failed', redrives: 1 });
  expect((await stack.orderRow(input)).status).toBe('needs_attention');
  let refused: unknown;
  try {
    await operator.redrive(input.tenantId, input.orderId, { actor: 'bob', reason: 'again' });
  } catch (err) {
    refused = err;
  }
  expect(isOpsError(refused) && refused.code).toBe('invalid_state');
  expect((refused as Error).message).toMatch(/not parked/);
  const audit = await stack.pool.query(
    `select actor from audit_log where workflow_id = $1 and action = 'redrive' order by id`,
    [workflowId],
  );
  expect(audit.rows).toEqual([{ actor: 'ann' }]);

  expect((await handle.result()).status).toBe('completed');
  expect(await stack.messages(input.orderId)).toHaveLength(1);
  await stack.clearFaults();
});

/**
 * Waits on the order row, not the status query: the charge runs as a local activity, and a
 * query is answered only between workflow tasks, so it would see the order after the charge.
 */
async function untilRowStatus(input: Parameters<OrderStack['orderRow']>[0], status: string): Promise<void> {
  await until(
    `order row ${input.orderId} at ${status}`,
    async () => (await stack.orderRow(input))?.status === status,
  );
}

/**
 * The needs_attention gauge, as the API exports it (orders table + parked workflows
 * from Temporal visibility), counts this workflow although no row says needs_attention.
 */
async function expectCountedAsNeedsAttention(workflowId: string): Promise<void> {
  const read = async (withVisibility: boolean) => {
    const metrics = createMetrics({
      pool: stack.pool,
      defaultMetrics: false,
      ...(withVisibility
        ? {
            parkedWorkflowIds: async () =>
              (await listParkedWorkflows(stack.client, { limit: 1000 })).map((p) => p.workflowId),
          }
        : {}),
    });
    const gauge = metrics.registry.getSingleMetric('onceflow_orders_in_status');
    const { values } = await gauge!.get();
    return values.find((v) => v.labels.status === 'needs_attention')!.value;
  };
  expect(await countUnrecordedParked(stack.pool, [workflowId])).toBe(1);
  const parked = await listParkedWorkflows(stack.client, { limit: 1000 });
  expect(parked.map((p) => p.workflowId)).toContain(workflowId);
  const [rowsOnly, withParked] = [await read(false), await read(true)];
  expect(withParked).toBeGreaterThanOrEqual(rowsOnly + 1);
}

it('a re-drive after the charge record is gone asks the provider instead of charging again', async () => {
  // A provider that forgets idempotency keys at once: re-sending the charge would charge again.
  const forgetful = await startOrderStack({ sandboxKeyRetentionMs: 1 });
  try {
    await parkedChargeIsLookedUpNotRepeated(forgetful);
  } finally {
    await forgetful.close();
  }
});

async function parkedChargeIsLookedUpNotRepeated(stack: OrderStack): Promise<void> {
  // The response is lost and the provider can't be asked: the order parks with an unknown charge.
  await stack.fault('charges.create', 'drop_after', 100);
  await stack.fault('charges.lookup', 'fail_before', 1000);
  const { input, workflowId, handle } = await stack.startOrder();
  try {
    await untilStatus(handle, 'needs_attention');
  } finally {
    await stack.clearFaults();
  }
  expect(await stack.charges(input.orderId)).toHaveLength(1);

  // Much later the record has been deleted (as if reaped), and the provider no longer
  // deduplicates the key: only a lookup can prevent a second charge.
  const scope = {
    tenantId: input.tenantId,
    operationType: 'payment.charge',
    key: stepKeys.charge(workflowId),
  };
  const deleted = await stack.pool.query(
    'delete from operations where tenant_id = $1 and operation_type = $2 and key = $3',
    [scope.tenantId, scope.operationType, scope.key],
  );
  expect(deleted.rowCount).toBe(1);
  await handle.signal(redriveSignal, { actor: 'test', reason: 'provider reachable again' });

  const result = await handle.result();
  expect(result.status).toBe('completed');
  const charges = await stack.charges(input.orderId);
  expect(charges).toHaveLength(1);
  expect(result.chargeId).toBe(charges[0]!.id);
  expect(await stack.messages(input.orderId)).toHaveLength(1);
}
