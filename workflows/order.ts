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
import { activityOptions, DEFINITE_FAILURE_TYPES, resolveTiming, type OrderTiming } from './policies.ts';

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
  // Every call passes its own options (attempt budget + a summary naming the step and key).
  const acts = proxyActivities<OrderActivities>(activityOptions(timing, timing.stepMaxAttempts));
  const ref = { tenantId: input.tenantId, orderId: input.orderId, workflowId };

  const state: OrderState = {
    status: 'accepted',
    chargeId: null,
    receiptId: null,
    lastError: null,
    reconcileAttempts: 0,
    awaitingOperator: false,
  };
  /** A provider or operator word on the charge, not yet applied. Consumed when applied. */
  let paymentEvent: PaymentEvent | undefined;
  /** Once the charge has a definite outcome, later payment events (duplicates, late webhooks) are ignored. */
  let chargeSettled = false;
  let redrives = 0;
  let redriveRequested = false;

  setHandler(statusQuery, () => state);
  setHandler(paymentEventSignal, (event) => {
    // The first settling word wins; duplicates and late events change nothing.
    if (!chargeSettled) paymentEvent ??= event;
  });
  setHandler(redriveSignal, ({ actor, reason }) => {
    if (!state.awaitingOperator) return;
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
        await acts.setOrderStatus.executeWithOptions(
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

  /** Waits for a re-drive, or (while the charge is unsettled) a payment event. */
  async function waitForOperator(): Promise<void> {
    state.awaitingOperator = true;
    await condition(() => redriveRequested || paymentEvent !== undefined);
    state.awaitingOperator = false;
    redriveRequested = false;
    redrives++;
  }

  /** Parks the order for a human; resumes when an operator re-drives it or a payment event arrives. */
  async function needsAttention(reason: string): Promise<void> {
    state.lastError = reason;
    await transition('needs_attention', { lastError: reason });
    await waitForOperator();
  }

  /**
   * Applies a pending payment event to the ledger, consuming it. Returns null
   * if there is none or it could not be applied (the error is kept for
   * operators; the caller goes on reconciling).
   */
  async function applyPaymentEvent(): Promise<ReconcileResult | null> {
    const event = paymentEvent;
    if (!event) return null;
    paymentEvent = undefined;
    const key = stepKeys.charge(workflowId);
    try {
      const result = await acts.settleCharge.executeWithOptions(
        options(
          timing.stepMaxAttempts,
          `settle charge from ${event.source} event ${event.eventId} (key ${key})`,
        ),
        [{ ...ref, key, outcome: event.outcome, ...(event.chargeId ? { chargeId: event.chargeId } : {}) }],
      );
      return result.settled ? result : null;
    } catch (err) {
      state.lastError = `${event.source} event ${event.eventId} could not be applied: ${failureMessage(err)}`;
      return null;
    }
  }

  /**
   * payment_unknown: reconcile on durable timers with backoff until settled
   * or the horizon passes (null). 'not_started' means the provider never saw
   * the key and no claim exists: performing under the same key is safe.
   */
  async function resolveUnknownCharge(): Promise<ReconcileResult | 'not_started' | null> {
    const key = stepKeys.charge(workflowId);
    const deadline = Date.now() + timing.unknownHorizonMs; // workflow time: deterministic
    let pause = timing.reconcileInitialMs;
    for (;;) {
      const fromEvent = await applyPaymentEvent();
      if (fromEvent) return fromEvent;
      state.reconcileAttempts++;
      try {
        const result = await acts.reconcileCharge.executeWithOptions(
          options(timing.stepMaxAttempts, `reconcile charge #${state.reconcileAttempts} (key ${key})`),
          [{ ...ref, key }],
        );
        if (result.settled) return result;
        if (result.notStarted) return 'not_started';
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
   * the charge is not performed again unless reconciliation shows the
   * provider never saw the key: it is reconciled, or settled by a provider
   * event or an operator, because a retry past the provider's key window
   * could charge twice.
   */
  async function charge(): Promise<ReconcileResult> {
    const key = stepKeys.charge(workflowId);
    for (;;) {
      try {
        const result = await acts.chargePayment.executeWithOptions(
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
        if (type === 'PaymentRejected') {
          // The provider refused the request itself: nothing was charged, and retrying can't help.
          state.lastError = failureMessage(err);
          return { settled: true, outcome: 'failed', chargeId: null };
        }
        if (type !== undefined && DEFINITE_FAILURE_TYPES.includes(type)) {
          await needsAttention(`charge failed: ${failureMessage(err)}`);
          const fromEvent = await applyPaymentEvent();
          if (fromEvent) return fromEvent;
          continue; // re-driven: the ledger reconciles any earlier claim before performing
        }
        // Anything else (lost response, timeout, a crash mid-call) may have charged.
        state.lastError = failureMessage(err);
      }
      await transition('payment_unknown');
      let outcome = await resolveUnknownCharge();
      while (outcome === null) {
        await needsAttention('payment outcome still unknown after the reconciliation horizon');
        outcome = await applyPaymentEvent();
        if (outcome) break;
        await transition('payment_unknown'); // re-driven: reconcile again
        outcome = await resolveUnknownCharge();
      }
      if (outcome !== 'not_started') return outcome;
    }
  }

  async function receipt(): Promise<void> {
    const key = stepKeys.receipt(workflowId);
    for (;;) {
      try {
        const result = await acts.sendReceipt.executeWithOptions(
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
  chargeSettled = true;
  paymentEvent = undefined;
  state.chargeId = charged.chargeId;
  if (charged.outcome !== 'succeeded') {
    await transition('rejected', state.lastError ? { lastError: state.lastError } : {});
    return state;
  }
  await transition('paid');
  await receipt();
  await transition('completed');
  return state;
}
