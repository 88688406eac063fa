/**
 * POST /v1/webhooks/payments: signed events from the payment provider (the sandbox's
 * `Onceflow-Signature`, or Stripe's `Stripe-Signature`).
 *
 * 1. The signature is checked over the raw body first: a forged or stale event gets 401 and leaves
 *    no trace. During a rotation both secrets verify.
 * 2. A signature proves who sent an event, not which charge it is about: it is applied only if it
 *    names the order's charge (downstream key or recorded charge id) with the order's amount and
 *    currency; anything else is `ignored_mismatch`, acknowledged with 200.
 * 3. No transaction is held across the call to Temporal (a hanging Temporal would pin a connection
 *    per event). Each step autocommits: a. record `signal_pending` with a signal lease (a final row
 *    is a duplicate; a pending one is signalled again); b. signal within SIGNAL_DEADLINE_MS;
 *    c. record the result. A failed signal, or a workflow not started yet, answers 503 so the
 *    provider retries. Signalling twice is harmless: the workflow keeps the first event.
 * 4. Ordering is the workflow's job: this route never touches the order's status.
 * 5. No signal when it could change nothing (`charge_settled`): the charge's record is final and
 *    the order waits for no event. This is the common case, and a signal costs a history write.
 * 6. An event that overtakes the charge's own response (record in_progress) waits up to
 *    WEBHOOK_CHARGE_WAIT_MS, holding no connection, then is as 5. or signalled.
 * 7. Refund events take the same path to the refund's workflow (webhook-refunds.ts), under their
 *    own consumer.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyPluginAsync } from 'fastify';
import { SpanKind } from '@opentelemetry/api';
import { WorkflowNotFoundError } from '@temporalio/client';
import { withClient } from '../../db/index.ts';
import { errorFields, log } from '../../log.ts';
import { TERMINAL_STATUSES } from '../../orders/model.ts';
import { SIGNATURE_HEADER, WebhookSignatureError, verifyWebhook } from '../../providers/webhook-signature.ts';
import { STRIPE_SIGNATURE_HEADER, stripeSignatureVerifier } from '../../providers/stripe-webhook.ts';
import { KEY_METADATA } from '../../providers/stripe.ts';
import { paymentEventSignal, type PaymentEvent } from '../../orders/contract.ts';
import { contextFromCarrier, inSpan, requestSpan, tracingActive } from '../../tracing/index.ts';
import type { ApiContext } from '../context.ts';
import { ProblemError } from '../../http/problems.ts';
import { WebhookAck } from '../schemas.ts';
import { RETRY_AFTER_HEADER, jsonResponse, problemResponse } from '../../http/openapi.ts';
import { getOrder } from '../../orders/sql.ts';
import { stepKeys, type OrderStatus } from '../../orders/model.ts';
import { chargeScope, chargeState } from '../../steps/payment.ts';
import { getOutbox } from '../../outbox/sql.ts';
import {
  claimWebhookSignal,
  finishWebhookSignal,
  recordWebhookEvent,
  releaseWebhookSignal,
} from '../../webhooks/sql.ts';
import { downstreamKey, type OperationRecord } from 'onceflow';
import type { OrderRow } from '../../orders/sql.ts';
import { REFUND_TERMINAL_STATUSES, refundEventSignal, type RefundEvent } from '../../refunds/contract.ts';
import { getRefund } from '../../refunds/sql.ts';
import {
  REFUND_SIGNAL_CONSUMER,
  SETTLED_REFUND_STATUSES,
  eventNamesRefund,
  isRefundEventType,
  refundEventOutcome,
  refundFacts,
  refundStepScope,
} from './webhook-refunds.ts';

/** The consumer that turns payment events into workflow signals. Another consumer gets its own markers. */
const ORDER_SIGNAL_CONSUMER = 'order-workflow-signal';
/** Within the provider's delivery timeout, so a hanging Temporal costs a retry, never a held connection. */
const SIGNAL_DEADLINE_MS = 3_000;
/** The signal lease: past the deadline, so an overlapping delivery never overtakes a live attempt. */
const SIGNAL_LEASE_MS = SIGNAL_DEADLINE_MS + 1_000;

interface ChargeEvent {
  id: string;
  type: string;
  /** The event's data.object, as verified (refund events read it through webhook-refunds.ts). */
  object: Record<string, unknown>;
  charge: {
    id: string;
    status?: string;
    failureCode?: string;
    /** The downstream idempotency key the charge was made under, if the provider echoes it. */
    idempotencyKey?: string;
    /** Minor units. */
    amount?: number;
    /** Lowercase ISO 4217, as orders store it. */
    currency?: string;
    orderId?: string;
    tenantId?: string;
  };
}

