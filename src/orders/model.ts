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
  needs_attention: ['payment_unknown', 'paid', 'completed', 'rejected'],
  completed: [],
  rejected: [],
};

export function canTransition(from: OrderStatus, to: OrderStatus): boolean {
  return TRANSITIONS[from].includes(to);
}

export function isOrderStatus(value: unknown): value is OrderStatus {
  return typeof value === 'string' && (ORDER_STATUSES as readonly string[]).includes(value);
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
