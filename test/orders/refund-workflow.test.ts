/**
 * The refund workflow on the real stack (issue 27): the API (its outbox
 * starts the refund's workflow on this file's task queue), a worker, the
 * sandbox provider, real Postgres and Temporal. An order is charged by its
 * own workflow first; its refunds then go through POST /v1/orders/{id}/refunds.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REFUND_OPERATION_TYPES, refundStepKeys } from '../../src/refunds/contract.ts';
import { createOnceflowClient } from '@onceflow/client';
import { uniq } from '../support/env.ts';
import { startOrderStack, TEST_TIMING, type OrderStack } from '../support/stack.ts';
import { call, newTenant, startApi, type TestApi } from '../api/support.ts';

type RefundBody = {
  id: string;
  status: string;
  amount: number;
  workflowId: string;
  providerRefundId: string | null;
};
type SandboxRefund = {
  id: string;
  amount: number;
  idempotency_key: string;
  order_id: string | null;
  status: string;
};

describe('the refund workflow', () => {
  let stack: OrderStack;
  let api: TestApi;
  let tenant: { tenantId: string; key: string };

  beforeAll(async () => {
    stack = await startOrderStack();
    api = await startApi({ env: { TEMPORAL_TASK_QUEUE: stack.taskQueue } });
    tenant = await newTenant(api.pool, 'refunds');
  });
  afterAll(async () => {
    await api?.close();
    await stack?.close();
  });

  async function completedOrder(amount: number) {
    // An ID of the API's shape (the refund routes' path parameter is [A-Za-z0-9_]).
    const orderId = `ord_${randomBytes(12).toString('hex')}`;
    const { input, handle } = await stack.startOrder({ tenantId: tenant.tenantId, orderId, amount });
    expect((await handle.result()).status).toBe('completed');
    return input.orderId;
  }

  const sandboxRefunds = async (orderId: string): Promise<SandboxRefund[]> => {
    const res = await fetch(`${stack.sandbox.url}/_sandbox/refunds?order_id=${encodeURIComponent(orderId)}`);
    expect(res.status).toBe(200);
    return ((await res.json()) as { data: SandboxRefund[] }).data;
  };

  async function refund(orderId: string, amount: number) {
    const res = await call(api, 'POST', `/v1/orders/${orderId}/refunds`, {
      key: tenant.key,
      idem: uniq('ridem'),
      body: { amount },
    });
    return res;
  }

  /** Waits (long-poll) for the refund's terminal status, then for its workflow to end (the receipt). */
  async function settled(orderId: string, created: RefundBody): Promise<RefundBody> {
    const res = await call(api, 'GET', `/v1/orders/${orderId}/refunds/${created.id}?wait=30`, {
      key: tenant.key,
    });
    expect(res.status).toBe(200);
    // Terminal, so its workflow has started (it wrote the status): its end is the receipt's.
    expect(['succeeded', 'failed', 'needs_attention']).toContain((res.body as RefundBody).status);
    await stack.client.workflow.getHandle(created.workflowId).result();
    return res.body as RefundBody;
  }

  it('a refund completes: one provider refund under the step key, the outcome, a refund receipt', async () => {
    const orderId = await completedOrder(3000);
    const res = await refund(orderId, 1200);
    expect(res.status).toBe(202);
    const created = res.body as RefundBody;
    const done = await settled(orderId, created);
    expect(done).toMatchObject({ status: 'succeeded', amount: 1200 });
    expect(done.providerRefundId).toMatch(/^re_/);

    const provider = await sandboxRefunds(orderId);
    expect(provider).toHaveLength(1);
    expect(provider[0]).toMatchObject({ id: done.providerRefundId, amount: 1200, status: 'succeeded' });

    // Its steps' keys derive from the refund's workflow ID, and each is recorded once.
    const step = await stack.ledger.get({
      tenantId: tenant.tenantId,
      operationType: REFUND_OPERATION_TYPES.providerRefund,
      key: refundStepKeys.refund(created.workflowId),
    });
    expect(step).toMatchObject({ state: 'succeeded', providerRef: done.providerRefundId });
    const receipts = (await stack.messages(orderId)).filter((m) => String(m.subject).startsWith('Refund'));
    expect(receipts).toHaveLength(1);
    const order = await call(api, 'GET', `/v1/orders/${orderId}`, { key: tenant.key });
    expect(order.body).toMatchObject({ status: 'completed', refundedAmount: 1200 });
    // The UI's story: the tenant and the refund's status in visibility, a summary per step.
    const desc = await stack.client.workflow.getHandle(created.workflowId).describe();
    expect(desc.searchAttributes).toMatchObject({
      TenantId: [tenant.tenantId],
      OrderStatus: ['refund:succeeded'],
    });
  });

  it('the typed client: createRefund retries under one key, getRefund long-polls, listRefunds lists', async () => {
    const orderId = await completedOrder(2000);
    const client = createOnceflowClient({ baseUrl: api.url, apiKey: tenant.key });
    const first = await client.createRefund(orderId, { amount: 400, reason: 'requested_by_customer' });
    expect(first.replayed).toBe(false);
    const again = await client.createRefund(
      orderId,
      { amount: 400, reason: 'requested_by_customer' },
      {
        idempotencyKey: first.idempotencyKey,
      },
    );
    expect(again).toMatchObject({ replayed: true, refund: { id: first.refund.id } });
    let refund = await client.getRefund(orderId, first.refund.id, { waitSeconds: 30 });
    while (refund.status === 'pending')
      refund = await client.getRefund(orderId, refund.id, { waitSeconds: 30 });
    expect(refund.status).toBe('succeeded');
    expect((await client.listRefunds(orderId)).data.map((r) => r.id)).toEqual([first.refund.id]);
    await stack.client.workflow.getHandle(first.refund.workflowId).result();
  });

  it('a lost refund response: exactly one provider refund, and the refund succeeds', async () => {
    const orderId = await completedOrder(3000);
    await stack.fault('refunds.create', 'drop_after', 1);
    try {
      const created = (await refund(orderId, 1000)).body as RefundBody;
      const done = await settled(orderId, created);
      expect(done.status).toBe('succeeded');
      const provider = await sandboxRefunds(orderId);
      expect(provider).toHaveLength(1);
      expect(provider[0]!.id).toBe(done.providerRefundId);
    } finally {
      await stack.clearFaults();
    }
  });

  it('a provider call slower than the activity timeout: exactly one provider refund', async () => {
    const orderId = await completedOrder(3000);
    // Past both the provider client's timeout and the activity's start-to-close timeout.
    await stack.fault('refunds.create', 'delay', 1, TEST_TIMING.activityStartToCloseMs! + 1_000);
    try {
      const created = (await refund(orderId, 500)).body as RefundBody;
      const done = await settled(orderId, created);
      expect(done.status).toBe('succeeded');
      const provider = await sandboxRefunds(orderId);
      expect(provider).toHaveLength(1);
      expect(provider[0]!.id).toBe(done.providerRefundId);
    } finally {
      await stack.clearFaults();
    }
  });

  it('a lost lookup too: the refund is reconciled, never presumed failed, and made once', async () => {
    const orderId = await completedOrder(3000);
    await stack.fault('refunds.create', 'drop_after', 1);
    await stack.fault('refunds.lookup', 'fail_before', 1);
    try {
      const created = (await refund(orderId, 700)).body as RefundBody;
      const done = await settled(orderId, created);
      expect(done.status).toBe('succeeded');
      expect(await sandboxRefunds(orderId)).toHaveLength(1);
    } finally {
      await stack.clearFaults();
    }
  });

  it('many refunds of one order: the sum refunded never exceeds the charge; one provider refund per refund', async () => {
    const orderId = await completedOrder(1000);
    const responses = await Promise.all(Array.from({ length: 8 }, () => refund(orderId, 300)));
    const accepted = responses.filter((r) => r.status === 202).map((r) => r.body as RefundBody);
    expect(accepted).toHaveLength(3);
    expect(responses.filter((r) => r.status === 422)).toHaveLength(5);
    const done = await Promise.all(accepted.map((r) => settled(orderId, r)));
    expect(done.map((d) => d.status)).toEqual(['succeeded', 'succeeded', 'succeeded']);
    const provider = await sandboxRefunds(orderId);
    expect(provider).toHaveLength(3);
    expect(provider.reduce((s, r) => s + r.amount, 0)).toBe(900);
    expect(new Set(provider.map((r) => r.idempotency_key)).size).toBe(3);
    const order = await call(api, 'GET', `/v1/orders/${orderId}`, { key: tenant.key });
    expect(order.body).toMatchObject({ refundedAmount: 900 });
  });
});
