/**
 * What a workflow's history proves about its external steps, for the restore recovery
 * (src/restore/recover.ts): each step the history attempted, with its outcome where the history
 * holds one, and for an order's local activities the arguments rebuilt from the workflow's input.
 */
import type { WorkflowExecutionInfo } from '@temporalio/client';
import type { temporal } from '@temporalio/proto';
import type { Json, LedgerInput } from 'onceflow';
import { ORDER_REASONS, stepKeys, type OrderWorkflowInput } from '../orders/model.ts';
import { FAILURE } from '../orders/contract.ts';
import { stepLedgerInput, type AnyStep } from '../steps/descriptor.ts';
import { chargeStep } from '../steps/payment.ts';
import { receiptStep } from '../steps/receipt.ts';
import { refundStep } from '../steps/refund.ts';
import { stepPerformedBy } from '../steps/registry.ts';

const LOCAL_ACTIVITY_MARKER = 'core_local_activity';

/** What one external step looks like in a history (every one was attempted: it may have acted). */
export interface StepTrace {
  tenantId: string;
  operationType: string;
  key: string;
  input: LedgerInput;
  /** When its first attempt was scheduled: the record's created_at, so the key window counts from it. */
  firstScheduledAt: Date;
  /** The outcome the history holds, if any. */
  final?: { state: 'succeeded' | 'failed'; result: Json; providerRef: string | null; at: Date };
  /** The last perform attempt ended in a definite refusal (nothing happened; the claim was released). */
  refused: boolean;
  /** The step, when the recovery reconciles it at once if restored unknown (money steps). */
  reconcile?: AnyStep;
  /** A refund step's charge: what a search-only provider is asked by. */
  chargeId?: string;
  /**
   * A charge whose outcome the history lacks, in a running order: the
   * receipt the same unfinished workflow task may have sent once the charge succeeded, given the
   * charge ID that reconciling finds (the receipt's arguments carry it).
   */
  receiptAfter?: (chargeId: string) => StepTrace;
}

export type Event = temporal.api.history.v1.IHistoryEvent;
export type Payloads = temporal.api.common.v1.IPayloads | null | undefined;

function eventTime(e: Event): Date {
  const t = e.eventTime;
  return new Date(Number(t?.seconds ?? 0) * 1000 + Math.floor((t?.nanos ?? 0) / 1e6));
}

/**
 * Failure types that prove the provider refused the request before acting (the claim was released).
 * Not FAILURE.statusNotRecorded, though a step that ends with it did not act in that attempt: an
 * earlier attempt of the same local activity may have acted before its answer was lost.
 */
const DEFINITE_REFUSALS = new Set<string>([FAILURE.paymentRejected, FAILURE.providerRejected]);

/**
 * The external steps of a history, each with what the history proves about it. `local`: how
 * an order's steps that ran as local activities look (their markers carry no arguments).
 */
