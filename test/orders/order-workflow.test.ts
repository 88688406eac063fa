/**
 * The order workflow end to end on the real dev server, real Postgres and the
 * real sandbox over HTTP: its history, declines, unknown outcomes, parking and
 * re-drives. The provider faults are in order-faults.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WorkflowIdReusePolicy, type WorkflowExecutionAlreadyStartedError } from '@temporalio/client';
import { startOrderStack, TEST_TIMING, type OrderStack } from '../support/stack.ts';
import { expectReplays, localActivityMarkers, localCalls, summaryOf } from '../support/history.ts';
import { until, untilStatus } from '../support/wait.ts';
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
import { stepKeys } from '../../src/orders/model.ts';
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

/** The OrderStatus value a search-attribute update event set. */
function upsertedStatus(e: HistoryEvent): unknown {
  const payload =
    e.upsertWorkflowSearchAttributesEventAttributes?.searchAttributes?.indexedFields?.OrderStatus;
  return payload ? defaultPayloadConverter.fromPayload(payload) : undefined;
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
    await expectReplays(stack.client, finished);
  });
});
