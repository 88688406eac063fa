/** Request schemas (TypeBox). Validated strictly: no type coercion of bodies. */
import { Type, type Static } from '@fastify/type-provider-typebox';

/** Flat string map, like Stripe's metadata (at most 50 keys, short values). */
const Metadata = Type.Record(Type.String({ minLength: 1, maxLength: 40 }), Type.String({ maxLength: 500 }), {
  maxProperties: 50,
});

const Email = Type.String({ minLength: 3, maxLength: 254, pattern: '^[^\\s@]+@[^\\s@]+\\.[^\\s@]+$' });

export const CreateChargeBody = Type.Object(
  {
    // Integer minor units; the upper bound is Stripe's 99,999,999 (e.g. $999,999.99).
    amount: Type.Integer({ minimum: 1, maximum: 99_999_999 }),
    currency: Type.String({ pattern: '^[a-z]{3}$' }),
    payment_method: Type.String({ minLength: 1, maxLength: 100 }),
    description: Type.Optional(Type.String({ maxLength: 1000 })),
    metadata: Type.Optional(Metadata),
    receipt_email: Type.Optional(Email),
  },
  { additionalProperties: false },
);
export type CreateChargeBody = Static<typeof CreateChargeBody>;

export const CreateMessageBody = Type.Object(
  {
    to: Email,
    subject: Type.String({ minLength: 1, maxLength: 998 }),
    text: Type.String({ maxLength: 100_000 }),
    metadata: Type.Optional(Metadata),
  },
  { additionalProperties: false },
);
export type CreateMessageBody = Static<typeof CreateMessageBody>;

export const CreateRefundBody = Type.Object(
  {
    charge: Type.String({ minLength: 1, maxLength: 255 }),
    amount: Type.Integer({ minimum: 1, maximum: 99_999_999 }),
    reason: Type.Optional(Type.String({ maxLength: 200 })),
    metadata: Type.Optional(Metadata),
  },
  { additionalProperties: false },
);
export type CreateRefundBody = Static<typeof CreateRefundBody>;

export const LookupQuery = Type.Object({ idempotency_key: Type.String({ minLength: 1, maxLength: 255 }) });

export const AuditQuery = Type.Object({
  order_id: Type.Optional(Type.String({ maxLength: 255 })),
  tenant_id: Type.Optional(Type.String({ maxLength: 255 })),
  idempotency_key: Type.Optional(Type.String({ maxLength: 255 })),
});

const FaultEndpointSchema = Type.Union([
  Type.Literal('charges.create'),
  Type.Literal('charges.lookup'),
  Type.Literal('messages.create'),
  Type.Literal('messages.lookup'),
  Type.Literal('refunds.create'),
  Type.Literal('refunds.lookup'),
]);

export const CreateFaultBody = Type.Object(
  {
    endpoint: FaultEndpointSchema,
    kind: Type.Union([
      Type.Literal('fail_before'),
      Type.Literal('fail_after'),
      Type.Literal('drop_after'),
      Type.Literal('delay'),
    ]),
    count: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000 })),
    delayMs: Type.Optional(Type.Integer({ minimum: 0, maximum: 600_000 })),
  },
  { additionalProperties: false },
);
export type CreateFaultBody = Static<typeof CreateFaultBody>;

export const WebhookConfigBody = Type.Object(
  {
    url: Type.Optional(Type.Union([Type.String({ pattern: '^https?://', maxLength: 2048 }), Type.Null()])),
    duplicate: Type.Optional(Type.Boolean()),
    reorder: Type.Optional(Type.Boolean()),
    enabled: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);
export type WebhookConfigBody = Static<typeof WebhookConfigBody>;

export const WebhookListQuery = Type.Object({
  state: Type.Optional(
    Type.Union([Type.Literal('pending'), Type.Literal('delivered'), Type.Literal('failed')]),
  ),
});

export const RedeliverBody = Type.Object(
  { eventId: Type.String({ minLength: 1, maxLength: 255 }) },
  { additionalProperties: false },
);
