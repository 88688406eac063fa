/**
 * Admin routes: the operator's recovery path over HTTP, the same actions as
 * the CLI (src/cli/ops.ts) through the same Operator service. Authenticated
 * by an admin credential, never by a tenant API key:
 *
 * - a named operator's token (`npm run ops -- operator add NAME`, table
 *   `operators`): the audit actor is that name;
 * - the shared bootstrap token (ONCEFLOW_ADMIN_TOKEN): the audit actor is
 *   always `admin-token`.
 *
 * The actor comes from the credential only. A request body's `actor` is
 * accepted for older clients and ignored. Failed attempts are throttled per
 * client address, before any token is compared or looked up. Errors are
 * application/problem+json (RFC 9457) through the API's one implementation
 * (src/http/problems.ts); the types are listed in docs/OPERATIONS.md.
 *
 * Keys contain slashes (`order/acme/ord_1/charge`), so an operation is named
 * by query parameters or body fields, never by a path segment.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { Type, type FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyRequest } from 'fastify';
import { PUBLISHED_CREDENTIALS, estimateEntropyBits } from '../config/credentials.ts';
import type { Pool, Queryable } from '../db/index.ts';
import { FailureThrottle } from '../http/failure-throttle.ts';
import type { ActorCredential } from '../audit/sql.ts';
import { OPERATOR_TOKEN_PREFIX, findActiveOperatorByTokenHash, hashOperatorToken } from './accounts-sql.ts';
import { ProblemError, sendProblem, toProblem, type ProblemKind } from '../http/problems.ts';
import { strictValidatorCompiler } from '../http/validation.ts';
import {
  RATE_LIMIT_HEADERS,
  RETRY_AFTER_HEADER,
  always,
  jsonResponse,
  problemResponse,
} from '../http/openapi.ts';
import {
  AdminOrderView,
  AttentionList,
  AuditActionName,
  AuditLog,
  OperationList,
  OperationStory,
  RedriveOutcome,
  RefundRedriveOutcome,
  ReconcileOutcome,
  RedrivePreview,
  ResolveOutcome,
  UNAVAILABLE,
} from './schemas.ts';
import { isOpsError, type OpsErrorCode } from './errors.ts';
import type { Operator } from './operator.ts';
import { registerWebhookAdminRoutes } from './webhook-routes.ts';

/** Each operator error code as one of the API's documented problems (src/http/problems.ts). */
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
  /** The shared bootstrap token (ONCEFLOW_ADMIN_TOKEN). */
  adminToken: string;
  /** Where named operators' token hashes are looked up (src/operator/accounts-sql.ts). */
  operators: Queryable;
  /** Failed admin authentications per client address per window before 429 (default 10 per minute). */
  authFailure?: { max: number; windowMs: number };
  /** The merchant webhook routes (src/operator/webhook-routes.ts): the pool, and where redeliveries start. */
  webhooks?: { pool: Pool; taskQueue: string };
}

/** The audit actor recorded for the shared token: fixed, so nobody holding it can write another name. */
const ADMIN_TOKEN_ACTOR = 'admin-token';

