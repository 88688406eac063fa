/**
 * SQL for webhook_endpoints, merchant_events, webhook_deliveries and webhook_delivery_attempts
 * (migrations/0027), and the only module that queries them.
 */
import type { Queryable } from '../db/index.ts';
import { DELIVERY_WORKFLOW_TYPE, type MerchantEventType } from './contract.ts';

/**
 * The CTEs a terminal transition appends to its statement (src/orders/sql.ts, src/refunds/sql.ts):
 * the event, one delivery per subscribed endpoint, and each delivery workflow's start intent, all
 * committed with the status change. `updated` is the transition's `returning *`; nothing is written
 * when it applied no terminal status.
 * - The event ID hashes the status step's key: a retried, reset or recovered step can only bring
 *   the same ID again (and the ledger runs the step once anyway).
 * - The relay (src/api/outbox.ts) starts the delivery workflows on the transition's task queue.
 */
export function eventCtes(p: {
  kind: 'order' | 'refund';
  terminal: readonly string[];
  tenant: string;
  stepKey: string;
  taskQueue: string;
}): string {
  const orderId = p.kind === 'order' ? 'u.id' : 'u.order_id';
  const terminal = p.terminal.map((s) => `'${s}'`).join(', ');
  return `merchant_event as (
             insert into merchant_events (id, tenant_id, type, object_id, order_id, version, object)
             select 'evt_' || left(encode(sha256(convert_to(${p.stepKey}, 'UTF8')), 'hex'), 32), ${p.tenant},
                    '${p.kind}.' || u.status, u.id, ${orderId}, u.status_seq, to_jsonb(u)
               from updated u
              where u.status in (${terminal})
             on conflict (id) do nothing
             returning id, tenant_id, order_id, type),
           merchant_delivery as (
             insert into webhook_deliveries (endpoint_id, event_id, tenant_id, workflow_id)
             select e.id, ev.id, ev.tenant_id, 'delivery/' || e.id || '/' || ev.id
               from merchant_event ev
               join webhook_endpoints e
                 on e.tenant_id = ev.tenant_id and e.deleted_at is null and ev.type = any (e.events)
             returning endpoint_id, event_id, tenant_id, workflow_id),
           merchant_delivery_start as (
             insert into workflow_outbox (workflow_id, tenant_id, order_id, workflow_type, task_queue, input)
             select d.workflow_id, d.tenant_id, ev.order_id, '${DELIVERY_WORKFLOW_TYPE}', ${p.taskQueue},
                    jsonb_build_object('tenantId', d.tenant_id, 'endpointId', d.endpoint_id, 'eventId', d.event_id)
               from merchant_delivery d join merchant_event ev on ev.id = d.event_id)`;
}

/**
 * Records the event of a terminal status that `ops recover-after-restore` wrote to a restored row
 * (src/restore/recover.ts): the restore lost the one its transition recorded. Same CTEs, same step
 * key, so the same event ID; a no-op (false) if the event is there already or the status is not
 * terminal.
 */
export async function recordRestoredEvent(
  db: Queryable,
  p: {
    kind: 'order' | 'refund';
    terminal: readonly string[];
    tenantId: string;
    id: string;
    stepKey: string;
    taskQueue: string;
  },
): Promise<boolean> {
  const table = p.kind === 'order' ? 'orders' : 'refunds';
  const { rows } = await db.query(
    `with updated as (select * from ${table} where tenant_id = $1 and id = $2),
           ${eventCtes({ kind: p.kind, terminal: p.terminal, tenant: '$1', stepKey: '$3', taskQueue: '$4' })}
     select id from merchant_event`,
    [p.tenantId, p.id, p.stepKey, p.taskQueue],
  );
  return rows.length > 0;
}

// --- endpoints ----------------------------------------------------------------

export interface EndpointRow {
  tenant_id: string;
  id: string;
  url: string;
  events: MerchantEventType[];
  /** Newest first. */
  secrets: string[];
  previous_expires_at: Date | null;
  created_at: Date;
  deleted_at: Date | null;
}

const ENDPOINT_COLUMNS = 'tenant_id, id, url, events, secrets, previous_expires_at, created_at, deleted_at';

