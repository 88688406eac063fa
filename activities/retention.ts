import { log } from '@temporalio/activity';
import type { Ledger } from '../src/ledger/index.ts';

export interface RetentionSummary {
  deleted: number;
  batches: number;
  succeeded: number;
  failed: number;
  windowMs: number;
  /** Records the reaper must never delete, left as they were. */
  spared: { inProgress: number; unknown: number };
}

export interface RetentionActivities {
  pruneLedger(input: { windowMs: number; batchSize: number; maxBatches: number }): Promise<RetentionSummary>;
}

export function createRetentionActivities(deps: { ledger: Ledger }): RetentionActivities {
  return {
    async pruneLedger({ windowMs, batchSize, maxBatches }) {
      const result = await deps.ledger.reap({ olderThanMs: windowMs, batchSize, maxBatches });
      const [inProgress, unknown] = await Promise.all([
        deps.ledger.list({ state: 'in_progress', olderThanMs: windowMs, limit: 10_000 }),
        deps.ledger.list({ state: 'unknown', olderThanMs: windowMs, limit: 10_000 }),
      ]);
      const summary: RetentionSummary = {
        deleted: result.deleted,
        batches: result.batches,
        succeeded: result.byState.succeeded,
        failed: result.byState.failed,
        windowMs,
        spared: { inProgress: inProgress.length, unknown: unknown.length },
      };
      log.info('pruned ledger', { ...summary });
      return summary;
    },
  };
}
