/**
 * The order model shared by the workflow, the activities and the API.
 * Pure TypeScript: imported by workflow code, so no Node built-ins and no I/O.
 *
 * Terminology
 * - order: one customer purchase; its identity is its workflow ID.
 * - step: one retry-safe action of the order workflow (charge, receipt, a
 *   status transition). Each step has an operation key derived from the
 *   workflow ID, so every retry at every level reuses the same key.
 */
import { stepKey } from 'onceflow/workflow';

export const ORDER_STATUSES = [
  'accepted',
  'payment_pending',
  'payment_unknown',
  'paid',
  'completed',
  'rejected',
  'needs_attention',
] as const;
export type OrderStatus = (typeof ORDER_STATUSES)[number];

/** An order in one of these has no more automatic work to do. */
export const TERMINAL_STATUSES: readonly OrderStatus[] = ['completed', 'rejected', 'needs_attention'];

/**
 * Allowed transitions. Anything not listed (in particular, anything out of
 * `completed` or `rejected`) is refused, so a late or duplicate call can never
 * move an order backwards. `needs_attention` can be re-driven by an operator.
 */
export const TRANSITIONS: Readonly<Record<OrderStatus, readonly OrderStatus[]>> = {
  accepted: ['payment_pending', 'rejected', 'needs_attention'],
  payment_pending: ['payment_unknown', 'paid', 'rejected', 'needs_attention'],
  payment_unknown: ['paid', 'rejected', 'needs_attention'],
  paid: ['completed', 'needs_attention'],
  // payment_pending: a re-drive after the payment_pending write itself failed (it parked first).
  needs_attention: ['payment_pending', 'payment_unknown', 'paid', 'completed', 'rejected'],
  completed: [],
  rejected: [],
};

/**
 * Why an order is rejected or needs attention: a machine-readable code stored
 * on the order row (`reason`) and returned by GET /v1/orders/{id} (through
 * publicReason). The raw error text goes to `last_error`, for operators only:
 * it can hold internal addresses and database messages.
 * - `decline_code:<code>`: the provider declined the charge (its decline code).
 * - `payment_failed`: the charge was settled as failed (reconciliation, webhook, operator).
 * - `provider_rejected`: the provider refused the charge request itself; nothing was charged.
 * - `charge_failed:<type>`: the charge step failed in a way retrying can't fix (a human looks).
 * - `payment_unknown_horizon`: the charge's outcome stayed unknown past the reconciliation horizon.
 * - `receipt_failed`: the receipt ran out of retries.
 * - `status_write_failed`: a status write ran out of retries (the workflow parked).
 */
export const ORDER_REASONS = {
  declined: (code: string | null | undefined) => `decline_code:${code || 'unknown'}`,
  paymentFailed: 'payment_failed',
  providerRejected: 'provider_rejected',
  chargeFailed: (type: string) => `charge_failed:${type}`,
  paymentUnknownHorizon: 'payment_unknown_horizon',
  receiptFailed: 'receipt_failed',
  statusWriteFailed: 'status_write_failed',
} as const;

/**
 * What a tenant reads for each reason code family (the part before `:`): fixed
 * text, never the raw error, so nothing internal (addresses, SQL, stack
 * traces) reaches a tenant. Documented in docs/API.md; a new ORDER_REASONS
 * code needs its line here (test/orders/public-reason.test.ts checks it).
 */
export const ORDER_REASON_MESSAGES = {
  decline_code: 'The card was declined. Nothing was charged; the customer can use another payment method.',
  payment_failed: 'The payment failed. Nothing was charged.',
  provider_rejected: 'The payment provider refused the charge request. Nothing was charged.',
  charge_failed:
    'The payment could not be completed. Our team has been alerted; do not ask the customer to pay again.',
  payment_unknown_horizon:
    'The outcome of the payment could not be confirmed. Our team is checking it with the payment provider; ' +
    'do not ask the customer to pay again.',
  receipt_failed: 'The order is paid, but its receipt could not be sent. Our team has been alerted.',
  status_write_failed:
    'The order could not be updated because of a temporary problem on our side. Our team has been alerted.',
} as const satisfies Record<string, string>;

