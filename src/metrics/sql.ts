/**
 * The one statement behind the scrape-time gauges. Each subquery is served by
 * an index (operations_unresolved_idx, orders_status), so a scrape stays cheap
 * however many completed records and orders exist.
 */
import type { Queryable } from '../db/index.ts';

export interface BacklogSnapshot {
  oldestInProgressSeconds: number | null;
  oldestUnknownSeconds: number | null;
  inProgress: number;
  unknown: number;
  ordersPaymentUnknown: number;
  ordersNeedsAttention: number;
}

interface BacklogRow {
  oldest_in_progress: number | null;
  oldest_unknown: number | null;
  in_progress: number;
  unknown: number;
  orders_payment_unknown: number;
  orders_needs_attention: number;
}

export async function selectBacklog(db: Queryable): Promise<BacklogSnapshot> {
  const { rows } = await db.query<BacklogRow>(
    `select
       (select extract(epoch from now() - min(created_at))::float8 from operations where state = 'in_progress')
         as oldest_in_progress,
       (select extract(epoch from now() - min(created_at))::float8 from operations where state = 'unknown')
         as oldest_unknown,
       (select count(*)::int from operations where state = 'in_progress') as in_progress,
       (select count(*)::int from operations where state = 'unknown') as unknown,
       (select count(*)::int from orders where status = 'payment_unknown') as orders_payment_unknown,
       (select count(*)::int from orders where status = 'needs_attention') as orders_needs_attention`,
  );
  const row = rows[0];
  if (!row) throw new Error('backlog query returned no row');
  return {
    oldestInProgressSeconds: row.oldest_in_progress,
    oldestUnknownSeconds: row.oldest_unknown,
    inProgress: row.in_progress,
    unknown: row.unknown,
    ordersPaymentUnknown: row.orders_payment_unknown,
    ordersNeedsAttention: row.orders_needs_attention,
  };
}

/**
 * Bounds the scrape's statement on the server (SET LOCAL, so it ends with the
 * transaction): a slow database makes a scrape report "unavailable" instead
 * of hanging Prometheus and piling up connections.
 */
export async function setLocalStatementTimeout(db: Queryable, ms: number): Promise<void> {
  await db.query(`select set_config('statement_timeout', $1, true)`, [String(Math.max(1, Math.floor(ms)))]);
}

export interface OutboxBacklog {
  /** Outbox rows whose workflow has not been started yet (any task queue). */
  unstarted: number;
  /** Seconds since the oldest unstarted row committed; null when there is none. */
  oldestUnstartedSeconds: number | null;
}

/** Served by the partial index workflow_outbox_due (unstarted rows only). */
export async function selectOutboxBacklog(db: Queryable): Promise<OutboxBacklog> {
  const { rows } = await db.query<{ unstarted: number; oldest: number | null }>(
    `select count(*)::int as unstarted, extract(epoch from now() - min(created_at))::float8 as oldest
       from workflow_outbox where started_at is null`,
  );
  return { unstarted: rows[0]?.unstarted ?? 0, oldestUnstartedSeconds: rows[0]?.oldest ?? null };
}

/**
 * Of these parked workflows (Temporal visibility says they wait for a human),
 * how many have no order row in needs_attention: their status write failed,
 * so the orders table alone would not count them. Served by the unique index
 * on orders.workflow_id.
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
