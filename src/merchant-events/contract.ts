/**
 * Events out to merchants (workflow-safe): the event types, and the delivery workflow's input and
 * failure types. One delivery is one (endpoint, event) pair, its own workflow
 * (`delivery/<endpointId>/<eventId>`, `/r<n>` for an operator's n-th redelivery), so a slow or dead
 * endpoint holds up nothing but its own deliveries.
 */
export const MERCHANT_EVENT_TYPES = [
  'order.completed',
  'order.rejected',
  'order.needs_attention',
  'refund.succeeded',
  'refund.failed',
  'refund.needs_attention',
] as const;
export type MerchantEventType = (typeof MERCHANT_EVENT_TYPES)[number];

export const DELIVERY_WORKFLOW_TYPE = 'deliveryWorkflow';

export interface DeliveryWorkflowInput {
  tenantId: string;
  endpointId: string;
  eventId: string;
}

/** The ledger's operation type of one delivery (its key is the delivery workflow's `<id>/deliver`). */
export const DELIVERY_OPERATION_TYPE = 'webhook.deliver';

export const DELIVERY_FAILURE = {
  /** The retry window passed without a 2xx: the delivery is marked failed (an operator may redeliver). */
  expired: 'DeliveryExpired',
} as const;

export type DeliveryOutcome = 'succeeded' | 'failed' | 'skipped';
