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
import { until, untilStatus, untilWorkflow } from '../support/wait.ts';
import { WorkflowUpdateFailedError } from '@temporalio/client';
import { ApplicationFailure, defaultPayloadConverter } from '@temporalio/common';
import type { temporal } from '@temporalio/proto';
import {
  OrderStatusKey,
  TenantIdKey,
  paymentEventSignal,
  FAILURE,
  redriveUpdate,
  statusQuery,
} from '../../src/orders/contract.ts';
import { OPERATION_TYPES, stepKeys } from '../../src/orders/model.ts';
import { downstreamKey } from 'onceflow';
import { findCharge } from '../../src/steps/payment.ts';
import type { orderWorkflow } from '../../workflows/order.ts';

let stack: OrderStack;
/** Workflows whose histories the replay test re-runs. */
const finished: string[] = [];

beforeAll(async () => {
  stack = await startOrderStack();
});
afterAll(async () => {
  await stack?.close();
});

type HistoryEvent = temporal.api.history.v1.IHistoryEvent;

/** The summary the workflow gave an activity or local activity (shown by the Temporal UI). */
function summaryOf(e: HistoryEvent): string {
  const data = e.userMetadata?.summary?.data;
  return data ? (JSON.parse(Buffer.from(data).toString('utf8')) as string) : '';
}

/** The OrderStatus value a search-attribute update event set. */
function upsertedStatus(e: HistoryEvent): unknown {
  const payload =
    e.upsertWorkflowSearchAttributesEventAttributes?.searchAttributes?.indexedFields?.OrderStatus;
  return payload ? defaultPayloadConverter.fromPayload(payload) : undefined;
}

/** Local activities leave a marker per completed call, not scheduled/started/completed events. */
function localActivityMarkers(events: HistoryEvent[]): HistoryEvent[] {
  return events.filter((e) => e.markerRecordedEventAttributes?.markerName === 'core_local_activity');
}

/** A local activity's marker data: its type and the attempt that finished it. */
function markerData(e: HistoryEvent): { activity_type: string; attempt: number } | undefined {
  const m = e.markerRecordedEventAttributes;
  const payload = m?.markerName === 'core_local_activity' ? m.details?.data?.payloads?.[0] : undefined;
  return payload
    ? (defaultPayloadConverter.fromPayload(payload) as { activity_type: string; attempt: number })
    : undefined;
}

