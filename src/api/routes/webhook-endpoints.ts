/**
 * A tenant's webhook endpoints: where its order and refund events go (src/merchant-events).
 * The signing secret is shown on create and on rotation only; a tenant never sees another's.
 */
import { randomBytes } from 'node:crypto';
import { Type, type FastifyPluginAsyncTypebox, type Static } from '@fastify/type-provider-typebox';
import { withClient } from '../../db/index.ts';
import type { ApiContext } from '../context.ts';
import { idempotentTransaction, readIdempotencyKey } from '../idempotency.ts';
import { ProblemError } from '../../http/problems.ts';
import { jsonResponse, problemResponse, RATE_LIMIT_HEADERS, RETRY_AFTER_HEADER } from '../../http/openapi.ts';
import { IDEMPOTENT_CREATE_PROBLEMS, TOO_MANY_REQUESTS, IdempotentCreateHeaders } from '../schemas.ts';
import { MERCHANT_EVENT_TYPES } from '../../merchant-events/contract.ts';
import { checkEndpointUrl, EndpointRefused, newSigningSecret } from '../../merchant-events/send.ts';
import {
  deleteEndpoint,
  insertEndpoint,
  listDeliveries,
  listEndpoints,
  rotateSecret,
  type DeliveryRow,
  type EndpointRow,
} from '../../merchant-events/sql.ts';

const CREATE_ENDPOINT_SCHEMA_VERSION = 1;
const CREATE_ENDPOINT_OPERATION = 'http.create_webhook_endpoint';
const MAX_ENDPOINTS_PER_TENANT = 16;
const DAY_S = 24 * 60 * 60;

const EventType = Type.Union(
  MERCHANT_EVENT_TYPES.map((t) => Type.Literal(t)),
  { description: 'An event type' },
);

const CreateWebhookEndpointBody = Type.Object(
  {
    url: Type.String({
      minLength: 1,
      maxLength: 2048,
      pattern: '^[\\x21-\\x7e]+$',
      description: 'https URL of a public address (http and loopback only in local development)',
    }),
    events: Type.Array(EventType, { minItems: 1, maxItems: MERCHANT_EVENT_TYPES.length, uniqueItems: true }),
  },
  { additionalProperties: false, title: 'CreateWebhookEndpoint' },
);
type CreateWebhookEndpointBody = Static<typeof CreateWebhookEndpointBody>;

const EndpointFields = {
  id: Type.String(),
  object: Type.Literal('webhook_endpoint'),
  url: Type.String(),
  events: Type.Array(EventType),
  createdAt: Type.String({ format: 'date-time' }),
};
const WebhookEndpoint = Type.Object(EndpointFields, { title: 'WebhookEndpoint' });
const WebhookEndpointWithSecret = Type.Object(
  {
    ...EndpointFields,
    secret: Type.String({
      pattern: '^whsec_',
      description:
        'The Standard Webhooks signing secret: shown here once. Keep it; verify every delivery with it.',
    }),
    previousSecretExpiresAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()], {
      description: 'After a rotation, deliveries are signed with the previous secret too until then',
    }),
  },
  { title: 'WebhookEndpointWithSecret' },
);
const WebhookEndpointList = Type.Object(
  { object: Type.Literal('list'), data: Type.Array(WebhookEndpoint) },
  { title: 'WebhookEndpointList' },
);
const WebhookDelivery = Type.Object(
  {
    eventId: Type.String(),
    eventType: EventType,
    status: Type.Union([Type.Literal('pending'), Type.Literal('succeeded'), Type.Literal('failed')]),
    attempts: Type.Integer(),
    lastStatus: Type.Union([Type.Integer(), Type.Null()]),
    createdAt: Type.String({ format: 'date-time' }),
    deliveredAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  },
  { title: 'WebhookDelivery' },
);
const WebhookDeliveryList = Type.Object(
  { object: Type.Literal('list'), data: Type.Array(WebhookDelivery) },
  { title: 'WebhookDeliveryList' },
);
const EndpointIdParams = Type.Object(
  { id: Type.String({ minLength: 1, maxLength: 100, pattern: '^[A-Za-z0-9_]+$' }) },
  { additionalProperties: false },
);
const RotateBody = Type.Object(
  {
    overlapSeconds: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: 7 * DAY_S,
        description: 'How long the previous secret keeps signing too (default one day; 0: not at all)',
      }),
    ),
  },
  { additionalProperties: false, title: 'RotateWebhookSecret' },
);

