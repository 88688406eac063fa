/**
 * What every step of the order workflow (workflows/order.ts) shares: the run's state and its
 * Temporal handlers (the status query, the payment-event signal, the re-drive), the status writes,
 * and the parking path (needs_attention and the wait for a re-drive).
 */
import {
  condition,
  log,
  proxyActivities,
  proxyLocalActivities,
  setHandler,
  sleep,
  upsertSearchAttributes,
  workflowInfo,
  type ActivityInterfaceFor,
  type LocalActivityInterfaceFor,
} from '@temporalio/workflow';
import type { CarriedStatus, OrderActivities } from '../activities/order.ts';
import { ORDER_REASONS, stepKeys, type OrderStatus, type OrderWorkflowInput } from '../src/orders/model.ts';
import {
  FIRST_ORDER_STATUS,
  OrderLastErrorKey,
  OrderStatusKey,
  paymentEventSignal,
  searchableText,
  redriveUpdate,
  statusQuery,
  TenantIdKey,
  type OrderState,
  type PaymentEvent,
} from '../src/orders/contract.ts';
import { activityOptions, localActivityOptions, resolveTiming, type OrderTiming } from './policies.ts';
import { failureMessage, handleRedrive, summarized } from './steps.ts';

export interface OrderWorkflowArgs extends OrderWorkflowInput {
  /** Test and operator overrides of the declared timeouts; defaults in workflows/policies.ts. */
  timing?: Partial<OrderTiming>;
}

// ----------------------------------------------------------------- status writes
//
// A status reaches the order's row in one of two ways: carried by the step it belongs to (the
// charge writes payment_pending, the receipt paid and completed; see `carried`), or as a status
// step of its own (recordStatus). Either way the workflow then notes it (noteStatus): the run's
// state and visibility follow the row.

/**
 * Writes a status as its own step: one local activity (setOrderStatus) under the status's key.
 * If even that runs out of retries (the database is down for long), the order is flagged
 * needs_attention in the search attributes (which `ops attention` and the needs_attention gauge
 * read), one attempt is made to record needs_attention on the row, and the workflow waits for a
 * re-drive; it never silently fails.
 */
export async function recordStatus(
  run: OrderRun,
  status: OrderStatus,
  extra: { lastError?: string; reason?: string } = {},
): Promise<void> {
  const { state } = run;
  // Already recorded in this re-drive epoch (e.g. payment_unknown again after a perform-again).
  if (state.status === status && status !== 'needs_attention') return;
  // Not `async`: it hands back the activity's own promise (the SDK's promise hook captures a stack
  // trace for every promise made in workflow code, so each extra async layer costs).
  const step = (
    to: OrderStatus,
    written: { lastError?: string | null; reason?: string | null },
    maximumAttempts: number,
  ) => {
    const key = stepKeys.status(run.workflowId, to, run.operator.redrives);
    return run.local.setOrderStatus.executeWithOptions(
      summarized(localActivityOptions(run.timing, maximumAttempts), `status -> ${to} (key ${key})`),
      [
        {
          ...run.ref,
          key,
          status: to,
          chargeId: state.chargeId,
          receiptId: state.receiptId,
          lastError: written.lastError ?? null,
          reason: written.reason ?? null,
        },
      ],
    );
  };
  for (;;) {
    try {
      await step(status, extra, run.timing.stepMaxAttempts);
      noteStatus(run, status, extra.lastError);
      return;
    } catch (err) {
      state.lastError = `status ${status} could not be recorded: ${failureMessage(err)}`;
      state.reason = ORDER_REASONS.statusWriteFailed;
      // Visibility only: the row does not say needs_attention unless the write below succeeds.
      indexStatus(run, 'needs_attention', state.lastError);
      try {
        // One more try, to put the reason on the row; if the database is still
        // unreachable, the search attributes above keep the order visible.
        await step('needs_attention', { lastError: state.lastError, reason: state.reason }, 1);
        state.status = 'needs_attention';
      } catch (recordErr) {
        log.warn('parked order could not be recorded as needs_attention', {
          error: failureMessage(recordErr),
        });
      }
      await waitForOperator(run);
      // A re-drive of a failed needs_attention write means: move on.
      if (status === 'needs_attention') return;
    }
  }
}

