/**
 * The charge activities against the REAL sandbox provider over HTTP and the
 * real ledger in Postgres, in the SDK's MockActivityEnvironment: what each
 * provider answer leaves in the ledger, and how an attempt heals (or stops)
 * after it. Every test ends by counting the charges the provider really made.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import net from 'node:net';
import { MockActivityEnvironment } from '@temporalio/testing';
import { ApplicationFailure } from '@temporalio/common';
import { createOrderActivities, type ChargeResult } from '../../activities/order.ts';
import { Ledger, downstreamKey, type Scope } from 'onceflow';
import { createSandboxEmailProvider, createSandboxPaymentProvider } from '../../src/providers/sandbox.ts';
import type { PaymentProvider } from '../../src/providers/types.ts';
import { FAILURE } from '../../src/orders/contract.ts';
import { KEY_WINDOW_PASSED } from '../../src/steps/payment.ts';
import type { Pool } from '../../src/db/index.ts';
import { testPool } from '../support/env.ts';
import { chargeArgs } from './support.ts';
import { startTestSandbox, type Json, type TestSandbox } from '../sandbox/harness.ts';
import { deferred, until } from '../support/wait.ts';

let pool: Pool;
let sb: TestSandbox;
beforeAll(async () => {
  pool = testPool(8);
  sb = await startTestSandbox({ dispatch: false });
});
afterAll(async () => {
  await sb?.stop();
  await pool?.end();
});
beforeEach(async () => {
  expect((await sb.call('DELETE', '/_sandbox/faults')).status).toBe(200);
});

const sandboxPayments = (timeoutMs = 10_000) => createSandboxPaymentProvider({ baseUrl: sb.url, timeoutMs });
const sandboxEmail = () => createSandboxEmailProvider({ baseUrl: sb.url, timeoutMs: 10_000 });

function activities(
  opts: { ledger?: Ledger; payments?: PaymentProvider; providerKeyWindowMs?: number } = {},
) {
  return createOrderActivities({
    pool,
    ledger: opts.ledger ?? new Ledger(pool, { leaseMs: 5_000 }),
    payments: opts.payments ?? sandboxPayments(),
    email: sandboxEmail(),
    ...(opts.providerKeyWindowMs !== undefined ? { providerKeyWindowMs: opts.providerKeyWindowMs } : {}),
  });
}

const scopeOf = (args: { key: string }): Scope => ({
  tenantId: 'acme',
  operationType: 'payment.charge',
  key: args.key,
});

async function record(args: { key: string }) {
  const { rows } = await pool.query(
    `select state, owner_token, error from operations where tenant_id = $1 and operation_type = $2 and key = $3`,
    ['acme', 'payment.charge', args.key],
  );
  return (rows[0] as { state: string; owner_token: string | null; error: Json } | undefined) ?? null;
}

/** The charges the sandbox really made for this order. */
async function charges(args: { orderId: string }): Promise<Json[]> {
  return (await sb.call('GET', `/_sandbox/charges?order_id=${args.orderId}`)).body.data as Json[];
}

const fault = async (body: Record<string, unknown>) =>
  expect((await sb.call('POST', '/_sandbox/faults', { body })).status).toBe(201);

async function failureOf(p: Promise<unknown>): Promise<ApplicationFailure> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ApplicationFailure);
  return err as ApplicationFailure;
}

/** A port nothing listens on: connections to it are refused before any byte is sent. */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((r) => server.close(() => r()));
  return port;
}

