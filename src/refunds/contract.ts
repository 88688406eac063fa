/**
 * The refund contract shared by the refund workflow, its activities and the API.
 * Pure TypeScript: imported by workflow code, so no Node built-ins and no I/O.
 *
 * A refund is its own workflow (`refund/<tenant>/<refundId>`), with per-step
 * keys derived from that workflow ID, exactly as an order's are. A refund has
 * no natural key on purpose: two real refunds of the same amount for the same
 * order are two refunds (docs/API.md). What limits refunds is the order's
 * charge: every refund that is not `failed` holds its amount in the order's
 * `refunded_amount`, reserved by a conditional update (src/refunds/sql.ts).
 */
import { defineSignal, defineUpdate } from '@temporalio/workflow';
import { stepKey } from 'onceflow/workflow';
import type { RedriveRequest } from '../orders/contract.ts';

export const REFUND_STATUSES = [
  'pending',
  'succeeded',
  'failed',
  'refund_unknown',
  'needs_attention',
] as const;
export type RefundStatus = (typeof REFUND_STATUSES)[number];

/** A refund in one of these has no more automatic work to do. */
export const REFUND_TERMINAL_STATUSES: readonly RefundStatus[] = ['succeeded', 'failed', 'needs_attention'];

/**
 * Allowed transitions. Nothing leaves `succeeded` or `failed`, so a late or
 * duplicate outcome never moves a refund backwards; entering `failed` happens
 * once, and that one transition releases the refund's reservation on the
 * order (src/refunds/sql.ts). `needs_attention` is left by an operator's
 * resolution or a re-drive.
 */
export const REFUND_TRANSITIONS: Readonly<Record<RefundStatus, readonly RefundStatus[]>> = {
  pending: ['succeeded', 'failed', 'refund_unknown', 'needs_attention'],
  refund_unknown: ['succeeded', 'failed', 'needs_attention'],
  needs_attention: ['pending', 'refund_unknown', 'succeeded', 'failed'],
  succeeded: [],
  failed: [],
};

export const REFUND_OPERATION_TYPES = {
  /** The client's Idempotency-Key of POST /v1/orders/{id}/refunds. */
  createRefund: 'http.create_refund',
  /** The provider refund, under its downstream key. */
  providerRefund: 'payment.refund',
  /** The refund receipt email. */
  receipt: 'email.refund_receipt',
  /** A refund status write. */
  status: 'refund.status',
} as const;

export const REFUND_WORKFLOW_TYPE = 'refundWorkflow';

export function refundWorkflowId(tenantId: string, refundId: string): string {
  return `refund/${tenantId}/${refundId}`;
}

/** Per-step operation keys, derived from the refund's workflow ID (never its run ID). */
export const refundStepKeys = {
  refund: (workflowId: string) => stepKey(workflowId, 'refund'),
  receipt: (workflowId: string) => stepKey(workflowId, 'receipt'),
  status: (workflowId: string, status: RefundStatus, redrive = 0) =>
    redrive > 0
      ? stepKey(workflowId, 'status', status, `redrive-${redrive}`)
      : stepKey(workflowId, 'status', status),
};

/** What the refund workflow is started with (the outbox row's input). */
export interface RefundWorkflowInput {
  tenantId: string;
  refundId: string;
  orderId: string;
  amount: number;
  currency: string;
  /** The order's charge, which the provider refunds. */
  chargeId: string;
  /** Where the refund receipt goes: the order's customer. */
  customerEmail: string;
  reason: string | null;
}

/**
 * A provider's word on the refund, from the payments webhook (a refund event
 * that names this refund's provider refund: its downstream key or its
 * recorded refund ID, with its amount and currency).
 */
export interface RefundEvent {
  source: 'webhook' | 'operator';
  outcome: 'succeeded' | 'failed';
  /** Provider event ID (webhook) or `audit:<audit row id>` (an operator's resolve or reconcile). */
  eventId: string;
  providerRefundId?: string;
  actor?: string;
  reason?: string;
}

/**
 * The refund workflow keeps the first settling event while its provider
 * refund is unsettled and applies it to the step's ledger record; duplicates
 * and events after the refund has settled change nothing.
 */
export const refundEventSignal = defineSignal<[RefundEvent]>('refundEvent');

/** What a refund's re-drive update answers: the refund as it was parked. */
export interface RefundRedriveAccepted {
  status: RefundStatus;
  lastError: string | null;
  /** How many re-drives this workflow has had, this one included. */
  redrives: number;
}

/**
 * Operator re-drive of a parked refund, as an Update under the order's name
 * (`redrive`): its validator refuses (FAILURE.redriveRefused) unless the
 * workflow waits for an operator, so a re-drive is never silently dropped.
 */
export const refundRedriveUpdate = defineUpdate<RefundRedriveAccepted, [RedriveRequest]>('redrive');

/** A refund's step key as the operator sees it: `refund/<tenant>/<refundId>/<step>`. */
export const REFUND_KEY = /^refund\/([^/]+)\/([^/]+)\//;
