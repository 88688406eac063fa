/**
 * Response schemas of the admin routes (src/operator/routes.ts), for the OpenAPI
 * document only: responses are sent as built, never serialised through them.
 * Each has a `title`, so the document names it (components/schemas/<title>,
 * see nameSchemas in src/api/app.ts). They describe what the Operator
 * returns (src/operator/operator.ts); the contract test (test/api/contract.test.ts)
 * checks real answers against them.
 */
import { Type } from '@fastify/type-provider-typebox';
import { RATE_LIMIT_HEADERS, RETRY_AFTER_HEADER, problemResponse } from '../http/openapi.ts';

/**
 * Any admin route, while Postgres or Temporal can't be reached or does not answer within its bound:
 * 503 `unavailable` (src/http/problems.ts; docs/DEPLOYING.md "Postgres timeouts"). Retry-After comes
 * with an unreachable dependency; an operator action that fails part-way may answer without it.
 */
export const UNAVAILABLE = problemResponse(
  'Postgres or Temporal did not answer in time (unavailable); retry after Retry-After when it is sent',
  { ...RETRY_AFTER_HEADER, ...RATE_LIMIT_HEADERS },
);

const DateTime = Type.String({ format: 'date-time' });
const Nullable = <T extends ReturnType<typeof Type.String>>(t: T) => Type.Union([t, Type.Null()]);
const Str = Type.String();
const OperationState = Type.Union(
  [Type.Literal('in_progress'), Type.Literal('unknown'), Type.Literal('succeeded'), Type.Literal('failed')],
  { title: 'OperationState' },
);

const recordFields = {
  tenantId: Str,
  operationType: Str,
  key: Str,
  fingerprint: Str,
  schemaVersion: Type.Integer(),
  state: OperationState,
  leaseExpiresAt: Nullable(DateTime),
  attempts: Type.Integer(),
  downstreamKey: Nullable(Str),
  providerRef: Nullable(Str),
  result: Type.Unknown({ description: 'The stored outcome (for failed, the failure body), or null' }),
  error: Type.Unknown({ description: 'Why the outcome became unknown (latest reason), or null' }),
  createdAt: DateTime,
  updatedAt: DateTime,
  completedAt: Nullable(DateTime),
};

/** A ledger record as the admin routes show it: without its owner (fencing) token. */
const OperationRecord = Type.Object(recordFields, { title: 'OperationRecord' });

const OperationListItem = Type.Object(
  {
    ...recordFields,
    ageSeconds: Type.Number(),
    workflowId: Nullable(Str),
  },
  { title: 'OperationListItem' },
);

export const OperationList = Type.Object({ data: Type.Array(OperationListItem) }, { title: 'OperationList' });

/** Every action the audit log records (src/audit/sql.ts); also the audit route's `action` filter. */
export const AuditActionName = Type.Union([
  Type.Literal('reconcile'),
  Type.Literal('resolve'),
  Type.Literal('redrive'),
  Type.Literal('redrive_requested'),
  Type.Literal('redrive_refused'),
  Type.Literal('redrive_unknown'),
  Type.Literal('restore'),
  Type.Literal('webhook_redeliver'),
]);

const AuditEntry = Type.Object(
  {
    id: Type.String({ description: 'The audit row ID (bigserial, as a string)' }),
    createdAt: DateTime,
    actor: Str,
    source: Type.Union([Type.Literal('cli'), Type.Literal('api')]),
    actorCredential: Type.Union(
      [Type.Literal('operator_token'), Type.Literal('admin_token'), Type.Literal('self_declared')],
      {
        description:
          "How the actor was established: a named operator's token (actor = its name), the shared admin " +
          "token (actor = 'admin-token'), or self-declared (the CLI's --actor or OS user, and rows before 0016)",
      },
    ),
    action: AuditActionName,
    reason: Nullable(Str),
    tenantId: Str,
    operationType: Nullable(Str),
    operationKey: Nullable(Str),
    workflowId: Nullable(Str),
    before: Type.Unknown(),
    after: Type.Unknown(),
  },
  { title: 'AuditEntry' },
);

export const AuditLog = Type.Object({ data: Type.Array(AuditEntry) }, { title: 'AuditLog' });

const ProviderView = Type.Object(
  {
    provider: Type.Union([Type.Literal('payments'), Type.Literal('email'), Type.Null()]),
    lookedUpBy: Nullable(Str),
    found: Type.Boolean(),
    object: Type.Unknown({ description: "The provider's charge or message as it reports it now, or null" }),
    error: Type.Optional(Str),
  },
  { title: 'ProviderView' },
);