/** A status is on the order's row (written by its own step, or carried by another's): the run's state and visibility follow. */
export function noteStatus(run: OrderRun, status: OrderStatus, lastError?: string | null): void {
  run.state.status = status;
  if (status !== 'rejected' && status !== 'needs_attention') run.state.reason = null;
  indexStatus(run, status, lastError);
}

/**
 * A status under its key in the current re-drive epoch: what a step carries to write itself, and
 * the key its own status step would use (recordStatus), so either finds what the other wrote.
 */
export function carried(run: OrderRun, status: OrderStatus): CarriedStatus {
  return { status, key: stepKeys.status(run.workflowId, status, run.operator.redrives) };
}

/**
 * Indexes the status (and the last error) for visibility queries. The start
 * may have indexed the first status already (see OrderRun.visibility); then
 * its first upsert is skipped, and the tenant is tagged only once.
 */
function indexStatus(run: OrderRun, status: OrderStatus, lastError?: string | null): void {
  const { visibility } = run;
  // `paid` is not indexed: the receipt's step notes it in the workflow task that notes the next
  // status (completed, or needs_attention), whose upsert would replace it; and nothing reads it
  // there (src/orders/attention.ts and the UI never ask for it; the row still says paid).
  if (status === 'paid') return;
  const indexed = visibility.firstStatusIndexed && status === FIRST_ORDER_STATUS && !lastError;
  visibility.firstStatusIndexed = false;
  if (!indexed) upsertStatusAttributes(visibility, run.input.tenantId, status, lastError);
}

/** The status (and the last error) in the search attributes, with TenantId once: the order's and the refund's. */
export function upsertStatusAttributes(
  tags: { tenantTagged: boolean },
  tenantId: string,
  status: string,
  lastError?: string | null,
): void {
  upsertSearchAttributes([
    ...(tags.tenantTagged ? [] : [{ key: TenantIdKey, value: tenantId }]),
    { key: OrderStatusKey, value: status },
    ...(lastError ? [{ key: OrderLastErrorKey, value: searchableText(lastError) }] : []),
  ]);
  tags.tenantTagged = true;
}

// ----------------------------------------------------------------------- parking

/** Parks the order for a human; resumes when an operator re-drives it or a payment event arrives. */
export async function needsAttention(run: OrderRun, lastError: string, reason: string): Promise<void> {
  run.state.lastError = lastError;
  run.state.reason = reason;
  const before = run.operator.redrives;
  await recordStatus(run, 'needs_attention', { lastError, reason });
  // If recording it parked (and was re-driven) already, don't park twice.
  if (run.operator.redrives === before) await waitForOperator(run);
}

/**
 * Waits for a re-drive, or (while the charge is unsettled) a payment event.
 * Each re-drive opens a new epoch: status keys written after it carry its
 * number (stepKeys.status), so the order may pass a status again.
 */
async function waitForOperator(run: OrderRun): Promise<void> {
  const { state, operator } = run;
  state.awaitingOperator = true;
  await condition(() => operator.requested || run.payment.event !== undefined);
  state.awaitingOperator = false;
  const redriven = operator.requested;
  operator.requested = false;
  operator.redrives++;
  // A workflow task that runs local activities (every step here) is answered only when they
  // finish, and so is an update it carries: a 1 ms timer ends this task, so the re-drive is
  // answered at once instead of after the whole resumed run.
  if (redriven) await sleep(1);
}

// ------------------------------------------------------------------- the run

