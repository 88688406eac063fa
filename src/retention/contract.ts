/**
 * The retention workflow's contract: its input, shared by the Schedule that
 * starts it (src/retention/schedule.ts) and the workflow
 * (workflows/retention.ts). Deterministic and I/O-free: workflow code
 * imports it.
 *
 * The fields added after the first release are optional: a Schedule created
 * by an earlier worker keeps its stored input, and its runs get the defaults
 * below.
 */

const DAY_MS = 24 * 60 * 60 * 1000;

/**
 * How long a payment provider may redeliver an event: Stripe retries a
 * webhook for up to 3 days (the sandbox for less). No webhook_events marker,
 * and no started outbox row (the webhook route reads it to tell "started
 * and gone" from "not started yet"), is deleted younger than this.
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
   * webhook_events rows received longer ago than this are deleted (never a
   * `signal_pending` one); default DEFAULT_WEBHOOK_WINDOW_MS, never below
   * PROVIDER_REDELIVERY_MS.
   */
  webhookWindowMs?: number;
  /**
   * workflow_outbox rows started longer ago than this are deleted (never an
   * unstarted one); default DEFAULT_OUTBOX_WINDOW_MS, never below
   * PROVIDER_REDELIVERY_MS.
   */
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
