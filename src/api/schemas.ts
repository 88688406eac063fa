/**
 * Request and response schemas (TypeBox): they validate requests and feed /openapi.json.
 * Every string has a pattern and a maximum length, so nothing reaches Postgres as something it
 * rejects (a NUL byte is a 500 otherwise). Every object schema has an `$id`, so the generated client
 * gets named types.
 */
import { Type, type Static } from '@fastify/type-provider-typebox';
import { ORDER_STATUSES } from '../orders/model.ts';
import { REFUND_STATUSES } from '../refunds/contract.ts';
import {
  always,
  DOCUMENTED_REQUIRED,
  problemResponse,
  RATE_LIMIT_HEADERS,
  RETRY_AFTER_HEADER,
} from '../http/openapi.ts';

const MAX_ITEMS = 100;
export const BODY_LIMIT_BYTES = 64 * 1024;
/** Per-item caps keep every total inside Number.MAX_SAFE_INTEGER, so no total rounds and mischarges. */
const MAX_QUANTITY = 10_000;
const MAX_UNIT_AMOUNT = 1_000_000_000;
/** The provider's largest charge: an order above it could only end `rejected`, so it is refused with 422. */
export const MAX_ORDER_TOTAL = 99_999_999;

const Id = (description: string) =>
  Type.String({ minLength: 1, maxLength: 100, pattern: '^[A-Za-z0-9_.:\\-]+$', description });

const OrderItemSchema = Type.Object(
  {
    sku: Type.String({
      minLength: 1,
      maxLength: 64,
      pattern: '^[\\x21-\\x7e]+$',
      description: 'Visible ASCII',
    }),
    quantity: Type.Integer({ minimum: 1, maximum: MAX_QUANTITY }),
    unitAmount: Type.Integer({
      minimum: 0,
      maximum: MAX_UNIT_AMOUNT,
      description: 'Integer minor units (cents). Never a float.',
    }),
  },
  { additionalProperties: false, title: 'OrderItem' },
);

const CustomerSchema = Type.Object(
  {
    id: Id('Your customer ID'),
    email: Type.String({ format: 'email', maxLength: 254, pattern: '^[\\x21-\\x7e]+$' }),
  },
  { additionalProperties: false, title: 'Customer' },
);

/**
 * The order's natural key: the merchant's own reference, unique per tenant
 * (a unique index on orders, migrations/0019). See docs/API.md "Three layers".
 */
const MerchantReference = Type.String({
  minLength: 1,
  maxLength: 100,
  pattern: '^[\\x21-\\x7e]+$',
  description:
    'Optional. Your own reference for this order (1-100 visible ASCII characters), unique per tenant: ' +
    'a second order with it under another Idempotency-Key gets 409 duplicate-merchant-reference.',
});

export const CreateOrderBody = Type.Object(
  {
    customer: CustomerSchema,
    currency: Type.String({ pattern: '^[A-Za-z]{3}$', description: 'ISO 4217 code; stored lowercase' }),
    items: Type.Array(OrderItemSchema, { minItems: 1, maxItems: MAX_ITEMS }),
    paymentMethod: Id('Payment method token, e.g. pm_card_visa'),
    merchantReference: Type.Optional(MerchantReference),
  },
  { additionalProperties: false, title: 'CreateOrderRequest' },
);
export type CreateOrderBody = Static<typeof CreateOrderBody>;

const OrderStatusSchema = Type.Enum([...ORDER_STATUSES], {
  title: 'OrderStatus',
  description:
    'accepted -> payment_pending -> (payment_unknown) -> paid -> completed; or rejected / needs_attention',
});

const OrderFields = {
  id: Type.String({ description: 'Server-generated order ID' }),
  object: Type.Literal('order'),
  status: OrderStatusSchema,
  amount: Type.Integer({ description: 'Total in integer minor units' }),
  currency: Type.String(),
  workflowId: Type.String({ description: 'Temporal workflow ID: order/<tenant>/<id>' }),
  customer: CustomerSchema,
  items: Type.Array(OrderItemSchema),
  paymentMethod: Type.String(),
  merchantReference: Type.Union([Type.String(), Type.Null()], {
    description: 'The reference sent at creation, or null',
  }),
  refundedAmount: Type.Integer({
    description:
      'Sum of the refunds that are not failed (pending ones included: their amount is reserved), in minor units',
  }),
  createdAt: Type.String({ format: 'date-time' }),
};

export const CreatedOrder = Type.Object(OrderFields, { title: 'Order' });
export type CreatedOrder = Static<typeof CreatedOrder>;

const StepSchema = Type.Object(
  {
    name: Type.String({ description: 'charge, receipt, status/<status>, ...' }),
    operationType: Type.String(),
    operationKey: Type.String({ description: 'Ledger key, derived from the workflow ID' }),
    state: Type.Union(
      [
        Type.Literal('in_progress'),
        Type.Literal('succeeded'),
        Type.Literal('failed'),
        Type.Literal('unknown'),
      ],
      { title: 'StepState' },
    ),
    attempts: Type.Integer(),
    providerRef: Type.Union([Type.String(), Type.Null()]),
    createdAt: Type.String({ format: 'date-time' }),
    updatedAt: Type.String({ format: 'date-time' }),
    completedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  },
  { title: 'OrderStep' },
);

