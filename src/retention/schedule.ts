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
 * Sized to keep up: an order leaves 6 ledger records and one row in each other table, and a run's
 * cap (batch size x batches, every 15 min) is several times the benchmarked rate, so a backlog
 * drains too, while a run at the cap stays well inside the activity's timeout (docs/BENCHMARKS.md).
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
