/**
 * The workflow outbox relay. An order's row, its Idempotency-Key record and
 * its start intent (a `workflow_outbox` row) commit in one transaction; this
 * relay turns intents into started workflows.
 *
 * - The accepting request inserts its row already claimed for this relay
 *   (`claimLeaseMs`, in the order's own transaction), and right after commit
 *   `kick(row)` starts that one workflow: no polling delay and no claim
 *   statement on the happy path.
 * - A background loop polls for due, unstarted rows of every task queue
 *   (bounded batch, exponential backoff per row) and starts them. This is
 *   what saves an order whose process died between commit and start. It runs
 *   a pass at once when the API starts and retries a failed pass within
 *   seconds, so an API coming out of a crash loop catches up immediately.
 * - A claim is a short lease on the row (one autocommitted statement), never
 *   a transaction held open across the Temporal call: a Postgres blip during
 *   a slow start can then neither break the start nor strand a connection.
 *   The start is recorded (per workflow, when it returned) afterwards.
 *
 * A start is idempotent: the workflow ID is deterministic
 * (`order/<tenant>/<order>`) and we start with REJECT_DUPLICATE, so a second
 * start of an ID that ever ran (even one that has completed) fails with
 * WorkflowExecutionAlreadyStartedError, which we count as success. The default
 * policy (ALLOW_DUPLICATE) would start a second run of a completed order.
 * A merchant delivery is the exception: a closed run of it is started again, because a delivery
 * row can outlive its run's outcome (a database restore brings it back pending), and a second run
 * only replays the step the ledger recorded, or, if the ledger lost it too, sends the event again
 * under its ID, which the receiver dedupes. An open run that started before its row (a restore
 * came while it ran, perhaps after its send) is ended first, for the same reason.
 */
import { WorkflowExecutionAlreadyStartedError, WorkflowIdReusePolicy, type Client } from '@temporalio/client';
import { context } from '@opentelemetry/api';
import { backoffMs } from 'onceflow/postgres';
import type { Pool } from '../db/index.ts';
import { contextFromCarrier } from '../tracing/index.ts';
import { errorFields, log } from '../log.ts';
import { orderStartSearchAttributes } from '../orders/contract.ts';
import { DELIVERY_WORKFLOW_TYPE } from '../merchant-events/contract.ts';
import {
  claimDueOutbox,
  claimOutboxRow,
  markOutboxFailed,
  markOutboxStarted,
  type OutboxRow,
} from '../outbox/sql.ts';
import { databaseMemo } from '../restore/memo.ts';
import { selectDatabaseIdentity } from '../restore/sql.ts';

export const ORDER_WORKFLOW_TYPE = 'orderWorkflow';

export interface OutboxRelayOptions {
  pool: Pool;
  temporal: Client;
  /** false: neither `kick` nor the loop starts anything (OUTBOX_RELAY=off). */
  enabled: boolean;
  pollMs?: number;
  batchSize?: number;
  /** Backoff cap for a row whose start keeps failing. Default 10 000. */
  maxBackoffMs?: number;
  /** Deadline of one Temporal start call. Default 5 000. */
  startTimeoutMs?: number;
  /**
   * How long a claimed row is reserved for this relay. Must exceed
   * startTimeoutMs plus recording; it is also how long a row claimed by a
   * relay that died waits before another relay takes it. Default 10 000.
   */
  claimLeaseMs?: number;
}

export type StartOutcome = 'started' | 'already_started';

/** Backoff cap between failed relay passes (e.g. Postgres down): short, so recovery is quick. */
export const MAX_PASS_BACKOFF_MS = 5_000;

/**
 * Wait before the next pass: the poll interval, or after `failures`
 * consecutive failed passes an exponential backoff capped at a few seconds.
 * Up to a fifth is jitter, so relays that failed together do not poll together.
 */
export function passDelayMs(failures: number, pollMs: number, random: () => number = Math.random): number {
  const backoff = { initialMs: pollMs, maxMs: Math.max(pollMs, MAX_PASS_BACKOFF_MS), jitter: 0.2 };
  return backoffMs(backoff, failures, random);
}

