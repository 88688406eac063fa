/**
 * SQL for `restore_recoveries` (migration 0021), the only module that
 * queries it: a declared recovery after a database restore. While one is
 * pending, creates answer 503 and workers wait (src/recovery/gate.ts).
 */
import type { Queryable } from '../db/index.ts';

export interface RecoveryRow {
  id: string;
  since: Date | null;
  declared_by: string;
  declared_at: Date;
  completed_at: Date | null;
  summary: unknown;
}

/** The pending recovery, if one is declared and not finished. */
export async function selectPendingRecovery(db: Queryable): Promise<RecoveryRow | null> {
  const { rows } = await db.query<RecoveryRow>({
    name: 'recovery_pending',
    text: `select id, since, declared_by, declared_at, completed_at, summary
             from restore_recoveries where completed_at is null`,
  });
  return rows[0] ?? null;
}

/**
 * Declares a recovery, or returns the one already pending (a partial unique
 * index allows one): declaring twice, from two APIs that both detected the
 * restore or from the command after an API did, is one recovery. A later
 * declaration with a `since` fills it in where the first had none.
 */
export async function declareRecovery(
  db: Queryable,
  r: { since: Date | null; declaredBy: string },
): Promise<{ row: RecoveryRow; declared: boolean }> {
  const { rows } = await db.query<RecoveryRow & { declared: boolean }>(
    `insert into restore_recoveries as r (since, declared_by) values ($1, $2)
     on conflict ((true)) where completed_at is null
       do update set since = coalesce(r.since, excluded.since)
     returning id, since, declared_by, declared_at, completed_at, summary, (xmax = 0) as declared`,
    [r.since, r.declaredBy.slice(0, 200)],
  );
  const { declared, ...row } = rows[0]!;
  return { row, declared };
}

/** Ends the pending recovery with its summary; false when none was pending. */
export async function completeRecovery(db: Queryable, id: string, summary: unknown): Promise<boolean> {
  const { rowCount } = await db.query(
    `update restore_recoveries set completed_at = now(), summary = $2 where id = $1 and completed_at is null`,
    [id, JSON.stringify(summary)],
  );
  return rowCount === 1;
}

// --- rebuilding rows a restore lost (src/ops/recover.ts) ----------------------

/** An order row as the recovery rebuilds it: from the create memo's stored response, or the workflow's input. */
export interface RestoredOrder {
  tenantId: string;
  orderId: string;
  workflowId: string;
  status: string;
  amount: number;
  currency: string;
  customerId: string;
  customerEmail: string;
  items: unknown[];
  paymentMethod: string;
  merchantReference: string | null;
  chargeId: string | null;
  receiptId: string | null;
  lastError: string | null;
  /** The machine-readable reason (ORDER_REASONS) where the history proves it; else null. */
  reason: string | null;
  createdAt: Date;
}

/** Inserts the order where it is missing; false when a row (by ID, workflow or natural key) exists. */
export async function insertRestoredOrder(db: Queryable, o: RestoredOrder): Promise<boolean> {
  const { rowCount } = await db.query(
    `insert into orders (tenant_id, id, workflow_id, status, status_seq, amount, currency, customer_id,
                         customer_email, items, payment_method, merchant_reference, charge_id, receipt_id,
                         last_error, reason, created_at)
     values ($1, $2, $3, $4, 1, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
     on conflict do nothing`,
    [
      o.tenantId,
      o.orderId,
      o.workflowId,
      o.status,
      o.amount,
      o.currency,
      o.customerId,
      o.customerEmail,
      JSON.stringify(o.items),
      o.paymentMethod,
      o.merchantReference,
      o.chargeId,
      o.receiptId,
      o.lastError,
      o.reason,
      o.createdAt,
    ],
  );
  return rowCount === 1;
}

/**
 * Brings an order row that survived the restore up to its workflow's status
 * (the restored row is as old as the backup; the workflow is not). Fills the
 * step references the history names and keeps the ones it doesn't. True when
 * the row changed.
 */
export async function syncOrderFromWorkflow(
  db: Queryable,
  o: Pick<
    RestoredOrder,
    'tenantId' | 'orderId' | 'status' | 'chargeId' | 'receiptId' | 'lastError' | 'reason'
  >,
): Promise<boolean> {
  const { rowCount } = await db.query(
    `update orders
        set status = $3, status_seq = status_seq + 1,
            charge_id = coalesce($4, charge_id), receipt_id = coalesce($5, receipt_id),
            last_error = coalesce($6, last_error), reason = coalesce($7, reason), updated_at = now()
      where tenant_id = $1 and id = $2
        and (status <> $3 or charge_id is distinct from coalesce($4, charge_id)
             or receipt_id is distinct from coalesce($5, receipt_id))`,
    [o.tenantId, o.orderId, o.status, o.chargeId, o.receiptId, o.lastError, o.reason],
  );
  return rowCount === 1;
}

export interface RestoredRefund {
  tenantId: string;
  refundId: string;
  orderId: string;
  workflowId: string;
  status: string;
  amount: number;
  currency: string;
  reason: string | null;
  providerRefundId: string | null;
  lastError: string | null;
  createdAt: Date;
}

/** Inserts the refund where it is missing (its order must exist: restore orders first). */
export async function insertRestoredRefund(db: Queryable, r: RestoredRefund): Promise<boolean> {
  const { rowCount } = await db.query(
    `insert into refunds (tenant_id, id, order_id, workflow_id, amount, currency, reason, status, status_seq,
                          provider_refund_id, last_error, created_at)
     values ($1, $2, $3, $4, $5, $6, $7, $8, 1, $9, $10, $11)
     on conflict do nothing`,
    [
      r.tenantId,
      r.refundId,
      r.orderId,
      r.workflowId,
      r.amount,
      r.currency,
      r.reason,
      r.status,
      r.providerRefundId,
      r.lastError,
      r.createdAt,
    ],
  );
  return rowCount === 1;
}

/** syncOrderFromWorkflow for a refund row. */
export async function syncRefundFromWorkflow(
  db: Queryable,
  r: Pick<RestoredRefund, 'tenantId' | 'refundId' | 'status' | 'providerRefundId' | 'lastError'>,
): Promise<boolean> {
  const { rowCount } = await db.query(
    `update refunds
        set status = $3, status_seq = status_seq + 1,
            provider_refund_id = coalesce($4, provider_refund_id),
            last_error = coalesce($5, last_error), updated_at = now()
      where tenant_id = $1 and id = $2
        and (status <> $3 or provider_refund_id is distinct from coalesce($4, provider_refund_id))`,
    [r.tenantId, r.refundId, r.status, r.providerRefundId, r.lastError],
  );
  return rowCount === 1;
}

/**
 * Sets each order's refunded total to what its refund rows hold (every refund
 * that is not failed), the rule the API's reservation and the failed
 * transition keep: after refunds were rebuilt, the restored total is stale.
 */
export async function recomputeRefundedAmounts(
  db: Queryable,
  orders: readonly { tenantId: string; orderId: string }[],
): Promise<number> {
  if (orders.length === 0) return 0;
  const { rowCount } = await db.query(
    `update orders o
        set refunded_amount = coalesce((select sum(r.amount) from refunds r
                                         where r.tenant_id = o.tenant_id and r.order_id = o.id
                                           and r.status <> 'failed'), 0),
            updated_at = now()
       from unnest($1::text[], $2::text[]) as t(tenant_id, id)
      where o.tenant_id = t.tenant_id and o.id = t.id`,
    [orders.map((o) => o.tenantId), orders.map((o) => o.orderId)],
  );
  return rowCount ?? 0;
}
