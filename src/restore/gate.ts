/**
 * The restore gate: nothing that writes new work runs while a recovery after
 * a database restore is pending (docs/OPERATIONS.md "Backup and restore").
 *
 * Why a gate: after a restore to T0, the database has lost the orders and
 * idempotency records written after T0 while Temporal still runs their
 * workflows. Until `ops recover-after-restore` has rebuilt them, a client's
 * retry under its original key would create a second order (a new workflow,
 * a new downstream key, a second charge), and a worker would run steps whose
 * ledger records are missing. So, while a recovery is pending:
 * - the API answers creates (orders, refunds) with 503 recovery-pending and
 *   Retry-After; a client that retries keeps its key and gets its original
 *   answer once the recovery is done;
 * - a worker that starts waits before it polls.
 *
 * How a recovery becomes pending:
 * - the operator's step: `ops recover-after-restore` declares it first;
 * - the detection rule (detectRestore), run by every API and worker as it
 *   starts: Temporal holds order workflows on this task queue whose order
 *   rows the database lacks. The API commits an order's row before its
 *   workflow can start (the outbox), so in a database that was never
 *   restored every order workflow has its row; a missing one means the
 *   database went back in time (or a row was deleted by hand). Only the
 *   workflows of this database count: each carries the database's identity
 *   in its memo (migration 0026, src/restore/memo.ts), which a restore
 *   keeps. Another database's workflows (several databases on one Temporal,
 *   or a database dropped and created again) are reported, not declared.
 */
import type { Client } from '@temporalio/client';
import type { Pool } from '../db/index.ts';
import { withClient } from '../db/index.ts';
import { errorFields, log } from '../log.ts';
import { selectOrdersByWorkflowIds } from '../orders/sql.ts';
import { readDatabaseIdentity } from './memo.ts';
import { declareRecovery, selectDatabaseIdentity, selectPendingRecovery, type RecoveryRow } from './sql.ts';

/** The order workflow's type name, as the outbox starts it. */
const ORDER_WORKFLOW = 'orderWorkflow';
/** How many of the queue's latest order workflows the detection checks. */
const DETECT_SAMPLE = 50;
/** How long the detection may wait for Temporal before the process starts without it. */
const DETECT_DEADLINE_MS = 5000;
/** What a client is told to wait before it retries a create. */
export const RECOVERY_RETRY_AFTER_SECONDS = 30;

interface RestoreFinding {
  /** Order workflows (of the sample) of this database whose order row the database lacks. */
  missing: string[];
  /** Order workflows (of the sample) whose memo names another database. */
  foreign: string[];
  checked: number;
}

/**
 * The detection rule: of the latest order workflows Temporal lists for this
 * task queue, which are this database's and have no order row. Temporal
 * unreachable: throws (the caller logs it and goes on; the operator's step
 * still works).
 */
async function findMissingOrders(
  pool: Pool,
  temporal: Client,
  taskQueue: string,
  sample = DETECT_SAMPLE,
): Promise<RestoreFinding> {
  const listed: { id: string; database: string | null }[] = [];
  const query = `WorkflowType = '${ORDER_WORKFLOW}' AND TaskQueue = '${taskQueue.replace(/'/g, "''")}'`;
  for await (const wf of temporal.workflow.list({ query, pageSize: sample })) {
    listed.push({ id: wf.workflowId, database: readDatabaseIdentity(wf.memo) });
    if (listed.length >= sample) break;
  }
  if (listed.length === 0) return { missing: [], foreign: [], checked: 0 };
  const ids = listed.map((w) => w.id);
  const { identity, rows } = await withClient(pool, async (c) => ({
    identity: await selectDatabaseIdentity(c),
    rows: await selectOrdersByWorkflowIds(c, ids),
  }));
  if (!identity) throw new Error('this database has no identity: its database_identity row is gone');
  const present = new Set(rows.map((r) => r.workflow_id));
  const foreign = listed.filter((w) => w.database !== null && w.database !== identity).map((w) => w.id);
  // No identity: started by a build before 0026, so it could be this database's or another's. Alone
  // it counts as before; beside a workflow of another database it may well be that database's too.
  const ours = listed.filter((w) => w.database === identity || (w.database === null && foreign.length === 0));
  return {
    missing: ours.filter((w) => !present.has(w.id)).map((w) => w.id),
    foreign,
    checked: listed.length,
  };
}

