/**
 * A refund started the way the API starts one, but with the test timeouts: its
 * amount reserved on the order and its row in `pending` in one transaction
 * (src/refunds/sql.ts), then its workflow. The API's own path (the outbox
 * relay) starts refund workflows with the declared defaults, which are far
 * too slow for fault tests.
 */
import { randomBytes } from 'node:crypto';
import { expect } from 'vitest';
import type { WorkflowHandle } from '@temporalio/client';
import { withTransaction } from '../../src/db/index.ts';
import type { Scope } from 'onceflow';
import {
  REFUND_OPERATION_TYPES,
  REFUND_WORKFLOW_TYPE,
  refundStepKeys,
  refundWorkflowId,
  type RefundWorkflowInput,
} from '../../src/refunds/contract.ts';
import { insertPendingRefund, reserveRefund } from '../../src/refunds/sql.ts';
import type { OrderWorkflowInput } from '../../src/orders/model.ts';
import type { OrderTiming } from '../../workflows/policies.ts';
import type { refundWorkflow } from '../../workflows/refund.ts';
import { TEST_TIMING, type OrderStack } from './stack.ts';

export async function startRefund(
  stack: Pick<OrderStack, 'pool' | 'client' | 'taskQueue'>,
  order: { input: OrderWorkflowInput; chargeId: string },
  amount: number,
  timing: Partial<OrderTiming> = TEST_TIMING,
): Promise<{
  refundId: string;
  workflowId: string;
  scope: Scope;
  handle: WorkflowHandle<typeof refundWorkflow>;
}> {
  const { tenantId, orderId } = order.input;
  // The API's shape (its refund routes' path parameter is [A-Za-z0-9_]).
  const refundId = `re_${randomBytes(12).toString('hex')}`;
  const workflowId = refundWorkflowId(tenantId, refundId);
  await withTransaction(stack.pool, async (c) => {
    const reserved = await reserveRefund(c, { tenantId, orderId, amount });
    expect(reserved.refused).toBeUndefined();
    await insertPendingRefund(c, {
      tenantId,
      refundId,
      orderId,
      workflowId,
      amount,
      currency: order.input.currency,
      reason: null,
    });
  });
  const input: RefundWorkflowInput = {
    tenantId,
    refundId,
    orderId,
    amount,
    currency: order.input.currency,
    chargeId: order.chargeId,
    customerEmail: order.input.customer.email,
    reason: null,
  };
  const handle = await stack.client.workflow.start<typeof refundWorkflow>(REFUND_WORKFLOW_TYPE, {
    taskQueue: stack.taskQueue,
    workflowId,
    args: [{ ...input, timing }],
  });
  const scope = {
    tenantId,
    operationType: REFUND_OPERATION_TYPES.providerRefund,
    key: refundStepKeys.refund(workflowId),
  };
  return { refundId, workflowId, scope, handle };
}
