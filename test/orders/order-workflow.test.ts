/**
 * The order workflow end to end on the real dev server, real Postgres and the
 * real sandbox over HTTP. Every fault ends with exactly one effect at the
 * provider and the right final status.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Worker } from '@temporalio/worker';
import { WorkflowIdReusePolicy, type WorkflowExecutionAlreadyStartedError } from '@temporalio/client';
import { startOrderStack, TEST_TIMING, type OrderStack } from '../support/stack.ts';
import { workflowBundlePath } from '../support/env.ts';
import { paymentEventSignal, redriveSignal, statusQuery } from '../../workflows/definitions.ts';
import { stepKeys } from '../../src/orders/model.ts';

let stack: OrderStack;
/** Workflows whose histories the replay test re-runs. */
const finished: string[] = [];

beforeAll(async () => {
  stack = await startOrderStack();
});
afterAll(async () => {
  await stack?.close();
});

async function waitForStatus(
  workflowId: string,
  wanted: string,
  timeoutMs = 60_000,
): Promise<{ status: string; lastError: string | null }> {
  const handle = stack.client.workflow.getHandle(workflowId);
  const deadline = Date.now() + timeoutMs;
  let last = '';
  while (Date.now() < deadline) {
    const state = await handle.query(statusQuery);
    last = state.status;
    if (state.status === wanted) return state;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`workflow ${workflowId} did not reach ${wanted} (last: ${last})`);
}

