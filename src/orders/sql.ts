/**
 * SQL for the `orders` table, and the only module that queries it (bar cross-table metrics and the
 * chaos harness). The API inserts an order in `accepted`; after that only orderTransitionStatement
 * moves it, through the state machine in model.ts.
 */
import type pg from 'pg';
import type { Queryable } from '../db/index.ts';
import { LocalStatement } from 'onceflow';
import { TERMINAL_STATUSES, TRANSITIONS, type OrderItem, type OrderStatus } from './model.ts';
import { eventCtes } from '../merchant-events/sql.ts';

/** One row of `orders`, as every select here returns it. */
export interface OrderRow {
  tenant_id: string;
  id: string;
  workflow_id: string;
  status: OrderStatus;
  /** Bumped by every applied transition. */
  status_seq: number;
  amount: string; // bigint arrives as a string
  currency: string;
  customer_id: string;
  customer_email: string;
  items: OrderItem[];
  payment_method: string;
  /** The order's natural key (optional), unique per tenant. */
  merchant_reference: string | null;
  /** Sum of the order's refunds that are not failed (reserved by src/refunds/sql.ts). */
  refunded_amount: string; // bigint
  charge_id: string | null;
  receipt_id: string | null;
  last_error: string | null;
  /** Machine-readable reason of a rejected / needs_attention order (ORDER_REASONS). */
  reason: string | null;
  created_at: Date;
  updated_at: Date;
  /** Microseconds since the epoch: the exact sort key for cursors (a JS Date keeps only ms). */
  created_us: string;
}

const ORDER_COLUMNS = `tenant_id, id, workflow_id, status, status_seq, amount, currency, customer_id,
  customer_email, items, payment_method, merchant_reference, refunded_amount, charge_id, receipt_id, last_error, reason, created_at, updated_at,
  (extract(epoch from created_at) * 1000000)::bigint::text as created_us`;

// --- writes -----------------------------------------------------------------

export interface NewOrder {
  tenantId: string;
  orderId: string;
  workflowId: string;
  amount: number;
  currency: string;
  customerId: string;
  customerEmail: string;
  items: OrderItem[];
  paymentMethod: string;
  /** The natural key; absent or null: none. */
  merchantReference?: string | null;
}

/**
 * Inserts an order in 'accepted'. A taken merchantReference answers `duplicateOf`: ON CONFLICT on
 * the unique index waits for a racing insert, so exactly one wins, and the next statement's
 * snapshot (READ COMMITTED) sees the winner.
 */
export async function insertAcceptedOrder(
  db: Queryable,
  o: NewOrder,
  /** insertAcceptedOrderStatement's result, when the caller already sent it (pipelined, in `db`'s transaction). */
  sent?: pg.QueryResult,
): Promise<{ row: OrderRow; duplicateOf?: undefined } | { row?: undefined; duplicateOf: string }> {
  const row = (sent ?? (await db.query<OrderRow>(insertAcceptedOrderStatement(o)))).rows[0] as
    OrderRow | undefined;
  if (row) return { row };
  const { rows } = await db.query<{ id: string }>(
    'select id from orders where tenant_id = $1 and merchant_reference = $2',
    [o.tenantId, o.merchantReference ?? null],
  );
  // The winner is committed (ON CONFLICT saw it), and orders are never deleted while referenced.
  return { duplicateOf: rows[0]!.id };
}

/** insertAcceptedOrder's statement; the result's one row is the OrderRow. */
export function insertAcceptedOrderStatement(o: NewOrder): pg.QueryConfig {
  return {
    text: `insert into orders (tenant_id, id, workflow_id, status, amount, currency, customer_id, customer_email,
                               items, payment_method, merchant_reference)
           values ($1, $2, $3, 'accepted', $4, $5, $6, $7, $8, $9, $10)
           on conflict (tenant_id, merchant_reference) where merchant_reference is not null do nothing
           returning ${ORDER_COLUMNS}`,
    values: [
      o.tenantId,
      o.orderId,
      o.workflowId,
      o.amount,
      o.currency,
      o.customerId,
      o.customerEmail,
      JSON.stringify(o.items),
      o.paymentMethod,
      o.merchantReference ?? null,
    ],
  };
}

/** Statuses from which `to` may be entered. */
function sourcesOf(to: OrderStatus): OrderStatus[] {
  return (Object.keys(TRANSITIONS) as OrderStatus[]).filter((from) => TRANSITIONS[from].includes(to));
}

export interface OrderTransition {
  tenantId: string;
  orderId: string;
  to: OrderStatus;
  chargeId: string | null;
  receiptId: string | null;
  lastError: string | null;
  /** Machine-readable code (ORDER_REASONS); stored for rejected and needs_attention, cleared otherwise. */
  reason?: string | null;
  /** The status step's key: a terminal status's merchant event ID derives from it. */
  stepKey: string;
  /** Where the event's delivery workflows start (the transition's own queue). */
  taskQueue: string;
}

/**
 * A status step's LocalStatement body (the contract is in onceflow's local-statement.ts):
 * - `target` locks the row (after `ledger_wait` bounds the wait) and reads its latest status;
 * - `updated` applies the transition, re-checked against that version;
 * - `ledger_result` stores `{ applied, status }`. No order: no row, nothing stored;
 * - a terminal status also records its merchant event and deliveries (src/merchant-events/sql.ts).
 */
