/**
 * Every request the Stripe adapter can send, sent to stripe-mock (Stripe's own
 * mock, built from its Go module into the tools folder and started here),
 * which validates it against Stripe's OpenAPI description: an unknown or
 * malformed parameter would be a 400 there, as it would be at Stripe.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.ts';
import {
  createStripeClient,
  createStripePaymentProvider,
  paymentIntentParams,
  refundParams,
  searchQuery,
} from '../../src/providers/stripe.ts';
import { ProviderError, type ChargeRequest, type RefundRequest } from '../../src/providers/types.ts';
import {
  ensureStripeMock,
  startStripeMock,
  type RunningStripeMock,
} from '../../dev/stripe-mock/stripe-mock.ts';

let mock: RunningStripeMock;
beforeAll(async () => {
  const binary = await ensureStripeMock({ toolsDir: loadConfig().toolsDir });
  mock = await startStripeMock(binary);
}, 600_000);
afterAll(async () => {
  await mock?.stop();
});

const base: ChargeRequest = {
  amount: 2500,
  currency: 'usd',
  paymentMethod: 'pm_card_visa',
  metadata: { order_id: 'ord_1', tenant_id: 'acme', operation_key: 'acme:ord_1/charge' },
};
const variants: Array<[string, ChargeRequest]> = [
  ['the minimal charge', base],
  [
    'with description and receipt_email',
    { ...base, description: 'Order ord_1', receiptEmail: 'buyer@example.com' },
  ],
];
const key = 'onceflow:v1:acme:payment.charge:acme:ord_1/charge';
const client = () => createStripeClient({ secretKey: 'sk_test_123', apiBase: mock.url, timeoutMs: 10_000 });

describe('the Stripe adapter’s requests against stripe-mock', () => {
  it.each(variants)('POST /v1/payment_intents (%s) is accepted', async (_name, req) => {
    const pi = await client().paymentIntents.create(paymentIntentParams(req, key), { idempotencyKey: key });
    expect(pi.object).toBe('payment_intent');
  });

  it('GET /v1/payment_intents/search with the metadata query is accepted', async () => {
    const page = await client().paymentIntents.search({ query: searchQuery(key), limit: 10 });
    expect(page.object).toBe('search_result');
  });

  const refund: RefundRequest = {
    chargeId: 'pi_123',
    amount: 1000,
    currency: 'usd',
    metadata: {
      order_id: 'ord_1',
      tenant_id: 'acme',
      refund_id: 'rf_1',
      operation_key: 'refund/acme/rf_1/refund',
    },
  };
  const refundKey = 'onceflow:v1:acme:payment.refund:refund/acme/rf_1/refund';

  it.each([
    ['the minimal refund', refund],
    ['with a reason (carried in metadata)', { ...refund, reason: 'the customer asked' }],
  ])('POST /v1/refunds (%s) is accepted', async (_name, req) => {
    const r = await client().refunds.create(refundParams(req, refundKey), { idempotencyKey: refundKey });
    expect(r.object).toBe('refund');
  });

  it('GET /v1/refunds?payment_intent= (the listing a search reads, with its cursor) is accepted', async () => {
    const page = await client().refunds.list({ payment_intent: 'pi_123', limit: 100 });
    expect(page.object).toBe('list');
    const next = await client().refunds.list({
      payment_intent: 'pi_123',
      limit: 100,
      starting_after: 're_123',
    });
    expect(next.object).toBe('list');
  });

  it('the adapter itself: its create and search are never refused (a fixture is not a real outcome)', async () => {
    const adapter = createStripePaymentProvider({
      secretKey: 'sk_test_123',
      apiBase: mock.url,
      timeoutMs: 10_000,
      keyWindowMs: 24 * 60 * 60 * 1000,
      searchLagMs: 60 * 60 * 1000,
    });
    for (const [, req] of variants) {
      const outcome = await adapter.createCharge(req, key).then(
        (c) => c.status,
        (e: unknown) => e,
      );
      // stripe-mock answers a fixture PaymentIntent (its status is not ours to choose):
      // a final one maps to a Charge, another to `uncertain`, never to a refusal.
      if (outcome instanceof ProviderError) expect(outcome.kind).toBe('uncertain');
      else expect(['succeeded', 'failed']).toContain(outcome);
    }
    await adapter.searchChargeByIdempotencyKey!(key).catch((e: unknown) => {
      expect(e).toBeInstanceOf(ProviderError);
      expect((e as ProviderError).kind).toBe('uncertain');
    });
    // The refund calls: a fixture refund maps to a Refund or `uncertain`, never to a refusal.
    const made = await adapter.createRefund(refund, refundKey).then(
      (r) => r.status,
      (e: unknown) => e,
    );
    if (made instanceof ProviderError) expect(made.kind).toBe('uncertain');
    else expect(['succeeded', 'failed']).toContain(made);
    // stripe-mock's fixtures carry no metadata of ours: nothing matches, and nothing is refused.
    expect(
      await adapter.searchRefund!({
        chargeId: 'pi_123',
        idempotencyKey: refundKey,
        operationKey: refund.metadata.operation_key!,
      }),
    ).toBeNull();
  });

  it('stripe-mock does refuse a request Stripe would (the check can fail)', async () => {
    const bad = { ...paymentIntentParams(base, key), not_a_stripe_param: 'x' } as never;
    await expect(client().paymentIntents.create(bad)).rejects.toMatchObject({ statusCode: 400 });
  });
});
