import { log } from '@temporalio/activity';
import { MAX_LIST_LIMIT, type Ledger } from '../src/ledger/index.ts';
import type { RetentionInput } from '../src/retention/contract.ts';

export interface RetentionSummary {
  deleted: number;
  batches: number;
  succeeded: number;
  failed: number;
  windowMs: number;
  /**
   * Records past the window the reaper must never delete, left as they were.
   * Counted by listing them, so each count stops at MAX_LIST_LIMIT (1000):
   * read 1000 as "at least 1000".
   */
  spared: { inProgress: number; unknown: number };
}

export interface RetentionActivities {
  pruneLedger(input: RetentionInput): Promise<RetentionSummary>;
}

export function createRetentionActivities(deps: { ledger: Ledger }): RetentionActivities {
  return {
    async pruneLedger({ windowMs, batchSize, maxBatches }) {
      const result = await deps.ledger.reap({ olderThanMs: windowMs, batchSize, maxBatches });
      const [inProgress, unknown] = await Promise.all([
        deps.ledger.list({ state: 'in_progress', olderThanMs: windowMs, limit: MAX_LIST_LIMIT }),
        deps.ledger.list({ state: 'unknown', olderThanMs: windowMs, limit: MAX_LIST_LIMIT }),
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
