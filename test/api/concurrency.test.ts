/** Concurrent duplicates over real HTTP: one order, no 5xx. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { uniq } from '../support/env.ts';
import { call, newTenant, startApi, tenantCounts, validOrder, type Res, type TestApi } from './support.ts';

describe('concurrent requests under one Idempotency-Key', () => {
  let api: TestApi;
  beforeAll(async () => {
    api = await startApi({ poolMax: 20 });
  });
  afterAll(async () => api?.close());

  it('50 identical POSTs at once: one order, one workflow; every response is the same 202 or a 409', async () => {
    const t = await newTenant(api.pool, 'c50');
    const idem = uniq('idem');
    const responses = await Promise.all(
      Array.from({ length: 50 }, () =>
        call(api, 'POST', '/v1/orders', { key: t.key, idem, body: validOrder() }),
      ),
    );
    const statuses = responses.map((r) => r.status);
    expect(statuses.filter((s) => s >= 500)).toEqual([]);
    expect(statuses.every((s) => s === 202 || s === 409)).toBe(true);
    const accepted = responses.filter((r) => r.status === 202);
    expect(accepted.length).toBeGreaterThanOrEqual(1);
    expect(new Set(accepted.map((r) => r.text)).size).toBe(1);
    expect(accepted.filter((r) => r.headers.get('idempotent-replayed') === null)).toHaveLength(1);
    for (const r of responses.filter((x) => x.status === 409)) {
      expect(Number(r.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    }
    expect(await tenantCounts(api.pool, t.tenantId)).toEqual({ orders: 1, operations: 1, outbox: 1 });

    const { workflowId } = accepted[0]!.body as { workflowId: string };
    await expect
      .poll(
        async () =>
          (
            await api.pool.query('select started_at from workflow_outbox where workflow_id = $1', [
              workflowId,
            ])
          ).rows[0]?.started_at,
        { timeout: 10_000 },
      )
      .toBeTruthy();
    expect((await api.client.workflow.getHandle(workflowId).describe()).type).toBe('orderWorkflow');
    // Exactly one run under the deterministic workflow ID.
    await expect
      .poll(async () => {
        let n = 0;
        for await (const _ of api.client.workflow.list({ query: `WorkflowId = '${workflowId}'` })) n++;
        return n;
      })
      .toBe(1);
  });

  it('25 POSTs with body A and 25 with body B under one key: one order; losers get 409 or 422', async () => {
    const t = await newTenant(api.pool, 'c25');
    const idem = uniq('idem');
    const bodyA = validOrder();
    const bodyB = { ...validOrder(), items: [{ sku: 'SKU-B', quantity: 1, unitAmount: 999 }] };
    const sends: Promise<Res & { which: 'A' | 'B' }>[] = [];
    for (let i = 0; i < 25; i++) {
      sends.push(
        call(api, 'POST', '/v1/orders', { key: t.key, idem, body: bodyA }).then((r) => ({
          ...r,
          which: 'A',
        })),
      );
      sends.push(
        call(api, 'POST', '/v1/orders', { key: t.key, idem, body: bodyB }).then((r) => ({
          ...r,
          which: 'B',
        })),
      );
    }
    const responses = await Promise.all(sends);
    expect(responses.filter((r) => r.status >= 500)).toEqual([]);
    const accepted = responses.filter((r) => r.status === 202);
    expect(accepted.length).toBeGreaterThanOrEqual(1);
    const winner = accepted[0]!.which;
    // Every 202 is for the winning body, with the same order.
    expect(accepted.every((r) => r.which === winner && r.text === accepted[0]!.text)).toBe(true);
    for (const r of responses.filter((x) => x.which !== winner)) expect([409, 422]).toContain(r.status);
    for (const r of responses.filter((x) => x.which === winner)) expect([202, 409]).toContain(r.status);
    expect(responses.filter((r) => r.status === 422).length).toBeGreaterThan(0);
    expect(await tenantCounts(api.pool, t.tenantId)).toEqual({ orders: 1, operations: 1, outbox: 1 });
    const { rows } = await api.pool.query('select amount from orders where tenant_id = $1', [t.tenantId]);
    expect(rows[0].amount).toBe(winner === 'A' ? '3000' : '999');
  });
});
