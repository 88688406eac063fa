/**
 * The refund workflow, one per refund (`refund/<tenant>/<refundId>`):
 * record pending -> the provider refund under a downstream key -> record the
 * outcome -> the refund receipt. Built on the order's step helpers
 * (workflows/steps.ts, workflows/policies.ts) and its activity helpers; every
 * step claims its own operation key, derived here from the workflow ID
 * (refundStepKeys), and carries a summary naming the step and its key, so the
 * history in the Temporal UI tells the refund's story as it does an order's.
 *
 * The API wrote the refund row in `pending` (with its amount reserved on the
 * order) before this workflow started. An uncertain provider refund is never
 * made again under a new key: the refund enters `refund_unknown` and is
 * reconciled on durable timers, exactly as an uncertain charge is
 * (src/steps/refund.ts mirrors src/steps/payment.ts); past the horizon it
 * parks in `needs_attention` until an operator re-drives it. A provider
 * refund event (the `refundEvent` signal, sent by the payments webhook only
 * for an event that names this refund's provider refund) settles an
 * uncertain refund, there or while parked: the first one is kept and applied
 * to the step's ledger record (settleRefund), where a record already final
 * keeps its outcome; once the refund has settled, events change nothing, so
 * a late or reordered event never moves it backwards. Entering `failed`
 * gives the refund's amount back to the order (src/refunds/sql.ts).
 *
 * Operators (src/operator/operator.ts): a re-drive is the `redrive` update
 * (refused unless parked) or the older signal; an operator's resolution or
 * reconcile sends `refundEvent`, a wake-up only: the outcome is read from the
 * provider refund's ledger record under its own key, never from the signal.
 *
 * Visibility: TenantId, and the status under the OrderStatus keyword prefixed
 * with `refund:` (e.g. `refund:succeeded`), so the UI's list shows where each
 * refund is while no order query (`OrderStatus = 'needs_attention'`) ever
 * matches a refund.
 */
import {
  condition,
  defineQuery,
  proxyActivities,
  proxyLocalActivities,
  setHandler,
  workflowInfo,
  type ActivityInterfaceFor,
  type LocalActivityInterfaceFor,
} from '@temporalio/workflow';
import type { RefundActivities } from '../activities/refund.ts';
import { FAILURE, TenantIdKey } from '../src/orders/contract.ts';
import {
  refundEventSignal,
  refundRedriveUpdate,
  refundStepKeys,
  type RefundEvent,
  type RefundStatus,
  type RefundWorkflowInput,
} from '../src/refunds/contract.ts';
import {
  activityOptions,
  externalActivityOptions,
  localActivityOptions,
  parksOrder,
  resolveTiming,
  type OrderTiming,
} from './policies.ts';
import { upsertStatusAttributes } from './order-run.ts';
import { failureMessage, failureType, handleRedrive, summarized } from './steps.ts';

interface RefundWorkflowArgs extends RefundWorkflowInput {
  /** Test and operator overrides of the declared timeouts; defaults in workflows/policies.ts. */
  timing?: Partial<OrderTiming>;
}

interface RefundState {
  status: RefundStatus;
  providerRefundId: string | null;
  receiptId: string | null;
  lastError: string | null;
  reconcileAttempts: number;
  awaitingOperator: boolean;
}

const refundStatusQuery = defineQuery<RefundState>('refundStatus');

/** One refund, start to end. */
export async function refundWorkflow(input: RefundWorkflowArgs): Promise<RefundState> {
  const run = openRefundRun(input);
  await recordStatus(run, 'pending');
  const outcome = await refundToOutcome(run);
  // Settled: later provider events (duplicates, late or reordered ones) change nothing.
  run.settled = true;
  run.event = undefined;
  run.state.providerRefundId = outcome.providerRefundId;
  await recordStatus(run, outcome.outcome);
  if (outcome.outcome === 'succeeded') await sendReceipt(run);
  return run.state;
}

