/**
 * The Stripe payment provider, on the official `stripe` package.
 *
 * - A charge is one confirmed PaymentIntent under the step's downstream key, which also goes into
 *   metadata: Stripe has no lookup by key, so a search after the key window finds it there.
 * - A lost outcome is settled by replaying the same request inside the key window, else by search
 *   (its index lags; src/steps/settle.ts). Refunds alike, by listing the PaymentIntent's refunds.
 * - Nobody retries in here (`maxNetworkRetries: 0`, and `noHiddenRetry` for stripe-node's one
 *   hidden retry): Temporal and the ledger are the only retry loops, and each reconciles first.
 *
 * Errors map onto ProviderError kinds as in src/providers/sandbox.ts:
 *   402 card_error (a decline)   -> Charge with status 'failed' (definite)
 *   409 (same key in flight)     -> in_progress
 *   400 idempotency_error        -> key_conflict (the key's first request may have acted)
 *   other 400/401/403/404        -> rejected (definite: nothing happened; 401/403 are configuration)
 *   connection refused, DNS      -> not_sent (definite: no byte left)
 *   429, 5xx, timeout, reset     -> uncertain
 */
import Stripe from 'stripe';
import {
  ProviderError,
  type Charge,
  type ChargeRequest,
  type PaymentProvider,
  type Refund,
  type RefundRequest,
  type RefundSearch,
} from './types.ts';
import { notSentCode } from './sandbox.ts';

export interface StripeProviderOptions {
  secretKey: string;
  /** A local test server (the sandbox's Stripe surface, stripe-mock); default api.stripe.com. */
  apiBase?: string | undefined;
  /** One whole call. */
  timeoutMs: number;
  /** How long Stripe keeps idempotency keys (24 h). */
  keyWindowMs: number;
  /** How far its search index may lag behind writes. */
  searchLagMs: number;
}

/** The metadata field that carries the downstream key, for search. */
export const KEY_METADATA = 'idempotency_key';

/** What stripe-node's retry check looks for; renamed so it never retries on its own. */
const CLOSED_CONNECTION_CODES = new Set(['ECONNRESET', 'EPIPE']);

/**
 * stripe-node's HTTP client, except a connection closed before the response is `ECONNCLOSED`, which it does
 * not retry.
 */
function noHiddenRetry(): Stripe.HttpClient {
  const inner = Stripe.createNodeHttpClient();
  const client = Object.create(inner) as Stripe.HttpClient;
  client.makeRequest = async (...args: Parameters<Stripe.HttpClient['makeRequest']>) => {
    try {
      return await inner.makeRequest(...args);
    } catch (err) {
      const code = (err as { code?: unknown } | null)?.code;
      if (typeof code === 'string' && CLOSED_CONNECTION_CODES.has(code)) {
        throw Object.assign(new Error(`connection closed before a response (${code})`, { cause: err }), {
          code: 'ECONNCLOSED',
        });
      }
      throw err;
    }
  };
  return client;
}

export function createStripeClient(opts: Pick<StripeProviderOptions, 'secretKey' | 'apiBase' | 'timeoutMs'>) {
  const config: Stripe.StripeConfig = {
    maxNetworkRetries: 0,
    httpClient: noHiddenRetry(),
    timeout: opts.timeoutMs,
    telemetry: false,
    appInfo: { name: 'onceflow' },
  };
  if (opts.apiBase) {
    const url = new URL(opts.apiBase);
    config.host = url.hostname;
    config.protocol = url.protocol === 'http:' ? 'http' : 'https';
    config.port = Number(url.port || (url.protocol === 'http:' ? 80 : 443));
  }
  return new Stripe(opts.secretKey, config);
}

/** The create request for a charge: exported so the stripe-mock test sends exactly this. */
export function paymentIntentParams(
  req: ChargeRequest,
  idempotencyKey: string,
): Stripe.PaymentIntentCreateParams {
  const params: Stripe.PaymentIntentCreateParams = {
    amount: req.amount,
    currency: req.currency,
    payment_method: req.paymentMethod,
    // Confirmed in this call, with no redirect-based method (there is no customer to redirect).
    automatic_payment_methods: { enabled: true, allow_redirects: 'never' },
    confirm: true,
    metadata: { ...req.metadata, [KEY_METADATA]: idempotencyKey },
  };
  if (req.description !== undefined) params.description = req.description;
  if (req.receiptEmail !== undefined) params.receipt_email = req.receiptEmail;
  return params;
}

/** Stripe's search query language: a quoted string with `\` and `'` escaped. */
export function searchQuery(idempotencyKey: string): string {
  return `metadata['${KEY_METADATA}']:'${idempotencyKey.replace(/[\\']/g, (c) => `\\${c}`)}'`;
}

