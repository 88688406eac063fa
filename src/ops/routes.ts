/**
 * Admin routes: the operator's recovery path over HTTP, the same actions as
 * the CLI (scripts/ops.ts) through the same Operator service. Authenticated
 * by a separate admin bearer token (ONCEFLOW_ADMIN_TOKEN), never by a tenant
 * API key. Errors are application/problem+json (RFC 9457); the types are
 * listed in docs/OPERATIONS.md.
 *
 * Keys contain slashes (`order/acme/ord_1/charge`), so an operation is named
 * by query parameters or body fields, never by a path segment.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import {
  Type,
  TypeBoxValidatorCompiler,
  type FastifyPluginAsyncTypebox,
} from '@fastify/type-provider-typebox';
import type { FastifyError, FastifyReply } from 'fastify';
import { errorFields, log } from '../log.ts';
import { isOpsError, type OpsErrorCode } from './errors.ts';
import type { Operator } from './operator.ts';

const BASE = 'https://onceflow.dev/problems/';

export const ADMIN_PROBLEMS = {
  unauthorized: { type: `${BASE}admin-unauthorized`, title: 'Missing or invalid admin token', status: 401 },
  invalid_input: { type: `${BASE}invalid-request`, title: 'The request is not valid', status: 400 },
  not_found: { type: `${BASE}not-found`, title: 'Not found', status: 404 },
  invalid_state: {
    type: `${BASE}operation-state`,
    title: 'The operation or order is not in a state this action applies to',
    status: 409,
  },
  in_progress: {
    type: `${BASE}operation-in-progress`,
    title: 'A live attempt holds this operation',
    status: 409,
  },
  unavailable: { type: `${BASE}unavailable`, title: 'A dependency is unavailable', status: 503 },
  internal: { type: `${BASE}internal`, title: 'Internal server error', status: 500 },
} as const;

type AdminProblem = keyof typeof ADMIN_PROBLEMS;

function problem(
  reply: FastifyReply,
  kind: AdminProblem,
  detail?: string,
  extensions: Record<string, unknown> = {},
): FastifyReply {
  const p = ADMIN_PROBLEMS[kind];
  return reply
    .code(p.status)
    .type('application/problem+json')
    .send({
      type: p.type,
      title: p.title,
      status: p.status,
      ...(detail ? { detail } : {}),
      instance: reply.request.url.split('?')[0],
      ...extensions,
    });
}

export interface OpsRoutesOptions {
  operator: Operator;
  adminToken: string;
}

const visible = (maxLength: number, description?: string) =>
  Type.String({
    minLength: 1,
    maxLength,
    pattern: '^[\\x21-\\x7e]+$',
    ...(description ? { description } : {}),
  });
/** Free text for humans: any characters but NUL (Postgres text refuses it). */
const text = (maxLength: number, description: string) =>
  Type.String({ minLength: 1, maxLength, pattern: '^[^\\x00]*$', description });

const Tenant = visible(100, 'Tenant ID');
const OpType = visible(100, 'Operation type, e.g. payment.charge');
const Key = visible(255, 'Operation key, e.g. order/acme/ord_1/charge');
const Actor = text(200, 'Who acts (a person), recorded in the audit log');
const Reason = text(1000, 'Why (required for decisions), recorded in the audit log');
const Limit = Type.Integer({ minimum: 1, maximum: 1000 });
const State = Type.Union([
  Type.Literal('in_progress'),
  Type.Literal('unknown'),
  Type.Literal('succeeded'),
  Type.Literal('failed'),
]);

const digest = (s: string) => createHash('sha256').update(s, 'utf8').digest();