/** The finished attempts of a step that runs as a local activity (one marker each, retried ones too). */
function localCalls(
  events: HistoryEvent[],
  activityType: string,
): { activity_type: string; attempt: number }[] {
  return events.map(markerData).filter((d) => d?.activity_type === activityType) as {
    activity_type: string;
    attempt: number;
  }[];
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
        // No status/accepted: the API wrote `accepted` with the order row itself.
        ...(['payment_pending', 'paid', 'completed'] as const).map((s) => stepKeys.status(workflowId, s)),
      ].sort(),
    );
    expect(records.every((r) => r.state === 'succeeded')).toBe(true);

    // The history names each step and its key, in order: the charge and the receipt are
    // local-activity markers, each naming the statuses it wrote around itself; no patch marker.
    const events = (await handle.fetchHistory()).events ?? [];
    expect(events.filter((e) => e.activityTaskScheduledEventAttributes)).toEqual([]);
    expect(events.filter((e) => e.markerRecordedEventAttributes?.markerName === 'core_patch')).toEqual([]);
    expect(localActivityMarkers(events).map(summaryOf)).toEqual([
      `status -> payment_pending (key ${stepKeys.status(workflowId, 'payment_pending')}), then ` +
        `charge ${input.amount} ${input.currency} (key ${stepKeys.charge(workflowId)})`,
      `status -> paid (key ${stepKeys.status(workflowId, 'paid')}), ` +
        `send receipt (key ${stepKeys.receipt(workflowId)}), ` +
        `status -> completed (key ${stepKeys.status(workflowId, 'completed')})`,
    ]);
    // A straight-through order is one workflow task.
    expect(events.filter((e) => e.workflowTaskCompletedEventAttributes)).toHaveLength(1);
    // One search-attribute update: the relay started the run with TenantId and OrderStatus =
    // payment_pending already indexed, and `paid` (a moment inside the one workflow task) is not
    // indexed.
    const upserts = events.filter((e) => upsertedStatus(e) !== undefined);
    expect(upserts.map(upsertedStatus)).toEqual(['completed']);
    expect(events.filter((e) => e.upsertWorkflowSearchAttributesEventAttributes)).toHaveLength(1);
    const desc = await handle.describe();
    expect(desc.typedSearchAttributes.get(TenantIdKey)).toBe(input.tenantId);
    expect(desc.typedSearchAttributes.get(OrderStatusKey)).toBe('completed');
    // 46 events per order before status writes became local activities (7 workflow tasks,
    // 6 activities, 5 upserts), 22 before the provider calls did; see docs/BENCHMARKS.md for
    // what each remaining event buys.
    console.info(`history events per completed order: ${events.length}`);
    expect(events.length).toBeLessThan(22);
    finished.push(workflowId);
  });

  it('a run started without the start attributes (an older relay) indexes tenant and its statuses itself', async () => {
    const { input, workflowId } = await stack.insertOrder();
    const handle = await stack.client.workflow.start<typeof orderWorkflow>('orderWorkflow', {
      taskQueue: stack.taskQueue,
      workflowId,
      args: [{ ...input, timing: TEST_TIMING }],
    });
    expect((await handle.result()).status).toBe('completed');
    const events = (await handle.fetchHistory()).events ?? [];
    const upserts = events.filter((e) => upsertedStatus(e) !== undefined);
    expect(upserts.map(upsertedStatus)).toEqual(['payment_pending', 'completed']);
    expect((await handle.describe()).typedSearchAttributes.get(TenantIdKey)).toBe(input.tenantId);
    finished.push(workflowId);
  });

  it('decline: rejected with its decline code, no receipt, the declined charge is not retried', async () => {
    const { input, workflowId, handle } = await stack.startOrder({ paymentMethod: 'pm_card_chargeDeclined' });
    const result = await handle.result();
    expect(result.status).toBe('rejected');
    expect(result.reason).toMatch(/^decline_code:[a-z_]+$/);
    const row = await stack.orderRow(input);
    expect(row).toMatchObject({ status: 'rejected', reason: result.reason });
    expect(row.last_error).toMatch(/declined/);
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
      await untilStatus(handle, 'payment_unknown');
      const parked = await untilStatus(handle, 'needs_attention');
      expect(parked.lastError).toMatch(/unknown/);
      expect(await stack.orderRow(input)).toMatchObject({
        status: 'needs_attention',
        reason: 'payment_unknown_horizon',
      });
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
    expect(await stack.orderRow(input)).toMatchObject({
      status: 'rejected',
      reason: 'provider_rejected',
      last_error: expect.stringMatching(/HTTP 400/),
    });
    finished.push(workflowId);
  });

  it('a receipt that runs out of retries parks the order until a re-drive, even with a payment event pending', async () => {
    await stack.fault('messages.create', 'fail_before', 1000);
    const { input, workflowId, handle } = await stack.startOrder();
    const receiptAttempts = async () =>
      localCalls((await handle.fetchHistory()).events ?? [], 'sendReceipt').length;
    try {
      const parked = await untilStatus(handle, 'needs_attention');
      expect(parked.lastError).toMatch(/receipt failed/);
      expect(await stack.orderRow(input)).toMatchObject({
        last_error: expect.stringMatching(/receipt failed/),
        reason: 'receipt_failed',
      });
      // A late webhook for the (already settled) charge must not wake the parked order.
      const charge = (await stack.charges(input.orderId))[0]!;
      await handle.signal(paymentEventSignal, {
        source: 'webhook',
        outcome: 'succeeded',
        eventId: 'evt_late',
        chargeId: charge.id,
      });
      const before = await receiptAttempts();
      // The workflow task that took the signal decided what it changes: a wrongly woken order
      // schedules its receipt again in that same task. So wait for that task, then look at
      // what the history holds from the signal on.
      const fromSignal = await until('a workflow task completed after the late payment event', async () => {
        const events = (await handle.fetchHistory()).events ?? [];
        const signalled = events
          .map((e) => e.workflowExecutionSignaledEventAttributes?.signalName === paymentEventSignal.name)
          .lastIndexOf(true);
        const decided = events.findIndex((e, i) => i > signalled && e.workflowTaskCompletedEventAttributes);
        return signalled >= 0 && decided >= 0 ? events.slice(signalled) : null;
      });
      // A wrongly woken order would be running its receipt again (a local activity leaves its
      // marker only when it ends): the query below, answered after that task, would say so.
      expect(localCalls(fromSignal, 'sendReceipt')).toEqual([]);
      expect(await receiptAttempts()).toBe(before);
      expect((await handle.query(statusQuery)).awaitingOperator).toBe(true);
    } finally {
      await stack.clearFaults();
    }
    const accepted = await handle.executeUpdate(redriveUpdate, {
      args: [{ actor: 'test', reason: 'email provider is back' }],
    });
    expect(accepted).toMatchObject({ status: 'needs_attention', reason: 'receipt_failed', redrives: 1 });
    const result = await handle.result();
    expect(result.status).toBe('completed');
    expect(await stack.charges(input.orderId)).toHaveLength(1);
    expect(await stack.messages(input.orderId)).toHaveLength(1);
    // Re-driven and completed: the reason no longer applies.
    expect(await stack.orderRow(input)).toMatchObject({ status: 'completed', reason: null });
    finished.push(workflowId);
  });

  it('a re-drive sent while the workflow is not parked is refused with a clear error, and changes nothing', async () => {
    // Busy, not parked: the charge's answers are lost and lookups fail, so the order reconciles
    // in payment_unknown (on timers, where a query sees it; a charge in flight is a local
    // activity inside the workflow task, which a query waits out).
    await stack.fault('charges.create', 'drop_after', 100);
    await stack.fault('charges.lookup', 'fail_before', 1000);
    const { workflowId, handle } = await stack.startOrder({}, { ...TEST_TIMING, unknownHorizonMs: 60_000 });
    try {
      await untilStatus(handle, 'payment_unknown');
      let refused: unknown;
      try {
        await handle.executeUpdate(redriveUpdate, { args: [{ actor: 'test', reason: 'too early' }] });
      } catch (err) {
        refused = err;
      }
      expect(refused).toBeInstanceOf(WorkflowUpdateFailedError);
      const cause = (refused as WorkflowUpdateFailedError).cause;
      expect(cause).toBeInstanceOf(ApplicationFailure);
      expect((cause as ApplicationFailure).type).toBe(FAILURE.redriveRefused);
      expect((cause as ApplicationFailure).message).toMatch(/not parked \(status payment_unknown\)/);
    } finally {
      await stack.clearFaults();
    }
    // Lookups work again: reconciliation finds the charge, and the order completes.
    expect((await handle.result()).status).toBe('completed');
    // A refused update leaves nothing in the history.
    const events = (await handle.fetchHistory()).events ?? [];
    expect(events.filter((e) => e.workflowExecutionUpdateAcceptedEventAttributes)).toHaveLength(0);
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
