/**
 * What the operator's tools show (orders, refunds, operations, attention
 * lists, audit views) and the checks and messages every action shares.
 */
import { userInfo } from 'node:os';
import { WorkflowNotFoundError, WorkflowUpdateFailedError, type Client } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import type { Pool } from '../db/index.ts';
import {
  isLedgerError,
  type Json,
  type Ledger,
  type OperationRecord,
  type OperationState,
  type Scope,
} from 'onceflow';
import { ORDER_REASONS, orderWorkflowId, type OrderStatus } from '../orders/model.ts';
import type { ParkedWorkflow } from '../orders/attention.ts';
import {
  REFUND_KEY,
  refundWorkflowId,
  type RefundRedriveAccepted,
  type RefundStatus,
} from '../refunds/contract.ts';
import type { RefundRow } from '../refunds/sql.ts';
import type { Charge, EmailProvider, Message, PaymentProvider, Refund } from '../providers/types.ts';
import { keyWindowPassed } from '../steps/descriptor.ts';
import { stepOf } from '../steps/registry.ts';
import { FAILURE, type RedriveAccepted } from '../orders/contract.ts';
import type { ActorCredential, AuditEntry, AuditSource } from '../audit/sql.ts';
import type { OrderRow } from '../orders/sql.ts';
import { OpsError } from './errors.ts';

/** An order as the operator's tools show it (camelCase; the row's columns the operator needs). */
export interface OrderSummary {
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

export function orderSummary(row: OrderRow): OrderSummary {
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
export interface RefundSummary {
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

export function refundSummary(r: RefundRow): RefundSummary {
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

export interface RefundAttentionItem extends Omit<RefundSummary, 'providerRefundId'> {
  kind: 'refund';
  temporalUiUrl: string;
  /** The provider refund step's operation key (type payment.refund): what reconcile and resolve take. */
  operationKey: string;
}

export interface AttentionList {
  items: AttentionItem[];
  /** Set when Temporal visibility could not be read: only the orders table was listed. */
  visibilityError?: string;
}

const ORDER_KEY = /^order\/([^/]+)\/([^/]+)\//;

/**
 * The workflow a step key belongs to: an order's (`order/<tenant>/<order>/...`)
 * or a refund's (`refund/<tenant>/<refund>/...`); null for other keys.
 */
export function workflowIdForKey(scope: Scope): string | null {
  const order = ORDER_KEY.exec(scope.key);
  if (order && order[1] === scope.tenantId) return orderWorkflowId(order[1], order[2]!);
  const refund = REFUND_KEY.exec(scope.key);
  if (refund && refund[1] === scope.tenantId) return refundWorkflowId(refund[1], refund[2]!);
  return null;
}

export function isRefundScope(scope: Scope): boolean {
  return stepOf(scope.operationType)?.workflow === 'refund';
}

export function defaultActor(): string {
  try {
    return userInfo().username || 'unknown';
  } catch {
    return 'unknown';
  }
}

export function isFinal(state: OperationState): boolean {
  return state === 'succeeded' || state === 'failed';
}

export function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export function requireText(value: unknown, what: string, max = 1000): string {
  if (typeof value !== 'string' || value.trim() === '') {
    throw new OpsError('invalid_input', `${what} is required and must not be empty`);
  }
  const text = value.trim();
  if (text.length > max) throw new OpsError('invalid_input', `${what} must be at most ${max} characters`);
  return text;
}

/** Ledger errors, in the operator's vocabulary. */
export function fromLedger(err: unknown): unknown {
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

/** After a reconcile that left the record unresolved: what happens next, for the operator. */
export function nextStep(
  scope: Scope,
  answer: 'settled' | 'pending' | 'not_found' | 'skipped',
  performable: boolean,
): string | undefined {
  const step = stepOf(scope.operationType);
  if (answer === 'not_found' && step) {
    if (!performable) return keyWindowPassed(step);
    return (
      `the provider never saw this ${step.name}'s key: the ${step.workflow} workflow (or a re-drive of a parked ` +
      `${step.workflow}) performs it under the same key`
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
export function redriveError(
  err: unknown,
  what: 'order' | 'refund',
  rowStatus: string,
  intentId: string,
): OpsError {
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
export function orderFromWorkflow(p: ParkedWorkflow): OrderSummary {
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

export function clampLimit(limit: number | undefined): number {
  if (limit === undefined) return 100;
  if (!Number.isSafeInteger(limit) || limit <= 0)
    throw new OpsError('invalid_input', 'limit must be a positive integer');
  return Math.min(limit, 1000);
}

/** What the audit keeps of a record: its state and outcome, never its owner token. */
export function auditView(r: OperationRecord): { [k: string]: Json } {
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

export function refundView(r: RefundSummary): { [k: string]: Json } {
  return {
    orderId: r.orderId,
    status: r.status,
    amount: r.amount,
    providerRefundId: r.providerRefundId,
    lastError: r.lastError,
    updatedAt: r.updatedAt.toISOString(),
  };
}

export function orderView(o: OrderSummary): { [k: string]: Json } {
  return {
    status: o.status,
    statusSeq: o.statusSeq,
    chargeId: o.chargeId,
    receiptId: o.receiptId,
    lastError: o.lastError,
    updatedAt: o.updatedAt.toISOString(),
  };
}