export function opsRoutes(opts: OpsRoutesOptions): FastifyPluginAsyncTypebox {
  if (typeof opts.adminToken !== 'string' || opts.adminToken.length < 16) {
    throw new Error('opsRoutes: adminToken must be at least 16 characters');
  }
  // Comparing fixed-length digests keeps the comparison constant-time, including in the token's length.
  const expected = digest(opts.adminToken);
  const { operator } = opts;

  return async (app) => {
    app.setValidatorCompiler(TypeBoxValidatorCompiler);

    app.addHook('onRequest', async (request, reply) => {
      const header = request.headers.authorization;
      const m = typeof header === 'string' ? /^Bearer ([\x21-\x7e]{1,512})$/.exec(header) : null;
      if (!m || !timingSafeEqual(digest(m[1]!), expected)) {
        void reply.header('www-authenticate', 'Bearer realm="onceflow-admin"');
        return problem(
          reply,
          'unauthorized',
          'Send Authorization: Bearer <admin token> (ONCEFLOW_ADMIN_TOKEN).',
        );
      }
    });

    app.setErrorHandler((err: FastifyError & { validation?: unknown[] }, request, reply) => {
      if (isOpsError(err)) {
        const kind: AdminProblem = err.code satisfies OpsErrorCode;
        if (err.retryAfterMs !== undefined)
          void reply.header('retry-after', String(Math.ceil(err.retryAfterMs / 1000)));
        return problem(reply, kind, err.message);
      }
      if (Array.isArray(err.validation)) {
        const errors = err.validation.slice(0, 20).map((v) => {
          const issue = v as { instancePath?: string; message?: string };
          return { pointer: issue.instancePath ?? '', message: issue.message ?? 'is invalid' };
        });
        return problem(
          reply,
          'invalid_input',
          `The request ${err.validationContext ?? 'body'} does not match the schema.`,
          {
            errors,
          },
        );
      }
      const status = typeof err.statusCode === 'number' ? err.statusCode : 500;
      if (status >= 400 && status < 500)
        return problem(reply, 'invalid_input', 'The request could not be processed.');
      log.error('admin route failed', { ...errorFields(err), url: request.routeOptions.url });
      return problem(
        reply,
        'internal',
        'Something went wrong; the audit log shows whether anything was changed.',
      );
    });

    const security = [{ bearer: [] }];
    const tags = ['admin'];

    app.get(
      '/admin/operations',
      {
        schema: {
          summary: 'List operations by state and age',
          tags,
          security,
          querystring: Type.Object({
            state: Type.Optional(State),
            olderThanSeconds: Type.Optional(Type.Number({ minimum: 0, maximum: 315_360_000 })), // 10 years
            type: Type.Optional(OpType),
            tenant: Type.Optional(Tenant),
            keyPrefix: Type.Optional(visible(255)),
            limit: Type.Optional(Limit),
          }),
        },
      },
      async (request) => {
        const q = request.query;
        const data = await operator.listOperations({
          ...(q.state ? { state: q.state } : {}),
          ...(q.olderThanSeconds !== undefined ? { olderThanSeconds: q.olderThanSeconds } : {}),
          ...(q.type ? { operationType: q.type } : {}),
          ...(q.tenant ? { tenantId: q.tenant } : {}),
          ...(q.keyPrefix ? { keyPrefix: q.keyPrefix } : {}),
          ...(q.limit ? { limit: q.limit } : {}),
        });
        return { data: data.map(({ ownerToken: _omit, ...rest }) => rest) };
      },
    );

    app.get(
      '/admin/operation',
      {
        schema: {
          summary: "One operation's whole story: record, provider view, workflow, Temporal UI link, audit",
          tags,
          security,
          querystring: Type.Object({ tenant: Tenant, type: OpType, key: Key }),
        },
      },
      async (request) => {
        const { tenant, type, key } = request.query;
        const story = await operator.showOperation({ tenantId: tenant, operationType: type, key });
        const { ownerToken: _omit, ...record } = story.record;
        return { ...story, record };
      },
    );

    app.post(
      '/admin/operations/reconcile',
      {
        schema: {
          summary: 'Reconcile one operation now (ask the provider by the downstream key)',
          tags,
          security,
          body: Type.Object(
            { tenant: Tenant, type: OpType, key: Key, actor: Actor, reason: Type.Optional(Reason) },
            { additionalProperties: false },
          ),
        },
      },
      async (request) => {
        const b = request.body;
        const r = await operator.reconcileNow(
          { tenantId: b.tenant, operationType: b.type, key: b.key },
          { actor: b.actor, source: 'api', ...(b.reason ? { reason: b.reason } : {}) },
        );
        return {
          changed: r.changed,
          before: r.before.state,
          after: r.after.state,
          auditId: r.audit.id,
          ...(r.error ? { error: r.error } : {}),
        };
      },
    );

    app.post(
      '/admin/operations/resolve',
      {
        schema: {
          summary:
            'Resolve an unknown outcome as succeeded or failed (reason required); signals the workflow',
          tags,
          security,
          body: Type.Object(
            {
              tenant: Tenant,
              type: OpType,
              key: Key,
              outcome: Type.Union([Type.Literal('succeeded'), Type.Literal('failed')]),
              actor: Actor,
              reason: Reason,
              chargeId: Type.Optional(visible(255, "The provider's charge ID, if known")),
              providerRef: Type.Optional(
                visible(255, "The provider's object ID (charge or message), if known"),
              ),
            },
            { additionalProperties: false },
          ),
        },
      },
      async (request) => {
        const b = request.body;
        const r = await operator.resolveUnknown(
          { tenantId: b.tenant, operationType: b.type, key: b.key },
          b.outcome,
          {
            actor: b.actor,
            reason: b.reason,
            source: 'api',
            ...(b.chargeId ? { chargeId: b.chargeId } : {}),
            ...(b.providerRef ? { providerRef: b.providerRef } : {}),
          },
        );
        return {
          before: r.before.state,
          after: r.after.state,
          auditId: r.audit.id,
          workflowId: r.workflowId,
          signalled: r.signalled,
          ...(r.signalError ? { signalError: r.signalError } : {}),
        };
      },
    );

    app.post(
      '/admin/orders/:tenant/:id/redrive',
      {
        schema: {
          summary: 'Re-drive a parked order (reason required); refused (409) unless its workflow is parked',
          tags,
          security,
          params: Type.Object({ tenant: Tenant, id: visible(100, 'Order ID') }),
          body: Type.Object({ actor: Actor, reason: Reason }, { additionalProperties: false }),
        },
      },
      async (request) => {
        const r = await operator.redrive(request.params.tenant, request.params.id, {
          actor: request.body.actor,
          reason: request.body.reason,
          source: 'api',
        });
        return {
          workflowId: r.workflowId,
          status: r.order.status,
          auditId: r.audit.id,
          parkedAs: r.accepted,
          temporalUiUrl: operator.temporalUiUrl(r.workflowId),
        };
      },
    );

    app.get(
      '/admin/attention',
      {
        schema: {
          summary: 'Orders in needs_attention, with their last error',
          tags,
          security,
          querystring: Type.Object({ tenant: Type.Optional(Tenant), limit: Type.Optional(Limit) }),
        },
      },
      async (request) => {
        const { items, visibilityError } = await operator.listAttentionDetailed({
          ...(request.query.tenant ? { tenantId: request.query.tenant } : {}),
          ...(request.query.limit ? { limit: request.query.limit } : {}),
        });
        return { data: items, ...(visibilityError ? { visibilityError } : {}) };
      },
    );

    app.get(
      '/admin/audit',
      {
        schema: {
          summary: 'The audit log, newest first',
          tags,
          security,
          querystring: Type.Object({
            key: Type.Optional(Key),
            tenant: Type.Optional(Tenant),
            workflowId: Type.Optional(visible(255)),
            limit: Type.Optional(Limit),
          }),
        },
      },
      async (request) => {
        const q = request.query;
        return {
          data: await operator.auditLog({
            ...(q.key ? { operationKey: q.key } : {}),
            ...(q.tenant ? { tenantId: q.tenant } : {}),
            ...(q.workflowId ? { workflowId: q.workflowId } : {}),
            ...(q.limit ? { limit: q.limit } : {}),
          }),
        };
      },
    );
  };
}
