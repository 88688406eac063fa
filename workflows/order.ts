/**
 * The order workflow: accepted -> charge -> paid -> receipt -> completed, or
 * rejected on a decline. Every step claims its own operation key, derived
 * here from the workflow ID, so retries at any level (attempt, worker crash,
 * duplicate start) reuse the same key.
 *
 * The API writes `accepted` in the order's own transaction, so the workflow
 * starts at payment_pending. Every step is a local activity, run by the
 * worker that holds the workflow task. The charge's writes payment_pending
 * before it charges; the receipt's writes paid and completed around the
 * send; any other status, and one those could not write, is a status step
 * of its own (recordStatus). Status writes go through the ledger's local
 * mode under their own keys, so a replay after a worker crash that runs one
 * again gets the stored result. Each step carries a summary naming what it
 * does and its keys, so the history in the Temporal UI tells the story.
 *
 * An uncertain charge never leads to a second charge under a new key: the
 * workflow enters payment_unknown and reconciles on durable timers until the
 * provider's answer, a webhook event or an operator settles it, or the
 * horizon passes and the order goes to needs_attention.
 *
 * How the file reads: `orderWorkflow` first, the order's story, one line per
 * step; then each step as a named function, in the order they run (the
 * charge with its payment_unknown episode, the rejection, the receipt). What
 * every step shares (the status writes, the parking path, the run's state and
 * its Temporal handlers) is workflows/order-run.ts.
 *
 * Runs are Pinned to the worker version they started on (docs/UPGRADING.md),
 * so a release may change the command sequence. Runs that move to a new
 * version replay this code against their histories: test/fixtures/histories
 * (test/orders/replay.test.ts) holds this code's, and says when a change
 * needs a `patched()` branch.
 */
import { condition } from '@temporalio/workflow';
import type { CarriedStatus, ReconcileResult } from '../activities/order.ts';
import { ORDER_REASONS, stepKeys } from '../src/orders/model.ts';
import { FAILURE, type OrderState } from '../src/orders/contract.ts';
import { activityOptions, localActivityOptions, parksOrder } from './policies.ts';
import { failureMessage, failureType, summarized } from './steps.ts';
import {
  carried,
  needsAttention,
  noteStatus,
  openOrderRun,
  recordStatus,
  type OrderRun,
  type OrderWorkflowArgs,
} from './order-run.ts';

export type { OrderWorkflowArgs } from './order-run.ts';

/**
 * One order, start to end. Each line is a step below. Any step that cannot go
 * on parks the order in needs_attention inside itself, and resumes there when
 * an operator re-drives it (or, while the charge is unsettled, a payment
 * event arrives); so the story has no branch for it.
 */
export async function orderWorkflow(input: OrderWorkflowArgs): Promise<OrderState> {
  const run = openOrderRun(input);
  // `accepted` was written by the API with the order row itself; the charge writes payment_pending
  // before it charges. To a definite outcome: through payment_unknown (reconciliation, a webhook,
  // an operator) when the charge's own answer is lost, and through needs_attention when it cannot
  // go on.
  const charged = await chargeToOutcome(run);
  closeCharge(run, charged);
  if (charged.outcome !== 'succeeded') {
    await rejectOrder(run, charged);
    return run.state;
  }
  // paid, the receipt, completed.
  await receiptToCompleted(run);
  return run.state;
}

// ------------------------------------------------------------------------ charge

/** A settled charge, with what the provider said about a failure. */
interface ChargeOutcome extends ReconcileResult {
  /** The provider's decline code, when it declined the charge itself. */
  failureCode?: string | null;
  /** The provider refused the request outright (nothing charged): its message. */
  refusal?: string;
}

