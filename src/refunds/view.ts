/** A refund as the API shows it: GET's body, which a merchant event carries too (src/merchant-events). */
import type { RefundRow } from './sql.ts';

export function refundView(row: RefundRow) {
  return {
    id: row.id,
    object: 'refund' as const,
    orderId: row.order_id,
    amount: Number(row.amount),
    currency: row.currency,
    status: row.status,
    reason: row.reason,
    workflowId: row.workflow_id,
    providerRefundId: row.provider_refund_id,
    createdAt: row.created_at.toISOString(),
    updatedAt: row.updated_at.toISOString(),
  };
}
