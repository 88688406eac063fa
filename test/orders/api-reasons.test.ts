/**
 * Through the HTTP API end to end (API + outbox relay + worker on one task
 * queue): an order that ends rejected says why in GET /v1/orders/{id}, with a
 * machine-readable reason and a fixed, safe message (never the raw error,
 * which stays on the row for operators), and the workflow
 * no longer repeats the `accepted` write the API made with the order row.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { call, newTenant, startApi, validOrder, type TestApi } from '../api/support.ts';
import { startOrderStack, type OrderStack } from '../support/stack.ts';
import { uniq } from '../support/env.ts';
import { ORDER_REASON_MESSAGES } from '../../src/orders/model.ts';

let stack: OrderStack;
let api: TestApi;
let key: string;

beforeAll(async () => {
  stack = await startOrderStack();
  api = await startApi({ env: { TEMPORAL_TASK_QUEUE: stack.taskQueue } });
  ({ key } = await newTenant(api.pool, 'reasons'));
});
afterAll(async () => {
  await api?.close();
  await stack?.close();
});

interface OrderBody {
  id: string;
  status: string;
  workflowId: string;
  reason: string | null;
  message: string | null;
  steps: { name: string }[];
}

async function placeAndWait(paymentMethod: string): Promise<OrderBody & { raw: string }> {
  const created = await call(api, 'POST', '/v1/orders', {
    key,
    idem: uniq('idem'),
    body: { ...validOrder(), paymentMethod },
  });
  expect(created.status).toBe(202);
  const { id } = created.body as OrderBody;
  for (;;) {
    const res = await call(api, 'GET', `/v1/orders/${id}?wait=30`, { key });
    expect(res.status).toBe(200);
    const order = res.body as OrderBody;
    if (['completed', 'rejected', 'needs_attention'].includes(order.status))
      return { ...order, raw: res.text };
  }
}

it('a declined card ends rejected with its decline code as the reason and the safe message', async () => {
  const order = await placeAndWait('pm_card_chargeDeclined');
  expect(order.status).toBe('rejected');
  expect(order.reason).toMatch(/^decline_code:[a-z_]+$/);
  expect(order.message).toBe(ORDER_REASON_MESSAGES.decline_code);
  expect(order).not.toHaveProperty('lastError');
  // The raw error (kept on the row for operators) is not in the tenant's answer.
  const { rows } = await api.pool.query<{ last_error: string }>(
    'select last_error from orders where id = $1',
    [order.id],
  );
  expect(rows[0]?.last_error).toMatch(/declined/);
  expect(order.raw).not.toContain(rows[0]!.last_error);
});

it('a charge request the provider refuses ends rejected with reason provider_rejected', async () => {
  const order = await placeAndWait('pm_card_unknown_token');
  expect(order.status).toBe('rejected');
  expect(order.reason).toBe('provider_rejected');
  expect(order.message).toBe(ORDER_REASON_MESSAGES.provider_rejected);
  expect(order.raw).not.toMatch(/HTTP 400/);
});

it('a completed order has no reason, and its steps start at payment_pending (accepted was written by the API)', async () => {
  const order = await placeAndWait('pm_card_visa');
  expect(order.status).toBe('completed');
  expect(order.reason).toBeNull();
  expect(order.message).toBeNull();
  const names = order.steps.map((s) => s.name).sort();
  expect(names).toEqual(['charge', 'receipt', 'status/completed', 'status/paid', 'status/payment_pending']);
});
