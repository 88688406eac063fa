/**
 * The retention Schedule: created by the worker at start-up if it does not
 * exist yet (an existing one, perhaps tuned by an operator, is left alone).
 */
import { ScheduleAlreadyRunning, ScheduleOverlapPolicy, type Client } from '@temporalio/client';
import { PROVIDER_KEY_WINDOW_MS } from '../providers/contract.ts';
import {
  assertRedeliveryWindow,
  DEFAULT_OUTBOX_WINDOW_MS,
  DEFAULT_WEBHOOK_WINDOW_MS,
  type RetentionInput,
} from './contract.ts';

const RETENTION_SCHEDULE_ID = 'onceflow-retention';

/**
 * Keeping up with the load. At the benchmark's rate, 30 orders/s, a day
 * brings 2.6 M orders: 2.6 M started outbox rows, about as many webhook
 * markers (one payment event per charge), and 15.6 M ledger records (6 per
 * order: the create's key, charge, receipt and three statuses). One run every
 * 15 min (RETENTION_INTERVAL_MS's default, src/config.ts) is 96 runs a day, so a run must clear 162 k
 * ledger records and 27 k rows of each other table. A run deletes up to
 * DEFAULT_BATCH_SIZE x DEFAULT_MAX_BATCHES = 500 k rows per table: 48 M a
 * day, 3x the ledger's rate and 18x the others', so a backlog (a stopped
 * worker, a first run on an old database) drains too. The earlier default,
 * 100 k rows an hour (2.4 M a day), fell behind even the outbox. A batch of
 * 1,000 rows took 8 ms on the 2-core dev machine under load (ledger and
 * webhook_events alike), so a steady-state run (about 220 batches) takes
 * seconds, and a run at the cap (1,500 batches) well under a minute, far
 * within the activity's 10-minute timeout (workflows/retention.ts).
 */
export const DEFAULT_BATCH_SIZE = 1000;
export const DEFAULT_MAX_BATCHES = 500;

export interface RetentionScheduleOptions {
  taskQueue: string;
  windowMs: number;
  intervalMs: number;
  batchSize?: number;
  maxBatches?: number;
  /** webhook_events window; default 7 days, never below the 3-day redelivery horizon. */
  webhookWindowMs?: number;
  /** Started workflow_outbox rows' window; default 7 days, never below the 3-day redelivery horizon. */
  outboxWindowMs?: number;
  scheduleId?: string;
}

export function assertRetentionWindow(windowMs: number): void {
  if (windowMs < PROVIDER_KEY_WINDOW_MS) {
    throw new Error(
      `The retention window (${windowMs} ms) must not be shorter than the provider's idempotency-key window (24 h): ` +
        'a key reaped earlier could be reused while the provider still remembers it.',
    );
  }
}

/** Returns true if it created the schedule, false if one already existed. */
export async function ensureRetentionSchedule(
  client: Client,
  opts: RetentionScheduleOptions,
): Promise<boolean> {
  assertRetentionWindow(opts.windowMs);
  const webhookWindowMs = opts.webhookWindowMs ?? DEFAULT_WEBHOOK_WINDOW_MS;
  const outboxWindowMs = opts.outboxWindowMs ?? DEFAULT_OUTBOX_WINDOW_MS;
  assertRedeliveryWindow('The webhook_events retention window', webhookWindowMs);
  assertRedeliveryWindow('The workflow_outbox retention window', outboxWindowMs);
  const input: RetentionInput = {
    windowMs: opts.windowMs,
    batchSize: opts.batchSize ?? DEFAULT_BATCH_SIZE,
    maxBatches: opts.maxBatches ?? DEFAULT_MAX_BATCHES,
    webhookWindowMs,
    outboxWindowMs,
  };
  const scheduleId = opts.scheduleId ?? RETENTION_SCHEDULE_ID;
  try {
    await client.schedule.create({
      scheduleId,
      spec: { intervals: [{ every: opts.intervalMs }] },
      action: {
        type: 'startWorkflow',
        workflowType: 'retentionWorkflow',
        taskQueue: opts.taskQueue,
        workflowId: `${scheduleId}/run`,
        args: [input],
      },
      policies: { overlap: ScheduleOverlapPolicy.SKIP, catchupWindow: opts.intervalMs },
      memo: {
        purpose:
          'Deletes finished ledger records, started outbox rows and webhook event markers past their windows; ' +
          'never in_progress or unknown records, unstarted outbox rows or signal_pending events.',
      },
    });
    return true;
  } catch (err) {
    if (err instanceof ScheduleAlreadyRunning) return false;
    throw err;
  }
}