const str = (v: unknown, max = 255): string | undefined =>
  typeof v === 'string' && v.length > 0 && v.length <= max && /^[\x20-\x7e]+$/.test(v) ? v : undefined;

/** Extracts what we need from a verified event; anything else about its shape is the provider's business. */
function parseEvent(raw: Buffer): ChargeEvent {
  let doc: unknown;
  try {
    doc = JSON.parse(raw.toString('utf8'));
  } catch {
    throw new ProblemError('invalidRequest', 'The webhook body is not valid JSON.');
  }
  const d = doc as { id?: unknown; type?: unknown; data?: { object?: Record<string, unknown> } } | null;
  const id = str(d?.id);
  const type = str(d?.type);
  const obj = d?.data?.object;
  const chargeId = obj && typeof obj === 'object' ? str(obj.id) : undefined;
  if (!id || !type || !obj || !chargeId) {
    throw new ProblemError('invalidRequest', 'The webhook event needs id, type and data.object.id.');
  }
  const metadata = (obj.metadata ?? {}) as Record<string, unknown>;
  // A PaymentIntent does not echo its Idempotency-Key, so the adapter stores the downstream key in
  // metadata; order_id/tenant_id only find the order, never prove the charge.
  const isPaymentIntent = obj.object === 'payment_intent';
  const lastError = (isPaymentIntent ? obj.last_payment_error : undefined) as
    Record<string, unknown> | undefined;
  return {
    id,
    type,
    object: obj,
    charge: {
      id: chargeId,
      status: str(obj.status),
      failureCode:
        str(obj.failure_code) ??
        str(obj.failure_message) ??
        str(lastError?.decline_code) ??
        str(lastError?.code),
      idempotencyKey: isPaymentIntent ? str(metadata[KEY_METADATA]) : str(obj.idempotency_key),
      amount: typeof obj.amount === 'number' && Number.isSafeInteger(obj.amount) ? obj.amount : undefined,
      currency: str(obj.currency, 3)?.toLowerCase(),
      orderId: str(metadata.order_id, 100),
      tenantId: str(metadata.tenant_id, 100),
    },
  };
}

/** Statuses an event can't change once the charge's record is final (5. above). */
const SETTLED_CHARGE_STATUSES: readonly OrderStatus[] = ['payment_pending', 'paid', 'completed', 'rejected'];

/** Whether the charge's record is final, re-reading while a live call is in flight (6. above). */
export async function chargeRecordSettled(
  read: () => Promise<OperationRecord | null>,
  waitMs: number,
  gone: () => boolean = () => false,
): Promise<boolean> {
  const deadline = Date.now() + waitMs;
  for (let pause = 10; ; pause *= 2) {
    const record = await read();
    if (!record) return false;
    if (chargeState(record).settled) return true;
    const now = Date.now();
    const left = deadline - now;
    // A claim whose lease has run out has no live owner to record an answer (it died or paused).
    const ownerGone = record.leaseExpiresAt !== null && record.leaseExpiresAt.getTime() <= now;
    if (record.state !== 'in_progress' || ownerGone || left <= 0 || gone()) return false;
    await sleep(Math.min(pause, left));
  }
}

/**
 * Whether a verified event is about this order's charge (2. above); the ledger is read only when the key
 * does not settle it.
 */
async function eventNamesOrderCharge(
  charge: ChargeEvent['charge'],
  order: Pick<OrderRow, 'tenant_id' | 'workflow_id' | 'amount' | 'currency' | 'charge_id'>,
  readRecord: (scope: ReturnType<typeof chargeScope>) => Promise<OperationRecord | null>,
): Promise<boolean> {
  if (charge.amount === undefined || charge.amount !== Number(order.amount)) return false;
  if (charge.currency === undefined || charge.currency !== order.currency) return false;
  const scope = chargeScope({ tenantId: order.tenant_id, key: stepKeys.charge(order.workflow_id) });
  if (charge.idempotencyKey !== undefined && charge.idempotencyKey === downstreamKey(scope)) return true;
  if (order.charge_id !== null && order.charge_id === charge.id) return true;
  const record = await readRecord(scope);
  if (!record) return false;
  const recorded = (record.result ?? {}) as { chargeId?: unknown };
  return record.providerRef === charge.id || recorded.chargeId === charge.id;
}

/** 503 with Retry-After: the provider retries the delivery. */
const retryLater = (detail: string, seconds = 5) =>
  new ProblemError('unavailable', detail, {}, { 'retry-after': String(seconds) });

