/**
 * Recovery after a database restore (`ops recover-after-restore --since T0`,
 * docs/OPERATIONS.md "Backup and restore").
 *
 * onceflow's database restored to a backup taken at T0 has lost what was
 * written after T0: orders and refunds, their create (Idempotency-Key)
 * records, their start intents and their step records. The two other parties
 * kept theirs: Temporal its workflows and histories, the providers their
 * charges, refunds and messages. This rebuilds the database's part from
 * them, for every order and refund workflow that could have written after
 * T0 (started or closed after T0 minus a margin, or still running):
 *
 * - the row, from the create memo the accepting request left on the
 *   workflow (src/restore/memo.ts), or from the workflow's input when it
 *   has none; its status from the workflow's OrderStatus search attribute;
 * - the create record, from the memo: same key, same request, same stored
 *   202, so a client's retry replays its original answer;
 * - the start intent, recorded as started;
 * - each external step (charge, receipt, refund, refund receipt) the history
 *   shows: final where the history has its outcome (the activity's result,
 *   or a settled reconcile/settle); `unknown` where an attempt may have
 *   acted and the history has no outcome. An `unknown` record is never
 *   performed again before it is reconciled (the ledger's takeover rule), and
 *   its key window counts from the first attempt's time in the history, so a
 *   step whose provider key window has passed parks for an operator instead
 *   of charging again. Charges and refunds restored `unknown` are reconciled
 *   with the provider here, at once.
 *
 * Only this database's workflows are rebuilt: one whose memo names another
 * database (src/restore/memo.ts, migration 0026) is skipped and counted,
 * and one whose memo names none (started before 0026) is rebuilt as before.
 *
 * Rules: nothing is overwritten (every insert is ON CONFLICT DO NOTHING;
 * a surviving row is only brought forward to its workflow's status), so a
 * second run changes nothing; each rebuilt workflow leaves an audit row
 * (`restore`); the run is declared first (the restore gate: creates answer
 * 503 and workers wait) and cleared last, with its summary.
 * Local status steps are not rebuilt: the row's status comes from the
 * workflow, and a status step that runs again finds the row there.
 *
 * An order's charge and receipt are local activities (workflows/order.ts):
 * the history has a marker for each one that finished (its result or its
 * failure, not its arguments, which are rebuilt from the workflow's input),
 * and nothing for one in flight. So for a running order, the step that may
 * be in flight (the charge, before any charge marker; the receipt, after a
 * succeeded charge and before any receipt marker) is restored `unknown` too:
 * if it never started, reconciling finds nothing and the step performs under
 * its key.
 */
import type { Client, WorkflowExecutionInfo } from '@temporalio/client';
import type { temporal } from '@temporalio/proto';
import { withClient, withTransaction, type Pool, type PoolClient } from '../db/index.ts';
import type { Ledger, OperationRecord, Scope } from 'onceflow';
import {
  OPERATION_TYPES,
  TERMINAL_STATUSES,
  stepKeys,
  type OrderStatus,
  type OrderWorkflowInput,
} from '../orders/model.ts';
import { OrderLastErrorKey, OrderStatusKey } from '../orders/contract.ts';
import {
  REFUND_OPERATION_TYPES,
  REFUND_TERMINAL_STATUSES,
  REFUND_WORKFLOW_TYPE,
  refundStepKeys,
  type RefundStatus,
  type RefundWorkflowInput,
} from '../refunds/contract.ts';
import { insertAudit } from '../audit/sql.ts';
import { insertStartedOutbox } from '../outbox/sql.ts';
import { idempotentLedgerInput, readCreateMemo, readDatabaseIdentity, type CreateMemo } from './memo.ts';
import { completeRecovery, declareRecovery, selectDatabaseIdentity } from './sql.ts';
import { insertRestoredOrder, syncOrderFromWorkflow } from '../orders/sql.ts';
import { insertRestoredRefund, recomputeRefundedAmounts, syncRefundFromWorkflow } from '../refunds/sql.ts';
import type { PaymentProvider } from '../providers/types.ts';
import { reconcileStep } from '../steps/descriptor.ts';
import {
  lastStatusKey,
  orderLocalSteps,
  readStepTraces,
  rejectionReason,
  type Payloads,
  type StepTrace,
} from './history.ts';
import { recordRestoredEvent, reopenPendingDeliveries } from '../merchant-events/sql.ts';

