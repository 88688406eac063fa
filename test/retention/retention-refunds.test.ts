/**
 * Retention covers refunds (issue 27): a refund's ledger records (the
 * client's key `http.create_refund`, the provider refund, the refund receipt,
 * the status steps) are ordinary operations, so the reaper deletes them once
 * they are final and older than the window, and never touches one that is
 * still `unknown`. The `refunds` row, like the `orders` row, is the business
 * record and is never reaped. A real refund is made through the API, its
 * outbox, a worker and the sandbox provider.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Scope } from 'onceflow';
import { REFUND_OPERATION_TYPES, refundStepKeys, refundWorkflowId } from '../../src/refunds/contract.ts';
import { call, newTenant, startApi, type TestApi } from '../api/support.ts';
import { uniq } from '../support/env.ts';
import { until } from '../support/wait.ts';
import { startOrderStack, type OrderStack } from '../support/stack.ts';

/** Far enough in the past that no other record of this database is as old. */
const ANCIENT = '2001-01-01T00:00:00Z';

let stack: OrderStack;
let api: TestApi;
let tenant: { tenantId: string; key: string };

beforeAll(async () => {
  stack = await startOrderStack();
  api = await startApi({ env: { TEMPORAL_TASK_QUEUE: stack.taskQueue } });
  tenant = await newTenant(api.pool, 'retention');
});
afterAll(async () => {
  await api?.close();
  await stack?.close();
});

/** The tenant's operations under a key prefix, as (type, state). */
async function operations(tenantId: string, keyPrefix: string, idem?: string) {
  const { rows } = await stack.pool.query<{ operation_type: string; key: string; state: string }>(
    `select operation_type, key, state from operations
      where tenant_id = $1 and (starts_with(key, $2) or key = $3) order by operation_type, key`,
    [tenantId, keyPrefix, idem ?? null],
  );
  return rows;
}

/** As if the records had completed (or been claimed) long ago. */
async function backdate(tenantId: string, keyPrefix: string, idem?: string): Promise<number> {
  const { rowCount } = await stack.pool.query(
    `update operations
        set created_at = $4, updated_at = $4,
            completed_at = case when completed_at is null then null else $4::timestamptz end
      where tenant_id = $1 and (starts_with(key, $2) or key = $3)`,
    [tenantId, keyPrefix, idem ?? null, ANCIENT],
  );
  return rowCount ?? 0;
}

describe('retention of refunds', () => {
  it("reaps a finished refund's records past the window, keeps its row, and spares an unknown provider refund", async () => {
    const orderId = `ord_${randomBytes(12).toString('hex')}`;
    const { handle } = await stack.startOrder({ tenantId: tenant.tenantId, orderId, amount: 2000 });
    expect((await handle.result()).status).toBe('completed');
    const idem = uniq('refund-idem');
    const created = await call(api, 'POST', `/v1/orders/${orderId}/refunds`, {
      key: tenant.key,
      idem,
      body: { amount: 500 },
    });
    expect(created.status).toBe(202);
    const refund = created.body as { id: string; workflowId: string };
    // The API's outbox relay starts the workflow after the 202: wait for it to exist first.
    const started = stack.client.workflow.getHandle(refund.workflowId);
    await until('the refund workflow to be started by the relay', async () =>
      started.describe().then(
        () => true,
        () => false,
      ),
    );
    await started.result();

    const finished = await operations(tenant.tenantId, `${refund.workflowId}/`, idem);
    expect(new Set(finished.map((o) => o.operation_type))).toEqual(
      new Set(Object.values(REFUND_OPERATION_TYPES)),
    );
    expect(finished.every((o) => o.state === 'succeeded')).toBe(true);

    // Another refund whose provider answer was lost: its record is unknown, however old.
    const lostWorkflow = refundWorkflowId(tenant.tenantId, `re_${randomBytes(12).toString('hex')}`);
    const lost: Scope = {
      tenantId: tenant.tenantId,
      operationType: REFUND_OPERATION_TYPES.providerRefund,
      key: refundStepKeys.refund(lostWorkflow),
    };
    await expect(
      stack.ledger.runExternal(
        lost,
        { schemaVersion: 1, value: { amount: 100 } },
        {
          perform: async () => {
            throw new Error('connection reset');
          },
          reconcile: async () => ({ state: 'not_found' }),
        },
      ),
    ).rejects.toMatchObject({ code: 'outcome_unknown' });

    expect(await backdate(tenant.tenantId, `${refund.workflowId}/`, idem)).toBe(finished.length);
    expect(await backdate(tenant.tenantId, `${lostWorkflow}/`)).toBe(1);
    const reaped = await stack.ledger.reap({ olderThanMs: 7 * 24 * 60 * 60 * 1000 });
    expect(reaped.deleted).toBeGreaterThanOrEqual(finished.length);

    expect(await operations(tenant.tenantId, `${refund.workflowId}/`, idem)).toEqual([]);
    expect(await stack.ledger.get(lost)).toMatchObject({ state: 'unknown' });
    // The business records stay: the refund and the order's refunded total.
    const view = await call(api, 'GET', `/v1/orders/${orderId}/refunds/${refund.id}`, { key: tenant.key });
    expect(view.body).toMatchObject({ status: 'succeeded', amount: 500 });
    const order = await call(api, 'GET', `/v1/orders/${orderId}`, { key: tenant.key });
    expect(order.body).toMatchObject({ refundedAmount: 500 });
  });
});
