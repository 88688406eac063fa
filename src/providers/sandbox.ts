/**
 * HTTP clients for the sandbox providers, implementing the provider
 * interfaces. They map every outcome onto `Charge` / `Message` or a
 * `ProviderError` whose `kind` says what the caller may conclude:
 *
 *   200                       -> the object
 *   402 card_error            -> Charge with status 'failed' (definite decline)
 *   409                       -> in_progress (same key still being processed)
 *   400 idempotency_error     -> key_conflict (the key's first request may have acted)
 *   other 4xx                 -> rejected (definite: nothing happened)
 *   connection refused, DNS
 *   failure (nothing sent)    -> not_sent (definite: nothing happened)
 *   429, 5xx, timeout, reset,
 *   dropped connection, junk  -> uncertain (the effect may have happened)
 *   lookup 404                -> null
 */
import {
  ProviderError,
  type Charge,
  type ChargeRequest,
  type EmailProvider,
  type Message,
  type MessageRequest,
  type Refund,
  type RefundRequest,
  type PaymentProvider,
  type ProviderCapabilities,
} from './types.ts';
import { PROVIDER_KEY_WINDOW_MS } from './contract.ts';
import { Agent, request as httpRequest } from 'undici';
import { httpClientSpan } from '../tracing/index.ts';

export interface SandboxClientOptions {
  /** e.g. http://127.0.0.1:4010 */
  baseUrl: string;
  /** Whole request, including reading the body. */
  timeoutMs: number;
}

/**
 * The connection pool every provider client shares: undici's `request`, not `fetch`, whose WHATWG
 * layer costs several times the CPU per call (`npm run bench:http`). No retries and no redirects: a
 * POST is sent at most once per call, to this URL only.
 */
const dispatcher = new Agent();

interface HttpResult {
  status: number;
  body: unknown;
}

interface ApiErrorBody {
  error?: { type?: string; code?: string; message?: string; charge?: string; charge_object?: unknown };
}

/**
 * Errors that can only happen before any byte was written (refused, no address; with happy eyeballs
 * an AggregateError of them). Anything else may come after the request left, so it stays uncertain.
 */
const NOT_SENT: Record<string, { syscall: string; code: string }> = {
  ECONNREFUSED: { syscall: 'connect', code: 'connection_refused' },
  ENOTFOUND: { syscall: 'getaddrinfo', code: 'dns' },
  EAI_AGAIN: { syscall: 'getaddrinfo', code: 'dns' },
};

export function notSentCode(err: unknown): string | null {
  const parts = err instanceof AggregateError ? err.errors : [err];
  let code: string | null = null;
  for (const part of parts) {
    const p = part as { code?: unknown; syscall?: unknown } | null | undefined;
    const known = typeof p?.code === 'string' ? NOT_SENT[p.code] : undefined;
    if (!known || p?.syscall !== known.syscall) return null;
    code = known.code;
  }
  return code;
}

function describe(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const cause = err.cause instanceof Error ? `: ${err.cause.message}` : '';
  return `${err.message}${cause}`;
}

async function request(
  opts: SandboxClientOptions,
  method: 'GET' | 'POST',
  path: string,
  what: string,
  init: { body?: unknown; idempotencyKey?: string } = {},
): Promise<HttpResult> {
  const headers: Record<string, string> = { accept: 'application/json' };
  if (init.body !== undefined) headers['content-type'] = 'application/json';
  if (init.idempotencyKey !== undefined) headers['idempotency-key'] = init.idempotencyKey;
  const signal = AbortSignal.timeout(opts.timeoutMs);
  const url = new URL(path, opts.baseUrl);
  let status: number;
  let text: string;
  try {
    // A client span (child of the running activity's), with `traceparent` in the headers.
    ({ status, text } = await httpClientSpan(method, url, headers, async () => {
      const res = await httpRequest(url, {
        method,
        headers,
        body: init.body === undefined ? null : JSON.stringify(init.body),
        signal,
        dispatcher,
      });
      return { status: res.statusCode, text: await res.body.text() };
    }));
  } catch (err) {
    // No (complete) response: the request may or may not have been acted on,
    // unless it provably never left.
    const timeout = err instanceof Error && (err.name === 'TimeoutError' || signal.aborted);
    const notSent = timeout ? null : notSentCode(err);
    if (notSent) {
      throw new ProviderError('not_sent', `${what}: not sent (${describe(err)})`, {
        code: notSent,
        cause: err,
      });
    }
    throw new ProviderError(
      'uncertain',
      `${what}: ${timeout ? `no response within ${opts.timeoutMs} ms` : `connection failed (${describe(err)})`}`,
      { code: timeout ? 'timeout' : 'network', cause: err },
    );
  }
  let body: unknown;
  try {
    body = text === '' ? undefined : JSON.parse(text);
  } catch (err) {
    throw new ProviderError('uncertain', `${what}: unreadable response (HTTP ${status})`, {
      code: 'bad_response',
      status,
      cause: err,
    });
  }
  return { status, body };
}

