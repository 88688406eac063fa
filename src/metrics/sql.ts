/**
 * The scrape-time gauges' statement: two tables in one snapshot, so it lives here. Each subquery is
 * served by an index, so a scrape stays cheap however much history exists.
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

/** A slow database makes a scrape report "unavailable" instead of piling up connections. */
export async function setLocalStatementTimeout(db: Queryable, ms: number): Promise<void> {
  await db.query(`select set_config('statement_timeout', $1, true)`, [String(Math.max(1, Math.floor(ms)))]);
}
