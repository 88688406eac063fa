/**
 * The receipt step: what an email provider's answer means for the receipt's
 * ledger record. The order activities and the operator both call it.
 * The same rules as the payment step (src/steps/payment.ts): a receipt is
 * sent only through the ledger under its downstream key, an answer that does
 * not prove nothing happened leaves the record `unknown`, and a takeover
 * whose lookup finds nothing sends again under the SAME key inside the
 * provider's key window. A receipt has no business failure: it is sent, or
 * still to be sent.
 *
 * A provider that can't be asked (SMTP: capabilities `none`) settles an
 * uncertain send by its declared policy: `at_least_once` sends again under
 * the same Message-ID (derived from the operation key), `at_most_once`
 * leaves the receipt unknown, so the order goes to an operator.
 */
import {
  type ExternalRunOptions,
  type LedgerInput,
  type Ledger,
  type OperationRecord,
  type ReconcileOutcome,
  type Scope,
} from 'onceflow';
import type { EmailProvider, Message } from '../providers/types.ts';
import { OPERATION_TYPES } from '../orders/model.ts';
import { planSettle, stepKeyWindowMs } from './settle.ts';
import { REFUND_OPERATION_TYPES } from '../refunds/contract.ts';

export type MessageJson = { messageId: string };

export interface ReceiptStepDeps {
  ledger: Ledger;
  email: EmailProvider;
  /** The email provider's idempotency-key window; default what the provider declares. */
  keyWindowMs?: number | undefined;
}

export interface ReceiptInput {
  tenantId: string;
  orderId: string;
  /** The receipt's operation key (`<workflowId>/receipt`). */
  key: string;
  to: string;
  amount: number;
  currency: string;
  chargeId: string;
}

export interface ReceiptResult {
  messageId: string;
  replayed: boolean;
}

function receiptScope(ref: { tenantId: string; key: string }): Scope {
  return { tenantId: ref.tenantId, operationType: OPERATION_TYPES.receipt, key: ref.key };
}

function messageOutcome(message: Message) {
  const result: MessageJson = { messageId: message.id };
  return { state: 'succeeded', result, providerRef: message.id } as const;
}

/** The longest key window the ledger accepts (2^31-1 ms, a timer's bound): "may always send again". */
const LONGEST_KEY_WINDOW_MS = 2 ** 31 - 1;

/**
 * The key window the ledger applies to a receipt. A provider without keys
 * (SMTP) under `at_least_once` may always send again (a possible duplicate
 * is the declared price), so its "window" is the ledger's longest; under
 * `at_most_once` it never sends again, as reconcile never answers not_found.
 */
export function receiptKeyWindowMs(email: EmailProvider, override?: number): number | undefined {
  if (email.capabilities.keyWindowMs === null && override === undefined) {
    return email.uncertainPolicy === 'at_most_once' ? undefined : LONGEST_KEY_WINDOW_MS;
  }
  return stepKeyWindowMs(email.capabilities, override);
}

/** The message sent under this key, if the provider can be asked (the operator's view). */
export async function findMessage(email: EmailProvider, dk: string): Promise<Message | null> {
  return email.findMessageByIdempotencyKey ? email.findMessageByIdempotencyKey(dk) : null;
}

/** Reconcile: the message sent under the downstream key, or not_found, as the provider allows. */
export function receiptReconciler(
  email: EmailProvider,
  opts: { keyWindowMs?: number | undefined } = {},
): (ctx: {
  downstreamKey: string;
  record?: Pick<OperationRecord, 'createdAt'>;
}) => Promise<ReconcileOutcome<MessageJson>> {
  return async ({ downstreamKey: dk, record }) => {
    const plan = planSettle(email.capabilities, record, { keyWindowMs: opts.keyWindowMs, canReplay: false });
    if (plan.kind === 'lookup' && email.findMessageByIdempotencyKey) {
      const message = await email.findMessageByIdempotencyKey(dk);
      return message ? messageOutcome(message) : { state: 'not_found' };
    }
    // Nothing to ask. at_least_once: "not found", so the ledger sends again under the same
    // Message-ID; at_most_once: still unknown, so the order goes to an operator.
    return email.uncertainPolicy === 'at_most_once' ? { state: 'pending' } : { state: 'not_found' };
  };
}

