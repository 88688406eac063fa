/**
 * The order activities at the Temporal boundary, in the SDK's
 * MockActivityEnvironment, over the real ledger in real Postgres. The
 * providers are scripted here to produce exact answers; the same activities
 * against the real sandbox are in self-healing.test.ts, and end to end in
 * test/orders.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MockActivityEnvironment } from '@temporalio/testing';
import { ApplicationFailure } from '@temporalio/common';
import { createOrderActivities } from '../../activities/order.ts';
import { Ledger, downstreamKey } from '../../src/ledger/index.ts';
import {
  ProviderError,
  type Charge,
  type EmailProvider,
  type PaymentProvider,
} from '../../src/providers/types.ts';
import { SANDBOX_CAPABILITIES } from '../../src/providers/sandbox.ts';
import { FAILURE } from '../../src/orders/contract.ts';
import { insertAcceptedOrder } from '../../src/orders/sql.ts';
import { stepKeys } from '../../src/orders/model.ts';
import type { Pool } from '../../src/db/index.ts';
import { testPool } from '../support/env.ts';
import { chargeArgs } from './support.ts';

let pool: Pool;
let ledger: Ledger;
beforeAll(() => {
  pool = testPool(5);
  ledger = new Ledger(pool, { leaseMs: 5_000 });
});
afterAll(async () => {
  await pool?.end();
});

/** A provider whose createCharge answers from a script, and which remembers what it really charged. */
function scriptedPayments(script: Array<'ok' | ProviderError | 'charge-then-timeout'>) {
  const charged = new Map<string, Charge>();
  let calls = 0;
  const provider: PaymentProvider = {
    capabilities: SANDBOX_CAPABILITIES,
    async createCharge(req, key) {
      const step = script[calls++] ?? 'ok';
      if (step instanceof ProviderError) throw step;
      const charge: Charge = charged.get(key) ?? {
        id: `ch_${charged.size + 1}`,
        status: 'succeeded',
        amount: req.amount,
        currency: req.currency,
        idempotencyKey: key,
        metadata: req.metadata,
        created: new Date().toISOString(),
      };
      charged.set(key, charge);
      if (step === 'charge-then-timeout')
        throw new ProviderError('uncertain', 'no response within 1000 ms', { code: 'timeout' });
      return charge;
    },
    async findChargeByIdempotencyKey(key) {
      return charged.get(key) ?? null;
    },
    // The order's steps never refund.
    createRefund: () => Promise.reject(new Error('not used')),
    findRefundByIdempotencyKey: () => Promise.resolve(null),
  };
  return { provider, charged, calls: () => calls };
}

const noEmail: EmailProvider = {
  capabilities: SANDBOX_CAPABILITIES,
  sendMessage: () => Promise.reject(new Error('not used')),
  findMessageByIdempotencyKey: () => Promise.resolve(null),
};

async function failureOf(p: Promise<unknown>): Promise<ApplicationFailure> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ApplicationFailure);
  return err as ApplicationFailure;
}

