/**
 * SQL for `workflow_outbox`, and the only module that queries it: the intent to start an order's
 * workflow, committed with the order row; the relay (src/api/outbox.ts) starts it.
 */
import type pg from 'pg';
import type { Queryable } from '../db/index.ts';
import type { OrderWorkflowInput } from '../orders/model.ts';
import type { RefundWorkflowInput } from '../refunds/contract.ts';
import type { TraceCarrier } from '../tracing/index.ts';

export interface OutboxRow {
  workflow_id: string;
  tenant_id: string;
  order_id: string;
  workflow_type: string;
  task_queue: string;
  input: OrderWorkflowInput | RefundWorkflowInput;
  attempts: number;
  started_at: Date | null;
  /** The accepting request's W3C trace context (src/tracing); null when tracing was off. */
  trace_context: TraceCarrier | null;
  /** The workflow's memo: what a recovery after a restore needs (src/recovery/memo.ts); null on older rows. */
  memo: Record<string, unknown> | null;
  created_at: Date;
}

export interface NewOutboxRow {
  workflowId: string;
  tenantId: string;
  orderId: string;
  workflowType: string;
  taskQueue: string;
  input: OrderWorkflowInput | RefundWorkflowInput;
  traceContext?: TraceCarrier | null;
  /** Started with the workflow as its memo (src/recovery/memo.ts). */
  memo?: Record<string, unknown> | null;
  /** Inserted already claimed by the inserting process for this long (see insertOutboxStatement). */
  claimedForMs?: number;
}

/**
 * Inserts the start intent, optionally already claimed for `claimedForMs`: the accepting API starts
 * the workflow after commit with no claim statement, and if it dies first any relay takes over.
 */
export function insertOutboxStatement(r: NewOutboxRow): pg.QueryConfig {
  return {
    text: `insert into workflow_outbox (workflow_id, tenant_id, order_id, workflow_type, task_queue, input,
                                        trace_context, next_attempt_at, memo)
           values ($1, $2, $3, $4, $5, $6, $7, now() + $8::integer * interval '1 millisecond', $9)`,
    values: [
      r.workflowId,
      r.tenantId,
      r.orderId,
      r.workflowType,
      r.taskQueue,
      JSON.stringify(r.input),
      r.traceContext ? JSON.stringify(r.traceContext) : null,
      Math.max(0, Math.round(r.claimedForMs ?? 0)),
      r.memo ? JSON.stringify(r.memo) : null,
    ],
  };
}

/** The row insertOutboxStatement inserts, as the relay reads it. */
export function outboxRowOf(r: NewOutboxRow): OutboxRow {
  return {
    workflow_id: r.workflowId,
    tenant_id: r.tenantId,
    order_id: r.orderId,
    workflow_type: r.workflowType,
    task_queue: r.taskQueue,
    input: r.input,
    attempts: 0,
    started_at: null,
    trace_context: r.traceContext ?? null,
    memo: r.memo ?? null,
    created_at: new Date(),
  };
}

const OUTBOX_COLUMNS = `workflow_id, tenant_id, order_id, workflow_type, task_queue, input, attempts, started_at,
  trace_context, memo, created_at`;

/**
 * Claims due rows by moving next_attempt_at `leaseMs` ahead, autocommitted, so no transaction stays
 * open across the Temporal calls; a dead relay's rows come due again, and a repeated start is
 * harmless (deterministic workflow ID). SKIP LOCKED: claimers never wait on each other, and the WHERE
 * is re-checked, so one claimer gets each row. No task_queue filter: a queue with no relay of its
 * own would never start.
 */
export async function claimDueOutbox(db: Queryable, limit: number, leaseMs: number): Promise<OutboxRow[]> {
  const { rows } = await db.query<OutboxRow>(
    `with due as (
       select workflow_id from workflow_outbox
        where started_at is null and next_attempt_at <= now()
        order by next_attempt_at
        limit $1
        for update skip locked)
     update workflow_outbox o
        set next_attempt_at = now() + $2::integer * interval '1 millisecond'
       from due
      where o.workflow_id = due.workflow_id
     returning o.workflow_id, o.tenant_id, o.order_id, o.workflow_type, o.task_queue, o.input, o.attempts,
               o.started_at, o.trace_context, o.memo, o.created_at`,
    [limit, leaseMs],
  );
  return rows;
}

/**
 * The same claim for one row; a concurrent claimer waits, re-checks `next_attempt_at` and finds it claimed.
 */