/** What an operator's resolution of a receipt stores (a receipt can only be resolved as sent). */
export function settledReceipt(messageId: string | null): MessageJson {
  return { messageId: messageId ?? '' };
}

function formatMoney(amount: number, currency: string): string {
  return `${(amount / 100).toFixed(2)} ${currency.toUpperCase()}`;
}

/** What a receipt's record is fingerprinted by (also how a recovery after a restore rebuilds it). */
export function receiptLedgerInput(input: Pick<ReceiptInput, 'orderId' | 'to' | 'chargeId'>): LedgerInput {
  return { schemaVersion: 1, value: { orderId: input.orderId, to: input.to, chargeId: input.chargeId } };
}

/** Sends the receipt once per operation key. Errors as runCharge's. */
export async function runReceipt(
  deps: ReceiptStepDeps,
  input: ReceiptInput,
  opts: Pick<ExternalRunOptions, 'heartbeat' | 'renewEveryMs'> = {},
): Promise<ReceiptResult> {
  const keyWindowMs = receiptKeyWindowMs(deps.email, deps.keyWindowMs);
  const run = await deps.ledger.runExternal<MessageJson>(
    receiptScope(input),
    receiptLedgerInput(input),
    {
      perform: async ({ downstreamKey: dk }) =>
        messageOutcome(
          await deps.email.sendMessage(
            {
              to: input.to,
              subject: `Receipt for order ${input.orderId}`,
              text: `We received ${formatMoney(input.amount, input.currency)} for order ${input.orderId} (charge ${input.chargeId}).`,
              metadata: { order_id: input.orderId, tenant_id: input.tenantId, operation_key: input.key },
            },
            dk,
          ),
        ),
      reconcile: receiptReconciler(deps.email, { keyWindowMs }),
    },
    { ...opts, ...(keyWindowMs !== undefined ? { keyWindowMs } : {}) },
  );
  return { messageId: run.result.messageId, replayed: run.replayed };
}

/** A refund receipt: the customer is told the refund was made. */
export interface RefundReceiptInput {
  tenantId: string;
  orderId: string;
  refundId: string;
  /** The step's operation key (`<refund workflowId>/receipt`). */
  key: string;
  to: string;
  amount: number;
  currency: string;
  providerRefundId: string;
}

/** What a refund receipt's record is fingerprinted by (also how a recovery rebuilds it). */
export function refundReceiptLedgerInput(
  input: Pick<RefundReceiptInput, 'refundId' | 'to' | 'providerRefundId'>,
): LedgerInput {
  return {
    schemaVersion: 1,
    value: { refundId: input.refundId, to: input.to, providerRefundId: input.providerRefundId },
  };
}

/** Sends the refund receipt once per operation key: the order receipt's rules, its own operation type. */
export async function runRefundReceipt(
  deps: ReceiptStepDeps,
  input: RefundReceiptInput,
  opts: Pick<ExternalRunOptions, 'heartbeat' | 'renewEveryMs'> = {},
): Promise<ReceiptResult> {
  const run = await deps.ledger.runExternal<MessageJson>(
    { tenantId: input.tenantId, operationType: REFUND_OPERATION_TYPES.receipt, key: input.key },
    refundReceiptLedgerInput(input),
    {
      perform: async ({ downstreamKey: dk }) =>
        messageOutcome(
          await deps.email.sendMessage(
            {
              to: input.to,
              subject: `Refund for order ${input.orderId}`,
              text: `We refunded ${formatMoney(input.amount, input.currency)} for order ${input.orderId} (refund ${input.refundId}).`,
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
      reconcile: receiptReconciler(deps.email),
    },
    { ...opts, ...(deps.keyWindowMs !== undefined ? { keyWindowMs: deps.keyWindowMs } : {}) },
  );
  return { messageId: run.result.messageId, replayed: run.replayed };
}
