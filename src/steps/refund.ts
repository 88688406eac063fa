/**
 * The provider refund step (its descriptor, src/steps/descriptor.ts): what a
 * payment provider's answer to a refund means for the step's ledger record.
 * The same rules as the charge (src/steps/payment.ts), through the same
 * generic functions: performed only through Ledger.runExternal under a
 * downstream key derived from the step's operation key; an answer that does
 * not prove nothing happened leaves the record `unknown`, reconciled the way
 * the provider declares it can answer (src/steps/reconcile-plan.ts), and
 * performed again (under the SAME key) only when the provider never saw it
 * and only inside its key window.
 */
import type { ExternalOutcome, ExternalRunOptions, Ledger, Scope } from 'onceflow';
import type { PaymentProvider, Refund, RefundRequest } from '../providers/types.ts';
import { REFUND_OPERATION_TYPES } from '../refunds/contract.ts';
import {
  providerMissing,
  reconcileStep,
  runStep,
  settleStep,
  stepScope,
  type ReconcileResult,
  type StepDescriptor,
  type StepRef,
} from './descriptor.ts';
import { planReconcile, stepKeyWindowMs } from './reconcile-plan.ts';

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

function refundOutcome(refund: Refund): ExternalOutcome<RefundJson> {
  return {
    state: refund.status,
    result: { refundId: refund.id, status: refund.status },
    providerRef: refund.id,
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
 * step's reconcile asks it the way it can).
 */
async function findRefund(payments: PaymentProvider, dk: string): Promise<Refund | null> {
  return payments.findRefundByIdempotencyKey ? payments.findRefundByIdempotencyKey(dk) : null;
}

const str = (v: unknown): string | null => (typeof v === 'string' && v !== '' ? v : null);

export const refundStep: StepDescriptor<'payments', RefundJson, RefundInput> = {
  name: 'refund',
  operationType: REFUND_OPERATION_TYPES.providerRefund,
  workflow: 'refund',
  activity: 'refundPayment',
  provider: 'payments',
  fingerprint: { refundId: 'string', chargeId: 'string', amount: 'number', currency: 'string' },
  keyWindowMs: (payments, override) => stepKeyWindowMs(payments.capabilities, override),
  perform: async (payments, input, dk) =>
    refundOutcome(await payments.createRefund(refundRequest(input), dk)),
  reconciler:
    (payments, ref, opts) =>
    async ({ downstreamKey: dk, record }) => {
      const request = opts.input ? refundRequest(opts.input) : undefined;
      const plan = planReconcile(payments.capabilities, record, {
        keyWindowMs: opts.keyWindowMs,
        canReplay: request !== undefined,
      });
      switch (plan.kind) {
        case 'lookup': {
          const find = payments.findRefundByIdempotencyKey ?? providerMissing('lookup');
          const refund = await find.call(payments, dk);
          return refund ? refundOutcome(refund) : { state: 'not_found' };
        }
        case 'replay':
          // The same request under the same key: the stored outcome, or the refund made now.
          if (!request) providerMissing('replay without a request');
          return refundOutcome(await payments.createRefund(request, dk));
        case 'search': {
          const search = payments.searchRefund ?? providerMissing('search');
          const chargeId = ref.chargeId ?? request?.chargeId;
          // The provider lists refunds per charge: without it, it can't be asked. Stays unknown.
          if (!chargeId) return { state: 'pending' };
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
    },
  providerRefOf: (result) => result.refundId,
  settled: (outcome, refundId) => ({ refundId, status: outcome }),
  resolvable: { outcomes: ['succeeded', 'failed'] },
  find: findRefund,
  fromActivityResult: (r) => {
    const state = r.outcome === 'failed' ? 'failed' : 'succeeded';
    const refundId = str(r.providerRefundId);
    return { state, result: { refundId, status: state }, providerRef: refundId };
  },
  reconcileAfterRestore: true,
};

export function refundScope(ref: { tenantId: string; key: string }): Scope {
  return stepScope(refundStep, ref);
}

function refundDeps(deps: RefundStepDeps) {
  return { ledger: deps.ledger, provider: deps.payments, keyWindowMs: deps.keyWindowMs };
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
  const run = await runStep(refundStep, refundDeps(deps), input, opts);
  return {
    outcome: run.state,
    providerRefundId: run.result.refundId ?? run.providerRef,
    replayed: run.replayed,
    reconciled: run.reconciled,
  };
}

/**
 * Reconciles a provider refund without ever performing it (reconcileStep;
 * `chargeId` carries the refund's ID). A search provider needs
 * `ref.chargeId`; without it the refund stays unsettled.
 */
export function reconcileRefund(deps: RefundStepDeps, ref: StepRef): Promise<ReconcileResult> {
  return reconcileStep(refundStep, refundDeps(deps), ref);
}

/** Settles an uncertain refund: a provider event or an operator's decision (settleStep). */
export function settleRefund(
  deps: Pick<RefundStepDeps, 'ledger'>,
  ref: { tenantId: string; key: string },
  outcome: 'succeeded' | 'failed',
  providerRefundId: string | null,
): Promise<ReconcileResult> {
  return settleStep(refundStep, deps.ledger, ref, outcome, providerRefundId);
}
