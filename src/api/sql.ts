/**
 * SQL of the HTTP API. One function per statement, client first so it can
 * join a caller's transaction; parameterised only; explicit `returning`.
 */
import type { Queryable } from '../db/index.ts';
import type { OrderItem, OrderStatus, OrderWorkflowInput } from '../orders/model.ts';

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
  created_at: Date;
  updated_at: Date;
  /** Microseconds since the epoch: the exact sort key for cursors (a JS Date keeps only ms). */
  created_us: string;
}

const ORDER_COLUMNS = `tenant_id, id, workflow_id, status, amount, currency, customer_id, customer_email,
  items, payment_method, charge_id, receipt_id, last_error, created_at, updated_at,
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
  },
): Promise<void> {
  await db.query(
    `insert into workflow_outbox (workflow_id, tenant_id, order_id, workflow_type, task_queue, input)
     values ($1, $2, $3, $4, $5, $6) returning workflow_id`,
    [r.workflowId, r.tenantId, r.orderId, r.workflowType, r.taskQueue, JSON.stringify(r.input)],
  );
}

/**
 * Claims up to `limit` due, unstarted rows for the rest of the caller's
 * transaction. SKIP LOCKED: two relays (or the relay and a post-commit start)
 * never work on the same row at once, and neither waits for the other.
 */
export async function claimDueOutbox(db: Queryable, taskQueue: string, limit: number): Promise<OutboxRow[]> {
  const { rows } = await db.query<OutboxRow>(
    `select workflow_id, tenant_id, order_id, workflow_type, task_queue, input, attempts, started_at
       from workflow_outbox
      where task_queue = $1 and started_at is null and next_attempt_at <= now()
      order by next_attempt_at
      limit $2
      for update skip locked`,
    [taskQueue, limit],
  );
  return rows;
}

/** The same claim for one row, used to start a workflow right after its order commits. */
export async function claimOutboxRow(db: Queryable, workflowId: string): Promise<OutboxRow | null> {
  const { rows } = await db.query<OutboxRow>(
    `select workflow_id, tenant_id, order_id, workflow_type, task_queue, input, attempts, started_at
       from workflow_outbox
      where workflow_id = $1 and started_at is null
      for update skip locked`,
    [workflowId],
  );
  return rows[0] ?? null;
}

export async function markOutboxStarted(db: Queryable, workflowId: string): Promise<void> {
  await db.query(
    `update workflow_outbox set started_at = now(), attempts = attempts + 1, last_error = null
      where workflow_id = $1 and started_at is null returning workflow_id`,
    [workflowId],
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
    `select workflow_id, tenant_id, order_id, workflow_type, task_queue, input, attempts, started_at
       from workflow_outbox where workflow_id = $1`,
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