describe('what a provider answer leaves in the ledger', () => {
  it("an idempotency_error (the key's first request may have charged) marks the charge unknown, never releases it", async () => {
    const args = chargeArgs();
    // An earlier request under the same downstream key, with other parameters, did charge.
    const earlier = await sandboxPayments().createCharge(
      {
        amount: 999,
        currency: 'usd',
        paymentMethod: 'pm_card_visa',
        metadata: { order_id: args.orderId, tenant_id: 'acme' },
      },
      downstreamKey(scopeOf(args)),
    );
    const acts = activities();
    const failure = await failureOf(new MockActivityEnvironment().run(acts.chargePayment, args));
    expect(failure.type).toBe(FAILURE.paymentOutcomeUnknown);
    expect(failure.nonRetryable).toBe(false);
    expect(await record(args)).toMatchObject({ state: 'unknown', owner_token: null });

    // The retry reconciles and finds what the provider did under the key; it never charges again.
    const retry = await new MockActivityEnvironment({ attempt: 2 }).run(acts.chargePayment, args);
    expect(retry).toMatchObject({ outcome: 'succeeded', chargeId: earlier.id, reconciled: true });
    expect((await charges(args)).map((c) => c.id)).toEqual([earlier.id]);
  });

  it('connection refused (nothing sent): the claim is released, the failure is retryable, the retry charges once', async () => {
    const args = chargeArgs();
    const down = activities({
      payments: createSandboxPaymentProvider({
        baseUrl: `http://127.0.0.1:${await closedPort()}`,
        timeoutMs: 5_000,
      }),
    });
    const failure = await failureOf(new MockActivityEnvironment().run(down.chargePayment, args));
    expect(failure.type).toBe(FAILURE.providerUnavailable);
    expect(failure.nonRetryable).toBe(false);
    expect(await record(args)).toBeNull();

    const up = activities();
    const retry = (await new MockActivityEnvironment({ attempt: 2 }).run(
      up.chargePayment,
      args,
    )) as ChargeResult;
    expect(retry).toMatchObject({ outcome: 'succeeded', reconciled: false, replayed: false });
    const made = await charges(args);
    expect(made).toHaveLength(1);
    expect(made[0].idempotency_key).toBe(downstreamKey(scopeOf(args)));
    expect(made[0].id).toBe(retry.chargeId);
  });

  it('a validation rejection (nothing happened) is still a final PaymentRejected, claim released', async () => {
    const args = { ...chargeArgs(), paymentMethod: 'pm_nope' };
    const failure = await failureOf(new MockActivityEnvironment().run(activities().chargePayment, args));
    expect(failure.type).toBe(FAILURE.paymentRejected);
    expect(failure.nonRetryable).toBe(true);
    expect(await record(args)).toBeNull();
    expect(await charges(args)).toHaveLength(0);
  });
});

describe('unknown, and the provider never saw the key', () => {
  async function unknownCharge(acts: ReturnType<typeof activities>) {
    const args = chargeArgs();
    // The provider fails before doing anything, but answers 500: we can't know that, so: unknown.
    await fault({ endpoint: 'charges.create', kind: 'fail_before', count: 1 });
    const failure = await failureOf(new MockActivityEnvironment().run(acts.chargePayment, args));
    expect(failure.type).toBe(FAILURE.paymentOutcomeUnknown);
    expect(await record(args)).toMatchObject({ state: 'unknown' });
    return args;
  }

  it('inside the key window: reconcileCharge says performAgain; chargePayment charges exactly once under the same key', async () => {
    const acts = activities();
    const args = await unknownCharge(acts);
    const env = new MockActivityEnvironment();
    expect(await env.run(acts.reconcileCharge, args)).toEqual({
      settled: false,
      outcome: null,
      chargeId: null,
      performAgain: true,
    });
    expect(await record(args)).toMatchObject({ state: 'unknown' });
    expect(await charges(args)).toHaveLength(0);

    const again = (await new MockActivityEnvironment({ attempt: 1 }).run(
      acts.chargePayment,
      args,
    )) as ChargeResult;
    expect(again).toMatchObject({ outcome: 'succeeded', reconciled: false });
    const made = await charges(args);
    expect(made).toHaveLength(1);
    expect(made[0].idempotency_key).toBe(downstreamKey(scopeOf(args)));
    expect(await env.run(acts.reconcileCharge, args)).toEqual({
      settled: true,
      outcome: 'succeeded',
      chargeId: again.chargeId,
    });
  });

  it('past the key window: no performAgain, a clear error, and chargePayment does not charge', async () => {
    const acts = activities({ providerKeyWindowMs: 1 });
    const args = await unknownCharge(acts);
    const result = await new MockActivityEnvironment().run(acts.reconcileCharge, args);
    expect(result).toEqual({ settled: false, outcome: null, chargeId: null, error: KEY_WINDOW_PASSED });
    const failure = await failureOf(
      new MockActivityEnvironment({ attempt: 2 }).run(acts.chargePayment, args),
    );
    expect(failure.type).toBe(FAILURE.paymentOutcomeUnknown);
    expect(failure.message).toMatch(/key window/);
    expect(await record(args)).toMatchObject({ state: 'unknown' });
    expect(await charges(args)).toHaveLength(0);
  });
});

