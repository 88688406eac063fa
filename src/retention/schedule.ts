/**
 * The retention Schedule: created by the worker at start-up if it does not
 * exist yet (an existing one, perhaps tuned by an operator, is left alone).
 */
import { ScheduleAlreadyRunning, ScheduleOverlapPolicy, type Client } from '@temporalio/client';
import { PROVIDER_KEY_WINDOW_MS } from '../providers/contract.ts';
import type { RetentionInput } from './contract.ts';

const RETENTION_SCHEDULE_ID = 'onceflow-retention';

export interface RetentionScheduleOptions {
  taskQueue: string;
  windowMs: number;
  intervalMs: number;
  batchSize?: number;
  maxBatches?: number;
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
  const scheduleId = opts.scheduleId ?? RETENTION_SCHEDULE_ID;
  const input: RetentionInput = {
    windowMs: opts.windowMs,
    batchSize: opts.batchSize ?? 1000,
    maxBatches: opts.maxBatches ?? 100,
  };
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
        purpose: 'Deletes finished ledger records past the retention window; never in_progress or unknown.',
      },
    });
    return true;
  } catch (err) {
    if (err instanceof ScheduleAlreadyRunning) return false;
    throw err;
  }
}