// ----------------------------------------------------------------- status writes

async function recordStatus(run: RefundRun, status: RefundStatus, lastError?: string): Promise<void> {
  for (;;) {
    const key = refundStepKeys.status(run.workflowId, status, run.redrives);
    try {
      await run.local.setRefundStatus.executeWithOptions(
        summarized(
          localActivityOptions(run.timing, run.timing.stepMaxAttempts),
          `refund status -> ${status} (key ${key})`,
        ),
        [
          {
            ...run.ref,
            key,
            status,
            providerRefundId: run.state.providerRefundId,
            lastError: lastError ?? null,
          },
        ],
      );
      run.state.status = status;
      indexStatus(run, status, lastError);
      return;
    } catch (err) {
      // Out of retries (the database is down for long): visible as needs_attention, then a human.
      run.state.lastError = `refund status ${status} could not be recorded: ${failureMessage(err)}`;
      indexStatus(run, 'needs_attention', run.state.lastError);
      await waitForOperator(run);
    }
  }
}

/** Visibility: the status under OrderStatus as `refund:<status>`, which no order query matches. */
function indexStatus(run: RefundRun, status: RefundStatus, lastError?: string | null): void {
  upsertStatusAttributes(run, run.input.tenantId, `refund:${status}`, lastError);
}

// ------------------------------------------------------------- provider refund

interface RefundOutcome {
  outcome: 'succeeded' | 'failed';
  providerRefundId: string | null;
}

/**
 * Runs the provider refund to a definite outcome: its own answer; or, when
 * that answer is lost, reconciliation by its key (refund_unknown), performing
 * again under the SAME key only when the provider never saw it; or a human.
 */
async function refundToOutcome(run: RefundRun): Promise<RefundOutcome> {
  for (;;) {
    const attempt = await performRefund(run);
    if (attempt.kind === 'settled') return attempt.outcome;
    if (attempt.kind === 'parks') {
      await needsAttention(run, attempt.lastError);
      // Woken by a settling word (a provider event, an operator's resolve) rather than a re-drive:
      // apply it, which consumes it, so a park that follows waits again instead of waking at once.
      const fromEvent = await applyRefundEvent(run);
      if (fromEvent) return fromEvent;
      continue; // re-driven: the ledger reconciles any earlier claim before performing
    }
    await recordStatus(run, 'refund_unknown', run.state.lastError ?? undefined);
    const settled = await reconcileRefund(run);
    if (settled === 'perform_again') continue;
    if (settled) return settled;
    const fromEvent = await parkUntilSettledOrRedriven(
      run,
      'refund outcome still unknown after the reconciliation horizon',
    );
    if (fromEvent) return fromEvent;
  }
}

/**
 * Parks an uncertain refund for an operator. A provider refund event that
 * arrives meanwhile settles it (returned); a re-drive returns null, and the
 * refund is reconciled and, if the provider never saw it, performed again
 * under its key.
 */
async function parkUntilSettledOrRedriven(run: RefundRun, lastError: string): Promise<RefundOutcome | null> {
  run.state.lastError = lastError;
  await recordStatus(run, 'needs_attention', lastError);
  for (;;) {
    run.state.awaitingOperator = true;
    await condition(() => run.redriveRequested || run.event !== undefined);
    run.state.awaitingOperator = false;
    if (run.redriveRequested) {
      run.redriveRequested = false;
      run.redrives++;
      return null;
    }
    const fromEvent = await applyRefundEvent(run);
    if (fromEvent) return fromEvent;
  }
}

/**
 * Applies a pending refund event to the step's ledger record (the
 * settleRefund activity), consuming it. Returns null if there is none or it
 * could not be applied (the error is kept for operators).
 */