/** One order's run: what its steps share. */
export interface OrderRun {
  readonly input: OrderWorkflowArgs;
  readonly workflowId: string;
  readonly timing: OrderTiming;
  /** The order's identity, passed to every activity with the step's key. */
  readonly ref: { tenantId: string; orderId: string; workflowId: string };
  /**
   * Every call passes its own options (attempt budget + a summary naming the step and key).
   * `local`: the steps (charge, receipt, status writes), run by this worker while it holds the
   * workflow task, so an order that goes straight through is one workflow task and no activity
   * task. `acts`: reconciling and settling an uncertain charge.
   */
  readonly acts: ActivityInterfaceFor<OrderActivities>;
  readonly local: LocalActivityInterfaceFor<OrderActivities>;
  /** What the status query answers. */
  readonly state: OrderState;
  readonly payment: {
    /** A provider or operator word on the charge, not yet applied. Consumed when applied. */
    event: PaymentEvent | undefined;
    /** Once the charge has a definite outcome, later payment events (duplicates, late webhooks) are ignored. */
    settled: boolean;
    /**
     * The reconciliation clock of the current payment_unknown episode. It runs
     * across perform-again rounds (so a provider that keeps losing requests
     * still reaches the horizon, and lookups keep backing off), and restarts
     * only after an operator re-drive.
     */
    unknownEpisode: { deadline: number; pause: number } | undefined;
  };
  readonly operator: {
    /** Re-drives so far (0 before the first): the epoch in status keys (stepKeys.status). */
    redrives: number;
    /** A re-drive was accepted; the parked step has not resumed yet. */
    requested: boolean;
  };
  /**
   * What visibility already has from the start: the outbox relay starts an order with TenantId
   * and OrderStatus = FIRST_ORDER_STATUS (src/orders/contract.ts), so that first status needs
   * no upsert of its own. A run started without them (an older relay, a test) tags the tenant
   * with its first status upsert. Read from the start event, so replay decides the same way.
   */
  readonly visibility: {
    /** TenantId is set once: at start, or with the first status upsert. */
    tenantTagged: boolean;
    /** True until the first status upsert, if the start already indexed the first status. */
    firstStatusIndexed: boolean;
  };
}

/** The run's state, its activities, and its query, signal and update handlers. */
export function openOrderRun(input: OrderWorkflowArgs): OrderRun {
  const { workflowId, typedSearchAttributes: startAttributes } = workflowInfo();
  const timing = resolveTiming(input.timing);
  const tenantTagged = startAttributes.get(TenantIdKey) !== undefined;
  const run: OrderRun = {
    input,
    workflowId,
    timing,
    ref: { tenantId: input.tenantId, orderId: input.orderId, workflowId },
    acts: proxyActivities<OrderActivities>(activityOptions(timing, timing.stepMaxAttempts)),
    local: proxyLocalActivities<OrderActivities>(localActivityOptions(timing, timing.stepMaxAttempts)),
    state: {
      status: 'accepted',
      chargeId: null,
      receiptId: null,
      lastError: null,
      reason: null,
      reconcileAttempts: 0,
      awaitingOperator: false,
    },
    payment: { event: undefined, settled: false, unknownEpisode: undefined },
    operator: { redrives: 0, requested: false },
    visibility: {
      tenantTagged,
      firstStatusIndexed: tenantTagged && startAttributes.get(OrderStatusKey) === FIRST_ORDER_STATUS,
    },
  };
  handleMessages(run);
  return run;
}

/** The status query, the payment-event signal, and the re-drive (workflows/steps.ts). */
function handleMessages(run: OrderRun): void {
  const { state, payment, operator } = run;
  setHandler(statusQuery, () => state);
  setHandler(paymentEventSignal, (event) => {
    // The first settling word wins; duplicates and late events change nothing.
    if (!payment.settled) payment.event ??= event;
  });
  handleRedrive(
    'order',
    redriveUpdate,
    () => ({ status: state.status, awaitingOperator: state.awaitingOperator, requested: operator.requested }),
    () => {
      operator.requested = true;
      return {
        status: state.status,
        reason: state.reason,
        lastError: state.lastError,
        redrives: operator.redrives + 1,
      };
    },
  );
}
