/**
 * Orders that need a human: they park, wait for a re-drive, and resume under
 * their original keys without charging twice.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startOrderStack, type OrderStack } from '../support/stack.ts';
import { redriveSignal, statusQuery, type OrderState } from '../../workflows/definitions.ts';
import { stepKeys } from '../../src/orders/model.ts';

let stack: OrderStack;

beforeAll(async () => {
  stack = await startOrderStack();
});
afterAll(async () => {
  await stack?.close();
});

async function waitFor(
  workflowId: string,
  done: (s: OrderState) => boolean,
  what: string,
  timeoutMs = 60_000,
): Promise<OrderState> {
  const handle = stack.client.workflow.getHandle(workflowId);
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const state = await handle.query(statusQuery);
    if (done(state)) return state;
    if (Date.now() > deadline)
      throw new Error(`${workflowId}: ${what} never happened (${JSON.stringify(state)})`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

it('a status write that cannot succeed parks the workflow; a re-drive resumes it', async () => {
  // Hold the charge at the provider, and meanwhile remove the order row so writing `paid` fails for good.
  await stack.fault('charges.create', 'delay', 1, 1_500);
  const { input, workflowId, handle } = await stack.startOrder();
  await waitFor(workflowId, (s) => s.status === 'payment_pending', 'payment_pending');
  const { rows } = await stack.pool.query('delete from orders where tenant_id = $1 and id = $2 returning *', [
    input.tenantId,
    input.orderId,
  ]);
  expect(rows).toHaveLength(1);

  const parked = await waitFor(workflowId, (s) => s.awaitingOperator, 'parking');
  expect(parked.lastError).toMatch(/status paid could not be recorded/);
  expect((await handle.describe()).searchAttributes.OrderStatus).toEqual(['needs_attention']);

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
    await waitFor(workflowId, (s) => s.status === 'needs_attention', 'needs_attention');
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
