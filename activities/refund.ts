/**
 * Refund activities: the refund workflow's steps, thin adapters from
 * Temporal to the ledger and the payment and email providers, on the same
 * helpers as the order's (its step logger and failure mapping in
 * activities/order.ts, the step modules in src/steps). Each claims the
 * operation key the workflow derived from the refund's workflow ID.
 */
import { ApplicationFailure, Context } from '@temporalio/activity';
import { LedgerError } from 'onceflow';
import { heartbeatRenewal } from 'onceflow';
import { FAILURE } from '../src/orders/contract.ts';
import { REFUND_OPERATION_TYPES, type RefundStatus } from '../src/refunds/contract.ts';
import { refundTransitionStatement } from '../src/refunds/sql.ts';
import * as receipt from '../src/steps/receipt.ts';
import * as refund from '../src/steps/refund.ts';
import type { ReconcileResult } from '../src/steps/payment.ts';
import { failed, stepLog, type OrderActivityDeps, type StepRef } from './order.ts';

interface RefundStepRef extends StepRef {
  refundId: string;
}

export interface ProviderRefundArgs extends RefundStepRef {
  chargeId: string;
  amount: number;
  currency: string;
  reason: string | null;
}

export interface ReconcileRefundArgs extends RefundStepRef {
  /** The charge refunded: a search provider (Stripe) lists this charge's refunds. */
  chargeId?: string;
}

export interface SettleRefundArgs extends RefundStepRef {
  outcome: 'succeeded' | 'failed';
  providerRefundId?: string;
}

export interface RefundReceiptArgs extends RefundStepRef {
  to: string;
  amount: number;
  currency: string;
  providerRefundId: string;
}

export interface RefundStatusArgs extends RefundStepRef {
  status: RefundStatus;
  providerRefundId?: string | null;
  /** Shown to operators; not part of the operation's fingerprint. */
  lastError?: string | null;
}

export interface RefundStatusResult {
  applied: boolean;
  status: RefundStatus;
  /** This write moved the refund into `failed` and gave its amount back to the order. */
  released: boolean;
}

export function createRefundActivities(deps: OrderActivityDeps) {
  const { ledger } = deps;
  const keyWindowMs = deps.providerKeyWindowMs;
  const refundDeps: refund.RefundStepDeps = { ledger, payments: deps.payments, keyWindowMs };
  const receiptDeps: receipt.ReceiptStepDeps = { ledger, email: deps.email, keyWindowMs };
  return {
    /** The provider refund, once per key; heartbeats and renews its claim like chargePayment. */
    async refundPayment(args: ProviderRefundArgs): Promise<refund.RefundResult> {
      const log = stepLog(args);
      try {
        const r = await refund.runRefund(refundDeps, args, heartbeatRenewal());
        log.info('step finished', { ...r });
        return r;
      } catch (err) {
        // A refusal before acting (no such charge, more than is left): nothing was refunded.
        throw failed(log, err, FAILURE.refundOutcomeUnknown, FAILURE.paymentRejected);
      }
    },

    /** Reconciles an uncertain provider refund without ever performing it. */
    async reconcileRefund(args: ReconcileRefundArgs): Promise<ReconcileResult> {
      const log = stepLog(args);
      try {
        const r = await refund.reconcileRefund(refundDeps, args);
        log.info('step finished', { settled: r.settled, outcome: r.outcome, refundId: r.chargeId });
        return r;
      } catch (err) {
        if (err instanceof LedgerError && err.code === 'outcome_unknown') {
          log.info('step finished', { settled: false, outcome: null, stillUnknown: true });
          return { settled: false, outcome: null, chargeId: null };
        }
        throw failed(log, err, FAILURE.refundOutcomeUnknown);
      }
    },

    /** Applies a provider refund event to the step's record; a final record keeps its own outcome. */
    async settleRefund(args: SettleRefundArgs): Promise<ReconcileResult> {
      const log = stepLog(args);
      try {
        const r = await refund.settleRefund(refundDeps, args, args.outcome, args.providerRefundId ?? null);
        log.info('step finished', { settled: r.settled, outcome: r.outcome, refundId: r.chargeId });
        return r;
      } catch (err) {
        throw failed(log, err, FAILURE.refundOutcomeUnknown);
      }
    },

    async sendRefundReceipt(args: RefundReceiptArgs): Promise<receipt.ReceiptResult> {
      const log = stepLog(args);
      try {
        const r = await receipt.runRefundReceipt(receiptDeps, args, heartbeatRenewal());
        log.info('step finished', { ...r });
        return r;
      } catch (err) {
        throw failed(log, err, FAILURE.receiptOutcomeUnknown);
      }
    },

    /** Local mode: the refund row (and a release on `failed`) and the ledger record in one statement. */
    async setRefundStatus(args: RefundStatusArgs): Promise<RefundStatusResult> {
      const log = stepLog(args);
      try {
        const ran = await ledger.runLocalStatement<{
          applied: boolean;
          status: RefundStatus;
          released: boolean;
        }>(
          { tenantId: args.tenantId, operationType: REFUND_OPERATION_TYPES.status, key: args.key },
          { schemaVersion: 1, value: { refundId: args.refundId, status: args.status } },
          refundTransitionStatement({
            tenantId: args.tenantId,
            refundId: args.refundId,
            to: args.status,
            providerRefundId: args.providerRefundId ?? null,
            lastError: args.lastError ?? null,
            stepKey: args.key,
            taskQueue: Context.current().info.taskQueue,
          }),
        );
        if (!ran) {
          throw ApplicationFailure.create({
            type: FAILURE.refundNotFound,
            message: `refund ${args.tenantId}/${args.refundId} does not exist`,
            nonRetryable: true,
          });
        }
        log.info('step finished', { ...ran.result });
        return ran.result;
      } catch (err) {
        throw failed(log, err, FAILURE.statusOutcomeUnknown);
      }
    },
  };
}

export type RefundActivities = ReturnType<typeof createRefundActivities>;
