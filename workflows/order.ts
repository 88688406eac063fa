/**
 * The order workflow: accepted -> charge -> paid -> receipt -> completed, or
 * rejected on a decline. Every step is an activity that claims its own
 * operation key, derived here from the workflow ID, so retries at any level
 * (activity attempt, worker crash, duplicate start) reuse the same key.
 *
 * An uncertain charge never leads to a second charge under a new key: the
 * workflow enters payment_unknown and reconciles on durable timers until the
 * provider's answer, a webhook event or an operator settles it, or the
 * horizon passes and the order goes to needs_attention.
 */
import {
  ActivityFailure,
  ApplicationFailure,
  condition,
  log,
  proxyActivities,
  setHandler,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';
import type { OrderActivities, ReconcileResult } from '../activities/order.ts';
import { stepKeys, type OrderStatus, type OrderWorkflowInput } from '../src/orders/model.ts';
import {
  paymentEventSignal,
  redriveSignal,
  statusQuery,
  type OrderState,
  type PaymentEvent,
} from './definitions.ts';
import { activityOptions, resolveTiming, type OrderTiming } from './policies.ts';

export const OrderStatusKey = defineSearchAttributeKey('OrderStatus', SearchAttributeType.KEYWORD);
export const TenantIdKey = defineSearchAttributeKey('TenantId', SearchAttributeType.KEYWORD);
export const OrderLastErrorKey = defineSearchAttributeKey('OrderLastError', SearchAttributeType.TEXT);

export interface OrderWorkflowArgs extends OrderWorkflowInput {
  /** Test and operator overrides of the declared timeouts; defaults in workflows/policies.ts. */
  timing?: Partial<OrderTiming>;
}

function failureMessage(err: unknown): string {
  if (err instanceof ActivityFailure && err.cause) return `${err.cause.name}: ${err.cause.message}`;
  return err instanceof Error ? err.message : String(err);
}

function failureType(err: unknown): string | undefined {
  return err instanceof ActivityFailure && err.cause instanceof ApplicationFailure
    ? (err.cause.type ?? undefined)
    : undefined;
}

export async function orderWorkflow(input: OrderWorkflowArgs): Promise<OrderState> {
  const { workflowId } = workflowInfo();
  const timing = resolveTiming(input.timing);
  const chargeActs = proxyActivities<OrderActivities>(activityOptions(timing, timing.chargeMaxAttempts));
  const stepActs = proxyActivities<OrderActivities>(activityOptions(timing, timing.stepMaxAttempts));
  const ref = { tenantId: input.tenantId, orderId: input.orderId, workflowId };

  const state: OrderState = {
    status: 'accepted',
    chargeId: null,
    receiptId: null,
    lastError: null,
    reconcileAttempts: 0,
  };
  let paymentEvent: PaymentEvent | undefined;
  let redrives = 0;
  let redriveRequested = false;

  setHandler(statusQuery, () => state);
  setHandler(paymentEventSignal, (event) => {
    // The first settling word wins; duplicates and late events change nothing.
    paymentEvent ??= event;
  });
  setHandler(redriveSignal, ({ actor, reason }) => {
    if (state.status !== 'needs_attention') return;
    log.info('re-drive requested', { actor, reason });
    redriveRequested = true;
  });

  const options = (maximumAttempts: number, summary: string) => ({
    ...activityOptions(timing, maximumAttempts),
    summary,
  });

  /**
   * Writes a status through the ledger. If even that runs out of retries
   * (the database is down for long), the order is flagged needs_attention in
   * the search attributes and waits for a re-drive; it never silently fails.
   */
  async function transition(status: OrderStatus, extra: { lastError?: string } = {}): Promise<void> {
    for (;;) {
      const key = stepKeys.status(workflowId, status, redrives);
      try {
        await stepActs.setOrderStatus.executeWithOptions(
          options(timing.stepMaxAttempts, `status -> ${status} (key ${key})`),
          [
            {
              ...ref,
              key,
              status,
              chargeId: state.chargeId,
              receiptId: state.receiptId,
              lastError: extra.lastError ?? null,
            },
          ],
        );
        state.status = status;
        upsertSearchAttributes([
          { key: OrderStatusKey, value: status },
          ...(extra.lastError ? [{ key: OrderLastErrorKey, value: extra.lastError.slice(0, 1000) }] : []),
        ]);
        return;
      } catch (err) {
        state.lastError = `status ${status} could not be recorded: ${failureMessage(err)}`;
        upsertSearchAttributes([
          { key: OrderStatusKey, value: 'needs_attention' },
          { key: OrderLastErrorKey, value: state.lastError.slice(0, 1000) },
        ]);
        await waitForOperator();
      }
    }
  }

  async function waitForOperator(): Promise<void> {
    await condition(() => redriveRequested || paymentEvent !== undefined);
    redriveRequested = false;
    redrives++;
  }

  /** Parks the order for a human; resumes when an operator re-drives it or a payment event arrives. */
  async function needsAttention(reason: string): Promise<void> {
    state.lastError = reason;
    await transition('needs_attention', { lastError: reason });
    await waitForOperator();
  }

  async function settleFromEvent(event: PaymentEvent): Promise<ReconcileResult> {
    const key = stepKeys.charge(workflowId);
    return stepActs.settleCharge.executeWithOptions(
      options(
        timing.stepMaxAttempts,
        `settle charge from ${event.source} event ${event.eventId} (key ${key})`,
      ),
      [{ ...ref, key, outcome: event.outcome, ...(event.chargeId ? { chargeId: event.chargeId } : {}) }],
    );
  }

  /**
   * payment_unknown: reconcile on durable timers with backoff until settled
   * or the horizon passes. Returns null if the horizon passed unsettled.
   */
  async function resolveUnknownCharge(): Promise<ReconcileResult | null> {
    const key = stepKeys.charge(workflowId);
    const deadline = Date.now() + timing.unknownHorizonMs; // workflow time: deterministic
    let pause = timing.reconcileInitialMs;
    for (;;) {
      if (paymentEvent) return settleFromEvent(paymentEvent);
      state.reconcileAttempts++;
      try {
        const result = await stepActs.reconcileCharge.executeWithOptions(
          options(timing.stepMaxAttempts, `reconcile charge #${state.reconcileAttempts} (key ${key})`),
          [{ ...ref, key }],
        );
        if (result.settled) return result;
      } catch (err) {
        state.lastError = `reconciliation failed: ${failureMessage(err)}`;
      }
      const remaining = deadline - Date.now();
      if (remaining <= 0) return null;
      // A durable timer, cut short by a settling signal.
      await condition(() => paymentEvent !== undefined, Math.min(pause, remaining));
      pause = Math.min(pause * 2, timing.reconcileMaxMs);
    }
  }

  /**
   * Runs the charge step to a definite outcome. Once the outcome is uncertain
   * the charge is never performed again: only reconciled, or settled by a
   * provider event or an operator, because a retry past the provider's key
   * window could charge twice.
   */
  async function charge(): Promise<ReconcileResult> {
    const key = stepKeys.charge(workflowId);
    for (;;) {
      try {
        const result = await chargeActs.chargePayment.executeWithOptions(
          options(timing.chargeMaxAttempts, `charge ${input.amount} ${input.currency} (key ${key})`),
          [
            {
              ...ref,
              key,
              amount: input.amount,
              currency: input.currency,
              paymentMethod: input.paymentMethod,
            },
          ],
        );
        return { settled: true, outcome: result.outcome, chargeId: result.chargeId };
      } catch (err) {
        const type = failureType(err);
        if (type === 'PaymentOutcomeUnknown' || type === 'OperationInProgress') {
          state.lastError = failureMessage(err);
          break;
        }
        // A definite refusal, or retries ran out before the provider was reached.
        await needsAttention(`charge failed: ${failureMessage(err)}`);
        if (paymentEvent) return settleFromEvent(paymentEvent);
      }
    }
    await transition('payment_unknown');
    for (;;) {
      const settled = await resolveUnknownCharge();
      if (settled?.settled) return settled;
      await needsAttention('payment outcome still unknown after the reconciliation horizon');
      if (paymentEvent) return settleFromEvent(paymentEvent);
      await transition('payment_unknown'); // re-driven: reconcile again
    }
  }

  async function receipt(): Promise<void> {
    const key = stepKeys.receipt(workflowId);
    for (;;) {
      try {
        const result = await stepActs.sendReceipt.executeWithOptions(
          options(timing.stepMaxAttempts, `send receipt (key ${key})`),
          [
            {
              ...ref,
              key,
              to: input.customer.email,
              amount: input.amount,
              currency: input.currency,
              chargeId: state.chargeId ?? '',
            },
          ],
        );
        state.receiptId = result.messageId;
        return;
      } catch (err) {
        await needsAttention(`receipt failed: ${failureMessage(err)}`);
      }
    }
  }

  upsertSearchAttributes([
    { key: TenantIdKey, value: input.tenantId },
    { key: OrderStatusKey, value: 'accepted' },
  ]);
  await transition('accepted');
  await transition('payment_pending');
  const charged = await charge();
  state.chargeId = charged.chargeId;
  if (charged.outcome !== 'succeeded') {
    await transition('rejected');
    return state;
  }
  await transition('paid');
  await receipt();
  await transition('completed');
  return state;
}
