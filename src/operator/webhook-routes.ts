/**
 * The operator's view of merchant webhooks (src/merchant-events): every tenant's endpoints, their
 * deliveries and attempts, and redelivery of one event or of every failed one. A redelivery always
 * previews first (`preview: true` changes nothing) and is audited per delivery when it is made.
 * Registered inside the admin routes' plugin (src/operator/routes.ts), under its authentication.
 */
import { Type, type FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyRequest } from 'fastify';
import { withClient, withTransaction, type Pool } from '../db/index.ts';
import { insertAudit, type ActorCredential } from '../audit/sql.ts';
import { ProblemError } from '../http/problems.ts';
import { jsonResponse } from '../http/openapi.ts';
import {
  attemptsOf,
  getDelivery,
  listAllEndpoints,
  listDeliveries,
  planRedelivery,
  type DeliveryRow,
} from '../merchant-events/sql.ts';
import { DELIVERY_OPERATION_TYPE } from '../merchant-events/contract.ts';

type App = Parameters<FastifyPluginAsyncTypebox>[0];

export interface WebhookAdminOptions {
  pool: Pool;
  /** Where redeliveries' workflows start (the API's TEMPORAL_TASK_QUEUE). */
  taskQueue: string;
  who(request: FastifyRequest): { actor: string; actorCredential: Exclude<ActorCredential, 'self_declared'> };
  errors: Record<number, unknown>;
  tags: string[];
  security: { adminToken: never[] }[];
}

const Id = Type.String({ minLength: 1, maxLength: 100, pattern: '^[A-Za-z0-9_]+$' });
const Str = Type.String();
const Nullable = <T extends ReturnType<typeof Type.String> | ReturnType<typeof Type.Integer>>(t: T) =>
  Type.Union([t, Type.Null()]);
const Status = Type.Union([Type.Literal('pending'), Type.Literal('succeeded'), Type.Literal('failed')]);
const MAX_BULK = 500;

const AdminEndpoint = Type.Object(
  { id: Str, tenantId: Str, url: Str, events: Type.Array(Str), createdAt: Str },
  { title: 'AdminWebhookEndpoint' },
);
const AdminDelivery = Type.Object(
  {
    endpointId: Str,
    eventId: Str,
    tenantId: Str,
    eventType: Str,
    url: Str,
    workflowId: Str,
    status: Status,
    attempts: Type.Integer(),
    lastStatus: Nullable(Type.Integer()),
    lastError: Nullable(Str),
    redeliveries: Type.Integer(),
    createdAt: Str,
    deliveredAt: Nullable(Str),
  },
  { title: 'AdminWebhookDelivery' },
);
const Attempt = Type.Object(
  {
    attempt: Type.Integer(),
    startedAt: Str,
    latencyMs: Type.Integer(),
    statusCode: Nullable(Type.Integer()),
    error: Nullable(Str),
    responseExcerpt: Nullable(Str),
  },
  { title: 'AdminWebhookAttempt' },
);
const RedeliveryPlan = Type.Object(
  {
    preview: Type.Boolean(),
    deliveries: Type.Array(
      Type.Object(
        {
          endpointId: Str,
          eventId: Str,
          tenantId: Str,
          eventType: Str,
          url: Str,
          workflowId: Nullable(Str),
        },
        { title: 'AdminRedeliveryTarget' },
      ),
    ),
    auditIds: Type.Array(Str),
  },
  { title: 'AdminRedeliveryPlan' },
);

const deliveryView = (d: DeliveryRow) => ({
  endpointId: d.endpoint_id,
  eventId: d.event_id,
  tenantId: d.tenant_id,
  eventType: d.event_type,
  url: d.url,
  workflowId: d.workflow_id,
  status: d.status,
  attempts: d.attempts,
  lastStatus: d.last_status,
  lastError: d.last_error,
  redeliveries: d.redeliveries,
  createdAt: d.created_at.toISOString(),
  deliveredAt: d.delivered_at ? d.delivered_at.toISOString() : null,
});

