/**
 * POST /v1/orders (idempotent create), GET /v1/orders/{id}, GET /v1/orders.
 *
 * Every check on POST (auth, rate limit, schema, Idempotency-Key, amounts) runs before the database,
 * so a refusal stores nothing and a corrected retry runs normally. `Prefer: wait=N` waits after the
 * commit, writing nothing: it changes the answer, never what the key stores.
 */
import { randomBytes } from 'node:crypto';
import { Type, type FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { withClient } from '../../db/index.ts';
import {
  OPERATION_TYPES,
  TERMINAL_STATUSES,
  orderTotal,
  orderWorkflowId,
  type OrderItem,
} from '../../orders/model.ts';
import type { ApiContext } from '../context.ts';
import { idempotentTransaction, readIdempotencyKey, refuseWhileRecovering } from '../idempotency.ts';
import { ProblemError } from '../../http/problems.ts';
import { MAX_PREFER_WAIT_SECONDS, preferredWaitSeconds } from '../../http/prefer.ts';
import {
  CreateOrderBody,
  CreateOrderHeaders,
  CreatedOrder,
  GetOrderQuery,
  ListOrdersQuery,
  OrderDetail,
  OrderIdParams,
  OrderList,
  MAX_ORDER_TOTAL,
  LOCATION_HEADER,
  PREFERENCE_APPLIED_HEADER,
  REPLAYED_HEADER,
  VARY_PREFER_HEADER,
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
import { orderDetail, orderView, readOrderWithSteps } from '../../orders/view.ts';
import type { OperationRecord } from 'onceflow';
import {
  getOrder,
  insertAcceptedOrder,
  insertAcceptedOrderStatement,
  listOrders,
  type OrderRow,
} from '../../orders/sql.ts';
import { insertOutboxStatement, outboxRowOf, type NewOutboxRow, type OutboxRow } from '../../outbox/sql.ts';
import { createMemo } from '../../restore/memo.ts';
import { ORDER_WORKFLOW_TYPE } from '../outbox.ts';
import { requestSpan, requestTraceCarrier } from '../../tracing/index.ts';

/** Bump when the meaning of a field of the create request changes (it is part of the fingerprint). */
const CREATE_ORDER_SCHEMA_VERSION = 1;
const CREATE_ORDER_PATH = '/v1/orders';

/** What the ledger stores and replays for a create: the full HTTP response. */
type StoredResponse = {
  statusCode: number;
  headers: { location: string };
  body: ReturnType<typeof orderView>;
};

function newOrderId(): string {
  return `ord_${randomBytes(12).toString('hex')}`;
}

/** The validated, canonical form of a create request: what is fingerprinted and what is stored. */
export function normalizeCreateOrder(body: CreateOrderBody) {
  const items: OrderItem[] = body.items.map((i) => ({
    sku: i.sku,
    quantity: i.quantity,
    unitAmount: i.unitAmount,
  }));
  const amount = orderTotal(items);
  if (!Number.isSafeInteger(amount)) {
    // Unreachable with the schema's caps; kept so a future cap change can't charge a rounded total.
    throw new ProblemError('invalidRequest', 'The order total is too large.', {
      errors: [{ location: 'body', pointer: '/items', message: 'total exceeds the maximum' }],
    });
  }
  if (amount <= 0) {
    throw new ProblemError('invalidRequest', 'The order total must be greater than zero.', {
      errors: [{ location: 'body', pointer: '/items', message: 'total must be > 0' }],
    });
  }
  if (amount > MAX_ORDER_TOTAL) {
    // The provider would refuse the charge, so the order could only ever end `rejected`: say so now.
    throw new ProblemError(
      'amountTooLarge',
      `The order total ${amount} is above the payment provider's limit of ${MAX_ORDER_TOTAL} minor units per charge.`,
      { limit: MAX_ORDER_TOTAL, amount },
    );
  }
  return {
    customer: { id: body.customer.id, email: body.customer.email },
    currency: body.currency.toLowerCase(),
    items,
    paymentMethod: body.paymentMethod,
    amount,
    // Only when sent: a request without one keeps the fingerprint it had before the field existed.
    ...(body.merchantReference !== undefined ? { merchantReference: body.merchantReference } : {}),
  };
}

/**
 * Aborts when the client hangs up. Not request.raw's 'close': a request with a body emits it once the body
 * is read.
 */
function clientGone(request: FastifyRequest, reply: FastifyReply): AbortSignal {
  const gone = new AbortController();
  const res = reply.raw;
  if (request.raw.socket?.destroyed) gone.abort();
  else res.once('close', () => !res.writableFinished && gone.abort());
  return gone.signal;
}

/**
 * A `Prefer: wait` ends this long before the idle timeout, so the client gets its 202, not a closed socket.
 */
const IDLE_MARGIN_MS = 1000;

function encodeCursor(row: OrderRow): string {
  return Buffer.from(`${row.created_us}.${row.id}`, 'utf8').toString('base64url');
}

function decodeCursor(cursor: string): { createdUs: string; id: string } {
  // Microseconds since the epoch: 16 digits reach the year 2286, and keep a
  // tampered cursor from overflowing Postgres' timestamp arithmetic (a 500).
  const m = /^(\d{1,16})\.([A-Za-z0-9_]{1,64})$/.exec(Buffer.from(cursor, 'base64url').toString('utf8'));
  if (!m)
    throw new ProblemError('invalidRequest', 'The cursor is not valid; use nextCursor from a previous page.');
  return { createdUs: m[1]!, id: m[2]! };
}

/**
 * The whole transaction of POST /v1/orders: the idempotency record, the order row and its start
 * intent commit together or not at all. A retried transaction runs the body again (same order ID:
 * the try before rolled back), so `startIntent` is the one that committed.
 */
async function createOrderOnce(
  { ledger, relay, config }: ApiContext,
  request: FastifyRequest,
  key: string,
  order: ReturnType<typeof normalizeCreateOrder>,
): Promise<{ result: StoredResponse; replayed: boolean; startIntent?: OutboxRow }> {
  const tenantId = request.tenantId!;
  let startIntent: OutboxRow | undefined;
  const createRequest = {
    schemaVersion: CREATE_ORDER_SCHEMA_VERSION,
    method: 'POST',
    path: CREATE_ORDER_PATH,
    body: order,
  };
  const orderId = newOrderId();
  const workflowId = orderWorkflowId(tenantId, orderId);
  const newOrder = {
    tenantId,
    orderId,
    workflowId,
    amount: order.amount,
    currency: order.currency,
    customerId: order.customer.id,
    customerEmail: order.customer.email,
    items: order.items,
    paymentMethod: order.paymentMethod,
    merchantReference: order.merchantReference ?? null,
  };
  const { result, replayed } = await idempotentTransaction<StoredResponse>(
    ledger,
    { tenantId, operationType: OPERATION_TYPES.createOrder, key },
    createRequest,
    async (tx, [sent], withCommit) => {
      const inserted = await insertAcceptedOrder(tx, newOrder, sent);
      if (inserted.duplicateOf !== undefined) {
        // Thrown, so nothing is written, not even the idempotency record: a retry gets the same 409.
        const location = `/v1/orders/${inserted.duplicateOf}`;
        throw new ProblemError(
          'duplicateMerchantReference',
          'An order with this merchantReference already exists for this tenant; it is at Location.',
          { id: inserted.duplicateOf, location },
          { location },
        );
      }
      const row = inserted.row;
      const response: StoredResponse = {
        statusCode: 202,
        headers: { location: `/v1/orders/${orderId}` },
        body: orderView(row),
      };
      const intent: NewOutboxRow = {
        workflowId,
        tenantId,
        orderId,
        workflowType: ORDER_WORKFLOW_TYPE,
        taskQueue: config.temporal.taskQueue,
        input: {
          tenantId,
          orderId,
          amount: order.amount,
          currency: order.currency,
          paymentMethod: order.paymentMethod,
          customer: order.customer,
        },
        // So the workflow joins this request's trace, whoever starts it and whenever.
        traceContext: requestTraceCarrier(request),
        // Claimed for this API's relay, which starts it right after commit: see outbox.ts.
        claimedForMs: relay.claimForKickMs,
        // This record, for a recovery after a database restore (src/recovery/memo.ts).
        memo: createMemo({
          operationType: OPERATION_TYPES.createOrder,
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
    // The order row goes with BEGIN and the claim: one round trip fewer (docs/BENCHMARKS.md).
    [insertAcceptedOrderStatement(newOrder)],
  );
  return replayed ? { result, replayed } : { result, replayed, startIntent };
}

export const orderRoutes: FastifyPluginAsyncTypebox<{ ctx: ApiContext }> = async (app, { ctx }) => {
  const { pool, ledger, relay, orderWaits } = ctx;

  app.post(
    '/v1/orders',
    {
      config: { auth: true },
      schema: {
        operationId: 'createOrder',
        summary: 'Create an order (idempotent)',
        description:
          'Requires an Idempotency-Key. The same key and body replays the original 202 with ' +
          '`Idempotent-Replayed: true`; a different body gets 422; a request still in progress gets 409 ' +
          'with Retry-After.\n\n' +
          '`Prefer: wait=N` (RFC 7240; N whole seconds, more than ' +
          `${MAX_PREFER_WAIT_SECONDS} counts as ${MAX_PREFER_WAIT_SECONDS}) waits, after the order is committed ` +
          '(or on a replay), up to N seconds for it to reach a terminal status (completed, rejected, ' +
          'needs_attention): then the answer is 200 with the order as GET /v1/orders/{id} returns it, ' +
          'otherwise the usual 202. Both carry `Preference-Applied: wait=N` and `Location`. What the key ' +
          'stores is always the 202 (what was true at acceptance): a replay with `Prefer: wait` answers ' +
          'the same way from the order as it is now (200 if terminal, else the stored 202), with ' +
          '`Idempotent-Replayed: true`; a replay without it gets the stored 202. A Prefer header that ' +
          'cannot be parsed, or a wait that is not a whole number, is ignored (no wait), never a 400. ' +
          'The 200 and 202 to a request with a Prefer header carry `Vary: Prefer`. See docs/API.md.',
        tags: ['orders'],
        security: [{ apiKey: [] }],
        headers: CreateOrderHeaders,
        body: CreateOrderBody,
        response: {
          200: jsonResponse(
            'With `Prefer: wait=N` only: the order reached a terminal status within N seconds; the body ' +
              'is GET /v1/orders/{id} (on a replay too, with Idempotent-Replayed: the order as it is now)',
            OrderDetail,
            {
              ...always({ ...LOCATION_HEADER, ...PREFERENCE_APPLIED_HEADER, ...VARY_PREFER_HEADER }),
              ...REPLAYED_HEADER,
              ...RATE_LIMIT_HEADERS,
            },
          ),
          202: jsonResponse(
            'Accepted: the order exists and its workflow will run (or the stored answer, replayed). With ' +
              '`Prefer: wait=N`, the order was not terminal within N seconds',
            CreatedOrder,
            {
              ...always(LOCATION_HEADER),
              ...PREFERENCE_APPLIED_HEADER,
              ...VARY_PREFER_HEADER,
              ...REPLAYED_HEADER,
              ...RATE_LIMIT_HEADERS,
            },
          ),
          400: problemResponse(
            'Schema violation or a missing/invalid Idempotency-Key (nothing stored)',
            RATE_LIMIT_HEADERS,
          ),
          409: problemResponse(
            'The first request with this key is still in progress; retry after Retry-After ' +
              '(idempotency-key-in-progress). Or another order of this tenant already has this ' +
              'merchantReference (duplicate-merchant-reference: its `id` and `Location`; nothing stored)',
            {
              // Neither is on every 409: Retry-After comes with in-progress, Location with the duplicate.
              ...RETRY_AFTER_HEADER,
              Location: Type.String({ description: 'duplicate-merchant-reference: the existing order' }),
              ...RATE_LIMIT_HEADERS,
            },
          ),
          422: problemResponse(
            "The key was used with a different request (idempotency-key-reused), or the total is above the provider's limit (amount-too-large)",
            RATE_LIMIT_HEADERS,
          ),
          ...IDEMPOTENT_CREATE_PROBLEMS,
        },
      },
    },
    async (request, reply) => {
      // The socket's idle clock restarts with the request's last byte, about now.
      const receivedAt = Date.now();
      const prefer = request.headers.prefer;
      const preferWaitS = preferredWaitSeconds(prefer);
      // Watched from before the transaction: a client gone by its commit is not waited for.
      const gone = preferWaitS === undefined ? undefined : clientGone(request, reply);
      // Validation only: a request refused here stores nothing, so a corrected retry runs normally.
      const key = readIdempotencyKey(request);
      const order = normalizeCreateOrder(request.body);
      await refuseWhileRecovering(ctx.recovery, ctx.ledger, {
        tenantId: request.tenantId!,
        operationType: OPERATION_TYPES.createOrder,
        key,
      });
      const { result, replayed, startIntent } = await createOrderOnce(ctx, request, key, order);
      // After commit: nothing below writes, and a replay repeats none of it but the answer.
      // Searchable in a trace viewer: the order's trace by its workflow ID.
      requestSpan(request)?.setAttribute('onceflow.workflow_id', result.body.workflowId);
      if (startIntent) relay.kick(startIntent);
      if (replayed) void reply.header('idempotent-replayed', 'true');
      void reply.header('location', result.headers.location);
      // Any Prefer, even one not understood: whether this answer waits depends on it.
      if (prefer !== undefined) void reply.header('vary', 'Prefer');
      if (preferWaitS !== undefined && gone) {
        const idleMs = ctx.config.api.idleTimeoutMs - IDLE_MARGIN_MS;
        const appliedS = Math.min(preferWaitS, Math.max(0, Math.floor(idleMs / 1000)));
        void reply.header('preference-applied', `wait=${appliedS}`);
        // The stored response stays the 202; this only reads the order now, holding no connection.
        const tenantId = request.tenantId!;
        const orderId = result.body.id;
        // The first read, right after the commit, finds the order just begun; the ones after a
        // wake-up read its steps with it, for the answer.
        let reads = 0;
        const read = async (): Promise<{ row: OrderRow; records?: OperationRecord[] } | null> => {
          if (reads++ > 0) return readOrderWithSteps(pool, ledger, tenantId, orderId);
          const row = await withClient(pool, (c) => getOrder(c, tenantId, orderId));
          return row && { row };
        };
        const last = await orderWaits.readUntil(
          orderId,
          Math.min(appliedS * 1000, receivedAt + idleMs - Date.now()),
          read,
          (r) => TERMINAL_STATUSES.includes(r.row.status),
          () => gone.aborted,
          gone,
        );
        if (last && TERMINAL_STATUSES.includes(last.row.status) && !gone.aborted) {
          return reply.code(200).send(await orderDetail(ledger, tenantId, last.row, last.records));
        }
      }
      return reply.code(result.statusCode as 202).send(result.body);
    },
  );

  app.get(
    '/v1/orders/:id',
    {
      config: { auth: true },
      schema: {
        operationId: 'getOrder',
        summary: 'Get an order with its steps',
        description:
          'With ?wait=N (at most 30) the call long-polls until the order reaches a terminal status ' +
          '(completed, rejected, needs_attention) or N seconds pass.',
        tags: ['orders'],
        security: [{ apiKey: [] }],
        params: OrderIdParams,
        querystring: GetOrderQuery,
        response: {
          200: jsonResponse('The order', OrderDetail, RATE_LIMIT_HEADERS),
          400: problemResponse('A query or path parameter is not valid', RATE_LIMIT_HEADERS),
          401: problemResponse('Missing or invalid API key'),
          404: problemResponse('No such order for this tenant', RATE_LIMIT_HEADERS),
          429: TOO_MANY_REQUESTS,
          503: UNAVAILABLE,
        },
      },
    },
    async (request, reply) => {
      const tenantId = request.tenantId!;
      const { id } = request.params;
      const waitMs = (request.query.wait ?? 0) * 1000;
      const last = await orderWaits.readUntil(
        id,
        waitMs,
        () => readOrderWithSteps(pool, ledger, tenantId, id),
        (r) => TERMINAL_STATUSES.includes(r.row.status),
        () => request.raw.destroyed,
      );
      if (!last) throw new ProblemError('notFound', 'No order with this ID.');
      return reply.send(await orderDetail(ledger, tenantId, last.row, last.records));
    },
  );

  app.get(
    '/v1/orders',
    {
      config: { auth: true },
      schema: {
        operationId: 'listOrders',
        summary: 'List orders, newest first',
        tags: ['orders'],
        security: [{ apiKey: [] }],
        querystring: ListOrdersQuery,
        response: {
          200: jsonResponse('A page of orders', OrderList, RATE_LIMIT_HEADERS),
          400: problemResponse('A query parameter or the cursor is not valid', RATE_LIMIT_HEADERS),
          401: problemResponse('Missing or invalid API key'),
          429: TOO_MANY_REQUESTS,
          503: UNAVAILABLE,
        },
      },
    },
    async (request, reply) => {
      const tenantId = request.tenantId!;
      const limit = request.query.limit ?? 20;
      const before = request.query.cursor ? decodeCursor(request.query.cursor) : undefined;
      const rows = await withClient(pool, (c) =>
        listOrders(c, { tenantId, status: request.query.status, before, limit: limit + 1 }),
      );
      const page = rows.slice(0, limit);
      const hasMore = rows.length > limit;
      const last = page[page.length - 1];
      return reply.send({
        object: 'list',
        data: page.map((r) => ({ ...orderView(r), updatedAt: r.updated_at.toISOString() })),
        hasMore,
        nextCursor: hasMore && last ? encodeCursor(last) : null,
      });
    },
  );
};
