/**
 * POST /v1/orders/{id}/refunds (idempotent create), GET the order's refunds, GET one (with ?wait=).
 * Checks as for POST /v1/orders, then one transaction: idempotency record, reservation, refund row,
 * start intent. A refused refund rolls back and stores nothing under the key, so the same request
 * later runs again rather than replaying a refusal that may no longer hold.
 */
import { randomBytes } from 'node:crypto';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { withClient } from '../../db/index.ts';
import type { ApiContext } from '../context.ts';
import { idempotentTransaction, readIdempotencyKey, refuseWhileRecovering } from '../idempotency.ts';
import { ProblemError } from '../../http/problems.ts';
import {
  IdempotentCreateHeaders,
  CreateRefundBody,
  GetRefundQuery,
  OrderRefundParams,
  REFUND_LOCATION_HEADER,
  REPLAYED_HEADER,
  Refund,
  RefundIdParams,
  RefundList,
  IDEMPOTENT_CREATE_PROBLEMS,
  TOO_MANY_REQUESTS,
  UNAVAILABLE,
} from '../schemas.ts';
import {
  RATE_LIMIT_HEADERS,
  RETRY_AFTER_HEADER,
  always,
  jsonResponse,
  problemResponse,
} from '../../http/openapi.ts';
import {
  REFUND_OPERATION_TYPES,
  REFUND_TERMINAL_STATUSES,
  REFUND_WORKFLOW_TYPE,
  refundWorkflowId,
} from '../../refunds/contract.ts';
import { getRefund, insertPendingRefund, listRefunds, reserveRefund } from '../../refunds/sql.ts';
import { getOrder } from '../../orders/sql.ts';
import { refundView } from '../../refunds/view.ts';
import { createMemo } from '../../restore/memo.ts';
import { insertOutboxStatement, outboxRowOf, type NewOutboxRow, type OutboxRow } from '../../outbox/sql.ts';
import { requestSpan, requestTraceCarrier } from '../../tracing/index.ts';

/** Bump when the meaning of a field of the create request changes (it is part of the fingerprint). */
const CREATE_REFUND_SCHEMA_VERSION = 1;
/** An order's refunds are bounded by its charge; a list this long is already unusual. */
const MAX_LISTED_REFUNDS = 100;
/** A refund reason's bound, as the schema (CreateRefundBody) and the table's CHECK have it. */
const MAX_REASON_LENGTH = 200;

type StoredResponse = {
  statusCode: number;
  headers: { location: string };
  body: ReturnType<typeof refundView>;
};

function newRefundId(): string {
  return `re_${randomBytes(12).toString('hex')}`;
}

/** The reason as stored: NFC, so one text has one spelling (and one fingerprint) however it was typed. */
function normalizeReason(reason: string | undefined): string | undefined {
  const normalized = reason?.normalize('NFC');
  // NFC rarely lengthens a text, but it can: the 200-character bound holds for what is stored.
  if (normalized !== undefined && [...normalized].length > MAX_REASON_LENGTH) {
    throw new ProblemError('invalidRequest', 'The request body does not match the schema.', {
      errors: [
        {
          location: 'body',
          pointer: '/reason',
          message: `must NOT have more than ${MAX_REASON_LENGTH} characters once normalized to NFC`,
        },
      ],
    });
  }
  return normalized;
}

