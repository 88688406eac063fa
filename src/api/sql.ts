/**
 * SQL of the HTTP API. One function per statement, client first so it can
 * join a caller's transaction; parameterised only; explicit `returning`.
 */
import type { Queryable } from '../db/index.ts';
import type { OrderItem, OrderStatus, OrderWorkflowInput } from '../orders/model.ts';
import type { TraceCarrier } from '../tracing/index.ts';

// --- api keys ---------------------------------------------------------------

export async function findTenantByKeyHash(db: Queryable, keyHash: string): Promise<string | null> {
  const { rows } = await db.query<{ tenant_id: string }>(
    `select tenant_id from api_keys where key_hash = $1 and revoked_at is null`,
    [keyHash],
  );
  return rows[0]?.tenant_id ?? null;
}

/** Seeding: adds the key unless its hash is already there (a revoked demo key stays revoked). */
export async function insertApiKeyIfAbsent(
  db: Queryable,
  k: { keyHash: string; tenantId: string; label: string },
): Promise<boolean> {
  const { rowCount } = await db.query(
    `insert into api_keys (key_hash, tenant_id, label) values ($1, $2, $3)
     on conflict (key_hash) do nothing returning key_hash`,
    [k.keyHash, k.tenantId, k.label],
  );
  return rowCount === 1;
}

/** Which of these key hashes would authenticate today (not revoked). */
export async function findActiveKeyHashes(db: Queryable, keyHashes: string[]): Promise<string[]> {
  const { rows } = await db.query<{ key_hash: string }>(
    `select key_hash from api_keys where key_hash = any($1::text[]) and revoked_at is null`,
    [keyHashes],
  );
  return rows.map((r) => r.key_hash);
}

export async function insertTenant(db: Queryable, t: { id: string; name: string }): Promise<boolean> {
  const { rowCount } = await db.query(
    `insert into tenants (id, name) values ($1, $2) on conflict (id) do nothing returning id`,
    [t.id, t.name],
  );
  return rowCount === 1;
}

export async function tenantExists(db: Queryable, id: string): Promise<boolean> {
  const { rowCount } = await db.query(`select 1 from tenants where id = $1`, [id]);
  return rowCount === 1;
}

export async function insertApiKey(
  db: Queryable,
  k: { keyHash: string; tenantId: string; label: string },
): Promise<void> {
  await db.query(`insert into api_keys (key_hash, tenant_id, label) values ($1, $2, $3) returning key_hash`, [
    k.keyHash,
    k.tenantId,
    k.label,
  ]);
}

// --- orders -----------------------------------------------------------------

