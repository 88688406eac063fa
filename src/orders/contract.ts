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
import { defineSearchAttributeKey, SearchAttributeType, type SearchAttributePair } from '@temporalio/common';
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import { LEDGER_FAILURE } from 'onceflow/workflow';
import type { OrderStatus } from './model.ts';

// --- search attributes (registered on the dev server by dev/devserver/temporal.ts)

export const OrderStatusKey = defineSearchAttributeKey('OrderStatus', SearchAttributeType.KEYWORD);
export const TenantIdKey = defineSearchAttributeKey('TenantId', SearchAttributeType.KEYWORD);
export const OrderLastErrorKey = defineSearchAttributeKey('OrderLastError', SearchAttributeType.TEXT);

/**
 * The status the workflow records first (the API has written `accepted` with
 * the order). The outbox relay starts the workflow with it, and the tenant,
 * already indexed, so the workflow does not upsert them itself: a
 * search-attribute update is a visibility write on the server, the most
 * expensive event of a workflow task.
 */
export const FIRST_ORDER_STATUS: OrderStatus = 'payment_pending';

/** The search attributes an order workflow is started with (src/api/outbox.ts). */
export function orderStartSearchAttributes(tenantId: string): SearchAttributePair[] {
  return [
    { key: TenantIdKey, value: tenantId },
    { key: OrderStatusKey, value: FIRST_ORDER_STATUS },
  ];
}

/** Longest OrderLastError value the workflow sets (visibility stores it for every run). */
export const LAST_ERROR_MAX_CHARS = 1000;

/**
 * An error message as a Text search attribute value. The Temporal server on
 * Postgres stores Text attributes as `tsvector`, whose input syntax gives `:`
 * (positions), `'` (quoting) and `\` (escapes) a meaning: "recorded: order x"
 * is a syntax error there, and the server then retries that visibility
 * update forever, so the order never shows up in visibility queries (the
 * attention list, the needs_attention gauge). Those characters (and control
 * characters) become spaces,
 * and a run of 400 characters without a space is broken; every other
 * character of the message is kept. The full message
 * stays in the workflow's state and on the order row.
 */
export function searchableText(message: string): string {
  const spaced = message
    // eslint-disable-next-line no-control-regex -- control characters (NUL above all) are not text Postgres stores
    .replace(/[:'\\\u0000-\u001f\u007f]/g, ' ')
    .replace(/\s+/g, ' ')
    .trim();
  // By code points, so a surrogate pair is never cut in half.
  return (
    Array.from(spaced)
      .slice(0, LAST_ERROR_MAX_CHARS)
      .join('')
      // tsvector refuses a word over 2046 bytes: break long runs (UTF-8 has up to 4 bytes a char).
      .replace(/\S{400}(?=\S)/gu, '$& ')
  );
}

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
 * (FAILURE.redriveRefused; the caller gets the error, nothing is written to the history) when the
 * workflow is not parked, so a re-drive is never silently dropped.
 */
export const redriveUpdate = defineUpdate<RedriveAccepted, [RedriveRequest]>('redrive');

/**
 * The older signal form of the re-drive, kept so histories and scripts that
 * use it still work. It cannot refuse: prefer redriveUpdate.
 */
export const redriveSignal = defineSignal<[RedriveRequest]>('redrive');
export const statusQuery = defineQuery<OrderState>('status');

// --- failure types

/**
 * The `type` of every ApplicationFailure that crosses between the order
 * activities (which throw them) and the workflow or the operator (which
 * branch on them). One list, so neither side spells a name the other does
 * not know.
 *
 * The values are data, not just names: they are in recorded histories
 * (test/fixtures/histories) and in the failures of workflows running now, and
 * the workflow branches on them when it replays. Never change a value; add a
 * new one instead.
 */
export const FAILURE = {
  /** Charge: the provider refused the request itself; nothing was charged (the order is rejected). */
  paymentRejected: 'PaymentRejected',
  /** Charge: the outcome is not known (lost response, timeout); the workflow reconciles. */
  paymentOutcomeUnknown: 'PaymentOutcomeUnknown',
  /** Provider refund: the outcome is not known (lost response, timeout); the refund workflow reconciles. */
  refundOutcomeUnknown: 'RefundOutcomeUnknown',
  /** A refund status write found no refund row. */
  refundNotFound: 'RefundNotFound',
  /** Receipt: the outcome is not known; Temporal retries under the same key. */
  receiptOutcomeUnknown: 'ReceiptOutcomeUnknown',
  /** Status write: the outcome is not known; Temporal retries under the same key. */
  statusOutcomeUnknown: 'StatusOutcomeUnknown',
  /**
   * A status write carried by a step's activity (the charge's payment_pending, the receipt's paid
   * and completed) failed. Before the step: the step did not run in that attempt (an earlier
   * attempt of the activity may have). After it: the step did. Not retried as part of the step:
   * the workflow writes the status as its own step, and runs the step again under its key, whose
   * ledger record answers for any earlier attempt.
   */
  statusNotRecorded: 'StatusNotRecorded',
  /** A step's provider refused the request itself (nothing happened); retrying can't help. */
  providerRejected: 'ProviderRejected',
  /** The request never left (connection refused, DNS); the claim was released, retrying is safe. */
  providerUnavailable: 'ProviderUnavailable',
  /**
   * The provider refused a step's request after a takeover. This request did
   * nothing, but an earlier attempt may still act under the same key, so the
   * effect is NOT proven absent (the ledger record stays unknown). Retrying
   * the same request can't help either, so the order parks for an operator
   * (workflows/policies.ts PARKING_FAILURE_TYPES).
   */
  refusedAfterTakeover: 'RefusedAfterTakeover',
  /** Another attempt holds the step's claim (or this one lost it); retried after its lease. */
  operationInProgress: LEDGER_FAILURE.inProgress,
  /** The step's key was already used with a different input. */
  operationConflict: LEDGER_FAILURE.conflict,
  /** The ledger refused the step's key or input. */
  invalidInput: LEDGER_FAILURE.invalidInput,
  /** Any other ledger error; retried. */
  ledgerError: LEDGER_FAILURE.ledgerError,
  /** A status write found no order row. */
  orderNotFound: 'OrderNotFound',
  /** A refused re-drive (the redriveUpdate's validator). */
  redriveRefused: 'RedriveRefused',
} as const;

export type FailureType = (typeof FAILURE)[keyof typeof FAILURE];
