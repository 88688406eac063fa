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
 * - How the provider is asked follows what it declares (src/steps/settle.ts):
 *   lookup by key, replay under the same key inside the window, or search
 *   with a lag, where a young "not found" proves nothing.
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
import { ProviderError, type Charge, type ChargeRequest, type PaymentProvider } from '../providers/types.ts';
import { OPERATION_TYPES } from '../orders/model.ts';
import { planSettle, stepKeyWindowMs, type SettlePlan } from './settle.ts';

/** What the ledger stores for a charge. chargeId is null only when an operator settled it without naming it. */
export type ChargeJson = {
  chargeId: string | null;
  status: 'succeeded' | 'failed';
  failureCode: string | null;
};

export interface ChargeStepDeps {
  ledger: Ledger;
  payments: PaymentProvider;
  /** The payment provider's idempotency-key window; default what the provider declares. */
  keyWindowMs?: number | undefined;
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

/**
 * What a search-only provider proves once its lag has passed past the key
 * window: it has no charge under the key, and nothing will ever be sent
 * under it again, so the charge definitely did not happen (the order is
 * rejected, not left waiting on an operator).
 */
export const NOT_CHARGED_CODE = 'provider_has_no_charge';

/** The charge made under this key, by whatever the provider can answer (the operator's view). */
export async function findCharge(payments: PaymentProvider, dk: string): Promise<Charge | null> {
  if (payments.findChargeByIdempotencyKey) return payments.findChargeByIdempotencyKey(dk);
  if (payments.searchChargeByIdempotencyKey) return payments.searchChargeByIdempotencyKey(dk);
  return null;
}

function missing(what: string): never {
  throw new ProviderError('rejected', `the payment provider declares ${what} but does not implement it`, {
    code: 'provider_misconfigured',
  });
}

/** One reconciliation's answer, following the plan. */
async function askPayments(
  payments: PaymentProvider,
  plan: SettlePlan,
  dk: string,
  request: ChargeRequest | undefined,
): Promise<ReconcileOutcome<ChargeJson>> {
  switch (plan.kind) {
    case 'lookup': {
      const find = payments.findChargeByIdempotencyKey ?? missing('lookup');
      const charge = await find.call(payments, dk);
      return charge ? chargeOutcome(charge) : { state: 'not_found' };
    }
    case 'replay':
      // The same request under the same key: the stored outcome, or the charge made now.
      if (!request) missing('replay without a request');
      return chargeOutcome(await payments.createCharge(request, dk));
    case 'search': {
      const search = payments.searchChargeByIdempotencyKey ?? missing('search');
      const charge = await search.call(payments, dk);
      if (charge) return chargeOutcome(charge);
      // Inside the window, what follows not_found is a perform under the same key: a replay.
      if (plan.notFoundMayPerform) return { state: 'not_found' };
      if (!plan.notFoundIsProof) return { state: 'pending' };
      return {
        state: 'failed',
        result: { chargeId: null, status: 'failed', failureCode: NOT_CHARGED_CODE },
      };
    }
    case 'none':
      return { state: 'pending' };
  }
}

/**
 * Reconcile: the charge made under the downstream key, asked the way the
 * provider allows (src/steps/settle.ts). With `request`, a replay provider
 * is asked by replaying it inside the key window.
 */
export function chargeReconciler(
  payments: PaymentProvider,
  opts: { request?: ChargeRequest; keyWindowMs?: number | undefined } = {},
): (ctx: {
  downstreamKey: string;
  record?: Pick<OperationRecord, 'createdAt'>;
}) => Promise<ReconcileOutcome<ChargeJson>> {
  return async ({ downstreamKey: dk, record }) => {
    const plan = planSettle(payments.capabilities, record, {
      keyWindowMs: opts.keyWindowMs,
      canReplay: opts.request !== undefined,
    });
    return askPayments(payments, plan, dk, opts.request);
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

/** What a charge's record is fingerprinted by (also how a recovery after a restore rebuilds it). */
export function chargeLedgerInput(
  input: Pick<ChargeInput, 'orderId' | 'amount' | 'currency' | 'paymentMethod'>,
): LedgerInput {
  return {
    schemaVersion: 1,
    value: {
      orderId: input.orderId,
      amount: input.amount,
      currency: input.currency,
      paymentMethod: input.paymentMethod,
    },
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
  const keyWindowMs = stepKeyWindowMs(deps.payments.capabilities, deps.keyWindowMs);
  const run = await deps.ledger.runExternal<ChargeJson>(
    chargeScope(input),
    chargeLedgerInput(input),
    {
      perform: async ({ downstreamKey: dk }) =>
        chargeOutcome(await deps.payments.createCharge(chargeRequest(input), dk)),
      reconcile: chargeReconciler(deps.payments, { request: chargeRequest(input), keyWindowMs }),
    },
    { ...opts, ...(keyWindowMs !== undefined ? { keyWindowMs } : {}) },
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
  const keyWindowMs = stepKeyWindowMs(deps.payments.capabilities, deps.keyWindowMs);
  if (!(await deps.ledger.get(scope))) {
    // No claim: never claimed, released after a definite refusal, or reaped long
    // after it settled. Only the provider can tell which; ask it by the same key.
    const plan = planSettle(deps.payments.capabilities, 'no_claim', { keyWindowMs, canReplay: false });
    const answer = await askPayments(deps.payments, plan, downstreamKey(scope), undefined);
    if (answer.state === 'succeeded' || answer.state === 'failed') {
      return { settled: true, outcome: answer.state, chargeId: answer.providerRef ?? null };
    }
    if (answer.state === 'pending') return { settled: false, outcome: null, chargeId: null };
    return { settled: false, outcome: null, chargeId: null, notStarted: true };
  }
  const r = await deps.ledger.reconcileUnresolved<ChargeJson>(
    scope,
    chargeReconciler(deps.payments, { keyWindowMs }),
    { keyWindowMs },
  );
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