const isoFromUnix = (sec: number) => new Date(sec * 1000).toISOString();

function stringMap(v: Stripe.Metadata | null | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, x] of Object.entries(v ?? {})) if (typeof x === 'string') out[k] = x;
  return out;
}

/** A PaymentIntent as a Charge, when its outcome is final; otherwise uncertain (still processing, 3-D Secure). */
function chargeFromPaymentIntent(what: string, pi: Stripe.PaymentIntent, key?: string): Charge {
  const metadata = stringMap(pi.metadata);
  const base = {
    id: pi.id,
    amount: pi.amount,
    currency: pi.currency,
    idempotencyKey: key ?? metadata[KEY_METADATA] ?? '',
    metadata,
    created: isoFromUnix(pi.created),
  };
  if (pi.status === 'succeeded') return { ...base, status: 'succeeded' };
  const failure = pi.last_payment_error;
  if ((pi.status === 'requires_payment_method' && failure) || pi.status === 'canceled') {
    const failureCode =
      failure?.decline_code ?? failure?.code ?? (pi.status === 'canceled' ? 'canceled' : 'card_declined');
    return { ...base, status: 'failed', failureCode };
  }
  // processing, requires_action (3-D Secure), ...: not an outcome yet.
  throw new ProviderError('uncertain', `${what}: PaymentIntent ${pi.id} is ${pi.status}, not final`, {
    code: `payment_intent_${pi.status}`,
  });
}

/** A stripe-node error as a ProviderError with the sandbox client's meanings. */
function providerErrorFromStripe(what: string, err: unknown): ProviderError {
  if (!(err instanceof Stripe.errors.StripeError)) {
    return new ProviderError('uncertain', `${what}: ${String(err)}`, { code: 'network', cause: err });
  }
  const status = err.statusCode;
  const code = err.code ?? err.rawType ?? (status ? `http_${status}` : 'network');
  const message = `${what}: ${status ? `HTTP ${status} ` : ''}${err.message}`;
  const opts = { code, cause: err, ...(status !== undefined ? { status } : {}) };
  if (err instanceof Stripe.errors.StripeConnectionError) {
    const notSent = notSentCode(err.detail);
    if (notSent) return new ProviderError('not_sent', message, { ...opts, code: notSent });
    const timeout = (err.detail as { code?: unknown } | undefined)?.code === 'ETIMEDOUT';
    return new ProviderError('uncertain', message, { ...opts, code: timeout ? 'timeout' : 'network' });
  }
  if (status === 409) return new ProviderError('in_progress', message, opts);
  if (err.rawType === 'idempotency_error') return new ProviderError('key_conflict', message, opts);
  if (status !== undefined && status >= 400 && status < 500 && status !== 408 && status !== 429) {
    return new ProviderError('rejected', message, opts);
  }
  // 5xx, 408, 429, or no status at all: we can't know that nothing happened.
  return new ProviderError('uncertain', message, opts);
}

/** How many pages of a PaymentIntent's refunds a search reads before it gives up (uncertain). */
const MAX_REFUND_PAGES = 10;

/**
 * The create request for a refund. Our free-text reason goes into metadata: Stripe's `reason` enum
 * has side effects (fraudulent feeds Radar), which a customer's words must not choose.
 */
export function refundParams(req: RefundRequest, idempotencyKey: string): Stripe.RefundCreateParams {
  return {
    payment_intent: req.chargeId,
    amount: req.amount,
    metadata: {
      ...req.metadata,
      ...(req.reason !== undefined ? { reason: req.reason } : {}),
      [KEY_METADATA]: idempotencyKey,
    },
  };
}

/** Whether a listed refund is the one made under this key: both references must match, exactly. */
function refundMatches(r: Stripe.Refund, ref: RefundSearch): boolean {
  return r.metadata?.[KEY_METADATA] === ref.idempotencyKey && r.metadata?.operation_key === ref.operationKey;
}

/** A Stripe refund as a Refund when final; `pending` and `requires_action` are uncertain, settled later. */
function refundFromStripe(what: string, r: Stripe.Refund, chargeId: string, key: string): Refund {
  const metadata = stringMap(r.metadata);
  const base = {
    id: r.id,
    chargeId: typeof r.payment_intent === 'string' ? r.payment_intent : (r.payment_intent?.id ?? chargeId),
    amount: r.amount,
    currency: r.currency,
    idempotencyKey: metadata[KEY_METADATA] ?? key,
    metadata,
    created: isoFromUnix(r.created),
  };
  if (r.status === 'succeeded') return { ...base, status: 'succeeded' };
  if (r.status === 'failed' || r.status === 'canceled') {
    return { ...base, status: 'failed', failureCode: r.failure_reason ?? r.status };
  }
  throw new ProviderError(
    'uncertain',
    `${what}: refund ${r.id} is ${r.status ?? 'without a status'}, not final`,
    {
      code: `refund_${r.status ?? 'unknown'}`,
    },
  );
}

