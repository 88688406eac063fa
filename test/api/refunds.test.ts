/**
 * POST /v1/orders/{id}/refunds, its lists and long-poll (issue 27), against
 * a real server, real Postgres and the real Temporal dev server (no worker
 * polls this file's task queue: the refund workflow's own run is covered by
 * test/worker/refund-workflow.test.ts). An order is made refundable here by
 * writing `completed` and a charge ID on its row, as its workflow would.
 */
import { Agent, request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REFUND_OPERATION_TYPES, type RefundStatus } from '../../src/refunds/contract.ts';
import { testOperator } from '../operator/support.ts';
import { refundTransitionStatement } from '../../src/refunds/sql.ts';
import { uniq } from '../support/env.ts';
import {
  PROBLEM,
  call,
  longPollWaiting,
  newTenant,
  startApi,
  tenantCounts,
  validOrder,
  type TestApi,
} from './support.ts';

type RefundBody = {
  id: string;
  object: string;
  orderId: string;
  amount: number;
  currency: string;
  status: string;
  reason: string | null;
  workflowId: string;
};

describe('refunds API', () => {
  let api: TestApi;
  let acme: { tenantId: string; key: string };
  let globex: { tenantId: string; key: string };

  beforeAll(async () => {
    api = await startApi({ localWaitMs: 300, poolMax: 40 });
    acme = await newTenant(api.pool, 'acme');
    globex = await newTenant(api.pool, 'globex');
  });
  afterAll(async () => api?.close());

  async function order(tenant: { key: string; tenantId: string }, amount: number, completed = true) {
    const res = await call(api, 'POST', '/v1/orders', {
      key: tenant.key,
      idem: uniq('idem'),
      body: { ...validOrder(), items: [{ sku: 'SKU-1', quantity: 1, unitAmount: amount }] },
    });
    expect(res.status).toBe(202);
    const id = (res.body as { id: string }).id;
    if (completed) {
      await api.pool.query(
        `update orders set status = 'completed', charge_id = $3 where tenant_id = $1 and id = $2`,
        [tenant.tenantId, id, `ch_${id}`],
      );
    }
    return id;
  }

  const refund = (tenant: { key: string }, orderId: string, body: unknown, idem = uniq('ridem')) =>
    call(api, 'POST', `/v1/orders/${orderId}/refunds`, { key: tenant.key, idem, body });

  const refundedAmount = async (tenantId: string, orderId: string) =>
    Number(
      (
        await api.pool.query('select refunded_amount from orders where tenant_id = $1 and id = $2', [
          tenantId,
          orderId,
        ])
      ).rows[0].refunded_amount,
    );

  /** The refund workflow's status step, as its activity runs it. */
  const transition = (tenantId: string, refundId: string, to: RefundStatus, key = uniq('k')) =>
    api.ledger.runLocalStatement(
      { tenantId, operationType: REFUND_OPERATION_TYPES.status, key },
      { schemaVersion: 1, value: { refundId, status: to } },
      refundTransitionStatement({
        tenantId,
        refundId,
        to,
        providerRefundId: null,
        lastError: null,
        stepKey: key,
        taskQueue: 'refunds-test',
      }),
    );

  it('202 with Location and the refund; the order shows refundedAmount; list and GET show it', async () => {
    const orderId = await order(acme, 5000);
    const res = await refund(acme, orderId, { amount: 1200, reason: 'requested_by_customer' });
    expect(res.status).toBe(202);
    const body = res.body as RefundBody;
    expect(body).toMatchObject({
      object: 'refund',
      orderId,
      amount: 1200,
      currency: 'usd',
      status: 'pending',
      reason: 'requested_by_customer',
      workflowId: `refund/${acme.tenantId}/${body.id}`,
    });
    expect(body.id).toMatch(/^re_[0-9a-f]{24}$/);
    expect(res.headers.get('location')).toBe(`/v1/orders/${orderId}/refunds/${body.id}`);

    const o = await call(api, 'GET', `/v1/orders/${orderId}`, { key: acme.key });
    expect(o.body).toMatchObject({ refundedAmount: 1200 });
    const list = await call(api, 'GET', `/v1/orders/${orderId}/refunds`, { key: acme.key });
    expect(list.status).toBe(200);
    expect(list.body).toEqual({ object: 'list', data: [body] });
    const one = await call(api, 'GET', `/v1/orders/${orderId}/refunds/${body.id}`, { key: acme.key });
    expect(one.body).toEqual(body);
    // Its workflow's start intent is in the outbox, like an order's.
    const { rows } = await api.pool.query(
      'select workflow_type from workflow_outbox where workflow_id = $1',
      [body.workflowId],
    );
    expect(rows).toEqual([{ workflow_type: 'refundWorkflow' }]);
  });

  it('the Idempotency-Key contract: replay, 422 on another body, nothing new written by a replay', async () => {
    const orderId = await order(acme, 5000);
    const idem = uniq('ridem');
    const first = await refund(acme, orderId, { amount: 700 }, idem);
    const otherOrder = await order(acme, 5000);
    const before = await tenantCounts(api.pool, acme.tenantId);
    const again = await refund(acme, orderId, { amount: 700 }, idem);
    expect(again.status).toBe(202);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body).toEqual(first.body);
    expect(again.headers.get('location')).toBe(first.headers.get('location'));
    const other = await refund(acme, orderId, { amount: 800 }, idem);
    expect(other.status).toBe(422);
    expect(other.body).toMatchObject({ type: `${PROBLEM}idempotency-key-reused` });
    // The same key on another order's refunds is another request too.
    expect((await refund(acme, otherOrder, { amount: 700 }, idem)).status).toBe(422);
    expect(await tenantCounts(api.pool, acme.tenantId)).toEqual(before);
    expect(await refundedAmount(acme.tenantId, orderId)).toBe(700);
  });

  it('two refunds of the same amount under different keys are two refunds', async () => {
    const orderId = await order(acme, 1000);
    const a = await refund(acme, orderId, { amount: 300 });
    const b = await refund(acme, orderId, { amount: 300 });
    expect([a.status, b.status]).toEqual([202, 202]);
    expect((a.body as RefundBody).id).not.toBe((b.body as RefundBody).id);
    expect(await refundedAmount(acme.tenantId, orderId)).toBe(600);
  });

  it('404 for an unknown order and for another tenant’s order; nothing stored under the key', async () => {
    const orderId = await order(acme, 1000);
    for (const [tenant, id] of [
      [acme, 'ord_000000000000000000000000'],
      [globex, orderId],
    ] as const) {
      const idem = uniq('ridem');
      const res = await refund(tenant, id, { amount: 100 }, idem);
      expect(res.status).toBe(404);
      expect(res.body).toMatchObject({ type: `${PROBLEM}not-found` });
      expect(
        await api.ledger.get({
          tenantId: tenant.tenantId,
          operationType: REFUND_OPERATION_TYPES.createRefund,
          key: idem,
        }),
      ).toBeNull();
    }
    expect((await call(api, 'GET', `/v1/orders/${orderId}/refunds`, { key: globex.key })).status).toBe(404);
    expect(await refundedAmount(acme.tenantId, orderId)).toBe(0);
  });

  it('409 order-not-refundable unless the order is completed; nothing stored', async () => {
    const orderId = await order(acme, 1000, false);
    const before = await tenantCounts(api.pool, acme.tenantId);
    const res = await refund(acme, orderId, { amount: 100 });
    expect(res.status).toBe(409);
    expect(res.body).toMatchObject({ type: `${PROBLEM}order-not-refundable`, orderStatus: 'accepted' });
    expect(res.headers.get('retry-after')).toBeNull();
    expect(await tenantCounts(api.pool, acme.tenantId)).toEqual(before);
  });

  it('422 refund-exceeds-charge past the charge; nothing stored, and the key runs again later', async () => {
    const orderId = await order(acme, 1000);
    const first = await refund(acme, orderId, { amount: 900 });
    expect(first.status).toBe(202);
    const before = await tenantCounts(api.pool, acme.tenantId);
    const idem = uniq('ridem');
    const over = await refund(acme, orderId, { amount: 101 }, idem);
    expect(over.status).toBe(422);
    expect(over.body).toMatchObject({
      type: `${PROBLEM}refund-exceeds-charge`,
      charged: 1000,
      refundedAmount: 900,
      refundable: 100,
    });
    expect(await tenantCounts(api.pool, acme.tenantId)).toEqual(before);

    // A failed refund releases its reservation (once), and the same request then fits.
    const firstId = (first.body as RefundBody).id;
    expect((await transition(acme.tenantId, firstId, 'failed'))?.result).toEqual({
      applied: true,
      status: 'failed',
      released: true,
    });
    expect(await refundedAmount(acme.tenantId, orderId)).toBe(0);
    expect((await transition(acme.tenantId, firstId, 'failed'))?.result).toMatchObject({ applied: false });
    expect((await transition(acme.tenantId, firstId, 'succeeded'))?.result).toMatchObject({
      applied: false,
      status: 'failed',
    });
    expect(await refundedAmount(acme.tenantId, orderId)).toBe(0);
    const retried = await refund(acme, orderId, { amount: 101 }, idem);
    expect(retried.status).toBe(202);
    expect(await refundedAmount(acme.tenantId, orderId)).toBe(101);
  });

  it('many concurrent refunds on separate connections: the ones that fit succeed, the sum never exceeds the charge', async () => {
    const orderId = await order(acme, 1000);
    const n = 30;
    const agents = Array.from({ length: n }, () => new Agent({ connections: 1 }));
    try {
      const responses = await Promise.all(
        agents.map(async (dispatcher) => {
          const res = await request(`${api.url}/v1/orders/${orderId}/refunds`, {
            method: 'POST',
            dispatcher,
            headers: {
              authorization: `Bearer ${acme.key}`,
              'idempotency-key': uniq('ridem'),
              'content-type': 'application/json',
            },
            body: JSON.stringify({ amount: 100 }),
          });
          return { status: res.statusCode, body: (await res.body.json()) as { type?: string } };
        }),
      );
      const statuses = responses.map((r) => r.status);
      expect(statuses.filter((s) => s === 202)).toHaveLength(10);
      expect(statuses.filter((s) => s === 422)).toHaveLength(20);
      for (const r of responses.filter((x) => x.status === 422))
        expect(r.body.type).toBe(`${PROBLEM}refund-exceeds-charge`);
    } finally {
      await Promise.all(agents.map((a) => a.close()));
    }
    expect(await refundedAmount(acme.tenantId, orderId)).toBe(1000);
    const { rows } = await api.pool.query<{ n: number; sum: string }>(
      'select count(*)::int as n, sum(amount)::text as sum from refunds where tenant_id = $1 and order_id = $2',
      [acme.tenantId, orderId],
    );
    expect(rows[0]).toEqual({ n: 10, sum: '1000' });
  });

  it('GET ?wait= returns when the refund reaches a terminal status', async () => {
    const orderId = await order(acme, 1000);
    const created = (await refund(acme, orderId, { amount: 250 })).body as RefundBody;
    const poll = longPollWaiting(created.id);
    try {
      const pending = call(api, 'GET', `/v1/orders/${orderId}/refunds/${created.id}?wait=20`, {
        key: acme.key,
      });
      await poll.waiting;
      await transition(acme.tenantId, created.id, 'succeeded');
      const res = await pending;
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ id: created.id, status: 'succeeded' });
    } finally {
      poll.restore();
    }
    // Another order's path does not find it.
    const other = await order(acme, 1000);
    expect(
      (await call(api, 'GET', `/v1/orders/${other}/refunds/${created.id}`, { key: acme.key })).status,
    ).toBe(404);
  });

  it('ops attention lists refunds in refund_unknown and needs_attention, and no others', async () => {
    const t = await newTenant(api.pool, 'att');
    const orderId = await order(t, 1000);
    const ids: string[] = [];
    for (const to of ['refund_unknown', 'needs_attention', 'succeeded', null] as const) {
      const r = (await refund(t, orderId, { amount: 100 })).body as RefundBody;
      if (to) await transition(t.tenantId, r.id, to);
      ids.push(r.id);
    }
    const operator = testOperator({ pool: api.pool, ledger: api.ledger, temporal: api.client });
    const items = await operator.listRefundAttention({ tenantId: t.tenantId });
    expect(items.map((i) => [i.refundId, i.status])).toEqual([
      [ids[0], 'refund_unknown'],
      [ids[1], 'needs_attention'],
    ]);
    expect(items[0]).toMatchObject({ kind: 'refund', orderId, amount: 100 });
    expect(items[0]!.temporalUiUrl).toContain(encodeURIComponent(`refund/${t.tenantId}/${ids[0]}`));
  });

  it.each([
    ['amount 0', { amount: 0 }],
    ['a fractional amount', { amount: 1.5 }],
    ['a string amount', { amount: '100' }],
    ['no amount', {}],
    ['a reason with a tab', { amount: 1, reason: 'changed\tmind' }],
    ['a reason with a C1 control character', { amount: 1, reason: 'changed\u0085mind' }],
    ['a reason with a lone surrogate', { amount: 1, reason: 'changed \ud800' }],
    ['an empty reason', { amount: 1, reason: '' }],
    ['a 201-character reason', { amount: 1, reason: 'é'.repeat(201) }],
    ['a reason over 200 characters once NFC', { amount: 1, reason: 'x'.repeat(199) + '\u0958' }],
    ['an unknown field', { amount: 1, currency: 'eur' }],
  ])('%s is a 400, nothing written', async (_name, body) => {
    const orderId = await order(acme, 1000);
    const before = await tenantCounts(api.pool, acme.tenantId);
    const res = await refund(acme, orderId, body);
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ type: `${PROBLEM}invalid-request` });
    expect(await tenantCounts(api.pool, acme.tenantId)).toEqual(before);
  });

  it('a reason is words in any script, stored in NFC: the same words typed two ways are one request', async () => {
    const orderId = await order(acme, 1000);
    const idem = uniq('ridem');
    // "Rückerstattung für Kunde" with the ü decomposed (u + combining diaeresis), as some keyboards send it.
    const decomposed = 'Ru\u0308ckerstattung fu\u0308r Kunde';
    const composed = decomposed.normalize('NFC');
    expect(composed).not.toBe(decomposed);
    const first = await refund(acme, orderId, { amount: 100, reason: decomposed }, idem);
    expect(first.status).toBe(202);
    expect((first.body as RefundBody).reason).toBe(composed);
    const replay = await refund(acme, orderId, { amount: 100, reason: composed }, idem);
    expect(replay.status).toBe(202);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect((replay.body as RefundBody).id).toBe((first.body as RefundBody).id);
    const stored = await api.pool.query('select reason from refunds where tenant_id = $1 and id = $2', [
      acme.tenantId,
      (first.body as RefundBody).id,
    ]);
    expect(stored.rows[0].reason).toBe(composed);
    const spaced = await refund(acme, orderId, { amount: 100, reason: 'customer request' });
    expect(spaced.status).toBe(202);
    expect((spaced.body as RefundBody).reason).toBe('customer request');
    const other = await refund(acme, orderId, { amount: 100, reason: '顧客の依頼 ' + 'x'.repeat(193) });
    expect(other.status).toBe(202);
  });

  it('a control character in the reason names the field in the 400', async () => {
    const orderId = await order(acme, 1000);
    const res = await refund(acme, orderId, { amount: 1, reason: 'line\nbreak' });
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({
      type: `${PROBLEM}invalid-request`,
      errors: [expect.objectContaining({ pointer: '/reason' })],
    });
  });

  it('without an Idempotency-Key: 400, nothing written', async () => {
    const orderId = await order(acme, 1000);
    const res = await call(api, 'POST', `/v1/orders/${orderId}/refunds`, {
      key: acme.key,
      body: { amount: 1 },
    });
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ type: `${PROBLEM}invalid-idempotency-key` });
    expect(await refundedAmount(acme.tenantId, orderId)).toBe(0);
  });
});
