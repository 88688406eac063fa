/**
 * The provider refund step: what a payment provider's answer to a refund
 * means for the step's ledger record. The same rules as the charge
 * (src/steps/payment.ts), through the same ledger calls: performed only
 * through Ledger.runExternal under a downstream key derived from the step's
 * operation key; an answer that does not prove nothing happened leaves the
 * record `unknown`, reconciled the way the provider declares it can answer
 * (src/steps/settle.ts: lookup by key, replay under the same key inside the
 * window, or a search whose young "not found" proves nothing), and performed
 * again (under the SAME key) only when the provider never saw it and only
 * inside its key window.
 */
import {
  downstreamKey,
  isLedgerError,
  type ExternalRunOptions,
  type LedgerInput,
  type Ledger,
  type OperationRecord,
  type ReconcileOutcome,
  type Scope,
} from 'onceflow';
import { ProviderError, type PaymentProvider, type Refund, type RefundRequest } from '../providers/types.ts';
import { REFUND_OPERATION_TYPES } from '../refunds/contract.ts';
import { KEY_WINDOW_PASSED, type ReconcileResult } from './payment.ts';
import { planSettle, stepKeyWindowMs, type SettlePlan } from './settle.ts';

/**
 * What the ledger stores for a provider refund. refundId is null only when no
 * refund exists (a search proved it) or an operator settled it without naming one.
 */
type RefundJson = { refundId: string | null; status: 'succeeded' | 'failed' };

