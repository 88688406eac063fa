/**
 * A signed event is applied only to the charge it names (issue #24, item 5):
 * its idempotency key is the charge step's downstream key, or its id is the
 * charge id recorded for the step, and its amount and currency are the
 * order's. Anything else is acknowledged, recorded as `ignored_mismatch` and
 * changes nothing.
 *
 * Real stack: the API app, the Temporal dev server (the order workflows run
 * on a task queue no worker polls, so every signal stays visible in their
 * history), the real ledger, a real sandbox provider, and events signed with
 * the real signer.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { downstreamKey } from 'onceflow';
import { signWebhook } from '../../src/providers/webhook-signature.ts';
import { createSandboxPaymentProvider } from '../../src/providers/sandbox.ts';
import { startSandbox, type RunningSandbox } from '../../dev/sandbox/server.ts';
import { chargeScope, runCharge } from '../../src/steps/payment.ts';
import { stepKeys } from '../../src/orders/model.ts';
import { uniq } from '../support/env.ts';
import { until } from '../support/wait.ts';
import { call, newTenant, startApi, validOrder, type TestApi } from './support.ts';

type Order = { id: string; workflowId: string };
/** The sandbox's charge object, as its webhooks carry it (dev/sandbox/objects.ts chargeObject). */
type ChargeObject = {
  id: string;
  amount: number;
  currency: string;
  status: string;
  idempotency_key: string;
  metadata: Record<string, string>;
  [k: string]: unknown;
};

const SECRET = 'whsec_test_api';
const ORDER_AMOUNT = 3000; // validOrder(): 2 x 1500
const ORDER_CURRENCY = 'usd';