const OUTCOMES: Record<string, PaymentEvent['outcome']> = {
  'charge.succeeded': 'succeeded',
  'charge.failed': 'failed',
  'payment_intent.succeeded': 'succeeded',
  'payment_intent.payment_failed': 'failed',
};

type EventBase = {
  provider: string;
  eventId: string;
  consumer: string;
  eventType: string;
  tenantId: string | null;
  orderId: string | null;
};

/** An event with nothing to signal: recording it is all there is, one autocommitted statement. */
async function recordOnly(
  pool: ApiContext['pool'],
  base: EventBase,
  why: string,
  settledOutcome: string,
): Promise<{ duplicate: boolean; outcome: string }> {
  const fresh = await withClient(pool, (c) => recordWebhookEvent(c, { ...base, outcome: why }));
  if (fresh) return { duplicate: false, outcome: why };
  return { duplicate: true, outcome: why === settledOutcome ? 'duplicate' : why };
}

/** Steps a-c of 3. above for one consumer's signal. */
async function deliverSignal(
  pool: ApiContext['pool'],
  d: { base: EventBase; gone: () => boolean; send: () => Promise<void>; closed: () => Promise<boolean> },
): Promise<{ duplicate: boolean; outcome: string }> {
  const { base } = d;
  // a. Record the intent (3.). Another delivery's live attempt: wait for its result, holding nothing.
  const waitUntil = Date.now() + SIGNAL_LEASE_MS;
  for (let pause = 10; ; pause = Math.min(pause * 2, 200)) {
    const claim = await withClient(pool, (c) => claimWebhookSignal(c, base, SIGNAL_LEASE_MS));
    if (claim.state === 'claimed') break;
    if (claim.state === 'done') return { duplicate: true, outcome: 'duplicate' };
    const left = waitUntil - Date.now();
    if (left <= 0 || d.gone()) throw retryLater('The event is being processed; retry later.', 1);
    await sleep(Math.min(pause, left));
  }

  // b. Signal, within a deadline.
  let result: 'signalled' | 'workflow_closed' = 'signalled';
  try {
    await d.send();
  } catch (err) {
    const closed = err instanceof WorkflowNotFoundError && (await d.closed());
    if (!closed) {
      // Still pending, its lease released: the provider's retry signals again at once.
      await withClient(pool, (c) => releaseWebhookSignal(c, base)).catch((releaseErr: unknown) =>
        log.warn('could not release a webhook signal lease; it runs out', {
          eventId: base.eventId,
          ...errorFields(releaseErr),
        }),
      );
      // Not started yet (the outbox relay will start it): the provider retries.
      if (err instanceof WorkflowNotFoundError) {
        throw retryLater('The workflow is not ready for events yet; retry later.');
      }
      throw err;
    }
    // Closed workflows can't be signalled; that is fine: what the event is about has settled.
    result = 'workflow_closed';
  }
  // c. Record the result. If this fails, the row stays pending and a redelivery signals again.
  await withClient(pool, (c) => finishWebhookSignal(c, { ...base, outcome: result }));
  return { duplicate: false, outcome: result };
}

/** Anything but a problem we meant is a 503: the provider retries the delivery. */
function retryableUnlessProblem(eventId: string): (err: unknown) => never {
  return (err) => {
    if (!(err instanceof ProblemError)) {
      log.error('webhook processing failed', { eventId, ...errorFields(err) });
      throw retryLater('The event could not be processed; retry later.');
    }
    throw err;
  };
}