/** How one run of the charge activity (with its own retries) ended. */
type ChargeAttempt =
  | { kind: 'settled'; outcome: ChargeOutcome }
  /** A failure that proves nothing was charged and that retrying cannot fix: a human decides. */
  | { kind: 'parks'; lastError: string; reason: string }
  /** Anything else (a lost response, a timeout, a crash mid-call) may have charged. */
  | { kind: 'uncertain' }
  /**
   * The status the charge carried could not be written, so this attempt did not charge; an
   * earlier attempt whose answer was lost may have, which the charge's key settles.
   */
  | { kind: 'status_not_recorded' };

/**
 * Runs the charge step to a definite outcome. Once the outcome is uncertain
 * the charge is not performed again unless reconciliation shows the
 * provider never saw the key: it is reconciled, or settled by a provider
 * event or an operator, because a retry past the provider's key window
 * could charge twice.
 */
async function chargeToOutcome(run: OrderRun): Promise<ChargeOutcome> {
  // The first charge writes payment_pending itself, before it charges.
  let before: CarriedStatus | undefined = carried(run, 'payment_pending');
  for (;;) {
    const attempt = await performCharge(run, before);
    before = undefined;
    if (attempt.kind === 'status_not_recorded') {
      // This attempt did not charge: payment_pending is written as its own step (which parks the
      // order if it cannot be), then the charge runs under its key (which reconciles any earlier
      // attempt that may have charged before its answer was lost).
      await recordStatus(run, 'payment_pending');
      continue;
    }
    if (attempt.kind === 'settled') return attempt.outcome;
    if (attempt.kind === 'parks') {
      const fromEvent = await parkAfterChargeFailure(run, attempt.lastError, attempt.reason);
      if (fromEvent) return fromEvent;
      continue; // re-driven: the ledger reconciles any earlier claim before performing
    }
    const outcome = await settleUnknownCharge(run);
    if (outcome !== 'perform_again') return outcome;
    // The provider never saw the key: perform the charge again under the same key.
  }
}

/**
 * Calls the provider through the chargePayment activity under the charge's
 * key, and says what its answer, or its failure, means. `before`: a status
 * the activity writes first.
 */
async function performCharge(run: OrderRun, before?: CarriedStatus): Promise<ChargeAttempt> {
  const { input } = run;
  const key = stepKeys.charge(run.workflowId);
  const summary = `${before ? `status -> ${before.status} (key ${before.key}), then ` : ''}charge ${input.amount} ${input.currency} (key ${key})`;
  const args = {
    ...run.ref,
    key,
    amount: input.amount,
    currency: input.currency,
    paymentMethod: input.paymentMethod,
    ...(before ? { before } : {}),
  };
  try {
    const result = await run.local.chargePayment.executeWithOptions(
      summarized(localActivityOptions(run.timing, run.timing.chargeMaxAttempts), summary),
      [args],
    );
    if (before) noteStatus(run, before.status);
    const outcome = {
      settled: true,
      outcome: result.outcome,
      chargeId: result.chargeId,
      failureCode: result.failureCode,
    };
    return { kind: 'settled', outcome };
  } catch (err) {
    const type = failureType(err);
    if (before) {
      if (type === FAILURE.statusNotRecorded) return { kind: 'status_not_recorded' };
      // The activity got past the status write to the charge (or, after a timeout, may not
      // have: the statuses that follow move the row on from either).
      noteStatus(run, before.status);
    }
    if (type === FAILURE.paymentRejected) {
      // The provider refused the request itself: nothing was charged, and retrying can't help.
      const outcome = {
        settled: true,
        outcome: 'failed' as const,
        chargeId: null,
        refusal: failureMessage(err),
      };
      return { kind: 'settled', outcome };
    }
    if (type !== undefined && parksOrder(type)) {
      return {
        kind: 'parks',
        lastError: `charge failed: ${failureMessage(err)}`,
        reason:
          type === FAILURE.providerRejected
            ? ORDER_REASONS.providerRejected
            : ORDER_REASONS.chargeFailed(type),
      };
    }
    run.state.lastError = failureMessage(err);
    return { kind: 'uncertain' };
  }
}