export async function insertEndpoint(
  db: Queryable,
  e: { tenantId: string; id: string; url: string; events: readonly string[]; secret: string },
): Promise<EndpointRow> {
  const { rows } = await db.query<EndpointRow>(
    `insert into webhook_endpoints (tenant_id, id, url, events, secrets)
     values ($1, $2, $3, $4, array[$5]) returning ${ENDPOINT_COLUMNS}`,
    [e.tenantId, e.id, e.url, e.events, e.secret],
  );
  return rows[0]!;
}

/** A tenant's live endpoints, oldest first. */
export async function listEndpoints(db: Queryable, tenantId: string): Promise<EndpointRow[]> {
  const { rows } = await db.query<EndpointRow>(
    `select ${ENDPOINT_COLUMNS} from webhook_endpoints
      where tenant_id = $1 and deleted_at is null order by created_at, id`,
    [tenantId],
  );
  return rows;
}

/** Every tenant's live endpoints (the operator's view), oldest first. */
export async function listAllEndpoints(db: Queryable, limit: number): Promise<EndpointRow[]> {
  const { rows } = await db.query<EndpointRow>(
    `select ${ENDPOINT_COLUMNS} from webhook_endpoints where deleted_at is null order by created_at, id limit $1`,
    [limit],
  );
  return rows;
}

/** Soft delete: deliveries already planned see it deleted and stop. False when there was none live. */
export async function deleteEndpoint(db: Queryable, tenantId: string, id: string): Promise<boolean> {
  const { rowCount } = await db.query(
    `update webhook_endpoints set deleted_at = now() where tenant_id = $1 and id = $2 and deleted_at is null`,
    [tenantId, id],
  );
  return (rowCount ?? 0) > 0;
}

/** The new secret first; the current one stays valid for `overlapMs` (0: not at all). */
export async function rotateSecret(
  db: Queryable,
  r: { tenantId: string; id: string; secret: string; overlapMs: number },
): Promise<EndpointRow | null> {
  const { rows } = await db.query<EndpointRow>(
    `update webhook_endpoints
        set secrets = case when $4::integer > 0 then array[$3, secrets[1]] else array[$3] end,
            previous_expires_at = case when $4::integer > 0
                                       then now() + $4::integer * interval '1 millisecond' end
      where tenant_id = $1 and id = $2 and deleted_at is null
      returning ${ENDPOINT_COLUMNS}`,
    [r.tenantId, r.id, r.secret, Math.round(r.overlapMs)],
  );
  return rows[0] ?? null;
}

/** The secrets to sign with now: the previous one only while its overlap lasts. */
export function signingSecrets(e: EndpointRow, now = new Date()): string[] {
  const live = e.previous_expires_at !== null && e.previous_expires_at > now;
  return live ? e.secrets : e.secrets.slice(0, 1);
}

// --- events and deliveries -------------------------------------------------------

export interface EventRow {
  id: string;
  tenant_id: string;
  type: MerchantEventType;
  object_id: string;
  order_id: string;
  version: number;
  /** The row as its transition left it (`to_jsonb`). */
  object: Record<string, unknown>;
  created_at: Date;
}

const EVENT_COLUMNS = 'id, tenant_id, type, object_id, order_id, version, object, created_at';

/** `'col', alias.col, ...` for jsonb_build_object. */
const jsonPairs = (columns: string, alias: string) =>
  columns
    .split(', ')
    .map((c) => `'${c}', ${alias}.${c}`)
    .join(', ');

/** What one delivery attempt needs, in one read: the delivery, its endpoint (deleted or not) and its event. */
export interface DeliveryContext {
  status: DeliveryStatus;
  /** When this delivery's retry window began: its redelivery, else its creation. */
  window_start: Date;
  endpoint: EndpointRow;
  event: EventRow;
}

export async function deliveryContext(
  db: Queryable,
  r: { tenantId: string; endpointId: string; eventId: string },
): Promise<DeliveryContext | null> {
  const { rows } = await db.query<DeliveryContext>(
    `select d.status, coalesce(d.redelivered_at, d.created_at) as window_start,
            jsonb_build_object(${jsonPairs(ENDPOINT_COLUMNS, 'e')}) as endpoint,
            jsonb_build_object(${jsonPairs(EVENT_COLUMNS, 'ev')}) as event
       from ${DELIVERY_FROM}
      where d.endpoint_id = $2 and d.event_id = $3 and d.tenant_id = $1`,
    [r.tenantId, r.endpointId, r.eventId],
  );
  const row = rows[0];
  if (!row) return null;
  // jsonb carries timestamps as strings.
  const e = row.endpoint as unknown as Record<string, string | null>;
  row.endpoint.previous_expires_at = e.previous_expires_at ? new Date(e.previous_expires_at) : null;
  row.endpoint.created_at = new Date(e.created_at!);
  row.endpoint.deleted_at = e.deleted_at ? new Date(e.deleted_at) : null;
  row.event.created_at = new Date(row.event.created_at as unknown as string);
  return row;
}