export async function claimOutboxRow(
  db: Queryable,
  workflowId: string,
  leaseMs: number,
): Promise<OutboxRow | null> {
  const { rows } = await db.query<OutboxRow>(
    `update workflow_outbox
        set next_attempt_at = now() + $2::integer * interval '1 millisecond'
      where workflow_id = $1 and started_at is null and next_attempt_at <= now()
      returning ${OUTBOX_COLUMNS}`,
    [workflowId, leaseMs],
  );
  return rows[0] ?? null;
}

/**
 * `startedAt`: from Temporal when known; null means now (database clock). next_attempt_at is left
 * as it was: no claim or index reads it once started_at is set.
 */
export async function markOutboxStarted(
  db: Queryable,
  workflowId: string,
  startedAt: Date | null = null,
): Promise<void> {
  await db.query(
    `update workflow_outbox
        set started_at = coalesce($2::timestamptz, now()), attempts = attempts + 1, last_error = null
      where workflow_id = $1 and started_at is null returning workflow_id`,
    [workflowId, startedAt],
  );
}

export async function markOutboxFailed(
  db: Queryable,
  workflowId: string,
  error: string,
  retryInMs: number,
): Promise<void> {
  await db.query(
    `update workflow_outbox
        set attempts = attempts + 1, last_error = $2,
            next_attempt_at = now() + $3::integer * interval '1 millisecond'
      where workflow_id = $1 and started_at is null returning workflow_id`,
    [workflowId, error.slice(0, 500), retryInMs],
  );
}

export async function getOutbox(db: Queryable, workflowId: string): Promise<OutboxRow | null> {
  const { rows } = await db.query<OutboxRow>(
    `select ${OUTBOX_COLUMNS} from workflow_outbox where workflow_id = $1`,
    [workflowId],
  );
  return rows[0] ?? null;
}

export interface OutboxBacklog {
  /** Outbox rows whose workflow has not been started yet (any task queue). */
  unstarted: number;
  /** Seconds since the oldest unstarted row committed; null when there is none. */
  oldestUnstartedSeconds: number | null;
}

/** Served by the partial index workflow_outbox_due (unstarted rows only). */
export async function selectOutboxBacklog(db: Queryable): Promise<OutboxBacklog> {
  const { rows } = await db.query<{ unstarted: number; oldest: number | null }>(
    `select count(*)::int as unstarted, extract(epoch from now() - min(created_at))::float8 as oldest
       from workflow_outbox where started_at is null`,
  );
  return { unstarted: rows[0]?.unstarted ?? 0, oldestUnstartedSeconds: rows[0]?.oldest ?? null };
}

/**
 * A start intent rebuilt after a restore, recorded as started so no relay starts it again. Never
 * overwrites.
 */
export async function insertStartedOutbox(
  db: Queryable,
  r: Omit<NewOutboxRow, 'claimedForMs' | 'traceContext'> & { startedAt: Date },
): Promise<boolean> {
  const { rowCount } = await db.query(
    `insert into workflow_outbox (workflow_id, tenant_id, order_id, workflow_type, task_queue, input,
                                  started_at, memo)
     values ($1, $2, $3, $4, $5, $6, $7, $8)
     on conflict (workflow_id) do nothing`,
    [
      r.workflowId,
      r.tenantId,
      r.orderId,
      r.workflowType,
      r.taskQueue,
      JSON.stringify(r.input),
      r.startedAt,
      r.memo ? JSON.stringify(r.memo) : null,
    ],
  );
  return rowCount === 1;
}

/**
 * Retention: deletes up to `limit` rows started over `olderThanMs` ago, oldest first. A started row
 * is history (the window outlasts the webhook route's need for started_at); an unstarted one is an
 * order still to start, so never deleted. Served by workflow_outbox_started_idx.
 */
export async function deleteStartedOutbox(
  db: Queryable,
  olderThanMs: number,
  limit: number,
): Promise<number> {
  const { rowCount } = await db.query(
    `with victims as (
       select workflow_id from workflow_outbox
        where started_at is not null
          and started_at < now() - $1::float8 * interval '1 millisecond'
        order by started_at
        limit $2
        for update skip locked)
     delete from workflow_outbox o using victims v
      where o.workflow_id = v.workflow_id and o.started_at is not null`,
    [olderThanMs, limit],
  );
  return rowCount ?? 0;
}
