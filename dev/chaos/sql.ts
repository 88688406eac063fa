/**
 * The chaos harness's reads of product tables: what the system says after a
 * fault. They live here, not in the tables' SQL modules, because they serve
 * only the harness and must not ship; each is a plain read, and the tables'
 * writers are still only their own modules (src/orders/sql.ts,
 * src/outbox/sql.ts, src/refunds/sql.ts).
 */
import type { Queryable } from '../../src/db/index.ts';

interface OrderOutcomeRow {
  id: string;
  workflow_id: string;
  status: string;
  last_error: string | null;
  age: number;
  amount: number;
  refunded_amount: number;
}

/** Where these orders ended up, and how long after creation they last moved (seconds). */
export async function selectOrderOutcomes(
  db: Queryable,
  orderIds: readonly string[],
): Promise<OrderOutcomeRow[]> {
  const { rows } = await db.query<OrderOutcomeRow>(
    `select id, workflow_id, status, last_error,
            extract(epoch from updated_at - created_at)::float8 as age,
            amount::float8 as amount, refunded_amount::float8 as refunded_amount
       from orders where id = any($1::text[])`,
    [orderIds],
  );
  return rows;
}

/** IDs of the orders of every customer whose ID starts with this prefix (a chaos scenario's customers). */
export async function selectOrderIdsByCustomerPrefix(
  db: Queryable,
  customerPrefix: string,
): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>(
    `select id from orders where starts_with(customer_id, $1)`,
    [customerPrefix],
  );
  return rows.map((r) => r.id);
}

/** This scenario's orders' merchant deliveries still pending: "<order> <event type> -> <endpoint>". */
export async function selectPendingDeliveries(db: Queryable, orderIds: readonly string[]): Promise<string[]> {
  const { rows } = await db.query<{ d: string }>(
    `select e.order_id || ' ' || e.type || ' -> ' || d.endpoint_id as d
       from webhook_deliveries d join merchant_events e on e.id = d.event_id
      where e.order_id = any($1::text[]) and d.status = 'pending'`,
    [orderIds],
  );
  return rows.map((r) => r.d);
}

/** Which of these workflows have an outbox row (started or not). */
export async function selectOutboxWorkflowIds(
  db: Queryable,
  workflowIds: readonly string[],
): Promise<string[]> {
  const { rows } = await db.query<{ workflow_id: string }>(
    'select workflow_id from workflow_outbox where workflow_id = any($1::text[])',
    [workflowIds],
  );
  return rows.map((r) => r.workflow_id);
}

/** Where these refunds ended up. */
export async function selectRefundOutcomes(
  db: Queryable,
  refundIds: readonly string[],
): Promise<
  {
    tenant_id: string;
    id: string;
    order_id: string;
    workflow_id: string;
    amount: number;
    status: string;
    last_error: string | null;
  }[]
> {
  const { rows } = await db.query(
    `select tenant_id, id, order_id, workflow_id, amount::float8 as amount, status, last_error
       from refunds where id = any($1::text[])`,
    [refundIds],
  );
  return rows;
}

/** The restore gate's pending declaration (src/restore/gate.ts), if any: who declared it, and why. */
export async function selectPendingRestoreRecovery(db: Queryable): Promise<string | null> {
  const { rows } = await db.query<{ declared_by: string }>(
    'select declared_by from restore_recoveries where completed_at is null',
  );
  return rows[0]?.declared_by ?? null;
}