export type DeliveryStatus = 'pending' | 'succeeded' | 'failed';

export interface DeliveryRow {
  endpoint_id: string;
  event_id: string;
  tenant_id: string;
  workflow_id: string;
  status: DeliveryStatus;
  attempts: number;
  last_status: number | null;
  last_error: string | null;
  redeliveries: number;
  redelivered_at: Date | null;
  created_at: Date;
  updated_at: Date;
  delivered_at: Date | null;
  event_type: MerchantEventType;
  url: string;
}

const DELIVERY_COLUMNS = `d.endpoint_id, d.event_id, d.tenant_id, d.workflow_id, d.status, d.attempts, d.last_status,
  d.last_error, d.redeliveries, d.redelivered_at, d.created_at, d.updated_at, d.delivered_at, ev.type as event_type, e.url`;
const DELIVERY_FROM = `webhook_deliveries d join merchant_events ev on ev.id = d.event_id
  join webhook_endpoints e on e.id = d.endpoint_id`;

export async function getDelivery(
  db: Queryable,
  endpointId: string,
  eventId: string,
): Promise<DeliveryRow | null> {
  const { rows } = await db.query<DeliveryRow>(
    `select ${DELIVERY_COLUMNS} from ${DELIVERY_FROM} where d.endpoint_id = $1 and d.event_id = $2`,
    [endpointId, eventId],
  );
  return rows[0] ?? null;
}

/** Newest first; `tenantId` null: every tenant's (operators). */
export async function listDeliveries(
  db: Queryable,
  q: { tenantId: string | null; status?: DeliveryStatus; endpointId?: string; limit: number },
): Promise<DeliveryRow[]> {
  const { rows } = await db.query<DeliveryRow>(
    `select ${DELIVERY_COLUMNS} from ${DELIVERY_FROM}
      where ($1::text is null or d.tenant_id = $1) and ($2::text is null or d.status = $2)
        and ($3::text is null or d.endpoint_id = $3)
      order by d.created_at desc, d.event_id limit $4`,
    [q.tenantId, q.status ?? null, q.endpointId ?? null, q.limit],
  );
  return rows;
}

export interface AttemptRecord {
  endpointId: string;
  eventId: string;
  startedAt: Date;
  latencyMs: number;
  statusCode: number | null;
  error: string | null;
  responseExcerpt: string | null;
}

/**
 * Records one HTTP attempt and counts it on its delivery, in one statement. Returns how many
 * attempts this retry window saw before this one (the backoff's exponent: refusals that never
 * sent, and attempts before a redelivery, don't count).
 */
export async function recordAttempt(db: Queryable, a: AttemptRecord): Promise<number> {
  const { rows } = await db.query<{ before: number }>(
    `with counted as (
       update webhook_deliveries d
          set attempts = attempts + 1, last_status = $6, last_error = $7, updated_at = now()
        where endpoint_id = $1 and event_id = $2
        returning attempts, coalesce(d.redelivered_at, d.created_at) as window_start),
     recorded as (
       insert into webhook_delivery_attempts
              (endpoint_id, event_id, attempt, started_at, latency_ms, status_code, error, response_excerpt)
       select $1, $2, attempts, $3, $4, $6, $7, $5 from counted)
     -- started_at comes from the worker's clock in milliseconds, window_start from now() in microseconds:
     -- an attempt in the window's first millisecond belongs to it.
     select count(a.*)::integer as before
       from counted c left join webhook_delivery_attempts a
         on a.endpoint_id = $1 and a.event_id = $2
        and a.started_at >= date_trunc('milliseconds', c.window_start)
      group by c.attempts`,
    [a.endpointId, a.eventId, a.startedAt, Math.round(a.latencyMs), a.responseExcerpt, a.statusCode, a.error],
  );
  return rows[0]?.before ?? 0;
}

export async function attemptsOf(
  db: Queryable,
  endpointId: string,
  eventId: string,
): Promise<
  {
    attempt: number;
    started_at: Date;
    latency_ms: number;
    status_code: number | null;
    error: string | null;
    response_excerpt: string | null;
  }[]
