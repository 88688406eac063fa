/**
 * The order workflow's contract: its signals, queries and update, their
 * payloads, and its search attributes. Shared by the workflow (which
 * handles and sets them) and by src/ (the webhook route and the operator
 * send them; the operator tools and metrics query visibility by them), so
 * neither side imports the other.
 *
 * Deterministic and I/O-free: workflow code imports it (eslint.config.js
 * allows workflows/ to import only `src/<concept>/contract.ts` and
 * src/orders/model.ts). The workflow bundle's hash covers it.
 */
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type { OrderStatus } from './model.ts';

// --- search attributes (registered on the dev server by src/devserver/temporal.ts)

export const OrderStatusKey = defineSearchAttributeKey('OrderStatus', SearchAttributeType.KEYWORD);
export const TenantIdKey = defineSearchAttributeKey('TenantId', SearchAttributeType.KEYWORD);
export const OrderLastErrorKey = defineSearchAttributeKey('OrderLastError', SearchAttributeType.TEXT);

// --- signals, queries, update

/** A provider's word on the charge: from the payments webhook or an operator. */
export interface PaymentEvent {
  source: 'webhook' | 'operator';
  outcome: 'succeeded' | 'failed';
  /** Provider event ID (webhook) or audit ID (operator). */
  eventId: string;
  chargeId?: string;
  reason?: string;
  actor?: string;
}

export interface OrderState {
  status: OrderStatus;
  chargeId: string | null;
  receiptId: string | null;
  lastError: string | null;
  /** Machine-readable reason for rejected / needs_attention (ORDER_REASONS in src/orders/model.ts). */
  reason: string | null;
  reconcileAttempts: number;
  /** Parked: waiting for an operator's re-drive (or, while the charge is unsettled, a payment event). */
  awaitingOperator: boolean;
}

export const paymentEventSignal = defineSignal<[PaymentEvent]>('paymentEvent');

export interface RedriveRequest {
  actor: string;
  reason: string;
}

/** What a re-drive update answers: the order as it was parked. */
export interface RedriveAccepted {
  status: OrderStatus;
  reason: string | null;
  lastError: string | null;
  /** How many re-drives this workflow has had, this one included. */
  redrives: number;
}

/**
 * Operator re-drive of a parked order, as an Update: its validator refuses
 * (the caller gets the error, nothing is written to the history) when the
 * workflow is not parked, so a re-drive is never silently dropped.
 */
export const redriveUpdate = defineUpdate<RedriveAccepted, [RedriveRequest]>('redrive');
/** Error type of a refused re-drive (the update's validator). */
export const REDRIVE_REFUSED = 'RedriveRefused';

/**
 * The older signal form of the re-drive, kept so histories and scripts that
 * use it still work. It cannot refuse: prefer redriveUpdate.
 */
export const redriveSignal = defineSignal<[RedriveRequest]>('redrive');
export const statusQuery = defineQuery<OrderState>('status');
