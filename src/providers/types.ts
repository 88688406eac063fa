/**
 * What the product needs from a payment and an email provider; each adapter (sandbox, Stripe,
 * SMTP) implements these. See docs/PROVIDERS.md.
 *
 * Terminology
 * - idempotency key: the downstream key sent with every create request, stable across retries.
 * - definite: we know whether the effect happened (a decline is definite; a timeout is not).
 * - uncertain: the effect MAY have happened: reconcile by key, then retry with the SAME key.
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
 * How a provider can settle a lost response (read by src/steps/settle.ts):
 * - `lookup`: "what did you do under key K", exactly; not found is proof (the sandbox).
 * - `replay`: the same request under the same key returns the stored outcome (Stripe).
 * - `search`: by a stored reference; not found is proof only `lagMs` after the last request.
 * - `none`: can't be asked (SMTP); EmailProvider.uncertainPolicy decides.
 */
type SettleMethod = 'lookup' | 'replay' | 'none';
type AfterWindowMethod = { kind: 'lookup' } | { kind: 'search'; lagMs: number } | { kind: 'none' };

export interface ProviderCapabilities {
  /** How long the provider remembers a key (null: no keys); bounds the automatic retry horizon. */
  keyWindowMs: number | null;
  /** How an uncertain outcome is settled while the record is inside the key window. */
  withinWindow: SettleMethod;
  /** After the window, or without the original request (an operator's reconcile). */
  afterWindow: AfterWindowMethod;
}

export interface PaymentProvider {
  readonly capabilities: ProviderCapabilities;
  /** Creates (or replays) the charge for this key; a decline resolves to status 'failed', not an error. */
  createCharge(req: ChargeRequest, idempotencyKey: string): Promise<Charge>;
  /** `lookup` providers: the charge made under this key, or null if there is none (proof). */
  findChargeByIdempotencyKey?(idempotencyKey: string): Promise<Charge | null>;
  /** `search` providers: null may mean the index lags; `uncertain` when the effect is not final yet. */
  searchChargeByIdempotencyKey?(idempotencyKey: string): Promise<Charge | null>;
  /**
   * Refunds (part of) a charge, or replays it; refused before acting throws 'rejected' (nothing refunded).
   */
  createRefund(req: RefundRequest, idempotencyKey: string): Promise<Refund>;
  /** `lookup` providers: the refund made under this key, or null if there is none (proof). */
  findRefundByIdempotencyKey?(idempotencyKey: string): Promise<Refund | null>;
  /** `search` providers: as findChargeByReference, among `chargeId`'s refunds. */
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
 * An uncertain receipt at a provider that can't be asked: `at_least_once` sends again with the same
 * Message-ID (clients collapse duplicates); `at_most_once` never does, and an operator decides.
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
 * - 'uncertain': timeout, reset, 5xx, 429, unreadable response: MAY have happened; reconcile.
 * - 'not_sent': refused or unresolved before a byte was written: nothing happened.
 * - 'rejected': 4xx validation before acting: nothing happened; the same request won't help.
 * - 'key_conflict': the key holds another request, which may have acted: reconcile.
 * - 'in_progress': 409, the same key is being processed: retry later with it.
 */
export type ProviderErrorKind = 'uncertain' | 'not_sent' | 'rejected' | 'key_conflict' | 'in_progress';

export class ProviderError extends Error {
  override name = 'ProviderError';
  readonly kind: ProviderErrorKind;
  readonly definite: boolean;
  /** HTTP status, when a response arrived. */
  readonly status?: number;
  /** The provider's error code, or 'timeout', 'network', 'connection_refused', 'dns', 'bad_response'. */
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