/**
 * Runs the detection rule once and declares a recovery if it finds missing
 * orders. Never throws: a process must still start when Temporal is down
 * (the check then says so in the log and the process relies on the
 * operator's step).
 */
export async function detectRestore(
  pool: Pool,
  temporal: Client,
  taskQueue: string,
  who: string,
): Promise<RecoveryRow | null> {
  try {
    // Bounded: a process must start even when Temporal does not answer.
    const finding = await temporal.connection.withDeadline(Date.now() + DETECT_DEADLINE_MS, () =>
      findMissingOrders(pool, temporal, taskQueue),
    );
    if (finding.foreign.length > 0) {
      log.warn(
        "Temporal holds another database's order workflows on this namespace and task queue: not this " +
          "database's lost rows, so no restore is declared; if that database's workers still poll this " +
          'queue, give each database its own namespace or task queue',
        {
          namespace: temporal.options.namespace,
          taskQueue,
          foreign: finding.foreign.length,
          checked: finding.checked,
          example: finding.foreign[0],
        },
      );
    }
    if (finding.missing.length === 0) return null;
    const { row, declared } = await withClient(pool, (c) =>
      declareRecovery(c, {
        since: null,
        declaredBy:
          `${who}: ${finding.missing.length} of the latest ${finding.checked} order workflows have no ` +
          `order row (e.g. ${finding.missing[0]})`,
      }),
    );
    log.error(
      'the database lacks orders Temporal has: a restore is declared; run ops recover-after-restore',
      {
        missing: finding.missing.length,
        checked: finding.checked,
        example: finding.missing[0],
        recoveryId: row.id,
        declaredNow: declared,
      },
    );
    return row;
  } catch (err) {
    log.warn(
      'restore detection could not run; relying on the operator to declare a restore',
      errorFields(err),
    );
    return null;
  }
}

/**
 * The API's view of the gate: whether a recovery is pending, read at most
 * once per `ttlMs` (one indexed read; the gate only needs to close within a
 * second of a declaration, and to open again within a second of the end).
 */
export class RecoveryGate {
  #checkedAt = 0;
  #pending: RecoveryRow | null = null;
  #inflight: Promise<RecoveryRow | null> | undefined;

  constructor(
    private readonly pool: Pool,
    private readonly ttlMs = 1000,
  ) {}

  /** The pending recovery, or null. A read that fails is thrown (the caller's 5xx). */
  async pending(): Promise<RecoveryRow | null> {
    if (Date.now() - this.#checkedAt < this.ttlMs) return this.#pending;
    this.#inflight ??= withClient(this.pool, (c) => selectPendingRecovery(c))
      .then((row) => {
        this.#pending = row;
        this.#checkedAt = Date.now();
        return row;
      })
      .finally(() => {
        this.#inflight = undefined;
      });
    return this.#inflight;
  }
}

/**
 * Waits while a recovery is pending (a worker before it polls), checking
 * every `everyMs`; logs once when it starts waiting and once when it ends.
 * `signal` aborts the wait (shutdown).
 */
export async function waitWhileRecoveryPending(
  pool: Pool,
  opts: { everyMs?: number; signal?: AbortSignal } = {},
): Promise<void> {
  const everyMs = opts.everyMs ?? 2000;
  let waiting = false;
  while (!opts.signal?.aborted) {
    try {
      const pending = await withClient(pool, (c) => selectPendingRecovery(c));
      if (!pending) {
        if (waiting) log.info('the recovery after the restore has finished; starting');
        return;
      }
      if (!waiting) {
        log.warn('a recovery after a database restore is pending; waiting for it before polling', {
          recoveryId: pending.id,
          declaredBy: pending.declared_by,
        });
        waiting = true;
      }
    } catch (err) {
      // The database is what the worker needs anyway: keep waiting for it, as for the gate.
      log.warn('could not read the restore gate; retrying', errorFields(err));
    }
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