export function registerWebhookAdminRoutes(app: App, o: WebhookAdminOptions): void {
  const { pool, tags, security } = o;
  const ok = (description: string, schema: Parameters<typeof jsonResponse>[1]) =>
    jsonResponse(description, schema);
  const errors = o.errors as Record<number, never>;

  app.get(
    '/admin/webhooks/endpoints',
    {
      schema: {
        operationId: 'adminListWebhookEndpoints',
        summary: "Every tenant's webhook endpoints (never their secrets)",
        tags,
        security,
        response: {
          200: ok(
            'Endpoints, oldest first',
            Type.Object({ data: Type.Array(AdminEndpoint) }, { title: 'AdminWebhookEndpointList' }),
          ),
          ...errors,
        },
      },
    },
    async () => {
      const rows = await withClient(pool, (c) => listAllEndpoints(c, 1000));
      return {
        data: rows.map((e) => ({
          id: e.id,
          tenantId: e.tenant_id,
          url: e.url,
          events: e.events,
          createdAt: e.created_at.toISOString(),
        })),
      };
    },
  );

  app.get(
    '/admin/webhooks/deliveries',
    {
      schema: {
        operationId: 'adminListWebhookDeliveries',
        summary: 'Deliveries, newest first, by status, tenant or endpoint',
        tags,
        security,
        querystring: Type.Object({
          status: Type.Optional(Status),
          tenant: Type.Optional(Type.String({ minLength: 1, maxLength: 100, pattern: '^[\\x21-\\x7e]+$' })),
          endpoint: Type.Optional(Id),
          limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })),
        }),
        response: {
          200: ok(
            'Deliveries',
            Type.Object({ data: Type.Array(AdminDelivery) }, { title: 'AdminWebhookDeliveryList' }),
          ),
          ...errors,
        },
      },
    },
    async (request) => {
      const q = request.query;
      const rows = await withClient(pool, (c) =>
        listDeliveries(c, {
          tenantId: q.tenant ?? null,
          ...(q.status ? { status: q.status } : {}),
          ...(q.endpoint ? { endpointId: q.endpoint } : {}),
          limit: q.limit ?? 100,
        }),
      );
      return { data: rows.map(deliveryView) };
    },
  );

  app.get(
    '/admin/webhooks/delivery',
    {
      schema: {
        operationId: 'adminGetWebhookDelivery',
        summary: 'One delivery with every attempt: status, latency, response excerpt',
        tags,
        security,
        querystring: Type.Object({ endpoint: Id, event: Id }),
        response: {
          200: ok(
            'The delivery',
            Type.Object(
              { delivery: AdminDelivery, attempts: Type.Array(Attempt) },
              { title: 'AdminWebhookDeliveryStory' },
            ),
          ),
          ...errors,
        },
      },
    },
    async (request) => {
      const { endpoint, event } = request.query;
      const found = await withClient(pool, async (c) => {
        const d = await getDelivery(c, endpoint, event);
        return d ? { d, attempts: await attemptsOf(c, endpoint, event) } : null;
      });
      if (!found) throw new ProblemError('notFound', 'No delivery of this event to this endpoint.');
      return {
        delivery: deliveryView(found.d),
        attempts: found.attempts.map((a) => ({
          attempt: a.attempt,
          startedAt: a.started_at.toISOString(),
          latencyMs: a.latency_ms,
          statusCode: a.status_code,
          error: a.error,
          responseExcerpt: a.response_excerpt,
        })),
      };
    },
  );

  app.post(
    '/admin/webhooks/redeliver',
    {
      schema: {
        operationId: 'adminRedeliverWebhooks',
        summary: 'Send one event (endpoint and event) or every failed delivery (status=failed) again',
        description:
          'With preview (the default) nothing changes: the answer lists what would be sent and to whom. ' +
          'Otherwise each delivery gets a new workflow (its `/r<n>`), and one audit row. The receiver sees ' +
          'the same event ID again and dedupes on it.',
        tags,
        security,
        body: Type.Object(
          {
            endpoint: Type.Optional(Id),
            event: Type.Optional(Id),
            failed: Type.Optional(
              Type.Boolean({ description: 'Every failed delivery (of `endpoint` if given)' }),
            ),
            preview: Type.Optional(Type.Boolean({ default: true })),
            reason: Type.Optional(Type.String({ minLength: 1, maxLength: 1000, pattern: '^[^\\x00]*$' })),
          },
          { additionalProperties: false, title: 'AdminRedeliverRequest' },
        ),
        response: { 200: ok('What was (or would be) sent', RedeliveryPlan), ...errors },
      },
    },
    async (request) => {
      const b = request.body;
      const preview = b.preview ?? true;
      if (!b.failed && !(b.endpoint && b.event))
        throw new ProblemError(
          'invalidRequest',
          'Name one delivery (endpoint and event) or send failed: true.',
        );
      if (!preview && !b.reason?.trim())
        throw new ProblemError(
          'invalidRequest',
          'A redelivery needs a reason: it is recorded in the audit log.',
        );
      const targets = await withClient(pool, async (c) => {
        if (!b.failed) {
          const d = await getDelivery(c, b.endpoint!, b.event!);
          if (!d) throw new ProblemError('notFound', 'No delivery of this event to this endpoint.');
          return [d];
        }
        return listDeliveries(c, {
          tenantId: null,
          status: 'failed',
          ...(b.endpoint ? { endpointId: b.endpoint } : {}),
          limit: MAX_BULK,
        });
      });
      const view = (d: DeliveryRow, workflowId: string | null) => ({
        endpointId: d.endpoint_id,
        eventId: d.event_id,
        tenantId: d.tenant_id,
        eventType: d.event_type,
        url: d.url,
        workflowId,
      });
      if (preview) return { preview, deliveries: targets.map((d) => view(d, null)), auditIds: [] };
      const { actor, actorCredential } = o.who(request);
      const done: ReturnType<typeof view>[] = [];
      const auditIds: string[] = [];
      for (const d of targets) {
        // One transaction per delivery: its new start intent and its audit row commit together.
        await withTransaction(pool, async (tx) => {
          const planned = await planRedelivery(tx, {
            endpointId: d.endpoint_id,
            eventId: d.event_id,
            taskQueue: o.taskQueue,
          });
          if (!planned) return;
          const audit = await insertAudit(tx, {
            actor,
            actorCredential,
            source: 'api',
            action: 'webhook_redeliver',
            reason: b.reason!.trim(),
            tenantId: d.tenant_id,
            operationType: DELIVERY_OPERATION_TYPE,
            operationKey: `${planned.workflowId}/deliver`,
            workflowId: planned.workflowId,
            before: { status: d.status, attempts: d.attempts, workflowId: d.workflow_id },
            after: { status: 'pending', workflowId: planned.workflowId },
          });
          done.push(view(d, planned.workflowId));
          auditIds.push(audit.id);
        });
      }
      return { preview, deliveries: done, auditIds };
    },
  );
}
