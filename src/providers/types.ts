/**
 * Provider interfaces: what the product needs from a payment provider and an
 * email provider. The sandbox (dev/sandbox) implements them over HTTP; a real
 * provider (Stripe, an email API) would get its own adapter with the same
 * shape. See docs/PROVIDERS.md.
 *
 * Terminology
 * - idempotency key: the downstream key sent with every create request. It is
 *   derived from the operation key, stable across retries, and the only way to
 *   find an effect again after a lost response (`find...ByIdempotencyKey`).
 * - definite: the caller knows for sure whether the effect happened. A decline
 *   is definite (a `Charge` with status 'failed'); a timeout is not.
 * - uncertain: the effect MAY have happened. Never presume it failed: look it
 *   up by its key (reconcile) and only then retry with the SAME key.
 */

export interface ChargeRequest {
  /** Integer minor units (cents), > 0. Never a float. */
  amount: number;
  /** ISO 4217, lowercase (e.g. 'usd'). */
  currency: string;
  /** A provider payment method token, e.g. 'pm_card_visa'. */
  paymentMethod: string;
  description?: string;
  /** Flat string map; by convention carries order_id and tenant_id. */
  metadata: Record<string, string>;
  receiptEmail?: string;
}

export interface Charge {
  id: string;
  status: 'succeeded' | 'failed';
  amount: number;
  currency: string;
  /** Set when status is 'failed', e.g. 'card_declined'. */
  failureCode?: string;
  idempotencyKey: string;
  metadata: Record<string, string>;
  /** ISO 8601. */
  created: string;
}

export interface PaymentProvider {
  /**
   * Creates (or replays) the charge for this key. A decline resolves to a
   * `Charge` with status 'failed' (a definite business outcome), not an error.
   * Throws `ProviderError` otherwise.
   */
  createCharge(req: ChargeRequest, idempotencyKey: string): Promise<Charge>;
  /** Reconciliation: the charge made under this key, or null if there is none. */
  findChargeByIdempotencyKey(idempotencyKey: string): Promise<Charge | null>;
  /**
   * Refunds (part of) a charge, or replays the refund made under this key.
   * A refund the provider made but reports as failed resolves to a `Refund`
   * with status 'failed' (definite). A request the provider refuses before
   * acting (no such charge, more than is left to refund) throws a 'rejected'
   * ProviderError: nothing was refunded. Anything else throws as createCharge.
   */
  createRefund(req: RefundRequest, idempotencyKey: string): Promise<Refund>;
  /** Reconciliation: the refund made under this key, or null if there is none. */
  findRefundByIdempotencyKey(idempotencyKey: string): Promise<Refund | null>;
}

export interface RefundRequest {
  /** The provider's ID of the charge to refund. */
  chargeId: string;
  /** Integer minor units, > 0. */
  amount: number;
  currency: string;
  reason?: string;
  /** Flat string map; by convention carries order_id, tenant_id, refund_id and operation_key. */
  metadata: Record<string, string>;
}

export interface Refund {
  id: string;
  status: 'succeeded' | 'failed';
  chargeId: string;
  amount: number;
  currency: string;
  idempotencyKey: string;
  metadata: Record<string, string>;
  /** ISO 8601. */
  created: string;
}

export interface MessageRequest {
  to: string;
  subject: string;
  text: string;
  metadata: Record<string, string>;
}

export interface Message {
  id: string;
  status: 'sent';
  to: string;
  idempotencyKey: string;
  /** ISO 8601. */
  created: string;
}

export interface EmailProvider {
  sendMessage(req: MessageRequest, idempotencyKey: string): Promise<Message>;
  findMessageByIdempotencyKey(idempotencyKey: string): Promise<Message | null>;
}

/**
 * - 'uncertain': timeout, connection reset or dropped after the request may
 *   have left, 5xx, 429, unreadable response. The effect MAY have happened
 *   (definite = false): reconcile.
 * - 'not_sent': the request never left this process: the connection was
 *   refused or the host name did not resolve, before any byte was written.
 *   Nothing happened (definite = true); retrying later may work.
 * - 'rejected': 4xx validation (not a 402 decline, not an idempotency
 *   mismatch). The provider refused this request before acting: nothing
 *   happened (definite = true); retrying the same request won't help.
 * - 'key_conflict': the provider already holds a request under this
 *   idempotency key with other parameters (400 idempotency_error). This
 *   request did nothing, but the earlier one under the same key may have
 *   acted, so it proves nothing (definite = false): reconcile.
 * - 'in_progress': 409, another request with the same key is being processed.
 *   definite = false; retry later with the same key.
 */
export type ProviderErrorKind = 'uncertain' | 'not_sent' | 'rejected' | 'key_conflict' | 'in_progress';

export class ProviderError extends Error {
  override name = 'ProviderError';
  readonly kind: ProviderErrorKind;
  readonly definite: boolean;
  /** HTTP status, when a response arrived. */
  readonly status?: number;
  /**
   * Stable machine-readable code: the provider's error code or type
   * ('idempotency_key_reused', 'invalid_request_error', 'api_error', ...) or
   * one of 'timeout', 'network', 'connection_refused', 'dns', 'bad_response'.
   */
  readonly code: string;

  constructor(
    kind: ProviderErrorKind,
    message: string,
    opts: { code: string; status?: number; cause?: unknown },
  ) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.kind = kind;
    this.definite = kind === 'rejected' || kind === 'not_sent';
    this.code = opts.code;
    if (opts.status !== undefined) this.status = opts.status;
  }
}