/**
 * A charge failure that retrying cannot fix parks the order. A payment event
 * that arrives while it is parked settles the charge (returned); a re-drive
 * returns null, and the charge is performed again under its key.
 */
async function parkAfterChargeFailure(
  run: OrderRun,
  lastError: string,
  reason: string,
): Promise<ChargeOutcome | null> {
  await needsAttention(run, lastError, reason);
  run.payment.unknownEpisode = undefined;
  return applyPaymentEvent(run);
}

/**
 * payment_unknown: records it, then reconciles until the charge is settled
 * (by the provider's answer to a lookup, a webhook or an operator), or until
 * reconciliation finds the provider never saw the key ('perform_again').
 * Past the horizon the order is parked; a re-drive starts a new episode.
 */
async function settleUnknownCharge(run: OrderRun): Promise<ChargeOutcome | 'perform_again'> {
  await recordStatus(run, 'payment_unknown');
  for (;;) {
    const outcome = await reconcileCharge(run);
    if (outcome !== null) return outcome;
    await needsAttention(
      run,
      'payment outcome still unknown after the reconciliation horizon',
      ORDER_REASONS.paymentUnknownHorizon,
    );
    run.payment.unknownEpisode = undefined;
    const fromEvent = await applyPaymentEvent(run);
    if (fromEvent) return fromEvent;
    await recordStatus(run, 'payment_unknown'); // re-driven: reconcile again
  }
}

/**
 * Reconciles on durable timers with backoff until settled or the horizon
 * passes (null). 'perform_again' means the provider never saw the key:
 * performing under the same key is safe (the activity checks the provider's
 * key window before it does). A payment event cuts a pause short and is
 * applied first.
 */
async function reconcileCharge(run: OrderRun): Promise<ChargeOutcome | 'perform_again' | null> {
  const { state, timing, payment } = run;
  const key = stepKeys.charge(run.workflowId);
  // Workflow time: deterministic.
  const episode = (payment.unknownEpisode ??= {
    deadline: Date.now() + timing.unknownHorizonMs,
    pause: timing.reconcileInitialMs,
  });
  for (;;) {
    const fromEvent = await applyPaymentEvent(run);
    if (fromEvent) return fromEvent;
    state.reconcileAttempts++;
    try {
      const result = await run.acts.reconcileCharge.executeWithOptions(
        summarized(
          activityOptions(timing, timing.stepMaxAttempts),
          `reconcile charge #${state.reconcileAttempts} (key ${key})`,
        ),
        [{ ...run.ref, key }],
      );
      if (result.settled) return result;
      if (result.notStarted || result.performAgain) return 'perform_again';
    } catch (err) {
      state.lastError = `reconciliation failed: ${failureMessage(err)}`;
    }
    const remaining = episode.deadline - Date.now();
    if (remaining <= 0) return null;
    // A durable timer, cut short by a settling signal.
    await condition(() => payment.event !== undefined, Math.min(episode.pause, remaining));
    episode.pause = Math.min(episode.pause * 2, timing.reconcileMaxMs);
  }
}

/**
 * Applies a pending payment event to the ledger (the settleCharge activity),
 * consuming it. Returns null if there is none or it could not be applied
 * (the error is kept for operators; the caller goes on reconciling).
 */
async function applyPaymentEvent(run: OrderRun): Promise<ChargeOutcome | null> {
  const event = run.payment.event;
  if (!event) return null;
  run.payment.event = undefined;
  const key = stepKeys.charge(run.workflowId);
  try {
    const result = await run.acts.settleCharge.executeWithOptions(
      summarized(
        activityOptions(run.timing, run.timing.stepMaxAttempts),
        `settle charge from ${event.source} event ${event.eventId} (key ${key})`,
      ),
      [{ ...run.ref, key, outcome: event.outcome, ...(event.chargeId ? { chargeId: event.chargeId } : {}) }],
    );
    return result.settled ? result : null;
  } catch (err) {
    run.state.lastError = `${event.source} event ${event.eventId} could not be applied: ${failureMessage(err)}`;
    return null;
  }
}

