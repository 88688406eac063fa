/**
 * The Stripe adapter (src/providers/stripe.ts, on the `stripe` package)
 * against the sandbox's Stripe surface (dev/sandbox/stripe.ts): every answer
 * mapped onto the ProviderError kinds with the sandbox client's meanings,
 * search with a lagging index, the key window, signed payment_intent events,
 * and the charge step's reconcile policy (src/steps/reconcile-plan.ts) end to end on
 * the real ledger: exactly one charge per key, counted at /_sandbox/charges.
 */
import http from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Ledger, isLedgerError, withinKeyWindow } from 'onceflow';
import { createStripePaymentProvider, searchQuery } from '../../src/providers/stripe.ts';
import { stripeSignatureVerifier, STRIPE_SIGNATURE_HEADER } from '../../src/providers/stripe-webhook.ts';
import { ProviderError, type ChargeRequest, type PaymentProvider } from '../../src/providers/types.ts';
import { NOT_CHARGED_CODE, chargeScope, reconcileCharge, runCharge } from '../../src/steps/payment.ts';
import { parseMetadataQuery, parseStripeForm } from '../../dev/sandbox/stripe.ts';
import type { Pool } from '../../src/db/index.ts';
import { testPool, uniq } from '../support/env.ts';
import { until } from '../support/wait.ts';
import { SECRET, startReceiver, startTestSandbox, type Json, type TestSandbox } from '../sandbox/harness.ts';
import { chargeArgs } from '../activities/support.ts';

const H = 60 * 60 * 1000;
let pool: Pool;
let sb: TestSandbox;
/** A second sandbox whose keys last 1.5 s and whose search lags 1 h: "the window passed and search lags". */
let lagging: TestSandbox;
/** Keys kept 24 h, search an hour behind. */
let slowIndex: TestSandbox;
beforeAll(async () => {
  slowIndex = await startTestSandbox({ dispatch: false, stripeSearchLagMs: H });
  pool = testPool(8);
  sb = await startTestSandbox({ dispatch: false, stripeSearchLagMs: 400 });
  lagging = await startTestSandbox({ dispatch: false, keyRetentionMs: 1_500, stripeSearchLagMs: H });
});
afterAll(async () => {
  await sb?.stop();
  await lagging?.stop();
  await slowIndex?.stop();
  await pool?.end();
});
beforeEach(async () => {
  expect((await sb.call('DELETE', '/_sandbox/faults')).status).toBe(200);
  expect((await lagging.call('DELETE', '/_sandbox/faults')).status).toBe(200);
});

function stripeAt(
  base: string,
  opts: { timeoutMs?: number; keyWindowMs?: number; searchLagMs?: number; secretKey?: string } = {},
): PaymentProvider {
  return createStripePaymentProvider({
    secretKey: opts.secretKey ?? 'sk_test_onceflow_sandbox',
    apiBase: base,
    timeoutMs: opts.timeoutMs ?? 5_000,
    keyWindowMs: opts.keyWindowMs ?? 24 * H,
    searchLagMs: opts.searchLagMs ?? 400,
  });
}

function request(overrides: Partial<ChargeRequest> = {}): ChargeRequest {
  const orderId = uniq('ord');
  return {
    amount: 2500,
    currency: 'usd',
    paymentMethod: 'pm_card_visa',
    description: `Order ${orderId}`,
    metadata: { order_id: orderId, tenant_id: 'acme', operation_key: `acme:${orderId}/charge` },
    ...overrides,
  };
}