export function readStepTraces(
  events: Event[],
  tenantId: string,
  decode: (payloads: Payloads) => unknown,
  local?: OrderLocalSteps,
): StepTrace[] {
  const byKey = new Map<string, StepTrace>();
  const scheduled = new Map<string, { type: string; args: Record<string, unknown>; at: Date }>();
  const trace = (step: AnyStep, args: Record<string, unknown>, at: Date) => {
    const key = String(args.key);
    let t = byKey.get(key);
    if (!t) {
      const input = stepLedgerInput(step, args);
      t = { tenantId, operationType: step.operationType, key, input, firstScheduledAt: at, refused: false };
      if (step.reconcileAfterRestore) t.reconcile = step;
      byKey.set(key, t);
    }
    return t;
  };
  for (const e of events) {
    const m = e.markerRecordedEventAttributes;
    if (m?.markerName === LOCAL_ACTIVITY_MARKER && local) {
      const data = decode(m.details?.data) as { activity_type?: unknown } | undefined;
      const step = stepPerformedBy(String(data?.activity_type ?? ''));
      const args = step ? local.args(step, byKey) : null;
      if (!step || !args) continue;
      // Scheduled no later than the marker's workflow task began: the record's created_at may be
      // earlier than the real first attempt, which only makes the key window end sooner (safe).
      const t = trace(step, args, local.since);
      const result = decode(m.details?.result) as Record<string, unknown> | undefined;
      if (result) t.final = { ...step.fromActivityResult(result), at: eventTime(e) };
      else if (!t.final)
        t.refused = DEFINITE_REFUSALS.has(
          m.failure?.cause?.applicationFailureInfo?.type ?? m.failure?.applicationFailureInfo?.type ?? '',
        );
      continue;
    }
    const s = e.activityTaskScheduledEventAttributes;
    if (s) {
      const type = s.activityType?.name ?? '';
      const args = decode(s.input) as Record<string, unknown> | undefined;
      if (!args || typeof args.key !== 'string') continue;
      const at = eventTime(e);
      scheduled.set(String(e.eventId), { type, args, at });
      const step = stepPerformedBy(type);
      if (step) {
        const t = trace(step, args, at);
        // A new attempt: whatever the last one ended in, this one may act.
        t.refused = false;
        if (step === refundStep) t.chargeId = String(args.chargeId);
      }
      continue;
    }
    const c = e.activityTaskCompletedEventAttributes;
    if (c) {
      const sched = scheduled.get(String(c.scheduledEventId));
      if (!sched) continue;
      const result = decode(c.result) as Record<string, unknown> | undefined;
      const step = stepPerformedBy(sched.type);
      const settled = SETTLED_BY[sched.type];
      const at = eventTime(e);
      if (step && result) {
        const t = byKey.get(String(sched.args.key))!;
        t.final = { ...step.fromActivityResult(result), at };
      } else if (settled && result && result.settled === true) {
        const t = byKey.get(String(sched.args.key));
        const outcome = result.outcome === 'failed' ? 'failed' : 'succeeded';
        const ref = typeof result.chargeId === 'string' ? result.chargeId : null;
        if (t && !t.final)
          t.final = { state: outcome, result: settled.settled(outcome, ref), providerRef: ref, at };
      }
      continue;
    }
    const f = e.activityTaskFailedEventAttributes;
    if (f) {
      const sched = scheduled.get(String(f.scheduledEventId));
      if (!sched || !stepPerformedBy(sched.type)) continue;
      const type = f.failure?.applicationFailureInfo?.type ?? '';
      const t = byKey.get(String(sched.args.key));
      if (t && !t.final) t.refused = DEFINITE_REFUSALS.has(type);
    }
  }
  if (local?.running) {
    // The step that may be running now has no marker yet (it comes with its workflow task's
    // completion): it may have acted.
    const inFlight = local.inFlight(byKey);
    if (inFlight) trace(inFlight.step, inFlight.args, local.since);
    // One workflow task runs the charge and then, if it succeeded, the receipt: both may have
    // acted with neither marker in the history. The receipt's record needs the charge's ID, known
    // only once reconciling has found the charge.
    const charge = byKey.get(local.chargeKey);
    if (charge && !charge.final && !charge.refused && !byKey.has(local.receiptKey)) {
      charge.receiptAfter = (chargeId) => {
        const args = local.receiptArgs(chargeId);
        return {
          tenantId,
          operationType: receiptStep.operationType,
          key: local.receiptKey,
          input: stepLedgerInput(receiptStep, args),
          firstScheduledAt: local.since,
          refused: false,
        };
      };
    }
  }
  return [...byKey.values()];
}

/** An order's charge and receipt as local activities: their arguments, rebuilt from the workflow's input. */
export interface OrderLocalSteps {
  /** The arguments the workflow passed to a step it ran locally, or null for any other step. */
  args(step: AnyStep, steps: Map<string, StepTrace>): Record<string, unknown> | null;
  /** The step that may be running now, if the workflow is (its marker comes only when it ends). */
  inFlight(steps: Map<string, StepTrace>): { step: AnyStep; args: Record<string, unknown> } | null;
  chargeKey: string;
  receiptKey: string;
  /** The receipt's arguments, for a charge with this ID. */
  receiptArgs(chargeId: string): Record<string, unknown>;
  running: boolean;
  /** The earliest a step could have started: the workflow's start. */
  since: Date;
}

