/**
 * Provider refund events on POST /v1/webhooks/payments (issue 27): the
 * sandbox's refund.succeeded / refund.failed, and Stripe's refund.updated /
 * charge.refund.updated (Stripe-Signature). An event is recorded once per
 * (provider, event id, consumer), applied only to the refund whose provider
 * refund it names (the refund step's downstream key or recorded refund ID,
 * with the refund's amount and currency), and never moves a refund
 * backwards: a failed after a succeeded changes nothing.
 *
 * Real stack: the API (its outbox starts the first refund's workflow; the
 * others are started directly with the test timeouts), a worker on
 * the same task queue, the sandbox provider (or, with PAYMENT_PROVIDER=stripe,
 * the Stripe adapter against its Stripe surface), Postgres and Temporal. A
 * refund is held uncertain by faults on refunds.create (the answer is lost)
 * and refunds.lookup (reconciliation can't see it), so only an event can
 * settle it.
 */
import { randomBytes } from 'node:crypto';
import Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signWebhook } from '../../src/providers/webhook-signature.ts';
import { uniq } from '../support/env.ts';
import { until } from '../support/wait.ts';
import { startOrderStack, TEST_TIMING, type OrderStack } from '../support/stack.ts';
import { startRefund } from '../support/refunds.ts';
import { call, newTenant, startApi, type TestApi } from './support.ts';

type RefundBody = {
  id: string;
  status: string;
  amount: number;
  workflowId: string;
  providerRefundId: string | null;
};
/** /_sandbox/refunds rows: the refund object plus the order and tenant. */
type AuditRefund = {
  id: string;
  charge: string;
  amount: number;
  currency: string;
  status: string;
  idempotency_key: string;
  metadata: Record<string, string>;
  created: number;
};

const SANDBOX_SECRET = 'whsec_test_api';
const STRIPE_SECRET = 'whsec_stripe_refund_endpoint';