export const refundRoutes: FastifyPluginAsyncTypebox<{ ctx: ApiContext }> = async (app, { ctx }) => {
  const { pool, ledger, relay, config, orderWaits } = ctx;

  app.post(
    '/v1/orders/:id/refunds',
    {
      config: { auth: true },
      schema: {
        operationId: 'createRefund',
        summary: 'Refund part or all of a completed order (idempotent)',
        description:
          'Requires an Idempotency-Key, with the same contract as createOrder. Two refunds of the same ' +
          'amount under different keys are two refunds; the sum of the refunds that are not failed never ' +
          'exceeds the amount charged.',
        tags: ['refunds'],
        security: [{ apiKey: [] }],
        headers: IdempotentCreateHeaders,
        params: OrderRefundParams,
        body: CreateRefundBody,
        response: {
          202: jsonResponse('Accepted: the refund exists and its workflow will run', Refund, {
            ...always(REFUND_LOCATION_HEADER),
            ...REPLAYED_HEADER,
            ...RATE_LIMIT_HEADERS,
          }),
          400: problemResponse(
            'Schema violation or a missing/invalid Idempotency-Key (nothing stored)',
            RATE_LIMIT_HEADERS,
          ),
          404: problemResponse('No such order for this tenant (nothing stored)', RATE_LIMIT_HEADERS),
          409: problemResponse(
            'The first request with this key is still in progress (idempotency-key-in-progress, with ' +
              'Retry-After), or the order is not completed (order-not-refundable; nothing stored)',
            { ...RETRY_AFTER_HEADER, ...RATE_LIMIT_HEADERS },
          ),
          422: problemResponse(
            'The key was used with a different request (idempotency-key-reused), or the refund would take ' +
              'the refunded total above the amount charged (refund-exceeds-charge; nothing stored)',
            RATE_LIMIT_HEADERS,
          ),
          ...IDEMPOTENT_CREATE_PROBLEMS,
        },
      },
    },
    async (request, reply) => {
      const key = readIdempotencyKey(request);
      const tenantId = request.tenantId!;
      const orderId = request.params.id;
      const reason = normalizeReason(request.body.reason);
      const refund = { amount: request.body.amount, ...(reason !== undefined ? { reason } : {}) };
      await refuseWhileRecovering(ctx.recovery, ledger, {
        tenantId,
        operationType: REFUND_OPERATION_TYPES.createRefund,
        key,
      });
      let startIntent: OutboxRow | undefined;
      const createRequest = {
        schemaVersion: CREATE_REFUND_SCHEMA_VERSION,
        method: 'POST',
        path: `/v1/orders/${orderId}/refunds`,
        body: refund,
      };
      const { result, replayed } = await idempotentTransaction<StoredResponse>(
        ledger,
        { tenantId, operationType: REFUND_OPERATION_TYPES.createRefund, key },
        createRequest,
        async (tx, _first, withCommit) => {
          const reserved = await reserveRefund(tx, { tenantId, orderId, amount: refund.amount });
          if (reserved.refused === 'no_order') throw new ProblemError('notFound', 'No order with this ID.');
          if (reserved.refused === 'not_refundable') {
            throw new ProblemError(
              'orderNotRefundable',
              `Only a completed order can be refunded; this one is ${reserved.status}.`,
              { orderStatus: reserved.status },
            );
          }
          if (reserved.refused === 'exceeds') {
            throw new ProblemError(
              'refundExceedsCharge',
              `The order was charged ${reserved.amount}; refunds that are not failed already hold ` +
                `${reserved.refundedAmount}, so at most ${reserved.amount - reserved.refundedAmount} can be refunded.`,
              {
                charged: reserved.amount,
                refundedAmount: reserved.refundedAmount,
                refundable: reserved.amount - reserved.refundedAmount,
              },
            );
          }
          const refundId = newRefundId();
          const workflowId = refundWorkflowId(tenantId, refundId);
          const row = await insertPendingRefund(tx, {
            tenantId,
            refundId,
            orderId,
            workflowId,
            amount: refund.amount,
            currency: reserved.currency,
            reason: refund.reason ?? null,
          });
          const response: StoredResponse = {
            statusCode: 202,
            headers: { location: `/v1/orders/${orderId}/refunds/${refundId}` },
            body: refundView(row),
          };
          const intent: NewOutboxRow = {
            workflowId,
            tenantId,
            orderId,
            workflowType: REFUND_WORKFLOW_TYPE,
            taskQueue: config.temporal.taskQueue,
            input: {
              tenantId,
              refundId,
              orderId,
              amount: refund.amount,
              currency: reserved.currency,
              chargeId: reserved.chargeId,
              customerEmail: reserved.customerEmail,
              reason: refund.reason ?? null,
            },
            traceContext: requestTraceCarrier(request),
            claimedForMs: relay.claimForKickMs,
            // This record, for a recovery after a database restore (src/recovery/memo.ts).
            memo: createMemo({
              operationType: REFUND_OPERATION_TYPES.createRefund,
              key,
              request: createRequest,
              response,
              createdAt: row.created_at.toISOString(),
            }),
          };
          // Sent with the completion and COMMIT: no round trip of its own.
          withCommit(insertOutboxStatement(intent));
          startIntent = outboxRowOf(intent);
          return response;
        },
      );
      requestSpan(request)?.setAttribute('onceflow.workflow_id', result.body.workflowId);
      if (!replayed && startIntent) relay.kick(startIntent);
      if (replayed) void reply.header('idempotent-replayed', 'true');
      return reply
        .code(result.statusCode as 202)
        .header('location', result.headers.location)
        .send(result.body);
    },
  );

  app.get(
    '/v1/orders/:id/refunds',
    {
      config: { auth: true },
      schema: {
        operationId: 'listRefunds',
        summary: "List an order's refunds, newest first",
        tags: ['refunds'],
        security: [{ apiKey: [] }],
        params: OrderRefundParams,
        response: {
          200: jsonResponse("The order's refunds", RefundList, RATE_LIMIT_HEADERS),
          400: problemResponse('A path parameter is not valid', RATE_LIMIT_HEADERS),
          401: problemResponse('Missing or invalid API key'),
          404: problemResponse('No such order for this tenant', RATE_LIMIT_HEADERS),
          429: TOO_MANY_REQUESTS,
          503: UNAVAILABLE,
        },
      },
    },
    async (request, reply) => {
      const tenantId = request.tenantId!;
      const orderId = request.params.id;
      const rows = await withClient(pool, async (c) => {
        if (!(await getOrder(c, tenantId, orderId))) return null;
        return listRefunds(c, tenantId, orderId, MAX_LISTED_REFUNDS);
      });
      if (!rows) throw new ProblemError('notFound', 'No order with this ID.');
      return reply.send({ object: 'list', data: rows.map(refundView) });
    },
  );

  app.get(
    '/v1/orders/:id/refunds/:refundId',
    {
      config: { auth: true },
      schema: {
        operationId: 'getRefund',
        summary: 'Get one refund',
        description:
          'With ?wait=N (at most 30) the call long-polls until the refund reaches a terminal status ' +
          '(succeeded, failed, needs_attention) or N seconds pass.',
        tags: ['refunds'],
        security: [{ apiKey: [] }],
        params: RefundIdParams,
        querystring: GetRefundQuery,
        response: {
          200: jsonResponse('The refund', Refund, RATE_LIMIT_HEADERS),
          400: problemResponse('A query or path parameter is not valid', RATE_LIMIT_HEADERS),
          401: problemResponse('Missing or invalid API key'),
          404: problemResponse('No such refund of this order for this tenant', RATE_LIMIT_HEADERS),
          429: TOO_MANY_REQUESTS,
          503: UNAVAILABLE,
        },
      },
    },
    async (request, reply) => {
      const tenantId = request.tenantId!;
      const { id, refundId } = request.params;
      const waitMs = (request.query.wait ?? 0) * 1000;
      const read = () => withClient(pool, (c) => getRefund(c, tenantId, id, refundId));
      // The order long-poll's mechanism, woken by the refund's terminal-status notification
      // (migrations/0020).
      const row = await orderWaits.readUntil(
        refundId,
        waitMs,
        read,
        (r) => REFUND_TERMINAL_STATUSES.includes(r.status),
        () => request.raw.destroyed,
      );
      if (!row) throw new ProblemError('notFound', 'No refund with this ID for this order.');
      return reply.send(refundView(row));
    },
  );
};
