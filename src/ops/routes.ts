/**
 * Admin routes: the operator's recovery path over HTTP, the same actions as
 * the CLI (scripts/ops.ts) through the same Operator service. Authenticated
 * by a separate admin bearer token (ONCEFLOW_ADMIN_TOKEN), never by a tenant
 * API key. Errors are application/problem+json (RFC 9457) through the API's
 * one implementation (src/api/problems.ts); the types are listed in
 * docs/OPERATIONS.md.
 *
 * Keys contain slashes (`order/acme/ord_1/charge`), so an operation is named
 * by query parameters or body fields, never by a path segment.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { Type, type FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { ProblemError, sendProblem, toProblem, type ProblemKind } from '../api/problems.ts';
import { strictValidatorCompiler } from '../api/validation.ts';
import { isOpsError, type OpsErrorCode } from './errors.ts';
import type { Operator } from './operator.ts';

/** Each operator error code as one of the API's documented problems (src/api/problems.ts). */
const OPS_PROBLEMS: Record<OpsErrorCode, ProblemKind> = {
  invalid_input: 'invalidRequest',
  not_found: 'notFound',
  invalid_state: 'operationState',
  in_progress: 'operationInProgress',
  unavailable: 'unavailable',
};

function opsProblem(err: unknown): ProblemError | undefined {
  if (!isOpsError(err)) return undefined;
  const headers: Record<string, string> =
    err.retryAfterMs !== undefined ? { 'retry-after': String(Math.ceil(err.retryAfterMs / 1000)) } : {};
  return new ProblemError(OPS_PROBLEMS[err.code], err.message, {}, headers);
}

/** The scheme name is case-insensitive (RFC 9110 §11.1), as for tenant API keys. */
const ADMIN_BEARER = /^Bearer ([\x21-\x7e]{1,512})$/i;

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
    app.setValidatorCompiler(strictValidatorCompiler);

    app.addHook('onRequest', async (request) => {
      const header = request.headers.authorization;
      const m = typeof header === 'string' ? ADMIN_BEARER.exec(header) : null;
      if (!m || !timingSafeEqual(digest(m[1]!), expected)) {
        throw new ProblemError(
          'adminUnauthorized',
          'Send Authorization: Bearer <admin token> (ONCEFLOW_ADMIN_TOKEN).',
          {},
          { 'www-authenticate': 'Bearer realm="onceflow-admin"' },
        );
      }
    });

    app.setErrorHandler((err, request, reply) =>
      sendProblem(
        reply,
        toProblem(err, request, {
          domain: opsProblem,
          internalDetail: 'Something went wrong; the audit log shows whether anything was changed.',
        }),
      ),
    );

    const security = [{ bearer: [] }];
    const tags = ['admin'];
    // Not in the public OpenAPI document (/openapi.json, /docs): it is served without authentication,
    // and the admin surface is documented for operators in docs/OPERATIONS.md instead.
    const hide = true;

    app.get(
      '/admin/operations',
      {
        schema: {
          summary: 'List operations by state and age',
          tags,
          security,
          hide,
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
          state: q.state,
          olderThanSeconds: q.olderThanSeconds,
          operationType: q.type,
          tenantId: q.tenant,
          keyPrefix: q.keyPrefix,
          limit: q.limit,
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
          hide,
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
          hide,
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
          { actor: b.actor, source: 'api', reason: b.reason },
        );
        return {
          changed: r.changed,
          before: r.before.state,
          after: r.after.state,
          auditId: r.audit.id,
          error: r.error,
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
          hide,
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
            chargeId: b.chargeId,
            providerRef: b.providerRef,
          },
        );
        return {
          before: r.before.state,
          after: r.after.state,
          auditId: r.audit.id,
          workflowId: r.workflowId,
          signalled: r.signalled,
          signalError: r.signalError,
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
          hide,
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
          hide,
          querystring: Type.Object({ tenant: Type.Optional(Tenant), limit: Type.Optional(Limit) }),
        },
      },
      async (request) => {
        const { items, visibilityError } = await operator.listAttentionDetailed({
          tenantId: request.query.tenant,
          limit: request.query.limit,
        });
        return { data: items, visibilityError };
      },
    );

    app.get(
      '/admin/audit',
      {
        schema: {
          summary: 'The audit log, newest first',
          tags,
          security,
          hide,
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
            operationKey: q.key,
            tenantId: q.tenant,
            workflowId: q.workflowId,
            limit: q.limit,
          }),
        };
      },
    );
  };
}