const iso = (d: Date | null) => (d ? d.toISOString() : null);

function endpointView(e: EndpointRow) {
  return {
    id: e.id,
    object: 'webhook_endpoint' as const,
    url: e.url,
    events: e.events,
    createdAt: e.created_at.toISOString(),
  };
}

function withSecret(e: EndpointRow) {
  return { ...endpointView(e), secret: e.secrets[0]!, previousSecretExpiresAt: iso(e.previous_expires_at) };
}

function deliveryView(d: DeliveryRow) {
  return {
    eventId: d.event_id,
    eventType: d.event_type,
    status: d.status,
    attempts: d.attempts,
    lastStatus: d.last_status,
    createdAt: d.created_at.toISOString(),
    deliveredAt: iso(d.delivered_at),
  };
}

type StoredResponse = { statusCode: number; body: ReturnType<typeof withSecret> };

export const webhookEndpointRoutes: FastifyPluginAsyncTypebox<{ ctx: ApiContext }> = async (app, { ctx }) => {
  const { pool, ledger, config } = ctx;
  const policy = { allowPrivate: config.webhooks.allowPrivate };
  const auth = { config: { auth: true } } as const;
  const common = { tags: ['webhook endpoints'], security: [{ apiKey: [] }] };

  app.post(
    '/v1/webhook-endpoints',
    {
      ...auth,
      schema: {
        ...common,
        operationId: 'createWebhookEndpoint',
        summary: 'Register an endpoint for order and refund events (idempotent)',
        description:
          'Requires an Idempotency-Key, with the same contract as createOrder. The answer carries the ' +
          'signing secret, shown only here and on rotation. docs/API.md "Events" has the delivery contract.',
        headers: IdempotentCreateHeaders,
        body: CreateWebhookEndpointBody,
        response: {
          201: jsonResponse(
            'The endpoint, with its signing secret',
            WebhookEndpointWithSecret,
            RATE_LIMIT_HEADERS,
          ),
          400: problemResponse(
            'Schema violation or a missing/invalid Idempotency-Key (nothing stored)',
            RATE_LIMIT_HEADERS,
          ),
          409: problemResponse('The first request with this key is still in progress', {
            ...RETRY_AFTER_HEADER,
            ...RATE_LIMIT_HEADERS,
          }),
          422: problemResponse(
            'The key was used with another request, the URL is not allowed (webhook-url-refused), or the ' +
              'tenant has the most endpoints allowed (nothing stored)',
            RATE_LIMIT_HEADERS,
          ),
          ...IDEMPOTENT_CREATE_PROBLEMS,
        },
      },
    },
    async (request, reply) => {
      const key = readIdempotencyKey(request);
      const tenantId = request.tenantId!;
      const body: CreateWebhookEndpointBody = {
        url: request.body.url,
        events: [...request.body.events].sort(),
      };
      try {
        await checkEndpointUrl(body.url, policy);
      } catch (err) {
        if (err instanceof EndpointRefused) throw new ProblemError('webhookUrlRefused', err.message);
        throw err;
      }
      const { result, replayed } = await idempotentTransaction<StoredResponse>(
        ledger,
        { tenantId, operationType: CREATE_ENDPOINT_OPERATION, key },
        {
          schemaVersion: CREATE_ENDPOINT_SCHEMA_VERSION,
          method: 'POST',
          path: '/v1/webhook-endpoints',
          body,
        },
        async (tx) => {
          if ((await listEndpoints(tx, tenantId)).length >= MAX_ENDPOINTS_PER_TENANT) {
            throw new ProblemError(
              'webhookUrlRefused',
              `A tenant has at most ${MAX_ENDPOINTS_PER_TENANT} endpoints; delete one first.`,
            );
          }
          const row = await insertEndpoint(tx, {
            tenantId,
            id: `we_${randomBytes(12).toString('hex')}`,
            url: body.url,
            events: body.events,
            secret: newSigningSecret(),
          });
          return { statusCode: 201, body: withSecret(row) };
        },
      );
      if (replayed) void reply.header('idempotent-replayed', 'true');
      return reply.code(201).send(result.body);
    },
  );

  app.get(
    '/v1/webhook-endpoints',
    {
      ...auth,
      schema: {
        ...common,
        operationId: 'listWebhookEndpoints',
        summary: "The tenant's endpoints (without secrets)",
        response: {
          200: jsonResponse('The endpoints, oldest first', WebhookEndpointList, RATE_LIMIT_HEADERS),
          401: problemResponse('Missing or invalid API key'),
          429: TOO_MANY_REQUESTS,
        },
      },
    },
    async (request, reply) => {
      const rows = await withClient(pool, (c) => listEndpoints(c, request.tenantId!));
      return reply.send({ object: 'list' as const, data: rows.map(endpointView) });
    },
  );

  app.delete(
    '/v1/webhook-endpoints/:id',
    {
      ...auth,
      schema: {
        ...common,
        operationId: 'deleteWebhookEndpoint',
        summary: 'Remove an endpoint: its pending deliveries stop',
        params: EndpointIdParams,
        response: {
          204: { description: 'Removed', type: 'null' },
          401: problemResponse('Missing or invalid API key'),
          404: problemResponse('No such endpoint for this tenant', RATE_LIMIT_HEADERS),
          429: TOO_MANY_REQUESTS,
        },
      },
    },
    async (request, reply) => {
      const gone = await withClient(pool, (c) => deleteEndpoint(c, request.tenantId!, request.params.id));
      if (!gone) throw new ProblemError('notFound', 'No webhook endpoint with this ID.');
      return reply.code(204).send(null);
    },
  );

  app.post(
    '/v1/webhook-endpoints/:id/rotate-secret',
    {
      ...auth,
      schema: {
        ...common,
        operationId: 'rotateWebhookSecret',
        summary: 'Issue a new signing secret; the previous one keeps signing during the overlap',
        description:
          'Deliveries carry one signature per live secret (space-separated), so a receiver verifying ' +
          'with either secret accepts them until the overlap ends. Not idempotent: each call issues a new secret.',
        params: EndpointIdParams,
        body: RotateBody,
        response: {
          200: jsonResponse(
            'The endpoint with its new secret',
            WebhookEndpointWithSecret,
            RATE_LIMIT_HEADERS,
          ),
          401: problemResponse('Missing or invalid API key'),
          404: problemResponse('No such endpoint for this tenant', RATE_LIMIT_HEADERS),
          429: TOO_MANY_REQUESTS,
        },
      },
    },
    async (request, reply) => {
      const row = await withClient(pool, (c) =>
        rotateSecret(c, {
          tenantId: request.tenantId!,
          id: request.params.id,
          secret: newSigningSecret(),
          overlapMs: (request.body?.overlapSeconds ?? DAY_S) * 1000,
        }),
      );
      if (!row) throw new ProblemError('notFound', 'No webhook endpoint with this ID.');
      return reply.send(withSecret(row));
    },
  );

  app.get(
    '/v1/webhook-endpoints/:id/deliveries',
    {
      ...auth,
      schema: {
        ...common,
        operationId: 'listWebhookDeliveries',
        summary: "An endpoint's deliveries, newest first (the last 100)",
        params: EndpointIdParams,
        response: {
          200: jsonResponse('The deliveries', WebhookDeliveryList, RATE_LIMIT_HEADERS),
          401: problemResponse('Missing or invalid API key'),
          429: TOO_MANY_REQUESTS,
        },
      },
    },
    async (request, reply) => {
      const rows = await withClient(pool, (c) =>
        listDeliveries(c, { tenantId: request.tenantId!, endpointId: request.params.id, limit: 100 }),
      );
      return reply.send({ object: 'list' as const, data: rows.map(deliveryView) });
    },
  );
};
