/**
 * The refund contract shared by the refund workflow, its activities and the API (workflow-safe).
 * A refund is its own workflow (`refund/<tenant>/<refundId>`) with no natural key: two equal refunds
 * are two refunds. The order's charge limits them (src/refunds/sql.ts).
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
 * Nothing leaves `succeeded` or `failed`, so a late outcome never moves a refund back and `failed` releases
 * the reservation once.
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

/** A provider's word on the refund, from a webhook event that names this refund's provider refund. */
export interface RefundEvent {
  source: 'webhook' | 'operator';
  outcome: 'succeeded' | 'failed';
  /** Provider event ID (webhook) or `audit:<audit row id>` (an operator's resolve or reconcile). */
  eventId: string;
  providerRefundId?: string;
  actor?: string;
  reason?: string;
}

/** The workflow keeps the first settling event; duplicates and later events change nothing. */
export const refundEventSignal = defineSignal<[RefundEvent]>('refundEvent');

/** What a refund's re-drive update answers: the refund as it was parked. */
export interface RefundRedriveAccepted {
  status: RefundStatus;
  lastError: string | null;
  /** How many re-drives this workflow has had, this one included. */
  redrives: number;
}

/**
 * Operator re-drive of a parked refund; the validator refuses unless it waits for an operator, so none is
 * silently dropped.
 */
export const refundRedriveUpdate = defineUpdate<RefundRedriveAccepted, [RedriveRequest]>('redrive');

/** A refund's step key as the operator sees it: `refund/<tenant>/<refundId>/<step>`. */
export const REFUND_KEY = /^refund\/([^/]+)\/([^/]+)\//;
