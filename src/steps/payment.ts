/**
 * The payment step: what a payment provider's answer means for the charge's
 * ledger record, and when to ask the provider instead of the ledger. The
 * order activities (activities/order.ts) and the operator (src/ops) both call
 * this module, so a rule changes in one place.
 *
 * Rules
 * - A charge is performed only through the ledger (claim, perform with the
 *   downstream key, complete; a takeover reconciles first).
 * - A provider answer that does not prove nothing happened (timeout, reset,
 *   5xx, an idempotency-key conflict) leaves the record `unknown`; only a
 *   request that never left or that the provider refused before acting
 *   releases the claim (see Ledger.runExternal and ProviderError.definite).
 * - No claim at all: only the provider can say whether the charge ever
 *   started (never claimed, released after a refusal, or reaped long after
 *   it settled); ask it by the same downstream key.
 * - `unknown` and the provider never saw the key: perform again under the
 *   SAME key, but only inside the provider's key window.
 */
import {
  downstreamKey,
  isLedgerError,
  type ExternalRunOptions,
  type Ledger,
  type OperationRecord,
  type ReconcileOutcome,
  type Scope,
} from '../ledger/index.ts';
import type { Charge, ChargeRequest, PaymentProvider } from '../providers/types.ts';
import { OPERATION_TYPES } from '../orders/model.ts';

/** What the ledger stores for a charge. chargeId is null only when an operator settled it without naming it. */
export type ChargeJson = {
  chargeId: string | null;
  status: 'succeeded' | 'failed';
  failureCode: string | null;
};

export interface ChargeStepDeps {
  ledger: Ledger;
  payments: PaymentProvider;
  /** The payment provider's idempotency-key window; default the ledger's (24 h). */
  keyWindowMs?: number;
}

export interface ChargeInput {
  tenantId: string;
  orderId: string;
  /** The charge's operation key (`<workflowId>/charge`). */
  key: string;
  amount: number;
  currency: string;
  paymentMethod: string;
}

export interface ChargeResult {
  outcome: 'succeeded' | 'failed';
  chargeId: string | null;
  failureCode: string | null;
  replayed: boolean;
  reconciled: boolean;
}

/** The charge's state after a reconciliation, and what the caller should do next. */
export interface ReconcileResult {
  settled: boolean;
  outcome: 'succeeded' | 'failed' | null;
  chargeId: string | null;
  /** No claim exists and the provider has nothing under the key: the charge never started. */
  notStarted?: boolean;
  /**
   * The record is `unknown` and the provider never saw the key, inside its
   * key window: run the charge again (chargePayment), which takes the record
   * over, reconciles once more and performs under the SAME downstream key.
   */
  performAgain?: boolean;
  /** Why the charge is still unsettled, for operators (e.g. the key window has passed). */
  error?: string;
}

export function chargeScope(ref: { tenantId: string; key: string }): Scope {
  return { tenantId: ref.tenantId, operationType: OPERATION_TYPES.charge, key: ref.key };
}

/** A provider charge as a ledger outcome: a decline is a final `failed`, not an error. */
function chargeOutcome(charge: Charge) {
  const result: ChargeJson = {
    chargeId: charge.id,
    status: charge.status,
    failureCode: charge.failureCode ?? null,
  };
  return { state: charge.status, result, providerRef: charge.id } as const;
}

/** Reconcile: the charge made under the downstream key, or not_found. */
export function chargeReconciler(
  payments: PaymentProvider,
): (ctx: { downstreamKey: string }) => Promise<ReconcileOutcome<ChargeJson>> {
  return async ({ downstreamKey: dk }) => {
    const charge = await payments.findChargeByIdempotencyKey(dk);
    return charge ? chargeOutcome(charge) : { state: 'not_found' };
  };
}

/**
 * What a settled (by a webhook, or by an operator) charge stores: the same
 * shape in both paths, so a later settlement of the same outcome is an
 * idempotent no-op rather than a conflict.
 */
export function settledCharge(outcome: 'succeeded' | 'failed', chargeId: string | null): ChargeJson {
  return { chargeId, status: outcome, failureCode: outcome === 'failed' ? 'settled_failed' : null };
}

