/**
 * The retention workflow's input (workflow-safe). Later fields are optional: a Schedule created by
 * an earlier worker keeps its stored input, and its runs get the defaults.
 */

const DAY_MS = 24 * 60 * 60 * 1000;

/**
 * How long a provider may redeliver an event (Stripe: 3 days): no marker or started outbox row is deleted
 * younger.
 */
export const PROVIDER_REDELIVERY_MS = 3 * DAY_MS;

/** Default webhook_events window: the redelivery horizon with days to spare. */
export const DEFAULT_WEBHOOK_WINDOW_MS = 7 * DAY_MS;

/** Default window for started workflow_outbox rows: as long as the ledger's default. */
export const DEFAULT_OUTBOX_WINDOW_MS = 7 * DAY_MS;

export interface RetentionInput {
  /** Succeeded and failed operations completed longer ago than this are deleted. */
  windowMs: number;
  /** Rows per DELETE statement. */
  batchSize: number;
  /** DELETE statements per run and per table at most; the rest waits for the next run. */
  maxBatches: number;
  /**
   * webhook_events rows older than this are deleted (never `signal_pending`); never below
   * PROVIDER_REDELIVERY_MS.
   */
  webhookWindowMs?: number;
  /** Started workflow_outbox rows older than this are deleted; never below PROVIDER_REDELIVERY_MS. */
  outboxWindowMs?: number;
}

/** Refuses a webhook or outbox window shorter than the provider's redelivery horizon. */
export function assertRedeliveryWindow(name: string, windowMs: number): void {
  if (!Number.isFinite(windowMs) || windowMs < PROVIDER_REDELIVERY_MS) {
    throw new Error(
      `${name} (${windowMs} ms) must not be shorter than the providers' webhook redelivery horizon (3 days): ` +
        'a redelivered event must still find its marker, and its order its started outbox row.',
    );
  }
}