export interface RefundStepDeps {
  ledger: Ledger;
  payments: PaymentProvider;
  /** The payment provider's idempotency-key window; default what the provider declares. */
  keyWindowMs?: number | undefined;
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

/** The step's reference: its key, and the charge it refunds (a search provider lists that charge's refunds). */
export interface RefundStepRef {
  tenantId: string;
  key: string;
  chargeId?: string | undefined;
}

export function refundScope(ref: { tenantId: string; key: string }): Scope {
  return { tenantId: ref.tenantId, operationType: REFUND_OPERATION_TYPES.providerRefund, key: ref.key };
}

function refundOutcome(refund: Refund) {
  const result: RefundJson = { refundId: refund.id, status: refund.status };
  return { state: refund.status, result, providerRef: refund.id } as const;
}

function missing(what: string): never {
  throw new ProviderError('rejected', `the payment provider declares ${what} but does not implement it`, {
    code: 'provider_misconfigured',
  });
}

/** One reconciliation's answer, following the plan (as askPayments does for a charge). */
async function askRefunds(
  payments: PaymentProvider,
  plan: SettlePlan,
  dk: string,
  ref: RefundStepRef,
  request: RefundRequest | undefined,
): Promise<ReconcileOutcome<RefundJson>> {
  switch (plan.kind) {
    case 'lookup': {
      const find = payments.findRefundByIdempotencyKey ?? missing('lookup');
      const refund = await find.call(payments, dk);
      return refund ? refundOutcome(refund) : { state: 'not_found' };
    }
    case 'replay':
      // The same request under the same key: the stored outcome, or the refund made now.
      if (!request) missing('replay without a request');
      return refundOutcome(await payments.createRefund(request, dk));
    case 'search': {
      const search = payments.searchRefund ?? missing('search');
      const chargeId = ref.chargeId ?? request?.chargeId;
      if (!chargeId) {
        // The provider lists refunds per charge: without it, it can't be asked. Stays unknown.
        return { state: 'pending' };
      }
      const refund = await search.call(payments, { chargeId, idempotencyKey: dk, operationKey: ref.key });
      if (refund) return refundOutcome(refund);
      // Inside the window, what follows not_found is a perform under the same key: a replay.
      if (plan.notFoundMayPerform) return { state: 'not_found' };
      if (!plan.notFoundIsProof) return { state: 'pending' };
      // Past the window and the lag: no refund exists, and none will be requested under the key again.
      return { state: 'failed', result: { refundId: null, status: 'failed' } };
    }
    case 'none':
      return { state: 'pending' };
  }
}

/** Reconcile: the refund made under the downstream key, asked the way the provider allows. The operator's too. */
export function refundReconciler(
  payments: PaymentProvider,
  ref: RefundStepRef,
  opts: { request?: RefundRequest; keyWindowMs?: number | undefined } = {},
): (ctx: {
  downstreamKey: string;
  record?: Pick<OperationRecord, 'createdAt'>;
}) => Promise<ReconcileOutcome<RefundJson>> {
  return async ({ downstreamKey: dk, record }) => {
    const plan = planSettle(payments.capabilities, record, {
      keyWindowMs: opts.keyWindowMs,
      canReplay: opts.request !== undefined,
    });
    return askRefunds(payments, plan, dk, ref, opts.request);
  };
}

function refundRequest(input: RefundInput): RefundRequest {
  return {
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
  };
}

/**
 * The provider's refund under a downstream key, for the operator's view of a
 * refund step; null also when the provider has no lookup by key (Stripe: the
 * step's reconcile asks it the way it can, see refundReconciler).
 */
export async function findRefund(payments: PaymentProvider, dk: string): Promise<Refund | null> {
  return payments.findRefundByIdempotencyKey ? payments.findRefundByIdempotencyKey(dk) : null;
}

/**
 * What an operator's resolution stores: the shape the step itself stores, so
 * the workflow replays it like any provider answer.
 */
export function settledRefund(outcome: 'succeeded' | 'failed', refundId: string | null): RefundJson {
  return { refundId, status: outcome };
}

/** What a provider refund's record is fingerprinted by (also how a recovery after a restore rebuilds it). */
export function refundLedgerInput(
  input: Pick<RefundInput, 'refundId' | 'chargeId' | 'amount' | 'currency'>,
): LedgerInput {
  return {
    schemaVersion: 1,
    value: {
      refundId: input.refundId,
      chargeId: input.chargeId,
      amount: input.amount,
      currency: input.currency,
    },
  };
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
  const keyWindowMs = stepKeyWindowMs(deps.payments.capabilities, deps.keyWindowMs);
  const request = refundRequest(input);
  const run = await deps.ledger.runExternal<RefundJson>(
    refundScope(input),
    refundLedgerInput(input),
    {
      perform: async ({ downstreamKey: dk }) => refundOutcome(await deps.payments.createRefund(request, dk)),
      reconcile: refundReconciler(deps.payments, input, { request, keyWindowMs }),
    },
    { ...opts, ...(keyWindowMs !== undefined ? { keyWindowMs } : {}) },
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
 * (ask it by the same key); an unresolved record is taken over and asked
 * the way the provider allows; "never saw the key" inside the window means
 * perform again under it. A search provider needs `ref.chargeId`; without
 * it the refund stays unsettled.
 */
export async function reconcileRefund(deps: RefundStepDeps, ref: RefundStepRef): Promise<ReconcileResult> {
  const scope = refundScope(ref);
  const keyWindowMs = stepKeyWindowMs(deps.payments.capabilities, deps.keyWindowMs);
  if (!(await deps.ledger.get(scope))) {
    // No claim: never claimed, released after a definite refusal, or reaped long after it settled.
    const plan = planSettle(deps.payments.capabilities, 'no_claim', { keyWindowMs, canReplay: false });
    const answer = await askRefunds(deps.payments, plan, downstreamKey(scope), ref, undefined);
    if (answer.state === 'succeeded' || answer.state === 'failed') {
      return { settled: true, outcome: answer.state, chargeId: answer.providerRef ?? null };
    }
    if (answer.state === 'pending') return { settled: false, outcome: null, chargeId: null };
    return { settled: false, outcome: null, chargeId: null, notStarted: true };
  }
  const r = await deps.ledger.reconcileUnresolved<RefundJson>(
    scope,
    refundReconciler(deps.payments, ref, { keyWindowMs }),
    { keyWindowMs },
  );
  const state = refundState(r.record);
  if (r.answer !== 'not_found') return state;
  return r.performable ? { ...state, performAgain: true } : { ...state, error: KEY_WINDOW_PASSED };
}

/**
 * Records a provider event (or an operator's decision) about an uncertain
 * refund. A record already final with the other outcome wins (the provider's
 * own answer, or an earlier settlement, over a later event): its state is
 * returned, so a late event never moves a refund backwards.
 */
export async function settleRefund(
  deps: Pick<RefundStepDeps, 'ledger'>,
  ref: { tenantId: string; key: string },
  outcome: 'succeeded' | 'failed',
  providerRefundId: string | null,
): Promise<ReconcileResult> {
  const scope = refundScope(ref);
  try {
    const result: RefundJson = { refundId: providerRefundId, status: outcome };
    const { record } = await deps.ledger.settle(scope, {
      state: outcome,
      result,
      ...(providerRefundId ? { providerRef: providerRefundId } : {}),
    });
    return refundState(record);
  } catch (err) {
    if (isLedgerError(err, 'invalid_state')) {
      const record = await deps.ledger.get(scope);
      if (record) return refundState(record);
    }
    throw err;
  }
}