const ORDER_WORKFLOW_TYPE = 'orderWorkflow';
/** Default margin before T0: a backup's "taken at" is rarely exact to the second. */
const DEFAULT_RESTORE_MARGIN_MS = 5 * 60_000;

export interface RecoverDeps {
  pool: Pool;
  ledger: Ledger;
  temporal: Client;
  payments: PaymentProvider;
  taskQueue: string;
  providerKeyWindowMs?: number;
}

export interface RecoverOptions {
  /** T0: when the backup the database was restored to was taken. */
  since: Date;
  /** How far before T0 to look. Default 5 minutes. */
  marginMs?: number;
  actor: string;
  source?: 'cli' | 'api';
  /** One line per rebuilt workflow, and every 50 workflows a count (stderr in the CLI). */
  progress?: (line: string) => void;
}

/** What one run did, per kind of thing it rebuilds. Also stored on the recovery's row. */
export interface RecoverySummary {
  recoveryId: string;
  since: string;
  listedFrom: string;
  /** This database's workflows, the ones rebuilt (including those whose memo names no database). */
  workflows: { orders: number; refunds: number };
  /**
   * Listed workflows whose memo names another database (migration 0026): not rebuilt, as their rows
   * belong to that database. Seen when databases share a namespace and task queue.
   */
  otherDatabase: { skipped: number; example: string | null };
  rows: { restored: number; broughtForward: number; unchanged: number };
  /** Merchant events of terminal statuses written to restored rows (the restore lost them with the rows). */
  events: { recorded: number };
  /** Pending deliveries whose start intent the backup held as started, due again for the relay. */
  deliveries: { reopened: number };
  createRecords: { restored: number; present: number; noMemo: number };
  outbox: { restored: number };
  steps: { final: number; unknown: number; present: number; settledExisting: number };
  reconciled: { settled: number; stillUnknown: number; failed: number };
  /** Workflows that could not be rebuilt, with why: run the command again once the cause is fixed. */
  errors: { workflowId: string; error: string }[];
  finishedAt: string;
}

/** The one line that says which workflows were skipped as another database's, and why; null if none. */
export function otherDatabaseLine(summary: Pick<RecoverySummary, 'otherDatabase'>): string | null {
  const { skipped, example } = summary.otherDatabase;
  if (skipped === 0) return null;
  return (
    `skipped ${skipped} workflows whose memo names another database (e.g. ${example}): their rows are ` +
    "that database's, which shares this Temporal namespace and task queue"
  );
}

export class Recovery {
  readonly #deps: RecoverDeps;

  constructor(deps: RecoverDeps) {
    this.#deps = deps;
  }

