/**
 * The receipt steps (descriptors, src/steps/descriptor.ts): what an email
 * provider's answer means for a receipt's ledger record. The order's receipt
 * and the refund's receipt follow one rule set under their own operation
 * types. The same rules as the payment step (src/steps/payment.ts): a
 * receipt is sent only through the ledger under its downstream key, an
 * answer that does not prove nothing happened leaves the record `unknown`,
 * and a takeover whose lookup finds nothing sends again under the SAME key
 * inside the provider's key window. A receipt has no business failure: it
 * is sent, or still to be sent.
 *
 * A provider that can't be asked (SMTP: capabilities `none`) settles an
 * uncertain send by its declared policy: `at_least_once` sends again under
 * the same Message-ID (derived from the operation key), `at_most_once`
 * leaves the receipt unknown, so the order goes to an operator.
 */
import type { ExternalOutcome, Ledger } from 'onceflow';
import type { EmailProvider, Message, MessageRequest } from '../providers/types.ts';
import { OPERATION_TYPES } from '../orders/model.ts';
import { REFUND_OPERATION_TYPES } from '../refunds/contract.ts';
import { runStep, type RunStepOptions, type StepDescriptor } from './descriptor.ts';
import { planReconcile, stepKeyWindowMs } from './reconcile-plan.ts';

type MessageJson = { messageId: string };

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

export interface ReceiptResult {
  messageId: string;
  replayed: boolean;
}

function messageOutcome(message: Message): ExternalOutcome<MessageJson> {
  return { state: 'succeeded', result: { messageId: message.id }, providerRef: message.id };
}

/** The longest key window the ledger accepts (2^31-1 ms, a timer's bound): "may always send again". */
const LONGEST_KEY_WINDOW_MS = 2 ** 31 - 1;

/**
 * The key window the ledger applies to a receipt. A provider without keys
 * (SMTP) under `at_least_once` may always send again (a possible duplicate
 * is the declared price), so its "window" is the ledger's longest; under
 * `at_most_once` it never sends again, as reconcile never answers not_found.
 */
function receiptKeyWindowMs(email: EmailProvider, override?: number): number | undefined {
  if (email.capabilities.keyWindowMs === null && override === undefined) {
    return email.uncertainPolicy === 'at_most_once' ? undefined : LONGEST_KEY_WINDOW_MS;
  }
  return stepKeyWindowMs(email.capabilities, override);
}

function formatMoney(amount: number, currency: string): string {
  return `${(amount / 100).toFixed(2)} ${currency.toUpperCase()}`;
}

/** What the two receipts share: everything but the message and the fingerprint. */
function receiptDescriptor<I extends { tenantId: string; key: string }>(d: {
  name: 'receipt' | 'refund receipt';
  operationType: string;
  workflow: 'order' | 'refund';
  activity: string;
  fingerprint: StepDescriptor<'email', MessageJson, I>['fingerprint'];
  message: (input: I) => MessageRequest;
}): StepDescriptor<'email', MessageJson, I> {
  return {
    ...d,
    provider: 'email',
    keyWindowMs: receiptKeyWindowMs,
    perform: async (email, input, dk) => messageOutcome(await email.sendMessage(d.message(input), dk)),
    reconciler:
      (email, _ref, opts) =>
      async ({ downstreamKey: dk, record }) => {
        const plan = planReconcile(email.capabilities, record, {
          keyWindowMs: opts.keyWindowMs,
          canReplay: false,
        });
        if (plan.kind === 'lookup' && email.findMessageByIdempotencyKey) {
          const message = await email.findMessageByIdempotencyKey(dk);
          return message ? messageOutcome(message) : { state: 'not_found' };
        }
        // Nothing to ask. at_least_once: "not found", so the ledger sends again under the same
        // Message-ID; at_most_once: still unknown, so the order goes to an operator.
        return email.uncertainPolicy === 'at_most_once' ? { state: 'pending' } : { state: 'not_found' };
      },
    providerRefOf: (result) => result.messageId || null,
    settled: (_outcome, messageId) => ({ messageId: messageId ?? '' }),
    resolvable: {
      outcomes: ['succeeded'],
      otherwise:
        'a receipt cannot be resolved as failed: reconcile it (the provider does not know the key) and ' +
        're-drive its workflow, which sends it under the same key',
    },
    find: async (email, dk) =>
      email.findMessageByIdempotencyKey ? email.findMessageByIdempotencyKey(dk) : null,
    fromActivityResult: (r) => ({
      state: 'succeeded',
      result: { messageId: String(r.messageId ?? '') },
      providerRef: typeof r.messageId === 'string' && r.messageId !== '' ? r.messageId : null,
    }),
    reconcileAfterRestore: false,
  };
}

export const receiptStep = receiptDescriptor<ReceiptInput>({
  name: 'receipt',
  operationType: OPERATION_TYPES.receipt,
  workflow: 'order',
  activity: 'sendReceipt',
  fingerprint: { orderId: 'string', to: 'string', chargeId: 'string' },
  message: (input) => ({
    to: input.to,
    subject: `Receipt for order ${input.orderId}`,
    text: `We received ${formatMoney(input.amount, input.currency)} for order ${input.orderId} (charge ${input.chargeId}).`,
    metadata: { order_id: input.orderId, tenant_id: input.tenantId, operation_key: input.key },
  }),
});

export const refundReceiptStep = receiptDescriptor<RefundReceiptInput>({
  name: 'refund receipt',
  operationType: REFUND_OPERATION_TYPES.receipt,
  workflow: 'refund',
  activity: 'sendRefundReceipt',
  fingerprint: { refundId: 'string', to: 'string', providerRefundId: 'string' },
  message: (input) => ({
    to: input.to,
    subject: `Refund for order ${input.orderId}`,
    text: `We refunded ${formatMoney(input.amount, input.currency)} for order ${input.orderId} (refund ${input.refundId}).`,
    metadata: {
      order_id: input.orderId,
      tenant_id: input.tenantId,
      refund_id: input.refundId,
      operation_key: input.key,
    },
  }),
});

function emailDeps(deps: ReceiptStepDeps) {
  return { ledger: deps.ledger, provider: deps.email, keyWindowMs: deps.keyWindowMs };
}

/** Sends the receipt once per operation key. Errors as runCharge's. */
export async function runReceipt(
  deps: ReceiptStepDeps,
  input: ReceiptInput,
  opts: RunStepOptions = {},
): Promise<ReceiptResult> {
  const run = await runStep(receiptStep, emailDeps(deps), input, opts);
  return { messageId: run.result.messageId, replayed: run.replayed };
}

/** Sends the refund receipt once per operation key: the order receipt's rules, its own operation type. */
export async function runRefundReceipt(
  deps: ReceiptStepDeps,
  input: RefundReceiptInput,
  opts: RunStepOptions = {},
): Promise<ReceiptResult> {
  const run = await runStep(refundReceiptStep, emailDeps(deps), input, opts);
  return { messageId: run.result.messageId, replayed: run.replayed };
}
