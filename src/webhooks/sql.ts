/**
 * SQL for the `webhook_events` table, and the only module that queries it:
 * one row per (provider, event id, consumer), so each consumer processes a
 * provider event once and one consumer's marker never suppresses another's.
 */
import type { Queryable } from '../db/index.ts';

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

/**
 * Records that `consumer` is processing this provider event. Returns false if
 * it already was: the primary key is the dedupe lock, and a concurrent
 * duplicate blocks here until the first transaction commits (then sees the
 * row) or rolls back (then records it itself).
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
