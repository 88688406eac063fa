/**
 * POST /v1/webhooks/payments: signed events from the payment provider.
 *
 * 1. The signature is checked over the RAW body bytes (this route parses its
 *    own JSON), before anything else: a forged or stale event gets 401 and
 *    leaves no trace.
 * 2. In one transaction: record (provider, event id, consumer) with
 *    INSERT ... ON CONFLICT DO NOTHING, then signal the order's workflow.
 *    A duplicate finds the row and returns 200 without signalling. If the
 *    signal fails for a reason worth retrying, the transaction rolls back
 *    (the marker with it) and the provider's retry gets another chance. An
 *    event with nothing to signal (4. below, or an ignored type or unknown
 *    order) is recorded by one autocommitted statement.
 * 3. Ordering is the workflow's job: it settles the charge once and ignores
 *    later events, so a late or reordered event never moves an order back.
 *    This route never touches the order's status.
 * 4. No signal when it could change nothing (outcome `charge_settled`): the
 *    charge's ledger record already holds the provider's definite answer and
 *    the order is not waiting on an event (payment_pending, paid, completed,
 *    rejected). The workflow then has that answer, or gets it from the
 *    ledger: the charge activity's retry replays the stored result, and a
 *    reconciliation reads it. Only payment_unknown and needs_attention, the
 *    states that wait for an event, are still signalled. This is the common
 *    case (the webhook arrives just after the charge's own response), and a
 *    signal costs the Temporal server a history write and the worker a
 *    workflow task per order.
 * 5. The webhook can also overtake the charge's own response: the provider
 *    sends it right after it commits, while the worker is still receiving the
 *    answer and recording it (the record in_progress). Such an event waits,
 *    at most WEBHOOK_CHARGE_WAIT_MS (re-reading the record with backoff), for
 *    the call to record its answer; then it is `charge_settled` as in 4. If
 *    the call does not record it in time (its response was lost, the worker
 *    died), the event is signalled as before, so it still settles an order
 *    that goes to payment_unknown. The wait holds no connection or lock.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyPluginAsync } from 'fastify';
import { SpanKind } from '@opentelemetry/api';
import { WorkflowNotFoundError } from '@temporalio/client';
import { withClient, withTransaction } from '../../db/index.ts';
import { errorFields, log } from '../../log.ts';
import { TERMINAL_STATUSES } from '../../orders/model.ts';
import { SIGNATURE_HEADER, WebhookSignatureError, verifyWebhook } from '../../providers/webhook-signature.ts';
import { paymentEventSignal, type PaymentEvent } from '../../orders/contract.ts';
import { contextFromCarrier, inSpan, requestSpan, tracingActive } from '../../tracing/index.ts';
import type { ApiContext } from '../context.ts';
import { ProblemError } from '../problems.ts';
import { RETRY_AFTER_HEADER, WebhookAck, jsonResponse, problemResponse } from '../schemas.ts';
import { getOrder } from '../../orders/sql.ts';
import { stepKeys, type OrderStatus } from '../../orders/model.ts';
import { chargeScope, chargeState } from '../../steps/payment.ts';
import { getOutbox } from '../../outbox/sql.ts';
import { recordWebhookEvent, setWebhookEventOutcome } from '../../webhooks/sql.ts';
import type { OperationRecord } from '../../ledger/index.ts';

export const WEBHOOK_PROVIDER = 'sandbox';
/** The consumer that turns payment events into workflow signals. Another consumer gets its own markers. */
export const ORDER_SIGNAL_CONSUMER = 'order-workflow-signal';