describe('refund webhooks', () => {
  let stack: OrderStack;
  let api: TestApi;
  let stripeApi: TestApi;
  let tenant: { tenantId: string; key: string };
  const signer = new Stripe('sk_test_signer', { telemetry: false });

  beforeAll(async () => {
    stack = await startOrderStack();
    api = await startApi({ env: { TEMPORAL_TASK_QUEUE: stack.taskQueue } });
    stripeApi = await startApi({
      env: {
        TEMPORAL_TASK_QUEUE: stack.taskQueue,
        PAYMENT_PROVIDER: 'stripe',
        STRIPE_WEBHOOK_SECRET: STRIPE_SECRET,
      },
    });
    tenant = await newTenant(api.pool, 'rwh');
  }, 120_000);
  afterAll(async () => {
    await stripeApi?.close();
    await api?.close();
    await stack?.close();
  });

  const getRefund = async (orderId: string, refundId: string) =>
    (await call(api, 'GET', `/v1/orders/${orderId}/refunds/${refundId}`, { key: tenant.key }))
      .body as RefundBody;

  /** A refund whose provider refund was made but whose outcome is lost and can't be looked up. */
  /**
   * A refund whose provider refund was made but whose outcome is lost and can't be looked up.
   * Through the API (its outbox starts the workflow with the declared timeouts: about 16 s of
   * retries before refund_unknown), or started directly with the test timeouts and a long
   * reconcile horizon (refund_unknown within seconds, and it stays there).
   */
  async function uncertainRefund(amount: number, via: 'api' | 'direct' = 'direct') {
    const orderId = `ord_${randomBytes(12).toString('hex')}`;
    const started = await stack.startOrder({ tenantId: tenant.tenantId, orderId, amount: 3000 });
    expect((await started.handle.result()).status).toBe('completed');
    await stack.fault('refunds.create', 'drop_after', 1_000);
    await stack.fault('refunds.lookup', 'fail_before', 1_000);
    let refund: RefundBody;
    if (via === 'api') {
      const res = await call(api, 'POST', `/v1/orders/${orderId}/refunds`, {
        key: tenant.key,
        idem: uniq('ridem'),
        body: { amount },
      });
      expect(res.status).toBe(202);
      refund = res.body as RefundBody;
    } else {
      const chargeId = (await stack.orderRow(started.input)).charge_id!;
      const { refundId, workflowId } = await startRefund(stack, { input: started.input, chargeId }, amount, {
        ...TEST_TIMING,
        unknownHorizonMs: 10 * 60_000,
      });
      refund = { id: refundId, workflowId, status: 'pending', amount, providerRefundId: null };
    }
    await until('the refund to be uncertain', () => getRefund(orderId, refund.id), {
      done: (r) => r.status === 'refund_unknown' || r.status === 'needs_attention',
      timeoutMs: 90_000,
    });
    const audit = await fetch(`${stack.sandbox.url}/_sandbox/refunds?order_id=${orderId}`);
    const made = ((await audit.json()) as { data: AuditRefund[] }).data;
    expect(made).toHaveLength(1);
    return { orderId, refund, provider: made[0]! };
  }

  /** Settled by an event: the refund workflow ends (its receipt sent); faults go, for the next test. */
  async function settledTo(orderId: string, refund: RefundBody, status: string) {
    const done = await until('the refund to settle', () => getRefund(orderId, refund.id), {
      done: (r) => r.status === 'succeeded' || r.status === 'failed',
      timeoutMs: 60_000,
    });
    expect(done.status).toBe(status);
    await stack.clearFaults();
    await stack.client.workflow.getHandle(refund.workflowId).result();
    return done;
  }

  function sandboxEvent(type: string, object: Record<string, unknown>) {
    const raw = JSON.stringify({
      id: `evt_${uniq('e')}`,
      object: 'event',
      type,
      created: Math.floor(Date.now() / 1000),
      data: { object },
    });
    return raw;
  }
  const sandboxRefundObject = (p: AuditRefund, overrides: Record<string, unknown> = {}) => ({
    id: p.id,
    object: 'refund',
    charge: p.charge,
    amount: p.amount,
    currency: p.currency,
    status: p.status,
    metadata: p.metadata,
    idempotency_key: p.idempotency_key,
    created: p.created,
    ...overrides,
  });
  const sendSandbox = (raw: string, secret = SANDBOX_SECRET) =>
    call(api, 'POST', '/v1/webhooks/payments', {
      raw,
      headers: { 'onceflow-signature': signWebhook(secret, raw, Math.floor(Date.now() / 1000)) },
    });
  const sendStripe = (raw: string) =>
    call(stripeApi, 'POST', '/v1/webhooks/payments', {
      raw,
      headers: {
        'stripe-signature': signer.webhooks.generateTestHeaderString({ payload: raw, secret: STRIPE_SECRET }),
      },
    });

  async function refundSignals(workflowId: string): Promise<number> {
    const history = await stack.client.workflow.getHandle(workflowId).fetchHistory();
    return (history.events ?? []).filter(
      (e) => e.workflowExecutionSignaledEventAttributes?.signalName === 'refundEvent',
    ).length;
  }

  it("the refund's own refund.succeeded settles it, once; a redelivery is a duplicate; a later refund.failed changes nothing", async () => {
    const { orderId, refund, provider } = await uncertainRefund(1000, 'api');
    const raw = sandboxEvent('refund.succeeded', sandboxRefundObject(provider));
    const res = await sendSandbox(raw);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ received: true, duplicate: false, outcome: 'signalled' });
    const again = await sendSandbox(raw);
    expect(again.body).toMatchObject({ received: true, duplicate: true });

    const done = await settledTo(orderId, refund, 'succeeded');
    expect(done.providerRefundId).toBe(provider.id);
    expect(await refundSignals(refund.workflowId)).toBe(1);

    // Reordered or late: a failed after the succeeded never moves the refund back (nor gives its amount back).
    const late = await sendSandbox(
      sandboxEvent('refund.failed', sandboxRefundObject(provider, { status: 'failed' })),
    );
    expect(late.body).toMatchObject({ duplicate: false, outcome: 'refund_settled' });
    expect((await getRefund(orderId, refund.id)).status).toBe('succeeded');
    const order = await call(api, 'GET', `/v1/orders/${orderId}`, { key: tenant.key });
    expect(order.body).toMatchObject({ refundedAmount: 1000 });
    const audit = await fetch(`${stack.sandbox.url}/_sandbox/refunds?order_id=${orderId}`);
    expect(((await audit.json()) as { data: unknown[] }).data).toHaveLength(1);
  });

  it('succeeded then failed, back to back while the refund is uncertain: the first settling word wins', async () => {
    const { orderId, refund, provider } = await uncertainRefund(700);
    const first = await sendSandbox(sandboxEvent('refund.succeeded', sandboxRefundObject(provider)));
    expect(first.body).toMatchObject({ outcome: 'signalled' });
    const second = await sendSandbox(
      sandboxEvent('refund.failed', sandboxRefundObject(provider, { status: 'failed' })),
    );
    // Signalled too if the workflow has not applied the first yet; either way it changes nothing.
    expect(['signalled', 'refund_settled']).toContain((second.body as { outcome: string }).outcome);
    await settledTo(orderId, refund, 'succeeded');
    const order = await call(api, 'GET', `/v1/orders/${orderId}`, { key: tenant.key });
    expect(order.body).toMatchObject({ refundedAmount: 700 });
  });

  it('a signed event that does not name the refund’s provider refund is ignored: forged id, wrong amount, type against status', async () => {
    const { orderId, refund, provider } = await uncertainRefund(500);
    // Another refund ID with our refund's metadata (order, tenant, refund ID), and no key of ours
    // (neither echoed nor in metadata, where the Stripe adapter keeps it): metadata alone finds, never names.
    const { idempotency_key: _ours, ...theirMetadata } = provider.metadata;
    const forged = sandboxRefundObject(provider, {
      id: 're_forged',
      idempotency_key: undefined,
      metadata: theirMetadata,
    });
    expect((await sendSandbox(sandboxEvent('refund.succeeded', forged))).body).toMatchObject({
      outcome: 'ignored_mismatch',
    });
    // Another key than the step's: still a mismatch.
    const otherKey = sandboxRefundObject(provider, {
      id: 're_forged',
      idempotency_key: `${provider.idempotency_key}x`,
      metadata: { ...theirMetadata, idempotency_key: `${provider.idempotency_key}x` },
    });
    expect((await sendSandbox(sandboxEvent('refund.succeeded', otherKey))).body).toMatchObject({
      outcome: 'ignored_mismatch',
    });
    const wrongAmount = sandboxRefundObject(provider, { amount: provider.amount + 1 });
    expect((await sendSandbox(sandboxEvent('refund.succeeded', wrongAmount))).body).toMatchObject({
      outcome: 'ignored_mismatch',
    });
    // A type that claims success over an object that says failed says nothing.
    const contradicts = sandboxRefundObject(provider, { status: 'failed' });
    expect((await sendSandbox(sandboxEvent('refund.succeeded', contradicts))).body).toMatchObject({
      outcome: 'ignored_not_final',
    });
    // A bad signature: refused before anything.
    const raw = sandboxEvent('refund.succeeded', sandboxRefundObject(provider));
    expect((await sendSandbox(raw, 'whsec_not_ours')).status).toBe(401);

    expect(await refundSignals(refund.workflowId)).toBe(0);
    expect(['refund_unknown', 'needs_attention']).toContain((await getRefund(orderId, refund.id)).status);
    // The real one settles it (and ends the workflow).
    expect((await sendSandbox(raw)).body).toMatchObject({ outcome: 'signalled' });
    await settledTo(orderId, refund, 'succeeded');
  });

  it('parked for an operator past the reconcile horizon, a refund event still settles it (no re-drive needed)', async () => {
    const orderId = `ord_${randomBytes(12).toString('hex')}`;
    const started = await stack.startOrder({ tenantId: tenant.tenantId, orderId, amount: 3000 });
    expect((await started.handle.result()).status).toBe('completed');
    const chargeId = (await stack.orderRow(started.input)).charge_id!;
    await stack.fault('refunds.create', 'drop_after', 1_000);
    await stack.fault('refunds.lookup', 'fail_before', 1_000);
    // The test timeouts: a 4 s reconcile horizon, then needs_attention.
    const { refundId, workflowId } = await startRefund(stack, { input: started.input, chargeId }, 600);
    await until('the refund to park', () => getRefund(orderId, refundId), {
      done: (r) => r.status === 'needs_attention',
      timeoutMs: 90_000,
    });
    const audit = await fetch(`${stack.sandbox.url}/_sandbox/refunds?order_id=${orderId}`);
    const [provider] = ((await audit.json()) as { data: AuditRefund[] }).data;
    const res = await sendSandbox(sandboxEvent('refund.succeeded', sandboxRefundObject(provider!)));
    expect(res.body).toMatchObject({ outcome: 'signalled' });
    const done = await settledTo(orderId, { id: refundId, workflowId } as RefundBody, 'succeeded');
    expect(done.providerRefundId).toBe(provider!.id);
    const order = await call(api, 'GET', `/v1/orders/${orderId}`, { key: tenant.key });
    expect(order.body).toMatchObject({ refundedAmount: 600 });
  });

  it('Stripe: charge.refund.updated while pending is not final; refund.updated succeeded settles it; Stripe-signed', async () => {
    const { orderId, refund, provider } = await uncertainRefund(900);
    // Stripe's refund: no echoed key; the adapter's metadata carries the downstream key.
    const stripeRefund = (status: string) => ({
      id: provider.id,
      object: 'refund',
      amount: provider.amount,
      currency: provider.currency,
      payment_intent: provider.charge,
      charge: null,
      status,
      metadata: { ...provider.metadata, idempotency_key: provider.idempotency_key },
      created: provider.created,
    });
    const pending = await sendStripe(sandboxEvent('charge.refund.updated', stripeRefund('pending')));
    expect(pending.body).toMatchObject({ outcome: 'ignored_not_final' });
    // The sandbox's signature is not Stripe's.
    const raw = sandboxEvent('refund.updated', stripeRefund('succeeded'));
    expect(
      (
        await call(stripeApi, 'POST', '/v1/webhooks/payments', {
          raw,
          headers: { 'onceflow-signature': signWebhook(SANDBOX_SECRET, raw, Math.floor(Date.now() / 1000)) },
        })
      ).status,
    ).toBe(401);
    const res = await sendStripe(raw);
    expect(res.body).toEqual({ received: true, duplicate: false, outcome: 'signalled' });
    const done = await settledTo(orderId, refund, 'succeeded');
    expect(done.providerRefundId).toBe(provider.id);
    // Recorded per provider: the same event id through Stripe again is a duplicate.
    expect((await sendStripe(raw)).body).toMatchObject({ duplicate: true });
    const late = await sendStripe(sandboxEvent('refund.failed', stripeRefund('failed')));
    expect(late.body).toMatchObject({ outcome: 'refund_settled' });
    expect((await getRefund(orderId, refund.id)).status).toBe('succeeded');
  });
});
