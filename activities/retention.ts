import { log } from '@temporalio/activity';
import type { Pool } from '../src/db/index.ts';
import type { Ledger } from 'onceflow';
import {
  assertRedeliveryWindow,
  DEFAULT_OUTBOX_WINDOW_MS,
  DEFAULT_WEBHOOK_WINDOW_MS,
  type RetentionInput,
} from '../src/retention/contract.ts';
import { pruneOutbox, pruneWebhookEvents, type PruneResult } from '../src/retention/prune.ts';

/** Ledger.list's largest page: a count by listing stops here. */
const LIST_CAP = 1000;

export interface RetentionSummary {
  /** The ledger's `operations` (the fields from before the other tables had retention). */
  deleted: number;
  batches: number;
  succeeded: number;
  failed: number;
  windowMs: number;
  /**
   * Records past the window the reaper must never delete, left as they were.
   * Counted by listing them, so each count stops at the ledger's list cap (1000):
   * read 1000 as "at least 1000".
   */
  spared: { inProgress: number; unknown: number };
  /** Started `workflow_outbox` rows deleted (unstarted ones never are). */
  outbox: PruneResult & { windowMs: number };
  /** `webhook_events` markers deleted (`signal_pending` ones never are). */
  webhookEvents: PruneResult & { windowMs: number };
}

export interface RetentionActivities {
  /**
   * The retention run: the ledger first, then the outbox and webhook_events,
   * each in its own bounded batches. Still named for the ledger alone, its
   * first job: the name is in every retention workflow's history, and the
   * workflow's commands stay as they were.
   */
  pruneLedger(input: RetentionInput): Promise<RetentionSummary>;
}

export function createRetentionActivities(deps: { ledger: Ledger; pool: Pool }): RetentionActivities {
  return {
    async pruneLedger(input) {
      const { windowMs, batchSize, maxBatches } = input;
      // An input stored by an older Schedule has neither field: the defaults.
      const outboxWindowMs = input.outboxWindowMs ?? DEFAULT_OUTBOX_WINDOW_MS;
      const webhookWindowMs = input.webhookWindowMs ?? DEFAULT_WEBHOOK_WINDOW_MS;
      // Checked before anything is deleted: a Schedule edited by hand may hold anything.
      assertRedeliveryWindow('outboxWindowMs', outboxWindowMs);
      assertRedeliveryWindow('webhookWindowMs', webhookWindowMs);

      const result = await deps.ledger.reap({ olderThanMs: windowMs, batchSize, maxBatches });
      const [inProgress, unknown] = await Promise.all([
        deps.ledger.list({ state: 'in_progress', olderThanMs: windowMs, limit: LIST_CAP }),
        deps.ledger.list({ state: 'unknown', olderThanMs: windowMs, limit: LIST_CAP }),
      ]);
      // One table after the other, not at once: the run is background work on a shared pool.
      const outbox = await pruneOutbox(deps.pool, { olderThanMs: outboxWindowMs, batchSize, maxBatches });
      const webhookEvents = await pruneWebhookEvents(deps.pool, {
        olderThanMs: webhookWindowMs,
        batchSize,
        maxBatches,
      });
      const summary: RetentionSummary = {
        deleted: result.deleted,
        batches: result.batches,
        succeeded: result.byState.succeeded,
        failed: result.byState.failed,
        windowMs,
        spared: { inProgress: inProgress.length, unknown: unknown.length },
        outbox: { ...outbox, windowMs: outboxWindowMs },
        webhookEvents: { ...webhookEvents, windowMs: webhookWindowMs },
      };
      log.info('retention run', { ...summary });
      return summary;
    },
  };
}