describe('webhook events are applied only to the charge they name', () => {
  let api: TestApi;
  let sandbox: RunningSandbox;
  let t: { tenantId: string; key: string };

  beforeAll(async () => {
    api = await startApi();
    sandbox = await startSandbox({
      pool: api.pool,
      port: 0,
      account: uniq('acct'),
      webhook: { url: undefined, secret: SECRET },
      dispatch: false,
    });
    t = await newTenant(api.pool, 'whm');
  });
  afterAll(async () => {
    await sandbox?.close();
    await api?.close();
  });

  const payments = () => createSandboxPaymentProvider({ baseUrl: sandbox.url, timeoutMs: 1_500 });
  const chargeRef = (order: Order) => ({ tenantId: t.tenantId, key: stepKeys.charge(order.workflowId) });

  async function createOrder(): Promise<Order> {
    const res = await call(api, 'POST', '/v1/orders', { key: t.key, idem: uniq('idem'), body: validOrder() });
    expect(res.status).toBe(202);
    const order = res.body as Order;
    await until('the order workflow started', async () => {
      const { rows } = await api.pool.query('select started_at from workflow_outbox where workflow_id = $1', [
        order.workflowId,
      ]);
      return rows[0]?.started_at;
    });
    return order;
  }

  async function fault(endpoint: string, kind: string, count: number) {
    const res = await fetch(`${sandbox.url}/_sandbox/faults`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ endpoint, kind, count }),
    });
    expect(res.ok).toBe(true);
  }

  /** The charge the sandbox really made for this order (its audit), as its webhook would carry it. */
  async function realCharge(order: Order): Promise<ChargeObject> {
    const res = await fetch(`${sandbox.url}/_sandbox/charges?order_id=${encodeURIComponent(order.id)}`);
    const body = (await res.json()) as { data?: ChargeObject[] } | ChargeObject[];
    const rows = Array.isArray(body) ? body : (body.data ?? []);
    expect(rows).toHaveLength(1);
    const { order_id: _o, tenant_id: _t, created_at: _c, ...object } = rows[0]!;
    return object as ChargeObject;
  }

  /** The charge step through the real ledger against the real sandbox. */
  const charge = (order: Order) =>
    runCharge(
      { ledger: api.ledger, payments: payments() },
      {
        tenantId: t.tenantId,
        orderId: order.id,
        key: stepKeys.charge(order.workflowId),
        amount: ORDER_AMOUNT,
        currency: ORDER_CURRENCY,
        paymentMethod: 'pm_card_visa',
      },
    );

  const setStatus = (order: Order, status: string) =>
    api.pool.query('update orders set status = $3 where tenant_id = $1 and id = $2', [
      t.tenantId,
      order.id,
      status,
    ]);

  /**
   * The scenario: the provider charged, its response was lost, so the
   * ledger record is `unknown` and the order waits in payment_unknown for a
   * payment event.
   */
  async function paymentUnknownOrder(): Promise<{ order: Order; real: ChargeObject }> {
    const order = await createOrder();
    await setStatus(order, 'payment_pending');
    await fault('charges.create', 'drop_after', 1);
    await expect(charge(order)).rejects.toThrow();
    expect((await api.ledger.get(chargeScope(chargeRef(order))))?.state).toBe('unknown');
    await setStatus(order, 'payment_unknown');
    const real = await realCharge(order);
    expect(real.status).toBe('succeeded');
    return { order, real };
  }

  function send(type: 'charge.succeeded' | 'charge.failed', object: Record<string, unknown>) {
    const evt = {
      id: `evt_${uniq('e')}`,
      object: 'event',
      type,
      created: Math.floor(Date.now() / 1000),
      data: { object },
    };
    const raw = JSON.stringify(evt);
    return call(api, 'POST', '/v1/webhooks/payments', {
      raw,
      headers: { 'onceflow-signature': signWebhook(SECRET, raw, Math.floor(Date.now() / 1000)) },
    }).then((res) => ({ ...res, eventId: evt.id }));
  }

  async function signalled(workflowId: string): Promise<string[]> {
    const history = await api.client.workflow.getHandle(workflowId).fetchHistory();
    return (history.events ?? []).flatMap((e) =>
      e.workflowExecutionSignaledEventAttributes
        ? [e.workflowExecutionSignaledEventAttributes.signalName ?? '']
        : [],
    );
  }

  async function stored(eventId: string) {
    const { rows } = await api.pool.query('select outcome from webhook_events where event_id = $1', [
      eventId,
    ]);
    return rows.map((r: { outcome: string }) => r.outcome);
  }

  async function orderStatus(order: Order) {
    const { rows } = await api.pool.query('select status from orders where tenant_id = $1 and id = $2', [
      t.tenantId,
      order.id,
    ]);
    return rows[0]?.status as string;
  }

  async function expectIgnored(res: Awaited<ReturnType<typeof send>>, order: Order) {
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ received: true, duplicate: false, outcome: 'ignored_mismatch' });
    expect(await stored(res.eventId)).toEqual(['ignored_mismatch']);
    expect(await signalled(order.workflowId)).toEqual([]);
    expect(await orderStatus(order)).toBe('payment_unknown');
    expect((await api.ledger.get(chargeScope(chargeRef(order))))?.state).toBe('unknown');
  }

  it('a signed charge.failed about another charge (other id, other key, amount 1) does not touch a payment_unknown order whose real charge succeeded', async () => {
    const { order, real } = await paymentUnknownOrder();
    const forged = await send('charge.failed', {
      ...real,
      id: 'ch_someone_elses_charge',
      idempotency_key: 'of_someone_elses_key',
      amount: 1,
      status: 'failed',
      failure_code: 'card_declined',
    });
    await expectIgnored(forged, order);
  });

  it("the charge's own key with a wrong amount, or a wrong currency, is a mismatch too", async () => {
    const { order, real } = await paymentUnknownOrder();
    expect(real.idempotency_key).toBe(downstreamKey(chargeScope(chargeRef(order))));
    await expectIgnored(await send('charge.failed', { ...real, amount: 1, status: 'failed' }), order);
    await expectIgnored(await send('charge.succeeded', { ...real, amount: ORDER_AMOUNT + 1 }), order);
    await expectIgnored(await send('charge.succeeded', { ...real, currency: 'eur' }), order);
    // No amount or currency at all proves nothing either.
    const { amount: _a, currency: _c, ...bare } = real;
    await expectIgnored(await send('charge.succeeded', bare), order);
  });

  it("the charge's real event (its downstream key, amount and currency) is signalled", async () => {
    const { order, real } = await paymentUnknownOrder();
    const res = await send('charge.succeeded', real);
    expect(res.body).toEqual({ received: true, duplicate: false, outcome: 'signalled' });
    expect(await stored(res.eventId)).toEqual(['signalled']);
    expect(await signalled(order.workflowId)).toEqual(['paymentEvent']);
  });

  it('an event that names the recorded charge id matches without a key (a provider whose charge objects carry none)', async () => {
    const order = await createOrder();
    await setStatus(order, 'payment_pending');
    const result = await charge(order);
    expect(result.outcome).toBe('succeeded');
    // Parked: it waits for an event even though the ledger record is final.
    await setStatus(order, 'needs_attention');
    const real = await realCharge(order);
    expect(real.id).toBe(result.chargeId);
    const { idempotency_key: _k, ...noKey } = real;

    const wrongId = await send('charge.succeeded', { ...noKey, id: 'ch_not_this_one' });
    expect(wrongId.body).toMatchObject({ outcome: 'ignored_mismatch' });
    const wrongKey = await send('charge.succeeded', {
      ...noKey,
      id: 'ch_not_this_one',
      idempotency_key: 'of_x',
    });
    expect(wrongKey.body).toMatchObject({ outcome: 'ignored_mismatch' });
    expect(await signalled(order.workflowId)).toEqual([]);

    const byId = await send('charge.succeeded', noKey);
    expect(byId.body).toEqual({ received: true, duplicate: false, outcome: 'signalled' });
    expect(await signalled(order.workflowId)).toEqual(['paymentEvent']);
  });

  it('the charge id on the order row matches too', async () => {
    const { order, real } = await paymentUnknownOrder();
    await api.pool.query('update orders set charge_id = $3 where tenant_id = $1 and id = $2', [
      t.tenantId,
      order.id,
      real.id,
    ]);
    const { idempotency_key: _k, ...noKey } = real;
    const res = await send('charge.succeeded', noKey);
    expect(res.body).toMatchObject({ outcome: 'signalled' });
  });
});