export const OrderDetail = Type.Object(
  {
    ...OrderFields,
    chargeId: Type.Union([Type.String(), Type.Null()]),
    receiptId: Type.Union([Type.String(), Type.Null()]),
    reason: Type.Union([Type.String(), Type.Null()], {
      description:
        'Why a rejected or needs_attention order is there, machine-readable: decline_code:<code>, ' +
        'payment_failed, provider_rejected, charge_failed:<type>, payment_unknown_horizon, ' +
        'receipt_failed, status_write_failed. Null otherwise.',
    }),
    message: Type.Union([Type.String(), Type.Null()], {
      description:
        'A fixed, human-readable sentence for the reason (or, without one, for a rejected or ' +
        'needs_attention status); never the raw error, which only operators see. See docs/API.md. ' +
        'Null when there is nothing to explain.',
    }),
    updatedAt: Type.String({ format: 'date-time' }),
    steps: Type.Array(StepSchema),
  },
  { title: 'OrderDetail' },
);

const OrderSummary = Type.Object(
  { ...OrderFields, updatedAt: Type.String({ format: 'date-time' }) },
  { title: 'OrderSummary' },
);

export const OrderList = Type.Object(
  {
    object: Type.Literal('list'),
    data: Type.Array(OrderSummary),
    hasMore: Type.Boolean(),
    nextCursor: Type.Union([Type.String(), Type.Null()], {
      description: 'Pass as ?cursor= for the next page',
    }),
  },
  { title: 'OrderList' },
);

export const OrderIdParams = Type.Object({
  id: Type.String({ maxLength: 64, pattern: '^[A-Za-z0-9_]+$' }),
});

export const GetOrderQuery = Type.Object({
  wait: Type.Optional(
    Type.Integer({
      minimum: 0,
      maximum: 30,
      description: 'Long-poll up to this many seconds until the order reaches a terminal status',
    }),
  ),
});

export const ListOrdersQuery = Type.Object({
  status: Type.Optional(OrderStatusSchema),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 20 })),
  cursor: Type.Optional(Type.String({ maxLength: 200, pattern: '^[A-Za-z0-9_\\-]+$' })),
});

/** Optional for validation so a missing key gets the specific 400; the document marks it required. */
const IDEMPOTENCY_KEY_HEADER = {
  'idempotency-key': Type.Optional(
    Type.String({
      description:
        'Required. One key per intent, reused on every retry of it. 1-255 visible ASCII characters ' +
        '(0x21-0x7E), sent once; the structured-field string form (`"abc"`, RFC 8941) is the same key as `abc`.',
      [DOCUMENTED_REQUIRED]: true,
    }),
  ),
};

/** The headers of an idempotent create (POST /v1/orders/{id}/refunds). */
export const IdempotentCreateHeaders = Type.Object(IDEMPOTENCY_KEY_HEADER);

/** POST /v1/orders: the Idempotency-Key, and the `Prefer: wait` only creating an order honours. */
export const CreateOrderHeaders = Type.Object({
  ...IDEMPOTENCY_KEY_HEADER,
  prefer: Type.Optional(
    Type.String({
      description:
        'RFC 7240. `wait=N`: wait up to N whole seconds (more than 30 counts as 30) for the order to reach ' +
        'a terminal status and answer 200 with it, else the usual 202. Other preferences are ignored, and ' +
        'so is a header that cannot be parsed (never a 400). E.g. `respond-async, wait=10`.',
    }),
  ),
});

export const WebhookAck = Type.Object(
  {
    received: Type.Literal(true),
    duplicate: Type.Boolean({ description: 'The event was received before; nothing was done again' }),
    outcome: Type.String({
      description:
        "signalled, charge_settled (the charge already has its definite outcome; nothing to signal), duplicate, workflow_closed, ignored_event_type, ignored_unknown_order or ignored_mismatch (the event does not name the charge of the order by its key or recorded id, with its amount and currency; nothing was done). Refund events: refund_settled (the refund already has its definite outcome), ignored_not_final (a pending refund, or a type its object contradicts), ignored_unknown_refund, or ignored_mismatch (it does not name the refund's provider refund by its key or recorded id, with its amount and currency)",
    }),
  },
  { title: 'WebhookAck' },
);

export const Health = Type.Object(
  {
    status: Type.Literal('ok'),
    checks: Type.Optional(
      Type.Record(Type.String(), Type.Union([Type.Literal('ok'), Type.Literal('unavailable')]), {
        description: 'Dependency (`postgres`, `temporal`) -> `ok` or `unavailable`',
      }),
    ),
  },
  { title: 'Health' },
);

