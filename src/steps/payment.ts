/**
 * The charge step (its descriptor, src/steps/descriptor.ts): what a payment
 * provider's answer means for the charge's ledger record, and when to ask
 * the provider instead of the ledger. The order activities
 * (activities/order.ts), the operator and the restore recovery all read it.
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
 * - How the provider is asked follows what it declares
 *   (src/steps/reconcile-plan.ts): lookup by key, replay under the same key
 *   inside the window, or search with a lag, where a young "not found"
 *   proves nothing.
 */
import type { ExternalOutcome, Ledger, OperationRecord, Scope } from 'onceflow';
import type { Charge, ChargeRequest, PaymentProvider } from '../providers/types.ts';
import { OPERATION_TYPES } from '../orders/model.ts';
import {
  keyWindowPassed,
  providerMissing,
  reconcileStep,
  runStep,
  type RunStepOptions,
  settleStep,
  stepScope,
  stepState,
  type ReconcileResult,
  type StepDescriptor,
} from './descriptor.ts';
import { planReconcile, stepKeyWindowMs } from './reconcile-plan.ts';

export type { ReconcileResult } from './descriptor.ts';

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

/** A provider charge as a ledger outcome: a decline is a final `failed`, not an error. */
function chargeOutcome(charge: Charge): ExternalOutcome<ChargeJson> {
  const result: ChargeJson = {
    chargeId: charge.id,
    status: charge.status,
    failureCode: charge.failureCode ?? null,
  };
  return { state: charge.status, result, providerRef: charge.id };
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

function chargeRequest(input: ChargeInput): ChargeRequest {
  return {
    amount: input.amount,
    currency: input.currency,
    paymentMethod: input.paymentMethod,
    description: `Order ${input.orderId}`,
    metadata: { order_id: input.orderId, tenant_id: input.tenantId, operation_key: input.key },
  };
}

const str = (v: unknown): string | null => (typeof v === 'string' && v !== '' ? v : null);

export const chargeStep: StepDescriptor<'payments', ChargeJson, ChargeInput> = {
  name: 'charge',
  operationType: OPERATION_TYPES.charge,
  workflow: 'order',
  activity: 'chargePayment',
  provider: 'payments',
  fingerprint: { orderId: 'string', amount: 'number', currency: 'string', paymentMethod: 'string' },
  keyWindowMs: (payments, override) => stepKeyWindowMs(payments.capabilities, override),
  perform: async (payments, input, dk) =>
    chargeOutcome(await payments.createCharge(chargeRequest(input), dk)),
  reconciler:
    (payments, _ref, opts) =>
    async ({ downstreamKey: dk, record }) => {
      const request = opts.input ? chargeRequest(opts.input) : undefined;
      const plan = planReconcile(payments.capabilities, record, {
        keyWindowMs: opts.keyWindowMs,
        canReplay: request !== undefined,
      });
      switch (plan.kind) {
        case 'lookup': {
          const find = payments.findChargeByIdempotencyKey ?? providerMissing('lookup');
          const charge = await find.call(payments, dk);
          return charge ? chargeOutcome(charge) : { state: 'not_found' };
        }
        case 'replay':
          // The same request under the same key: the stored outcome, or the charge made now.
          if (!request) providerMissing('replay without a request');
          return chargeOutcome(await payments.createCharge(request, dk));
        case 'search': {
          const search = payments.searchChargeByIdempotencyKey ?? providerMissing('search');
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
    },
  providerRefOf: (result) => result.chargeId,
  settled: (outcome, chargeId) => ({
    chargeId,
    status: outcome,
    failureCode: outcome === 'failed' ? 'settled_failed' : null,
  }),
  resolvable: { outcomes: ['succeeded', 'failed'] },
  find: findCharge,
  fromActivityResult: (r) => {
    const state = r.outcome === 'failed' ? 'failed' : 'succeeded';
    const chargeId = str(r.chargeId);
    return {
      state,
      result: { chargeId, status: state, failureCode: str(r.failureCode) },
      providerRef: chargeId,
    };
  },
  reconcileAfterRestore: true,
};

export function chargeScope(ref: { tenantId: string; key: string }): Scope {
  return stepScope(chargeStep, ref);
}

/**
 * Charges once per operation key. Throws the ledger's errors (outcome_unknown,
 * in_progress, ownership_lost, conflict) and a definite ProviderError (the
 * claim was released) unchanged; the caller maps them to its boundary.
 */
export async function runCharge(
  deps: ChargeStepDeps,
  input: ChargeInput,
  opts: RunStepOptions = {},
): Promise<ChargeResult> {
  const run = await runStep(chargeStep, chargeDeps(deps), input, opts);
  return {
    outcome: run.state,
    chargeId: run.result.chargeId ?? run.providerRef,
    failureCode: run.result.failureCode,
    replayed: run.replayed,
    reconciled: run.reconciled,
  };
}

function chargeDeps(deps: ChargeStepDeps) {
  return { ledger: deps.ledger, provider: deps.payments, keyWindowMs: deps.keyWindowMs };
}

/** The ledger record of a charge, as a ReconcileResult. */
export function chargeState(record: OperationRecord): ReconcileResult {
  return stepState(chargeStep, record);
}

export const KEY_WINDOW_PASSED = keyWindowPassed(chargeStep);

/** Reconciles a charge without ever performing it (reconcileStep). */
export function reconcileCharge(
  deps: ChargeStepDeps,
  ref: { tenantId: string; key: string },
): Promise<ReconcileResult> {
  return reconcileStep(chargeStep, chargeDeps(deps), ref);
}

/** Settles an uncertain charge: a provider event or an operator's decision (settleStep). */
export function settleCharge(
  deps: Pick<ChargeStepDeps, 'ledger'>,
  ref: { tenantId: string; key: string },
  outcome: 'succeeded' | 'failed',
  chargeId: string | null,
): Promise<ReconcileResult> {
  return settleStep(chargeStep, deps.ledger, ref, outcome, chargeId);
}
