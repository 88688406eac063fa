/**
 * Refunds through the Stripe adapter (src/providers/stripe.ts) against the
 * sandbox's Stripe surface: `refunds.create` on the PaymentIntent under the
 * refund step's downstream key, its answers mapped onto the ProviderError
 * kinds as a charge's are, the same fault endpoints (refunds.create,
 * refunds.lookup) and audit (/_sandbox/refunds) as the JSON surface, and the
 * refund step's reconcile policy end to end on the real ledger: a replay
 * inside the key window, then a listing by PaymentIntent whose young "not
 * found" proves nothing. Exactly one refund per key, counted at the audit.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Ledger, isLedgerError, withinKeyWindow } from 'onceflow';
import { createStripePaymentProvider } from '../../src/providers/stripe.ts';
import { ProviderError, type PaymentProvider, type RefundRequest } from '../../src/providers/types.ts';
import { reconcileRefund, refundScope, runRefund, type RefundInput } from '../../src/steps/refund.ts';
import type { Pool } from '../../src/db/index.ts';
import { testPool, uniq } from '../support/env.ts';
import { until } from '../support/wait.ts';
import { startTestSandbox, type Json, type TestSandbox } from '../sandbox/harness.ts';

const H = 60 * 60 * 1000;
let pool: Pool;
/** Keys kept 24 h; the refunds listing lags 400 ms. */
let sb: TestSandbox;
/** Keys kept 1.5 s, the listing an hour behind: "the window passed and the listing lags". */
let lagging: TestSandbox;
/** Keys kept 24 h, the listing an hour behind. */
let slowIndex: TestSandbox;
beforeAll(async () => {
  pool = testPool(8);
  sb = await startTestSandbox({ dispatch: false, stripeSearchLagMs: 400 });
  lagging = await startTestSandbox({ dispatch: false, keyRetentionMs: 1_500, stripeSearchLagMs: H });
  slowIndex = await startTestSandbox({ dispatch: false, stripeSearchLagMs: H });
});
afterAll(async () => {
  await sb?.stop();
  await lagging?.stop();
  await slowIndex?.stop();
  await pool?.end();
});
beforeEach(async () => {
  for (const s of [sb, lagging, slowIndex]) {
    expect((await s.call('DELETE', '/_sandbox/faults')).status).toBe(200);
  }
});

function stripeAt(base: string, opts: { keyWindowMs?: number; searchLagMs?: number } = {}): PaymentProvider {
  return createStripePaymentProvider({
    secretKey: 'sk_test_onceflow_sandbox',
    apiBase: base,
    timeoutMs: 1_500,
    keyWindowMs: opts.keyWindowMs ?? 24 * H,
    searchLagMs: opts.searchLagMs ?? 400,
  });
}

const fault = async (s: TestSandbox, body: Record<string, unknown>) =>
  expect((await s.call('POST', '/_sandbox/faults', { body })).status).toBe(201);

async function caught(p: Promise<unknown>): Promise<ProviderError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ProviderError);
  return err as ProviderError;
}

async function refundsAt(s: TestSandbox, orderId: string): Promise<Json[]> {
  const res = await s.call('GET', `/_sandbox/refunds?order_id=${orderId}`);
  expect(res.status).toBe(200);
  return res.body.data as Json[];
}

/** A succeeded PaymentIntent of `amount` at `s`, made through the adapter; its order's refund input. */
async function chargedOrder(s: TestSandbox, amount = 3000): Promise<RefundInput> {
  const orderId = uniq('ord');
  const pi = await stripeAt(s.url).createCharge(
    {
      amount,
      currency: 'usd',
      paymentMethod: 'pm_card_visa',
      metadata: { order_id: orderId, tenant_id: 'acme' },
    },
    uniq('ck'),
  );
  expect(pi.status).toBe('succeeded');
  const refundId = uniq('rf');
  return {
    tenantId: 'acme',
    orderId,
    refundId,
    key: `refund/acme/${refundId}/refund`,
    chargeId: pi.id,
    amount: 1000,
    currency: 'usd',
    reason: 'requested_by_customer',
  };
}

function requestOf(input: RefundInput, overrides: Partial<RefundRequest> = {}): RefundRequest {
  return {
    chargeId: input.chargeId,
    amount: input.amount,
    currency: input.currency,
    metadata: {
      order_id: input.orderId,
      tenant_id: input.tenantId,
      refund_id: input.refundId,
      operation_key: input.key,
    },
    ...overrides,
  };
}

