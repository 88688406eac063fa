/**
 * An operator's resolve may not contradict the provider: the provider is
 * asked by the operation's downstream key first. Real Postgres, the real
 * sandbox over HTTP, the real Temporal client.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startOrderStack, type OrderStack } from '../support/stack.ts';
import { uniq } from '../support/env.ts';
import { Operator, isOpsError } from '../../src/operator/index.ts';
import { createSandboxPaymentProvider } from '../../src/providers/sandbox.ts';
import { downstreamKey, type Scope } from 'onceflow';
import { testOperator } from './support.ts';

let stack: OrderStack;
let operator: Operator;

beforeAll(async () => {
  stack = await startOrderStack({ startWorker: false });
  operator = testOperator({
    pool: stack.pool,
    ledger: stack.ledger,
    temporal: stack.client,
    providerUrl: stack.sandbox.url,
    providerTimeoutMs: 2_000,
    temporalUiUrl: 'http://ui.test',
  });
});
afterAll(async () => {
  await stack?.close();
});

/** An unknown charge record, as a lost provider response leaves it. */
async function unknownCharge(): Promise<Scope> {
  const scope = { tenantId: 'acme', operationType: 'payment.charge', key: `${uniq('manual')}/charge` };
  const claim = await stack.ledger.claim(scope, { schemaVersion: 1, value: { amount: 1000 } });
  if (claim.kind !== 'claimed') throw new Error('expected a claim');
  await stack.ledger.markUnknown(scope, claim.ownerToken, { reason: 'perform_error', message: 'timeout' });
  return scope;
}

async function refusal(p: Promise<unknown>): Promise<string> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(isOpsError(err) && err.code).toBe('invalid_state');
  return (err as Error).message;
}

it('refuses "failed" for a charge the provider shows as succeeded, and accepts "succeeded"', async () => {
  const scope = await unknownCharge();
  const payments = createSandboxPaymentProvider({ baseUrl: stack.sandbox.url, timeoutMs: 2_000 });
  const charge = await payments.createCharge(
    { amount: 1000, currency: 'usd', paymentMethod: 'pm_card_visa', metadata: {} },
    downstreamKey(scope),
  );
  expect(
    await refusal(operator.resolveUnknown(scope, 'failed', { actor: 'ops', reason: 'customer says no' })),
  ).toMatch(/provider reports this operation succeeded/);
  expect((await stack.ledger.get(scope))?.state).toBe('unknown');
  const audit = await stack.pool.query('select count(*)::int as n from audit_log where operation_key = $1', [
    scope.key,
  ]);
  expect(audit.rows[0].n).toBe(0);

  const resolved = await operator.resolveUnknown(scope, 'succeeded', {
    actor: 'ops',
    reason: 'provider dashboard shows the charge',
    chargeId: charge.id,
  });
  expect(resolved.after.state).toBe('succeeded');
});

it('refuses "succeeded" when the provider has no charge under the key', async () => {
  const scope = await unknownCharge();
  expect(
    await refusal(operator.resolveUnknown(scope, 'succeeded', { actor: 'ops', reason: 'looks fine to me' })),
  ).toMatch(/no record/);
  const resolved = await operator.resolveUnknown(scope, 'failed', {
    actor: 'ops',
    reason: 'never reached the provider',
  });
  expect(resolved.after.state).toBe('failed');
});

it('decides on the operator word when the provider cannot be asked', async () => {
  const scope = await unknownCharge();
  await stack.fault('charges.lookup', 'fail_before', 10);
  try {
    const resolved = await operator.resolveUnknown(scope, 'succeeded', {
      actor: 'ops',
      reason: 'confirmed by phone with the processor',
      chargeId: 'ch_confirmed_by_phone',
    });
    expect(resolved.after.state).toBe('succeeded');
  } finally {
    await stack.clearFaults();
  }
});