/** The error for any status the caller doesn't handle itself. */
function statusError(what: string, res: HttpResult): ProviderError {
  const e = (res.body as ApiErrorBody | undefined)?.error;
  const code = e?.code ?? e?.type ?? `http_${res.status}`;
  const message = `${what}: HTTP ${res.status}${e?.message ? ` ${e.message}` : ''}`;
  if (res.status === 409) return new ProviderError('in_progress', message, { code, status: res.status });
  if (e?.type === 'idempotency_error') {
    // The key holds another request with other parameters; that one may have acted.
    return new ProviderError('key_conflict', message, { code, status: res.status });
  }
  if (res.status >= 400 && res.status < 500 && res.status !== 408 && res.status !== 429) {
    return new ProviderError('rejected', message, { code, status: res.status });
  }
  // 5xx, 408, 429, or anything unexpected: we can't know that nothing happened.
  return new ProviderError('uncertain', message, { code, status: res.status });
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

const isoFromUnix = (sec: number) => new Date(sec * 1000).toISOString();

function stringMap(v: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  if (isRecord(v)) for (const [k, x] of Object.entries(v)) if (typeof x === 'string') out[k] = x;
  return out;
}

/** A 2xx whose body is not what the call returns: whatever the call did is unknown. */
const notA = (what: string, noun: string, status: number) =>
  new ProviderError('uncertain', `${what}: response is not a ${noun}`, { code: 'bad_response', status });

function parseCharge(what: string, v: unknown, status: number): Charge {
  if (
    !isRecord(v) ||
    typeof v.id !== 'string' ||
    (v.status !== 'succeeded' && v.status !== 'failed') ||
    typeof v.amount !== 'number' ||
    typeof v.currency !== 'string' ||
    typeof v.idempotency_key !== 'string' ||
    typeof v.created !== 'number'
  ) {
    throw notA(what, 'charge', status);
  }
  const charge: Charge = {
    id: v.id,
    status: v.status,
    amount: v.amount,
    currency: v.currency,
    idempotencyKey: v.idempotency_key,
    metadata: stringMap(v.metadata),
    created: isoFromUnix(v.created),
  };
  if (typeof v.failure_code === 'string') charge.failureCode = v.failure_code;
  return charge;
}

function parseRefund(what: string, v: unknown, status: number): Refund {
  if (
    !isRecord(v) ||
    typeof v.id !== 'string' ||
    (v.status !== 'succeeded' && v.status !== 'failed') ||
    typeof v.charge !== 'string' ||
    typeof v.amount !== 'number' ||
    typeof v.currency !== 'string' ||
    typeof v.idempotency_key !== 'string' ||
    typeof v.created !== 'number'
  ) {
    throw notA(what, 'refund', status);
  }
  return {
    id: v.id,
    status: v.status,
    chargeId: v.charge,
    amount: v.amount,
    currency: v.currency,
    idempotencyKey: v.idempotency_key,
    metadata: stringMap(v.metadata),
    created: isoFromUnix(v.created),
  };
}

function parseMessage(what: string, v: unknown, status: number): Message {
  if (
    !isRecord(v) ||
    typeof v.id !== 'string' ||
    v.status !== 'sent' ||
    typeof v.to !== 'string' ||
    typeof v.idempotency_key !== 'string' ||
    typeof v.created !== 'number'
  ) {
    throw notA(what, 'message', status);
  }
  return {
    id: v.id,
    status: 'sent',
    to: v.to,
    idempotencyKey: v.idempotency_key,
    created: isoFromUnix(v.created),
  };
}

/**
 * The sandbox answers "what did you do under key K" exactly, for charges and
 * messages, inside and after its key window (after it, the most recent
 * effect under the key).
 */
export const SANDBOX_CAPABILITIES: ProviderCapabilities = Object.freeze({
  keyWindowMs: PROVIDER_KEY_WINDOW_MS,
  withinWindow: 'lookup',
  afterWindow: Object.freeze({ kind: 'lookup' }),
});

/** The sandbox clients always have their lookups. */
export type SandboxPaymentProvider = PaymentProvider &
  Required<Pick<PaymentProvider, 'findChargeByIdempotencyKey' | 'findRefundByIdempotencyKey'>>;
export type SandboxEmailProvider = EmailProvider &
  Required<Pick<EmailProvider, 'findMessageByIdempotencyKey'>>;

export function createSandboxPaymentProvider(opts: SandboxClientOptions): SandboxPaymentProvider {
  return {
    capabilities: SANDBOX_CAPABILITIES,
    async createCharge(req: ChargeRequest, idempotencyKey: string): Promise<Charge> {
      const what = 'sandbox createCharge';
      const body: Record<string, unknown> = {
        amount: req.amount,
        currency: req.currency,
        payment_method: req.paymentMethod,
        metadata: req.metadata,
      };
      if (req.description !== undefined) body.description = req.description;
      if (req.receiptEmail !== undefined) body.receipt_email = req.receiptEmail;
      const res = await request(opts, 'POST', '/v1/charges', what, { body, idempotencyKey });
      if (res.status === 200) return parseCharge(what, res.body, res.status);
      const e = (res.body as ApiErrorBody | undefined)?.error;
      if (res.status === 402 && e?.type === 'card_error') {
        // A decline is a definite business outcome, not an error.
        if (e.charge_object !== undefined) return parseCharge(what, e.charge_object, res.status);
        // A provider that only returns the id (Stripe's Charges API): build it from the request.
        if (typeof e.charge === 'string') {
          return {
            id: e.charge,
            status: 'failed',
            amount: req.amount,
            currency: req.currency,
            failureCode: e.code ?? 'card_declined',
            idempotencyKey,
            metadata: req.metadata,
            created: new Date().toISOString(),
          };
        }
      }
      throw statusError(what, res);
    },

    async findChargeByIdempotencyKey(idempotencyKey: string): Promise<Charge | null> {
      const what = 'sandbox findChargeByIdempotencyKey';
      const path = `/v1/charges?idempotency_key=${encodeURIComponent(idempotencyKey)}`;
      const res = await request(opts, 'GET', path, what);
      if (res.status === 200) return parseCharge(what, res.body, res.status);
      if (res.status === 404) return null;
      throw statusError(what, res);
    },

    async createRefund(req: RefundRequest, idempotencyKey: string): Promise<Refund> {
      const what = 'sandbox createRefund';
      const body: Record<string, unknown> = {
        charge: req.chargeId,
        amount: req.amount,
        metadata: req.metadata,
      };
      if (req.reason !== undefined) body.reason = req.reason;
      const res = await request(opts, 'POST', '/v1/refunds', what, { body, idempotencyKey });
      if (res.status === 200) return parseRefund(what, res.body, res.status);
      // A 400 (no such charge, more than is left) is a refusal before acting: 'rejected'.
      throw statusError(what, res);
    },

    async findRefundByIdempotencyKey(idempotencyKey: string): Promise<Refund | null> {
      const what = 'sandbox findRefundByIdempotencyKey';
      const path = `/v1/refunds?idempotency_key=${encodeURIComponent(idempotencyKey)}`;
      const res = await request(opts, 'GET', path, what);
      if (res.status === 200) return parseRefund(what, res.body, res.status);
      if (res.status === 404) return null;
      throw statusError(what, res);
    },
  };
}

export function createSandboxEmailProvider(opts: SandboxClientOptions): SandboxEmailProvider {
  return {
    capabilities: SANDBOX_CAPABILITIES,
    async sendMessage(req: MessageRequest, idempotencyKey: string): Promise<Message> {
      const what = 'sandbox sendMessage';
      const body = { to: req.to, subject: req.subject, text: req.text, metadata: req.metadata };
      const res = await request(opts, 'POST', '/v1/messages', what, { body, idempotencyKey });
      if (res.status === 200) return parseMessage(what, res.body, res.status);
      throw statusError(what, res);
    },

    async findMessageByIdempotencyKey(idempotencyKey: string): Promise<Message | null> {
      const what = 'sandbox findMessageByIdempotencyKey';
      const path = `/v1/messages?idempotency_key=${encodeURIComponent(idempotencyKey)}`;
      const res = await request(opts, 'GET', path, what);
      if (res.status === 200) return parseMessage(what, res.body, res.status);
      if (res.status === 404) return null;
      throw statusError(what, res);
    },
  };
}
