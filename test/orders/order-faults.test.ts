/**
 * The order workflow under provider faults, end to end on the real dev server, real Postgres and
 * the real sandbox over HTTP: a request that fails before or after the provider acts, an answer
 * lost, an answer later than an attempt may run. Every fault ends with exactly one effect at the
 * provider and the order completed; each run's history then replays against the current code.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { downstreamKey } from 'onceflow';
import { startOrderStack, TEST_TIMING, type OrderStack } from '../support/stack.ts';
import { expectReplays, localActivityMarkers, localCalls, summaryOf } from '../support/history.ts';
import { untilWorkflow } from '../support/wait.ts';
import { OPERATION_TYPES, stepKeys } from '../../src/orders/model.ts';
import { findCharge } from '../../src/steps/payment.ts';

let stack: OrderStack;
/** Workflows whose histories the replay test re-runs. */
const finished: string[] = [];

beforeAll(async () => {
  stack = await startOrderStack();
});
afterAll(async () => {
  await stack?.close();
});

describe.each([
  ['charges.create', 'fail_before', undefined],
  ['charges.create', 'fail_after', undefined],
  ['charges.create', 'drop_after', undefined],
  // Longer than the activity's start-to-close timeout: attempts overlap.
  ['charges.create', 'delay', (TEST_TIMING.activityStartToCloseMs ?? 4000) + 1500],
  ['messages.create', 'fail_before', undefined],
  ['messages.create', 'fail_after', undefined],
  ['messages.create', 'drop_after', undefined],
  ['messages.create', 'delay', (TEST_TIMING.activityStartToCloseMs ?? 4000) + 1500],
])('fault %s %s', (endpoint, kind, delayMs) => {
  it('ends completed with exactly one charge and one receipt', async () => {
    // The fault is scoped to this sandbox account, and this test is the only one running in it.
    await stack.fault(endpoint, kind, 1, delayMs);
    // A delayed receipt must not run out of attempts before the provider finishes the first
    // request (until then every retry finds it processing): local retries follow each other
    // within milliseconds of their backoff (0.2 s doubling to 1 s here), so six attempts span
    // less than the delay; ten span more.
    const timing = kind === 'delay' ? { ...TEST_TIMING, stepMaxAttempts: 10 } : TEST_TIMING;
    const { input, workflowId, handle } = await stack.startOrder({}, timing);
    try {
      const result = await handle.result();
      expect(result.status).toBe('completed');
    } finally {
      await stack.clearFaults();
    }
    const charges = await stack.charges(input.orderId);
    expect(charges.filter((c) => c.status === 'succeeded')).toHaveLength(1);
    expect(charges).toHaveLength(1);
    expect(await stack.messages(input.orderId)).toHaveLength(1);
    expect((await stack.orderRow(input)).status).toBe('completed');
    finished.push(workflowId);
  });
});

describe('overlapping attempts: the provider answers after the activity attempt timed out', () => {
  // The provider client waits longer than an attempt may run, so Temporal starts
  // attempt 2 while attempt 1 is still inside the provider call holding the claim.
  const overlapTiming = { ...TEST_TIMING, activityStartToCloseMs: 2_000 };
  let slow: OrderStack;
  beforeAll(async () => {
    slow = await startOrderStack({ providerTimeoutMs: 10_000 });
  });
  afterAll(async () => {
    await slow?.close();
  });

  it.each(['charges.create', 'messages.create'])(
    '%s delayed past start-to-close: one effect',
    async (endpoint) => {
      await slow.fault(endpoint, 'delay', 1, 3_500);
      const { input, workflowId, handle } = await slow.startOrder({}, overlapTiming);
      expect((await handle.result()).status).toBe('completed');
      expect(await slow.charges(input.orderId)).toHaveLength(1);
      expect(await slow.messages(input.orderId)).toHaveLength(1);

      // Temporal really ran more than one attempt of the delayed step (a local activity: its
      // marker records the attempt that finished it).
      const history = await handle.fetchHistory();
      const activity = endpoint === 'charges.create' ? 'chargePayment' : 'sendReceipt';
      const attempts = localCalls(history.events ?? [], activity).map((d) => d.attempt);
      expect(Math.max(...attempts)).toBeGreaterThanOrEqual(2);
      finished.push(workflowId);
    },
  );
});

describe('the provider never saw the charge (it failed before doing anything, every attempt)', () => {
  // reconcileCharge reports performAgain when the record is unknown and the provider has
  // nothing under the key (activities/order.ts does this itself once the parallel ledger
  // change lands; until then this wrapper adds it the same way, from the same two facts).
  let never: OrderStack;
  beforeAll(async () => {
    never = await startOrderStack({
      wrapActivities: (real, deps) => ({
        async reconcileCharge(args) {
          const result = await real.reconcileCharge(args);
          if (result.settled || result.notStarted || result.performAgain) return result;
          const scope = { tenantId: args.tenantId, operationType: OPERATION_TYPES.charge, key: args.key };
          const record = await deps.ledger.get(scope);
          const seen = await findCharge(deps.payments, downstreamKey(scope));
          return record?.state === 'unknown' && !seen ? { ...result, performAgain: true } : result;
        },
      }),
    });
  });
  afterAll(async () => {
    await never?.close();
  });

  it('payment_unknown performs the charge again under the same key instead of waiting for the horizon', async () => {
    // Every attempt of the first round fails before the provider does anything: 500s, so the
    // outcome counts as uncertain and the order enters payment_unknown.
    await never.fault('charges.create', 'fail_before', TEST_TIMING.chargeMaxAttempts ?? 4);
    // A horizon far beyond the test: only performing again can finish this order.
    const timing = { ...TEST_TIMING, unknownHorizonMs: 10 * 60_000 };
    const { input, workflowId, handle } = await never.startOrder({}, timing);
    const seen = new Set<string>();
    await untilWorkflow(
      handle,
      (state) => {
        seen.add(state.status);
        return ['completed', 'rejected', 'needs_attention'].includes(state.status);
      },
      'a final status',
    );
    const result = await handle.result();
    expect(result.status).toBe('completed');
    expect(seen.has('needs_attention')).toBe(false);
    const charges = await never.charges(input.orderId);
    expect(charges).toHaveLength(1);
    expect(charges[0]).toMatchObject({ status: 'succeeded', id: result.chargeId });
    // The same downstream key, the same ledger record (taken over), one effect.
    const record = await never.ledger.get({
      tenantId: input.tenantId,
      operationType: OPERATION_TYPES.charge,
      key: stepKeys.charge(workflowId),
    });
    expect(record).toMatchObject({ state: 'succeeded', providerRef: result.chargeId });
    expect(charges[0]!.idempotency_key).toBe(record!.downstreamKey);
    const events = (await handle.fetchHistory()).events ?? [];
    // It went through payment_unknown, and chargePayment ran twice (two rounds, each from attempt 1).
    expect(localActivityMarkers(events).map(summaryOf)).toContainEqual(
      expect.stringContaining('status -> payment_unknown'),
    );
    expect(localCalls(events, 'chargePayment').filter((c) => c.attempt === 1)).toHaveLength(2);
  });
});

it('replay: the histories of the faulted runs replay cleanly against the current workflow code', async () => {
  expect(finished.length).toBeGreaterThanOrEqual(3);
  await expectReplays(stack.client, finished);
});