/**
 * The one object found under a key, or null. Two under one key are only possible if the key was
 * reused past the window: an operator must look, so the outcome stays unknown.
 */
function onlyMatch<T extends { id: string }>(what: string, nouns: string, matches: T[]): T | null {
  if (matches.length > 1) {
    throw new ProviderError(
      'uncertain',
      `${what}: ${matches.length} ${nouns} carry this key (${matches.map((m) => m.id).join(', ')}); an operator must look`,
      { code: 'ambiguous' },
    );
  }
  return matches[0] ?? null;
}

export function createStripePaymentProvider(opts: StripeProviderOptions): PaymentProvider {
  const stripe = createStripeClient(opts);
  return {
    capabilities: Object.freeze({
      keyWindowMs: opts.keyWindowMs,
      withinWindow: 'replay',
      afterWindow: Object.freeze({ kind: 'search', lagMs: opts.searchLagMs }),
    }),

    async createCharge(req: ChargeRequest, idempotencyKey: string): Promise<Charge> {
      const what = 'stripe createCharge';
      let pi: Stripe.PaymentIntent;
      try {
        pi = await stripe.paymentIntents.create(paymentIntentParams(req, idempotencyKey), { idempotencyKey });
      } catch (err) {
        // A decline is a definite business outcome, carried by the error's PaymentIntent.
        if (err instanceof Stripe.errors.StripeCardError && err.payment_intent) {
          return chargeFromPaymentIntent(what, err.payment_intent, idempotencyKey);
        }
        throw providerErrorFromStripe(what, err);
      }
      return chargeFromPaymentIntent(what, pi, idempotencyKey);
    },

    async createRefund(req: RefundRequest, idempotencyKey: string): Promise<Refund> {
      const what = 'stripe createRefund';
      let refund: Stripe.Refund;
      try {
        refund = await stripe.refunds.create(refundParams(req, idempotencyKey), { idempotencyKey });
      } catch (err) {
        // A 400 refusal before acting is `rejected`: nothing was refunded.
        throw providerErrorFromStripe(what, err);
      }
      return refundFromStripe(what, refund, req.chargeId, idempotencyKey);
    },

    async searchRefund(ref: RefundSearch): Promise<Refund | null> {
      const what = 'stripe searchRefund';
      // A PaymentIntent's refunds, newest first, a page at a time; an order has few (its charge caps them).
      const matches: Stripe.Refund[] = [];
      let startingAfter: string | undefined;
      for (let page = 0; page < MAX_REFUND_PAGES; page++) {
        let list: Stripe.ApiList<Stripe.Refund>;
        try {
          list = await stripe.refunds.list({
            payment_intent: ref.chargeId,
            limit: 100,
            ...(startingAfter !== undefined ? { starting_after: startingAfter } : {}),
          });
        } catch (err) {
          throw providerErrorFromStripe(what, err);
        }
        matches.push(...list.data.filter((r) => refundMatches(r, ref)));
        const last = list.data[list.data.length - 1];
        if (!list.has_more || !last) break;
        startingAfter = last.id;
        if (page === MAX_REFUND_PAGES - 1) {
          // Never a "not found" from a listing we did not read to the end.
          throw new ProviderError('uncertain', `${what}: more than ${MAX_REFUND_PAGES} pages of refunds`, {
            code: 'too_many_refunds',
          });
        }
      }
      const match = onlyMatch(what, 'refunds', matches);
      return match && refundFromStripe(what, match, ref.chargeId, ref.idempotencyKey);
    },

    async searchChargeByIdempotencyKey(idempotencyKey: string): Promise<Charge | null> {
      const what = 'stripe searchChargeByIdempotencyKey';
      let found: Stripe.PaymentIntent[];
      try {
        const page = await stripe.paymentIntents.search({ query: searchQuery(idempotencyKey), limit: 10 });
        found = page.data;
      } catch (err) {
        throw providerErrorFromStripe(what, err);
      }
      // The index matches on the metadata value; keep only exact matches.
      const matches = found.filter((pi) => pi.metadata?.[KEY_METADATA] === idempotencyKey);
      const match = onlyMatch(what, 'PaymentIntents', matches);
      return match && chargeFromPaymentIntent(what, match, idempotencyKey);
    },
  };
}
