/**
 * The order workflow: accepted -> charge -> paid -> receipt -> completed, or
 * rejected on a decline. Every step is an activity that claims its own
 * operation key, derived here from the workflow ID, so retries at any level
 * (activity attempt, worker crash, duplicate start) reuse the same key.
 *
 * The API writes `accepted` in the order's own transaction, so the workflow
 * starts at payment_pending. Status writes are local activities (database
 * only, through the ledger's local mode): a replay after a worker crash runs
 * one again and gets the stored result. Each carries a summary naming the
 * step and its key, so the history in the Temporal UI still tells the story.
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
  proxyLocalActivities,
  setHandler,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type { OrderActivities, ReconcileResult } from '../activities/order.ts';
import { ORDER_REASONS, stepKeys, type OrderStatus, type OrderWorkflowInput } from '../src/orders/model.ts';
import {
  FIRST_ORDER_STATUS,
  OrderLastErrorKey,
  OrderStatusKey,
  FAILURE,
  paymentEventSignal,
  searchableText,
  redriveSignal,
  redriveUpdate,
  statusQuery,
  TenantIdKey,
  type OrderState,
  type PaymentEvent,
  type RedriveRequest,
} from '../src/orders/contract.ts';
import {
  activityOptions,
  externalActivityOptions,
  localActivityOptions,
  parksOrder,
  resolveTiming,
  type OrderTiming,
} from './policies.ts';

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
  const local = proxyLocalActivities<OrderActivities>(localActivityOptions(timing, timing.stepMaxAttempts));
  const ref = { tenantId: input.tenantId, orderId: input.orderId, workflowId };

  const state: OrderState = {
    status: 'accepted',
    chargeId: null,
    receiptId: null,
    lastError: null,
    reason: null,
    reconcileAttempts: 0,
    awaitingOperator: false,
  };
  /** A provider or operator word on the charge, not yet applied. Consumed when applied. */
  let paymentEvent: PaymentEvent | undefined;
  /** Once the charge has a definite outcome, later payment events (duplicates, late webhooks) are ignored. */
  let chargeSettled = false;
  let redrives = 0;
  let redriveRequested = false;
  // What visibility already has from the start: the outbox relay starts an order with TenantId
  // and OrderStatus = FIRST_ORDER_STATUS (src/orders/contract.ts), so that first status needs
  // no upsert of its own. A run started without them (an older relay, a test) tags the tenant
  // with its first status upsert. Read from the start event, so replay decides the same way.
  const startAttributes = workflowInfo().typedSearchAttributes;
  /** TenantId is set once: at start, or with the first status upsert. */
  let tenantTagged = startAttributes.get(TenantIdKey) !== undefined;
  /** True until the first status upsert, if the start already indexed the first status. */
  let firstStatusIndexed = tenantTagged && startAttributes.get(OrderStatusKey) === FIRST_ORDER_STATUS;

  setHandler(statusQuery, () => state);
  setHandler(paymentEventSignal, (event) => {
    // The first settling word wins; duplicates and late events change nothing.
    if (!chargeSettled) paymentEvent ??= event;
  });
  const acceptRedrive = ({ actor, reason }: RedriveRequest) => {
    log.info('re-drive requested', { actor, reason });
    redriveRequested = true;
  };
  setHandler(
    redriveUpdate,
    (request) => {
      acceptRedrive(request);
      return {
        status: state.status,
        reason: state.reason,
        lastError: state.lastError,
        redrives: redrives + 1,
      };
    },
    {
      // Runs before anything is written to the history: a refused re-drive leaves no trace
      // in the workflow, and the caller (ops CLI, admin API) gets the error.
      validator: (request) => {
        if (!request?.actor?.trim() || !request?.reason?.trim()) {
          throw ApplicationFailure.create({
            type: FAILURE.redriveRefused,
            message: 're-drive refused: actor and reason are required',
            nonRetryable: true,
          });
        }
        if (!state.awaitingOperator || redriveRequested) {
          throw ApplicationFailure.create({
            type: FAILURE.redriveRefused,
            message:
              `re-drive refused: the order workflow is not parked (status ${state.status}` +
              `${redriveRequested ? ', a re-drive is already under way' : ''}); ` +
              'only a workflow waiting for an operator can be re-driven',
            nonRetryable: true,
          });
        }
      },
    },
  );
  // The older signal form cannot refuse; it is honoured only while parked.
  setHandler(redriveSignal, (request) => {
    if (state.awaitingOperator) acceptRedrive(request);
  });

  const options = (maximumAttempts: number, summary: string) => ({
    ...activityOptions(timing, maximumAttempts),
    summary,
  });
  const externalOptions = (maximumAttempts: number, summary: string) => ({
    ...externalActivityOptions(timing, maximumAttempts),
    summary,
  });

  function upsertStatus(status: OrderStatus, lastError?: string | null): void {
    const indexed = firstStatusIndexed && status === FIRST_ORDER_STATUS && !lastError;
    firstStatusIndexed = false;
    if (indexed) return;
    upsertSearchAttributes([
      ...(tenantTagged ? [] : [{ key: TenantIdKey, value: input.tenantId }]),
      { key: OrderStatusKey, value: status },
      ...(lastError ? [{ key: OrderLastErrorKey, value: searchableText(lastError) }] : []),
    ]);
    tenantTagged = true;
  }

  // Not `async`: it hands back the activity's own promise. With the SDK's promise hook (a stack
  // trace captured for every promise made in workflow code), each extra async layer costs.
  function writeStatus(
    status: OrderStatus,
    key: string,
    extra: { lastError?: string | null; reason?: string | null },
    maximumAttempts: number,
  ): Promise<unknown> {
    return local.setOrderStatus.executeWithOptions(
      {
        ...localActivityOptions(timing, maximumAttempts),
        summary: `status -> ${status} (key ${key})`,
      },
      [
        {
          ...ref,
          key,
          status,
          chargeId: state.chargeId,
          receiptId: state.receiptId,
          lastError: extra.lastError ?? null,
          reason: extra.reason ?? null,
        },
      ],
    );
  }

  /**
   * Writes a status through the ledger. If even that runs out of retries
   * (the database is down for long), the order is flagged needs_attention in
   * the search attributes (which `ops attention` and the needs_attention
   * gauge read), one attempt is made to record needs_attention on the row,
   * and the workflow waits for a re-drive; it never silently fails.
   */
  async function transition(
    status: OrderStatus,
    extra: { lastError?: string; reason?: string } = {},
  ): Promise<void> {
    // Already recorded in this re-drive epoch (e.g. payment_unknown again after a perform-again).
    if (state.status === status && status !== 'needs_attention') return;
    for (;;) {
      const key = stepKeys.status(workflowId, status, redrives);
      try {
        await writeStatus(status, key, extra, timing.stepMaxAttempts);
        state.status = status;
        if (status !== 'rejected' && status !== 'needs_attention') state.reason = null;
        upsertStatus(status, extra.lastError);
        return;
      } catch (err) {
        state.lastError = `status ${status} could not be recorded: ${failureMessage(err)}`;
        state.reason = ORDER_REASONS.statusWriteFailed;
        upsertStatus('needs_attention', state.lastError);
        try {
          // One more try, to put the reason on the row; if the database is still
          // unreachable, the search attributes above keep the order visible.
          await writeStatus(
            'needs_attention',
            stepKeys.status(workflowId, 'needs_attention', redrives),
            { lastError: state.lastError, reason: state.reason },
            1,
          );
          state.status = 'needs_attention';
        } catch (recordErr) {
          log.warn('parked order could not be recorded as needs_attention', {
            error: failureMessage(recordErr),
          });
        }
        await waitForOperator();
        // A re-drive of a failed needs_attention write means: move on.
        if (status === 'needs_attention') return;
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
  async function needsAttention(lastError: string, reason: string): Promise<void> {
    state.lastError = lastError;
    state.reason = reason;
    const before = redrives;
    await transition('needs_attention', { lastError, reason });
    // If recording it parked (and was re-driven) already, don't park twice.
    if (redrives === before) await waitForOperator();
  }

  /**
   * Applies a pending payment event to the ledger, consuming it. Returns null
   * if there is none or it could not be applied (the error is kept for
   * operators; the caller goes on reconciling).
   */
  async function applyPaymentEvent(): Promise<ChargeOutcome | null> {
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
   * The reconciliation clock of the current payment_unknown episode. It runs
   * across perform-again rounds (so a provider that keeps losing requests
   * still reaches the horizon, and lookups keep backing off), and restarts
   * only after an operator re-drive.
   */
  let unknownEpisode: { deadline: number; pause: number } | undefined;

  /**
   * payment_unknown: reconcile on durable timers with backoff until settled
   * or the horizon passes (null). 'perform_again' means the provider never
   * saw the key: performing under the same key is safe (the activity checks
   * the provider's key window before it does).
   */
  async function resolveUnknownCharge(): Promise<ChargeOutcome | 'perform_again' | null> {
    const key = stepKeys.charge(workflowId);
    // Workflow time: deterministic.
    const episode = (unknownEpisode ??= {
      deadline: Date.now() + timing.unknownHorizonMs,
      pause: timing.reconcileInitialMs,
    });
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
        if (result.notStarted || result.performAgain) return 'perform_again';
      } catch (err) {
        state.lastError = `reconciliation failed: ${failureMessage(err)}`;
      }
      const remaining = episode.deadline - Date.now();
      if (remaining <= 0) return null;
      // A durable timer, cut short by a settling signal.
      await condition(() => paymentEvent !== undefined, Math.min(episode.pause, remaining));
      episode.pause = Math.min(episode.pause * 2, timing.reconcileMaxMs);
    }
  }

  /**
   * Runs the charge step to a definite outcome. Once the outcome is uncertain
   * the charge is not performed again unless reconciliation shows the
   * provider never saw the key: it is reconciled, or settled by a provider
   * event or an operator, because a retry past the provider's key window
   * could charge twice.
   */
  async function charge(): Promise<ChargeOutcome> {
    const key = stepKeys.charge(workflowId);
    for (;;) {
      try {
        const result = await acts.chargePayment.executeWithOptions(
          externalOptions(timing.chargeMaxAttempts, `charge ${input.amount} ${input.currency} (key ${key})`),
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
        return {
          settled: true,
          outcome: result.outcome,
          chargeId: result.chargeId,
          failureCode: result.failureCode,
        };
      } catch (err) {
        const type = failureType(err);
        if (type === FAILURE.paymentRejected) {
          // The provider refused the request itself: nothing was charged, and retrying can't help.
          return { settled: true, outcome: 'failed', chargeId: null, refusal: failureMessage(err) };
        }
        if (type !== undefined && parksOrder(type)) {
          await needsAttention(
            `charge failed: ${failureMessage(err)}`,
            type === FAILURE.providerRejected
              ? ORDER_REASONS.providerRejected
              : ORDER_REASONS.chargeFailed(type),
          );
          unknownEpisode = undefined;
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
        await needsAttention(
          'payment outcome still unknown after the reconciliation horizon',
          ORDER_REASONS.paymentUnknownHorizon,
        );
        unknownEpisode = undefined;
        outcome = await applyPaymentEvent();
        if (outcome) break;
        await transition('payment_unknown'); // re-driven: reconcile again
        outcome = await resolveUnknownCharge();
      }
      if (outcome !== 'perform_again') return outcome;
      // The provider never saw the key: perform the charge again under the same key.
    }
  }

  async function receipt(): Promise<void> {
    const key = stepKeys.receipt(workflowId);
    for (;;) {
      try {
        const result = await acts.sendReceipt.executeWithOptions(
          externalOptions(timing.stepMaxAttempts, `send receipt (key ${key})`),
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
        await needsAttention(`receipt failed: ${failureMessage(err)}`, ORDER_REASONS.receiptFailed);
      }
    }
  }

  // `accepted` was written by the API with the order row itself.
  await transition('payment_pending');
  const charged = await charge();
  chargeSettled = true;
  paymentEvent = undefined;
  state.chargeId = charged.chargeId;
  if (charged.outcome !== 'succeeded') {
    const why = rejection(charged);
    state.lastError = why.lastError;
    state.reason = why.reason;
    await transition('rejected', why);
    return state;
  }
  await transition('paid');
  await receipt();
  await transition('completed');
  return state;
}

/** A settled charge, with what the provider said about a failure. */
interface ChargeOutcome extends ReconcileResult {
  /** The provider's decline code, when it declined the charge itself. */
  failureCode?: string | null;
  /** The provider refused the request outright (nothing charged): its message. */
  refusal?: string;
}

function rejection(charged: ChargeOutcome): { reason: string; lastError: string } {
  if (charged.refusal) return { reason: ORDER_REASONS.providerRejected, lastError: charged.refusal };
  if (charged.failureCode) {
    return {
      reason: ORDER_REASONS.declined(charged.failureCode),
      lastError: `the provider declined the charge (${charged.failureCode})`,
    };
  }
  return {
    reason: ORDER_REASONS.paymentFailed,
    lastError: 'the charge was settled as failed (by reconciliation, a provider event or an operator)',
  };
}
