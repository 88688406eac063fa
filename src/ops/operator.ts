/**
 * The operator's recovery path: look at uncertain work, reconcile it, resolve
 * an unknown outcome, re-drive a parked order. The CLI (scripts/ops.ts) and
 * the admin routes (routes.ts) are thin shells over this class.
 *
 * Invariants
 * - Identity is kept: every action works on the original scope (tenant,
 *   operation type, key) and the original workflow. Nothing creates a new key
 *   and nothing deletes a row.
 * - Every action writes an audit row (who, what, why, before, after). Where
 *   the change is a local write (resolve), the audit row commits in the SAME
 *   transaction as the change. A reconcile's change is the ledger's own
 *   fenced completion with the provider's answer (a provider call sits in the
 *   middle, so no transaction can span it); its audit row follows at once.
 *   A re-drive calls Temporal: its intent row commits before the call and
 *   its result is a second row (docs/ARCHITECTURE.md: no transaction across
 *   a call to Temporal or a provider).
 * - Decisions need a reason: resolve and redrive refuse an empty one before
 *   touching anything.
 */
import { userInfo } from 'node:os';
import { WorkflowNotFoundError, WorkflowUpdateFailedError, type Client } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { withClient, withTransaction, type Pool, type PoolClient } from '../db/index.ts';
import {
  downstreamKey,
  isLedgerError,
  type Json,
  type Ledger,
  type OperationRecord,
  type OperationState,
  type ReconcileOutcome,
  type Scope,
} from 'onceflow';
import {
  ORDER_REASONS,
  OPERATION_TYPES,
  orderWorkflowId,
  stepKeys,
  type OrderStatus,
} from '../orders/model.ts';
import { listParkedWorkflows, type ParkedWorkflow } from '../orders/attention.ts';
import { readOrderStepRecords } from '../orders/step-records.ts';
import {
  REFUND_KEY,
  REFUND_OPERATION_TYPES,
  refundEventSignal,
  refundRedriveUpdate,
  refundStepKeys,
  refundWorkflowId,
  type RefundRedriveAccepted,
  type RefundStatus,
} from '../refunds/contract.ts';
import { getRefundById, selectRefundsNeedingAttention, type RefundRow } from '../refunds/sql.ts';
import type {
  Charge,
  EmailProvider,
  Message,
  PaymentProvider,
  ProviderCapabilities,
  Refund,
} from '../providers/types.ts';
import { keyWindowLeftMs, previewRedrive, type RedrivePreview } from './preview.ts';
import { chargeReconciler, findCharge, settledCharge } from '../steps/payment.ts';
import { findRefund, refundReconciler, settledRefund } from '../steps/refund.ts';
import { findMessage, receiptKeyWindowMs, receiptReconciler, settledReceipt } from '../steps/receipt.ts';
import { FAILURE, paymentEventSignal, redriveUpdate, type RedriveAccepted } from '../orders/contract.ts';
import {
  insertAudit,
  selectAudit,
  type ActorCredential,
  type AuditAction,
  type AuditEntry,
  type AuditFilter,
  type AuditSource,
} from '../audit/sql.ts';
import {
  getOrder,
  selectOrderByWorkflowId,
  selectOrdersByWorkflowIds,
  selectOrdersInStatus,
  type OrderRow,
} from '../orders/sql.ts';
import { OpsError } from './errors.ts';

/** An order as the operator's tools show it (camelCase; the row's columns the operator needs). */
interface OrderSummary {
  tenantId: string;
  orderId: string;
  workflowId: string;
  status: OrderStatus;
  statusSeq: number;
  amount: number;
  currency: string;
  chargeId: string | null;
  receiptId: string | null;
  lastError: string | null;
  /** Machine-readable reason of a rejected / needs_attention order (ORDER_REASONS). */
  reason: string | null;
  createdAt: Date;
  updatedAt: Date;
}

/** GET /admin/orders/{tenant}/{id}: the order, its step records, and its workflow's history link. */
export interface OrderConsoleView {
  order: OrderSummary;
  temporalUiUrl: string;
  steps: (Omit<OperationRecord, 'ownerToken'> & { keyWindowLeftMs: number | null })[];
}

