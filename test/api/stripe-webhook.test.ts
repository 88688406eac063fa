/**
 * PAYMENT_PROVIDER=stripe: the webhook route verifies `Stripe-Signature` with
 * stripe.webhooks.constructEvent and the endpoint secret, maps
 * payment_intent.* onto the payment events, and applies an event only to the
 * PaymentIntent the order's charge step made (its downstream key, or the
 * recorded PaymentIntent id), never to one that merely names the order in
 * metadata. Real API app, real Temporal, real ledger, the sandbox's Stripe
 * surface through the real adapter.
 */
import Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signWebhook } from '../../src/providers/webhook-signature.ts';
import { createStripePaymentProvider } from '../../src/providers/stripe.ts';
import { startSandbox, type RunningSandbox } from '../../dev/sandbox/server.ts';
import { chargeScope, runCharge } from '../../src/steps/payment.ts';
import { stepKeys } from '../../src/orders/model.ts';
import { uniq } from '../support/env.ts';
import { until } from '../support/wait.ts';
import { call, newTenant, startApi, validOrder, type TestApi } from './support.ts';

type Order = { id: string; workflowId: string };
type PaymentIntent = { id: string; amount: number; currency: string; metadata: Record<string, string> };
const STRIPE_SECRET = 'whsec_stripe_endpoint_test';
const ORDER_AMOUNT = 3000;

