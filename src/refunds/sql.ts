/**
 * SQL for `refunds` and the refund side of `orders.refunded_amount`; the only module that writes
 * either. "Never refund more than was charged" is one conditional UPDATE of the order row: the row
 * lock serialises competing refunds and the WHERE is re-checked against the latest total, so exactly
 * the refunds that fit succeed. No read-then-write.
 */
import type { Queryable } from '../db/index.ts';
import { LocalStatement } from 'onceflow';
import { REFUND_TERMINAL_STATUSES, REFUND_TRANSITIONS, type RefundStatus } from './contract.ts';
import { eventCtes } from '../merchant-events/sql.ts';

export interface RefundRow {
  tenant_id: string;
  id: string;
  order_id: string;
  workflow_id: string;
  amount: string; // bigint arrives as a string
  currency: string;
  reason: string | null;
  status: RefundStatus;
  status_seq: number;
  provider_refund_id: string | null;
  last_error: string | null;
  created_at: Date;
  updated_at: Date;
  created_us: string;
}

const REFUND_COLUMNS = `tenant_id, id, order_id, workflow_id, amount, currency, reason, status, status_seq,
  provider_refund_id, last_error, created_at, updated_at,
  (extract(epoch from created_at) * 1000000)::bigint::text as created_us`;

/** What reserveRefund found on the order when the refund did not fit (or there is no order). */
export type ReserveRefusal =
  | { refused: 'no_order' }
  | { refused: 'not_refundable'; status: string }
  | { refused: 'exceeds'; amount: number; refundedAmount: number };

export interface ReservedOrder {
  refused?: undefined;
  amount: number;
  refundedAmount: number;
  currency: string;
  chargeId: string;
  customerEmail: string;
}

/**
 * Reserves `amount` on a completed order if it fits, in one statement; when refused, the order is read only
 * to say why.
 */
export async function reserveRefund(
  db: Queryable,
  r: { tenantId: string; orderId: string; amount: number },
): Promise<ReservedOrder | ReserveRefusal> {
  const { rows } = await db.query<{
    amount: string;
    refunded_amount: string;
    currency: string;
    charge_id: string;
    customer_email: string;
  }>(
    `update orders
        set refunded_amount = refunded_amount + $3
      where tenant_id = $1 and id = $2 and status = 'completed' and charge_id is not null
        and refunded_amount + $3 <= amount
      returning amount, refunded_amount, currency, charge_id, customer_email`,
    [r.tenantId, r.orderId, r.amount],
  );
  const row = rows[0];
  if (row) {
    return {
      amount: Number(row.amount),
      refundedAmount: Number(row.refunded_amount),
      currency: row.currency,
      chargeId: row.charge_id,
      customerEmail: row.customer_email,
    };
  }
  const { rows: found } = await db.query<{ status: string; amount: string; refunded_amount: string }>(
    'select status, amount, refunded_amount from orders where tenant_id = $1 and id = $2',
    [r.tenantId, r.orderId],
  );
  const order = found[0];
  if (!order) return { refused: 'no_order' };
  if (order.status !== 'completed') return { refused: 'not_refundable', status: order.status };
  return { refused: 'exceeds', amount: Number(order.amount), refundedAmount: Number(order.refunded_amount) };
}

export interface NewRefund {
  tenantId: string;
  refundId: string;
  orderId: string;
  workflowId: string;
  amount: number;
  currency: string;
  reason: string | null;
}

/** The API inserts a refund in `pending`, in the transaction that reserved its amount. */
export async function insertPendingRefund(db: Queryable, r: NewRefund): Promise<RefundRow> {
  const { rows } = await db.query<RefundRow>(
    `insert into refunds (tenant_id, id, order_id, workflow_id, amount, currency, reason, status)
     values ($1, $2, $3, $4, $5, $6, $7, 'pending')
     returning ${REFUND_COLUMNS}`,
    [r.tenantId, r.refundId, r.orderId, r.workflowId, r.amount, r.currency, r.reason],
  );
  return rows[0]!;
}

export async function getRefund(
  db: Queryable,
  tenantId: string,
  orderId: string,
  refundId: string,
): Promise<RefundRow | null> {
  const { rows } = await db.query<RefundRow>(
    `select ${REFUND_COLUMNS} from refunds where tenant_id = $1 and order_id = $2 and id = $3`,
    [tenantId, orderId, refundId],
  );
  return rows[0] ?? null;
}

/** An order's refunds, newest first (bounded: an order has a few refunds, capped by its charge). */
export async function listRefunds(
  db: Queryable,
  tenantId: string,
  orderId: string,
  limit: number,
): Promise<RefundRow[]> {
  const { rows } = await db.query<RefundRow>(
    `select ${REFUND_COLUMNS} from refunds where tenant_id = $1 and order_id = $2
      order by created_at desc, id desc limit $3`,
    [tenantId, orderId, limit],
  );
  return rows;
}

