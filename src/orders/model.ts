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

export function canTransition(from: OrderStatus, to: OrderStatus): boolean {
  return TRANSITIONS[from].includes(to);
}

export function isOrderStatus(value: unknown): value is OrderStatus {
  return typeof value === 'string' && (ORDER_STATUSES as readonly string[]).includes(value);
}

/**
 * Why an order is rejected or needs attention: a machine-readable code stored
 * on the order row (`reason`) and returned by GET /v1/orders/{id}. Prose for
 * humans goes to `lastError`.
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

/** Per-step operation keys, derived from the workflow ID (never the run ID). */
export const stepKeys = {
  charge: (workflowId: string) => `${workflowId}/charge`,
  receipt: (workflowId: string) => `${workflowId}/receipt`,
  /** `attempt` > 0 only for operator re-drives, which need a fresh transition into a status visited before. */
  status: (workflowId: string, status: OrderStatus, redrive = 0) =>
    redrive > 0 ? `${workflowId}/status/${status}/redrive-${redrive}` : `${workflowId}/status/${status}`,
};

export function orderTotal(items: readonly OrderItem[]): number {
  return items.reduce((sum, item) => sum + item.quantity * item.unitAmount, 0);
}