/** For an order in one of these statuses whose code is missing or not in the table. */
const STATUS_MESSAGES: Partial<Record<OrderStatus, string>> = {
  rejected: 'The order was rejected.',
  needs_attention: 'The order needs attention from our team.',
};

/** A reason's detail (after `:`) that is a plain code: a decline code or a failure type. */
const SAFE_REASON_DETAIL = /^[A-Za-z0-9_.-]{1,64}$/;

/**
 * The reason code and message a tenant sees for an order. Only codes whose
 * family is in ORDER_REASON_MESSAGES are shown; a detail that is not a plain
 * code is dropped (the family stays), and anything else becomes null, with
 * the status's generic message.
 */
export function publicReason(
  status: OrderStatus,
  reason: string | null,
): { reason: string | null; message: string | null } {
  if (reason) {
    const cut = reason.indexOf(':');
    const family = cut < 0 ? reason : reason.slice(0, cut);
    if (Object.hasOwn(ORDER_REASON_MESSAGES, family)) {
      const detail = cut < 0 ? null : reason.slice(cut + 1);
      return {
        reason: detail !== null && SAFE_REASON_DETAIL.test(detail) ? reason : family,
        message: ORDER_REASON_MESSAGES[family as keyof typeof ORDER_REASON_MESSAGES],
      };
    }
  }
  return { reason: null, message: STATUS_MESSAGES[status] ?? null };
}

export interface OrderItem {
  sku: string;
  quantity: number;
  /** Integer minor units (cents). */
  unitAmount: number;
}

export interface OrderWorkflowInput {
  tenantId: string;
  orderId: string;
  /** Integer minor units. */
  amount: number;
  currency: string;
  paymentMethod: string;
  customer: { id: string; email: string };
}

/** Operation types in the ledger, one per kind of step. */
export const OPERATION_TYPES = {
  charge: 'payment.charge',
  receipt: 'email.receipt',
  status: 'order.status',
  createOrder: 'http.create_order',
} as const;

export function orderWorkflowId(tenantId: string, orderId: string): string {
  return `order/${tenantId}/${orderId}`;
}

/** Per-step operation keys, derived from the workflow ID (never the run ID) by the library's stepKey. */
export const stepKeys = {
  charge: (workflowId: string) => stepKey(workflowId, 'charge'),
  receipt: (workflowId: string) => stepKey(workflowId, 'receipt'),
  /**
   * `redrive` is the workflow's count of operator re-drives so far (0 before the first): after a
   * re-drive the order may move again into a status it visited before, which needs a fresh key.
   */
  status: (workflowId: string, status: OrderStatus, redrive = 0) =>
    redrive > 0
      ? stepKey(workflowId, 'status', status, `redrive-${redrive}`)
      : stepKey(workflowId, 'status', status),
};

/** A ledger record's identity within a tenant. */
export interface StepRef {
  operationType: string;
  key: string;
}

/**
 * Every step record the order workflow can write in re-drive epochs
 * [fromEpoch, toEpoch): epoch 0 is the first run (charge, receipt and one
 * status key per status); epoch n > 0 holds the status keys of the n-th
 * re-drive (stepKeys.status's `redrive` suffix). Exact keys, so a reader
 * finds them through the ledger's primary key, whatever the database's
 * collation (a prefix range over the key is not a prefix test under a
 * linguistic collation such as en_US). Keep in step with stepKeys.
 */
export function orderStepRefs(
  workflowId: string,
  fromEpoch: number,
  toEpoch: number,
): (StepRef & { epoch: number })[] {
  const refs: (StepRef & { epoch: number })[] = [];
  for (let epoch = fromEpoch; epoch < toEpoch; epoch++) {
    if (epoch === 0) {
      refs.push({ operationType: OPERATION_TYPES.charge, key: stepKeys.charge(workflowId), epoch });
      refs.push({ operationType: OPERATION_TYPES.receipt, key: stepKeys.receipt(workflowId), epoch });
    }
    for (const status of ORDER_STATUSES) {
      refs.push({
        operationType: OPERATION_TYPES.status,
        key: stepKeys.status(workflowId, status, epoch),
        epoch,
      });
    }
  }
  return refs;
}

export function orderTotal(items: readonly OrderItem[]): number {
  return items.reduce((sum, item) => sum + item.quantity * item.unitAmount, 0);
}