interface ChargeEvent {
  id: string;
  type: string;
  charge: {
    id: string;
    status?: string;
    failureCode?: string;
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
  return {
    id,
    type,
    charge: {
      id: chargeId,
      status: str(obj.status),
      failureCode: str(obj.failure_code) ?? str(obj.failure_message),
      orderId: str(metadata.order_id, 100),
      tenantId: str(metadata.tenant_id, 100),
    },
  };
}

/**
 * Statuses in which an event can't change what the workflow does once the
 * charge's ledger record is final (see 4. above). Not payment_unknown or
 * needs_attention: those wait for a payment event.
 */
const SETTLED_CHARGE_STATUSES: readonly OrderStatus[] = ['payment_pending', 'paid', 'completed', 'rejected'];

/**
 * Whether the charge's ledger record holds a definite outcome. While the
 * charge's call is in flight (the record in_progress) it re-reads, with
 * backoff from 10 ms, until the record is final, it is anything else
 * (unknown: the workflow waits for this event), its lease has run out (no
 * live owner will record anything), `waitMs` have passed, or the sender hung
 * up (`gone`).
 */
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

const OUTCOMES: Record<string, PaymentEvent['outcome']> = {
  'charge.succeeded': 'succeeded',
  'charge.failed': 'failed',
};

export const webhookRoutes: FastifyPluginAsync<{ ctx: ApiContext }> = async (app, { ctx }) => {
  const { pool, temporal, config, ledger } = ctx;
  // Read while wiring: off loopback, a default secret stops the API at start-up, not at its first webhook.
  const secret = config.webhookSecret;

  // Keep the exact bytes: the signature covers them, not a re-serialised object.
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));

  app.post(
    '/v1/webhooks/payments',
    {
      config: { rateLimit: false },
      // A missing or malformed signature header is refused before the body is read (and the connection
      // closed), so an unsigned sender can't hold a socket by trickling a body. A well-formed header is
      // checked against the body once it has arrived (within API_REQUEST_TIMEOUT_MS).
      onRequest: async (request) => {
        try {
          verifyWebhook(secret, '', request.headers[SIGNATURE_HEADER.toLowerCase()]);
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
            'The order workflow is not reachable yet; the provider should retry',
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
        verifyWebhook(secret, raw, request.headers[SIGNATURE_HEADER.toLowerCase()]);
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
      // Read before the event is recorded: whether a signal could still change anything (4. and 5. above).
      const chargeSettled =
        order && outcome && SETTLED_CHARGE_STATUSES.includes(order.status)
          ? await chargeRecordSettled(
              () =>
                ledger.get(
                  chargeScope({ tenantId: order.tenant_id, key: stepKeys.charge(order.workflow_id) }),
                ),
              // Only a charge not yet answered can still be in flight.
              order.status === 'payment_pending' ? config.api.webhookChargeWaitMs : 0,
              // The socket, not the request: a request whose body has been read is already destroyed.
              () => request.raw.socket?.destroyed ?? true,
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
            provider: WEBHOOK_PROVIDER,
            eventId: event.id,
            consumer: ORDER_SIGNAL_CONSUMER,
            eventType: event.type,
            tenantId: tenantId ?? null,
            orderId: orderId ?? null,
          };
          if (!outcome || !order || chargeSettled) {
            // Nothing to signal: recording the event is all there is, one autocommitted statement.
            const why = !outcome ? 'ignored_event_type' : !order ? 'ignored_unknown_order' : 'charge_settled';
            const fresh = await withClient(pool, (c) => recordWebhookEvent(c, { ...base, outcome: why }));
            if (fresh) return { duplicate: false, outcome: why };
            return { duplicate: true, outcome: why === 'charge_settled' ? 'duplicate' : why };
          }
          return withTransaction(pool, async (tx) => {
            const fresh = await recordWebhookEvent(tx, { ...base, outcome: 'signalled' });
            if (!fresh) return { duplicate: true, outcome: 'duplicate' };
            const signal: PaymentEvent = {
              source: 'webhook',
              outcome,
              eventId: event.id,
              chargeId: event.charge.id,
              ...(event.charge.failureCode ? { reason: event.charge.failureCode } : {}),
            };
            try {
              await temporal.workflow.getHandle(order.workflow_id).signal(paymentEventSignal, signal);
              return { duplicate: false, outcome: 'signalled' };
            } catch (err) {
              if (!(err instanceof WorkflowNotFoundError)) throw err;
              // Closed workflows can't be signalled; that is fine: the order is settled already.
              const closed =
                TERMINAL_STATUSES.includes(order.status) ||
                Boolean((await getOutbox(tx, order.workflow_id))?.started_at);
              if (closed) {
                await setWebhookEventOutcome(tx, { ...base, outcome: 'workflow_closed' });
                return { duplicate: false, outcome: 'workflow_closed' };
              }
              // Not started yet (the outbox relay will start it): roll back so the provider retries.
              throw new ProblemError(
                'unavailable',
                'The order is not ready for events yet; retry later.',
                {},
                {
                  'retry-after': '5',
                },
              );
            }
          });
        },
      ).catch((err: unknown) => {
        if (!(err instanceof ProblemError)) {
          log.error('webhook processing failed', { eventId: event.id, ...errorFields(err) });
          throw new ProblemError('unavailable', 'The event could not be processed; retry later.');
        }
        throw err;
      });
      log.info('webhook received', { eventId: event.id, type: event.type, ...result });
      return reply.send({ received: true, duplicate: result.duplicate, outcome: result.outcome });
    },
  );
};
