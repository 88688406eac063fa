import { log, proxyActivities } from '@temporalio/workflow';
import type { RetentionActivities, RetentionSummary } from '../activities/retention.ts';
import type { RetentionInput } from '../src/retention/contract.ts';

const options = {
  startToCloseTimeout: '10 minutes',
  retry: { initialInterval: '10 seconds', maximumAttempts: 5 },
} as const;
const { pruneLedger } = proxyActivities<RetentionActivities>(options);

/**
 * Run by the `onceflow-retention` Temporal Schedule. Deletes only finished
 * ledger records past the retention window, in bounded batches; in_progress
 * and unknown records are never touched. The result is the run's summary.
 */
export async function retentionWorkflow(input: RetentionInput): Promise<RetentionSummary> {
  const summary = await pruneLedger.executeWithOptions(
    {
      ...options,
      summary: `prune finished operations older than ${Math.round(input.windowMs / 3_600_000)} h`,
    },
    [input],
  );
  log.info('retention run finished', { ...summary });
  return summary;
}