export class OutboxRelay {
  private readonly pollMs: number;
  private readonly batchSize: number;
  private readonly maxBackoffMs: number;
  private readonly startTimeoutMs: number;
  private readonly claimLeaseMs: number;
  private running = false;
  private loop: Promise<void> | undefined;
  private wake: (() => void) | undefined;
  private readonly inFlight = new Set<Promise<unknown>>();
  private identity: Promise<string | null> | undefined;

  constructor(private readonly opts: OutboxRelayOptions) {
    this.pollMs = opts.pollMs ?? 1000;
    this.batchSize = opts.batchSize ?? 20;
    this.maxBackoffMs = opts.maxBackoffMs ?? 10_000;
    this.startTimeoutMs = opts.startTimeoutMs ?? 5_000;
    this.claimLeaseMs = opts.claimLeaseMs ?? Math.max(10_000, this.startTimeoutMs * 2);
  }

  get enabled(): boolean {
    return this.opts.enabled;
  }

  /**
   * How long a row inserted for `kick` is claimed for this relay (0 when
   * disabled: the row is due at once for whichever relay runs).
   */
  get claimForKickMs(): number {
    return this.opts.enabled ? this.claimLeaseMs : 0;
  }

  /**
   * Starts one workflow right after its order committed, from the row its
   * transaction inserted already claimed (claimForKickMs). Never throws: the
   * loop is the safety net.
   */
  kick(row: OutboxRow): void {
    if (!this.opts.enabled) return;
    const p = this.startRow(row)
      .catch((err: unknown) =>
        log.warn('post-commit workflow start failed; the relay will retry', {
          workflowId: row.workflow_id,
          ...errorFields(err),
        }),
      )
      .finally(() => this.inFlight.delete(p));
    this.inFlight.add(p);
  }

  /**
   * Claims and starts one due row. Returns null if it is already started,
   * claimed by someone else, or waiting out a backoff. A failed start is
   * recorded on the row (attempts, backoff) and rethrown.
   */
  async startOne(workflowId: string): Promise<StartOutcome | null> {
    const row = await claimOutboxRow(this.opts.pool, workflowId, this.claimLeaseMs);
    if (!row) return null;
    return this.startRow(row);
  }

  /** One relay pass: claims up to `batchSize` due rows and starts them. Returns how many it claimed. */
  async relayDue(): Promise<number> {
    return (await this.pass()).claimed;
  }

  private async pass(): Promise<{ claimed: number; started: number }> {
    if (!this.opts.enabled) return { claimed: 0, started: 0 };
    const rows = await claimDueOutbox(this.opts.pool, this.batchSize, this.claimLeaseMs);
    // Concurrent: each start is its own RPC and each record its own statement.
    const outcomes = await Promise.allSettled(rows.map((row) => this.startRow(row)));
    return { claimed: rows.length, started: outcomes.filter((o) => o.status === 'fulfilled').length };
  }