/** Who an authenticated admin request acts as, from its credential. */
interface AdminIdentity {
  actor: string;
  actorCredential: Exclude<ActorCredential, 'self_declared'>;
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
/** Older clients sent who they were; the audit actor now comes from the credential, so this is ignored. */
const Actor = Type.String({
  minLength: 1,
  maxLength: 200,
  pattern: '^[^\\x00]*$',
  deprecated: true,
  description:
    "Ignored. The audit log records the actor from the credential: a named operator's token gives its " +
    "name, the shared admin token gives 'admin-token'.",
});
const Reason = text(1000, 'Why (required for decisions), recorded in the audit log');
const Limit = Type.Integer({ minimum: 1, maximum: 1000 });
const State = Type.Union([
  Type.Literal('in_progress'),
  Type.Literal('unknown'),
  Type.Literal('succeeded'),
  Type.Literal('failed'),
]);

const digest = (s: string) => createHash('sha256').update(s, 'utf8').digest();

const MIN_ADMIN_TOKEN_BITS = 128;

export function opsRoutes(opts: OpsRoutesOptions): FastifyPluginAsyncTypebox {
  // loadConfig refuses weak explicit tokens, and published ones where exposed; this catches other callers.
  // The published local values pass here: config only hands them out where nothing else can reach the API.
  const published = (PUBLISHED_CREDENTIALS.adminToken.published as readonly string[]).includes(
    opts.adminToken,
  );
  if (
    typeof opts.adminToken !== 'string' ||
    (!published && estimateEntropyBits(opts.adminToken) < MIN_ADMIN_TOKEN_BITS)
  ) {
    throw new Error(`opsRoutes: adminToken must carry at least ${MIN_ADMIN_TOKEN_BITS} bits of entropy`);
  }
  // Comparing fixed-length digests keeps the comparison constant-time, including in the token's length.
  const expected = digest(opts.adminToken);
  const { operator } = opts;
  const throttle = new FailureThrottle({
    max: opts.authFailure?.max ?? 10,
    windowMs: opts.authFailure?.windowMs ?? 60_000,
  });
  const identities = new WeakMap<FastifyRequest, AdminIdentity>();
  /** Set by the onRequest hook on every request that reaches a handler. */
  const who = (request: FastifyRequest): AdminIdentity => {
    const identity = identities.get(request);
    if (!identity) throw new Error('admin request without an identity');
    return identity;
  };

  const authenticate = async (token: string): Promise<AdminIdentity | null> => {
    if (timingSafeEqual(digest(token), expected)) {
      return { actor: ADMIN_TOKEN_ACTOR, actorCredential: 'admin_token' };
    }
    if (!token.startsWith(OPERATOR_TOKEN_PREFIX)) return null;
    // Looked up on every request, never cached: a revoked token stops at once.
    const name = await findActiveOperatorByTokenHash(opts.operators, hashOperatorToken(token));
    return name === null ? null : { actor: name, actorCredential: 'operator_token' };
  };

  return async (app) => {
    app.setValidatorCompiler(strictValidatorCompiler);

    // Before the rate limiter and every handler: a throttled address gets 429 with no token compared
    // and no lookup, so guessing costs the guesser time and costs us nothing.
    app.addHook('onRequest', async (request) => {
      const wait = throttle.retryAfterSeconds(request.ip);
      if (wait > 0) {
        throw new ProblemError(
          'rateLimited',
          `Too many requests with a missing or invalid admin credential from this address; retry in ${wait} s.`,
          {},
          { 'retry-after': String(wait) },
        );
      }
      // Counted before the lookup and taken back on success: concurrent guesses from one address
      // cannot all pass the check above while the first ones are still being looked up.
      throttle.fail(request.ip);
      const header = request.headers.authorization;
      const m = typeof header === 'string' ? ADMIN_BEARER.exec(header) : null;
      let identity: AdminIdentity | null;
      try {
        identity = m ? await authenticate(m[1]!) : null;
      } catch (err) {
        throttle.forgive(request.ip); // the database failed, not the credential
        throw err;
      }
      if (!identity) {
        throw new ProblemError(
          'adminUnauthorized',
          "Send Authorization: Bearer <admin credential> (a named operator's token, or ONCEFLOW_ADMIN_TOKEN).",
          {},
          { 'www-authenticate': 'Bearer realm="onceflow-admin"' },
        );
      }
      throttle.forgive(request.ip);
      identities.set(request, identity);
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

    // Documented in /openapi.json under their own scheme: the admin token, never a tenant API key.
    // The document shows their shape only; every call still needs the token.
    const security = [{ adminToken: [] }];
    const tags = ['admin'];
    const ok = (description: string, schema: Parameters<typeof jsonResponse>[1]) =>
      jsonResponse(description, schema, RATE_LIMIT_HEADERS);
    const errors = {
      400: problemResponse('A parameter or body field is not valid', RATE_LIMIT_HEADERS),
      401: problemResponse('Missing, wrong or revoked admin credential (admin-unauthorized)'),
      429: problemResponse('Rate limited, or too many failed admin credentials; retry after Retry-After', {
        ...always(RETRY_AFTER_HEADER),
        ...RATE_LIMIT_HEADERS,
      }),
      503: UNAVAILABLE,
    };
    const notFound = { 404: problemResponse('No such operation or order', RATE_LIMIT_HEADERS) };
    const refused = {
      409: problemResponse(
        'Not in a state this action applies to (operation-state), or a live attempt holds it (operation-in-progress, with Retry-After)',
        { ...RETRY_AFTER_HEADER, ...RATE_LIMIT_HEADERS },
      ),
      503: { ...UNAVAILABLE, description: 'The provider or Temporal is unavailable; nothing was changed' },
    };

    app.get(
      '/admin/operations',
      {
        schema: {
          operationId: 'listOperations',
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
          response: { 200: ok('Operations, oldest first', OperationList), ...errors },
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
          operationId: 'getOperation',
          summary: "One operation's whole story: record, provider view, workflow, Temporal UI link, audit",
          tags,
          security,
          querystring: Type.Object({ tenant: Tenant, type: OpType, key: Key }),
          response: { 200: ok("The operation's story", OperationStory), ...errors, ...notFound },
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
          operationId: 'reconcileOperation',
          summary: 'Reconcile one operation now (ask the provider by the downstream key)',
          tags,
          security,
          body: Type.Object(
            {
              tenant: Tenant,
              type: OpType,
              key: Key,
              actor: Type.Optional(Actor),
              reason: Type.Optional(Reason),
            },
            { additionalProperties: false, title: 'ReconcileRequest' },
          ),
          response: {
            200: ok('What the reconcile did', ReconcileOutcome),
            ...errors,
            ...notFound,
            ...refused,
          },
        },
      },
      async (request) => {
        const b = request.body;
        const r = await operator.reconcileNow(
          { tenantId: b.tenant, operationType: b.type, key: b.key },
          { ...who(request), source: 'api', reason: b.reason },
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
          operationId: 'resolveOperation',
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
              actor: Type.Optional(Actor),
              reason: Reason,
              chargeId: Type.Optional(visible(255, "The provider's charge ID, if known")),
              providerRef: Type.Optional(
                visible(255, "The provider's object ID (charge or message), if known"),
              ),
            },
            { additionalProperties: false, title: 'ResolveRequest' },
          ),
          response: { 200: ok('The resolution', ResolveOutcome), ...errors, ...notFound, ...refused },
        },
      },
      async (request) => {
        const b = request.body;
        const r = await operator.resolveUnknown(
          { tenantId: b.tenant, operationType: b.type, key: b.key },
          b.outcome,
          {
            ...who(request),
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
          operationId: 'redriveOrder',
          summary: 'Re-drive a parked order (reason required); refused (409) unless its workflow is parked',
          tags,
          security,
          params: Type.Object({ tenant: Tenant, id: visible(100, 'Order ID') }),
          body: Type.Object(
            { actor: Type.Optional(Actor), reason: Reason },
            { additionalProperties: false, title: 'RedriveRequest' },
          ),
          response: {
            200: ok('The workflow took the re-drive', RedriveOutcome),
            ...errors,
            ...notFound,
            ...refused,
          },
        },
      },
      async (request) => {
        // What the console previews is what is enforced: a step past its provider's key window
        // refuses the re-drive (reconcile or resolve it first).
        const preview = await operator.redrivePreview(request.params.tenant, request.params.id);
        if (!preview.allowed) throw new ProblemError('operationState', preview.refusal!);
        const r = await operator.redrive(request.params.tenant, request.params.id, {
          ...who(request),
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

    const orderParams = Type.Object({ tenant: Tenant, id: visible(100, 'Order ID') });

    app.get(
      '/admin/orders/:tenant/:id',
      {
        schema: {
          operationId: 'getAdminOrder',
          summary: "One order for an operator: its step records with the provider's key window left",
          tags,
          security,
          params: orderParams,
          response: {
            200: ok('The order and its steps, oldest first', AdminOrderView),
            ...errors,
            ...notFound,
          },
        },
      },
      async (request) => operator.orderView(request.params.tenant, request.params.id),
    );

    app.get(
      '/admin/orders/:tenant/:id/redrive-preview',
      {
        schema: {
          operationId: 'previewRedrive',
          summary: 'What a re-drive would do to each provider step, before doing it',
          tags,
          security,
          params: orderParams,
          response: {
            200: ok('Each step: replay, run, wait, reconcile first, or refused', RedrivePreview),
            ...errors,
            ...notFound,
          },
        },
      },
      async (request) => operator.redrivePreview(request.params.tenant, request.params.id),
    );

    app.post(
      '/admin/refunds/:tenant/:id/redrive',
      {
        schema: {
          operationId: 'redriveRefund',
          summary: 'Re-drive a parked refund (reason required); refused (409) unless its workflow is parked',
          tags,
          security,
          params: Type.Object({ tenant: Tenant, id: visible(100, 'Refund ID') }),
          body: Type.Object(
            { actor: Type.Optional(Actor), reason: Reason },
            { additionalProperties: false, title: 'RefundRedriveRequest' },
          ),
          response: {
            200: ok('The refund workflow took the re-drive', RefundRedriveOutcome),
            ...errors,
            404: problemResponse('No such refund', RATE_LIMIT_HEADERS),
            ...refused,
          },
        },
      },
      async (request) => {
        const r = await operator.redriveRefund(request.params.tenant, request.params.id, {
          ...who(request),
          reason: request.body.reason,
          source: 'api',
        });
        return {
          workflowId: r.workflowId,
          refundId: r.refund.refundId,
          orderId: r.refund.orderId,
          status: r.refund.status,
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
          operationId: 'listAttention',
          summary:
            'Orders in needs_attention, and refunds in refund_unknown or needs_attention, with their last error',
          tags,
          security,
          querystring: Type.Object({ tenant: Type.Optional(Tenant), limit: Type.Optional(Limit) }),
          response: { 200: ok('Orders that need an operator', AttentionList), ...errors },
        },
      },
      async (request) => {
        const query = { tenantId: request.query.tenant, limit: request.query.limit };
        const [{ items, visibilityError }, refunds] = await Promise.all([
          operator.listAttentionDetailed(query),
          operator.listRefundAttention(query),
        ]);
        return { data: items, refunds, visibilityError };
      },
    );

    app.get(
      '/admin/audit',
      {
        schema: {
          operationId: 'listAudit',
          summary: 'The audit log, newest first',
          tags,
          security,
          querystring: Type.Object({
            key: Type.Optional(Key),
            tenant: Type.Optional(Tenant),
            workflowId: Type.Optional(visible(255)),
            actor: Type.Optional(
              text(200, "Only this actor: an operator's name, 'admin-token', or a CLI user"),
            ),
            action: Type.Optional(Type.Union(AuditActionName.anyOf, { description: 'Only this action' })),
            q: Type.Optional(
              text(
                200,
                'Only entries with this text in the reason, operation key or workflow ID (case ignored)',
              ),
            ),
            limit: Type.Optional(Limit),
          }),
          response: { 200: ok('Audit entries, newest first', AuditLog), ...errors },
        },
      },
      async (request) => {
        const q = request.query;
        return {
          data: await operator.auditLog({
            operationKey: q.key,
            tenantId: q.tenant,
            workflowId: q.workflowId,
            actor: q.actor,
            action: q.action,
            text: q.q,
            limit: q.limit,
          }),
        };
      },
    );

    if (opts.webhooks) registerWebhookAdminRoutes(app, { ...opts.webhooks, who, errors, tags, security });
  };
}