describe('Stripe refunds in the adapter, against the sandbox', () => {
  it('refunds once per key: refunds.create on the PaymentIntent, replayed under the same key', async () => {
    const stripe = stripeAt(sb.url);
    const input = await chargedOrder(sb);
    const key = uniq('rk');
    const first = await stripe.createRefund(requestOf(input, { reason: 'customer asked' }), key);
    expect(first).toMatchObject({
      status: 'succeeded',
      chargeId: input.chargeId,
      amount: 1000,
      currency: 'usd',
    });
    expect(first.id).toMatch(/^re_/);
    // The downstream key and the operation key travel as metadata (what a listing matches);
    // the free-text reason too (Stripe's own `reason` is an enum with side effects).
    expect(first.metadata).toMatchObject({
      idempotency_key: key,
      operation_key: input.key,
      refund_id: input.refundId,
      reason: 'customer asked',
    });
    expect(await stripe.createRefund(requestOf(input, { reason: 'customer asked' }), key)).toEqual(first);
    const made = await refundsAt(sb, input.orderId);
    expect(made.map((r) => r.id)).toEqual([first.id]);
    expect(made[0]).toMatchObject({ charge: input.chargeId, idempotency_key: key, amount: 1000 });
  });

  it('a refusal before acting is rejected (definite: nothing refunded); another request under the key is key_conflict', async () => {
    const stripe = stripeAt(sb.url);
    const input = await chargedOrder(sb, 1500);
    const tooMuch = await caught(stripe.createRefund(requestOf(input, { amount: 1501 }), uniq('rk')));
    expect(tooMuch).toMatchObject({
      kind: 'rejected',
      definite: true,
      status: 400,
      code: 'amount_too_large',
    });
    const noSuch = await caught(stripe.createRefund(requestOf(input, { chargeId: 'pi_nosuch' }), uniq('rk')));
    expect(noSuch).toMatchObject({ kind: 'rejected', code: 'resource_missing' });
    expect(await refundsAt(sb, input.orderId)).toEqual([]);

    const key = uniq('rk');
    await stripe.createRefund(requestOf(input, { amount: 500 }), key);
    const reused = await caught(stripe.createRefund(requestOf(input, { amount: 600 }), key));
    expect(reused).toMatchObject({ kind: 'key_conflict', definite: false, code: 'idempotency_key_reused' });
    expect(await refundsAt(sb, input.orderId)).toHaveLength(1);
  });

  it('a lost answer and a 500 are uncertain; a replay under the same key settles it with the one refund', async () => {
    const stripe = stripeAt(sb.url);
    const input = await chargedOrder(sb);
    const key = uniq('rk');
    await fault(sb, { endpoint: 'refunds.create', kind: 'drop_after' });
    expect(await caught(stripe.createRefund(requestOf(input), key))).toMatchObject({ kind: 'uncertain' });
    const replayed = await stripe.createRefund(requestOf(input), key);
    expect((await refundsAt(sb, input.orderId)).map((r) => r.id)).toEqual([replayed.id]);

    const other = await chargedOrder(sb);
    await fault(sb, { endpoint: 'refunds.create', kind: 'fail_after' });
    expect(await caught(stripe.createRefund(requestOf(other), key + 'x'))).toMatchObject({
      kind: 'uncertain',
      status: 500,
    });
    await stripe.createRefund(requestOf(other), key + 'x');
    expect(await refundsAt(sb, other.orderId)).toHaveLength(1);
  });

  it('searchRefund lists the PaymentIntent’s refunds: found by both references once the listing caught up', async () => {
    const stripe = stripeAt(sb.url);
    const input = await chargedOrder(sb);
    const key = uniq('rk');
    const made = await stripe.createRefund(requestOf(input), key);
    // Another refund of the same PaymentIntent, under another key: never taken for this one.
    await stripe.createRefund(requestOf(input, { amount: 200 }), uniq('rk'));
    const ref = { chargeId: input.chargeId, idempotencyKey: key, operationKey: input.key };
    const found = await until('the listing to catch up', () => stripe.searchRefund!(ref), {
      done: (r) => r !== null,
    });
    expect(found).toMatchObject({ id: made.id, status: 'succeeded', amount: 1000 });
    // Both references must match: the operation key alone, or the key alone, is not enough.
    expect(await stripe.searchRefund!({ ...ref, operationKey: `${input.key}x` })).toBeNull();
    expect(await stripe.searchRefund!({ ...ref, idempotencyKey: `${key}x` })).toBeNull();
    // The lookup fault endpoint applies to the listing.
    await fault(sb, { endpoint: 'refunds.lookup', kind: 'fail_before' });
    expect(await caught(stripe.searchRefund!(ref))).toMatchObject({ kind: 'uncertain', status: 500 });
  });
});