describe('heartbeats renew the claim while the provider call runs', () => {
  it('a provider call slower than the lease is not taken over by the next attempt', async () => {
    const ledger = new Ledger(pool, { leaseMs: 600 });
    const acts = activities({ ledger });
    const args = chargeArgs();
    await fault({ endpoint: 'charges.create', kind: 'delay', count: 1, delayMs: 4_000 });
    const env = new MockActivityEnvironment({ heartbeatTimeoutMs: 400 });
    let heartbeats = 0;
    env.on('heartbeat', () => heartbeats++);
    const first = env.run(acts.chargePayment, args);
    await until('the claim', async () => (await record(args)) !== null);
    const { rows } = await pool.query<{ created_at: Date }>(
      `select created_at from operations where tenant_id = 'acme' and operation_type = 'payment.charge' and key = $1`,
      [args.key],
    );
    // Three leases later, with the provider still working, a second attempt must wait.
    await until('three leases', async () => {
      const r = await pool.query<{ ok: boolean }>(
        `select now() > $1::timestamptz + interval '1800 milliseconds' as ok`,
        [rows[0]!.created_at],
      );
      return r.rows[0]?.ok === true;
    });
    const second = await failureOf(new MockActivityEnvironment({ attempt: 2 }).run(acts.chargePayment, args));
    expect(second.type).toBe(FAILURE.operationInProgress);
    expect(await first).toMatchObject({ outcome: 'succeeded', reconciled: false });
    expect(heartbeats).toBeGreaterThanOrEqual(3);
    expect(await charges(args)).toHaveLength(1);
    expect(await record(args)).toMatchObject({ state: 'succeeded' });
  });

  it('a refused renewal stops the attempt before it calls the provider, and it does not complete', async () => {
    const real = sandboxPayments();
    const lookingUp = deferred();
    const answer = deferred();
    let creates = 0;
    const gated: PaymentProvider = {
      capabilities: real.capabilities,
      async createCharge(req, key) {
        creates++;
        return real.createCharge(req, key);
      },
      async findChargeByIdempotencyKey(key) {
        lookingUp.resolve();
        await answer.promise;
        return real.findChargeByIdempotencyKey(key);
      },
      createRefund: (req, key) => real.createRefund(req, key),
      findRefundByIdempotencyKey: (key) => real.findRefundByIdempotencyKey(key),
    };
    const acts = activities({ payments: gated });
    const args = chargeArgs();
    await fault({ endpoint: 'charges.create', kind: 'fail_before', count: 1 });
    await failureOf(new MockActivityEnvironment().run(acts.chargePayment, args));
    expect(creates).toBe(1);

    // The retry takes the unknown record over and asks the provider...
    const retry = new MockActivityEnvironment({ attempt: 2 }).run(acts.chargePayment, args);
    await lookingUp.promise;
    // ...while someone else takes the claim (its lease lapsed while this process was paused).
    await pool.query(
      `update operations set owner_token = gen_random_uuid()
        where tenant_id = 'acme' and operation_type = 'payment.charge' and key = $1`,
      [args.key],
    );
    const thief = (await record(args))!.owner_token;
    answer.resolve();
    const failure = await failureOf(retry);
    expect(failure.type).toBe(FAILURE.operationInProgress);
    expect(creates).toBe(1); // only the first, failed-before request
    expect(await charges(args)).toHaveLength(0);
    expect(await record(args)).toMatchObject({ state: 'unknown', owner_token: thief });
  });
});