async function applyRefundEvent(run: RefundRun): Promise<RefundOutcome | null> {
  const event = run.event;
  if (!event) return null;
  run.event = undefined;
  const key = refundStepKeys.refund(run.workflowId);
  try {
    const r = await run.acts.settleRefund.executeWithOptions(
      summarized(
        activityOptions(run.timing, run.timing.stepMaxAttempts),
        `settle refund from ${event.source} event ${event.eventId} (key ${key})`,
      ),
      [
        {
          ...run.ref,
          key,
          outcome: event.outcome,
          ...(event.providerRefundId ? { providerRefundId: event.providerRefundId } : {}),
        },
      ],
    );
    return r.settled && r.outcome ? { outcome: r.outcome, providerRefundId: r.chargeId } : null;
  } catch (err) {
    run.state.lastError = `${event.source} event ${event.eventId} could not be applied: ${failureMessage(err)}`;
    return null;
  }
}

type RefundAttempt =
  { kind: 'settled'; outcome: RefundOutcome } | { kind: 'parks'; lastError: string } | { kind: 'uncertain' };

async function performRefund(run: RefundRun): Promise<RefundAttempt> {
  const { input } = run;
  const key = refundStepKeys.refund(run.workflowId);
  try {
    const r = await run.acts.refundPayment.executeWithOptions(
      summarized(
        externalActivityOptions(run.timing, run.timing.chargeMaxAttempts),
        `refund ${input.amount} ${input.currency} of charge ${input.chargeId} (key ${key})`,
      ),
      [
        {
          ...run.ref,
          key,
          chargeId: input.chargeId,
          amount: input.amount,
          currency: input.currency,
          reason: input.reason,
        },
      ],
    );
    return { kind: 'settled', outcome: { outcome: r.outcome, providerRefundId: r.providerRefundId } };
  } catch (err) {
    const type = failureType(err);
    if (type === FAILURE.paymentRejected) {
      // The provider refused the refund before acting: nothing was refunded.
      run.state.lastError = failureMessage(err);
      return { kind: 'settled', outcome: { outcome: 'failed', providerRefundId: null } };
    }
    if (type !== undefined && parksOrder(type))
      return { kind: 'parks', lastError: `refund failed: ${failureMessage(err)}` };
    run.state.lastError = failureMessage(err);
    return { kind: 'uncertain' };
  }
}

/** Reconciles on durable timers with backoff until settled, 'perform_again', or the horizon (null). */
async function reconcileRefund(run: RefundRun): Promise<RefundOutcome | 'perform_again' | null> {
  const { timing, state } = run;
  const key = refundStepKeys.refund(run.workflowId);
  const deadline = Date.now() + timing.unknownHorizonMs;
  let pause = timing.reconcileInitialMs;
  for (;;) {
    const fromEvent = await applyRefundEvent(run);
    if (fromEvent) return fromEvent;
    state.reconcileAttempts++;
    try {
      const r = await run.acts.reconcileRefund.executeWithOptions(
        summarized(
          activityOptions(timing, timing.stepMaxAttempts),
          `reconcile refund #${state.reconcileAttempts} (key ${key})`,
        ),
        [{ ...run.ref, key, chargeId: run.input.chargeId }],
      );
      if (r.settled && r.outcome) return { outcome: r.outcome, providerRefundId: r.chargeId };
      if (r.notStarted || r.performAgain) return 'perform_again';
    } catch (err) {
      state.lastError = `reconciliation failed: ${failureMessage(err)}`;
    }
    const remaining = deadline - Date.now();
    if (remaining <= 0) return null;
    // A durable timer, cut short by a settling event (a provider's webhook or an operator's word).
    await condition(() => run.event !== undefined, Math.min(pause, remaining));
    pause = Math.min(pause * 2, timing.reconcileMaxMs);
  }
}

// ----------------------------------------------------------------------- receipt