describe('the refund step with the Stripe adapter (replay, then a lagging listing)', () => {
  it('a lost answer: the takeover replays under the same key; one refund', async () => {
    const ledger = new Ledger(pool, { leaseMs: 5_000 });
    const deps = { ledger, payments: stripeAt(sb.url) };
    const input = await chargedOrder(sb);
    await fault(sb, { endpoint: 'refunds.create', kind: 'drop_after' });
    const first = await runRefund(deps, input).then(
      () => null,
      (e: unknown) => e,
    );
    expect(isLedgerError(first, 'outcome_unknown')).toBe(true);
    const r = await runRefund(deps, input);
    expect(r).toMatchObject({ outcome: 'succeeded', reconciled: true });
    expect((await refundsAt(sb, input.orderId)).map((x) => x.id)).toEqual([r.providerRefundId]);
  });

  it('reconcileRefund (no request at hand) lists: a young "not found" inside the window means perform again, a replay', async () => {
    const ledger = new Ledger(pool, { leaseMs: 5_000 });
    const deps = { ledger, payments: stripeAt(slowIndex.url, { searchLagMs: H }) };
    const input = await chargedOrder(slowIndex);
    await fault(slowIndex, { endpoint: 'refunds.create', kind: 'drop_after' });
    await runRefund(deps, input).catch(() => undefined);
    // The listing lags an hour: the refund can't be seen yet.
    expect(await reconcileRefund(deps, input)).toMatchObject({ settled: false, performAgain: true });
    // Performing again is a replay under the same key: the refund that exists, not a second one.
    expect(await runRefund(deps, input)).toMatchObject({ outcome: 'succeeded' });
    expect(await refundsAt(slowIndex, input.orderId)).toHaveLength(1);
  });

  it('past the key window, a lagging "not found" proves nothing: no second refund, the record stays unknown', async () => {
    const ledger = new Ledger(pool, { leaseMs: 5_000 });
    const keyWindowMs = 1_500;
    const deps = { ledger, payments: stripeAt(lagging.url, { keyWindowMs, searchLagMs: H }) };
    const input = await chargedOrder(lagging);
    await fault(lagging, { endpoint: 'refunds.create', kind: 'drop_after' });
    await runRefund(deps, input).catch(() => undefined);
    const scope = refundScope(input);
    const record = (await ledger.get(scope))!;
    expect(record.state).toBe('unknown');
    // Until the record is past the window and the sandbox has forgotten the key: a replay now
    // would refund a second time.
    await until(
      'the key window has passed',
      () => !withinKeyWindow(record, keyWindowMs) && Date.now() > record.createdAt.getTime() + keyWindowMs,
    );
    const again = await runRefund(deps, input).then(
      () => null,
      (e: unknown) => e,
    );
    expect(isLedgerError(again, 'outcome_unknown')).toBe(true);
    expect(await reconcileRefund(deps, input)).toMatchObject({ settled: false, outcome: null });
    expect((await ledger.get(scope))!.state).toBe('unknown');
    expect(await refundsAt(lagging, input.orderId)).toHaveLength(1);
  });

  it('past the window and the lag, "not found" is proof: settled failed with no refund, never refunded', async () => {
    const ledger = new Ledger(pool, { leaseMs: 5_000 });
    const keyWindowMs = 1_500;
    const deps = { ledger, payments: stripeAt(sb.url, { keyWindowMs, searchLagMs: 1 }) };
    const input = await chargedOrder(sb);
    // A 500 before anything happened: uncertain, and nothing exists.
    await fault(sb, { endpoint: 'refunds.create', kind: 'fail_before' });
    await runRefund(deps, input).catch(() => undefined);
    const scope = refundScope(input);
    const record = (await ledger.get(scope))!;
    expect(record.state).toBe('unknown');
    // Past the window plus the adapter's declared lag (1 ms), and past the sandbox's own listing lag.
    await until(
      'the key window and the lag have passed',
      () => Date.now() > record.createdAt.getTime() + keyWindowMs + 400,
    );
    expect(await reconcileRefund(deps, input)).toMatchObject({
      settled: true,
      outcome: 'failed',
      chargeId: null,
    });
    expect(await refundsAt(sb, input.orderId)).toEqual([]);
  });

  it('without the charge, a listing provider cannot be asked: the refund stays unsettled, never presumed', async () => {
    const ledger = new Ledger(pool, { leaseMs: 5_000 });
    const deps = { ledger, payments: stripeAt(slowIndex.url, { searchLagMs: H }) };
    const input = await chargedOrder(slowIndex);
    await fault(slowIndex, { endpoint: 'refunds.create', kind: 'drop_after' });
    await runRefund(deps, input).catch(() => undefined);
    expect(await reconcileRefund(deps, { tenantId: input.tenantId, key: input.key })).toMatchObject({
      settled: false,
      outcome: null,
    });
    expect((await ledger.get(refundScope(input)))!.state).toBe('unknown');
  });
});