export interface OrderRow {
  tenant_id: string;
  id: string;
  workflow_id: string;
  status: OrderStatus;
  amount: string; // bigint arrives as a string
  currency: string;
  customer_id: string;
  customer_email: string;
  items: OrderItem[];
  payment_method: string;
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

const ORDER_COLUMNS = `tenant_id, id, workflow_id, status, amount, currency, customer_id, customer_email,
  items, payment_method, charge_id, receipt_id, last_error, reason, created_at, updated_at,
  (extract(epoch from created_at) * 1000000)::bigint::text as created_us`;

/** The API only ever inserts orders in 'accepted'; the workflow's activities move them on. */
export async function insertAcceptedOrder(
  db: Queryable,
  o: {
    tenantId: string;
    orderId: string;
    workflowId: string;
    amount: number;
    currency: string;
    customerId: string;
    customerEmail: string;
    items: OrderItem[];
    paymentMethod: string;
  },
): Promise<OrderRow> {
  const { rows } = await db.query<OrderRow>(
    `insert into orders (tenant_id, id, workflow_id, status, amount, currency, customer_id, customer_email,
                         items, payment_method)
     values ($1, $2, $3, 'accepted', $4, $5, $6, $7, $8, $9)
     returning ${ORDER_COLUMNS}`,
    [
      o.tenantId,
      o.orderId,
      o.workflowId,
      o.amount,
      o.currency,
      o.customerId,
      o.customerEmail,
      JSON.stringify(o.items),
      o.paymentMethod,
    ],
  );
  return rows[0]!;
}

export async function getOrder(db: Queryable, tenantId: string, orderId: string): Promise<OrderRow | null> {
  const { rows } = await db.query<OrderRow>(
    `select ${ORDER_COLUMNS} from orders where tenant_id = $1 and id = $2`,
    [tenantId, orderId],
  );
  return rows[0] ?? null;
}

export async function getOrderStatus(
  db: Queryable,
  tenantId: string,
  orderId: string,
): Promise<OrderStatus | null> {
  const { rows } = await db.query<{ status: OrderStatus }>(
    `select status from orders where tenant_id = $1 and id = $2`,
    [tenantId, orderId],
  );
  return rows[0]?.status ?? null;
}

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

// --- workflow outbox --------------------------------------------------------

export interface OutboxRow {
  workflow_id: string;
  tenant_id: string;
  order_id: string;
  workflow_type: string;
  task_queue: string;
  input: OrderWorkflowInput;
  attempts: number;
  started_at: Date | null;
  /** The accepting request's W3C trace context (src/tracing); null when tracing was off. */
  trace_context: TraceCarrier | null;
}

export async function insertOutbox(
  db: Queryable,
  r: {
    workflowId: string;
    tenantId: string;
    orderId: string;
    workflowType: string;
    taskQueue: string;
    input: OrderWorkflowInput;
    traceContext?: TraceCarrier | null;
  },
): Promise<void> {
  await db.query(
    `insert into workflow_outbox (workflow_id, tenant_id, order_id, workflow_type, task_queue, input, trace_context)
     values ($1, $2, $3, $4, $5, $6, $7) returning workflow_id`,
    [
      r.workflowId,
      r.tenantId,
      r.orderId,
      r.workflowType,
      r.taskQueue,
      JSON.stringify(r.input),
      r.traceContext ? JSON.stringify(r.traceContext) : null,
    ],
  );
}

const OUTBOX_COLUMNS = `workflow_id, tenant_id, order_id, workflow_type, task_queue, input, attempts, started_at,
  trace_context`;

/**
 * Claims up to `limit` due, unstarted rows of every task queue, in one
 * autocommitted statement: their next_attempt_at moves `leaseMs` ahead, so no
 * other relay takes them while this one starts their workflows, and no
 * transaction (or row lock) stays open across the Temporal calls. If this
 * relay dies before recording the outcome, the rows are due again once the
 * lease ends, and a repeated start is harmless (deterministic workflow ID).
 * SKIP LOCKED: concurrent claimers never wait on each other's rows; the
 * locked rows are re-checked against the WHERE clause, so a row is handed
 * to one claimer only.
 *
 * No task_queue filter: a row is started on the queue recorded with it, by
 * whichever API relays. Filtering by the relay's own queue left the rows of
 * any other queue (an API whose TEMPORAL_TASK_QUEUE changed, or that died
 * for good) unstarted forever.
 */
export async function claimDueOutbox(db: Queryable, limit: number, leaseMs: number): Promise<OutboxRow[]> {
  const { rows } = await db.query<OutboxRow>(
    `with due as (
       select workflow_id from workflow_outbox
        where started_at is null and next_attempt_at <= now()
        order by next_attempt_at
        limit $1
        for update skip locked)
     update workflow_outbox o
        set next_attempt_at = now() + $2::integer * interval '1 millisecond'
       from due
      where o.workflow_id = due.workflow_id
     returning o.workflow_id, o.tenant_id, o.order_id, o.workflow_type, o.task_queue, o.input, o.attempts,
               o.started_at, o.trace_context`,
    [limit, leaseMs],
  );
  return rows;
}

/**
 * The same claim for one row, used to start a workflow right after its order
 * commits. A concurrent claimer of the same row waits for this autocommitted
 * update, then re-checks `next_attempt_at <= now()` and finds it claimed.
 */
export async function claimOutboxRow(
  db: Queryable,
  workflowId: string,
  leaseMs: number,
): Promise<OutboxRow | null> {
  const { rows } = await db.query<OutboxRow>(
    `update workflow_outbox
        set next_attempt_at = now() + $2::integer * interval '1 millisecond'
      where workflow_id = $1 and started_at is null and next_attempt_at <= now()
      returning ${OUTBOX_COLUMNS}`,
    [workflowId, leaseMs],
  );
  return rows[0] ?? null;
}

/**
 * `startedAt`: when the workflow was started, if known from Temporal (a row
 * found already started); null means "just now", the database clock right
 * after this workflow's start call returned.
 */
export async function markOutboxStarted(
  db: Queryable,
  workflowId: string,
  startedAt: Date | null = null,
): Promise<void> {
  await db.query(
    `update workflow_outbox
        set started_at = coalesce($2::timestamptz, now()), attempts = attempts + 1, last_error = null,
            next_attempt_at = now()
      where workflow_id = $1 and started_at is null returning workflow_id`,
    [workflowId, startedAt],
  );
}

export async function markOutboxFailed(
  db: Queryable,
  workflowId: string,
  error: string,
  retryInMs: number,
): Promise<void> {
  await db.query(
    `update workflow_outbox
        set attempts = attempts + 1, last_error = $2,
            next_attempt_at = now() + $3::integer * interval '1 millisecond'
      where workflow_id = $1 and started_at is null returning workflow_id`,
    [workflowId, error.slice(0, 500), retryInMs],
  );
}

export async function getOutbox(db: Queryable, workflowId: string): Promise<OutboxRow | null> {
  const { rows } = await db.query<OutboxRow>(
    `select ${OUTBOX_COLUMNS} from workflow_outbox where workflow_id = $1`,
    [workflowId],
  );
  return rows[0] ?? null;
}

// --- webhook events ---------------------------------------------------------

/**
 * Records that `consumer` is processing this provider event. Returns false if
 * it already was: the primary key is the dedupe lock, and a concurrent
 * duplicate blocks here until the first transaction commits (then sees the
 * row) or rolls back (then records it itself).
 */
/** Corrects the recorded outcome of an event this transaction just recorded (e.g. the workflow had closed). */
export async function setWebhookEventOutcome(
  db: Queryable,
  e: { provider: string; eventId: string; consumer: string; outcome: string },
): Promise<void> {
  await db.query(
    `update webhook_events set outcome = $4 where provider = $1 and event_id = $2 and consumer = $3`,
    [e.provider, e.eventId, e.consumer, e.outcome],
  );
}

export async function recordWebhookEvent(
  db: Queryable,
  e: {
    provider: string;
    eventId: string;
    consumer: string;
    eventType: string;
    tenantId: string | null;
    orderId: string | null;
    outcome: string;
  },
): Promise<boolean> {
  const { rowCount } = await db.query(
    `insert into webhook_events (provider, event_id, consumer, event_type, tenant_id, order_id, outcome)
     values ($1, $2, $3, $4, $5, $6, $7)
     on conflict (provider, event_id, consumer) do nothing
     returning event_id`,
    [e.provider, e.eventId, e.consumer, e.eventType, e.tenantId, e.orderId, e.outcome],
  );
  return rowCount === 1;
}

export async function ping(db: Queryable): Promise<void> {
  await db.query('select 1');
}