async function sendReceipt(run: RefundRun): Promise<void> {
  const key = refundStepKeys.receipt(run.workflowId);
  for (;;) {
    try {
      const r = await run.acts.sendRefundReceipt.executeWithOptions(
        summarized(
          externalActivityOptions(run.timing, run.timing.stepMaxAttempts),
          `send refund receipt (key ${key})`,
        ),
        [
          {
            ...run.ref,
            key,
            to: run.input.customerEmail,
            amount: run.input.amount,
            currency: run.input.currency,
            providerRefundId: run.state.providerRefundId ?? '',
          },
        ],
      );
      run.state.receiptId = r.messageId;
      return;
    } catch (err) {
      // The refund is made; only the email is missing. A human re-drives it (same key).
      run.state.lastError = `refund receipt failed: ${failureMessage(err)}`;
      indexStatus(run, run.state.status, run.state.lastError);
      await waitForOperator(run);
    }
  }
}

// ----------------------------------------------------------------------- parking

async function needsAttention(run: RefundRun, lastError: string): Promise<void> {
  run.state.lastError = lastError;
  await recordStatus(run, 'needs_attention', lastError);
  await waitForOperator(run);
}

/**
 * Waits for a re-drive (the `redrive` update or signal) or, while the refund
 * is unsettled, a settling word on its outcome (refundEvent: a provider's
 * webhook or an operator's resolve), which the caller's next step applies or
 * reads from the ledger; each opens a new key epoch for status writes.
 */
async function waitForOperator(run: RefundRun): Promise<void> {
  run.state.awaitingOperator = true;
  // A word that came while the parking status was being written still counts: not reset here.
  await condition(() => run.redriveRequested || run.event !== undefined);
  run.state.awaitingOperator = false;
  run.redriveRequested = false;
  run.redrives++;
}

// ------------------------------------------------------------------- the run

interface RefundRun {
  readonly input: RefundWorkflowArgs;
  readonly workflowId: string;
  readonly timing: OrderTiming;
  readonly ref: { tenantId: string; orderId: string; workflowId: string; refundId: string };
  readonly acts: ActivityInterfaceFor<RefundActivities>;
  readonly local: LocalActivityInterfaceFor<RefundActivities>;
  readonly state: RefundState;
  tenantTagged: boolean;
  redrives: number;
  redriveRequested: boolean;
  /** The first provider refund event not yet applied (cleared once the refund has settled). */
  event: RefundEvent | undefined;
  settled: boolean;
}

function openRefundRun(input: RefundWorkflowArgs): RefundRun {
  const { workflowId, typedSearchAttributes } = workflowInfo();
  const timing = resolveTiming(input.timing);
  const run: RefundRun = {
    input,
    workflowId,
    timing,
    ref: { tenantId: input.tenantId, orderId: input.orderId, workflowId, refundId: input.refundId },
    acts: proxyActivities<RefundActivities>(activityOptions(timing, timing.stepMaxAttempts)),
    local: proxyLocalActivities<RefundActivities>(localActivityOptions(timing, timing.stepMaxAttempts)),
    state: {
      status: 'pending',
      providerRefundId: null,
      receiptId: null,
      lastError: null,
      reconcileAttempts: 0,
      awaitingOperator: false,
    },
    tenantTagged: typedSearchAttributes.get(TenantIdKey) !== undefined,
    redrives: 0,
    redriveRequested: false,
    event: undefined,
    settled: false,
  };
  setHandler(refundStatusQuery, () => run.state);
  setHandler(refundEventSignal, (event) => {
    // The first settling word wins; duplicates and late events change nothing. An operator's
    // word (resolve, or a reconcile that settled it) is applied the same way: its outcome is
    // already the ledger record's, which settleRefund keeps.
    if (!run.settled) run.event ??= event;
  });
  handleRedrive(
    'refund',
    refundRedriveUpdate,
    () => ({
      status: run.state.status,
      awaitingOperator: run.state.awaitingOperator,
      requested: run.redriveRequested,
    }),
    () => {
      run.redriveRequested = true;
      return { status: run.state.status, lastError: run.state.lastError, redrives: run.redrives + 1 };
    },
  );
  return run;
}