/** The charge has its definite outcome: later payment events (duplicates, late webhooks) change nothing. */
function closeCharge(run: OrderRun, charged: ChargeOutcome): void {
  run.payment.settled = true;
  run.payment.event = undefined;
  run.state.chargeId = charged.chargeId;
}

// --------------------------------------------------------------------- rejection

/** A charge that settled as failed: the order ends rejected, with the reason a tenant sees. */
async function rejectOrder(run: OrderRun, charged: ChargeOutcome): Promise<void> {
  const why = rejection(charged);
  run.state.lastError = why.lastError;
  run.state.reason = why.reason;
  await recordStatus(run, 'rejected', why);
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

// ----------------------------------------------------------------------- receipt

/**
 * paid, the receipt, completed: the receipt's step writes both statuses itself, around the send.
 * If a write in it fails, the three run one by one, each under its own key (what was written or
 * sent replays); if the receipt itself fails, paid is on the row and the order parks (sendReceipt).
 */
async function receiptToCompleted(run: OrderRun): Promise<void> {
  const sent = await sendReceiptCarryingStatus(run);
  if (sent.kind === 'completed') return;
  if (sent.kind === 'status_not_recorded') {
    await recordStatus(run, 'paid');
    await sendReceipt(run);
  } else {
    await sendReceipt(run, sent.error);
  }
  await recordStatus(run, 'completed');
}

/** The receipt's step with paid before it and completed after it. */
async function sendReceiptCarryingStatus(
  run: OrderRun,
): Promise<
  { kind: 'completed' } | { kind: 'status_not_recorded' } | { kind: 'receipt_failed'; error: unknown }
> {
  const paid = carried(run, 'paid');
  const completed = carried(run, 'completed');
  const key = stepKeys.receipt(run.workflowId);
  const summary = `status -> paid (key ${paid.key}), send receipt (key ${key}), status -> completed (key ${completed.key})`;
  try {
    const result = await run.local.sendReceipt.executeWithOptions(
      summarized(localActivityOptions(run.timing, run.timing.stepMaxAttempts), summary),
      [{ ...receiptArgs(run, key), before: paid, after: completed }],
    );
    noteStatus(run, 'paid');
    run.state.receiptId = result.messageId;
    noteStatus(run, 'completed');
    return { kind: 'completed' };
  } catch (err) {
    if (failureType(err) === FAILURE.statusNotRecorded) return { kind: 'status_not_recorded' };
    noteStatus(run, 'paid');
    return { kind: 'receipt_failed', error: err };
  }
}

/** What the receipt's step is called with (ReceiptArgs). */
function receiptArgs(run: OrderRun, key: string) {
  const { input } = run;
  return {
    ...run.ref,
    key,
    to: input.customer.email,
    amount: input.amount,
    currency: input.currency,
    chargeId: run.state.chargeId ?? '',
  };
}

/**
 * Sends the receipt under its key (the email provider dedupes on it). A
 * receipt that runs out of retries parks the order; a re-drive sends it
 * again under the same key. `failed`: the receipt already ran out of its
 * retries (in sendReceiptCarryingStatus); the order parks first.
 */
async function sendReceipt(run: OrderRun, failed?: unknown): Promise<void> {
  const key = stepKeys.receipt(run.workflowId);
  for (;;) {
    if (failed !== undefined) {
      await needsAttention(run, `receipt failed: ${failureMessage(failed)}`, ORDER_REASONS.receiptFailed);
      failed = undefined;
    }
    try {
      const result = await run.local.sendReceipt.executeWithOptions(
        summarized(localActivityOptions(run.timing, run.timing.stepMaxAttempts), `send receipt (key ${key})`),
        [receiptArgs(run, key)],
      );
      run.state.receiptId = result.messageId;
      return;
    } catch (err) {
      failed = err;
    }
  }
}