const orderFields = {
  tenantId: Str,
  orderId: Str,
  workflowId: Str,
  status: Str,
  statusSeq: Type.Integer(),
  amount: Type.Integer(),
  currency: Str,
  chargeId: Nullable(Str),
  receiptId: Nullable(Str),
  lastError: Nullable(Str),
  reason: Nullable(Str),
  createdAt: DateTime,
  updatedAt: DateTime,
};

const AdminOrder = Type.Object(orderFields, { title: 'AdminOrder' });

export const OperationStory = Type.Object(
  {
    record: OperationRecord,
    downstreamKey: Nullable(Str),
    provider: ProviderView,
    workflowId: Nullable(Str),
    temporalUiUrl: Nullable(Str),
    order: Type.Union([AdminOrder, Type.Null()]),
    audit: Type.Array(AuditEntry),
  },
  { title: 'OperationStory' },
);

export const ReconcileOutcome = Type.Object(
  {
    changed: Type.Boolean(),
    before: OperationState,
    after: OperationState,
    auditId: Str,
    error: Type.Optional(Str),
  },
  { title: 'ReconcileOutcome' },
);

export const ResolveOutcome = Type.Object(
  {
    before: OperationState,
    after: OperationState,
    auditId: Str,
    workflowId: Nullable(Str),
    signalled: Type.Boolean(),
    signalError: Type.Optional(Str),
  },
  { title: 'ResolveOutcome' },
);

export const RedriveOutcome = Type.Object(
  {
    workflowId: Str,
    status: Str,
    auditId: Str,
    parkedAs: Type.Object(
      {
        status: Str,
        reason: Nullable(Str),
        lastError: Nullable(Str),
        redrives: Type.Integer(),
      },
      { title: 'RedriveParkedAs' },
    ),
    temporalUiUrl: Str,
  },
  { title: 'RedriveOutcome' },
);

export const RefundRedriveOutcome = Type.Object(
  {
    workflowId: Str,
    refundId: Str,
    orderId: Str,
    status: Str,
    auditId: Str,
    parkedAs: Type.Object(
      {
        status: Str,
        lastError: Nullable(Str),
        redrives: Type.Integer(),
      },
      { title: 'RefundRedriveParkedAs' },
    ),
    temporalUiUrl: Str,
  },
  { title: 'RefundRedriveOutcome' },
);

const RefundAttentionItem = Type.Object(
  {
    kind: Type.Literal('refund'),
    tenantId: Str,
    orderId: Str,
    refundId: Str,
    workflowId: Str,
    status: Str,
    amount: Type.Integer(),
    currency: Str,
    lastError: Nullable(Str),
    updatedAt: DateTime,
    temporalUiUrl: Str,
    operationKey: Type.String({
      description:
        "The provider refund step's operation key (type payment.refund), for reconcile and resolve",
    }),
  },
  { title: 'RefundAttentionItem' },
);

const AttentionItem = Type.Object(
  {
    ...orderFields,
    temporalUiUrl: Str,
    source: Type.Union([Type.Literal('order_row'), Type.Literal('workflow')]),
  },
  { title: 'AttentionItem' },
);

export const AttentionList = Type.Object(
  {
    data: Type.Array(AttentionItem),
    refunds: Type.Array(RefundAttentionItem, {
      description: 'Refunds in refund_unknown (being reconciled) or needs_attention, oldest update first',
    }),
    visibilityError: Type.Optional(
      Type.String({ description: 'Set when Temporal visibility could not be read' }),
    ),
  },
  { title: 'AttentionList' },
);

const StepView = Type.Object(
  {
    ...recordFields,
    keyWindowLeftMs: Type.Union([Type.Integer(), Type.Null()], {
      description: "How much of the provider's idempotency-key window is left (null: no provider keys)",
    }),
  },
  { title: 'AdminOrderStep' },
);

export const AdminOrderView = Type.Object(
  { order: AdminOrder, temporalUiUrl: Str, steps: Type.Array(StepView) },
  { title: 'AdminOrderView' },
);

export const RedrivePreview = Type.Object(
  {
    allowed: Type.Boolean(),
    refusal: Nullable(Str),
    steps: Type.Array(
      Type.Object(
        {
          name: Str,
          operationType: Str,
          key: Str,
          state: Type.Union([OperationState, Type.Literal('none')]),
          effect: Type.Union([
            Type.Literal('run'),
            Type.Literal('replay'),
            Type.Literal('wait'),
            Type.Literal('reconcile_first'),
            Type.Literal('refused_past_window'),
          ]),
          explanation: Str,
          keyWindowLeftMs: Type.Union([Type.Integer(), Type.Null()]),
        },
        { title: 'RedrivePreviewStep' },
      ),
    ),
  },
  { title: 'RedrivePreview' },
);