/** workflows/order.ts performCharge and sendReceipt: what they pass, from the order's input. */
export function orderLocalSteps(wf: WorkflowExecutionInfo, o: OrderWorkflowInput): OrderLocalSteps {
  const ref = { tenantId: o.tenantId, orderId: o.orderId, workflowId: wf.workflowId };
  const chargeKey = stepKeys.charge(wf.workflowId);
  const receiptKey = stepKeys.receipt(wf.workflowId);
  const charge = {
    ...ref,
    key: chargeKey,
    amount: o.amount,
    currency: o.currency,
    paymentMethod: o.paymentMethod,
  };
  const receiptArgs = (chargeId: string) => ({
    ...ref,
    key: receiptKey,
    to: o.customer.email,
    amount: o.amount,
    currency: o.currency,
    chargeId,
  });
  const receipt = (steps: Map<string, StepTrace>) =>
    receiptArgs(steps.get(chargeKey)?.final?.providerRef ?? '');
  return {
    args: (step, steps) => (step === chargeStep ? charge : step === receiptStep ? receipt(steps) : null),
    inFlight(steps) {
      const charged = steps.get(chargeKey);
      if (!charged) return { step: chargeStep, args: charge };
      if (charged.final?.state === 'succeeded' && !steps.has(receiptKey))
        return { step: receiptStep, args: receipt(steps) };
      return null;
    },
    chargeKey,
    receiptKey,
    receiptArgs,
    running: wf.status.name === 'RUNNING',
    since: wf.startTime,
  };
}

/**
 * Why a rejected order was rejected, as the workflow decided it (workflows/order.ts, rejection):
 * the charge's decline code, a charge settled failed without one, or a refusal (the charge
 * activity failed with a definite refusal and left no record). A parked order's reason is not in
 * its history's results: it stays null (its last error comes from the workflow's search attribute).
 */
export function rejectionReason(charge: StepTrace | undefined): string | null {
  if (charge?.final?.state === 'failed') {
    const code = (charge.final.result as { failureCode?: unknown } | null)?.failureCode;
    return typeof code === 'string' && code !== ''
      ? ORDER_REASONS.declined(code)
      : ORDER_REASONS.paymentFailed;
  }
  if (charge?.refused) return ORDER_REASONS.providerRejected;
  return null;
}

/**
 * Activities that settle a step without performing it (reconcile, or a
 * provider's or operator's word): a settled result is the step's outcome.
 * They carry the step's key but not its full input, so they only add an
 * outcome to a step the history also performed.
 */
const SETTLED_BY: Record<string, AnyStep> = {
  reconcileCharge: chargeStep,
  settleCharge: chargeStep,
  reconcileRefund: refundStep,
  settleRefund: refundStep,
};

/**
 * The key of the last status write that the history shows for a status, given the key in each
 * re-drive epoch (stepKeys.status): a terminal status's merchant event ID derives from it. The
 * workflow names every status write's key in its local activity's summary ("status -> X (key K)",
 * carried writes included), which the marker keeps. Epoch 0's key when no summary names one (a
 * history older than summaries).
 */
export function lastStatusKey(
  events: Event[],
  decode: (payloads: Payloads) => unknown,
  keyIn: (epoch: number) => string,
): string {
  const summaries: string[] = [];
  for (const e of events) {
    const summary = e.markerRecordedEventAttributes ? e.userMetadata?.summary : undefined;
    if (!summary) continue;
    const text = decode({ payloads: [summary] });
    if (typeof text === 'string') summaries.push(text);
  }
  // An epoch opens only when a parked run wakes to an update or a signal: no more epochs than those.
  const wakes = events.filter(
    (e) => e.workflowExecutionSignaledEventAttributes || e.workflowExecutionUpdateAcceptedEventAttributes,
  ).length;
  let epoch = 0;
  for (let n = 1; n <= wakes && summaries.length > 0; n++) {
    const named = `(key ${keyIn(n)})`;
    if (summaries.some((s) => s.includes(named))) epoch = n;
  }
  return keyIn(epoch);
}
