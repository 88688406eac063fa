/**
 * The provider refund step: what a payment provider's answer to a refund
 * means for the step's ledger record. The same rules as the charge
 * (src/steps/payment.ts), through the same ledger calls: performed only
 * through Ledger.runExternal under a downstream key derived from the step's
 * operation key; an answer that does not prove nothing happened leaves the
 * record `unknown`, reconciled by a lookup under the same key, and performed
 * again (under the SAME key) only when the provider never saw it and only
 * inside its key window.
 */
import {
  downstreamKey,
  type ExternalRunOptions,
  type Ledger,
  type OperationRecord,
  type ReconcileOutcome,
  type Scope,
} from '../ledger/index.ts';
import type { PaymentProvider, Refund } from '../providers/types.ts';
import { REFUND_OPERATION_TYPES } from '../refunds/contract.ts';
import { KEY_WINDOW_PASSED, type ReconcileResult } from './payment.ts';

/** What the ledger stores for a provider refund (refundId null: an operator resolved it without one). */
type RefundJson = { refundId: string | null; status: 'succeeded' | 'failed' };

export interface RefundStepDeps {
  ledger: Ledger;
  payments: PaymentProvider;
  /** The payment provider's idempotency-key window; default the ledger's (24 h). */
  keyWindowMs?: number;
}

export interface RefundInput {
  tenantId: string;
  orderId: string;
  refundId: string;
  /** The step's operation key (`<refund workflowId>/refund`). */
  key: string;
  chargeId: string;
  amount: number;
  currency: string;
  reason: string | null;
}

export interface RefundResult {
  outcome: 'succeeded' | 'failed';
  providerRefundId: string | null;
  replayed: boolean;
  reconciled: boolean;
}

function refundScope(ref: { tenantId: string; key: string }): Scope {
  return { tenantId: ref.tenantId, operationType: REFUND_OPERATION_TYPES.providerRefund, key: ref.key };
}

function refundOutcome(refund: Refund) {
  const result: RefundJson = { refundId: refund.id, status: refund.status };
  return { state: refund.status, result, providerRef: refund.id } as const;
}

/** Reconcile: the refund made under the downstream key, or not_found. The operator's too. */
export function refundReconciler(
  payments: PaymentProvider,
): (ctx: { downstreamKey: string }) => Promise<ReconcileOutcome<RefundJson>> {
  return async ({ downstreamKey: dk }) => {
    const refund = await payments.findRefundByIdempotencyKey(dk);
    return refund ? refundOutcome(refund) : { state: 'not_found' };
  };
}

/** The provider's refund under a downstream key, for the operator's view of a refund step. */
export function findRefund(payments: PaymentProvider, dk: string): Promise<Refund | null> {
  return payments.findRefundByIdempotencyKey(dk);
}

/**
 * What an operator's resolution stores: the shape the step itself stores, so
 * the workflow replays it like any provider answer.
 */
export function settledRefund(outcome: 'succeeded' | 'failed', refundId: string | null): RefundJson {
  return { refundId, status: outcome };
}

/**
 * Refunds once per operation key. Throws the ledger's errors and a definite
 * ProviderError (the claim was released: the provider refused the refund
 * before acting) unchanged, as runCharge does.
 */
export async function runRefund(
  deps: RefundStepDeps,
  input: RefundInput,
  opts: Pick<ExternalRunOptions, 'heartbeat' | 'renewEveryMs'> = {},
): Promise<RefundResult> {
  const run = await deps.ledger.runExternal<RefundJson>(
    refundScope(input),
    {
      schemaVersion: 1,
      value: {
        refundId: input.refundId,
        chargeId: input.chargeId,
        amount: input.amount,
        currency: input.currency,
      },
    },
    {
      perform: async ({ downstreamKey: dk }) =>
        refundOutcome(
          await deps.payments.createRefund(
            {
              chargeId: input.chargeId,
              amount: input.amount,
              currency: input.currency,
              ...(input.reason !== null ? { reason: input.reason } : {}),
              metadata: {
                order_id: input.orderId,
                tenant_id: input.tenantId,
                refund_id: input.refundId,
                operation_key: input.key,
              },
            },
            dk,
          ),
        ),
      reconcile: refundReconciler(deps.payments),
    },
    { ...opts, ...(deps.keyWindowMs !== undefined ? { keyWindowMs: deps.keyWindowMs } : {}) },
  );
  return {
    outcome: run.state,
    providerRefundId: run.result.refundId ?? run.providerRef,
    replayed: run.replayed,
    reconciled: run.reconciled,
  };
}

/** The ledger record of a provider refund, as a ReconcileResult (chargeId carries the refund's ID). */
function refundState(record: OperationRecord): ReconcileResult {
  if (record.state !== 'succeeded' && record.state !== 'failed')
    return { settled: false, outcome: null, chargeId: null };
  const result = (record.result ?? {}) as Partial<RefundJson>;
  return { settled: true, outcome: record.state, chargeId: result.refundId || record.providerRef || null };
}

/**
 * Reconciles a provider refund without ever performing it, exactly as
 * reconcileCharge does a charge: no claim means only the provider can say
 * (ask it by the same key); an unresolved record is taken over and looked
 * up; "never saw the key" inside the window means perform again under it.
 */
export async function reconcileRefund(
  deps: RefundStepDeps,
  ref: { tenantId: string; key: string },
): Promise<ReconcileResult> {
  const scope = refundScope(ref);
  if (!(await deps.ledger.get(scope))) {
    const refund = await deps.payments.findRefundByIdempotencyKey(downstreamKey(scope));
    if (refund) return { settled: true, outcome: refund.status, chargeId: refund.id };
    return { settled: false, outcome: null, chargeId: null, notStarted: true };
  }
  const r = await deps.ledger.reconcileUnresolved<RefundJson>(scope, refundReconciler(deps.payments), {
    keyWindowMs: deps.keyWindowMs,
  });
  const state = refundState(r.record);
  if (r.answer !== 'not_found') return state;
  return r.performable ? { ...state, performAgain: true } : { ...state, error: KEY_WINDOW_PASSED };
}
