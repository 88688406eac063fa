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
  searchQuery,
} from '../../src/providers/stripe.ts';
import { ProviderError, type ChargeRequest } from '../../src/providers/types.ts';
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
  });

  it('stripe-mock does refuse a request Stripe would (the check can fail)', async () => {
    const bad = { ...paymentIntentParams(base, key), not_a_stripe_param: 'x' } as never;
    await expect(client().paymentIntents.create(bad)).rejects.toMatchObject({ statusCode: 400 });
  });
});
