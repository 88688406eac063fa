/**
 * Provider interfaces: what the product needs from a payment provider and an
 * email provider. The sandbox (dev/sandbox) implements them over HTTP; a real
 * provider (Stripe, an email API) would get its own adapter with the same
 * shape. See docs/PROVIDERS.md.
 *
 * Terminology
 * - idempotency key: the downstream key sent with every create request. It is
 *   derived from the operation key and stable across retries. How an effect
 *   is found again after a lost response depends on the provider: each
 *   adapter declares it in `capabilities` (see ProviderCapabilities).
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

/**
 * How a provider can settle an uncertain outcome (a lost response), declared
 * by each adapter and read by src/steps/settle.ts. Real providers differ:
 * - `lookup`: the provider answers "what did you do under key K" exactly
 *   (the sandbox's GET ?idempotency_key=). "Not found" is proof.
 * - `replay`: no lookup, but inside the key window the SAME request under the
 *   SAME key returns the stored outcome, or performs it if it never happened
 *   (Stripe). Safe because the provider dedupes by the key; needs the request.
 * - `search`: a query by a reference we stored with the effect (Stripe's
 *   metadata search). The index lags behind writes by up to `lagMs`, so "not
 *   found" is proof only once `lagMs` has passed since the last request that
 *   could have made the effect.
 * - `none`: the provider can't be asked at all (SMTP). A declared delivery
 *   policy decides (EmailProvider.uncertainPolicy).
 */
type SettleMethod = 'lookup' | 'replay' | 'none';
type AfterWindowMethod = { kind: 'lookup' } | { kind: 'search'; lagMs: number } | { kind: 'none' };

export interface ProviderCapabilities {
  /**
   * How long the provider remembers an idempotency key, or null when it has
   * no keys at all (SMTP). The ledger never performs again under a key past
   * this window (minus a margin), so it bounds the automatic retry horizon.
   */
  keyWindowMs: number | null;
  /** How an uncertain outcome is settled while the record is inside the key window. */
  withinWindow: SettleMethod;
  /**
   * How it is settled after the window, and whenever `withinWindow` can't be
   * used (a replay needs the original request, which an operator's reconcile
   * doesn't have).
   */
  afterWindow: AfterWindowMethod;
}

export interface PaymentProvider {
  readonly capabilities: ProviderCapabilities;
  /**
   * Creates (or replays) the charge for this key. A decline resolves to a
   * `Charge` with status 'failed' (a definite business outcome), not an error.
   * Throws `ProviderError` otherwise.
   */
  createCharge(req: ChargeRequest, idempotencyKey: string): Promise<Charge>;
  /** `lookup` providers: the charge made under this key, or null if there is none (proof). */
  findChargeByIdempotencyKey?(idempotencyKey: string): Promise<Charge | null>;
  /**
   * `search` providers: the charge whose stored reference is this key, or
   * null, which may only mean the index has not caught up yet
   * (capabilities.afterWindow.lagMs). Throws `ProviderError` `uncertain`
   * when the provider holds an effect under the key that is not final yet.
   */
  searchChargeByIdempotencyKey?(idempotencyKey: string): Promise<Charge | null>;
  /**
   * Refunds (part of) a charge, or replays the refund made under this key.
   * A refund the provider made but reports as failed resolves to a `Refund`
   * with status 'failed' (definite). A request the provider refuses before
   * acting (no such charge, more than is left to refund) throws a 'rejected'
   * ProviderError: nothing was refunded. Anything else throws as createCharge.
   */
  createRefund(req: RefundRequest, idempotencyKey: string): Promise<Refund>;
  /** `lookup` providers: the refund made under this key, or null if there is none (proof). */
  findRefundByIdempotencyKey?(idempotencyKey: string): Promise<Refund | null>;
  /**
   * `search` providers: the refund of `chargeId` that carries this key (and
   * operation key) as its reference, or null, which may only mean the
   * provider's listing has not caught up (capabilities.afterWindow.lagMs).
   * Throws `ProviderError` `uncertain` when the refund it finds is not final yet.
   */
  searchRefund?(ref: RefundSearch): Promise<Refund | null>;
}

/** What a search for a refund needs: the charge it refunds, and the references stored with it. */
export interface RefundSearch {
  chargeId: string;
  /** The downstream key the refund was requested under. */
  idempotencyKey: string;
  /** The refund step's operation key (`<refund workflowId>/refund`). */
  operationKey: string;
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
  /** Set when status is 'failed', e.g. Stripe's failure_reason. */
  failureCode?: string;
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

/**
 * What to do with a receipt whose send outcome is uncertain, for a provider
 * that can't be asked (capabilities `none`):
 * - `at_least_once`: send again under the same identity (the same Message-ID,
 *   derived from the operation key), accepting that the customer may get a
 *   duplicate that mail clients can thread or collapse by Message-ID;
 * - `at_most_once`: never send again; the order goes to an operator.
 */
export type UncertainSendPolicy = 'at_least_once' | 'at_most_once';

export interface EmailProvider {
  readonly capabilities: ProviderCapabilities;
  /** Only read when the capabilities say the provider can't be asked (`none`). */
  readonly uncertainPolicy?: UncertainSendPolicy;
  sendMessage(req: MessageRequest, idempotencyKey: string): Promise<Message>;
  /** `lookup` providers: the message sent under this key, or null (proof). */
  findMessageByIdempotencyKey?(idempotencyKey: string): Promise<Message | null>;
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
