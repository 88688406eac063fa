/**
 * Signals and queries of the order workflow. Importable from client code
 * (API, operator CLI) as well as from workflow code.
 */
import { defineQuery, defineSignal } from '@temporalio/workflow';
import type { OrderStatus } from '../src/orders/model.ts';

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
  reconcileAttempts: number;
  /** Parked: waiting for an operator's re-drive (or, while the charge is unsettled, a payment event). */
  awaitingOperator: boolean;
}

export const paymentEventSignal = defineSignal<[PaymentEvent]>('paymentEvent');
/** Operator re-drive of an order in needs_attention. */
export const redriveSignal = defineSignal<[{ actor: string; reason: string }]>('redrive');
export const statusQuery = defineQuery<OrderState>('status');
