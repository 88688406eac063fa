/**
 * Retention of the tables besides the ledger, as Ledger.reap does it: short batches hold locks for
 * milliseconds, and the cap bounds a run after a long outage.
 */
import { withClient, type Pool, type Queryable } from '../db/index.ts';
import { deleteStartedOutbox } from '../outbox/sql.ts';
import { deleteOldWebhookEvents } from '../webhooks/sql.ts';

export interface PruneOptions {
  /** Rows older than this are deleted. */
  olderThanMs: number;
  /** Rows per DELETE statement. */
  batchSize: number;
  /** DELETE statements per call at most. */
  maxBatches: number;
}

export interface PruneResult {
  deleted: number;
  batches: number;
}

type DeleteBatch = (db: Queryable, olderThanMs: number, limit: number) => Promise<number>;

async function pruneInBatches(
  pool: Pool,
  deleteBatch: DeleteBatch,
  opts: PruneOptions,
): Promise<PruneResult> {
  for (const [name, n] of [
    ['batchSize', opts.batchSize],
    ['maxBatches', opts.maxBatches],
  ] as const) {
    if (!Number.isSafeInteger(n) || n <= 0) throw new Error(`${name} must be a positive integer, got ${n}`);
  }
  const total: PruneResult = { deleted: 0, batches: 0 };
  while (total.batches < opts.maxBatches) {
    const n = await withClient(pool, (c) => deleteBatch(c, opts.olderThanMs, opts.batchSize));
    total.batches++;
    total.deleted += n;
    if (n < opts.batchSize) break;
  }
  return total;
}

/** Started workflow_outbox rows past the window; never an unstarted one (src/outbox/sql.ts). */
export function pruneOutbox(pool: Pool, opts: PruneOptions): Promise<PruneResult> {
  return pruneInBatches(pool, deleteStartedOutbox, opts);
}

/** webhook_events markers past the window; never a `signal_pending` one (src/webhooks/sql.ts). */
export function pruneWebhookEvents(pool: Pool, opts: PruneOptions): Promise<PruneResult> {
  return pruneInBatches(pool, deleteOldWebhookEvents, opts);
}
