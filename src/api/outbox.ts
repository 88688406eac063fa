/**
 * The workflow outbox relay. An order's row, its Idempotency-Key record and
 * its start intent (a `workflow_outbox` row) commit in one transaction; this
 * relay turns intents into started workflows.
 *
 * - Right after commit, `kick(workflowId)` tries to start that one workflow,
 *   so the happy path has no polling delay.
 * - A background loop polls for due, unstarted rows (bounded batch,
 *   `FOR UPDATE SKIP LOCKED`, exponential backoff per row) and starts them.
 *   This is what saves an order whose process died between commit and start.
 *
 * A start is idempotent: the workflow ID is deterministic
 * (`order/<tenant>/<order>`) and we start with REJECT_DUPLICATE, so a second
 * start of an ID that ever ran (even one that has completed) fails with
 * WorkflowExecutionAlreadyStartedError, which we count as success. The default
 * policy (ALLOW_DUPLICATE) would start a second run of a completed order.
 */
import { WorkflowExecutionAlreadyStartedError, WorkflowIdReusePolicy, type Client } from '@temporalio/client';
import { withTransaction, type Pool } from '../db/index.ts';
import { errorFields, log } from '../log.ts';
import {
  claimDueOutbox,
  claimOutboxRow,
  markOutboxFailed,
  markOutboxStarted,
  type OutboxRow,
} from './sql.ts';

export const ORDER_WORKFLOW_TYPE = 'orderWorkflow';

export interface OutboxRelayOptions {
  pool: Pool;
  temporal: Client;
  /** The relay loop starts only rows committed for this queue (see migration 0005). */
  taskQueue: string;
  /** false: neither `kick` nor the loop starts anything (OUTBOX_RELAY=off). */
  enabled: boolean;
  pollMs?: number;
  batchSize?: number;
  /** Backoff cap for a row whose start keeps failing. */
  maxBackoffMs?: number;
}

export type StartOutcome = 'started' | 'already_started';

export class OutboxRelay {
  private readonly pollMs: number;
  private readonly batchSize: number;
  private readonly maxBackoffMs: number;
  private running = false;
  private loop: Promise<void> | undefined;
  private wake: (() => void) | undefined;
  private readonly inFlight = new Set<Promise<unknown>>();

  constructor(private readonly opts: OutboxRelayOptions) {
    this.pollMs = opts.pollMs ?? 1000;
    this.batchSize = opts.batchSize ?? 20;
    this.maxBackoffMs = opts.maxBackoffMs ?? 60_000;
  }

  get enabled(): boolean {
    return this.opts.enabled;
  }

  /** Starts one workflow right after its order committed. Never throws: the loop is the safety net. */
  kick(workflowId: string): void {
    if (!this.opts.enabled) return;
    const p = this.startOne(workflowId)
      .catch((err: unknown) =>
        log.warn('post-commit workflow start failed; the relay will retry', {
          workflowId,
          ...errorFields(err),
        }),
      )
      .finally(() => this.inFlight.delete(p));
    this.inFlight.add(p);
  }

  /** Claims and starts one pending row. Returns null if it is already started or claimed by someone else. */
  async startOne(workflowId: string): Promise<StartOutcome | null> {
    const outcome = await withTransaction(this.opts.pool, async (tx) => {
      const row = await claimOutboxRow(tx, workflowId);
      if (!row) return null;
      // The failure (attempts, backoff) must commit, so it is rethrown only after the transaction.
      return this.startRow(tx, row).catch((err: unknown) => ({ failed: err }));
    });
    if (outcome !== null && typeof outcome === 'object') throw outcome.failed;
    return outcome;
  }

  /** One relay pass: claims up to `batchSize` due rows and starts them. Returns how many it claimed. */
  async relayDue(): Promise<number> {
    if (!this.opts.enabled) return 0;
    return withTransaction(this.opts.pool, async (tx) => {
      const rows = await claimDueOutbox(tx, this.opts.taskQueue, this.batchSize);
      // Sequential on one connection (a pg client runs one query at a time); the starts are quick RPCs.
      for (const row of rows) {
        await this.startRow(tx, row).catch(() => undefined); // recorded on the row by startRow
      }
      return rows.length;
    });
  }

  private async startRow(tx: Parameters<typeof markOutboxStarted>[0], row: OutboxRow): Promise<StartOutcome> {
    let outcome: StartOutcome;
    try {
      await this.opts.temporal.workflow.start(row.workflow_type, {
        taskQueue: row.task_queue,
        workflowId: row.workflow_id,
        args: [row.input],
        workflowIdReusePolicy: WorkflowIdReusePolicy.REJECT_DUPLICATE,
      });
      outcome = 'started';
    } catch (err) {
      if (err instanceof WorkflowExecutionAlreadyStartedError) {
        outcome = 'already_started';
      } else {
        const retryInMs = Math.min(this.maxBackoffMs, 1000 * 2 ** Math.min(row.attempts, 16));
        await markOutboxFailed(
          tx,
          row.workflow_id,
          err instanceof Error ? err.message : String(err),
          retryInMs,
        );
        log.warn('workflow start failed', {
          workflowId: row.workflow_id,
          attempts: row.attempts + 1,
          retryInMs,
          ...errorFields(err),
        });
        throw err;
      }
    }
    await markOutboxStarted(tx, row.workflow_id);
    log.info('workflow started from outbox', { workflowId: row.workflow_id, outcome });
    return outcome;
  }

  /** Starts the background loop (no-op when disabled). */
  start(): void {
    if (!this.opts.enabled || this.running) return;
    this.running = true;
    this.loop = this.run();
  }

  private async run(): Promise<void> {
    let failures = 0;
    while (this.running) {
      let claimed = 0;
      try {
        claimed = await this.relayDue();
        failures = 0;
      } catch (err) {
        failures++;
        log.warn('outbox relay pass failed', { ...errorFields(err), failures });
      }
      if (!this.running) break;
      // A full batch means there may be more due rows: go again at once.
      if (claimed >= this.batchSize && failures === 0) continue;
      const delay = failures
        ? Math.min(this.maxBackoffMs, this.pollMs * 2 ** Math.min(failures, 6))
        : this.pollMs;
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, delay * (0.8 + Math.random() * 0.4));
        this.wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
      this.wake = undefined;
    }
  }

  /** Stops the loop and waits for in-flight starts. */
  async stop(): Promise<void> {
    this.running = false;
    this.wake?.();
    await this.loop;
    await Promise.allSettled([...this.inFlight]);
  }
}