  private async startRow(row: OutboxRow): Promise<StartOutcome> {
    const { temporal, pool } = this.opts;
    let outcome: StartOutcome;
    let startedAt: Date | null = null;
    try {
      // Every workflow names its database, so restore detection can tell this database's lost rows
      // from another database's workflows on the same Temporal (src/recovery/gate.ts).
      const identity = await this.databaseIdentity();
      const memo = { ...row.memo, ...(identity ? databaseMemo(identity) : {}) };
      // Under the accepting request's trace context (stored with the row), not whichever pass or
      // request happens to run this: the client interceptor's StartWorkflow span, and the workflow
      // after it, are children of that POST.
      const start = () =>
        context.with(contextFromCarrier(row.trace_context), () =>
          this.withDeadline(() =>
            temporal.workflow.start(row.workflow_type, {
              taskQueue: row.task_queue,
              workflowId: row.workflow_id,
              args: [row.input],
              // What a recovery after a database restore rebuilds the order's create record from.
              memo,
              workflowIdReusePolicy:
                row.workflow_type === DELIVERY_WORKFLOW_TYPE
                  ? WorkflowIdReusePolicy.ALLOW_DUPLICATE
                  : WorkflowIdReusePolicy.REJECT_DUPLICATE,
              ...(row.workflow_type === ORDER_WORKFLOW_TYPE
                ? { typedSearchAttributes: orderStartSearchAttributes(row.tenant_id) }
                : {}),
            }),
          ),
        );
      try {
        await start();
        outcome = 'started';
      } catch (err) {
        if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
        const existing = await this.describe(row.workflow_id);
        if (
          row.workflow_type === DELIVERY_WORKFLOW_TYPE &&
          existing?.open &&
          existing.startTime < row.created_at
        ) {
          // A run older than its row: a restore brought the delivery back while that run was still
          // open, maybe with nothing left to send. A new run delivers the row (at least once).
          // By its run ID: a relay that claimed the row again meanwhile must not end the new run.
          await this.withDeadline(() =>
            temporal.workflow
              .getHandle(row.workflow_id, existing.runId)
              .terminate('a database restore brought its delivery back; a new run delivers it'),
          );
          await start();
          outcome = 'started';
        } else {
          outcome = 'already_started';
          startedAt = existing?.startTime ?? null;
        }
      }
    } catch (err) {
      const retryInMs = backoffMs({ initialMs: 1000, maxMs: this.maxBackoffMs, jitter: 0 }, row.attempts);
      log.warn('workflow start failed', {
        workflowId: row.workflow_id,
        attempts: row.attempts + 1,
        retryInMs,
        ...errorFields(err),
      });
      // If this record fails too, the claim's lease runs out and the row is retried then.
      await markOutboxFailed(
        pool,
        row.workflow_id,
        err instanceof Error ? err.message : String(err),
        retryInMs,
      ).catch((markErr: unknown) =>
        log.warn('could not record a failed workflow start', {
          workflowId: row.workflow_id,
          ...errorFields(markErr),
        }),
      );
      throw err;
    }
    // If this fails (Postgres down), the row is claimed again after the lease and found already started.
    await markOutboxStarted(pool, row.workflow_id, startedAt);
    log.info('workflow started from outbox', { workflowId: row.workflow_id, outcome });
    return outcome;
  }

  private withDeadline<R>(call: () => Promise<R>): Promise<R> {
    return this.opts.temporal.connection.withDeadline(Date.now() + this.startTimeoutMs, call);
  }

  /** Read once: a database's identity never changes (a restore keeps it). A failed read is tried again. */
  private databaseIdentity(): Promise<string | null> {
    this.identity ??= selectDatabaseIdentity(this.opts.pool).catch((err: unknown) => {
      this.identity = undefined;
      throw err;
    });
    return this.identity;
  }

  /** When a workflow we found already started was started, and whether it is still open; null if Temporal can't say. */
  private async describe(
    workflowId: string,
  ): Promise<{ runId: string; startTime: Date; open: boolean } | null> {
    try {
      const desc = await this.withDeadline(() =>
        this.opts.temporal.workflow.getHandle(workflowId).describe(),
      );
      return { runId: desc.runId, startTime: desc.startTime, open: desc.status.name === 'RUNNING' };
    } catch {
      return null;
    }
  }

  /** Starts the background loop (no-op when disabled). Its first pass runs at once. */
  start(): void {
    if (!this.opts.enabled || this.running) return;
    this.running = true;
    this.loop = this.run();
  }

  private async run(): Promise<void> {
    let failures = 0;
    while (this.running) {
      let result = { claimed: 0, started: 0 };
      try {
        result = await this.pass();
        if (failures > 0) log.info('outbox relay recovered', { failedPasses: failures });
        failures = 0;
      } catch (err) {
        failures++;
        log.warn('outbox relay pass failed', { ...errorFields(err), failures });
      }
      if (!this.running) break;
      // A full batch that made progress means more rows may be due: go again at once.
      // (A full batch of failed starts is backing off per row; don't spin on it.)
      if (result.claimed >= this.batchSize && result.started > 0) continue;
      const delay = passDelayMs(failures, this.pollMs);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, delay);
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