function chargeRequest(input: ChargeInput): ChargeRequest {
  return {
    amount: input.amount,
    currency: input.currency,
    paymentMethod: input.paymentMethod,
    description: `Order ${input.orderId}`,
    metadata: { order_id: input.orderId, tenant_id: input.tenantId, operation_key: input.key },
  };
}

/**
 * Charges once per operation key. Throws the ledger's errors (outcome_unknown,
 * in_progress, ownership_lost, conflict) and a definite ProviderError (the
 * claim was released) unchanged; the caller maps them to its boundary.
 */
export async function runCharge(
  deps: ChargeStepDeps,
  input: ChargeInput,
  opts: Pick<ExternalRunOptions, 'heartbeat' | 'renewEveryMs'> = {},
): Promise<ChargeResult> {
  const run = await deps.ledger.runExternal<ChargeJson>(
    chargeScope(input),
    {
      schemaVersion: 1,
      value: {
        orderId: input.orderId,
        amount: input.amount,
        currency: input.currency,
        paymentMethod: input.paymentMethod,
      },
    },
    {
      perform: async ({ downstreamKey: dk }) =>
        chargeOutcome(await deps.payments.createCharge(chargeRequest(input), dk)),
      reconcile: chargeReconciler(deps.payments),
    },
    { ...opts, ...(deps.keyWindowMs !== undefined ? { keyWindowMs: deps.keyWindowMs } : {}) },
  );
  return {
    outcome: run.state,
    chargeId: run.result.chargeId ?? run.providerRef,
    failureCode: run.result.failureCode,
    replayed: run.replayed,
    reconciled: run.reconciled,
  };
}

/** The ledger record of a charge, as a ReconcileResult. */
export function chargeState(record: OperationRecord): ReconcileResult {
  if (record.state !== 'succeeded' && record.state !== 'failed')
    return { settled: false, outcome: null, chargeId: null };
  const result = (record.result ?? {}) as Partial<ChargeJson>;
  return { settled: true, outcome: record.state, chargeId: result.chargeId || record.providerRef || null };
}

export const KEY_WINDOW_PASSED =
  "the provider never saw the charge's key, but the record is past the provider's key window: " +
  'charging again could charge twice; an operator must resolve it';

/**
 * Reconciles a charge without ever performing it. Throws the ledger's
 * outcome_unknown when the provider could not be asked (the record stays
 * unknown); other ledger errors unchanged.
 */
export async function reconcileCharge(
  deps: ChargeStepDeps,
  ref: { tenantId: string; key: string },
): Promise<ReconcileResult> {
  const scope = chargeScope(ref);
  if (!(await deps.ledger.get(scope))) {
    // No claim: never claimed, released after a definite refusal, or reaped long
    // after it settled. Only the provider can tell which; ask it by the same key.
    const charge = await deps.payments.findChargeByIdempotencyKey(downstreamKey(scope));
    if (charge) return { settled: true, outcome: charge.status, chargeId: charge.id };
    return { settled: false, outcome: null, chargeId: null, notStarted: true };
  }
  const r = await deps.ledger.reconcileUnresolved<ChargeJson>(scope, chargeReconciler(deps.payments), {
    keyWindowMs: deps.keyWindowMs,
  });
  const state = chargeState(r.record);
  if (r.answer !== 'not_found') return state;
  return r.performable ? { ...state, performAgain: true } : { ...state, error: KEY_WINDOW_PASSED };
}

/**
 * Records a provider event or an operator's decision about an uncertain
 * charge. A record already final with the other outcome wins (the
 * provider's own answer, or an earlier settlement, over a later event):
 * its state is returned.
 */
export async function settleCharge(
  deps: Pick<ChargeStepDeps, 'ledger'>,
  ref: { tenantId: string; key: string },
  outcome: 'succeeded' | 'failed',
  chargeId: string | null,
): Promise<ReconcileResult> {
  const scope = chargeScope(ref);
  try {
    const { record } = await deps.ledger.settle(scope, {
      state: outcome,
      result: settledCharge(outcome, chargeId),
      ...(chargeId ? { providerRef: chargeId } : {}),
    });
    return chargeState(record);
  } catch (err) {
    if (isLedgerError(err, 'invalid_state')) {
      const record = await deps.ledger.get(scope);
      if (record) return chargeState(record);
    }
    throw err;
  }
}
