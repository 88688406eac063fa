/**
 * SQL for the `webhook_events` table, and the only module that queries it:
 * one row per (provider, event id, consumer), so each consumer processes a
 * provider event once and one consumer's marker never suppresses another's.
 */
import type { Queryable } from '../db/index.ts';

/**
 * Records an event with nothing to signal; false if already recorded (the primary key is the dedupe lock).
 */
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

/** Outcome of an event recorded before its signal, until the signal's result is recorded. */
const SIGNAL_PENDING = 'signal_pending';

export type SignalClaim =
  /** Recorded now, or found pending with no live attempt: this caller signals. */
  | { state: 'claimed' }
  /** Pending, and another delivery's attempt holds the lease until `leaseUntil`. */
  | { state: 'in_flight'; leaseUntil: Date }
  /** Processed already (a final outcome): a duplicate. */
  | { state: 'done'; outcome: string };

type EventRef = { provider: string; eventId: string; consumer: string };

/**
 * Records `signal_pending` and takes the signal lease, autocommitted: no row lock across the Temporal
 * call. A pending row with a free lease is claimed again, so a failed signal is never lost. The
 * lease only saves duplicate signals; the workflow ignores them anyway.
 */
export async function claimWebhookSignal(
  db: Queryable,
  e: EventRef & { eventType: string; tenantId: string | null; orderId: string | null },
  leaseMs: number,
): Promise<SignalClaim> {
  const { rows } = await db.query<{ claimed: boolean; outcome: string; signal_lease_until: Date | null }>(
    `with claimed as (
       insert into webhook_events as w
              (provider, event_id, consumer, event_type, tenant_id, order_id, outcome, signal_lease_until)
       values ($1, $2, $3, $4, $5, $6, '${SIGNAL_PENDING}', clock_timestamp() + $7 * interval '1 millisecond')
       on conflict (provider, event_id, consumer) do update
          set signal_lease_until = excluded.signal_lease_until
        where w.outcome = '${SIGNAL_PENDING}'
          and (w.signal_lease_until is null or w.signal_lease_until <= clock_timestamp())
       returning true as claimed, outcome, signal_lease_until
     )
     select claimed, outcome, signal_lease_until from claimed
     union all
     -- Not claimed: the row as it was (the statement's snapshot sees it unless it was inserted by a
     -- delivery that committed while this one ran; then no row, and the caller asks again).
     select false, outcome, signal_lease_until from webhook_events
      where provider = $1 and event_id = $2 and consumer = $3 and not exists (select from claimed)`,
    [e.provider, e.eventId, e.consumer, e.eventType, e.tenantId, e.orderId, leaseMs],
  );
  const row = rows[0];
  if (!row) return { state: 'in_flight', leaseUntil: new Date() };
  if (row.claimed) return { state: 'claimed' };
  if (row.outcome !== SIGNAL_PENDING) return { state: 'done', outcome: row.outcome };
  return { state: 'in_flight', leaseUntil: row.signal_lease_until ?? new Date() };
}

/** Records the final outcome of a pending event (`signalled`, `workflow_closed`), ending its lease. */
export async function finishWebhookSignal(db: Queryable, e: EventRef & { outcome: string }): Promise<void> {
  await db.query(
    `update webhook_events set outcome = $4, signal_lease_until = null
      where provider = $1 and event_id = $2 and consumer = $3 and outcome = '${SIGNAL_PENDING}'`,
    [e.provider, e.eventId, e.consumer, e.outcome],
  );
}

/** Releases a failed signal's lease, so the next delivery signals at once. */
export async function releaseWebhookSignal(db: Queryable, e: EventRef): Promise<void> {
  await db.query(
    `update webhook_events set signal_lease_until = null
      where provider = $1 and event_id = $2 and consumer = $3 and outcome = '${SIGNAL_PENDING}'`,
    [e.provider, e.eventId, e.consumer],
  );
}

/**
 * Retention: deletes up to `limit` markers older than `olderThanMs` (never shorter than the providers'
 * redelivery horizon). `signal_pending` rows are kept: they are the only trace of unfinished work.
 * SKIP LOCKED: a row a delivery holds waits for the next run.
 */
export async function deleteOldWebhookEvents(
  db: Queryable,
  olderThanMs: number,
  limit: number,
): Promise<number> {
  const { rowCount } = await db.query(
    `with victims as (
       select provider, event_id, consumer from webhook_events
        where received_at < now() - $1::float8 * interval '1 millisecond'
          and outcome <> '${SIGNAL_PENDING}'
        order by received_at
        limit $2
        for update skip locked)
     delete from webhook_events w using victims v
      where w.provider = v.provider and w.event_id = v.event_id and w.consumer = v.consumer
        and w.outcome <> '${SIGNAL_PENDING}'`,
    [olderThanMs, limit],
  );
  return rowCount ?? 0;
}