export const LOCATION_HEADER = {
  Location: Type.String({ description: "The order's URL: /v1/orders/{id}" }),
};
/** On POST /v1/orders answers to a request with `Prefer: wait=N`: the N used (RFC 7240). */
export const PREFERENCE_APPLIED_HEADER = {
  'Preference-Applied': Type.String({
    pattern: '^wait=[0-9]+$',
    description:
      'Sent when the request asked for `Prefer: wait=N`: wait=<the seconds waited at most> (N, at most 30)',
  }),
};
/** On POST /v1/orders answers to a request that carried a Prefer header. */
export const VARY_PREFER_HEADER = {
  Vary: Type.Literal('Prefer', {
    description: 'Sent when the request carried a Prefer header: whether the answer waited depends on it',
  }),
};
export const REPLAYED_HEADER = {
  'Idempotent-Replayed': Type.Literal('true', {
    description: 'Present (true) when this is the stored answer to an earlier request with the same key',
  }),
};

// --- refunds ----------------------------------------------------------------

export const CreateRefundBody = Type.Object(
  {
    amount: Type.Integer({
      minimum: 1,
      maximum: MAX_ORDER_TOTAL,
      description:
        'Integer minor units, at least 1. With every refund of the order that is not failed, at most the amount charged.',
    }),
    reason: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 200,
        // Words a person writes, in any script; control characters and lone surrogates (which
        // Postgres can't store) are refused. Stored NFC-normalized (routes/refunds.ts).
        pattern: '^[^\\p{Cc}\\p{Cs}]+$',
        description:
          'Optional, 1-200 characters of printable text: spaces and any script, no control characters ' +
          '(e.g. "customer request"). Stored normalized to Unicode NFC.',
      }),
    ),
  },
  { additionalProperties: false, title: 'CreateRefundRequest' },
);
export type CreateRefundBody = Static<typeof CreateRefundBody>;

const RefundStatusSchema = Type.Enum([...REFUND_STATUSES], {
  title: 'RefundStatus',
  description:
    'pending -> succeeded | failed (the provider declined it) | refund_unknown (the outcome was lost: ' +
    'it is reconciled, never presumed failed) | needs_attention',
});

export const Refund = Type.Object(
  {
    id: Type.String({ description: 'Server-generated refund ID (re_ + 24 hex digits)' }),
    object: Type.Literal('refund'),
    orderId: Type.String(),
    amount: Type.Integer({ description: 'Integer minor units' }),
    currency: Type.String(),
    status: RefundStatusSchema,
    reason: Type.Union([Type.String(), Type.Null()]),
    workflowId: Type.String({ description: 'Temporal workflow ID: refund/<tenant>/<id>' }),
    providerRefundId: Type.Union([Type.String(), Type.Null()]),
    createdAt: Type.String({ format: 'date-time' }),
    updatedAt: Type.String({ format: 'date-time' }),
  },
  { title: 'Refund' },
);

export const RefundList = Type.Object(
  { object: Type.Literal('list'), data: Type.Array(Refund) },
  { title: 'RefundList' },
);

export const OrderRefundParams = Type.Object({
  id: Type.String({ maxLength: 64, pattern: '^[A-Za-z0-9_]+$' }),
});

export const RefundIdParams = Type.Object({
  id: Type.String({ maxLength: 64, pattern: '^[A-Za-z0-9_]+$' }),
  refundId: Type.String({ maxLength: 64, pattern: '^[A-Za-z0-9_]+$' }),
});

export const GetRefundQuery = Type.Object({
  wait: Type.Optional(
    Type.Integer({
      minimum: 0,
      maximum: 30,
      description: 'Long-poll up to this many seconds until the refund reaches a terminal status',
    }),
  ),
});

export const REFUND_LOCATION_HEADER = {
  Location: Type.String({ description: "The refund's URL: /v1/orders/{id}/refunds/{refundId}" }),
};

/** Per-tenant limit (with the rate-limit headers) or too many failed API keys from an address. */
export const TOO_MANY_REQUESTS = problemResponse('Rate limited (nothing stored); retry after Retry-After', {
  ...always(RETRY_AFTER_HEADER),
  ...RATE_LIMIT_HEADERS,
});

/**
 * Any route, while Postgres or Temporal can't be reached or does not answer within its bound: 503
 * `unavailable` with Retry-After (src/http/problems.ts; docs/DEPLOYING.md "Postgres timeouts").
 */
export const UNAVAILABLE = problemResponse(
  'Postgres or Temporal did not answer in time (unavailable); retry after Retry-After',
  { ...always(RETRY_AFTER_HEADER), ...RATE_LIMIT_HEADERS },
);

/** The problems every idempotent create (an order, a refund) can answer alike. */
export const IDEMPOTENT_CREATE_PROBLEMS = {
  401: problemResponse('Missing or invalid API key (nothing stored)'),
  413: problemResponse('Body larger than 64 KiB'),
  415: problemResponse('The body is not application/json'),
  429: TOO_MANY_REQUESTS,
  503: {
    ...UNAVAILABLE,
    description:
      'Postgres or Temporal did not answer in time (unavailable), or a recovery after a database restore ' +
      'is pending (recovery-pending; nothing stored): retry after Retry-After with the same ' +
      'Idempotency-Key, which never creates twice',
  },
};
