/**
 * An order as the API shows it: GET /v1/orders/{id}'s body, which a merchant event carries too
 * (src/merchant-events), so both read the same function.
 */
import type { Ledger, OperationRecord } from 'onceflow';
import { pipelined, withClient, type Pool } from 'onceflow/postgres';
import { orderWorkflowId, publicReason } from './model.ts';
import { getOrder, type OrderRow } from './sql.ts';
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

/**
 * An order and its steps' records in one round trip: both reads leave in one write on one
 * connection and run in that order, so the records are at least as new as the row. Null: no order.
 */
export async function readOrderWithSteps(
  pool: Pool,
  ledger: Ledger,
  tenantId: string,
  orderId: string,
): Promise<{ row: OrderRow; records: OperationRecord[] } | null> {
  const workflowId = orderWorkflowId(tenantId, orderId);
  const read = await withClient(pool, async (c) => {
    const [row, records] = await pipelined<[OrderRow | null, OperationRecord[]]>(c, () => [
      getOrder(c, tenantId, orderId),
      readOrderStepRecords(ledger, tenantId, workflowId, c),
    ]);
    // Thrown inside withClient, so a client whose read failed is discarded.
    if (row.status === 'rejected') throw row.reason;
    if (records.status === 'rejected') throw records.reason;
    return { row: row.value, records: records.value };
  });
  if (!read.row) return null;
  // Every order's workflow ID is derived so; a row that says otherwise is read by its own.
  if (read.row.workflow_id !== workflowId) {
    return { row: read.row, records: await readOrderStepRecords(ledger, tenantId, read.row.workflow_id) };
  }
  return { row: read.row, records: read.records };
}

/**
 * GET /v1/orders/{id}'s body, which POST /v1/orders answers too when a `Prefer: wait` sees the order
 * finish, and a merchant event carries. `records`: the steps' records when already read with the row.
 */
export async function orderDetail(
  ledger: Ledger,
  tenantId: string,
  row: OrderRow,
  records?: OperationRecord[],
) {
  // Only the workflow's own step keys: a client's Idempotency-Key (http.create_order) is never read.
  const steps = (records ?? (await readOrderStepRecords(ledger, tenantId, row.workflow_id))).map((r) =>
    stepView(row.workflow_id, r),
  );
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