function orderSummary(row: OrderRow): OrderSummary {
  return {
    tenantId: row.tenant_id,
    orderId: row.id,
    workflowId: row.workflow_id,
    status: row.status,
    statusSeq: row.status_seq,
    amount: Number(row.amount),
    currency: row.currency,
    chargeId: row.charge_id,
    receiptId: row.receipt_id,
    lastError: row.last_error,
    reason: row.reason,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

export interface OperatorDeps {
  pool: Pool;
  ledger: Ledger;
  temporal: Client;
  payments: PaymentProvider;
  email: EmailProvider;
  /** For links into the Temporal UI: config.temporal.uiUrl and config.temporal.namespace. */
  temporalUi: { url: string; namespace: string };
  /** Recorded on audit rows unless a call says otherwise. Default 'cli'. */
  source?: AuditSource;
  /** Bound on each Temporal call (signal). Default 10 000 ms. */
  temporalTimeoutMs?: number;
  /** The providers' idempotency-key window; default the ledger's (24 h). */
  providerKeyWindowMs?: number;
}

export interface ActorOptions {
  /** Who acts. Required, non-empty. */
  actor: string;
  source?: AuditSource;
  /**
   * How `actor` was established: the admin API passes the credential it
   * verified (`operator_token`, `admin_token`); anything else is a claim
   * (`self_declared`, the default: the CLI's --actor or OS user).
   */
  actorCredential?: ActorCredential;
}

export interface ListOperationsFilter {
  state?: OperationState;
  /** Only records created more than this many seconds ago. */
  olderThanSeconds?: number;
  operationType?: string;
  tenantId?: string;
  keyPrefix?: string;
  /** Default 100, at most 1000. */
  limit?: number;
}

export interface OperationListItem extends OperationRecord {
  ageSeconds: number;
  workflowId: string | null;
}

export interface ProviderView {
  provider: 'payments' | 'email' | null;
  /** The downstream key the lookup used. */
  lookedUpBy: string | null;
  found: boolean;
  /** The provider's object (a Charge, a Refund or a Message), as the provider reports it now. */
  object: Charge | Refund | Message | null;
  /** Set when the lookup failed; the rest of the story is still shown. */
  error?: string;
}

export interface OperationStory {
  record: OperationRecord;
  downstreamKey: string | null;
  provider: ProviderView;
  workflowId: string | null;
  temporalUiUrl: string | null;
  order: OrderSummary | null;
  /** This operation's audit rows, newest first. */
  audit: AuditEntry[];
}

interface ActionResult {
  before: OperationRecord;
  after: OperationRecord;
  changed: boolean;
  audit: AuditEntry;
}

export interface ReconcileResult extends ActionResult {
  /** The provider lookup failed; the record is unchanged (still unresolved). */
  error?: string;
  /**
   * What the provider answered: settled, pending, not_found; skipped when it
   * was not asked (final record, or a live attempt holds it); error when the
   * lookup failed.
   */
  providerAnswer: 'settled' | 'pending' | 'not_found' | 'skipped' | 'error';
  /** What happens next, in words, when the record is still unresolved. */
  next?: string;
}

export interface ResolveResult extends ActionResult {
  workflowId: string | null;
  /**
   * True when the workflow was told: an order's by the paymentEvent signal, a refund's by the
   * refundEvent signal (source 'operator').
   */
  signalled: boolean;
  /** Why the workflow was not signalled, if it should have been. The ledger change stands either way. */
  signalError?: string;
}

export interface RedriveResult {
  order: OrderSummary;
  workflowId: string;
  /** The result row (`redrive`). */
  audit: AuditEntry;
  /** The intent row (`redrive_requested`), committed before Temporal was called. */
  intent: AuditEntry;
  /** The workflow's answer to the re-drive update: where it was parked. */
  accepted: RedriveAccepted;
}

/** A refund as the operator's tools show it. */
interface RefundSummary {
  tenantId: string;
  orderId: string;
  refundId: string;
  workflowId: string;
  status: RefundStatus;
  amount: number;
  currency: string;
  providerRefundId: string | null;
  lastError: string | null;
  updatedAt: Date;
}

function refundSummary(r: RefundRow): RefundSummary {
  return {
    tenantId: r.tenant_id,
    orderId: r.order_id,
    refundId: r.id,
    workflowId: r.workflow_id,
    status: r.status,
    amount: Number(r.amount),
    currency: r.currency,
    providerRefundId: r.provider_refund_id,
    lastError: r.last_error,
    updatedAt: r.updated_at,
  };
}

export interface RefundRedriveResult {
  refund: RefundSummary;
  workflowId: string;
  /** The result row (`redrive`). */
  audit: AuditEntry;
  /** The intent row (`redrive_requested`), committed before Temporal was called. */
  intent: AuditEntry;
  /** The workflow's answer to the re-drive update: where it was parked. */
  accepted: RefundRedriveAccepted;
}

export interface AttentionItem extends OrderSummary {
  temporalUiUrl: string;
  /**
   * Where the order was found: 'order_row' (the row says needs_attention) or
   * 'workflow' (only Temporal visibility knows: the workflow parked because
   * it could not write its status; the row, if any, shows an older status).
   */
  source: 'order_row' | 'workflow';
}

export interface RefundAttentionItem {
  kind: 'refund';
  tenantId: string;
  orderId: string;
  refundId: string;
  workflowId: string;
  status: RefundStatus;
  amount: number;
  currency: string;
  lastError: string | null;
  updatedAt: Date;
  temporalUiUrl: string;
  /** The provider refund step's operation key (type payment.refund): what reconcile and resolve take. */
  operationKey: string;
}

export interface AttentionList {
  items: AttentionItem[];
  /** Set when Temporal visibility could not be read: only the orders table was listed. */
  visibilityError?: string;
}

const EXTERNAL_TYPES = new Set<string>([
  OPERATION_TYPES.charge,
  OPERATION_TYPES.receipt,
  REFUND_OPERATION_TYPES.providerRefund,
  REFUND_OPERATION_TYPES.receipt,
]);
const ORDER_KEY = /^order\/([^/]+)\/([^/]+)\//;

/**
 * The workflow a step key belongs to: an order's (`order/<tenant>/<order>/...`)
 * or a refund's (`refund/<tenant>/<refund>/...`); null for other keys.
 */
function workflowIdForKey(scope: Scope): string | null {
  const order = ORDER_KEY.exec(scope.key);
  if (order && order[1] === scope.tenantId) return orderWorkflowId(order[1], order[2]!);
  const refund = REFUND_KEY.exec(scope.key);
  if (refund && refund[1] === scope.tenantId) return refundWorkflowId(refund[1], refund[2]!);
  return null;
}

function isRefundScope(scope: Scope): boolean {
  return (
    scope.operationType === REFUND_OPERATION_TYPES.providerRefund ||
    scope.operationType === REFUND_OPERATION_TYPES.receipt
  );
}

export function defaultActor(): string {
  try {
    return userInfo().username || 'unknown';
  } catch {
    return 'unknown';
  }
}

function isFinal(state: OperationState): boolean {
  return state === 'succeeded' || state === 'failed';
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function requireText(value: unknown, what: string, max = 1000): string {
  if (typeof value !== 'string' || value.trim() === '') {
    throw new OpsError('invalid_input', `${what} is required and must not be empty`);
  }
  const text = value.trim();
  if (text.length > max) throw new OpsError('invalid_input', `${what} must be at most ${max} characters`);
  return text;
}

/** Ledger errors, in the operator's vocabulary. */
function fromLedger(err: unknown): unknown {
  if (!isLedgerError(err)) return err;
  switch (err.code) {
    case 'not_found':
      return new OpsError('not_found', 'no operation under this scope', { cause: err });
    case 'invalid_key':
    case 'invalid_input':
      return new OpsError('invalid_input', err.message, { cause: err });
    case 'invalid_state':
      return new OpsError('invalid_state', err.message, { cause: err });
    case 'in_progress':
      return new OpsError(
        'in_progress',
        'a live attempt holds this operation; it will complete or expire shortly, try again',
        { cause: err, retryAfterMs: err.retryAfterMs },
      );
    default:
      return new OpsError('unavailable', err.message, { cause: err });
  }
}

export class Operator {
  readonly #deps: OperatorDeps;

  constructor(deps: OperatorDeps) {
    this.#deps = deps;
  }

  temporalUiUrl(workflowId: string): string {
    const { url, namespace } = this.#deps.temporalUi;
    return `${url.replace(/\/+$/, '')}/namespaces/${encodeURIComponent(namespace)}/workflows/${encodeURIComponent(workflowId)}`;
  }

  async listOperations(filter: ListOperationsFilter = {}): Promise<OperationListItem[]> {
    // Capped at ten years: beyond that Postgres' interval arithmetic overflows.
    if (
      filter.olderThanSeconds !== undefined &&
      !(filter.olderThanSeconds >= 0 && filter.olderThanSeconds <= 315_360_000)
    ) {
      throw new OpsError('invalid_input', 'olderThanSeconds must be between 0 and 315360000 (ten years)');
    }
    const records = await this.#ledger(() =>
      this.#deps.ledger.list({
        // An empty filter value means "any", as an absent one does.
        state: filter.state || undefined,
        operationType: filter.operationType || undefined,
        tenantId: filter.tenantId || undefined,
        keyPrefix: filter.keyPrefix || undefined,
        olderThanMs: filter.olderThanSeconds === undefined ? undefined : filter.olderThanSeconds * 1000,
        limit: filter.limit ?? 100,
      }),
    );
    const now = Date.now();
    return records.map((r) => ({
      ...r,
      ageSeconds: Math.max(0, Math.round((now - r.createdAt.getTime()) / 1000)),
      workflowId: workflowIdForKey(r),
    }));
  }

  /** One operation's whole story: record, provider's view by downstream key, workflow, order, audit. */
  async showOperation(scope: Scope): Promise<OperationStory> {
    const record = await this.#get(scope);
    const external = EXTERNAL_TYPES.has(scope.operationType);
    const dk = record.downstreamKey ?? (external ? downstreamKey(scope) : null);
    const workflowId = workflowIdForKey(scope);
    const [provider, order, audit] = await Promise.all([
      this.#providerView(scope.operationType, dk),
      workflowId && !isRefundScope(scope)
        ? withClient(this.#deps.pool, async (c) => {
            const row = await selectOrderByWorkflowId(c, workflowId);
            return row ? orderSummary(row) : null;
          })
        : null,
      withClient(this.#deps.pool, (c) =>
        selectAudit(c, { tenantId: scope.tenantId, operationKey: scope.key, limit: 50 }),
      ),
    ]);
    return {
      record,
      downstreamKey: dk,
      provider,
      workflowId,
      temporalUiUrl: workflowId ? this.temporalUiUrl(workflowId) : null,
      order,
      audit: audit.filter((a) => a.operationType === scope.operationType),
    };
  }

  /**
   * Asks the provider now (by the downstream key) and stores its answer. Never
   * performs anything. A final record, or one a live attempt holds, comes back
   * unchanged; a provider that does not know the key leaves it unknown.
   */
  async reconcileNow(scope: Scope, opts: ActorOptions & { reason?: string }): Promise<ReconcileResult> {
    const actor = requireText(opts.actor, 'actor', 200);
    const reason = opts.reason?.trim() ? requireText(opts.reason, 'reason') : null;
    const reconcile = await this.#reconciler(scope);
    const before = await this.#get(scope);
    let after: OperationRecord;
    let error: string | undefined;
    let providerAnswer: ReconcileResult['providerAnswer'];
    let next: string | undefined;
    try {
      const r = await this.#deps.ledger.reconcileUnresolved(scope, reconcile, {
        keyWindowMs: this.#deps.providerKeyWindowMs,
      });
      after = r.record;
      providerAnswer = r.answer;
      next = nextStep(scope, r.answer, r.performable);
    } catch (err) {
      if (!isLedgerError(err, 'outcome_unknown')) throw fromLedger(err);
      error = `provider lookup failed: ${message(err.cause ?? err)}`;
      providerAnswer = 'error';
      after = await this.#get(scope);
    }
    const audit = await withClient(this.#deps.pool, (c) =>
      insertAudit(c, {
        actor,
        source: opts.source ?? this.#deps.source ?? 'cli',
        actorCredential: opts.actorCredential ?? 'self_declared',
        action: 'reconcile',
        reason,
        tenantId: scope.tenantId,
        operationType: scope.operationType,
        operationKey: scope.key,
        workflowId: workflowIdForKey(scope),
        before: auditView(before),
        after: {
          ...auditView(after),
          providerAnswer,
          // Stored as JSON: an undefined field is simply absent.
          reconcileError: error,
          next,
        },
      }),
    );
    // A refund's workflow reconciles on timers, or waits parked: tell it the record is settled now.
    if (
      before.state !== after.state &&
      isFinal(after.state) &&
      scope.operationType === REFUND_OPERATION_TYPES.providerRefund
    ) {
      await this.#tellRefund(scope, after.state as 'succeeded' | 'failed', audit, actor, reason ?? undefined);
    }
    return {
      before,
      after,
      changed: before.state !== after.state,
      audit,
      providerAnswer,
      error,
      next,
    };
  }

  /**
   * Settles an unknown (or abandoned in_progress) record as the operator
   * decided, with a required reason. The audit row and the ledger change
   * commit together; then the order workflow is signalled (paymentEvent,
   * source 'operator', eventId = the audit row's id) so a parked order moves
   * on. A final record is refused: a decision never overwrites an outcome.
   */
  async resolveUnknown(
    scope: Scope,
    outcome: 'succeeded' | 'failed',
    opts: ActorOptions & { reason: string; chargeId?: string; providerRef?: string },
  ): Promise<ResolveResult> {
    const reason = requireText(opts.reason, 'reason');
    const actor = requireText(opts.actor, 'actor', 200);
    if (outcome !== 'succeeded' && outcome !== 'failed') {
      throw new OpsError('invalid_input', "outcome must be 'succeeded' or 'failed'");
    }
    const ref = (opts.chargeId ?? opts.providerRef)?.trim() || undefined;
    const result = this.#settledResult(scope.operationType, outcome, ref);
    const workflowId = workflowIdForKey(scope);
    await this.#refuseContradiction(scope, outcome);

    const { before, after, audit } = await withTransaction(
      this.#deps.pool,
      async (tx: PoolClient) => {
        let settled;
        try {
          settled = await this.#deps.ledger.settle(
            scope,
            { state: outcome, result, providerRef: ref },
            { tx },
          );
        } catch (err) {
          throw fromLedger(err);
        }
        const prior = settled.before;
        if (!prior || isFinal(prior.state)) {
          // settle() is idempotent for the same outcome; an operator decision is not: refuse, write nothing.
          throw new OpsError(
            'invalid_state',
            `operation is already ${prior?.state ?? 'settled'}; only unknown or in_progress records can be resolved`,
          );
        }
        const entry = await insertAudit(tx, {
          actor,
          source: opts.source ?? this.#deps.source ?? 'cli',
          actorCredential: opts.actorCredential ?? 'self_declared',
          action: 'resolve',
          reason,
          tenantId: scope.tenantId,
          operationType: scope.operationType,
          operationKey: scope.key,
          workflowId,
          before: auditView(prior),
          after: auditView(settled.record),
        });
        return { before: prior, after: settled.record, audit: entry };
      },
      { retries: 0 },
    );

    let signalled = false;
    let signalError: string | undefined;
    if (workflowId && scope.operationType === REFUND_OPERATION_TYPES.providerRefund) {
      ({ signalled, signalError } = await this.#tellRefund(scope, outcome, audit, actor, reason));
    } else if (workflowId && scope.operationType === OPERATION_TYPES.charge) {
      try {
        await this.#temporal(() =>
          this.#deps.temporal.workflow.getHandle(workflowId).signal(paymentEventSignal, {
            source: 'operator',
            outcome,
            eventId: `audit:${audit.id}`,
            reason,
            actor,
            chargeId: ref,
          }),
        );
        signalled = true;
      } catch (err) {
        signalError =
          err instanceof WorkflowNotFoundError
            ? 'the order workflow is not running (finished or never started)'
            : message(err);
      }
    }
    return {
      before,
      after,
      changed: true,
      audit,
      workflowId,
      signalled,
      signalError,
    };
  }

  /**
   * Re-drives a parked order: its workflow picks up where it stopped, under
   * the same keys (an uncertain charge is reconciled again, never re-charged
   * under a new key). The re-drive is a Temporal Update whose validator
   * refuses it unless the workflow is parked (waiting for an operator), so a
   * re-drive is never silently dropped; whether the order row says
   * needs_attention does not matter (a workflow that could not even record
   * needs_attention is parked all the same).
   *
   * No transaction or row lock is held across the Temporal call
   * (docs/ARCHITECTURE.md): the intent (`redrive_requested`) commits first,
   * then the update is sent with a deadline, then its result is a second
   * audit row: `redrive` (taken), `redrive_refused` (the workflow refused it
   * or is not running: nothing ran), or `redrive_unknown` (no answer in
   * time: it may still run, so it is never written off as refused). Two
   * operators re-driving at once are ordered by the workflow itself: the
   * second finds it no longer parked and is refused.
   */
  async redrive(
    tenantId: string,
    orderId: string,
    opts: ActorOptions & { reason: string },
  ): Promise<RedriveResult> {
    const reason = requireText(opts.reason, 'reason');
    const actor = requireText(opts.actor, 'actor', 200);
    requireText(tenantId, 'tenant', 200);
    requireText(orderId, 'order ID', 200);
    const row = await withClient(this.#deps.pool, (c) => getOrder(c, tenantId, orderId));
    if (!row) throw new OpsError('not_found', `no order ${orderId} for tenant ${tenantId}`);
    const order = orderSummary(row);
    const { audit, intent, accepted } = await this.#redriveWorkflow({
      tenantId,
      workflowId: order.workflowId,
      what: 'order',
      rowStatus: order.status,
      view: orderView(order),
      opts: { ...opts, actor, reason },
      send: (handle) => handle.executeUpdate(redriveUpdate, { args: [{ actor, reason }] }),
    });
    return { order, workflowId: order.workflowId, audit, intent, accepted };
  }

  /**
   * Re-drives a parked refund (`refund/<tenant>/<refundId>`), exactly as an
   * order is re-driven: the intent row, the `redrive` update (refused unless
   * the refund workflow waits for an operator), the result row. The workflow
   * resumes under the same keys: an uncertain provider refund is reconciled
   * by its key, and made again only if the provider never saw it.
   */
  async redriveRefund(
    tenantId: string,
    refundId: string,
    opts: ActorOptions & { reason: string },
  ): Promise<RefundRedriveResult> {
    const reason = requireText(opts.reason, 'reason');
    const actor = requireText(opts.actor, 'actor', 200);
    requireText(tenantId, 'tenant', 200);
    requireText(refundId, 'refund ID', 200);
    const row = await withClient(this.#deps.pool, (c) => getRefundById(c, tenantId, refundId));
    if (!row) throw new OpsError('not_found', `no refund ${refundId} for tenant ${tenantId}`);
    const refund = refundSummary(row);
    const { audit, intent, accepted } = await this.#redriveWorkflow({
      tenantId,
      workflowId: refund.workflowId,
      what: 'refund',
      rowStatus: refund.status,
      view: refundView(refund),
      opts: { ...opts, actor, reason },
      send: (handle) => handle.executeUpdate(refundRedriveUpdate, { args: [{ actor, reason }] }),
    });
    return { refund, workflowId: refund.workflowId, audit, intent, accepted };
  }

  /**
   * The re-drive's audit trail around one Temporal update (see redrive): the
   * intent row commits first, the update is sent with a deadline, its result
   * is a second row.
   */
  async #redriveWorkflow<A>(r: {
    tenantId: string;
    workflowId: string;
    what: 'order' | 'refund';
    rowStatus: string;
    view: { [k: string]: Json };
    opts: ActorOptions & { reason: string };
    send: (handle: ReturnType<Client['workflow']['getHandle']>) => Promise<A>;
  }): Promise<{ audit: AuditEntry; intent: AuditEntry; accepted: A }> {
    const { actor, reason } = r.opts;
    const source = r.opts.source ?? this.#deps.source ?? 'cli';
    const entry = (action: AuditAction, after: { [k: string]: Json }) =>
      withClient(this.#deps.pool, (c) =>
        insertAudit(c, {
          actor,
          source,
          actorCredential: r.opts.actorCredential ?? 'self_declared',
          action,
          reason,
          tenantId: r.tenantId,
          operationType: null,
          operationKey: null,
          workflowId: r.workflowId,
          before: r.view,
          after: { ...r.view, ...after },
        }),
      );
    // The row itself moves when the workflow resumes; what this action changes is the workflow.
    const intent = await entry('redrive_requested', {
      redrive: { update: 'redrive', workflowId: r.workflowId },
    });
    const result = (action: AuditAction, outcome: string, more: { [k: string]: Json } = {}) =>
      entry(action, { redrive: { requestId: intent.id, outcome, ...more } });

    let accepted: A;
    try {
      accepted = await this.#temporal(() => r.send(this.#deps.temporal.workflow.getHandle(r.workflowId)));
    } catch (err) {
      const opsErr = redriveError(err, r.what, r.rowStatus, intent.id);
      const refused = opsErr.code === 'invalid_state';
      // Best effort: the intent row already says the re-drive was asked for.
      await result(refused ? 'redrive_refused' : 'redrive_unknown', refused ? 'refused' : 'unknown', {
        error: opsErr.message,
      }).catch(() => undefined);
      throw opsErr;
    }
    let audit: AuditEntry;
    try {
      audit = await result('redrive', 'accepted', { accepted: accepted as unknown as Json });
    } catch (err) {
      throw new OpsError(
        'unavailable',
        `the workflow took the re-drive, but its result could not be recorded (intent: audit ${intent.id}): ${message(err)}`,
        { cause: err },
      );
    }
    return { audit, intent, accepted };
  }

  /**
   * Tells a refund's workflow that its provider refund's record is settled
   * (refundEvent, a wake-up: the workflow reads the outcome from the ledger).
   * After the ledger change committed; a failure here leaves that change
   * standing and is reported, never thrown.
   */
  async #tellRefund(
    scope: Scope,
    outcome: 'succeeded' | 'failed',
    audit: AuditEntry,
    actor: string,
    reason: string | undefined,
  ): Promise<{ signalled: boolean; signalError?: string }> {
    const workflowId = workflowIdForKey(scope);
    if (!workflowId) return { signalled: false };
    try {
      await this.#temporal(() =>
        this.#deps.temporal.workflow.getHandle(workflowId).signal(refundEventSignal, {
          source: 'operator',
          outcome,
          eventId: `audit:${audit.id}`,
          actor,
          ...(reason ? { reason } : {}),
        }),
      );
      return { signalled: true };
    } catch (err) {
      return {
        signalled: false,
        signalError:
          err instanceof WorkflowNotFoundError
            ? 'the refund workflow is not running (finished or never started)'
            : message(err),
      };
    }
  }

  /**
   * Orders parked for a human (retries ran out, or an outcome stayed
   * unknown), oldest first: the orders in needs_attention, plus the running
   * workflows that Temporal visibility shows parked although their row says
   * otherwise (a status write ran out of retries; see src/orders/attention.ts).
   */
  async listAttention(opts: { tenantId?: string; limit?: number } = {}): Promise<AttentionItem[]> {
    return (await this.listAttentionDetailed(opts)).items;
  }

  async listAttentionDetailed(opts: { tenantId?: string; limit?: number } = {}): Promise<AttentionList> {
    const limit = clampLimit(opts.limit);
    const tenantId = opts.tenantId || undefined;
    const [orders, parked] = await Promise.all([
      withClient(this.#deps.pool, async (c) =>
        (await selectOrdersInStatus(c, 'needs_attention', { tenantId, limit })).map(orderSummary),
      ),
      this.#temporal(() => listParkedWorkflows(this.#deps.temporal, { tenantId, limit })).then(
        (list): { list: ParkedWorkflow[]; error?: string } => ({ list }),
        (err: unknown) => ({ list: [], error: message(err) }),
      ),
    ]);
    const items: AttentionItem[] = orders.map((o) => ({
      ...o,
      source: 'order_row',
      temporalUiUrl: this.temporalUiUrl(o.workflowId),
    }));
    const listed = new Set(orders.map((o) => o.workflowId));
    const extra = parked.list.filter((p) => !listed.has(p.workflowId));
    if (extra.length > 0) {
      const rows = await withClient(this.#deps.pool, async (c) =>
        (
          await selectOrdersByWorkflowIds(
            c,
            extra.map((p) => p.workflowId),
          )
        ).map(orderSummary),
      );
      const byId = new Map(rows.map((r) => [r.workflowId, r]));
      for (const p of extra) {
        const row = byId.get(p.workflowId);
        if (row?.status === 'needs_attention') continue; // recorded since the first query
        items.push({
          ...(row ?? orderFromWorkflow(p)),
          // The workflow parked without recording it: its search attributes hold the why.
          lastError: p.lastError ?? row?.lastError ?? null,
          reason: ORDER_REASONS.statusWriteFailed,
          source: 'workflow',
          temporalUiUrl: this.temporalUiUrl(p.workflowId),
        });
      }
    }
    items.sort((a, b) => a.updatedAt.getTime() - b.updatedAt.getTime());
    return {
      items: items.slice(0, limit),
      visibilityError: parked.error ? `Temporal visibility unavailable: ${parked.error}` : undefined,
    };
  }

  /**
   * Refunds waiting on an outcome or a human (refund_unknown: its provider
   * answer was lost and it is being reconciled; needs_attention: parked),
   * oldest first, with a link to each refund's workflow.
   */
  async listRefundAttention(
    opts: { tenantId?: string; limit?: number } = {},
  ): Promise<RefundAttentionItem[]> {
    const limit = clampLimit(opts.limit);
    const rows = await withClient(this.#deps.pool, (c) =>
      selectRefundsNeedingAttention(c, { tenantId: opts.tenantId || undefined, limit }),
    );
    return rows.map((r) => ({
      kind: 'refund' as const,
      tenantId: r.tenant_id,
      orderId: r.order_id,
      refundId: r.id,
      workflowId: r.workflow_id,
      status: r.status,
      amount: Number(r.amount),
      currency: r.currency,
      lastError: r.last_error,
      updatedAt: r.updated_at,
      temporalUiUrl: this.temporalUiUrl(r.workflow_id),
      operationKey: refundStepKeys.refund(r.workflow_id),
    }));
  }

  /** Newest first. */
  async auditLog(opts: Partial<AuditFilter> = {}): Promise<AuditEntry[]> {
    return withClient(this.#deps.pool, (c) =>
      selectAudit(c, {
        operationKey: opts.operationKey || undefined,
        tenantId: opts.tenantId || undefined,
        workflowId: opts.workflowId || undefined,
        actor: opts.actor || undefined,
        action: opts.action || undefined,
        text: opts.text || undefined,
        limit: clampLimit(opts.limit),
      }),
    );
  }

  /**
   * One order as the console shows it: the order, every ledger record of its
   * steps (status writes of each re-drive epoch included), oldest first,
   * each provider step with the part of its provider's key window left, and
   * the link to its history in the Temporal UI.
   */
  async orderView(tenantId: string, orderId: string, now = new Date()): Promise<OrderConsoleView> {
    const row = await withClient(this.#deps.pool, (c) => getOrder(c, tenantId, orderId));
    if (!row) throw new OpsError('not_found', `no order ${orderId} for tenant ${tenantId}`);
    const order = orderSummary(row);
    const records = await this.#ledger(() =>
      readOrderStepRecords(this.#deps.ledger, tenantId, order.workflowId),
    );
    const caps = this.#capabilities();
    return {
      order,
      temporalUiUrl: this.temporalUiUrl(order.workflowId),
      steps: records.map(({ ownerToken: _omit, ...r }) => {
        const capabilities = caps[r.operationType];
        return {
          ...r,
          keyWindowLeftMs: capabilities ? keyWindowLeftMs(capabilities, r, now) : null,
        };
      }),
    };
  }

  /** What re-driving this order would do to each provider step (src/ops/preview.ts). */
  async redrivePreview(tenantId: string, orderId: string, now = new Date()): Promise<RedrivePreview> {
    const view = await this.orderView(tenantId, orderId, now);
    const caps = this.#capabilities();
    const { workflowId } = view.order;
    const byKey = new Map(view.steps.map((s) => [`${s.operationType}\n${s.key}`, s]));
    const step = (name: string, operationType: string, key: string) => {
      const found = byKey.get(`${operationType}\n${key}`);
      return {
        name,
        operationType,
        key,
        record: found ? { ...found, ownerToken: null } : undefined,
        capabilities: caps[operationType]!,
      };
    };
    return previewRedrive(
      [
        step('charge', OPERATION_TYPES.charge, stepKeys.charge(workflowId)),
        step('receipt', OPERATION_TYPES.receipt, stepKeys.receipt(workflowId)),
      ],
      now,
    );
  }

  /** The key windows the providers declare, by the operation type of the step that calls them. */
  #capabilities(): Record<string, ProviderCapabilities> {
    const window = this.#deps.providerKeyWindowMs;
    const withWindow = (c: ProviderCapabilities): ProviderCapabilities =>
      window === undefined || c.keyWindowMs === null ? c : { ...c, keyWindowMs: window };
    return {
      [OPERATION_TYPES.charge]: withWindow(this.#deps.payments.capabilities),
      [OPERATION_TYPES.receipt]: withWindow(this.#deps.email.capabilities),
    };
  }

  // ------------------------------------------------------------------ helpers

  /**
   * An operator's decision may not contradict what the provider can still
   * tell us: resolving a charge as failed that the provider shows as
   * succeeded would invite charging again, and resolving it as succeeded
   * with no charge at the provider would ship unpaid goods. If the provider
   * cannot be asked (the usual reason an operator resolves by hand), the
   * decision stands on the operator's word and reason.
   */
  async #refuseContradiction(scope: Scope, outcome: 'succeeded' | 'failed'): Promise<void> {
    if (!EXTERNAL_TYPES.has(scope.operationType)) return;
    let provider: ReconcileOutcome<Json>;
    try {
      provider = await (await this.#reconciler(scope))({ downstreamKey: downstreamKey(scope) });
    } catch {
      return;
    }
    if ((provider.state === 'succeeded' || provider.state === 'failed') && provider.state !== outcome) {
      throw new OpsError(
        'invalid_state',
        `the provider reports this operation ${provider.state}${provider.providerRef ? ` (${provider.providerRef})` : ''}; ` +
          `run reconcile instead of resolving it as ${outcome}`,
      );
    }
    if (provider.state === 'not_found' && outcome === 'succeeded') {
      throw new OpsError(
        'invalid_state',
        "the provider has no record under this operation's key; it cannot be resolved as succeeded",
      );
    }
  }

  async #get(scope: Scope): Promise<OperationRecord> {
    const record = await this.#ledger(() => this.#deps.ledger.get(scope));
    if (!record) {
      throw new OpsError(
        'not_found',
        `no operation (tenant ${scope.tenantId}, type ${scope.operationType}, key ${scope.key})`,
      );
    }
    return record;
  }

  async #ledger<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      throw fromLedger(err);
    }
  }

  #temporal<T>(fn: () => Promise<T>): Promise<T> {
    const deadline = Date.now() + (this.#deps.temporalTimeoutMs ?? 10_000);
    return this.#deps.temporal.withDeadline(deadline, fn);
  }

  /** The lookup that reconciles an operation, by the downstream key (the steps' own). */
  async #reconciler(
    scope: Scope,
  ): Promise<(ctx: { downstreamKey: string }) => Promise<ReconcileOutcome<Json>>> {
    const { operationType } = scope;
    const keyWindowMs = this.#deps.providerKeyWindowMs;
    if (operationType === OPERATION_TYPES.charge)
      return chargeReconciler(this.#deps.payments, { keyWindowMs });
    if (operationType === OPERATION_TYPES.receipt || operationType === REFUND_OPERATION_TYPES.receipt)
      return receiptReconciler(this.#deps.email, {
        keyWindowMs: receiptKeyWindowMs(this.#deps.email, keyWindowMs),
      });
    if (operationType === REFUND_OPERATION_TYPES.providerRefund) {
      // A provider that lists refunds per charge (Stripe, after its key window) needs the order's charge.
      return refundReconciler(
        this.#deps.payments,
        { tenantId: scope.tenantId, key: scope.key, chargeId: await this.#refundChargeId(scope) },
        { keyWindowMs },
      );
    }
    throw new OpsError(
      'invalid_input',
      `operation type ${operationType} has no provider to reconcile with (only ${[...EXTERNAL_TYPES].join(', ')})`,
    );
  }

  /** The charge a refund step refunds (its order's), or undefined when the key names no known refund. */
  async #refundChargeId(scope: Scope): Promise<string | undefined> {
    const m = REFUND_KEY.exec(scope.key);
    if (!m) return undefined;
    return withClient(this.#deps.pool, async (c) => {
      const refund = await getRefundById(c, scope.tenantId, m[2]!);
      if (!refund) return undefined;
      return (await getOrder(c, scope.tenantId, refund.order_id))?.charge_id ?? undefined;
    });
  }

  /**
   * What a resolved record stores: the same shape the workflow's own
   * settleCharge writes, so its later settlement of the same outcome is an
   * idempotent no-op rather than a conflict.
   */
  #settledResult(operationType: string, outcome: 'succeeded' | 'failed', ref: string | undefined): Json {
    if (operationType === OPERATION_TYPES.charge) return settledCharge(outcome, ref ?? null);
    if (operationType === REFUND_OPERATION_TYPES.providerRefund) return settledRefund(outcome, ref ?? null);
    if (operationType === OPERATION_TYPES.receipt || operationType === REFUND_OPERATION_TYPES.receipt) {
      if (outcome === 'failed') {
        throw new OpsError(
          'invalid_input',
          'a receipt cannot be resolved as failed: reconcile it (the provider does not know the key) and ' +
            're-drive its workflow, which sends it under the same key',
        );
      }
      return settledReceipt(ref ?? null);
    }
    throw new OpsError(
      'invalid_input',
      `operation type ${operationType} is not resolved by hand (only ${[...EXTERNAL_TYPES].join(', ')})`,
    );
  }

  async #providerView(operationType: string, dk: string | null): Promise<ProviderView> {
    const provider =
      operationType === OPERATION_TYPES.charge || operationType === REFUND_OPERATION_TYPES.providerRefund
        ? 'payments'
        : operationType === OPERATION_TYPES.receipt || operationType === REFUND_OPERATION_TYPES.receipt
          ? 'email'
          : null;
    if (!provider || !dk) return { provider: null, lookedUpBy: null, found: false, object: null };
    try {
      const object =
        operationType === REFUND_OPERATION_TYPES.providerRefund
          ? await findRefund(this.#deps.payments, dk)
          : provider === 'payments'
            ? await findCharge(this.#deps.payments, dk)
            : await findMessage(this.#deps.email, dk);
      return { provider, lookedUpBy: dk, found: object !== null, object };
    } catch (err) {
      return { provider, lookedUpBy: dk, found: false, object: null, error: message(err) };
    }
  }
}

/** After a reconcile that left the record unresolved: what happens next, for the operator. */
function nextStep(
  scope: Scope,
  answer: 'settled' | 'pending' | 'not_found' | 'skipped',
  performable: boolean,
): string | undefined {
  const what =
    scope.operationType === OPERATION_TYPES.receipt || scope.operationType === REFUND_OPERATION_TYPES.receipt
      ? 'receipt'
      : scope.operationType === REFUND_OPERATION_TYPES.providerRefund
        ? 'refund'
        : 'charge';
  const owner = REFUND_KEY.test(scope.key) ? 'refund' : 'order';
  if (answer === 'not_found') {
    if (!performable) {
      const act = what === 'charge' ? 'charge' : what === 'refund' ? 'refund' : 'send';
      return (
        `the provider never saw this ${what}'s key, but the record is past the provider's key window: ` +
        `performing it again could ${act} twice; resolve it by hand`
      );
    }
    return (
      `the provider never saw this ${what}'s key: the ${owner} workflow (or a re-drive of a parked ${owner}) ` +
      'performs it under the same key'
    );
  }
  if (answer === 'pending') return 'the provider is still processing this key; reconcile again later';
  return undefined;
}

/**
 * A re-drive the workflow refused or could not receive, in the operator's
 * vocabulary. `invalid_state` only when the workflow's answer proves nothing
 * ran; anything else (deadline, unreachable) is `unavailable`: it may still run.
 */
function redriveError(err: unknown, what: 'order' | 'refund', rowStatus: string, intentId: string): OpsError {
  if (err instanceof WorkflowUpdateFailedError) {
    const cause = err.cause;
    if (cause instanceof ApplicationFailure && cause.type === FAILURE.redriveRefused) {
      return new OpsError('invalid_state', `${cause.message} (${what} row: ${rowStatus})`, { cause: err });
    }
    return new OpsError('invalid_state', `the workflow refused the re-drive: ${message(cause ?? err)}`, {
      cause: err,
    });
  }
  if (err instanceof WorkflowNotFoundError) {
    return new OpsError(
      'invalid_state',
      `the ${what} workflow is not running (${what} row: ${rowStatus}); nothing to re-drive`,
      { cause: err },
    );
  }
  return new OpsError(
    'unavailable',
    `no answer from the workflow: ${message(err)}; the re-drive may still run ` +
      `(audit ${intentId}): check the workflow before re-driving again`,
    { cause: err },
  );
}

/** What the attention list shows for a parked workflow whose order row is gone. */
function orderFromWorkflow(p: ParkedWorkflow): OrderSummary {
  const m = /^order\/([^/]+)\/(.+)$/.exec(p.workflowId);
  return {
    tenantId: p.tenantId ?? m?.[1] ?? '',
    orderId: m?.[2] ?? p.workflowId,
    workflowId: p.workflowId,
    status: 'needs_attention',
    statusSeq: 0,
    amount: 0,
    currency: '',
    chargeId: null,
    receiptId: null,
    lastError: p.lastError,
    reason: ORDER_REASONS.statusWriteFailed,
    createdAt: p.startTime,
    updatedAt: p.startTime,
  };
}

function clampLimit(limit: number | undefined): number {
  if (limit === undefined) return 100;
  if (!Number.isSafeInteger(limit) || limit <= 0)
    throw new OpsError('invalid_input', 'limit must be a positive integer');
  return Math.min(limit, 1000);
}

/** What the audit keeps of a record: its state and outcome, never its owner token. */
function auditView(r: OperationRecord): { [k: string]: Json } {
  return {
    state: r.state,
    attempts: r.attempts,
    downstreamKey: r.downstreamKey,
    providerRef: r.providerRef,
    result: r.result,
    error: r.error,
    leaseExpiresAt: r.leaseExpiresAt?.toISOString() ?? null,
    updatedAt: r.updatedAt.toISOString(),
    completedAt: r.completedAt?.toISOString() ?? null,
  };
}

function refundView(r: RefundSummary): { [k: string]: Json } {
  return {
    orderId: r.orderId,
    status: r.status,
    amount: r.amount,
    providerRefundId: r.providerRefundId,
    lastError: r.lastError,
    updatedAt: r.updatedAt.toISOString(),
  };
}

function orderView(o: OrderSummary): { [k: string]: Json } {
  return {
    status: o.status,
    statusSeq: o.statusSeq,
    chargeId: o.chargeId,
    receiptId: o.receiptId,
    lastError: o.lastError,
    updatedAt: o.updatedAt.toISOString(),
  };
}
