/**
 * An order as the API shows it: GET /v1/orders/{id}'s body, which a merchant event carries too
 * (src/merchant-events), so both read the same function.
 */
import type { Ledger, OperationRecord } from 'onceflow';
import { publicReason } from './model.ts';
import type { OrderRow } from './sql.ts';
import { readOrderStepRecords } from './step-records.ts';

function iso(d: Date | string | null): string | null {
  if (d === null) return null;
  return (d instanceof Date ? d : new Date(d)).toISOString();
}

export function orderView(row: OrderRow) {
  return {
    id: row.id,
    object: 'order' as const,
    status: row.status,
    amount: Number(row.amount),
    currency: row.currency,
    workflowId: row.workflow_id,
    customer: { id: row.customer_id, email: row.customer_email },
    items: row.items.map((i) => ({ sku: i.sku, quantity: i.quantity, unitAmount: i.unitAmount })),
    paymentMethod: row.payment_method,
    merchantReference: row.merchant_reference,
    refundedAmount: Number(row.refunded_amount),
    createdAt: row.created_at.toISOString(),
  };
}

function stepView(workflowId: string, r: OperationRecord) {
  return {
    name: r.key.startsWith(`${workflowId}/`) ? r.key.slice(workflowId.length + 1) : r.key,
    operationType: r.operationType,
    operationKey: r.key,
    state: r.state,
    attempts: r.attempts,
    providerRef: r.providerRef,
    createdAt: iso(r.createdAt)!,
    updatedAt: iso(r.updatedAt)!,
    completedAt: iso(r.completedAt),
  };
}

async function readSteps(ledger: Ledger, tenantId: string, workflowId: string) {
  return (await readOrderStepRecords(ledger, tenantId, workflowId)).map((r) => stepView(workflowId, r));
}

/** GET /v1/orders/{id}'s body, which POST /v1/orders answers too when a `Prefer: wait` sees the order finish. */
export async function orderDetail(ledger: Ledger, tenantId: string, row: OrderRow) {
  // Only the workflow's own step keys: a client's Idempotency-Key (http.create_order) is never read.
  const steps = await readSteps(ledger, tenantId, row.workflow_id);
  return {
    ...orderView(row),
    chargeId: row.charge_id,
    receiptId: row.receipt_id,
    // Never row.last_error: raw error text (internal addresses, database messages) is for operators.
    ...publicReason(row.status, row.reason),
    updatedAt: row.updated_at.toISOString(),
    steps,
  };
}
