/**
 * Request and response schemas (TypeBox, i.e. JSON Schema). They validate
 * requests (bodies are never type-coerced: "2" is not a quantity) and feed
 * the OpenAPI document at /openapi.json.
 *
 * Every string has a pattern or format and a maximum length, so nothing a
 * client sends can reach Postgres as something it rejects (a NUL byte in a
 * text column is a 500 otherwise).
 */
import { Type, type Static } from '@fastify/type-provider-typebox';
import { ORDER_STATUSES } from '../orders/model.ts';

export const MAX_ITEMS = 100;
export const BODY_LIMIT_BYTES = 64 * 1024;
/**
 * Per-item caps keep every total exact: 100 items x 10 000 x 1e9 = 1e15, well
 * inside Number.MAX_SAFE_INTEGER (~9.007e15). Larger caps would let a total
 * round silently, and the wrong amount would be charged.
 */
export const MAX_QUANTITY = 10_000;
export const MAX_UNIT_AMOUNT = 1_000_000_000;
/**
 * The payment provider's largest charge, in minor units (Stripe's and the
 * sandbox's 99,999,999, e.g. $999,999.99). An order above it could never be
 * paid, so the API refuses it with 422 `amount-too-large` instead of
 * accepting an order that can only end `rejected`. test/api/hostile.test.ts
 * checks it equals the sandbox's own schema bound.
 */
export const MAX_ORDER_TOTAL = 99_999_999;

const Id = (description: string) =>
  Type.String({ minLength: 1, maxLength: 100, pattern: '^[A-Za-z0-9_.:\\-]+$', description });

export const OrderItemSchema = Type.Object(
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
  { additionalProperties: false },
);

export const CreateOrderBody = Type.Object(
  {
    customer: Type.Object(
      {
        id: Id('Your customer ID'),
        email: Type.String({ format: 'email', maxLength: 254, pattern: '^[\\x21-\\x7e]+$' }),
      },
      { additionalProperties: false },
    ),
    currency: Type.String({ pattern: '^[A-Za-z]{3}$', description: 'ISO 4217 code; stored lowercase' }),
    items: Type.Array(OrderItemSchema, { minItems: 1, maxItems: MAX_ITEMS }),
    paymentMethod: Id('Payment method token, e.g. pm_card_visa'),
  },
  { additionalProperties: false },
);
export type CreateOrderBody = Static<typeof CreateOrderBody>;

export const OrderStatusSchema = Type.Enum([...ORDER_STATUSES], {
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
  customer: Type.Object({ id: Type.String(), email: Type.String() }),
  items: Type.Array(OrderItemSchema),
  paymentMethod: Type.String(),
  createdAt: Type.String({ format: 'date-time' }),
};

export const CreatedOrder = Type.Object(OrderFields, {});
export type CreatedOrder = Static<typeof CreatedOrder>;

export const StepSchema = Type.Object({
  name: Type.String({ description: 'charge, receipt, status/<status>, ...' }),
  operationType: Type.String(),
  operationKey: Type.String({ description: 'Ledger key, derived from the workflow ID' }),
  state: Type.Union([
    Type.Literal('in_progress'),
    Type.Literal('succeeded'),
    Type.Literal('failed'),
    Type.Literal('unknown'),
  ]),
  attempts: Type.Integer(),
  providerRef: Type.Union([Type.String(), Type.Null()]),
  createdAt: Type.String({ format: 'date-time' }),
  updatedAt: Type.String({ format: 'date-time' }),
  completedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
});

export const OrderDetail = Type.Object(
  {
    ...OrderFields,
    chargeId: Type.Union([Type.String(), Type.Null()]),
    receiptId: Type.Union([Type.String(), Type.Null()]),
    lastError: Type.Union([Type.String(), Type.Null()]),
    reason: Type.Union([Type.String(), Type.Null()], {
      description:
        'Why a rejected or needs_attention order is there, machine-readable: decline_code:<code>, ' +
        'payment_failed, provider_rejected, charge_failed:<type>, payment_unknown_horizon, ' +
        'receipt_failed, status_write_failed. Null otherwise.',
    }),
    updatedAt: Type.String({ format: 'date-time' }),
    steps: Type.Array(StepSchema),
  },
  {},
);

export const OrderSummary = Type.Object(
  { ...OrderFields, updatedAt: Type.String({ format: 'date-time' }) },
  {},
);

export const OrderList = Type.Object({
  object: Type.Literal('list'),
  data: Type.Array(OrderSummary),
  hasMore: Type.Boolean(),
  nextCursor: Type.Union([Type.String(), Type.Null()], { description: 'Pass as ?cursor= for the next page' }),
});

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

export const CreateOrderHeaders = Type.Object({
  'idempotency-key': Type.Optional(
    Type.String({
      description:
        'Required. 1-255 visible ASCII characters (0x21-0x7E), sent once. Reuse it to retry the same request.',
    }),
  ),
});

export const Problem = Type.Object(
  {
    type: Type.String({ format: 'uri' }),
    title: Type.String(),
    status: Type.Integer(),
    detail: Type.Optional(Type.String()),
    instance: Type.Optional(Type.String()),
  },
  { additionalProperties: true },
);

export const problemResponse = (description: string) => ({
  description,
  content: { 'application/problem+json': { schema: Problem } },
});