> {
  const { rows } = await db.query(
    `select attempt, started_at, latency_ms, status_code, error, response_excerpt
       from webhook_delivery_attempts where endpoint_id = $1 and event_id = $2 order by id`,
    [endpointId, eventId],
  );
  return rows;
}

/** Final states never move back: a late `succeeded` after an operator's `failed` still wins (it was sent). */
export async function settleDelivery(
  db: Queryable,
  endpointId: string,
  eventId: string,
  status: 'succeeded' | 'failed',
): Promise<void> {
  await db.query(
    `update webhook_deliveries
        set status = $3, updated_at = now(), delivered_at = case when $3 = 'succeeded' then now() end
      where endpoint_id = $1 and event_id = $2 and (status = 'pending' or $3 = 'succeeded')`,
    [endpointId, eventId, status],
  );
}

/**
 * An operator's redelivery: back to pending under the next workflow ID, with its start intent, in
 * one statement. Null when there is no such delivery or its endpoint is deleted.
 */
export async function planRedelivery(
  db: Queryable,
  r: { endpointId: string; eventId: string; taskQueue: string },
): Promise<{ workflowId: string } | null> {
  const { rows } = await db.query<{ workflow_id: string }>(
    `with bumped as (
       update webhook_deliveries d
          set redeliveries = d.redeliveries + 1, status = 'pending', updated_at = now(), redelivered_at = now(),
              workflow_id = 'delivery/' || d.endpoint_id || '/' || d.event_id || '/r' || (d.redeliveries + 1)
         from webhook_endpoints e
        where d.endpoint_id = $1 and d.event_id = $2 and e.id = d.endpoint_id and e.deleted_at is null
        returning d.workflow_id, d.tenant_id, d.endpoint_id, d.event_id),
     started as (
       insert into workflow_outbox (workflow_id, tenant_id, order_id, workflow_type, task_queue, input)
       select b.workflow_id, b.tenant_id, ev.order_id, '${DELIVERY_WORKFLOW_TYPE}', $3,
              jsonb_build_object('tenantId', b.tenant_id, 'endpointId', b.endpoint_id, 'eventId', b.event_id)
         from bumped b join merchant_events ev on ev.id = b.event_id)
     select workflow_id from bumped`,
    [r.endpointId, r.eventId, r.taskQueue],
  );
  return rows[0] ? { workflowId: rows[0].workflow_id } : null;
}

/**
 * After a restore (`ops recover-after-restore`): the start intent of every pending delivery is due
 * again, as if created now. A backup can hold an intent already started beside a delivery still
 * pending, whose run then delivered after T0: closed, or open past its send. No relay starts a
 * started intent again; this one starts a closed run's workflow again and ends an open run older
 * than its intent first (src/api/outbox.ts). The new run replays its step, or sends under the same
 * event ID, which the merchant dedupes. Returns how many intents it made due.
 */
export async function reopenPendingDeliveries(db: Queryable): Promise<number> {
  const { rowCount } = await db.query(
    `update workflow_outbox o
        set started_at = null, next_attempt_at = now(), created_at = now()
       from webhook_deliveries d
      where d.status = 'pending' and o.workflow_id = d.workflow_id and o.started_at is not null`,
  );
  return rowCount ?? 0;
}

export interface DeliveryBacklog {
  pending: number;
  oldestPendingSeconds: number;
  failedByEndpoint: { endpointId: string; failed: number }[];
}

export async function selectDeliveryBacklog(db: Queryable): Promise<DeliveryBacklog> {
  const { rows } = await db.query<{ pending: string; oldest: number | null }>(
    `select count(*)::text as pending, extract(epoch from now() - min(created_at))::float8 as oldest
       from webhook_deliveries where status = 'pending'`,
  );
  const failed = await db.query<{ endpoint_id: string; failed: string }>(
    `select endpoint_id, count(*)::text as failed from webhook_deliveries where status = 'failed'
      group by endpoint_id order by 2 desc limit 100`,
  );
  return {
    pending: Number(rows[0]?.pending ?? 0),
    oldestPendingSeconds: rows[0]?.oldest ?? 0,
    failedByEndpoint: failed.rows.map((r) => ({ endpointId: r.endpoint_id, failed: Number(r.failed) })),
  };
}