/**
 * Refunds waiting on an outcome or a human (refund_unknown, needs_attention)
 * across tenants (or one tenant), oldest update first (index refunds_status).
 */
export async function selectRefundsNeedingAttention(
  db: Queryable,
  opts: { tenantId?: string; limit: number },
): Promise<RefundRow[]> {
  const { rows } = await db.query<RefundRow>(
    `select ${REFUND_COLUMNS} from refunds
      where status in ('refund_unknown', 'needs_attention') and ($1::text is null or tenant_id = $1)
      order by updated_at, tenant_id, id
      limit $2`,
    [opts.tenantId ?? null, opts.limit],
  );
  return rows;
}

/** Refunds waiting, by status (metrics): only these stay few, so a scrape never scans a growing table. */
export async function countOpenRefunds(
  db: Queryable,
): Promise<{ pending: number; refund_unknown: number; needs_attention: number }> {
  const { rows } = await db.query<{ status: RefundStatus; n: number }>(
    `select status, count(*)::int as n from refunds
      where status in ('pending', 'refund_unknown', 'needs_attention') group by status`,
  );
  const counts = { pending: 0, refund_unknown: 0, needs_attention: 0 };
  for (const r of rows) if (r.status in counts) counts[r.status as keyof typeof counts] = r.n;
  return counts;
}

/** Statuses from which `to` may be entered; `pending` may also be re-asserted (the workflow's first step). */
function sourcesOf(to: RefundStatus): RefundStatus[] {
  const from = (Object.keys(REFUND_TRANSITIONS) as RefundStatus[]).filter((s) =>
    REFUND_TRANSITIONS[s].includes(to),
  );
  return to === 'pending' ? ['pending', ...from] : from;
}

export interface RefundTransition {
  tenantId: string;
  refundId: string;
  to: RefundStatus;
  providerRefundId: string | null;
  lastError: string | null;
  /** The status step's key: a terminal status's merchant event ID derives from it. */
  stepKey: string;
  /** Where the event's delivery workflows start (the transition's own queue). */
  taskQueue: string;
}

/**
 * A refund status step's LocalStatement body, as the order's: `target` locks the row, `updated`
 * applies an allowed transition, and `released` returns the amount only when this statement entered
 * `failed` (nothing leaves it), so the reservation is released exactly once.
 */
const REFUND_TRANSITION_CTES = `target as materialized (
             select status from refunds
              where tenant_id = $1 and id = $2 and exists (select from ledger_wait)
              for update),
           updated as (
             update refunds
                set status = $3,
                    status_seq = status_seq + 1,
                    provider_refund_id = coalesce($4, provider_refund_id),
                    last_error = case when $3 in ('needs_attention', 'failed', 'refund_unknown')
                                      then coalesce($5, last_error) else last_error end,
                    updated_at = now()
              where tenant_id = $1 and id = $2 and status = any($6::text[]) and exists (select from target)
              returning *),
           ${eventCtes({ kind: 'refund', terminal: REFUND_TERMINAL_STATUSES, tenant: '$1', stepKey: '$7', taskQueue: '$8' })},
           released as (
             update orders o
                set refunded_amount = o.refunded_amount - u.amount
               from updated u
              where u.status = 'failed' and o.tenant_id = $1 and o.id = u.order_id
              returning o.id),
           ledger_result as (
             select json_build_object('applied', exists (select from updated),
                                      'status', coalesce((select status from updated), t.status),
                                      'released', exists (select from released)) as result
               from target t)`;

export function refundTransitionStatement(t: RefundTransition): LocalStatement {
  return new LocalStatement({
    name: 'refunds_transition',
    ctes: REFUND_TRANSITION_CTES,
    values: [
      t.tenantId,
      t.refundId,
      t.to,
      t.providerRefundId,
      t.lastError,
      sourcesOf(t.to),
      t.stepKey,
      t.taskQueue,
    ],
  });
}

/** A refund row as a merchant event's snapshot holds it, typed as a select returns it. */
export async function refundFromSnapshot(db: Queryable, snapshot: unknown): Promise<RefundRow> {
  const { rows } = await db.query<RefundRow>(
    `select ${REFUND_COLUMNS} from jsonb_populate_record(null::refunds, $1::jsonb)`,
    [JSON.stringify(snapshot)],
  );
  return rows[0]!;
}

/** One refund by its ID alone (the operator names a refund by tenant and ID; the primary key). */
export async function getRefundById(
  db: Queryable,
  tenantId: string,
  refundId: string,
): Promise<RefundRow | null> {
  const { rows } = await db.query<RefundRow>(
    `select ${REFUND_COLUMNS} from refunds where tenant_id = $1 and id = $2`,
    [tenantId, refundId],
  );
  return rows[0] ?? null;
}

// --- recovery after a database restore (src/restore/recover.ts) --------------

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
 * Recomputes each order's refunded total from its non-failed refunds: after a restore the stored total is
 * stale.
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