export const webhookRoutes: FastifyPluginAsync<{ ctx: ApiContext }> = async (app, { ctx }) => {
  const { pool, temporal, config, ledger } = ctx;
  // Read while wiring: off loopback, a default secret stops the API at start-up, not at its first webhook.
  // During a rotation the previous secret verifies too; the sandbox signs with the current one.
  const stripe = config.providers.payment === 'stripe';
  // Events are recorded per provider: the same event id from two providers is two events.
  const webhookProvider = stripe ? 'stripe' : 'sandbox';
  // Stripe's endpoint secret; without a real Stripe key the sandbox signs, with WEBHOOK_SECRET.
  const secret: readonly string[] =
    stripe && config.providers.stripe.webhookSecret
      ? [config.providers.stripe.webhookSecret]
      : [config.webhookSecret, ...(config.webhookSecretPrevious ? [config.webhookSecretPrevious] : [])];
  const signatureHeader = (stripe ? STRIPE_SIGNATURE_HEADER : SIGNATURE_HEADER).toLowerCase();
  const verifyStripe = stripe ? stripeSignatureVerifier(secret) : null;
  const verify = (raw: Buffer | string, header: string | string[] | undefined) =>
    verifyStripe ? verifyStripe(raw, header) : verifyWebhook(secret, raw, header);

  /** A refund event (webhook-refunds.ts), handled as 2., 3., 5. and 6. above for its refund. */
  async function refundEvent(event: ChargeEvent, gone: () => boolean) {
    const facts = refundFacts(event.object, str);
    const outcome = refundEventOutcome(event.type, facts.status);
    const { tenantId, orderId, refundId } = facts;
    const base: EventBase = {
      provider: webhookProvider,
      eventId: event.id,
      consumer: REFUND_SIGNAL_CONSUMER,
      eventType: event.type,
      tenantId: tenantId ?? null,
      orderId: orderId ?? null,
    };
    if (!outcome) return recordOnly(pool, base, 'ignored_not_final', 'refund_settled');
    const refund =
      tenantId && orderId && refundId
        ? await withClient(pool, (c) => getRefund(c, tenantId, orderId, refundId))
        : null;
    if (!refund) return recordOnly(pool, base, 'ignored_unknown_refund', 'refund_settled');
    if (!(await eventNamesRefund(facts, refund, (scope) => ledger.get(scope)))) {
      log.warn('webhook event does not name the refund; ignored', {
        eventId: event.id,
        workflowId: refund.workflow_id,
      });
      return recordOnly(pool, base, 'ignored_mismatch', 'refund_settled');
    }
    const settled =
      SETTLED_REFUND_STATUSES.includes(refund.status) &&
      (await chargeRecordSettled(
        () => ledger.get(refundStepScope(refund)),
        // Only a refund not yet answered can still be in flight.
        refund.status === 'pending' ? config.api.webhookChargeWaitMs : 0,
        gone,
      ));
    if (settled) return recordOnly(pool, base, 'refund_settled', 'refund_settled');
    const signal: RefundEvent = {
      source: 'webhook',
      outcome,
      eventId: event.id,
      providerRefundId: facts.id,
      ...(facts.failureReason ? { reason: facts.failureReason } : {}),
    };
    return deliverSignal(pool, {
      base,
      gone,
      send: () =>
        temporal.withDeadline(Date.now() + SIGNAL_DEADLINE_MS, () =>
          temporal.workflow.getHandle(refund.workflow_id).signal(refundEventSignal, signal),
        ),
      closed: async () =>
        REFUND_TERMINAL_STATUSES.includes(refund.status) ||
        Boolean((await withClient(pool, (c) => getOutbox(c, refund.workflow_id)))?.started_at),
    });
  }

  // Keep the exact bytes: the signature covers them, not a re-serialised object.
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));

  app.post(
    '/v1/webhooks/payments',
    {
      config: { rateLimit: false },
      // A malformed signature header is refused before the body is read, so an unsigned sender
      // can't hold a socket by trickling a body.
      onRequest: async (request) => {
        try {
          verify('', request.headers[signatureHeader]);
        } catch (err) {
          if (err instanceof WebhookSignatureError && err.reason === 'malformed') {
            log.warn('webhook rejected', { reason: err.reason });
            throw new ProblemError('invalidSignature', 'The webhook signature is missing or does not match.');
          }
          // bad_signature / stale_timestamp against an empty body says nothing yet: verified below.
        }
      },
      schema: {
        summary: 'Payment provider webhook (signed)',
        description: `Verified with the ${SIGNATURE_HEADER} header (t=<unix>,v1=<hex HMAC-SHA256>). Events are processed once per (provider, event id, consumer).`,
        operationId: 'receivePaymentWebhook',
        tags: ['webhooks'],
        response: {
          200: jsonResponse('Received (or already received)', WebhookAck),
          400: problemResponse('The body is not a JSON event with id, type and data.object.id'),
          401: problemResponse('Bad, missing or stale signature'),
          503: problemResponse(
            'The order workflow is not started yet, or Temporal did not take the signal in time: the event stays signal_pending and the provider should retry',
            RETRY_AFTER_HEADER,
          ),
        },
      },
    },
    async (request, reply) => {
      const raw = request.body as Buffer | undefined;
      if (!Buffer.isBuffer(raw) || raw.length === 0) {
        throw new ProblemError('invalidRequest', 'The webhook body must be a JSON event.');
      }
      try {
        verify(raw, request.headers[signatureHeader]);
      } catch (err) {
        if (err instanceof WebhookSignatureError) {
          log.warn('webhook rejected', { reason: err.reason });
          throw new ProblemError(
            'invalidSignature',
            err.reason === 'stale_timestamp'
              ? 'The webhook timestamp is outside the tolerance window.'
              : 'The webhook signature is missing or does not match.',
          );
        }
        throw err;
      }
      const event = parseEvent(raw);
      // The socket, not the request: a request whose body has been read is already destroyed.
      const gone = () => request.raw.socket?.destroyed ?? true;
      if (isRefundEventType(event.type)) {
        const result = await refundEvent(event, gone).catch(retryableUnlessProblem(event.id));
        log.info('webhook received', { eventId: event.id, type: event.type, ...result });
        return reply.send({ received: true, duplicate: result.duplicate, outcome: result.outcome });
      }
      const outcome = OUTCOMES[event.type];
      const { tenantId, orderId } = event.charge;

      const order =
        tenantId && orderId ? await withClient(pool, (c) => getOrder(c, tenantId, orderId)) : null;
      // The provider doesn't send our trace context back, so the event joins the order's trace
      // through the context stored with its start intent (linked to this request's own span).
      const orderTrace =
        order && tracingActive()
          ? (await withClient(pool, (c) => getOutbox(c, order.workflow_id)))?.trace_context
          : null;
      const chargeScopeOf = (o: OrderRow) =>
        chargeScope({ tenantId: o.tenant_id, key: stepKeys.charge(o.workflow_id) });
      // A signed event about another charge (or with another amount or currency) changes nothing (2.).
      const mismatch =
        order && outcome
          ? !(await eventNamesOrderCharge(event.charge, order, (scope) => ledger.get(scope)))
          : false;
      // Read before the event is recorded: whether a signal could still change anything (5. and 6. above).
      const chargeSettled =
        order && outcome && !mismatch && SETTLED_CHARGE_STATUSES.includes(order.status)
          ? await chargeRecordSettled(
              () => ledger.get(chargeScopeOf(order)),
              // Only a charge not yet answered can still be in flight.
              order.status === 'payment_pending' ? config.api.webhookChargeWaitMs : 0,
              gone,
            )
          : false;
      const requestSpanContext = requestSpan(request)?.spanContext();
      const result = await inSpan(
        `webhook ${event.type}`,
        {
          kind: SpanKind.CONSUMER,
          attributes: {
            'onceflow.webhook.event_id': event.id,
            ...(order ? { 'onceflow.workflow_id': order.workflow_id } : {}),
          },
          ...(orderTrace
            ? {
                parent: contextFromCarrier(orderTrace),
                ...(requestSpanContext ? { links: [{ context: requestSpanContext }] } : {}),
              }
            : {}),
        },
        async (): Promise<{ duplicate: boolean; outcome: string }> => {
          const base = {
            provider: webhookProvider,
            eventId: event.id,
            consumer: ORDER_SIGNAL_CONSUMER,
            eventType: event.type,
            tenantId: tenantId ?? null,
            orderId: orderId ?? null,
          };
          if (!outcome || !order || mismatch || chargeSettled) {
            // Nothing to signal: recording the event is all there is, one autocommitted statement.
            const why = !outcome
              ? 'ignored_event_type'
              : !order
                ? 'ignored_unknown_order'
                : mismatch
                  ? 'ignored_mismatch'
                  : 'charge_settled';
            if (mismatch) {
              log.warn('webhook event does not name the order charge; ignored', {
                eventId: event.id,
                workflowId: order?.workflow_id,
              });
            }
            return recordOnly(pool, base, why, 'charge_settled');
          }

          return deliverSignal(pool, {
            base,
            gone,
            send: () =>
              temporal.withDeadline(Date.now() + SIGNAL_DEADLINE_MS, () =>
                temporal.workflow.getHandle(order.workflow_id).signal(paymentEventSignal, {
                  source: 'webhook',
                  outcome,
                  eventId: event.id,
                  chargeId: event.charge.id,
                  ...(event.charge.failureCode ? { reason: event.charge.failureCode } : {}),
                }),
              ),
            closed: async () =>
              TERMINAL_STATUSES.includes(order.status) ||
              Boolean((await withClient(pool, (c) => getOutbox(c, order.workflow_id)))?.started_at),
          });
        },
      ).catch(retryableUnlessProblem(event.id));
      log.info('webhook received', { eventId: event.id, type: event.type, ...result });
      return reply.send({ received: true, duplicate: result.duplicate, outcome: result.outcome });
    },
  );
};