describe('chargePayment failure mapping', () => {
  it('a request the provider refuses outright: non-retryable PaymentRejected, claim released', async () => {
    const payments = scriptedPayments([
      new ProviderError('rejected', 'HTTP 400 unknown payment method', {
        code: 'invalid_request_error',
        status: 400,
      }),
    ]);
    const acts = createOrderActivities({ pool, ledger, payments: payments.provider, email: noEmail });
    const args = chargeArgs();
    const failure = await failureOf(new MockActivityEnvironment().run(acts.chargePayment, args));
    expect(failure.type).toBe(FAILURE.paymentRejected);
    expect(failure.nonRetryable).toBe(true);
    expect(await ledger.get({ tenantId: 'acme', operationType: 'payment.charge', key: args.key })).toBeNull();
  });

  it('an idempotency mismatch at the provider proves nothing: retryable PaymentOutcomeUnknown, record unknown', async () => {
    const payments = scriptedPayments([
      new ProviderError('key_conflict', 'HTTP 400 key reused', {
        code: 'idempotency_key_reused',
        status: 400,
      }),
    ]);
    const acts = createOrderActivities({ pool, ledger, payments: payments.provider, email: noEmail });
    const args = chargeArgs();
    const failure = await failureOf(new MockActivityEnvironment().run(acts.chargePayment, args));
    expect(failure.type).toBe(FAILURE.paymentOutcomeUnknown);
    expect(failure.nonRetryable).toBe(false);
    expect(
      (await ledger.get({ tenantId: 'acme', operationType: 'payment.charge', key: args.key }))?.state,
    ).toBe('unknown');
  });

  it('a lost response is a retryable PaymentOutcomeUnknown; the next attempt reconciles instead of charging', async () => {
    const payments = scriptedPayments(['charge-then-timeout']);
    const acts = createOrderActivities({ pool, ledger, payments: payments.provider, email: noEmail });
    const args = chargeArgs();
    const failure = await failureOf(new MockActivityEnvironment().run(acts.chargePayment, args));
    expect(failure.type).toBe(FAILURE.paymentOutcomeUnknown);
    expect(failure.nonRetryable).toBe(false);
    const scope = { tenantId: 'acme', operationType: 'payment.charge', key: args.key };
    expect((await ledger.get(scope))?.state).toBe('unknown');

    const second = await new MockActivityEnvironment({ attempt: 2 }).run(acts.chargePayment, args);
    expect(second).toMatchObject({ outcome: 'succeeded', chargeId: 'ch_1', reconciled: true });
    expect(payments.calls()).toBe(1);
    expect([...payments.charged.keys()]).toEqual([downstreamKey(scope)]);
  });
});

describe('reconcileCharge', () => {
  it('with no claim, asks the provider by the same key: nothing there means the charge never started', async () => {
    const payments = scriptedPayments([]);
    const acts = createOrderActivities({ pool, ledger, payments: payments.provider, email: noEmail });
    const args = chargeArgs();
    const env = new MockActivityEnvironment();
    expect(await env.run(acts.reconcileCharge, args)).toEqual({
      settled: false,
      outcome: null,
      chargeId: null,
      notStarted: true,
    });
    // The provider charged under the key (the record was lost): that is what reconciliation reports.
    const scope = { tenantId: 'acme', operationType: 'payment.charge', key: args.key };
    await payments.provider.createCharge(
      { amount: 2500, currency: 'usd', paymentMethod: 'pm_card_visa', metadata: {} },
      downstreamKey(scope),
    );
    expect(await env.run(acts.reconcileCharge, args)).toEqual({
      settled: true,
      outcome: 'succeeded',
      chargeId: 'ch_1',
    });
  });
});

describe('setOrderStatus', () => {
  it('moves forward only: a late transition to an earlier status changes nothing', async () => {
    const acts = createOrderActivities({
      pool,
      ledger,
      payments: scriptedPayments([]).provider,
      email: noEmail,
    });
    const args = chargeArgs();
    await insertAcceptedOrder(pool, {
      tenantId: 'acme',
      orderId: args.orderId,
      workflowId: args.workflowId,
      amount: 2500,
      currency: 'usd',
      customerId: 'cus_1',
      customerEmail: 'a@example.com',
      items: [{ sku: 'SKU-1', quantity: 1, unitAmount: 2500 }],
      paymentMethod: 'pm_card_visa',
    });
    const env = new MockActivityEnvironment();
    const set = (status: 'payment_pending' | 'paid', key = stepKeys.status(args.workflowId, status)) =>
      env.run(acts.setOrderStatus, { ...args, key, status });
    expect(await set('payment_pending')).toEqual({ applied: true, status: 'payment_pending' });
    expect(await set('paid')).toEqual({ applied: true, status: 'paid' });
    // A duplicate of an earlier step under its own key replays; under a fresh key it is refused by the state machine.
    expect(await set('payment_pending')).toEqual({ applied: true, status: 'payment_pending' });
    expect(await set('payment_pending', `${args.workflowId}/status/payment_pending/late`)).toEqual({
      applied: false,
      status: 'paid',
    });
    const { rows } = await pool.query('select status from orders where tenant_id = $1 and id = $2', [
      'acme',
      args.orderId,
    ]);
    expect(rows[0].status).toBe('paid');
  });
});