async function chargesAt(s: TestSandbox, orderId: string): Promise<Json[]> {
  return (await s.call('GET', `/_sandbox/charges?order_id=${orderId}`)).body.data as Json[];
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

/** A real HTTP server that answers every request with one status and body. */
async function fixedServer(status: number, body: unknown) {
  const server = http.createServer((_req, res) => {
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

describe('the Stripe adapter against the sandbox', () => {
  it('charges once per key: a PaymentIntent created and confirmed in one call, replayed under the same key', async () => {
    const stripe = stripeAt(sb.url);
    const req = request();
    const key = uniq('dk');
    const first = await stripe.createCharge(req, key);
    expect(first).toMatchObject({ status: 'succeeded', amount: 2500, currency: 'usd', idempotencyKey: key });
    expect(first.id).toMatch(/^pi_/);
    expect(first.metadata).toMatchObject({ order_id: req.metadata.order_id, idempotency_key: key });
    expect(await stripe.createCharge(req, key)).toEqual(first);
    const made = await chargesAt(sb, req.metadata.order_id!);
    expect(made.map((c) => c.id)).toEqual([first.id]);
  });

  it('a decline is a definite failed charge, with the decline code', async () => {
    const stripe = stripeAt(sb.url);
    const req = request({ paymentMethod: 'pm_card_chargeDeclinedInsufficientFunds' });
    const charge = await stripe.createCharge(req, uniq('dk'));
    expect(charge).toMatchObject({ status: 'failed', failureCode: 'insufficient_funds' });
    expect(charge.id).toMatch(/^pi_/);
  });

  it('maps idempotency_error to key_conflict and validation to rejected (nothing stored)', async () => {
    const stripe = stripeAt(sb.url);
    const key = uniq('dk');
    await stripe.createCharge(request(), key);
    expect(await caught(stripe.createCharge(request({ amount: 999 }), key))).toMatchObject({
      kind: 'key_conflict',
      status: 400,
      definite: false,
    });
    const bad = request({ paymentMethod: 'pm_card_unknown' });
    expect(await caught(stripe.createCharge(bad, uniq('dk')))).toMatchObject({
      kind: 'rejected',
      status: 400,
    });
    expect(await chargesAt(sb, bad.metadata.order_id!)).toEqual([]);
  });

  it('maps a request still in flight under the same key to in_progress (409)', async () => {
    const stripe = stripeAt(sb.url);
    const req = request();
    const key = uniq('dk');
    await fault(sb, { endpoint: 'charges.create', kind: 'delay', delayMs: 1_500 });
    const slow = stripe.createCharge(req, key);
    await until('the slow request holds the key', async () =>
      ((await sb.call('GET', '/_sandbox/faults')).body.data as Json[]).every((f) => f.remaining === 0),
    );
    expect(await caught(stripe.createCharge(req, key))).toMatchObject({ kind: 'in_progress', status: 409 });
    expect((await slow).status).toBe('succeeded');
    expect(await chargesAt(sb, req.metadata.order_id!)).toHaveLength(1);
  });

  it('5xx, a dropped connection and a timeout are uncertain; the same key then settles it once', async () => {
    const stripe = stripeAt(sb.url, { timeoutMs: 700 });
    for (const [kind, count] of [
      ['fail_after', 1],
      ['drop_after', 1],
    ] as const) {
      const req = request();
      const key = uniq('dk');
      await fault(sb, { endpoint: 'charges.create', kind, count });
      const err = await caught(stripe.createCharge(req, key));
      expect(err).toMatchObject({ kind: 'uncertain', definite: false });
      // The effect happened; replaying under the same key answers it, without a second charge.
      expect((await stripe.createCharge(req, key)).status).toBe('succeeded');
      expect(await chargesAt(sb, req.metadata.order_id!)).toHaveLength(1);
    }
    const req = request();
    await fault(sb, { endpoint: 'charges.create', kind: 'delay', delayMs: 1_500 });
    expect(await caught(stripe.createCharge(req, uniq('dk')))).toMatchObject({
      kind: 'uncertain',
      code: 'timeout',
    });
  });

  it('no hidden retry: stripe-node does not resend after a closed connection (only Temporal and the ledger retry)', async () => {
    // A sandbox that forgets keys at once: a resend, even under the same key, would charge again.
    const forgetful = await startTestSandbox({ dispatch: false, keyRetentionMs: 1 });
    try {
      const req = request();
      await fault(forgetful, { endpoint: 'charges.create', kind: 'drop_after' });
      expect(await caught(stripeAt(forgetful.url).createCharge(req, uniq('dk')))).toMatchObject({
        kind: 'uncertain',
        code: 'network',
      });
      expect(await chargesAt(forgetful, req.metadata.order_id!)).toHaveLength(1);
    } finally {
      await forgetful.stop();
    }
  });

  it('fail_before is uncertain too (a 500 proves nothing), and nothing was charged', async () => {
    const stripe = stripeAt(sb.url);
    const req = request();
    await fault(sb, { endpoint: 'charges.create', kind: 'fail_before' });
    expect(await caught(stripe.createCharge(req, uniq('dk')))).toMatchObject({
      kind: 'uncertain',
      status: 500,
    });
    expect(await chargesAt(sb, req.metadata.order_id!)).toEqual([]);
  });

  it('a refused connection is not_sent; 429 is uncertain; 401 (a bad key) is rejected', async () => {
    const closed = await new Promise<number>((resolve) => {
      const s = net.createServer();
      s.listen(0, '127.0.0.1', () => {
        const port = (s.address() as AddressInfo).port;
        s.close(() => resolve(port));
      });
    });
    expect(await caught(stripeAt(`http://127.0.0.1:${closed}`).createCharge(request(), 'k'))).toMatchObject({
      kind: 'not_sent',
      code: 'connection_refused',
      definite: true,
    });
    const limited = await fixedServer(429, {
      error: { type: 'rate_limit_error', message: 'Too many requests' },
    });
    try {
      expect(await caught(stripeAt(limited.url).createCharge(request(), 'k'))).toMatchObject({
        kind: 'uncertain',
        status: 429,
      });
    } finally {
      await limited.close();
    }
    const unavailable = await fixedServer(503, { error: { type: 'api_error', message: 'down' } });
    try {
      expect(await caught(stripeAt(unavailable.url).createCharge(request(), 'k'))).toMatchObject({
        kind: 'uncertain',
        status: 503,
      });
    } finally {
      await unavailable.close();
    }
    expect(
      await caught(stripeAt(sb.url, { secretKey: 'sk_live_not_accepted' }).createCharge(request(), 'k')),
    ).toMatchObject({ kind: 'rejected', status: 401 });
  });

  it('search finds a PaymentIntent by its key only once the index has caught up', async () => {
    const stripe = stripeAt(sb.url);
    const req = request();
    const key = `${uniq('dk')}/it's\\"quoted"`;
    const charge = await stripe.createCharge(req, key);
    // Younger than the sandbox's 400 ms index lag: not found (which proves nothing).
    expect(await stripe.searchChargeByIdempotencyKey!(key)).toBeNull();
    const found = await until('the search index catches up', () => stripe.searchChargeByIdempotencyKey!(key));
    expect(found).toEqual(charge);
    expect(await stripe.searchChargeByIdempotencyKey!(`${key}-other`)).toBeNull();
  });

  it('signs payment_intent events with Stripe-Signature, verified by stripe.webhooks.constructEvent', async () => {
    const receiver = await startReceiver();
    const s = await startTestSandbox({ webhookUrl: receiver.url });
    try {
      const req = request();
      const charge = await stripeAt(s.url).createCharge(req, uniq('dk'));
      await receiver.waitForRequests(1);
      const got = receiver.received[0]!;
      expect(got.body).toMatchObject({
        type: 'payment_intent.succeeded',
        data: { object: { id: charge.id } },
      });
      const verify = stripeSignatureVerifier([SECRET]);
      const header = got.headers[STRIPE_SIGNATURE_HEADER.toLowerCase()];
      expect(() => verify(got.rawBody, header)).not.toThrow();
      expect(() => verify(got.rawBody.replace('2500', '2501'), header)).toThrow(/signature/i);
      expect(() => stripeSignatureVerifier(['whsec_other'])(got.rawBody, header)).toThrow();
    } finally {
      await s.stop();
      await receiver.close();
    }
  });

  it('parses the wire format it serves', () => {
    expect(parseStripeForm('a=1&metadata[x]=y&automatic_payment_methods[enabled]=true')).toEqual({
      a: '1',
      metadata: { x: 'y' },
      automatic_payment_methods: { enabled: 'true' },
    });
    expect(parseMetadataQuery(searchQuery("k'\\x"))).toEqual({ key: 'idempotency_key', value: "k'\\x" });
    expect(parseMetadataQuery("status:'succeeded'")).toBeNull();
  });
});

describe('the charge step with the Stripe adapter (replay, then search with lag)', () => {
  it('a lost response is settled by replaying under the same key: one charge', async () => {
    const ledger = new Ledger(pool, { leaseMs: 5_000 });
    const payments = stripeAt(sb.url);
    const args = chargeArgs();
    await fault(sb, { endpoint: 'charges.create', kind: 'drop_after' });
    const first = await runCharge({ ledger, payments }, args).then(
      () => null,
      (e: unknown) => e,
    );
    expect(isLedgerError(first, 'outcome_unknown')).toBe(true);
    // The takeover replays the same request under the same key: the stored outcome.
    const r = await runCharge({ ledger, payments }, args);
    expect(r).toMatchObject({ outcome: 'succeeded', reconciled: true });
    const made = await chargesAt(sb, args.orderId);
    expect(made.map((c) => c.id)).toEqual([r.chargeId]);
  });

  it('reconcileCharge (no request at hand) searches: not found inside the window means perform again, a replay', async () => {
    const ledger = new Ledger(pool, { leaseMs: 5_000 });
    const payments = stripeAt(slowIndex.url, { searchLagMs: H });
    const args = chargeArgs();
    await fault(slowIndex, { endpoint: 'charges.create', kind: 'drop_after' });
    await runCharge({ ledger, payments }, args).catch(() => undefined);
    // The index lags an hour: the charge can't be found.
    const r = await reconcileCharge({ ledger, payments }, args);
    expect(r).toMatchObject({ settled: false, performAgain: true });
    // Performing again is a replay under the same key: the charge that exists, not a second one.
    expect(await runCharge({ ledger, payments }, args)).toMatchObject({ outcome: 'succeeded' });
    expect(await chargesAt(slowIndex, args.orderId)).toHaveLength(1);
  });

  it('past the key window, a lagging search proves nothing: no second charge, the record stays unknown', async () => {
    const ledger = new Ledger(pool, { leaseMs: 5_000 });
    const keyWindowMs = 1_500;
    // The adapter declares the sandbox's window and a lag far longer than this test.
    const payments = stripeAt(lagging.url, { keyWindowMs, searchLagMs: H });
    const deps = { ledger, payments };
    const args = chargeArgs();
    await fault(lagging, { endpoint: 'charges.create', kind: 'drop_after' });
    await runCharge(deps, args).catch(() => undefined);
    const scope = chargeScope(args);
    const record = (await ledger.get(scope))!;
    expect(record.state).toBe('unknown');
    // Wait (on the clock itself) until the record is past the window and the sandbox has
    // forgotten the key: a replay now would charge a second time.
    await until(
      'the key window has passed',
      () => !withinKeyWindow(record, keyWindowMs) && Date.now() > record.createdAt.getTime() + keyWindowMs,
    );
    const again = await runCharge(deps, args).then(
      () => null,
      (e: unknown) => e,
    );
    expect(isLedgerError(again, 'outcome_unknown')).toBe(true);
    expect(await reconcileCharge(deps, args)).toMatchObject({ settled: false, outcome: null });
    expect((await ledger.get(scope))!.state).toBe('unknown');
    // Exactly the one charge the lost response made.
    expect(await chargesAt(lagging, args.orderId)).toHaveLength(1);
  });

  it('past the window and past the lag, "not found" is proof: settled failed as not charged, never charged again', async () => {
    const ledger = new Ledger(pool, { leaseMs: 5_000 });
    const keyWindowMs = 1_500;
    // A provider that declares no lag: a not-found after the window proves nothing was charged.
    const payments = stripeAt(sb.url, { keyWindowMs, searchLagMs: 1 });
    const deps = { ledger, payments };
    const args = chargeArgs();
    // The request never reaches an effect (fail_before: a 500, uncertain), so nothing exists.
    await fault(sb, { endpoint: 'charges.create', kind: 'fail_before' });
    await runCharge(deps, args).catch(() => undefined);
    const scope = chargeScope(args);
    const record = (await ledger.get(scope))!;
    expect(record.state).toBe('unknown');
    await until(
      'the key window and the lag have passed',
      () => Date.now() > record.createdAt.getTime() + keyWindowMs + 1,
    );
    const r = await reconcileCharge(deps, args);
    expect(r).toMatchObject({ settled: true, outcome: 'failed' });
    expect((await ledger.get(scope))!.result).toMatchObject({
      failureCode: NOT_CHARGED_CODE,
      chargeId: null,
    });
    expect(await chargesAt(sb, args.orderId)).toEqual([]);
  });
});