describe('order workflow', () => {
  it('happy path: one charge, one receipt, completed', async () => {
    const { input, workflowId, handle } = await stack.startOrder();
    const result = await handle.result();
    expect(result.status).toBe('completed');
    expect(await stack.orderRow(input)).toMatchObject({ status: 'completed', charge_id: result.chargeId });

    const charges = await stack.charges(input.orderId);
    expect(charges).toHaveLength(1);
    expect(charges[0]).toMatchObject({ status: 'succeeded', id: result.chargeId });
    expect(await stack.messages(input.orderId)).toHaveLength(1);

    // Each step claimed its own key, derived from the workflow ID.
    const records = await stack.ledger.list({ tenantId: input.tenantId, keyPrefix: `${workflowId}/` });
    const keys = records.map((r) => r.key).sort();
    expect(keys).toEqual(
      [
        stepKeys.charge(workflowId),
        stepKeys.receipt(workflowId),
        ...['accepted', 'payment_pending', 'paid', 'completed'].map((s) =>
          stepKeys.status(workflowId, s as 'paid'),
        ),
      ].sort(),
    );
    expect(records.every((r) => r.state === 'succeeded')).toBe(true);

    // The history names each step and its key.
    const history = await handle.fetchHistory();
    const scheduled = (history.events ?? []).filter((e) => e.activityTaskScheduledEventAttributes);
    expect(scheduled.map((e) => e.activityTaskScheduledEventAttributes?.activityType?.name)).toEqual([
      'setOrderStatus',
      'setOrderStatus',
      'chargePayment',
      'setOrderStatus',
      'sendReceipt',
      'setOrderStatus',
    ]);
    finished.push(workflowId);
  });

  it('decline: rejected, no receipt, the declined charge is not retried', async () => {
    const { input, workflowId, handle } = await stack.startOrder({ paymentMethod: 'pm_card_chargeDeclined' });
    const result = await handle.result();
    expect(result.status).toBe('rejected');
    expect((await stack.orderRow(input)).status).toBe('rejected');
    const charges = await stack.charges(input.orderId);
    expect(charges.map((c) => c.status)).toEqual(['failed']);
    expect(await stack.messages(input.orderId)).toHaveLength(0);
    const charge = await stack.ledger.get({
      tenantId: 'acme',
      operationType: 'payment.charge',
      key: stepKeys.charge(workflowId),
    });
    expect(charge).toMatchObject({ state: 'failed', attempts: 1 });
    finished.push(workflowId);
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
      const { input, workflowId, handle } = await stack.startOrder({}, TEST_TIMING);
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

        // Temporal really ran more than one attempt of the delayed step.
        const history = await handle.fetchHistory();
        const activity = endpoint === 'charges.create' ? 'chargePayment' : 'sendReceipt';
        const scheduledIds = new Set(
          (history.events ?? [])
            .filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === activity)
            .map((e) => String(e.eventId)),
        );
        const attempts = (history.events ?? [])
          .filter((e) => scheduledIds.has(String(e.activityTaskStartedEventAttributes?.scheduledEventId)))
          .map((e) => e.activityTaskStartedEventAttributes?.attempt ?? 0);
        expect(Math.max(...attempts)).toBeGreaterThanOrEqual(2);
        finished.push(workflowId);
      },
    );
  });

  it('same workflow ID started twice: one workflow, one charge', async () => {
    const { input, workflowId, handle } = await stack.startOrder();
    let refused: unknown;
    try {
      await stack.client.workflow.start('orderWorkflow', {
        taskQueue: stack.taskQueue,
        workflowId,
        args: [{ ...input, timing: TEST_TIMING }],
        workflowIdReusePolicy: WorkflowIdReusePolicy.REJECT_DUPLICATE,
      });
    } catch (err) {
      refused = err;
    }
    expect((refused as WorkflowExecutionAlreadyStartedError | undefined)?.name).toBe(
      'WorkflowExecutionAlreadyStartedError',
    );
    expect((await handle.result()).status).toBe('completed');
    expect(await stack.charges(input.orderId)).toHaveLength(1);
  });

  it('unknown outcome: payment_unknown, then needs_attention, never a second charge; a signal settles it', async () => {
    // Every response from the charge endpoint is lost, and lookups fail, so the
    // outcome can't be reconciled. The first request did charge.
    await stack.fault('charges.create', 'drop_after', 100);
    await stack.fault('charges.lookup', 'fail_before', 1000);
    const { input, workflowId, handle } = await stack.startOrder();
    try {
      await waitForStatus(workflowId, 'payment_unknown');
      const parked = await waitForStatus(workflowId, 'needs_attention');
      expect(parked.lastError).toMatch(/unknown/);
      expect((await stack.orderRow(input)).status).toBe('needs_attention');
      const desc = await handle.describe();
      expect(desc.searchAttributes.OrderStatus).toEqual(['needs_attention']);
    } finally {
      await stack.clearFaults();
    }
    const charges = await stack.charges(input.orderId);
    expect(charges).toHaveLength(1);
    const chargeRecord = await stack.ledger.get({
      tenantId: 'acme',
      operationType: 'payment.charge',
      key: stepKeys.charge(workflowId),
    });
    expect(chargeRecord?.state).toBe('unknown');

    // The provider's word arrives (as a webhook would deliver it): the order completes without charging again.
    await handle.signal(paymentEventSignal, {
      source: 'webhook',
      outcome: 'succeeded',
      eventId: 'evt_test_1',
      chargeId: charges[0]!.id,
    });
    const result = await handle.result();
    expect(result.status).toBe('completed');
    expect(result.chargeId).toBe(charges[0]!.id);
    expect(await stack.charges(input.orderId)).toHaveLength(1);
    expect(await stack.messages(input.orderId)).toHaveLength(1);
    finished.push(workflowId);
  });

  it('a provider that refuses the charge request outright: rejected, nothing charged', async () => {
    const { input, workflowId, handle } = await stack.startOrder({ paymentMethod: 'pm_card_unknown_token' });
    const result = await handle.result();
    expect(result.status).toBe('rejected');
    expect(result.lastError).toMatch(/HTTP 400/);
    expect(await stack.charges(input.orderId)).toHaveLength(0);
    expect(await stack.messages(input.orderId)).toHaveLength(0);
    expect((await stack.orderRow(input)).status).toBe('rejected');
    finished.push(workflowId);
  });

  it('a receipt that runs out of retries parks the order until a re-drive, even with a payment event pending', async () => {
    await stack.fault('messages.create', 'fail_before', 1000);
    const { input, workflowId, handle } = await stack.startOrder();
    const receiptAttempts = async () =>
      ((await handle.fetchHistory()).events ?? []).filter(
        (e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'sendReceipt',
      ).length;
    try {
      const parked = await waitForStatus(workflowId, 'needs_attention');
      expect(parked.lastError).toMatch(/receipt failed/);
      expect((await stack.orderRow(input)).last_error).toMatch(/receipt failed/);
      // A late webhook for the (already settled) charge must not wake the parked order.
      const charge = (await stack.charges(input.orderId))[0]!;
      await handle.signal(paymentEventSignal, {
        source: 'webhook',
        outcome: 'succeeded',
        eventId: 'evt_late',
        chargeId: charge.id,
      });
      const before = await receiptAttempts();
      await new Promise((r) => setTimeout(r, 1500));
      expect(await receiptAttempts()).toBe(before);
      expect((await handle.query(statusQuery)).awaitingOperator).toBe(true);
    } finally {
      await stack.clearFaults();
    }
    await handle.signal(redriveSignal, { actor: 'test', reason: 'email provider is back' });
    const result = await handle.result();
    expect(result.status).toBe('completed');
    expect(await stack.charges(input.orderId)).toHaveLength(1);
    expect(await stack.messages(input.orderId)).toHaveLength(1);
    finished.push(workflowId);
  });

  it('replay: recorded histories replay cleanly against the current workflow code', async () => {
    expect(finished.length).toBeGreaterThanOrEqual(3);
    const histories = finished.map((workflowId) => ({
      workflowId,
      history: stack.client.workflow.getHandle(workflowId).fetchHistory(),
    }));
    const resolved = await Promise.all(
      histories.map(async (h) => ({ workflowId: h.workflowId, history: await h.history })),
    );
    let replayed = 0;
    for await (const result of Worker.runReplayHistories(
      { workflowBundle: { codePath: workflowBundlePath() } },
      resolved,
    )) {
      expect(result.error, `${result.workflowId}: ${String(result.error)}`).toBeUndefined();
      replayed++;
    }
    expect(replayed).toBe(finished.length);
  });
});