describe('Stripe webhooks', () => {
  let api: TestApi;
  let sandbox: RunningSandbox;
  let t: { tenantId: string; key: string };
  const signer = new Stripe('sk_test_signer', { telemetry: false });

  beforeAll(async () => {
    api = await startApi({ env: { PAYMENT_PROVIDER: 'stripe', STRIPE_WEBHOOK_SECRET: STRIPE_SECRET } });
    sandbox = await startSandbox({
      pool: api.pool,
      port: 0,
      account: uniq('acct'),
      webhook: { url: undefined, secret: STRIPE_SECRET },
      dispatch: false,
    });
    t = await newTenant(api.pool, 'swh');
  });
  afterAll(async () => {
    await sandbox?.close();
    await api?.close();
  });

  const payments = () =>
    createStripePaymentProvider({
      secretKey: 'sk_test_onceflow_sandbox',
      apiBase: sandbox.url,
      timeoutMs: 1_500,
      keyWindowMs: 24 * 60 * 60 * 1000,
      searchLagMs: 1_000,
    });
  const chargeRef = (order: Order) => ({ tenantId: t.tenantId, key: stepKeys.charge(order.workflowId) });

  async function paymentUnknownOrder(): Promise<{ order: Order; pi: PaymentIntent }> {
    const res = await call(api, 'POST', '/v1/orders', { key: t.key, idem: uniq('idem'), body: validOrder() });
    expect(res.status).toBe(202);
    const order = res.body as Order;
    await until('the order workflow started', async () => {
      const { rows } = await api.pool.query('select started_at from workflow_outbox where workflow_id = $1', [
        order.workflowId,
      ]);
      return rows[0]?.started_at;
    });
    await api.pool.query("update orders set status = 'payment_pending' where tenant_id = $1 and id = $2", [
      t.tenantId,
      order.id,
    ]);
    const f = await fetch(`${sandbox.url}/_sandbox/faults`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ endpoint: 'charges.create', kind: 'drop_after', count: 1 }),
    });
    expect(f.status).toBe(201);
    const input = {
      tenantId: t.tenantId,
      orderId: order.id,
      key: stepKeys.charge(order.workflowId),
      amount: ORDER_AMOUNT,
      currency: 'usd',
      paymentMethod: 'pm_card_visa',
    };
    await expect(runCharge({ ledger: api.ledger, payments: payments() }, input)).rejects.toThrow();
    expect((await api.ledger.get(chargeScope(chargeRef(order))))?.state).toBe('unknown');
    await api.pool.query("update orders set status = 'payment_unknown' where tenant_id = $1 and id = $2", [
      t.tenantId,
      order.id,
    ]);
    const audit = (await (await fetch(`${sandbox.url}/_sandbox/charges?order_id=${order.id}`)).json()) as {
      data: { id: string }[];
    };
    expect(audit.data).toHaveLength(1);
    const got = await fetch(`${sandbox.url}/v1/payment_intents/${audit.data[0]!.id}`, {
      headers: { authorization: 'Bearer sk_test_onceflow_sandbox' },
    });
    return { order, pi: (await got.json()) as PaymentIntent };
  }

  function event(type: string, object: Record<string, unknown>) {
    const evt = {
      id: `evt_${uniq('e')}`,
      object: 'event',
      type,
      created: Math.floor(Date.now() / 1000),
      data: { object },
    };
    return { raw: JSON.stringify(evt), id: evt.id };
  }

  const send = (raw: string, headers: Record<string, string>) =>
    call(api, 'POST', '/v1/webhooks/payments', { raw, headers });
  const stripeSigned = (raw: string, secret = STRIPE_SECRET) => ({
    'stripe-signature': signer.webhooks.generateTestHeaderString({ payload: raw, secret }),
  });

  async function signalled(workflowId: string): Promise<string[]> {
    const history = await api.client.workflow.getHandle(workflowId).fetchHistory();
    return (history.events ?? []).flatMap((e) =>
      e.workflowExecutionSignaledEventAttributes
        ? [e.workflowExecutionSignaledEventAttributes.signalName ?? '']
        : [],
    );
  }

  it("the charge's own payment_intent.succeeded, Stripe-signed, is signalled once; a duplicate is not", async () => {
    const { order, pi } = await paymentUnknownOrder();
    const { raw } = event('payment_intent.succeeded', pi);
    const res = await send(raw, stripeSigned(raw));
    expect(res.body).toEqual({ received: true, duplicate: false, outcome: 'signalled' });
    expect(await signalled(order.workflowId)).toEqual(['paymentEvent']);
    const again = await send(raw, stripeSigned(raw));
    expect(again.body).toMatchObject({ duplicate: true });
    expect(await signalled(order.workflowId)).toEqual(['paymentEvent']);
  });

  it('refuses a wrong secret, a tampered body, and the sandbox signature header alone (401)', async () => {
    const { pi } = await paymentUnknownOrder();
    const { raw } = event('payment_intent.succeeded', pi);
    expect((await send(raw, stripeSigned(raw, 'whsec_other'))).status).toBe(401);
    expect((await send(raw.replace('"usd"', '"eur"'), stripeSigned(raw))).status).toBe(401);
    const onceflowOnly = {
      'onceflow-signature': signWebhook(STRIPE_SECRET, raw, Math.floor(Date.now() / 1000)),
    };
    expect((await send(raw, onceflowOnly)).status).toBe(401);
  });

  it('a PaymentIntent that only names the order in metadata (another key, another id) changes nothing', async () => {
    const { order, pi } = await paymentUnknownOrder();
    const forged = event('payment_intent.payment_failed', {
      ...pi,
      id: 'pi_someone_else',
      metadata: { ...pi.metadata, idempotency_key: 'another-key' },
      status: 'requires_payment_method',
    });
    const res = await send(forged.raw, stripeSigned(forged.raw));
    expect(res.body).toEqual({ received: true, duplicate: false, outcome: 'ignored_mismatch' });
    const wrongAmount = event('payment_intent.succeeded', { ...pi, amount: 1 });
    expect((await send(wrongAmount.raw, stripeSigned(wrongAmount.raw))).body).toMatchObject({
      outcome: 'ignored_mismatch',
    });
    expect(await signalled(order.workflowId)).toEqual([]);
    expect((await api.ledger.get(chargeScope(chargeRef(order))))?.state).toBe('unknown');
  });
});