  #decode(payloads: temporal.api.common.v1.IPayloads | null | undefined): unknown {
    const p = payloads?.payloads?.[0];
    if (!p) return undefined;
    return this.#deps.temporal.options.loadedDataConverter.payloadConverter.fromPayload(p);
  }

  async #list(type: string, sinceIso: string): Promise<WorkflowExecutionInfo[]> {
    const q = this.#deps.taskQueue.replace(/'/g, "''");
    const query =
      `WorkflowType = '${type}' AND TaskQueue = '${q}' AND ` +
      `(StartTime >= '${sinceIso}' OR CloseTime >= '${sinceIso}' OR ExecutionStatus = 'Running')`;
    const out: WorkflowExecutionInfo[] = [];
    for await (const wf of this.#deps.temporal.workflow.list({ query })) out.push(wf);
    // Oldest first: an order before the refunds of it, and progress that reads in time order.
    return out.sort((a, b) => a.startTime.getTime() - b.startTime.getTime());
  }

  async run(opts: RecoverOptions): Promise<RecoverySummary> {
    const { pool } = this.#deps;
    const progress = opts.progress ?? (() => undefined);
    const marginMs = opts.marginMs ?? DEFAULT_RESTORE_MARGIN_MS;
    const listedFrom = new Date(opts.since.getTime() - marginMs);
    const identity = await withClient(pool, (c) => selectDatabaseIdentity(c));
    // Without it no workflow can be told from another database's, whose rows must not land here.
    if (!identity) throw new Error('this database has no identity: its database_identity row is gone');
    const { row: recovery, declared } = await withClient(pool, (c) =>
      declareRecovery(c, { since: opts.since, declaredBy: `ops recover-after-restore (${opts.actor})` }),
    );
    progress(
      `${declared ? 'declared' : 'joined pending'} recovery ${recovery.id}: creates answer 503 and workers ` +
        `wait until it finishes`,
    );
    const sinceIso = listedFrom.toISOString();
    const listedOrders = await this.#list(ORDER_WORKFLOW_TYPE, sinceIso);
    const listedRefunds = await this.#list(REFUND_WORKFLOW_TYPE, sinceIso);
    progress(
      `Temporal lists ${listedOrders.length} order and ${listedRefunds.length} refund workflows active ` +
        `since ${sinceIso}`,
    );
    // Another database's workflows on this namespace and task queue (one dropped and created again,
    // say): rebuilding them would give this database orders, records and audit rows that aren't its.
    const foreign = (wf: WorkflowExecutionInfo) => {
      const named = readDatabaseIdentity(wf.memo);
      return named !== null && named !== identity;
    };
    const orders = listedOrders.filter((wf) => !foreign(wf));
    const refunds = listedRefunds.filter((wf) => !foreign(wf));
    const skipped = [...listedOrders, ...listedRefunds].filter(foreign);
    const summary: RecoverySummary = {
      recoveryId: recovery.id,
      since: opts.since.toISOString(),
      listedFrom: sinceIso,
      workflows: { orders: orders.length, refunds: refunds.length },
      otherDatabase: { skipped: skipped.length, example: skipped[0]?.workflowId ?? null },
      rows: { restored: 0, broughtForward: 0, unchanged: 0 },
      events: { recorded: 0 },
      deliveries: { reopened: 0 },
      createRecords: { restored: 0, present: 0, noMemo: 0 },
      outbox: { restored: 0 },
      steps: { final: 0, unknown: 0, present: 0, settledExisting: 0 },
      reconciled: { settled: 0, stillUnknown: 0, failed: 0 },
      errors: [],
      finishedAt: '',
    };
    const otherLine = otherDatabaseLine(summary);
    if (otherLine) progress(otherLine);
    const toReconcile: StepTrace[] = [];
    const receiptsAfter: { workflowId: string; charge: StepTrace }[] = [];
    const refundedOrders = new Map<string, { tenantId: string; orderId: string }>();
    const all = [...orders.map((w) => ['order', w] as const), ...refunds.map((w) => ['refund', w] as const)];
    let done = 0;
    for (const [kind, wf] of all) {
      try {
        const rebuilt = await this.#rebuild(kind, wf, opts, recovery.id, summary);
        toReconcile.push(...rebuilt.unknownSteps.filter((s) => s.reconcile));
        if (rebuilt.chargeBeforeReceipt)
          receiptsAfter.push({ workflowId: wf.workflowId, charge: rebuilt.chargeBeforeReceipt });
        if (rebuilt.refundOf)
          refundedOrders.set(`${rebuilt.refundOf.tenantId}/${rebuilt.refundOf.orderId}`, rebuilt.refundOf);
        if (rebuilt.line) progress(rebuilt.line);
      } catch (err) {
        const error = err instanceof Error ? err.message : String(err);
        summary.errors.push({ workflowId: wf.workflowId, error });
        progress(`${wf.workflowId}: NOT rebuilt: ${error}`);
      }
      if (++done % 50 === 0) progress(`${done}/${all.length} workflows`);
    }
    await withClient(pool, (c) => recomputeRefundedAmounts(c, [...refundedOrders.values()]));
    for (const step of toReconcile) await this.#reconcile(step, summary, progress);
    for (const { workflowId, charge } of receiptsAfter) {
      try {
        await this.#restoreReceiptAfter(charge, !toReconcile.includes(charge), summary, progress);
      } catch (err) {
        const error = err instanceof Error ? err.message : String(err);
        summary.errors.push({ workflowId, error });
        progress(`${workflowId}: receipt NOT restored: ${error}`);
      }
    }
    // Every pending delivery, not only the rebuilt workflows': its run may have ended after T0.
    summary.deliveries.reopened = await withClient(pool, (c) => reopenPendingDeliveries(c));
    if (summary.deliveries.reopened > 0)
      progress(`${summary.deliveries.reopened} pending merchant deliveries due again for the relay`);
    summary.finishedAt = new Date().toISOString();
    if (summary.errors.length === 0) {
      await withClient(pool, (c) => completeRecovery(c, recovery.id, summary));
      progress(`recovery ${recovery.id} finished: creates and workers may run again`);
    } else {
      progress(
        `recovery ${recovery.id} stays pending: ${summary.errors.length} workflows could not be rebuilt; ` +
          'fix the cause and run the command again (it is idempotent)',
      );
    }
    return summary;
  }

  /** One workflow: its row, create record, start intent and external steps, then its audit row. */
  async #rebuild(
    kind: 'order' | 'refund',
    wf: WorkflowExecutionInfo,
    opts: RecoverOptions,
    recoveryId: string,
    summary: RecoverySummary,
  ): Promise<{
    unknownSteps: StepTrace[];
    chargeBeforeReceipt?: StepTrace;
    refundOf?: { tenantId: string; orderId: string };
    line?: string;
  }> {
    const { temporal, ledger, pool } = this.#deps;
    const handle = temporal.workflow.getHandle(wf.workflowId, wf.runId);
    const [history, described] = await Promise.all([handle.fetchHistory(), handle.describe()]);
    const events = history.events ?? [];
    const started = events[0]?.workflowExecutionStartedEventAttributes;
    if (!started) throw new Error('the history has no start event');
    const input = this.#decode(started.input) as OrderWorkflowInput | RefundWorkflowInput;
    const memo = readCreateMemo(described.memo ?? wf.memo);
    const saStatus = described.typedSearchAttributes.get(OrderStatusKey);
    const lastError = described.typedSearchAttributes.get(OrderLastErrorKey) ?? null;
    const tenantId = input.tenantId;
    const decode = (payloads: Payloads) => this.#decode(payloads);
    const steps = readStepTraces(
      events,
      tenantId,
      decode,
      kind === 'order' ? orderLocalSteps(wf, input as OrderWorkflowInput) : undefined,
    );
    const done: string[] = [];
    // The event of the terminal status a restored row now has, under its status write's key.
    const terminalEvent =
      (kind: 'order' | 'refund', id: string, keyIn: (epoch: number) => string) => (c: PoolClient) =>
        recordRestoredEvent(c, {
          kind,
          terminal: kind === 'order' ? TERMINAL_STATUSES : REFUND_TERMINAL_STATUSES,
          tenantId,
          id,
          stepKey: lastStatusKey(events, decode, keyIn),
          taskQueue: wf.taskQueue,
        });

    let rowChanged: RestoredRow;
    let refundOf: { tenantId: string; orderId: string } | undefined;
    if (kind === 'order') {
      const o = input as OrderWorkflowInput;
      const body = memoBody(memo);
      const charge = steps.find((s) => s.operationType === OPERATION_TYPES.charge);
      const receipt = steps.find((s) => s.operationType === OPERATION_TYPES.receipt);
      const status = saStatus ?? 'accepted';
      const row = {
        tenantId,
        orderId: o.orderId,
        workflowId: wf.workflowId,
        status,
        amount: o.amount,
        currency: o.currency,
        customerId: o.customer.id,
        customerEmail: o.customer.email,
        items: Array.isArray(body?.items) ? (body.items as unknown[]) : [],
        paymentMethod: o.paymentMethod,
        merchantReference: typeof body?.merchantReference === 'string' ? body.merchantReference : null,
        chargeId: charge?.final?.state === 'succeeded' ? charge.final.providerRef : null,
        receiptId: receipt?.final?.providerRef ?? null,
        lastError: status === 'needs_attention' || status === 'rejected' ? lastError : null,
        reason: status === 'rejected' ? rejectionReason(charge) : null,
        createdAt: memo ? new Date(memo.createdAt) : wf.startTime,
      };
      rowChanged = await restoreRow(
        pool,
        (c) => insertRestoredOrder(c, row),
        (c) => syncOrderFromWorkflow(c, row),
        terminalEvent('order', o.orderId, (n) => stepKeys.status(wf.workflowId, status as OrderStatus, n)),
      );
    } else {
      const r = input as RefundWorkflowInput;
      const refundStep = steps.find((s) => s.operationType === REFUND_OPERATION_TYPES.providerRefund);
      const status = saStatus?.startsWith('refund:') ? saStatus.slice('refund:'.length) : 'pending';
      const row = {
        tenantId,
        refundId: r.refundId,
        orderId: r.orderId,
        workflowId: wf.workflowId,
        status,
        amount: r.amount,
        currency: r.currency,
        reason: r.reason ?? null,
        providerRefundId: refundStep?.final?.state === 'succeeded' ? refundStep.final.providerRef : null,
        lastError: status === 'needs_attention' ? lastError : null,
        createdAt: memo ? new Date(memo.createdAt) : wf.startTime,
      };
      rowChanged = await restoreRow(
        pool,
        (c) => insertRestoredRefund(c, row),
        (c) => syncRefundFromWorkflow(c, row),
        terminalEvent('refund', r.refundId, (n) =>
          refundStepKeys.status(wf.workflowId, status as RefundStatus, n),
        ),
      );
      refundOf = { tenantId, orderId: r.orderId };
    }
    summary.rows[rowChanged.row]++;
    if (rowChanged.row !== 'unchanged') done.push(rowChanged.row === 'restored' ? 'row' : 'status');
    if (rowChanged.event) {
      summary.events.recorded++;
      done.push('merchant event');
    }

    if (memo) {
      const restored = await ledger.restore(
        { tenantId, operationType: memo.operationType, key: memo.key },
        idempotentLedgerInput(memo.request),
        { state: 'succeeded', external: false, result: memo.response, createdAt: new Date(memo.createdAt) },
      );
      if (restored) {
        summary.createRecords.restored++;
        done.push('create record');
      } else summary.createRecords.present++;
    } else summary.createRecords.noMemo++;

    const outbox = await withClient(pool, (c) =>
      insertStartedOutbox(c, {
        workflowId: wf.workflowId,
        tenantId,
        orderId: input.orderId,
        workflowType: wf.type,
        taskQueue: wf.taskQueue,
        input,
        memo: described.memo ?? null,
        startedAt: wf.startTime,
      }),
    );
    if (outbox) {
      summary.outbox.restored++;
      done.push('start intent');
    }

    const unknownSteps: StepTrace[] = [];
    for (const step of steps) {
      const outcome = await this.#restoreStep(tenantId, step);
      if (outcome === 'final' || outcome === 'unknown') {
        summary.steps[outcome]++;
        done.push(`${step.operationType} ${outcome}`);
        if (outcome === 'unknown') unknownSteps.push(step);
      } else if (outcome === 'settledExisting') {
        summary.steps.settledExisting++;
        done.push(`${step.operationType} settled`);
      } else if (outcome === 'present') summary.steps.present++;
    }

    const chargeBeforeReceipt = steps.find((s) => s.receiptAfter);
    const extra = {
      ...(refundOf ? { refundOf } : {}),
      ...(chargeBeforeReceipt ? { chargeBeforeReceipt } : {}),
    };
    if (done.length === 0) return { unknownSteps, ...extra };
    await withTransaction(pool, (tx) =>
      insertAudit(tx, {
        actor: opts.actor,
        source: opts.source ?? 'cli',
        actorCredential: 'self_declared',
        action: 'restore',
        reason: `recover-after-restore --since ${opts.since.toISOString()} (recovery ${recoveryId})`,
        tenantId,
        operationType: null,
        operationKey: null,
        workflowId: wf.workflowId,
        before: null,
        after: { restored: done, status: saStatus ?? null, createMemo: memo !== null },
      }),
    );
    return {
      unknownSteps,
      ...extra,
      line: `${wf.workflowId}: ${done.join(', ')}`,
    };
  }

  /**
   * The receipt a running order's unfinished workflow task may have sent after its charge (see
   * StepTrace.receiptAfter): restored `unknown` once the charge's record, as reconciling (now or
   * in an earlier run) left it, says succeeded with a charge ID. Before that the receipt cannot
   * have been sent: it needs the charge's answer.
   */
  async #restoreReceiptAfter(
    charge: StepTrace,
    reconcileFirst: boolean,
    summary: RecoverySummary,
    progress: (line: string) => void,
  ): Promise<void> {
    if (!charge.receiptAfter) return;
    const scope = { tenantId: charge.tenantId, operationType: charge.operationType, key: charge.key };
    let record = await this.#deps.ledger.get(scope);
    // A charge an earlier run left unknown (its provider did not answer then): ask again.
    if (reconcileFirst && record?.state === 'unknown') {
      await this.#reconcile(charge, summary, progress);
      record = await this.#deps.ledger.get(scope);
    }
    if (record?.state === 'failed') return;
    if (record?.state !== 'succeeded' || !record.providerRef) {
      progress(
        `${charge.key}: not found succeeded, so its receipt is not restored (it needs the charge's ID); ` +
          'if the provider could not tell yet (unreachable, or a search index behind), run the recovery ' +
          'again before starting the workers',
      );
      return;
    }
    const receipt = charge.receiptAfter(record.providerRef);
    const outcome = await this.#restoreStep(charge.tenantId, receipt);
    if (outcome === 'unknown') {
      summary.steps.unknown++;
      progress(`${receipt.key}: restored unknown: the charge's workflow task may have sent it`);
    } else if (outcome === 'present') summary.steps.present++;
  }

  /** Restores one step's record: final if the history has the outcome, else unknown if it may have acted. */
  async #restoreStep(
    tenantId: string,
    step: StepTrace,
  ): Promise<'final' | 'unknown' | 'present' | 'settledExisting' | 'none'> {
    const { ledger } = this.#deps;
    const scope: Scope = { tenantId, operationType: step.operationType, key: step.key };
    if (step.final) {
      const restored = await ledger.restore(scope, step.input, {
        state: step.final.state,
        external: true,
        result: step.final.result,
        providerRef: step.final.providerRef,
        createdAt: step.firstScheduledAt,
        completedAt: step.final.at,
      });
      if (restored) return 'final';
      // The restored database has an older record of it (a claim, or unknown): settle it with the
      // outcome the history proves, unless a live attempt holds it (its owner completes it).
      const current = await ledger.get(scope);
      if (current && !isFinal(current)) {
        try {
          await ledger.settle(scope, {
            state: step.final.state,
            result: step.final.result,
            ...(step.final.providerRef ? { providerRef: step.final.providerRef } : {}),
          });
          return 'settledExisting';
        } catch {
          return 'present';
        }
      }
      return 'present';
    }
    if (step.refused) return 'none';
    const restored = await ledger.restore(scope, step.input, {
      state: 'unknown',
      external: true,
      error: {
        reason: 'restored_after_restore',
        detail: 'an attempt may have acted; reconcile before acting',
      },
      createdAt: step.firstScheduledAt,
    });
    return restored ? 'unknown' : 'present';
  }

  async #reconcile(
    step: StepTrace,
    summary: RecoverySummary,
    progress: (line: string) => void,
  ): Promise<void> {
    const { ledger, payments, providerKeyWindowMs } = this.#deps;
    if (!step.reconcile) return;
    try {
      const r = await reconcileStep(
        step.reconcile,
        { ledger, provider: payments, keyWindowMs: providerKeyWindowMs },
        { tenantId: step.tenantId, key: step.key, chargeId: step.chargeId },
      );
      if (r.settled) summary.reconciled.settled++;
      else summary.reconciled.stillUnknown++;
      progress(
        `${step.key}: reconciled: ${r.settled ? r.outcome : `still unknown${r.error ? ` (${r.error})` : ''}`}`,
      );
    } catch (err) {
      summary.reconciled.failed++;
      progress(
        `${step.key}: reconcile failed, left unknown: ${err instanceof Error ? err.message : String(err)}`,
      );
    }
  }
}

interface RestoredRow {
  row: 'restored' | 'broughtForward' | 'unchanged';
  /** The terminal status's merchant event was recorded (the restore had lost it). */
  event: boolean;
}

/**
 * A row inserted where a restore lost it, else brought forward to its workflow; in the same
 * transaction, as its transition would have, the event of the terminal status it now has. A row the
 * restore kept as it was has its event already (recorded with its status).
 */
async function restoreRow(
  pool: Pool,
  insert: (c: PoolClient) => Promise<boolean>,
  sync: (c: PoolClient) => Promise<boolean>,
  recordEvent: (c: PoolClient) => Promise<boolean>,
): Promise<RestoredRow> {
  return withTransaction(pool, async (c) => {
    const row = (await insert(c)) ? 'restored' : (await sync(c)) ? 'broughtForward' : 'unchanged';
    return { row, event: row !== 'unchanged' && (await recordEvent(c)) };
  });
}

/** The stored 202 body of a create memo. */
function memoBody(memo: CreateMemo | null): Record<string, unknown> | null {
  const response = memo?.response as { body?: Record<string, unknown> } | null | undefined;
  return response?.body ?? null;
}

function isFinal(r: OperationRecord): boolean {
  return r.state === 'succeeded' || r.state === 'failed';
}
