/**
 * A definite provider rejection after a takeover (issue #24, item 10). A
 * worker died holding the charge's claim; the next attempt takes the claim
 * over, reconciles (the provider never saw the key) and performs under the
 * same key, and the provider refuses the request outright (HTTP 400: nothing
 * happened under it). The record may not be released (an earlier owner may
 * still send: docs/MODEL.md F1) and must not be presumed failed, but
 * retrying the same refused request cannot help: the order parks in
 * needs_attention (charge_failed:RefusedAfterTakeover) at once, instead of looping through
 * payment_unknown, performing again every round, until the 6 h horizon.
 * Real worker, real Temporal, real sandbox over HTTP.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startOrderStack, TEST_TIMING, type OrderStack } from '../support/stack.ts';
import { until, untilWorkflow } from '../support/wait.ts';
import { OPERATION_TYPES, orderWorkflowId, stepKeys } from '../../src/orders/model.ts';
import type { Scope } from 'onceflow';
import { uniq } from '../support/env.ts';
import { testOperator } from '../operator/support.ts';

let stack: OrderStack;
beforeAll(async () => {
  stack = await startOrderStack();
});
afterAll(async () => {
  await stack?.close();
});

describe('a definite rejection after a takeover', () => {
  it('parks the order for an operator at once (charge_failed:RefusedAfterTakeover, never "nothing was charged"), keeps the record unknown, charges nothing', async () => {
    // A payment method the provider refuses with a 400 (validation: nothing charged).
    const overrides = { orderId: uniq('ord'), paymentMethod: 'pm_card_unknown' };
    // The order startOrder inserts (the stack's defaults): its charge key is known before it starts.
    const input = { tenantId: 'acme', amount: 3000, currency: 'usd', ...overrides };
    const workflowId = orderWorkflowId(input.tenantId, input.orderId);
    const scope: Scope = {
      tenantId: input.tenantId,
      operationType: OPERATION_TYPES.charge,
      key: stepKeys.charge(workflowId),
    };
    // What a worker that died right after claiming leaves behind: a claim whose lease runs out.
    await stack.ledger.claim(
      scope,
      {
        schemaVersion: 1,
        value: {
          orderId: input.orderId,
          amount: input.amount,
          currency: input.currency,
          paymentMethod: input.paymentMethod,
        },
      },
      { leaseMs: 1 },
    );
    await until('the dead worker’s lease to run out', async () => {
      const r = await stack.ledger.get(scope);
      return r?.leaseExpiresAt && r.leaseExpiresAt.getTime() < Date.now() - 50;
    });

    // A horizon far beyond the test: only a definite decision can end payment_unknown in time.
    const { input: started, handle } = await stack.startOrder(overrides, {
      ...TEST_TIMING,
      unknownHorizonMs: 3_600_000,
    });
    expect(handle.workflowId).toBe(workflowId);
    const parked = await untilWorkflow(handle, (s) => s.awaitingOperator, 'parked for an operator', 30_000);
    expect(parked.status).toBe('needs_attention');
    expect(await stack.orderRow(started)).toMatchObject({
      status: 'needs_attention',
      reason: 'charge_failed:RefusedAfterTakeover',
    });
    // The sandbox's lookup answers "nothing under this key", then the retry's 400 names the
    // method. The Stripe adapter settles by replaying under the same key (its capability), and
    // the operator sees that the replay was refused with the outcome still unknown.
    expect((await stack.orderRow(started)).last_error).toMatch(
      process.env.PAYMENT_PROVIDER === 'stripe' ? /outcome is still unknown/ : /pm_card_unknown/,
    );
    // Not released and not presumed failed: an earlier owner's request is still unaccounted for.
    expect(await stack.ledger.get(scope)).toMatchObject({ state: 'unknown', attempts: 2 });
    expect(await stack.charges(input.orderId)).toHaveLength(0);

    // The way out: an operator decides, and the order settles as rejected.
    const operator = testOperator({
      pool: stack.pool,
      ledger: stack.ledger,
      temporal: stack.client,
      providerUrl: stack.sandbox.url,
      providerTimeoutMs: 1_500,
    });
    const resolved = await operator.resolveUnknown(scope, 'failed', {
      actor: 'ann',
      reason: 'the provider refuses this payment method; the dead worker never sent',
    });
    expect(resolved.signalled).toBe(true);
    expect(await handle.result()).toMatchObject({ status: 'rejected' });
    expect(await stack.charges(input.orderId)).toHaveLength(0);
  }, 60_000);
});