const ORDER_TRANSITION_CTES = `target as materialized (
             select status from orders
              where tenant_id = $1 and id = $2 and exists (select from ledger_wait)
              for update),
           updated as (
             update orders
                set status = $3,
                    status_seq = status_seq + 1,
                    charge_id = coalesce($4, charge_id),
                    receipt_id = coalesce($5, receipt_id),
                    last_error = case when $3 in ('needs_attention', 'rejected') then coalesce($6, last_error)
                                      else last_error end,
                    -- An order that left needs_attention (re-driven) no longer has a reason to show.
                    reason = case when $3 in ('needs_attention', 'rejected') then $8 else null end,
                    updated_at = now()
              where tenant_id = $1 and id = $2 and status = any($7::text[]) and exists (select from target)
              returning *),
           ${eventCtes({ kind: 'order', terminal: TERMINAL_STATUSES, tenant: '$1', stepKey: '$9', taskQueue: '$10' })},
           ledger_result as (
             select json_build_object('applied', exists (select from updated),
                                      'status', coalesce((select status from updated), t.status)) as result
               from target t)`;

/**
 * Moves an order forward in the same statement as its step's record. The WHERE clause is the state
 * machine, and the row lock serialises competing transitions: a late call never moves it backwards.
 */
export function orderTransitionStatement(t: OrderTransition): LocalStatement {
  return new LocalStatement({
    name: 'orders_transition',
    ctes: ORDER_TRANSITION_CTES,
    values: [
      t.tenantId,
      t.orderId,
      t.to,
      t.chargeId,
      t.receiptId,
      t.lastError,
      sourcesOf(t.to),
      t.reason ?? null,
      t.stepKey,
      t.taskQueue,
    ],
  });
}

// --- one order --------------------------------------------------------------

export async function getOrder(db: Queryable, tenantId: string, orderId: string): Promise<OrderRow | null> {
  const { rows } = await db.query<OrderRow>(
    `select ${ORDER_COLUMNS} from orders where tenant_id = $1 and id = $2`,
    [tenantId, orderId],
  );
  return rows[0] ?? null;
}

export async function selectOrderByWorkflowId(db: Queryable, workflowId: string): Promise<OrderRow | null> {
  const { rows } = await db.query<OrderRow>(`select ${ORDER_COLUMNS} from orders where workflow_id = $1`, [
    workflowId,
  ]);
  return rows[0] ?? null;
}

/** An order row as a merchant event's snapshot (`to_jsonb` of the row) holds it, typed as a select returns it. */
export async function orderFromSnapshot(db: Queryable, snapshot: unknown): Promise<OrderRow> {
  const { rows } = await db.query<OrderRow>(
    `select ${ORDER_COLUMNS} from jsonb_populate_record(null::orders, $1::jsonb)`,
    [JSON.stringify(snapshot)],
  );
  return rows[0]!;
}

// --- lists ------------------------------------------------------------------

/** Newest first; `before` is the (created_us, id) of the last row of the previous page. */
export async function listOrders(
  db: Queryable,
  q: { tenantId: string; status?: OrderStatus; before?: { createdUs: string; id: string }; limit: number },
): Promise<OrderRow[]> {
  const { rows } = await db.query<OrderRow>(
    `select ${ORDER_COLUMNS} from orders
      where tenant_id = $1
        and ($2::text is null or status = $2)
        and ($3::bigint is null
             or (created_at, id) < ('epoch'::timestamptz + $3::bigint * interval '1 microsecond', $4::text))
      order by created_at desc, id desc
      limit $5`,
    [q.tenantId, q.status ?? null, q.before?.createdUs ?? null, q.before?.id ?? null, q.limit],
  );
  return rows;
}

/** Orders in one status across tenants (or one tenant), oldest update first (index orders_status). */
export async function selectOrdersInStatus(
  db: Queryable,
  status: OrderStatus,
  opts: { tenantId?: string; limit: number },
): Promise<OrderRow[]> {
  const { rows } = await db.query<OrderRow>(
    `select ${ORDER_COLUMNS} from orders
      where status = $1 and ($2::text is null or tenant_id = $2)
      order by updated_at, tenant_id, id
      limit $3`,
    [status, opts.tenantId ?? null, opts.limit],
  );
  return rows;
}

/** The orders of these workflows (unique index on workflow_id); missing rows are simply absent. */
export async function selectOrdersByWorkflowIds(
  db: Queryable,
  workflowIds: readonly string[],
): Promise<OrderRow[]> {
  if (workflowIds.length === 0) return [];
  const { rows } = await db.query<OrderRow>(
    `select ${ORDER_COLUMNS} from orders where workflow_id = any($1::text[])`,
    [workflowIds],
  );
  return rows;
}

/**
 * Parked workflows whose order row is not needs_attention (their status write failed): the table alone
 * misses them.
 */
export async function countUnrecordedParked(db: Queryable, workflowIds: readonly string[]): Promise<number> {
  if (workflowIds.length === 0) return 0;
  const { rows } = await db.query<{ n: number }>(
    `select count(*)::int as n
       from unnest($1::text[]) as parked(workflow_id)
      where not exists (select 1 from orders o
                         where o.workflow_id = parked.workflow_id and o.status = 'needs_attention')`,
    [workflowIds],
  );
  return rows[0]?.n ?? 0;
}

// --- recovery after a database restore: the one other writer -----------------

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
 * Brings a restored order row up to its workflow's status (the row is as old as the backup); true when it
 * changed.
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
