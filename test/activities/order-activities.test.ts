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
import { Ledger, downstreamKey } from 'onceflow';
import {
  ProviderError,
  type Charge,
  type EmailProvider,
  type Message,
  type PaymentProvider,
} from '../../src/providers/types.ts';
import { SANDBOX_CAPABILITIES } from '../../src/providers/sandbox.ts';
import { FAILURE } from '../../src/orders/contract.ts';
import { insertAcceptedOrder } from '../../src/orders/sql.ts';
import { stepKeys, type OrderStatus } from '../../src/orders/model.ts';
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

/** The order row of a charge's arguments, as the API inserts it (status accepted). */
async function acceptedOrder(args: ReturnType<typeof chargeArgs>): Promise<void> {
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
    await acceptedOrder(args);
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

describe('statuses carried by a step (the charge, the receipt)', () => {
  /** An email provider that remembers what it sent, by key. */
  function recordingEmail() {
    const sent = new Map<string, Message>();
    const email: EmailProvider = {
      capabilities: SANDBOX_CAPABILITIES,
      async sendMessage(req, key) {
        const message: Message = sent.get(key) ?? {
          id: `msg_${sent.size + 1}`,
          status: 'sent',
          to: req.to,
          idempotencyKey: key,
          created: new Date().toISOString(),
        };
        sent.set(key, message);
        return message;
      },
      findMessageByIdempotencyKey: async (key) => sent.get(key) ?? null,
    };
    return { email, sent };
  }

  /** An order the charge has moved to payment_pending (paid may follow only from there). */
  async function chargedOrder(
    args: ReturnType<typeof chargeArgs>,
    acts: ReturnType<typeof createOrderActivities>,
  ): Promise<void> {
    await acceptedOrder(args);
    const key = stepKeys.status(args.workflowId, 'payment_pending');
    await new MockActivityEnvironment().run(acts.setOrderStatus, {
      ...args,
      key,
      status: 'payment_pending' as const,
    });
  }

  const row = async (args: ReturnType<typeof chargeArgs>) =>
    (
      await pool.query('select status, charge_id, receipt_id from orders where tenant_id = $1 and id = $2', [
        'acme',
        args.orderId,
      ])
    ).rows[0];

  /** Plants a record with another fingerprint under a status key: any write under it fails for good. */
  const plantConflict = (args: ReturnType<typeof chargeArgs>, status: OrderStatus) =>
    ledger.runLocal(
      { tenantId: 'acme', operationType: 'order.status', key: stepKeys.status(args.workflowId, status) },
      { schemaVersion: 1, value: { planted: true } },
      async () => ({ planted: true }),
    );

  /** A status for the step to write, under its own key. */
  const carry = (args: ReturnType<typeof chargeArgs>, status: OrderStatus) => ({
    status,
    key: stepKeys.status(args.workflowId, status),
  });

  /** The receipt's arguments with paid before it and completed after it, as the workflow sends them. */
  const receiptCarryingStatus = (args: ReturnType<typeof chargeArgs>) => ({
    ...args,
    key: stepKeys.receipt(args.workflowId),
    to: 'a@example.com',
    chargeId: 'ch_9',
    before: carry(args, 'paid'),
    after: carry(args, 'completed'),
  });

  it('the charge writes payment_pending first, under the status key, and an attempt again replays it', async () => {
    const payments = scriptedPayments(['charge-then-timeout']);
    const acts = createOrderActivities({ pool, ledger, payments: payments.provider, email: noEmail });
    const args = chargeArgs();
    await acceptedOrder(args);
    const before = carry(args, 'payment_pending');
    const failure = await failureOf(
      new MockActivityEnvironment().run(acts.chargePayment, { ...args, before }),
    );
    expect(failure.type).toBe(FAILURE.paymentOutcomeUnknown);
    expect((await row(args)).status).toBe('payment_pending');
    const second = await new MockActivityEnvironment({ attempt: 2 }).run(acts.chargePayment, {
      ...args,
      before,
    });
    expect(second).toMatchObject({ outcome: 'succeeded', reconciled: true });
    expect(payments.calls()).toBe(1);
    const status = await ledger.get({ tenantId: 'acme', operationType: 'order.status', key: before.key });
    expect(status?.state).toBe('succeeded');
  });

  it('a payment_pending that cannot be written: non-retryable StatusNotRecorded, and nothing charged', async () => {
    const payments = scriptedPayments([]);
    const acts = createOrderActivities({ pool, ledger, payments: payments.provider, email: noEmail });
    const args = chargeArgs();
    await acceptedOrder(args);
    await plantConflict(args, 'payment_pending');
    const before = carry(args, 'payment_pending');
    const failure = await failureOf(
      new MockActivityEnvironment().run(acts.chargePayment, { ...args, before }),
    );
    expect(failure.type).toBe(FAILURE.statusNotRecorded);
    expect(failure.nonRetryable).toBe(true);
    expect(failure.message).toMatch(/status payment_pending .* was not recorded/);
    expect(payments.calls()).toBe(0);
    expect(await ledger.get({ tenantId: 'acme', operationType: 'payment.charge', key: args.key })).toBeNull();
    expect((await row(args)).status).toBe('accepted');
  });

  it('a paid that cannot be written: StatusNotRecorded, nothing sent, and the receipt claim written beside it released', async () => {
    const { email, sent } = recordingEmail();
    const acts = createOrderActivities({ pool, ledger, payments: scriptedPayments([]).provider, email });
    const args = chargeArgs();
    await chargedOrder(args, acts);
    await plantConflict(args, 'paid');
    const receipt = receiptCarryingStatus(args);
    const failure = await failureOf(new MockActivityEnvironment().run(acts.sendReceipt, receipt));
    expect(failure.type).toBe(FAILURE.statusNotRecorded);
    expect(failure.message).toMatch(/status paid .* was not recorded/);
    expect(sent.size).toBe(0);
    expect(
      await ledger.get({ tenantId: 'acme', operationType: 'email.receipt', key: receipt.key }),
    ).toBeNull();
  });

  it('a payment_pending that cannot be written after a charge whose answer was lost: StatusNotRecorded, no second charge', async () => {
    const payments = scriptedPayments(['charge-then-timeout']);
    const acts = createOrderActivities({ pool, ledger, payments: payments.provider, email: noEmail });
    const args = chargeArgs();
    await acceptedOrder(args);
    expect((await failureOf(new MockActivityEnvironment().run(acts.chargePayment, args))).type).toBe(
      FAILURE.paymentOutcomeUnknown,
    );
    await plantConflict(args, 'payment_pending');
    const failure = await failureOf(
      new MockActivityEnvironment({ attempt: 2 }).run(acts.chargePayment, {
        ...args,
        before: carry(args, 'payment_pending'),
      }),
    );
    expect(failure.type).toBe(FAILURE.statusNotRecorded);
    expect(payments.calls()).toBe(1);
    // The claim beside the status took the record over and settled it from the provider's answer.
    const charge = await ledger.get({ tenantId: 'acme', operationType: 'payment.charge', key: args.key });
    expect(charge?.state).toBe('succeeded');
  });

  it('the receipt writes paid before it sends and completed, with both IDs, after', async () => {
    const { email, sent } = recordingEmail();
    const acts = createOrderActivities({ pool, ledger, payments: scriptedPayments([]).provider, email });
    const args = chargeArgs();
    await chargedOrder(args, acts);
    const receipt = receiptCarryingStatus(args);
    expect(await new MockActivityEnvironment().run(acts.sendReceipt, receipt)).toMatchObject({
      messageId: 'msg_1',
    });
    expect(await row(args)).toEqual({ status: 'completed', charge_id: 'ch_9', receipt_id: 'msg_1' });
    expect(sent.size).toBe(1);
  });

  it('a completed that cannot be written after the send: StatusNotRecorded; the receipt stays sent once', async () => {
    const { email, sent } = recordingEmail();
    const acts = createOrderActivities({ pool, ledger, payments: scriptedPayments([]).provider, email });
    const args = chargeArgs();
    await chargedOrder(args, acts);
    await plantConflict(args, 'completed');
    const receipt = receiptCarryingStatus(args);
    const failure = await failureOf(new MockActivityEnvironment().run(acts.sendReceipt, receipt));
    expect(failure.type).toBe(FAILURE.statusNotRecorded);
    expect(failure.nonRetryable).toBe(true);
    expect((await row(args)).status).toBe('paid');
    // What the workflow does next: the receipt as its own step, under the same key, replays.
    const { before: _b, after: _a, ...plain } = receipt;
    expect(await new MockActivityEnvironment().run(acts.sendReceipt, plain)).toMatchObject({
      messageId: 'msg_1',
      replayed: true,
    });
    expect(sent.size).toBe(1);
  });
});
