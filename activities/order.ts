/**
 * Order activities: thin adapters from Temporal to the ledger (src/ledger)
 * and the providers (src/providers). Each one claims its operation key in the
 * ledger before it acts; the key comes from the workflow as an argument.
 *
 * At this boundary permanent errors become non-retryable ApplicationFailures
 * and transient ones are thrown for Temporal to retry.
 */
import { ApplicationFailure } from '@temporalio/activity';
import type { Pool } from '../src/db/index.ts';
import {
  downstreamKey,
  Ledger,
  LedgerError,
  type OperationRecord,
  type ReconcileOutcome,
} from '../src/ledger/index.ts';
import type { Charge, EmailProvider, Message, PaymentProvider } from '../src/providers/types.ts';
import { ProviderError } from '../src/providers/types.ts';
import { OPERATION_TYPES, type OrderStatus } from '../src/orders/model.ts';
import { applyOrderTransition } from '../src/orders/sql.ts';

export interface OrderActivityDeps {
  pool: Pool;
  ledger: Ledger;
  payments: PaymentProvider;
  email: EmailProvider;
}

export interface StepRef {
  tenantId: string;
  orderId: string;
  workflowId: string;
  /** The step's operation key, derived from the workflow ID by the workflow. */
  key: string;
}

export interface ChargeArgs extends StepRef {
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

export interface ReceiptArgs extends StepRef {
  to: string;
  amount: number;
  currency: string;
  chargeId: string;
}

export interface ReceiptResult {
  messageId: string;
  replayed: boolean;
}

export interface StatusArgs extends StepRef {
  status: OrderStatus;
  chargeId?: string | null;
  receiptId?: string | null;
  /** Shown to operators; not part of the operation's fingerprint. */
  lastError?: string | null;
  /** Machine-readable reason for rejected / needs_attention (ORDER_REASONS); not fingerprinted. */
  reason?: string | null;
}

export interface StatusResult {
  applied: boolean;
  status: OrderStatus;
}

export interface SettleArgs extends StepRef {
  outcome: 'succeeded' | 'failed';
  chargeId?: string;
}

/** The charge's ledger state after a reconciliation: still unknown, or settled. */
export interface ReconcileResult {
  settled: boolean;
  outcome: 'succeeded' | 'failed' | null;
  chargeId: string | null;
  /** No claim exists and the provider has nothing under the key: the charge never started. */
  notStarted?: boolean;
  /**
   * The provider never saw the key and the step may be performed again under
   * the same key (inside the provider's key window): the workflow calls
   * chargePayment again, which takes over, reconciles and performs.
   */
  performAgain?: boolean;
}

/** chargeId is null only when an operator settled the charge without naming it. */
type ChargeJson = { chargeId: string | null; status: 'succeeded' | 'failed'; failureCode: string | null };
type MessageJson = { messageId: string };

function chargeOutcome(charge: Charge) {
  const result: ChargeJson = {
    chargeId: charge.id,
    status: charge.status,
    failureCode: charge.failureCode ?? null,
  };
  return { state: charge.status, result, providerRef: charge.id } as const;
}

function messageOutcome(message: Message) {
  const result: MessageJson = { messageId: message.id };
  return { state: 'succeeded', result, providerRef: message.id } as const;
}

/**
 * Maps ledger and provider errors onto Temporal's retry semantics. A provider
 * refusing the request itself (nothing happened) becomes `rejectedType`; an
 * idempotency mismatch at the provider stays 'ProviderRejected' for a human.
 */
export function toActivityFailure(
  err: unknown,
  unknownType: string,
  rejectedType = 'ProviderRejected',
): unknown {
  if (err instanceof LedgerError) {
    switch (err.code) {
      case 'outcome_unknown':
        return ApplicationFailure.create({ type: unknownType, message: err.message, cause: err });
      case 'in_progress':
      case 'ownership_lost':
        return ApplicationFailure.create({
          type: 'OperationInProgress',
          message: err.message,
          cause: err,
          ...(err.retryAfterMs ? { nextRetryDelay: err.retryAfterMs } : {}),
        });
      case 'conflict':
        return ApplicationFailure.create({
          type: 'OperationConflict',
          message: err.message,
          nonRetryable: true,
        });
      case 'invalid_key':
      case 'invalid_input':
        return ApplicationFailure.create({ type: 'InvalidInput', message: err.message, nonRetryable: true });
      default:
        return ApplicationFailure.create({ type: 'LedgerError', message: err.message, cause: err });
    }
  }
  if (err instanceof ProviderError && err.kind === 'rejected') {
    const type = err.code === 'idempotency_error' ? 'ProviderRejected' : rejectedType;
    return ApplicationFailure.create({ type, message: err.message, nonRetryable: true });
  }
  return err;
}

function scope(ref: StepRef, operationType: string) {
  return { tenantId: ref.tenantId, operationType, key: ref.key };
}

async function chargeReconcile(
  payments: PaymentProvider,
  downstreamKey: string,
): Promise<ReconcileOutcome<ChargeJson>> {
  const charge = await payments.findChargeByIdempotencyKey(downstreamKey);
  return charge ? chargeOutcome(charge) : { state: 'not_found' };
}

function reconcileResult(record: OperationRecord): ReconcileResult {
  if (record.state !== 'succeeded' && record.state !== 'failed')
    return { settled: false, outcome: null, chargeId: null };
  const result = (record.result ?? {}) as Partial<ChargeJson>;
  return { settled: true, outcome: record.state, chargeId: result.chargeId || record.providerRef || null };
}

export function createOrderActivities(deps: OrderActivityDeps) {
  const { ledger, payments, email } = deps;
  return {
    async chargePayment(args: ChargeArgs): Promise<ChargeResult> {
      try {
        const run = await ledger.runExternal<ChargeJson>(
          scope(args, OPERATION_TYPES.charge),
          {
            schemaVersion: 1,
            value: {
              orderId: args.orderId,
              amount: args.amount,
              currency: args.currency,
              paymentMethod: args.paymentMethod,
            },
          },
          {
            perform: async ({ downstreamKey }) =>
              chargeOutcome(
                await payments.createCharge(
                  {
                    amount: args.amount,
                    currency: args.currency,
                    paymentMethod: args.paymentMethod,
                    description: `Order ${args.orderId}`,
                    metadata: { order_id: args.orderId, tenant_id: args.tenantId, operation_key: args.key },
                  },
                  downstreamKey,
                ),
              ),
            reconcile: ({ downstreamKey }) => chargeReconcile(payments, downstreamKey),
          },
        );
        return {
          outcome: run.state,
          chargeId: run.result.chargeId ?? run.providerRef,
          failureCode: run.result.failureCode,
          replayed: run.replayed,
          reconciled: run.reconciled,
        };
      } catch (err) {
        throw toActivityFailure(err, 'PaymentOutcomeUnknown', 'PaymentRejected');
      }
    },

    /** Reconciles an uncertain charge without ever performing it. */
    async reconcileCharge(args: StepRef): Promise<ReconcileResult> {
      const chargeScope = scope(args, OPERATION_TYPES.charge);
      if (!(await ledger.get(chargeScope))) {
        // No claim: never claimed, released after a definite refusal, or reaped long
        // after it settled. Only the provider can tell which; ask it by the same key.
        const charge = await payments.findChargeByIdempotencyKey(downstreamKey(chargeScope));
        if (charge) return { settled: true, outcome: charge.status, chargeId: charge.id };
        return { settled: false, outcome: null, chargeId: null, notStarted: true };
      }
      try {
        const record = await ledger.reconcileOnly<ChargeJson>(
          scope(args, OPERATION_TYPES.charge),
          ({ downstreamKey }) => chargeReconcile(payments, downstreamKey),
        );
        return reconcileResult(record);
      } catch (err) {
        if (err instanceof LedgerError && err.code === 'outcome_unknown') {
          return { settled: false, outcome: null, chargeId: null };
        }
        throw toActivityFailure(err, 'PaymentOutcomeUnknown');
      }
    },

    /** Records a provider event or an operator's decision about an uncertain charge. */
    async settleCharge(args: SettleArgs): Promise<ReconcileResult> {
      try {
        const chargeId = args.chargeId ?? null;
        const { record } = await ledger.settle(scope(args, OPERATION_TYPES.charge), {
          state: args.outcome,
          result: {
            chargeId,
            status: args.outcome,
            failureCode: args.outcome === 'failed' ? 'settled_failed' : null,
          },
          ...(args.chargeId ? { providerRef: args.chargeId } : {}),
        });
        return reconcileResult(record);
      } catch (err) {
        // Already final with the other outcome: the ledger (the provider's own
        // answer, or an earlier settlement) wins over a later event.
        if (err instanceof LedgerError && err.code === 'invalid_state') {
          const record = await ledger.get(scope(args, OPERATION_TYPES.charge));
          if (record) return reconcileResult(record);
        }
        throw toActivityFailure(err, 'PaymentOutcomeUnknown');
      }
    },

    async sendReceipt(args: ReceiptArgs): Promise<ReceiptResult> {
      try {
        const run = await ledger.runExternal<MessageJson>(
          scope(args, OPERATION_TYPES.receipt),
          { schemaVersion: 1, value: { orderId: args.orderId, to: args.to, chargeId: args.chargeId } },
          {
            perform: async ({ downstreamKey }) =>
              messageOutcome(
                await email.sendMessage(
                  {
                    to: args.to,
                    subject: `Receipt for order ${args.orderId}`,
                    text: `We received ${formatMoney(args.amount, args.currency)} for order ${args.orderId} (charge ${args.chargeId}).`,
                    metadata: { order_id: args.orderId, tenant_id: args.tenantId, operation_key: args.key },
                  },
                  downstreamKey,
                ),
              ),
            reconcile: async ({ downstreamKey }) => {
              const message = await email.findMessageByIdempotencyKey(downstreamKey);
              return message ? messageOutcome(message) : { state: 'not_found' };
            },
          },
        );
        return { messageId: run.result.messageId, replayed: run.replayed };
      } catch (err) {
        throw toActivityFailure(err, 'ReceiptOutcomeUnknown');
      }
    },

    /** Local mode: the status row and the ledger record commit in one transaction. */
    async setOrderStatus(args: StatusArgs): Promise<StatusResult> {
      try {
        const { result } = await ledger.runLocal(
          scope(args, OPERATION_TYPES.status),
          { schemaVersion: 1, value: { orderId: args.orderId, status: args.status } },
          async (tx) => {
            const outcome = await applyOrderTransition(tx, {
              tenantId: args.tenantId,
              orderId: args.orderId,
              to: args.status,
              chargeId: args.chargeId ?? null,
              receiptId: args.receiptId ?? null,
              lastError: args.lastError ?? null,
              reason: args.reason ?? null,
            });
            if (outcome.kind === 'not_found') {
              throw ApplicationFailure.create({
                type: 'OrderNotFound',
                message: `order ${args.tenantId}/${args.orderId} does not exist`,
                nonRetryable: true,
              });
            }
            return { applied: outcome.kind === 'applied', status: outcome.status };
          },
        );
        return result;
      } catch (err) {
        throw toActivityFailure(err, 'StatusOutcomeUnknown');
      }
    },
  };
}

export type OrderActivities = ReturnType<typeof createOrderActivities>;

function formatMoney(amount: number, currency: string): string {
  return `${(amount / 100).toFixed(2)} ${currency.toUpperCase()}`;
}
